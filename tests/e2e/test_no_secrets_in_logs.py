"""No secret reaches a log line: a realistic session (a tenant made by the operator, keys
issued and revoked, publishing, reading, searching, contexts, MCP, and failures of every
kind) runs with every logger at DEBUG, and each captured line is scanned for the API keys,
the operator token and a secret planted in a memory. `mnemo serve` is checked the same way
on its log stream (stderr): its first-start key goes to the terminal only."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.support import auth, free_port, running_server, wait_healthy

from mnemo.domain.access import parse_key
from mnemo.settings import GatewaySettings

OPERATOR = "operator-token-9f8e7d6c5b4a"
SERVE = [sys.executable, "-m", "mnemo", "serve"]
PLANTED = "PLANTED-SECRET 4111-1111-1111-1111 cvv 737"


class Capture(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@pytest.fixture
def captured() -> Iterator[Capture]:
    """Every logger at DEBUG, every record into one handler: on the root logger, and on
    each logger that does not pass its records up (uvicorn's own logging set-up, made by
    an earlier server in this process, stops its loggers from propagating)."""
    handler = Capture()
    root = logging.getLogger()
    for name in ("uvicorn", "uvicorn.access", "uvicorn.error", "mnemo", "mnemo.gateway"):
        logging.getLogger(name)  # exists from here on, so it is set to DEBUG below too
    loggers = [logging.getLogger(name) for name in list(root.manager.loggerDict)]
    levels = [(logger, logger.level) for logger in loggers]
    apart = [logger for logger in loggers if not logger.propagate]
    previous = root.level
    for target in (root, *apart):
        target.addHandler(handler)
    root.setLevel(logging.DEBUG)
    for logger in loggers:
        logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        for target in (root, *apart):
            target.removeHandler(handler)
        root.setLevel(previous)
        for logger, level in levels:
            logger.setLevel(level)


def secret_of(text: str) -> str:
    """The secret part of an API key (43 URL-safe characters, which may hold `_`
    themselves), or the text itself when it is no key."""
    parsed = parse_key(text)
    return parsed[1] if parsed else text


def observe(content: str) -> dict[str, object]:
    return {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": "user:U1",
        "payload": {"memory": {"type": "fact", "content": content, "tags": ["card"]}},
    }


def test_a_session_logs_no_secret(tmp_path: Path, captured: Capture) -> None:
    secrets: list[str] = [OPERATOR, PLANTED, "4111-1111-1111-1111"]
    gateway = GatewaySettings(admin_token=OPERATOR, rate_key_burst=40, rate_key_per_second=0.01)
    with (
        running_server(tmp_path / "data", gateway, log_level="debug") as (url, _),
        httpx.Client(base_url=url, timeout=30) as http,
    ):
        op = {"X-Mnemo-Admin-Token": OPERATOR}
        admin = http.post("/v1/admin/tenants", json={"tenant": "logco"}, headers=op).json()["key"]
        secrets.append(admin)
        made = http.post(
            "/v1/tenants/logco/keys",
            json={"name": "agent", "scopes": ["memory:write", "memory:read", "context"]},
            headers=auth(admin),
        ).json()
        agent = made["key"]
        secrets.append(agent)
        me = auth(agent)
        assert http.post("/v1/events?wait=indexed", json=observe(PLANTED), headers=me).is_success
        assert http.get("/v1/subjects/user:U1/memories", headers=me).is_success
        assert http.post("/v1/search", json={"query": "card"}, headers=me).is_success
        assert http.post("/v1/context", json={"subjects": ["user:U1"]}, headers=me).is_success
        mcp = http.post(
            "/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={**me, "Accept": "application/json, text/event-stream"},
        )
        assert mcp.status_code < 500
        # failures: a wrong secret, keys in the URL, a key in a bad body, the wrong scope
        wrong = agent[:-6] + "ABCDEF"
        secrets.append(wrong)
        assert http.get("/v1/whoami", headers=auth(wrong)).status_code == 401
        assert http.get(f"/v1/whoami?api_key={agent}", headers=me).status_code == 400
        assert http.get(f"/healthz?token={agent}").status_code == 200
        assert http.get(f"/v1/whoami?admin_token={OPERATOR}").status_code in (400, 401)
        assert http.get("/v1/whoami", headers={"Authorization": agent}).status_code == 401
        bad = http.post(
            "/v1/events",
            content=f'{{"type": "{agent}", "payload": {{"text": "{PLANTED}"'.encode(),
            headers={**me, "Content-Type": "application/json"},
        )
        assert bad.status_code == 400
        assert agent not in bad.text
        assert http.get("/v1/admin/status", headers=me).status_code == 403
        assert http.post("/v1/admin/rebuild", headers={"X-Mnemo-Admin-Token": agent}).is_error
        # revoke, then use the revoked key
        revoked = http.delete(f"/v1/tenants/logco/keys/{made['key_id']}", headers=auth(admin))
        assert revoked.is_success
        assert http.get("/v1/whoami", headers=me).status_code == 401
        # rate limited answers
        statuses = {http.get("/v1/whoami", headers=auth(admin)).status_code for _ in range(60)}
        assert 429 in statuses
    # the test's own HTTP client logs the URLs it sends, the bad ones on purpose: those
    # lines are the client's, not Mnemo's (the SDK never puts a key in a URL)
    lines = [
        line
        for line in captured.lines
        if not (
            line.startswith("httpx ")
            and any(q in line for q in ("?api_key=", "?token=", "?admin_token="))
        )
    ]
    assert any("GET /v1/whoami" in line for line in lines), "access logs were not captured"
    assert len(lines) > 20
    for secret in secrets:
        for part in {secret, secret_of(secret)}:
            leaked = [line for line in lines if part in line]
            assert leaked == [], f"a secret is in {len(leaked)} log lines: {leaked[:2]}"


def test_mnemo_serve_prints_its_first_key_to_the_terminal_only(tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "MNEMO_EMBEDDER": "hashing", "MNEMO_LOG_LEVEL": "DEBUG"}
    process = subprocess.Popen(
        [*SERVE, "--port", str(port), "--data-dir", str(tmp_path / "data")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        assert process.stdout is not None
        shown: list[str] = []
        for line in process.stdout:
            shown.append(line)
            if line.startswith("Mnemo listening"):
                break
        keys = [w for line in shown for w in line.split() if w.startswith("mnemo_")]
        assert len(keys) == 1, shown
        key = keys[0]
        wait_healthy(url, lambda: process.poll() is None)
        assert httpx.get(f"{url}/v1/whoami", headers=auth(key)).json()["tenant"] == "default"
        assert httpx.get(f"{url}/v1/whoami?api_key={key}").status_code == 400
        assert httpx.get(f"{url}/v1/whoami", headers=auth(key[:-1] + "x")).status_code == 401
        # a key pasted where an id goes is refused as a credential in the URL, unrepeated
        misplaced = httpx.get(f"{url}/v1/memories/{key}", headers=auth(key))
        assert misplaced.status_code == 400
        assert misplaced.json()["error"]["code"] == "CREDENTIAL_IN_URL"
        assert secret_of(key) not in misplaced.text
        long_id = httpx.get(f"{url}/v1/events/{'e' * 3000}/outcome", headers=auth(key))
        assert long_id.status_code in (400, 404)
        assert "e" * 200 not in long_id.text
        # a document's file name is sealed in the log: its request line does not show it
        stored = httpx.post(
            f"{url}/v1/documents?subject=user:d1&filename=contract_13912345678_wang.txt",
            content=b"Contract A-1\nParty A: Foo Ltd\n",
            headers=auth(key),
        )
        assert stored.status_code in (200, 202), stored.text
        # a memory's key and tags are kept as keyed hashes: their request lines hide them
        listed = httpx.get(
            f"{url}/v1/subjects/user:d1/memories?tag=hiv-positive&key=diagnosis.hiv",
            headers=auth(key),
        )
        assert listed.status_code == 200, listed.text
        history = httpx.get(f"{url}/v1/subjects/user:d1/history/diagnosis.hiv", headers=auth(key))
        assert history.status_code == 200, history.text
    finally:
        process.send_signal(signal.SIGINT)
        rest, errors = process.communicate(timeout=60)
    # uvicorn writes access lines to stdout, everything else to stderr: both are log streams
    logged = rest + errors
    assert "GET /v1/whoami" in logged  # the access log was on
    assert "whoami?api_key=[redacted]" in logged  # the refused request, logged without the key
    assert "filename=[redacted]" in logged
    assert "13912345678" not in logged
    assert "/history/[redacted]" in logged
    assert "hiv" not in logged
    assert key not in logged
    assert secret_of(key) not in logged


def test_mcp_calls_log_no_key_and_no_file_name(tmp_path: Path, captured: Capture) -> None:
    """The MCP endpoint calls the API in process through httpx, whose logger printed each
    URL: a document's file name (sealed in the log, cut out of the access log) stood there
    in clear, and so did a key pasted as a memory id, which the MCP server's own logger
    repeated in the resource's failure."""
    filename = "Zhang-San-settlement-7731.md"
    gateway = GatewaySettings(admin_token=OPERATOR)
    with (
        running_server(tmp_path / "data", gateway, log_level="debug") as (url, _),
        httpx.Client(base_url=url, timeout=30) as http,
    ):
        op = {"X-Mnemo-Admin-Token": OPERATOR}
        admin = http.post("/v1/admin/tenants", json={"tenant": "mcplog"}, headers=op).json()["key"]
        headers = {**auth(admin), "Accept": "application/json, text/event-stream"}

        def call(method: str, params: dict[str, object]) -> httpx.Response:
            message = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
            return http.post("/mcp", json=message, headers=headers)

        ingest = {"filename": filename, "subject": "user:U1", "text": "a short note"}
        done = call("tools/call", {"name": "ingest_document", "arguments": ingest})
        assert done.status_code == 200, done.text
        assert "document_id" in done.text, done.text
        missing = call("resources/read", {"uri": f"mnemo://memories/{admin}"})
        assert missing.status_code == 200, missing.text
        unknown = call("tools/call", {"name": admin, "arguments": {}})
        assert unknown.status_code == 200, unknown.text
    lines = captured.lines
    assert any("POST /mcp" in line for line in lines), "access logs were not captured"
    assert any("/v1/documents" in line for line in lines), "httpx's lines were not captured"
    failed = [line for line in lines if "failed" in line.lower() and "mnemo://" in line]
    assert failed, "the MCP server's failure lines were not captured"
    for secret in (filename, admin, secret_of(admin)):
        leaked = [line for line in lines if secret in line]
        assert leaked == [], f"{secret[:12]}… is in {len(leaked)} log lines: {leaked[:2]}"
