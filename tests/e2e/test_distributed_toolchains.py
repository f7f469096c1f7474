"""Toolchains in the distributed mode (gateway and consumers as processes on Kafka,
Cassandra and OpenBao): a payment chain fails at step two; the registrar is SIGKILLed while
the next step is published; once it is back the chain continues at the failed step, step
one recorded once; a chain with a short TTL is expired by the decay consumer."""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from tests.e2e.test_distributed import Deployment, deployment  # noqa: F401 - a fixture

PLAN = ["create_order", "payment_link", "confirm_payment"]
STREAM = "user:U77"


def poll(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def step(d: Deployment, toolchain_id: str, step_id: str, body: dict[str, Any]) -> Any:
    return d.http.post(f"/v1/toolchains/{toolchain_id}/steps/{step_id}", json=body)


def stream_types(d: Deployment) -> list[str]:
    events = d.http.get(f"/v1/subjects/{STREAM}/events").json()["events"]
    return [e["type"] for e in events]


def test_a_chain_resumes_after_the_registrar_is_killed_and_expires_at_its_ttl(
    deployment: Deployment,  # noqa: F811
) -> None:
    d = deployment
    body = {"toolchain_id": "pay-d1", "subject": STREAM, "steps": PLAN}
    r = d.http.post("/v1/toolchains", json=body)
    assert r.status_code == 201, r.text
    r = step(d, "pay-d1", "create_order", {"status": "completed", "output": {"order": "O-1"}})
    assert r.status_code == 201, r.text
    error = {"type": "unavailable", "reason": "PSP down", "retryable": True}
    assert (
        step(d, "pay-d1", "payment_link", {"status": "failed", "error": error}).status_code == 201
    )

    # the registrar dies; the retried step two is published straight to the log meanwhile
    d.stack.kill("registrar")
    raw = {
        "type": "ToolchainStepCompleted",
        "schema_version": 1,
        "stream": STREAM,
        "payload": {"toolchain_id": "pay-d1", "step_id": "payment_link", "output": '{"url":"u1"}'},
    }
    assert d.http.post("/v1/events", json=raw).status_code == 202
    assert d.http.get("/v1/toolchains/pay-d1").json()["next_step"] == "payment_link"
    d.stack.start("registrar")
    d.stack.wait_ready(["registrar"], timeout=180)

    def moved_on() -> bool:
        return d.http.get("/v1/toolchains/pay-d1").json()["next_step"] == "confirm_payment"

    poll(moved_on, 180, "the restarted registrar to record step two")
    # a device that did not see the answer retries steps one and two: duplicates
    again = step(d, "pay-d1", "create_order", {"status": "completed", "output": {"order": "O-1"}})
    assert again.status_code == 200
    assert again.json()["duplicate"] is True
    conflict = step(
        d, "pay-d1", "create_order", {"status": "completed", "output": {"order": "O-2"}}
    )
    assert (conflict.status_code, conflict.json()["error"]["code"]) == (409, "STEP_CONFLICT")
    final = step(d, "pay-d1", "confirm_payment", {"status": "completed", "output": {"paid": True}})
    assert final.status_code == 201, final.text
    state = final.json()
    assert state["status"] == "completed"
    assert [x["step_id"] for x in state["done"]] == PLAN
    assert state["done"][0]["output"] == {"order": "O-1"}
    assert stream_types(d).count("ToolchainStepCompleted") == 3

    # a short chain expires at its TTL, decided by the decay consumer
    short = {"toolchain_id": "pay-d2", "subject": STREAM, "steps": PLAN, "ttl_seconds": 2}
    started = d.http.post("/v1/toolchains", json=short).json()
    expires = datetime.fromisoformat(started["expires_at"])
    before = (expires - timedelta(microseconds=1)).isoformat()
    url = "/v1/toolchains/pay-d2"
    assert d.http.get(url, params={"as_of": before}).json()["status"] == "running"
    poll(lambda: "ToolchainExpired" in stream_types(d), 120, "the expiry decision")
    assert d.http.get(url).json()["status"] == "expired"
    late = step(d, "pay-d2", "create_order", {"status": "completed", "output": 1})
    assert (late.status_code, late.json()["error"]["code"]) == (409, "TOOLCHAIN_EXPIRED")
