"""The decay engine on the embedded platform, driven by the clock port: verification comes
due and shows to the agent, an answer renews, silence lowers the weight, disuse archives,
and replaying the log reproduces every weight."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from mnemo.adapters.clocks import FixedClock
from mnemo.bootstrap import Platform
from mnemo.domain.memory import MemoryStatus
from mnemo.entrypoints.admin import platform_checksum, rebuild_read_models
from mnemo.service.app import RequestContext
from mnemo.service.context import ContextRequest

CTX = RequestContext("acme", "agent")
S = "user:U1"


def event(event_type: str, payload: dict[str, Any], version: int = 1) -> dict[str, Any]:
    return {"type": event_type, "schema_version": version, "stream": S, "payload": payload}


def remember(platform: Platform, text: str) -> str:
    result = platform.app.publish(CTX, [event("ObservationRecorded", {"text": text}, 2)])
    platform.runner.drain()
    [outcome] = platform.app.outcome(CTX, result.accepted[0].event_id)
    assert outcome.memory_id is not None
    return outcome.memory_id


def cite(platform: Platform, memory_id: str) -> None:
    """A citation as the model makes one: a context is assembled that includes the memory,
    and the answer reported to it names the memory first."""
    ctx = platform.app.context(CTX, ContextRequest(subjects=(S,), budget=2_000))
    assert memory_id in [i.candidate.memory.memory_id for i in ctx.assembly.included]
    platform.runner.drain()
    answer = f'<memory_ref id="{memory_id}"/> is what I went by'
    feedback = platform.app.report(CTX, ctx.request_id, answer)
    assert [c[0] for c in feedback.cited] == [memory_id]
    platform.runner.drain()


def test_verification_due_shows_then_an_answer_renews_it(
    platform: Platform, clock: FixedClock
) -> None:
    size = remember(platform, "记住我的尺码是L")
    assert platform.app.due_verifications(CTX, S) == []
    clock.advance(timedelta(days=90))
    platform.runner.drain()
    [due] = platform.app.due_verifications(CTX, S)
    assert (due.memory_id, due.value) == (size, "L")
    assert due.verification_due_at == due.created_at + timedelta(days=90)
    clock.advance(timedelta(days=2))
    platform.app.publish(CTX, [event("MemoryVerified", {"memory_id": size})])
    platform.runner.drain()
    assert platform.app.due_verifications(CTX, S) == []
    renewed = platform.app.get(CTX, size)
    assert renewed.verified_at == clock.now()
    assert renewed.semantic_weight == 0.72
    # the deadline was called off: weeks later the weight is untouched
    clock.advance(timedelta(days=30))
    platform.runner.drain()
    assert platform.app.get(CTX, size).semantic_weight == 0.72


def test_no_answer_by_the_deadline_lowers_the_weight_to_the_floor(
    platform: Platform, clock: FixedClock
) -> None:
    size = remember(platform, "记住我的尺码是L")
    clock.advance(timedelta(days=97, seconds=1))
    platform.runner.drain()
    platform.runner.drain()  # the deadline timer is set by the first scan and fires on the next
    memory = platform.app.get(CTX, size)
    assert memory.semantic_weight == 0.1
    assert memory.status is MemoryStatus.ACTIVE  # lowered, not deleted
    decayed = [e for e in platform.log.read(0, 1000) if e.envelope.type == "MemoryDecayed"]
    assert [e.envelope.payload["reason"] for e in decayed] == ["unverified"]
    # verifying late restores the registered weight
    platform.app.publish(CTX, [event("MemoryVerified", {"memory_id": size})])
    platform.runner.drain()
    assert platform.app.get(CTX, size).semantic_weight == 0.72


def test_unused_memories_are_archived_yet_retrievable_on_request(
    platform: Platform, clock: FixedClock
) -> None:
    trip = platform.app.publish(
        CTX,
        [
            event(
                "MemoryDeclared",
                {"memory": {"type": "context", "content": "planning a trip to Kyoto"}},
            )
        ],
    )
    platform.runner.drain()
    [outcome] = platform.app.outcome(CTX, trip.accepted[0].event_id)
    clock.advance(timedelta(days=31))
    platform.runner.drain()
    assert platform.app.get(CTX, str(outcome.memory_id)).status is MemoryStatus.ARCHIVED
    assert platform.app.list_memories(CTX, S) == []
    assert [m.memory_id for m in platform.app.list_memories(CTX, S, include_archived=True)] == [
        outcome.memory_id
    ]
    assert platform.app.search(CTX, "Kyoto trip", streams=[S]) == []
    hits = platform.app.search(CTX, "Kyoto trip", streams=[S], include_archived=True)
    assert [h.memory.memory_id for h in hits] == [outcome.memory_id]


def test_use_keeps_a_memory_from_being_archived(platform: Platform, clock: FixedClock) -> None:
    memory_id = remember(platform, "this week I'm looking for a laptop")
    for _ in range(3):
        clock.advance(timedelta(hours=6))
        cite(platform, memory_id)
    weight = platform.app.get(CTX, memory_id).semantic_weight
    assert weight == 0.65  # 0.5 + 3 x 0.05
    stats = platform.store.memory_stats("acme", [memory_id])
    assert stats[0].cited == 3


def test_contradicting_behaviour_lowers_without_deleting(platform: Platform) -> None:
    dislike = remember(platform, "I don't like cilantro")
    platform.app.publish(
        CTX,
        [event("MemoryContradicted", {"memory_id": dislike, "reason": "bought cilantro twice"})],
    )
    platform.runner.drain()
    memory = platform.app.get(CTX, dislike)
    assert memory.status is MemoryStatus.ACTIVE
    assert memory.semantic_weight == 0.25
    assert memory.provenance.trust == 0.45


def test_replaying_the_log_reproduces_every_weight(platform: Platform, clock: FixedClock) -> None:
    size = remember(platform, "记住我的尺码是L")
    cilantro = remember(platform, "I don't like cilantro")
    cite(platform, size)
    platform.app.publish(CTX, [event("MemoryContradicted", {"memory_id": cilantro, "reason": "x"})])
    clock.advance(timedelta(days=98))
    platform.runner.drain()
    platform.runner.drain()
    live = platform_checksum(platform)
    weights = {m.memory_id: m.semantic_weight for m in platform.app.list_memories(CTX, S)}
    assert rebuild_read_models(platform) == live
    assert {m.memory_id: m.semantic_weight for m in platform.app.list_memories(CTX, S)} == weights


def test_a_context_shows_which_memories_are_due_for_verification(
    platform: Platform, clock: FixedClock
) -> None:
    from mnemo.service.context import ContextRequest

    size = remember(platform, "记住我的尺码是L")
    request = ContextRequest(subjects=(S,), query="尺码", budget=500)
    assert platform.app.context(CTX, request).due_verifications == []
    clock.advance(timedelta(days=91))
    platform.runner.drain()
    assert platform.app.context(CTX, request).due_verifications == [size]
