"""The distributed status page (`mnemo status`, /v1/admin/status) on a real Kafka and
Cassandra: each component's /readyz and each backing service's health, read again on
every call, with one HTTP client for every probe."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from tests.distributed_support import distributed_settings, running_distributed
from tests.support import answer_json, headers_for, install_keys

from mnemo.bootstrap import Platform
from mnemo.entrypoints.admin import distributed_status

OPERATOR = "status-operator-token-0123"


class Component:
    """A worker's health port: /readyz answers `status` (200 ready, 503 fenced)."""

    def __init__(self, port: int = 0) -> None:
        self.code = 200
        self.calls = 0
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.calls += 1
                body = b'{"status": "fenced"}' if outer.code == 503 else b'{"status": "ready"}'
                answer_json(self, outer.code, body)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.port = self.server.server_address[1]
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    with running_distributed(distributed_settings(tmp_path / "data", partitions=2)) as built:
        yield built


def test_every_status_call_probes_each_component_again(platform: Platform) -> None:
    registrar, indexer = Component(), Component()
    gone = Component()
    gone_port = gone.port
    gone.stop()
    components = (
        f"registrar=http://127.0.0.1:{registrar.port},indexer=http://127.0.0.1:{indexer.port},"
        f"decay=http://127.0.0.1:{gone_port}"
    )
    try:
        first = distributed_status(platform, components)
        assert first["components"] == {
            "gateway": "ready",
            "registrar": "ready",
            "indexer": "ready",
            "decay": "unreachable",
        }
        assert first["consumers_running"] is False
        assert first["services"]["kafka"] == first["services"]["cassandra"] == "ready"
        indexer.code = 503  # fenced now: the next call sees it, nothing is remembered
        second = distributed_status(platform, components)
        assert second["components"]["indexer"] == "fenced"
        assert second["components"]["registrar"] == "ready"
        # a component restarted on its port between two calls is reached again
        port = registrar.port
        registrar.stop()
        assert distributed_status(platform, components)["components"]["registrar"] == (
            "unreachable"
        )
        registrar = Component(port)
        assert distributed_status(platform, components)["components"]["registrar"] == "ready"
        assert indexer.calls == 4
    finally:
        registrar.stop()
        indexer.stop()


def test_the_gateways_readiness_claims_no_consumers_it_does_not_run(platform: Platform) -> None:
    """In the distributed mode the gateway runs no consumer and probes none for /readyz:
    it said `consumers_running: true` even with every consumer stopped and its lag
    growing. Their health is each one's own /readyz, gathered by `mnemo status`."""
    from fastapi.testclient import TestClient
    from mnemo_gateway.app import create_app

    from mnemo.settings import GatewaySettings

    with TestClient(create_app(platform, GatewaySettings(), run_consumers=False)) as client:
        answer = client.get("/readyz")
    assert answer.status_code == 200
    checks = answer.json()["checks"]
    assert "consumers_running" not in checks
    assert set(checks["lag"]) == {"registrar", "indexer", "decay", "audit"}


def test_a_tenants_admin_key_sees_health_and_lag_not_the_platform(platform: Platform) -> None:
    """The log's size, its dead letters and the processes holding partitions tell of the
    other tenants' traffic and of the machines: the operator's, not a tenant admin's; the
    unauthenticated /readyz does not say when the log last grew either."""
    from fastapi.testclient import TestClient
    from mnemo_gateway.app import create_app

    from mnemo.settings import GatewaySettings

    install_keys(platform, "acme")
    settings = GatewaySettings(admin_token=OPERATOR, components="")
    with TestClient(create_app(platform, settings, run_consumers=False)) as client:
        tenant = client.get("/v1/admin/status", headers=headers_for("acme", "ops"))
        operator = client.get("/v1/admin/status", headers={"X-Mnemo-Admin-Token": OPERATOR})
        ready = client.get("/readyz")
    assert tenant.status_code == operator.status_code == 200, (tenant.text, operator.text)
    seen = tenant.json()
    assert set(seen["lag"]) == {"registrar", "indexer", "decay", "audit"}
    assert {"topic", "log_head", "dead_letters", "holders", "counts"}.isdisjoint(seen), seen
    assert {"topic", "log_head", "dead_letters", "counts"} <= set(operator.json())
    assert ready.status_code == 200
    assert "log_head" not in ready.json()["checks"]
    assert ready.json()["checks"]["log"] == "ok"
