"""What a following consumer waits for the registrar to decide on, and what it passes over
whatever the registrar decides (tests/integration/test_distributed_log.py runs the same on
Kafka and Cassandra)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, cast

import orjson
import pytest

from mnemo.domain.events import Actor, ActorKind, Envelope
from mnemo.domain.ids import new_event_id
from mnemo.handlers import registry
from mnemo.ports import LogRecord, RecordFate, RecordStatus
from mnemo.service.distributed import Follower


class Decided:
    """The sequencer's side as a follower reads it: fates, and its committed positions."""

    def __init__(self, fates: dict[int, RecordStatus], position: int) -> None:
        self.statuses = fates
        self.position = position
        self.looks = 0

    def fates(self, partition: int, first: int, last: int) -> dict[int, RecordFate]:
        self.looks += 1
        return {
            o: RecordFate(partition, o, status, seq=o + 1)
            for o, status in self.statuses.items()
            if first <= o <= last
        }

    def positions(self, names: Sequence[str]) -> dict[str, int]:
        return dict.fromkeys(names, self.position)


def follower(name: str, decided: Decided | None = None) -> Follower:
    # no runner is touched; the archive and the store are asked only for fates and positions
    return Follower(cast(Any, None), cast(Any, decided), cast(Any, decided), name)


def record(offset: int, value: Any, partition: int = 0) -> LogRecord:
    raw = value if isinstance(value, bytes) or value is None else orjson.dumps(value)
    return LogRecord(partition, offset, b"acme:user:U1", raw, (), None)


def typed(offset: int, kind: str, partition: int = 0) -> LogRecord:
    return record(offset, {"type": kind, "schema_version": 1, "stream": "user:U1"}, partition)


def event(offset: int, kind: str) -> LogRecord:
    at = datetime(2026, 12, 5, tzinfo=UTC)
    env = Envelope(
        event_id=new_event_id(at),
        type=kind,
        schema_version=1,
        tenant="acme",
        stream="user:U1",
        occurred_at=at,
        actor=Actor(kind=ActorKind.SYSTEM, id="registrar"),
        payload={},
    )
    return record(offset, env.model_dump_json().encode())


@pytest.mark.parametrize("name", ["indexer", "decay"])
def test_a_type_the_consumer_does_not_read_is_passed_over(name: str) -> None:
    reads = set(registry.consumer(name).handles())
    f = follower(name)
    assert not f.passes_over(typed(0, "MemoryRegistered"))  # both read it
    assert f.passes_over(typed(0, "MemoryDeclared"))  # neither does
    assert f.passes_over(typed(0, "ContextAssembled")) is ("ContextAssembled" not in reads)


def test_what_is_not_an_envelope_waits_for_its_fate() -> None:
    f = follower("indexer")
    for value in (None, b"", b"not json", b"[1, 2]", {"type": 7}, {"payload": {}}):
        assert not f.passes_over(record(0, value))


def test_the_audit_chain_waits_for_every_record() -> None:
    f = follower("audit")
    assert not f.passes_over(typed(0, "MemoryDeclared"))
    assert not f.passes_over(typed(0, "ContextAssembled"))


def test_the_first_record_to_wait_for_is_named_per_partition() -> None:
    f = follower("indexer")
    records = [
        typed(4, "ContextAssembled", 0),
        typed(5, "MemoryRegistered", 0),
        typed(6, "MemoryRegistered", 0),
        typed(9, "MemoryDeclared", 1),
        typed(2, "MemoryDeclared", 2),
        record(3, b"garbage", 2),
    ]
    assert f.first_undecided(records) == {0: 5, 2: 3}


def test_a_mixed_batch_is_ready_up_to_the_first_undecided_record_it_reads() -> None:
    batch = [
        typed(0, "MemoryDeclared"),
        event(1, "MemoryRegistered"),
        typed(2, "ContextAssembled"),
        event(3, "MemoryRegistered"),
        typed(4, "MemoryDeclared"),
        event(5, "MemoryRegistered"),
    ]
    # the registrar decided on 0 to 3 (3 a duplicate) and committed past them; 5 is not
    # decided yet
    decided = Decided(
        {1: RecordStatus.ARCHIVED, 3: RecordStatus.DUPLICATE, 4: RecordStatus.ARCHIVED}, 4
    )
    ready, events, _, _ = follower("indexer", decided)._ready(0, batch)
    assert [r.offset for r in ready] == [0, 1, 2, 3, 4]  # 4 passed over, 5 waits
    assert [(e.envelope.type, e.envelope.seq) for e in events] == [("MemoryRegistered", 2)]
    assert follower("indexer", decided).first_undecided(batch) == {0: 1}


def test_a_batch_of_only_what_it_does_not_read_asks_the_sequencer_nothing() -> None:
    decided = Decided({}, 0)
    batch = [typed(0, "MemoryDeclared"), typed(1, "ContextAssembled")]
    ready, events, _, _ = follower("indexer", decided)._ready(0, batch)
    assert ([r.offset for r in ready], events, decided.looks) == ([0, 1], [], 0)


def test_the_indexer_takes_a_registered_memory_on_its_fate_before_the_commit() -> None:
    # registration emitted the memory and committed it before the MemoryRegistered is
    # archived; what the registrar decides on the record itself (a timeline line) is nothing
    # the indexer reads, so its fate is enough; a forget still waits for the commit
    batch = [
        event(0, "MemoryRegistered"),
        typed(1, "MemoryDeclared"),
        event(2, "MemoryRegistered"),
        event(3, "ForgetRequested"),
        event(4, "MemoryRegistered"),
    ]
    archived = dict.fromkeys([0, 2, 3, 4], RecordStatus.ARCHIVED)
    decided = Decided(archived, 0)  # fates recorded, nothing committed yet
    ready, events, _, _ = follower("indexer", decided)._ready(0, batch)
    assert [r.offset for r in ready] == [0, 1, 2]  # the forget at 3 waits, and 4 behind it
    assert [e.envelope.seq for e in events] == [1, 3]
    # the other followers read what the registrar decided: they wait for the commit
    for name in ("decay", "audit"):
        ready, _, _, _ = follower(name, Decided(archived, 0))._ready(0, batch)
        assert ready == []


def test_a_registered_memory_with_no_fate_yet_still_waits() -> None:
    decided = Decided({1: RecordStatus.ARCHIVED}, 0)
    batch = [event(0, "MemoryRegistered"), event(1, "MemoryRegistered")]
    ready, events, _, _ = follower("indexer", decided)._ready(0, batch)
    assert (ready, events) == ([], [])


def test_a_duplicate_registration_is_not_handled_on_its_fate() -> None:
    decided = Decided({0: RecordStatus.DUPLICATE, 1: RecordStatus.ARCHIVED}, 0)
    batch = [event(0, "MemoryRegistered"), event(1, "MemoryRegistered")]
    ready, events, _, _ = follower("indexer", decided)._ready(0, batch)
    assert [r.offset for r in ready] == [0, 1]
    assert [e.envelope.seq for e in events] == [2]


def test_what_a_waiting_follower_watches() -> None:
    f = follower("indexer", Decided({5: RecordStatus.ARCHIVED}, 3))
    batch = [event(5, "MemoryRegistered"), event(6, "ForgetRequested")]
    on_fate = f.on_fate(batch)
    assert on_fate == {(0, 5)}
    # offset 5 has its fate: handled on it; without that, it waits for the position
    assert f.undecided({0: 5}, on_fate) == {}
    assert f.undecided({0: 5}) == {0: 5}
    # the forget at 6 has no fate and the registrar's position is before it
    assert f.undecided({0: 6}, on_fate) == {0: 6}
    # the registrar's position past an offset decides it whatever its type
    assert follower("indexer", Decided({}, 7)).undecided({0: 6, 1: 2}) == {}
    # decay handles nothing on a fate alone
    assert follower("decay", Decided({}, 0)).on_fate(batch) == frozenset()
