"""What a following consumer waits for the registrar to decide on, and what it passes over
whatever the registrar decides (tests/integration/test_distributed_log.py runs the same on
Kafka and Cassandra)."""

from __future__ import annotations

from typing import Any, cast

import orjson
import pytest

from mnemo.handlers import registry
from mnemo.ports import LogRecord
from mnemo.service.distributed import Follower


def follower(name: str) -> Follower:
    # only the record checks run here: no runner, store or archive is touched
    return Follower(cast(Any, None), cast(Any, None), cast(Any, None), name)


def record(offset: int, value: Any, partition: int = 0) -> LogRecord:
    raw = value if isinstance(value, bytes) or value is None else orjson.dumps(value)
    return LogRecord(partition, offset, b"acme:user:U1", raw, (), None)


def typed(offset: int, kind: str, partition: int = 0) -> LogRecord:
    return record(offset, {"type": kind, "schema_version": 1, "stream": "user:U1"}, partition)


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
