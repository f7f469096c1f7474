"""Conversations on the embedded platform: imported turns keep their real event time and
stay visible (archival counts from arrival), and repeated turns stay separate."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from mnemo.adapters.clocks import FixedClock
from mnemo.bootstrap import Platform
from mnemo.domain.memory import MemoryStatus, MemoryType
from mnemo.service.app import RequestContext

CTX = RequestContext("acme", "agent")
S = "user:U1"


def turn(content: str, occurred: Any) -> dict[str, Any]:
    return {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": S,
        "occurred_at": occurred.isoformat(),
        "payload": {"memory": {"type": "history", "content": content}},
    }


def test_imported_history_stays_visible_until_unused_for_its_period_after_arrival(
    platform: Platform, clock: FixedClock
) -> None:
    long_ago = clock.now() - timedelta(days=200)
    result = platform.app.publish(
        CTX,
        [
            turn("Alice: Thanks!", long_ago),
            turn("Bob: we moved to Lisbon in May", long_ago + timedelta(minutes=1)),
            turn("Alice: Thanks!", long_ago + timedelta(days=7)),  # another session
        ],
    )
    clock.advance(timedelta(seconds=5))
    platform.runner.drain()
    ids = [platform.app.outcome(CTX, a.event_id)[0].memory_id for a in result.accepted]
    assert None not in ids
    assert len(set(ids)) == 3  # the second "Thanks!" is its own occurrence
    listed = platform.app.list_memories(CTX, S, types=(MemoryType.HISTORY,))
    assert sorted(m.memory_id for m in listed) == sorted(ids)  # nothing archived on arrival
    assert {m.created_at for m in listed} >= {long_ago}  # the real event time is kept
    hits = platform.app.search(CTX, "Lisbon", streams=[S])
    assert ids[1] in [h.memory.memory_id for h in hits]
    # unused for the history period (90 days) after it arrived: archived, as any memory
    clock.advance(timedelta(days=91))
    platform.runner.drain()
    assert {platform.app.get(CTX, i).status for i in ids} == {MemoryStatus.ARCHIVED}
