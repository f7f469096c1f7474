"""Conversations on the embedded platform: imported turns keep their real event time and
stay visible (archival counts from arrival), and repeated turns stay separate."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from mnemo.adapters.clocks import FixedClock
from mnemo.bootstrap import Platform
from mnemo.domain.errors import InvalidInput
from mnemo.domain.memory import MemoryStatus, MemoryType
from mnemo.service.app import RequestContext
from mnemo.service.context import ContextRequest

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


def test_a_plain_import_gets_episodes_from_its_pauses_and_context_neighbours_from_them(
    platform: Platform, clock: FixedClock
) -> None:
    first = clock.now() - timedelta(days=30)
    second = first + timedelta(days=9)
    turns = [
        ("Caroline: I signed up for a pottery class.", first),
        ("Melanie: Which studio did you pick?", first + timedelta(seconds=30)),
        ("Caroline: The one by the harbour, on Tuesdays.", first + timedelta(seconds=60)),
        ("Melanie: We went camping by the lake.", second),
        ("Caroline: Did the kids like it?", second + timedelta(seconds=30)),
    ]
    result = platform.app.publish(CTX, [turn(text, at) for text, at in turns])
    platform.runner.drain()
    ids = [platform.app.outcome(CTX, a.event_id)[0].memory_id for a in result.accepted]
    memories = [platform.app.get(CTX, i) for i in ids]
    episodes = [next(t for t in m.tags if t.startswith("episode:")) for m in memories]
    assert episodes == [f"episode:{ids[0]}"] * 3 + [f"episode:{ids[3]}"] * 2
    assert [next(t for t in m.tags if t.startswith("speaker:")) for m in memories] == [
        "speaker:caroline",
        "speaker:melanie",
        "speaker:caroline",
        "speaker:melanie",
        "speaker:caroline",
    ]
    # the derived episode feeds the neighbours: the best hit brings the turn after it, and
    # nothing from the other session
    platform.app.register_template(CTX, ONE_HIT_TEMPLATE)
    platform.runner.drain()
    response = platform.app.context(
        CTX,
        ContextRequest(subjects=(S,), query="pottery class", budget=1_000, template="one-hit"),
    )
    via = {i.candidate.memory.memory_id: i.candidate.via for i in response.assembly.included}
    assert via == {ids[0]: "retrieval", ids[1]: "neighbour"}


ONE_HIT_TEMPLATE: dict[str, Any] = {
    "name": "one-hit",
    "version": 1,
    "sections": [
        {"name": "rules", "priority": 1, "budget": 200, "types": ["constraint"], "query": ""},
        {
            "name": "history",
            "priority": 2,
            "budget": 800,
            "types": ["history"],
            "limit": 1,
            "neighbours": 1,
            "render": "- {text}",
        },
    ],
}


def test_an_import_whose_client_stamps_its_ids_at_the_past_event_time_stays_visible(
    platform: Platform, clock: FixedClock
) -> None:
    """A client that makes each turn's id from the turn's own (past) time, for idempotent
    imports: the memories still count their disuse from when Mnemo accepted them."""
    from mnemo.domain.ids import new_event_id

    long_ago = clock.now() - timedelta(days=200)
    turns = [turn(f"Alice: turn {i}", long_ago + timedelta(minutes=i)) for i in range(3)]
    for t in turns:
        t["event_id"] = new_event_id(datetime.fromisoformat(t["occurred_at"]))
    result = platform.app.publish(CTX, turns)
    clock.advance(timedelta(seconds=5))
    platform.runner.drain()
    ids = [platform.app.outcome(CTX, a.event_id)[0].memory_id for a in result.accepted]
    memories = [platform.app.get(CTX, i) for i in ids]
    assert {m.status for m in memories} == {MemoryStatus.ACTIVE}
    assert {m.received_at for m in memories} == {clock.now() - timedelta(seconds=5)}
    clock.advance(timedelta(days=89))
    platform.runner.drain()
    assert {platform.app.get(CTX, i).status for i in ids} == {MemoryStatus.ACTIVE}
    clock.advance(timedelta(days=2))
    platform.runner.drain()
    assert {platform.app.get(CTX, i).status for i in ids} == {MemoryStatus.ARCHIVED}
    # a client may not stamp the acceptance itself
    forged = {**turn("Alice: forged", long_ago), "received_at": long_ago.isoformat()}
    with pytest.raises(InvalidInput) as refused:
        platform.app.publish(CTX, [forged])
    assert (refused.value.code, refused.value.field) == (
        "INVALID_ENVELOPE",
        "events[0].received_at",
    )
