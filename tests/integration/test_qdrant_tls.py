"""The Qdrant server index over HTTPS with an API key, as production runs it (the chart's
`qdrant.tls.caSecret` and `qdrant.apiKey`): against the second local Qdrant server, which
only speaks TLS with the development CA's certificate and requires a key (qdrant-tls).
The right CA and key work; the system's CAs, another CA, a wrong key or no key are refused
with a coded error that never shows the key; an unreadable CA file stops the start with
the setting's name."""

from __future__ import annotations

import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from tests.support import answer_json, missing, refused_start
from tests.tls_support import TlsServices, rogue_ca, tls_services
from tests.vault_support import vault_settings

from mnemo.bootstrap import check_qdrant_access, make_index
from mnemo.domain.errors import InvalidInput, MnemoError, Unavailable
from mnemo.ports import SparseVector, VectorIndex, VectorPoint
from mnemo.settings import MnemoSettings

DIM = 8


@pytest.fixture(scope="module")
def tls() -> TlsServices:
    return tls_services(qdrant=True)


def settings(tls: TlsServices, **overrides: object) -> MnemoSettings:
    values: dict[str, object] = {
        "qdrant_url": tls.qdrant_url,
        "qdrant_api_key": tls.qdrant_api_key,
        "qdrant_ca_file": tls.ca,
        "qdrant_collection": f"tls_{uuid.uuid4().hex[:10]}",
    }
    values.update(overrides)
    return MnemoSettings(**values)  # type: ignore[arg-type]


def one_point(n: int) -> VectorPoint:
    return VectorPoint(
        memory_id=str(uuid.UUID(int=n + 1)),
        tenant="acme",
        stream="user:u1",
        type="fact",
        scope="shared",
        tags=(),
        vector=[1.0 if i == n % DIM else 0.0 for i in range(DIM)],
        keywords=SparseVector((7,), (1.0,)),
    )


def round_trip(index: VectorIndex) -> None:
    index.upsert([one_point(0), one_point(1)])
    assert sorted(index.ids("acme")) == sorted(one_point(n).memory_id for n in (0, 1))
    hits = index.search("acme", one_point(1).vector, 1)
    assert [memory_id for memory_id, _ in hits][:1] == [one_point(1).memory_id]


def test_the_right_ca_and_key_reach_the_https_server(tls: TlsServices) -> None:
    index = make_index(settings(tls), DIM)
    try:
        round_trip(index)
    finally:
        index.clear()
        index.close()


@pytest.mark.parametrize("wrong", ["system CAs", "another CA", "wrong key", "no key"])
def test_a_wrong_ca_or_key_is_refused_with_a_code_and_no_key(
    tls: TlsServices, tmp_path: Path, wrong: str
) -> None:
    overrides: dict[str, object] = {
        "system CAs": {"qdrant_ca_file": None},
        "another CA": {"qdrant_ca_file": rogue_ca(tmp_path)[0]},
        "wrong key": {"qdrant_api_key": "not-the-" + tls.qdrant_api_key},
        "no key": {"qdrant_api_key": None},
    }[wrong]
    index = make_index(settings(tls, **overrides), DIM)
    try:
        with pytest.raises(MnemoError) as caught:
            round_trip(index)
        assert caught.value.code == "UNAVAILABLE"
        assert tls.qdrant_api_key not in str(caught.value)
    finally:
        index.close()


def test_an_unreadable_ca_file_names_the_setting(tls: TlsServices, tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as caught:
        make_index(settings(tls, qdrant_ca_file=tmp_path / "absent.pem"), DIM)
    assert caught.value.code == "TLS_CONFIG_INVALID"
    assert caught.value.field == "qdrant_ca_file"


def test_a_start_checks_the_key_and_names_the_setting(tls: TlsServices) -> None:
    """What the gateway and the indexer check as they start (check_qdrant_access): a key
    the server refuses stops the start by its setting's name; otherwise the process would
    answer ready and fail every batch and search."""
    check_qdrant_access(settings(tls))  # the right key
    for key in ("not-the-" + tls.qdrant_api_key, None):
        with pytest.raises(InvalidInput) as caught:
            check_qdrant_access(settings(tls, qdrant_api_key=key))
        assert caught.value.code == "QDRANT_API_KEY_REFUSED"
        assert caught.value.field == "qdrant_api_key"
        assert tls.qdrant_api_key not in str(caught.value)


def test_a_start_waits_for_a_server_that_does_not_answer_and_refuses_one_that_is_not_qdrant(
    tls: TlsServices,
) -> None:
    closed = MnemoSettings(qdrant_url="http://127.0.0.1:9")
    with pytest.raises(Unavailable):
        check_qdrant_access(closed)  # retried by the start, like a vault not up yet
    # an HTTP server that is not Qdrant (another service on the port): 404 for everything
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NotQdrant)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        with pytest.raises(InvalidInput) as caught:
            check_qdrant_access(MnemoSettings(qdrant_url=url))
    finally:
        server.shutdown()
        server.server_close()
    assert caught.value.code == "QDRANT_URL_NOT_QDRANT"
    assert caught.value.field == "qdrant_url"


class _NotQdrant(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        answer_json(self, 404, b'{"error": "no such page"}')

    def log_message(self, *args: object) -> None:
        return None


def test_an_indexer_with_a_key_the_server_refuses_does_not_start(
    tls: TlsServices, tmp_path: Path
) -> None:
    """`python -m mnemo_indexer` as the chart starts it, with a wrong Qdrant key: exit
    status 78 and the setting's name, no traceback, not the key, and before it joins a
    consumer group (no Kafka or Cassandra is named here: it stops before either)."""
    addr, token = vault_settings()
    if token is None:
        missing("OpenBao", "no MNEMO_VAULT_TOKEN and no var/run/services.env")
    wrong = "not-the-" + tls.qdrant_api_key
    env = {
        "PATH": "/usr/bin:/bin",
        "MNEMO_DATA_DIR": str(tmp_path),
        "MNEMO_MODE": "distributed",
        "MNEMO_VAULT_ADDR": addr,
        "MNEMO_VAULT_TOKEN": str(token),
        "MNEMO_QDRANT_URL": tls.qdrant_url,
        "MNEMO_QDRANT_API_KEY": wrong,
        "MNEMO_QDRANT_CA_FILE": str(tls.ca),
    }
    output = refused_start("mnemo_indexer", env=env)
    assert "QDRANT_API_KEY_REFUSED" in output
    assert "MNEMO_QDRANT_API_KEY" in output
    assert wrong not in output
