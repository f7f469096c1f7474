"""Test support: a real Mnemo server (embedded platform, gateway, uvicorn) on a free
loopback port, in a thread, for tests that talk to it over real HTTP; and API keys.

`fixed_key(tenant)` is a fixed, well-formed key for a tenant, so a test module can name its
headers at import time; `install_keys(platform, ...)` makes those keys valid on a platform
(creating the tenants), with the platform's own pepper. `grant()` issues a real key."""

from __future__ import annotations

import base64
import hashlib
import importlib.util
import os
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any, NoReturn

import httpx
import pytest
import uvicorn
from mnemo_gateway.app import create_app

from mnemo.adapters.memory_key_vault import InMemoryKeyVault
from mnemo.bootstrap import Platform, build_embedded, key_pepper
from mnemo.domain.access import ALL_SCOPES, ApiKey, Scope, format_key, key_digest, parse_key
from mnemo.domain.errors import ConflictError
from mnemo.domain.events import Envelope
from mnemo.domain.projection import AuditRecord
from mnemo.handlers import audit
from mnemo.ports import Blinder, KeyVault, MemoryStore
from mnemo.sealing import KeyCache
from mnemo.service.sealing import TenantBlinder
from mnemo.settings import GatewaySettings, MnemoSettings

__all__ = [
    "TEST_TENANTS",
    "audit_trails",
    "auth",
    "fixed_key",
    "free_port",
    "grant",
    "headers_for",
    "install_keys",
    "missing",
    "qdrant_server_url",
    "running_server",
    "stack_module",
    "verify_trails",
    "wait_healthy",
]

ALL = tuple(s.value for s in ALL_SCOPES)
# tenants whose fixed keys the shared fixtures (the `platform` fixture, running_server) install
# the blind indexes of stores built by tests: one vault for the process, so that a store
# opened again over the same keyspace finds what an earlier one wrote
BLINDER: Blinder = TenantBlinder(KeyCache(InMemoryKeyVault(), ttl=3600.0))

TEST_TENANTS = ("acme", "globex", "mallory", "crash", "default")


def fixed_key(tenant: str, label: str = "all") -> str:
    """A fixed key for a tenant (and a label, for several keys of one tenant)."""
    seed = f"{tenant}\x1f{label}".encode()
    key_id = hashlib.sha256(b"id:" + seed).hexdigest()[:16]
    secret = base64.urlsafe_b64encode(hashlib.sha256(b"secret:" + seed).digest())
    return format_key(key_id, secret.rstrip(b"=").decode())


def auth(key: str, principal: str | None = None) -> dict[str, str]:
    """The headers that present a key (and a principal, when given)."""
    headers = {"Authorization": f"Bearer {key}"}
    if principal is not None:
        headers["X-Mnemo-Principal"] = principal
    return headers


def headers_for(tenant: str, principal: str | None = None, label: str = "all") -> dict[str, str]:
    return auth(fixed_key(tenant, label), principal)


def install_keys(
    platform: Platform,
    *tenants: str,
    label: str = "all",
    scopes: tuple[str, ...] = ALL,
    expires_at: datetime | None = None,
) -> None:
    """Make fixed_key(tenant, label) valid on the platform for each tenant (created when
    missing), with the given scopes. Installing the same key again changes nothing."""
    pepper = key_pepper(platform.settings)
    now = platform.access.clock.now()
    for tenant in tenants:
        with suppress(ConflictError):
            platform.access.create_tenant(tenant, by="test")
        parsed = parse_key(fixed_key(tenant, label))
        assert parsed is not None
        key_id, secret = parsed
        salt = hashlib.sha256(key_id.encode()).hexdigest()[:32]
        record = ApiKey(
            key_id=key_id,
            tenant=tenant,
            name=f"test-{label}",
            scopes=tuple(Scope(s) for s in scopes),
            salt=salt,
            digest=key_digest(pepper, salt, secret),
            created_at=now,
            created_by="test",
            expires_at=expires_at,
        )
        with suppress(ConflictError):
            platform.access.store.add_key(record)


def grant(
    platform: Platform, tenant: str, scopes: tuple[str, ...] = ALL, name: str = "test"
) -> str:
    """A freshly issued key of a tenant (created when missing)."""
    with suppress(ConflictError):
        platform.access.create_tenant(tenant, by="test")
    return platform.access.issue_key(tenant, name, scopes, by="test").key


def wait_healthy(url: str, alive: Callable[[], bool], timeout: float = 60.0) -> None:
    """Poll /healthz until it answers 200; fail early when the server stopped."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert alive(), "the server stopped before it answered"
        try:
            if httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        threading.Event().wait(0.02)  # the polling interval
    raise AssertionError(f"{url} did not become healthy within {timeout} s")


@contextmanager
def gateway_client(platform: Platform) -> Iterator[Any]:
    """A test client of the gateway over `platform` (consumers running, waits up to 60 s);
    the platform is closed afterwards."""
    from fastapi.testclient import TestClient

    try:
        with TestClient(create_app(platform, GatewaySettings(wait_timeout=60))) as client:
            yield client
    finally:
        platform.close()


def embedded_platform(data: Path, clock: Any, *tenants: str, **settings: Any) -> Platform:
    """An embedded platform on `data` with the hashing embedder and keys for `tenants`."""
    built = build_embedded(
        MnemoSettings(data_dir=data, embedder="hashing", sqlite_synchronous="NORMAL", **settings),
        clock=clock,
    )
    install_keys(built, *tenants)
    return built


@contextmanager
def running_server(
    data: Path,
    gateway: GatewaySettings | None = None,
    *,
    log_level: str = "warning",
    vault: KeyVault | None = None,
) -> Iterator[tuple[str, Platform]]:
    """A server on its own data directory; yields (base URL, platform) and stops it after.
    `vault` replaces the development key file (e.g. a Vault transit adapter). Unless
    `gateway` says otherwise, a `?wait=` waits up to 60 s, as in `gateway_client`."""
    platform = build_embedded(
        MnemoSettings(data_dir=data, embedder="hashing", sqlite_synchronous="NORMAL"),
        vault=vault,
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    config = uvicorn.Config(
        create_app(platform, gateway or GatewaySettings(wait_timeout=60)),
        host="127.0.0.1",
        port=port,
        log_level=log_level,
        log_config=None,  # uvicorn's records go to the root logger, where tests can see them
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    install_keys(platform, *TEST_TENANTS)
    try:
        wait_healthy(url, thread.is_alive)
        yield url, platform
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
        platform.close()


def audit_trails(store: MemoryStore, tenant: str) -> dict[str, list[AuditRecord]]:
    """Every audit chain of a tenant, by stream, each link in order."""
    return {
        head.stream: store.audit_trail(tenant, head.stream, 0, head.n)
        for head in store.audit_heads(tenant)
    }


def verify_trails(
    trails: dict[str, list[AuditRecord]], events: dict[str, Envelope]
) -> dict[str, int]:
    """The streams whose chain is broken, with the first broken link (empty: all hold)."""
    broken = {stream: audit.verify(trail, events) for stream, trail in trails.items()}
    return {stream: n for stream, n in broken.items() if n is not None}


_START = {
    "Qdrant": "infra/services.py up qdrant",
    "OpenBao": "infra/services.py up openbao",
    "Cassandra": "infra/services.py up cassandra",
    "Kafka": "infra/services.py up kafka",
}


def missing(what: str, reason: str, *, module_level: bool = False) -> NoReturn:
    """A service or tool a test needs is absent: a skip on a developer machine, a failure
    under CI (CI=true), where `make test` provides everything."""
    if os.environ.get("CI") == "true":
        pytest.fail(f"{what} is required under CI: {reason}")
    start = f"; start it: {_START[what]}" if what in _START else ""
    pytest.skip(f"{what} is not available ({reason}){start}", allow_module_level=module_level)


def answer_json(handler: BaseHTTPRequestHandler, code: int, body: bytes) -> None:
    """A stand-in health endpoint's answer: `body` as JSON with status `code`."""
    handler.send_response(code)
    handler.send_header("Content-Type", "application/json")
    handler.send_header("Content-Length", str(len(body)))
    handler.end_headers()
    handler.wfile.write(body)


SERVICES_ENV = Path(__file__).resolve().parents[1] / "var" / "run" / "services.env"


def services_env_value(name: str) -> str | None:
    """A setting from the environment, else from the address file infra/services.py writes
    (var/run/services.env), else None."""
    value = os.environ.get(name, "").strip()
    if value:
        return value
    if SERVICES_ENV.is_file():
        for line in SERVICES_ENV.read_text(encoding="utf-8").splitlines():
            key, sep, found = line.partition("=")
            if sep and key.strip() == name and found.strip():
                return found.strip()
    return None


def qdrant_server_url() -> str:
    """The Qdrant server's URL: MNEMO_QDRANT_URL, else var/run/services.env (written by
    `infra/services.py up qdrant`, which `make test` runs). The server must answer
    /readyz; when it does not, the test is skipped on a developer machine and fails
    under CI."""
    url = services_env_value("MNEMO_QDRANT_URL")
    if url is None:
        missing("Qdrant", "no MNEMO_QDRANT_URL and none in var/run/services.env")
    try:
        ready = httpx.get(f"{url.rstrip('/')}/readyz", timeout=5.0)
    except httpx.HTTPError as exc:
        missing("Qdrant", f"nothing answers at {url} ({type(exc).__name__})")
    if ready.status_code != 200:
        missing("Qdrant", f"{url}/readyz answered {ready.status_code}")
    return url


def stack_module() -> Any:
    """infra/stack.py as a module (it is a script, not part of a package)."""
    spec = importlib.util.spec_from_file_location(
        "mnemo_stack", Path(__file__).resolve().parents[1] / "infra" / "stack.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = sys.modules.get(spec.name) or importlib.util.module_from_spec(spec)
    if spec.name not in sys.modules:
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return module


def free_port() -> int:
    """A port for a server a test starts (and may kill and start again) on 127.0.0.1:
    infra/stack.py's, outside the range outgoing connections take their ports from."""
    return int(stack_module().free_port())


def refused_start(module: str, *args: str, env: dict[str, str], timeout: float = 180.0) -> str:
    """Run `python -m module args` with `env` (and this checkout's PYTHONPATH, where the
    caller named one), expect a configuration error (exit status 78, no traceback), and
    return what it printed."""
    import subprocess

    env = dict(env)
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    done = subprocess.run(
        [sys.executable, "-m", module, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    output = done.stdout + done.stderr
    assert done.returncode == 78, output
    assert "Traceback" not in output
    return output
