"""The embedded platform as a whole: expiry through the clock, forgetting, rebuilding every
read model from the log, restarts that find everything where it was."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from tests.support import audit_trails, verify_trails

from mnemo.adapters.clocks import FixedClock
from mnemo.bootstrap import Platform
from mnemo.domain.errors import InvalidInput
from mnemo.domain.events import Envelope
from mnemo.domain.ids import new_event_id
from mnemo.domain.memory import Guard, MemoryStatus
from mnemo.domain.rules import RuleSet
from mnemo.entrypoints.admin import platform_checksum, rebuild_read_models
from mnemo.service.app import RequestContext, Wait
from mnemo.service.context import ContextRequest

CTX = RequestContext("acme", "tester")


def obs(text: str, stream: str = "user:U1", **payload: Any) -> dict[str, Any]:
    return {
        "type": "ObservationRecorded",
        "schema_version": 2,
        "stream": stream,
        "payload": {"text": text, **payload},
    }


def declare(stream: str = "user:U1", **memory: Any) -> dict[str, Any]:
    return {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": stream,
        "payload": {"memory": memory},
    }


def test_ttl_expiry_fires_at_the_instant_and_leaves_every_read_model(
    platform: Platform, clock: FixedClock
) -> None:
    app = platform.app
    result = app.publish(
        CTX, [declare(type="context", content="boarding gate B12", ttl_seconds=3600)]
    )
    platform.runner.drain()
    [outcome] = app.outcome(CTX, result.accepted[0].event_id)
    memory_id = outcome.memory_id
    assert memory_id is not None
    assert [h.memory.memory_id for h in app.search(CTX, "boarding gate", streams=["user:U1"])] == [
        memory_id
    ]

    clock.advance(timedelta(seconds=3599))
    platform.runner.drain()
    assert app.get(CTX, memory_id).status is MemoryStatus.ACTIVE
    assert platform.index.ids("acme") == [memory_id]

    clock.advance(timedelta(seconds=1))
    # reads hide it from the instant itself, even before the scan runs
    assert app.search(CTX, "boarding gate", streams=["user:U1"]) == []
    platform.runner.drain()
    assert app.get(CTX, memory_id).status is MemoryStatus.EXPIRED
    assert platform.index.ids("acme") == []
    assert app.list_memories(CTX, "user:U1") == []
    assert [m.memory_id for m in app.list_memories(CTX, "user:U1", include_expired=True)] == [
        memory_id
    ]
    expired = [e for e in platform.log.read(0, 100) if e.envelope.type == "MemoryExpired"]
    assert len(expired) == 1
    assert expired[0].envelope.occurred_at == app.get(CTX, memory_id).valid_until
    # scanning again never fires twice
    clock.advance(timedelta(days=1))
    platform.runner.drain()
    assert len([e for e in platform.log.read(0, 100) if e.envelope.type == "MemoryExpired"]) == 1


def test_forgetting_a_memory_removes_it_from_every_read_model(platform: Platform) -> None:
    app = platform.app
    platform.runner.start()
    r = app.publish(CTX, [obs("记住我的尺码是L")], wait=Wait.INDEXED, timeout=60)
    assert r.complete
    memory_id = r.outcomes[r.accepted[0].event_id][0].memory_id
    assert memory_id is not None
    forget = {"type": "ForgetRequested", "schema_version": 1, "stream": "user:U1",
              "payload": {"memory_id": memory_id}}  # fmt: skip
    r = app.publish(CTX, [forget], wait=Wait.INDEXED, timeout=60)
    assert r.complete
    forgotten = app.get(CTX, memory_id)
    assert forgotten.status is MemoryStatus.FORGOTTEN
    assert forgotten.value is None
    assert forgotten.content == ""
    assert platform.index.ids("acme") == []
    assert app.search(CTX, "尺码", streams=["user:U1"]) == []


def test_rebuilding_from_the_log_gives_identical_state(
    platform: Platform, clock: FixedClock
) -> None:
    app = platform.app
    for i in range(3):
        app.publish(
            CTX,
            [
                obs("记住我的尺码是L", stream=f"user:U{i}"),
                obs("remember my size is XL", stream=f"user:U{i}"),
                obs("我今天想买咖啡", stream=f"user:U{i}"),
                obs("hello", stream=f"user:U{i}"),
                declare(
                    stream=f"user:U{i}", type="constraint", content="no credit products for minors"
                ),
                # refused by the registrar: its validity ends before it began
                declare(
                    stream=f"user:U{i}",
                    type="fact",
                    content="x",
                    valid_until="1971-01-01T00:00:00+00:00",
                ),
            ],
        )
        clock.advance(timedelta(hours=10))
        platform.runner.drain()
    clock.advance(timedelta(hours=30))  # the first intents expire
    platform.runner.drain()
    counts = platform.store.counts()
    assert counts["memories_superseded"] == 3
    assert counts["memories_expired"] >= 1
    live = platform_checksum(platform)
    live_counts = platform.store.counts()
    head = platform.log.head()
    progress: list[tuple[int, int]] = []
    assert rebuild_read_models(platform, lambda done, total: progress.append((done, total))) == live
    assert platform.store.counts() == live_counts
    assert platform.log.head() == head, "a rebuild appends nothing to the log"
    assert progress
    assert progress[-1] == (head, head)


def test_the_audit_chain_covers_every_event_and_verifies(platform: Platform) -> None:
    app = platform.app
    app.publish(CTX, [obs("记住我的尺码是L"), obs("hello")])
    app.publish(RequestContext("globex", "t"), [obs("remember my size is M")])
    platform.runner.drain()
    events = {e.envelope.event_id: e.envelope for e in platform.log.read(0, 1000)}
    for tenant in ("acme", "globex"):
        trails = audit_trails(platform.store, tenant)
        mine = [e for e in events.values() if e.tenant == tenant]
        assert sum(len(t) for t in trails.values()) == len(mine)
        assert set(trails) == {e.stream for e in mine}
        assert verify_trails(trails, events) == {}
        # link n of a stream holds the stream's event n
        for stream, trail in trails.items():
            assert [events[r.event_id].seq for r in trail] == list(range(1, len(trail) + 1))
            assert {events[r.event_id].stream for r in trail} == {stream}


def test_a_rebuild_follows_the_recorded_decisions_even_after_the_rules_change(
    platform: Platform,
) -> None:
    app = platform.app
    app.publish(CTX, [obs("记住我的尺码是L"), obs("I want to buy coffee today"), obs("hello")])
    platform.runner.drain()
    live = platform_checksum(platform)
    before = [m.value for m in app.list_memories(CTX, "user:U1")]
    platform.runner.rules = RuleSet([])  # nothing would be registered under these rules
    assert rebuild_read_models(platform) == live
    assert [m.value for m in app.list_memories(CTX, "user:U1")] == before
    # a new observation is decided under the new rules
    app.publish(CTX, [obs("remember my size is XL")])
    platform.runner.drain()
    assert [m.value for m in app.list_memories(CTX, "user:U1", key="size")] == ["L"]


def test_a_memorys_timeline_records_the_events_that_touched_it(platform: Platform) -> None:
    app = platform.app
    first = app.publish(CTX, [obs("记住我的尺码是L")])
    platform.runner.drain()
    [registered] = app.outcome(CTX, first.accepted[0].event_id)
    shown = app.context(CTX, ContextRequest(subjects=("user:U1",)))
    platform.runner.drain()
    app.report(CTX, shown.request_id, f'L <memory_ref id="{registered.memory_id}"/>')
    app.publish(CTX, [obs("remember my size is XL")])
    platform.runner.drain()
    whats = [e.what for e in platform.store.timeline("acme", str(registered.memory_id))]
    assert whats[0] == "registered"
    assert "superseded" in whats
    assert "cited" in whats
    assert platform.store.timeline("globex", str(registered.memory_id)) == []


def test_sealed_time_zones_and_guards_still_work(platform: Platform) -> None:
    """On a user stream the time zones, the language and a guard reach the log sealed; the
    consumers open them before handling, so a known zone is taken (not refused as unknown)
    and the read model keeps the zone and the guard as the agent wrote them."""
    from mnemo.sealing import SEALED_TEXT

    app = platform.app
    guard = {"rule_id": "no-peanuts", "patterns": ["peanut"]}
    result = app.publish(
        CTX,
        [
            obs("hello there", timezone="Asia/Shanghai", language="en"),
            declare(type="constraint", content="no peanuts", timezone="Asia/Shanghai", guard=guard),
        ],
    )
    # an unknown zone is refused when it is published, and the refusal does not quote it
    with pytest.raises(InvalidInput) as unknown_zone:
        app.publish(CTX, [obs("hello again", timezone="Mars/Base")])
    assert unknown_zone.value.code == "INVALID_TIMEZONE"
    assert "Mars" not in str(unknown_zone.value)
    # one the log already holds (published before zones were checked at the edge) is
    # rejected by the registrar, its detail quoting no one's words
    assert platform.sealer is not None
    now = platform.app.clock.now()
    held = Envelope.model_validate(
        {
            **obs("hello again", timezone="Mars/Base"),
            "tenant": "acme",
            "event_id": new_event_id(now),
            "occurred_at": now.isoformat(),
            "actor": {"kind": "agent", "id": "agent"},
        }
    )
    [unknown_held] = platform.log.append([platform.sealer.seal(held)])
    platform.runner.drain()
    known, declared = (app.outcome(CTX, a.event_id) for a in result.accepted)
    assert known
    assert all(o.reason_code != "INVALID_TIMEZONE" for o in known)
    [registered] = declared
    assert registered.memory_id is not None
    memory = app.get(CTX, registered.memory_id)
    assert (memory.timezone, memory.guard) == ("Asia/Shanghai", Guard(**guard))
    [refused] = app.outcome(CTX, unknown_held.event_id)
    assert refused.reason_code == "INVALID_TIMEZONE"
    assert "Mars" not in (refused.detail or "")  # the detail quotes no one's words
    logged = [e.envelope for e in platform.log.read(0, 100) if e.envelope.stream == "user:U1"]
    raw = "".join(e.model_dump_json() for e in logged)
    assert [w for w in ("Asia/Shanghai", "peanut", "Mars/Base") if w in raw] == []
    [decl] = [e for e in logged if e.type == "MemoryDeclared"]
    assert decl.payload["memory"]["timezone"] == SEALED_TEXT
