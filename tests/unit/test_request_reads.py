"""One context request's reads (mnemo.service.request_reads): each question reaches the
store once, and every answer the memo gives is the one the store itself would give."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from mnemo.adapters.clocks import FixedClock
from mnemo.bootstrap import Platform
from mnemo.domain.memory import Memory, MemoryType
from mnemo.ports import MemoryQuery, MemoryReads
from mnemo.service.app import RequestContext
from mnemo.service.context import ContextRequest
from mnemo.service.request_reads import RequestReads

CTX = RequestContext("acme", "writer")
S = "user:U1"
EPISODE = "episode:e1"


def declared(memory: dict[str, Any], stream: str = S) -> dict[str, Any]:
    return {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": stream,
        "payload": {"memory": memory},
    }


def publish(platform: Platform, memories: Sequence[dict[str, Any]]) -> None:
    platform.app.publish(CTX, [declared(m) for m in memories])
    platform.runner.drain()


class Counting(MemoryReads):
    """The store, with every query it answers written down."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.queries: list[MemoryQuery] = []
        self.fetched: list[str] = []
        self.together: list[list[MemoryQuery]] = []  # the questions of each `query_each`

    def get(self, tenant: str, memory_id: str) -> Memory | None:
        self.fetched.append(memory_id)
        return self.inner.get(tenant, memory_id)

    def get_many(self, tenant: str, memory_ids: Sequence[str]) -> list[Memory]:
        self.fetched.extend(memory_ids)
        return list(self.inner.get_many(tenant, memory_ids))

    def query(self, tenant: str, query: MemoryQuery) -> list[Memory]:
        self.queries.append(query)
        return list(self.inner.query(tenant, query))

    def query_each(self, tenant: str, queries: Sequence[MemoryQuery]) -> list[list[Memory]]:
        self.together.append(list(queries))
        return super().query_each(tenant, queries)

    def history(self, tenant: str, stream: str, key: str) -> list[Memory]:
        return list(self.inner.history(tenant, stream, key))

    def outcome(self, tenant: str, event_id: str) -> Any:
        return self.inner.outcome(tenant, event_id)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


def ids(memories: Sequence[Memory]) -> list[str]:
    return [m.memory_id for m in memories]


def test_the_memo_answers_as_the_store_does(platform: Platform, clock: FixedClock) -> None:
    """Smaller limits, any limit of a complete answer, and a validity instant: each answer
    given from what the request already read is the store's own answer to that question."""
    ttls = [None, 60, 3_600, None, 120, None, 86_400, None, 30, None, None, 600]
    publish(
        platform,
        [
            {"type": "history", "content": f"Turn {i} about the boat.", "tags": [EPISODE]}
            | ({"ttl_seconds": ttl} if ttl else {})
            for i, ttl in enumerate(ttls)
        ],
    )
    store = platform.app.contexts.store
    wide = MemoryQuery(stream=S, types=(MemoryType.HISTORY,), tags=(EPISODE,), limit=500)
    assert len(store.query("acme", wide)) == len(ttls)
    now = clock.now()
    asked = [
        replace(wide, limit=5),
        replace(wide, limit=1_000),
        *(
            replace(wide, limit=limit, live_at=now + timedelta(seconds=ahead))
            for ahead in (0, 30, 59, 60, 61, 599, 3_600, 100_000)
            for limit in (3, 1_000)
        ),
    ]
    for query in asked:
        counted = Counting(store)
        reads = RequestReads(counted)
        reads.query("acme", wide)
        assert ids(reads.query("acme", query)) == ids(store.query("acme", query)), query
        assert counted.queries == [wide], "answered from the first read"


def test_a_cut_answer_does_not_answer_a_longer_question(
    platform: Platform, clock: FixedClock
) -> None:
    publish(platform, [{"type": "fact", "content": f"Fact {i} about tea."} for i in range(6)])
    store = platform.app.contexts.store
    counted = Counting(store)
    reads = RequestReads(counted)
    short = MemoryQuery(stream=S, limit=4)
    assert len(reads.query("acme", short)) == 4
    longer = replace(short, limit=10)
    assert ids(reads.query("acme", longer)) == ids(store.query("acme", longer))
    assert len(counted.queries) == 2
    # nor, cut, a question with a validity instant
    counted = Counting(store)
    reads = RequestReads(counted)
    reads.query("acme", replace(short, limit=6))  # as many as there are: still cut
    live = replace(short, live_at=clock.now(), limit=10)
    assert ids(reads.query("acme", live)) == ids(store.query("acme", live))
    assert len(counted.queries) == 2


def test_memories_are_fetched_once_per_request(platform: Platform) -> None:
    publish(platform, [{"type": "fact", "content": f"Fact {i} about tea."} for i in range(5)])
    store = platform.app.contexts.store
    every = ids(store.query("acme", MemoryQuery(stream=S)))
    counted = Counting(store)
    reads = RequestReads(counted)
    assert ids(reads.get_many("acme", every[:3])) == every[:3]
    assert ids(reads.get_many("acme", [every[4], every[0], "missing", every[4]])) == [
        every[4],
        every[0],
    ]
    assert reads.get("acme", "missing") is None
    assert counted.fetched == [*every[:3], every[4], "missing"]


@pytest.mark.parametrize("turns", [8, 30])
def test_a_context_reads_an_episode_once_however_many_of_its_turns_are_hits(
    platform: Platform, turns: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The history section ranks an episode's turns and pulls in the turns around each
    hit: one read of the episode, whatever the number of hits. The constraints are listed
    once, for the constraint section and the check that none is dropped."""
    publish(
        platform,
        [
            {
                "type": "history",
                "content": f"We talked about the sailing trip, part {i}.",
                "tags": [EPISODE],
            }
            for i in range(turns)
        ]
        + [{"type": "constraint", "content": "Never book flights before 9am."}],
    )
    assembler = platform.app.contexts
    counted = Counting(assembler.store)
    monkeypatch.setattr(assembler, "store", counted)
    response = assembler.assemble(
        "acme", "tester", ContextRequest(subjects=(S,), query="sailing trip", budget=4_000)
    )
    included = response.assembly.included
    hits = [i for i in included if i.section == "history" and i.candidate.via == "retrieval"]
    assert len(hits) == min(turns, 20)
    assert any(i.candidate.memory.type is MemoryType.CONSTRAINT for i in included)
    episode_reads = [q for q in counted.queries if EPISODE in q.tags]
    assert len(episode_reads) == 1
    constraint_reads = [q for q in counted.queries if q.types == (MemoryType.CONSTRAINT,)]
    assert len(constraint_reads) == 1


def test_the_episodes_of_a_ranking_are_asked_together_and_remembered(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ranked section asks for all its hits' episodes in one `query_each` (a store reads
    them side by side); the memo answers what it already holds and asks the rest together."""
    publish(
        platform,
        [
            {
                "type": "history",
                "content": f"The sailing trip, leg {i}, in the {['north', 'south', 'east'][e]}.",
                "tags": [f"episode:e{e}"],
            }
            for e in range(3)
            for i in range(4)
        ],
    )
    assembler = platform.app.contexts
    counted = Counting(assembler.store)
    monkeypatch.setattr(assembler, "store", counted)
    assembler.assemble(
        "acme", "tester", ContextRequest(subjects=(S,), query="sailing trip", budget=4_000)
    )
    asked = [[q.tags for q in batch] for batch in counted.together]
    assert sorted(tags for batch in asked for tags in batch if len(batch) > 1) == [
        ("episode:e0",),
        ("episode:e1",),
        ("episode:e2",),
    ]

    store = platform.app.contexts.store
    counted = Counting(store)
    reads = RequestReads(counted)
    queries = [MemoryQuery(stream=S, tags=(f"episode:e{e}",)) for e in range(3)]
    assert ids(reads.query("acme", queries[1])) == ids(store.query("acme", queries[1]))
    answers = reads.query_each("acme", [*queries, queries[1]])
    assert [ids(a) for a in answers] == [
        ids(store.query("acme", q)) for q in [*queries, queries[1]]
    ]
    assert all(len(a) == 4 for a in answers)
    assert counted.together == [[queries[1]], [queries[0], queries[2]]]
    assert reads.query_each("acme", queries) == answers[:3]
    assert len(counted.together) == 2  # all three remembered
