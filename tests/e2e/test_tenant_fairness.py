"""Issue 16, finding 10: one tenant's 1,000-event batch delayed another tenant's
`wait=registered` past its timeout. The consumers now let tenants take turns, so a small
tenant's event waits for at most one step's share of the big tenant's backlog.

The runner is held (its step lock) while both batches reach the log, so the first step
sees the whole scene whatever the machine's speed: the assertions are on what each step
handled, not on clocks."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from mnemo_gateway.app import create_app
from tests.support import headers_for

from mnemo.bootstrap import Platform
from mnemo.service.runner import CONSUMERS
from mnemo.settings import GatewaySettings

BIG = headers_for("acme", "agent")
SMALL = headers_for("globex", "agent")


@pytest.fixture
def client(platform: Platform) -> Iterator[TestClient]:
    # the gateway caps a request's ?timeout= at its wait_timeout: let the 60 s asked for hold
    with TestClient(create_app(platform, GatewaySettings(wait_timeout=60))) as c:
        yield c


def _declared(stream: str, n: int) -> dict[str, Any]:
    return {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": stream,
        "payload": {"memory": {"type": "fact", "content": f"fact number {n} of the backlog"}},
    }


def _registered(platform: Platform, tenant: str, event_ids: list[str]) -> int:
    outcomes = (platform.store.outcome(tenant, e) for e in event_ids)
    return sum(1 for found in outcomes if any(o.kind.value == "registered" for o in found))


def test_a_big_tenants_backlog_does_not_hold_back_another_tenants_wait(
    client: TestClient, platform: Platform
) -> None:
    runner = platform.runner
    # (globex registered?, how many of acme's were registered) after each runner step
    steps: list[tuple[bool, int]] = []
    big_ids: list[str] = []
    small_ids: list[str] = []

    def seen() -> None:
        steps.append(
            (
                _registered(platform, "globex", small_ids) == 1,
                _registered(platform, "acme", big_ids),
            )
        )

    answer: dict[str, httpx.Response] = {}

    def publish_small() -> None:
        answer["small"] = client.post(
            "/v1/events?wait=registered&timeout=60", json=_declared("user:B1", 0), headers=SMALL
        )

    with runner._step_lock:  # the runner finishes its step in flight, then waits here
        events = [_declared(f"user:A{n % 4}", n) for n in range(1_000)]
        big = client.post("/v1/events", json={"events": events}, headers=BIG)
        assert big.status_code == 202, big.text
        big_ids.extend(a["event_id"] for a in big.json()["accepted"])
        waiting = threading.Thread(target=publish_small, daemon=True)
        waiting.start()
        while not (found := platform.log.read_tenant("globex", 0, 1)):  # poll for the append
            waiting.join(0.01)
        small_ids.append(found[0].envelope.event_id)
        runner.on_progress.append(seen)
    waiting.join(120)
    assert not waiting.is_alive()

    r = answer["small"]
    assert r.status_code == 202, r.text
    assert r.json()["complete"] is True
    assert r.json()["accepted"][0]["outcomes"][0]["outcome"] == "registered"

    # the backlog is still handled whole, each stream in order, each event once
    head = -1
    while head != platform.log.head():  # until what the registrar emitted is handled too
        head = platform.log.head()
        for consumer in CONSUMERS:
            assert runner.wait_for(consumer, head, 120), consumer
    # globex's event was registered before acme's backlog: in the runner's first step
    # with both in the log, next to at most one step's share of acme's events
    first = next(step for step in steps if step[0])
    assert first[1] < runner.batch_size, steps
    assert _registered(platform, "acme", big_ids) == 1_000
    for headers, streams in ((BIG, 4), (SMALL, 1)):
        audit = client.get("/v1/insights/audit", headers=headers)
        assert audit.status_code == 200, audit.text
        assert (audit.json()["status"], audit.json()["pending"]) == ("intact", 0), audit.text
        assert audit.json()["streams"] == streams
    listed = client.get("/v1/subjects/user:A1/memories", params={"limit": 500}, headers=BIG)
    assert listed.status_code == 200, listed.text
    assert len(listed.json()["memories"]) == 250
