"""The console's views of the latest events and of rejections in the distributed mode, on
a real Kafka broker, Cassandra node and OpenBao. The archive's positions are microseconds,
not consecutive offsets: a view that paged back by offsets saw only the last instant of
the log, and nothing at all once another tenant had written after this one."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.distributed_support import Pump, distributed_settings, running_distributed
from tests.integration.test_missed_memories import observation

from mnemo.bootstrap import Platform
from mnemo.service.app import RequestContext
from mnemo.service.insights import Insights

ACME = RequestContext("acme", "agent")
GLOBEX = RequestContext("globex", "agent")
SETTLED_WITHIN = 60.0  # seconds, on a loaded machine


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    with running_distributed(distributed_settings(tmp_path / "data")) as built:
        yield built


def declared(content: str) -> dict[str, Any]:
    return {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": "user:U2",
        "payload": {"memory": {"type": "fact", "content": content}},
    }


def test_the_latest_events_and_the_rejections_are_the_tenants_own(platform: Platform) -> None:
    pump = Pump(platform)
    texts = ["记住这个，下次要用", "actually, make it XL", "remember my size is L"]
    said = platform.app.publish(ACME, [observation(t) for t in texts]).accepted
    facts = platform.app.publish(ACME, [declared(f"fact number {i}") for i in range(3)]).accepted
    pump.drain()
    # another tenant writes last: the views must not look only near the log's head
    platform.app.publish(GLOBEX, [declared("globex's own fact")])
    pump.drain()
    insights = Insights(platform.log, platform.store, platform.app.clock)
    published = {a.event_id for a in [*said, *facts]}
    deadline = time.monotonic() + SETTLED_WITHIN
    while True:
        page = insights.events(ACME, types=["ObservationRecorded", "MemoryDeclared"])
        if {e.envelope.event_id for e in page.events} == published:
            break
        assert time.monotonic() < deadline, [e.envelope.event_id for e in page.events]
        time.sleep(0.2)
    assert page.complete is True
    offsets = [e.offset for e in page.events]
    assert offsets == sorted(offsets)
    assert all(e.envelope.tenant == "acme" for e in page.events)
    # `next` tails from the tenant's own newest event, not from the log's head
    everything = insights.events(ACME)
    assert everything.next == everything.events[-1].offset
    later = platform.app.publish(ACME, [declared("a later fact")]).accepted[0]
    pump.drain()
    deadline = time.monotonic() + SETTLED_WITHIN
    while True:
        tail = insights.events(ACME, after_offset=everything.next, types=["MemoryDeclared"])
        if tail.events:
            break
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert [e.envelope.event_id for e in tail.events] == [later.event_id]

    rejections = insights.rejections(ACME)
    assert rejections.complete is True
    listed = [(r.event.envelope.event_id, r.reason_code) for r in rejections.rejections]
    assert listed == [
        (said[1].event_id, "TARGET_NOT_FOUND"),
        (said[0].event_id, "REQUEST_NOT_UNDERSTOOD"),
    ]
    assert insights.rejections(GLOBEX).rejections == []
