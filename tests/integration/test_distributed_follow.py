"""The hops between a publish and a searchable memory in the distributed mode, on a real
Kafka broker and a real Cassandra node: the registrar sequences the records its own batch
emitted (a registration's MemoryRegistered) in the same call, so the indexer does not wait
for another trip through the consumer group; a backlog is left to the stream; and the
indexer commits its partitions' positions side by side, each under its own claim."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.distributed_support import Pump, distributed_settings, running_distributed

from mnemo.bootstrap import Platform, build_distributed
from mnemo.domain.projection import OutcomeKind
from mnemo.ports import LogRecord, MemoryQuery, RecordStatus
from mnemo.service.app import RequestContext
from mnemo.service.distributed import Follower, NotReady, Ownership, Sequencer, position_name

CTX = RequestContext("acme", "tester")
STREAMS = 4


def declare(content: str, stream: str) -> dict[str, Any]:
    return {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": stream,
        "payload": {"memory": {"type": "fact", "content": content}},
    }


def sequencer(platform: Platform) -> Sequencer:
    d = platform.distributed
    assert d is not None
    return Sequencer(
        platform.runner, platform.store, d.topic, d.archive, platform.runner.clock, d.next_position
    )


def indexer(platform: Platform) -> Follower:
    d = platform.distributed
    assert d is not None
    return Follower(platform.runner, platform.store, d.archive, "indexer", d.topic)


def fetch_all(platform: Platform) -> dict[int, list[LogRecord]]:
    topic = platform.distributed.topic  # type: ignore[union-attr]
    return {p: topic.fetch(p, 0, 1_000) for p in topic.partitions()}


def position(platform: Platform, consumer: str, partition: int) -> int:
    return platform.store.position(position_name(consumer, partition))


def publish(platform: Platform, n: int) -> list[str]:
    result = platform.app.publish(
        CTX, [declare(f"fact number {i}", f"user:U{i % STREAMS}") for i in range(n)]
    )
    return [a.event_id for a in result.accepted]


def assert_each_event_once(platform: Platform, accepted: list[str]) -> None:
    for event_id in accepted:
        outcome = platform.store.outcome("acme", event_id)
        assert [o.kind for o in outcome] == [OutcomeKind.REGISTERED], (event_id, outcome)
    memories = platform.store.query("acme", MemoryQuery(limit=1_000))
    assert sorted(m.source_event_id for m in memories) == sorted(accepted)
    total = 0
    for s in range(STREAMS):
        events = platform.log.read_stream("acme", f"user:U{s}", 1, 1_000)
        assert [e.envelope.seq for e in events] == list(range(1, len(events) + 1))
        total += len(events)
    assert total == 2 * len(accepted)  # each declaration and its MemoryRegistered


def test_the_registrar_sequences_what_its_batch_emitted_in_the_same_call(
    tmp_path: Path,
) -> None:
    with running_distributed(distributed_settings(tmp_path / "data")) as platform:
        accepted = publish(platform, 8)
        archive = platform.distributed.archive  # type: ignore[union-attr]
        topic = platform.distributed.topic  # type: ignore[union-attr]
        published = {p: r for p, r in fetch_all(platform).items() if r}
        registrar = sequencer(platform)
        ownership = Ownership(platform.store, registrar.consumer)
        registrar.ownership = ownership
        ownership.assign(topic.partitions())
        for records in published.values():
            # the call reports the batch's own records
            assert registrar.process(records) == len(records)
        ends = topic.end_offsets()
        # the registrations were produced after the declarations, and already sequenced:
        # the registrar's position is at the end of every partition, every record decided
        assert sum(ends.values()) == 2 * sum(len(r) for r in published.values())
        for p, end in ends.items():
            assert position(platform, "registrar", p) == end
            fates = archive.fates(p, 0, end - 1) if end else {}
            assert sorted(fates) == list(range(end))
            assert {f.status for f in fates.values()} <= {RecordStatus.ARCHIVED}
        # the indexer finds every record decided: nothing to wait for
        everything = [r for records in fetch_all(platform).values() for r in records]
        assert indexer(platform).process(everything) == len(everything)
        # the stream brings the followed records later: below the position, skipped
        skipped = registrar.counters.skipped
        for records in fetch_all(platform).values():
            assert registrar.process(records) == 0
        assert registrar.counters.skipped - skipped == len(everything)
        Pump(platform).drain()
        assert_each_event_once(platform, accepted)


def test_a_backlog_past_the_follow_limit_is_left_to_the_stream(tmp_path: Path) -> None:
    with running_distributed(distributed_settings(tmp_path / "data")) as platform:
        accepted = publish(platform, 8)
        published = {p: r for p, r in fetch_all(platform).items() if r}
        registrar = sequencer(platform)
        registrar.follow_limit = 0
        for p, records in published.items():
            registrar.process(records)
            assert position(platform, "registrar", p) == records[-1].offset + 1
        # the registrations are not decided yet: the indexer waits for the registrar
        everything = [r for records in fetch_all(platform).values() for r in records]
        with pytest.raises(NotReady):
            indexer(platform).process(everything)
        Pump(platform).drain()
        assert_each_event_once(platform, accepted)


def test_the_indexer_commits_its_partitions_side_by_side_and_a_lost_one_is_fenced(
    tmp_path: Path,
) -> None:
    with running_distributed(distributed_settings(tmp_path / "data")) as platform:
        publish(platform, 12)
        Pump(platform, ("registrar",)).drain()
        records = fetch_all(platform)
        partitions = sorted(p for p, r in records.items() if r)
        assert len(partitions) >= 2
        mine = indexer(platform)
        mine.ownership = Ownership(platform.store, "indexer")
        mine.ownership.assign(partitions)
        lost = partitions[0]
        settings = platform.settings.model_copy(
            update={"data_dir": platform.settings.data_dir.parent / "second"}
        )
        other = build_distributed(settings, "second")
        try:
            # another worker was given one of the partitions meanwhile
            Ownership(other.store, "indexer").assign([lost])
            batch = [r for p in partitions for r in records[p]]
            mine.process(batch)
        finally:
            other.close()
        assert mine.ownership.snapshot()["fenced"] == [lost]
        assert position(platform, "indexer", lost) == 0
        for p in partitions[1:]:
            assert position(platform, "indexer", p) == records[p][-1].offset + 1


def test_a_follower_passes_over_records_it_does_not_read_without_waiting(
    tmp_path: Path,
) -> None:
    with running_distributed(distributed_settings(tmp_path / "data")) as platform:
        accepted = publish(platform, 8)
        topic = platform.distributed.topic  # type: ignore[union-attr]
        # a record that is no event at all: the registrar will dead-letter it
        topic.produce([(b"acme:user:U0", b"not an event", ())])
        published = fetch_all(platform)
        everything = [r for records in published.values() for r in records]
        # nothing is decided yet: the indexer reads none of these types, and goes on
        assert indexer(platform).process(everything) == len(everything)
        for p, records in published.items():
            assert position(platform, "indexer", p) == (records[-1].offset + 1 if records else 0)
        # the audit chain reads every type: it waits for the registrar
        audit = Follower(
            platform.runner,
            platform.store,
            platform.distributed.archive,  # type: ignore[union-attr]
            "audit",
        )
        with pytest.raises(NotReady):
            audit.process(everything)
        # the registrations the registrar emits are read by the indexer: every memory is
        # indexed once they are decided
        Pump(platform).drain()
        assert_each_event_once(platform, accepted)
        assert len(platform.runner.index.ids("acme")) == len(accepted)
