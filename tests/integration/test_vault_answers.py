"""What Mnemo does when what answers at the vault's address does not answer as Vault does:
a path Vault would have (the mount list, a key) answered 404 or 400, a 200 page that is
not Vault's JSON, a CA bundle that cannot be read. Every one is the vault failing: a coded
503 (VAULT_UNAVAILABLE) on the API, never a 500, and at a process's start a configuration
error naming MNEMO_VAULT_ADDR. The stand-in here is no Vault on purpose: it is the proxy or
the other service an operator's wrong address reaches."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import hvac
import pytest
from fastapi.testclient import TestClient
from mnemo_gateway.app import create_app
from tests.support import headers_for, install_keys

from mnemo.adapters.clocks import FixedClock
from mnemo.adapters.vault_key_vault import VaultKeyVault
from mnemo.bootstrap import build_embedded, check_vault_token
from mnemo.domain.errors import InvalidInput, MnemoError
from mnemo.settings import GatewaySettings, MnemoSettings

ANSWERS = {
    "404": (404, "application/json", b'{"errors":[]}'),
    "400": (400, "application/json", b'{"errors":["bad request"]}'),
    "page": (200, "text/html", b"<html>sign in</html>"),
    "json-without-data": (200, "application/json", b'{"ok":true}'),
}
TOKEN = "hvs.not-a-real-token-0123456789"


@pytest.fixture(params=sorted(ANSWERS))
def impostor(request: pytest.FixtureRequest) -> Iterator[str]:
    code, kind, body = ANSWERS[request.param]

    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            self.send_response(code)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            self._any()

        def do_POST(self) -> None:
            self._any()

        def do_PUT(self) -> None:
            self._any()

        def do_DELETE(self) -> None:
            self._any()

        def do_LIST(self) -> None:  # hvac lists with Vault's LIST method
            self._any()

        def log_message(self, *args: object) -> None:
            return None

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


def _code(call: object) -> str:
    assert callable(call)
    with pytest.raises(MnemoError) as caught:
        call()
    assert TOKEN not in str(caught.value)
    return caught.value.code


def test_every_key_vault_call_is_a_coded_unavailable(impostor: str) -> None:
    vault = VaultKeyVault(impostor, TOKEN, timeout=2)
    wrapped = b"vault:v1:" + b"A" * 44
    calls = {
        "data_key": lambda: vault.data_key("tenant:acme"),
        "unwrap": lambda: vault.unwrap("tenant:acme", wrapped),
        "rewrap": lambda: vault.rewrap("tenant:acme", wrapped),
        "search_key": lambda: vault.search_key("tenant:acme"),
        "rotate": lambda: vault.rotate("tenant:acme"),
        "destroy": lambda: vault.destroy("tenant:acme"),
        "has_key": lambda: vault.has_key("tenant:acme"),
        "is_destroyed": lambda: vault.is_destroyed("tenant:acme"),
    }
    codes = {name: _code(call) for name, call in calls.items()}
    assert set(codes.values()) == {"VAULT_UNAVAILABLE"}, codes
    vault.connection.close()


def test_the_api_answers_503_not_500(impostor: str, tmp_path: Path) -> None:
    vault = VaultKeyVault(impostor, TOKEN, timeout=2)
    platform = build_embedded(
        MnemoSettings(data_dir=tmp_path / "data", embedder="hashing"),
        clock=FixedClock(datetime(2026, 11, 30, 12, tzinfo=UTC)),
        vault=vault,
    )
    install_keys(platform, "acme")
    try:
        app = create_app(platform, GatewaySettings(wait_timeout=5))
        with TestClient(app, raise_server_exceptions=False) as client:
            event = {
                "type": "ObservationRecorded",
                "schema_version": 2,
                "stream": "user:u1",
                "payload": {"text": "remember my size is L"},
            }
            published = client.post("/v1/events", json=event, headers=headers_for("acme"))
            searched = client.post(
                "/v1/search",
                json={"query": "size", "subjects": ["user:u1"]},
                headers=headers_for("acme"),
            )
        for answer in (published, searched):
            assert answer.status_code == 503, answer.text
            assert answer.json()["error"]["code"] == "VAULT_UNAVAILABLE"
            assert TOKEN not in answer.text
    finally:
        platform.close()


def test_a_start_on_an_address_that_is_no_vault_names_the_setting(impostor: str) -> None:
    settings = MnemoSettings(vault_addr=impostor, vault_token=TOKEN)
    with pytest.raises(InvalidInput) as caught:
        check_vault_token(settings)
    assert caught.value.code == "VAULT_ADDR_NOT_VAULT"
    assert caught.value.field == "vault_addr"
    assert "MNEMO_VAULT_ADDR" in caught.value.message
    assert TOKEN not in caught.value.message


def test_a_ca_bundle_that_cannot_be_read_is_a_coded_unavailable(tmp_path: Path) -> None:
    client = hvac.Client(url="https://127.0.0.1:9", token=TOKEN, verify=str(tmp_path / "no.pem"))
    vault = VaultKeyVault("https://127.0.0.1:9", TOKEN, timeout=2, client=client)
    assert _code(lambda: vault.data_key("tenant:acme")) == "VAULT_UNAVAILABLE"
    assert _code(lambda: vault.unwrap("tenant:acme", b"vault:v1:" + b"A" * 44)) == (
        "VAULT_UNAVAILABLE"
    )
