"""One writer per partition, enforced by the store (ADR 0014), on a real Kafka broker and a
real Cassandra node: a consumer that lost its partitions (a zombie) has its late commit
refused, writes nothing, and the new owner redoes the batch; a batch that holds a record
twice (a redelivery after a rebalance) handles it once.

The processors run in-process, each with its own store connection as a separate process
would have; tests/e2e/test_scale_out.py runs several worker processes in one group."""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from tests.distributed_support import Pump, distributed_settings, running_distributed
from tests.support import audit_trails

from mnemo.bootstrap import Platform, build_distributed
from mnemo.domain.projection import OutcomeKind
from mnemo.ports import ArchivedEvent, LogRecord, MemoryQuery, RecordStatus, StoreTransaction
from mnemo.service.app import RequestContext
from mnemo.service.context import ContextRequest
from mnemo.service.distributed import Follower, Ownership, Sequencer, position_name

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


def owned(processor: Sequencer | Follower, platform: Platform) -> Ownership:
    processor.ownership = Ownership(platform.store, processor.consumer)
    return processor.ownership


@contextmanager
def second_process(platform: Platform) -> Iterator[Platform]:
    """Another process's view of the same topic and keyspace: its own connections (and
    its own vector shard directory: qdrant-edge admits one opener)."""
    settings = platform.settings.model_copy(
        update={"data_dir": platform.settings.data_dir.parent / "second"}
    )
    other = build_distributed(settings, "second")
    try:
        yield other
    finally:
        other.close()


def fetch_all(platform: Platform) -> dict[int, list[LogRecord]]:
    topic = platform.distributed.topic  # type: ignore[union-attr]
    return {p: topic.fetch(p, 0, 1_000) for p in topic.partitions()}


def assert_each_event_once(platform: Platform, accepted: list[str]) -> None:
    """Exactly one registered outcome and one memory per accepted event, gapless streams
    holding each event and its MemoryRegistered, and an audit link for each."""
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
    assert total == 2 * len(accepted)
    assert sum(len(t) for t in audit_trails(platform.store, "acme").values()) == total


def test_a_zombie_registrars_late_commit_is_refused_and_the_new_owner_redoes_it(
    tmp_path: Path,
) -> None:
    with running_distributed(distributed_settings(tmp_path / "data")) as platform:
        result = platform.app.publish(
            CTX, [declare(f"fact number {i}", f"user:U{i % STREAMS}") for i in range(16)]
        )
        accepted = [a.event_id for a in result.accepted]
        batches = {p: r for p, r in fetch_all(platform).items() if r}
        zombie = sequencer(platform)
        zombie_owns = owned(zombie, platform)
        zombie_owns.assign(sorted(batches))
        with second_process(platform) as other:
            successor = sequencer(other)
            successor_owns = owned(successor, other)
            # the zombie reads, archives and decides its batches; before each commit the
            # group moves its partitions to the other process, which claims them
            original = platform.store.transaction

            @contextmanager
            def late() -> Iterator[StoreTransaction]:
                if not successor_owns.assigned:
                    successor_owns.assign(sorted(batches))
                with original() as tx:
                    yield tx

            platform.store.transaction = late  # type: ignore[method-assign]
            try:
                for records in batches.values():
                    assert zombie.process(records) == 0
            finally:
                platform.store.transaction = original  # type: ignore[method-assign]
            held = zombie_owns.snapshot()
            assert held["fenced"] == sorted(batches)
            assert held["refused_commits"] == len(batches)
            # nothing of the refused commits is in the read models
            for event_id in accepted:
                assert platform.store.outcome("acme", event_id) == []
            assert platform.store.query("acme", MemoryQuery(limit=1_000)) == []
            for p in batches:
                assert platform.store.position(position_name("registrar", p)) == 0
            # the zombie leaves the partitions alone from now on
            assert zombie.process([r for rs in batches.values() for r in rs]) == 0
            assert zombie.counters.not_owned >= sum(len(r) for r in batches.values())
            # the new owner handles the batches again, then everything that follows
            for records in batches.values():
                assert successor.process(records) == len(records)
            topic = other.distributed.topic  # type: ignore[union-attr]
            for _ in range(50):
                pending = {
                    p: topic.fetch(p, other.store.position(position_name("registrar", p)), 1_000)
                    for p in topic.partitions()
                }
                pending = {p: r for p, r in pending.items() if r}
                if not pending:
                    break
                for records in pending.values():
                    successor.process(records)
            assert successor_owns.snapshot()["fenced"] == []
            Pump(other, ("indexer", "decay", "audit")).drain()
        assert_each_event_once(platform, accepted)


def test_a_zombie_followers_late_position_is_refused(tmp_path: Path) -> None:
    with running_distributed(distributed_settings(tmp_path / "data")) as platform:
        platform.app.publish(
            CTX, [declare(f"fact number {i}", f"user:U{i % STREAMS}") for i in range(8)]
        )
        Pump(platform, ("registrar",)).drain()
        batches = {p: r for p, r in fetch_all(platform).items() if r}
        zombie = Follower(platform.runner, platform.store, platform.distributed.archive, "audit")  # type: ignore[union-attr]
        owned(zombie, platform).assign(sorted(batches))
        with second_process(platform) as other:
            successor = Follower(other.runner, other.store, other.distributed.archive, "audit")  # type: ignore[union-attr]
            owned(successor, other).assign(sorted(batches))
            for records in batches.values():
                assert zombie.process(records) == 0
            assert sum(len(t) for t in audit_trails(platform.store, "acme").values()) == 0
            for records in batches.values():
                assert successor.process(records) == len(records)
        links = sum(len(t) for t in audit_trails(platform.store, "acme").values())
        assert links == sum(len(r) for r in batches.values())


def test_a_record_twice_in_one_batch_keeps_its_fate_and_outcome(tmp_path: Path) -> None:
    with running_distributed(distributed_settings(tmp_path / "data")) as platform:
        result = platform.app.publish(
            CTX, [declare(f"fact number {i}", f"user:U{i % STREAMS}") for i in range(12)]
        )
        accepted = [a.event_id for a in result.accepted]
        registrar = sequencer(platform)
        archive = platform.distributed.archive  # type: ignore[union-attr]
        for p, records in fetch_all(platform).items():
            if records:
                # after a rebalance, faust hands over buffered records and the same ones
                # fetched again from the committed offset, in one batch
                registrar.process(records + records[: len(records) // 2 + 1])
                fates = archive.fates(p, records[0].offset, records[-1].offset)
                assert {f.status for f in fates.values()} == {RecordStatus.ARCHIVED}
        Pump(platform).drain()
        assert_each_event_once(platform, accepted)


def test_a_batch_that_starts_past_the_stored_position_is_completed_from_the_topic(
    tmp_path: Path,
) -> None:
    # Kafka's committed offset can run ahead of the stored position (a worker that lost
    # the partition acknowledged records it left alone): the next owner's batch then
    # starts past the position, and the records in between are read from the topic
    with running_distributed(distributed_settings(tmp_path / "data")) as platform:
        result = platform.app.publish(
            CTX, [declare(f"fact number {i}", f"user:U{i % STREAMS}") for i in range(12)]
        )
        accepted = [a.event_id for a in result.accepted]
        registrar = sequencer(platform)
        archive = platform.distributed.archive  # type: ignore[union-attr]
        for p, records in fetch_all(platform).items():
            if len(records) > 1:
                assert registrar.process(records[1:]) == len(records)
                assert sorted(archive.fates(p, 0, records[-1].offset)) == [
                    r.offset for r in records
                ]
        Pump(platform).drain()
        assert_each_event_once(platform, accepted)


def test_a_batch_that_jumps_forward_inside_is_completed_from_the_topic(
    tmp_path: Path,
) -> None:
    # after a rebalance a batch can hold records buffered before it and then records
    # fetched from a committed offset that had run ahead: the records in between were
    # handled by nobody. A consumer that passed over them would commit past them (the
    # audit consumer: a stream's chain then lacks a link, and the next one is chained to
    # the link before the gap, AUDIT_CHAIN_BROKEN); they are read from the topic instead
    from mnemo.handlers import audit

    with running_distributed(distributed_settings(tmp_path / "data")) as platform:
        result = platform.app.publish(
            CTX, [declare(f"fact number {i}", f"user:U{i % STREAMS}") for i in range(16)]
        )
        accepted = [a.event_id for a in result.accepted]
        d = platform.distributed
        assert d is not None
        registrar = sequencer(platform)
        holed = 0
        for p, records in fetch_all(platform).items():
            if len(records) > 3:
                # the hole is right after the stored position's record
                assert registrar.process(records[:1] + records[3:]) == len(records)
                assert sorted(d.archive.fates(p, 0, records[-1].offset)) == [
                    r.offset for r in records
                ]
                holed += 1
        assert holed, "no partition had records enough for a hole"
        Pump(platform, ("registrar",)).drain()  # the MemoryRegistered that followed
        auditor = Follower(platform.runner, platform.store, d.archive, "audit", d.topic)
        for p, records in fetch_all(platform).items():
            if len(records) > 3:
                auditor.process(records[:2] + records[4:])
                end = records[-1].offset + 1
                assert platform.store.position(position_name("audit", p)) == end
        Pump(platform, ("indexer", "decay", "audit")).drain()
        assert_each_event_once(platform, accepted)
        for stream, trail in audit_trails(platform.store, "acme").items():
            events = {
                e.envelope.event_id: e.envelope
                for e in platform.log.read_stream("acme", stream, 1, 1_000)
            }
            assert audit.verify(trail, events) is None, stream


def test_a_registrar_that_crashed_with_part_of_its_archive_step_redoes_the_same_numbers(
    tmp_path: Path,
) -> None:
    # the archive's id rows, event rows and fates are one step of concurrent writes: a
    # crash can leave event rows and fates whose id rows never landed. The batch is redone
    # from the stored position and numbers each event as before, once
    with running_distributed(distributed_settings(tmp_path / "data")) as platform:
        result = platform.app.publish(
            CTX, [declare(f"fact number {i}", f"user:U{i % STREAMS}") for i in range(16)]
        )
        accepted = [a.event_id for a in result.accepted]
        d = platform.distributed
        assert d is not None
        crashing = sequencer(platform)
        placed: list[ArchivedEvent] = []
        # this process's archive: the same connection, but half of the id rows never land
        archive = type(d.archive).__new__(type(d.archive))
        archive.__dict__.update(d.archive.__dict__)
        real_write, real_record = archive._write, archive.record
        lost: set[str] = set()

        turn = itertools.count()

        def write_some(items: Any) -> None:
            kept = []
            for item in items:
                if item[1] == "by_id:put" and next(turn) % 2 == 0:
                    lost.add(item[2][1])  # (keyspace, statement, [tenant, event_id, ...])
                    continue
                kept.append(item)
            real_write(kept)

        def record_then_crash(events: Any, fates: Any) -> None:
            real_record(events, fates)
            placed.extend(events)
            raise RuntimeError("the process died before its store commit")

        archive._write = write_some  # type: ignore[method-assign]
        archive.record = record_then_crash  # type: ignore[method-assign]
        crashing.archive = archive
        batches = {p: r for p, r in fetch_all(platform).items() if r}
        for records in batches.values():
            with pytest.raises(RuntimeError, match="died"):
                crashing.process(records)
        numbered = {(e.envelope.stream, e.envelope.event_id): e.envelope.seq for e in placed}
        assert len(numbered) == len(accepted)
        missing = [e for e in placed if e.envelope.event_id in lost]
        assert missing, "every id row landed"
        assert not d.archive.locate([("acme", e.envelope.event_id) for e in missing])
        assert all(platform.store.position(position_name("registrar", p)) == 0 for p in batches)
        Pump(platform).drain()
        assert_each_event_once(platform, accepted)
        for stream in {s for s, _ in numbered}:
            events = platform.log.read_stream("acme", stream, 1, 1_000)
            again = {
                (stream, e.envelope.event_id): e.envelope.seq
                for e in events
                if (stream, e.envelope.event_id) in numbered
            }
            assert again == {k: v for k, v in numbered.items() if k[0] == stream}


def test_ownership_fences_only_a_partition_it_lost(tmp_path: Path) -> None:
    # on the embedded store (the same port contract): no services needed
    from mnemo.adapters.sqlite_store import SqliteMemoryStore
    from mnemo.domain.errors import FencedOff

    store = SqliteMemoryStore(tmp_path / "store.db")
    mine, theirs = Ownership(store, "audit"), Ownership(store, "audit")

    def commit(owner: Ownership, partition: int, epoch: int | None) -> None:
        try:
            with store.transaction() as tx:
                tx.set_position(position_name("audit", partition), 5, epoch)
        except FencedOff as exc:
            owner.fence(partition, exc)

    mine.assign([0, 1])
    stale = mine.epoch(0)
    # a batch that outlives its revocation, and this worker is given the partition again
    mine.revoke([0, 1])
    mine.assign([0, 1])
    commit(mine, 0, stale)
    assert mine.snapshot() == {"assigned": [0, 1], "fenced": [], "refused_commits": 1}
    commit(mine, 0, mine.epoch(0))
    assert store.position(position_name("audit", 0)) == 5
    # another worker is given partition 1: this one's commits for it are refused, and it
    # leaves the partition alone until it is assigned again
    theirs.assign([1])
    commit(mine, 1, mine.epoch(1))
    assert mine.snapshot()["fenced"] == [1]
    assert mine.epoch(1) is None
    assert mine.epoch(2) is None  # never assigned: never claimed
    assert store.position(position_name("audit", 1)) == 0
    commit(theirs, 1, theirs.epoch(1))
    assert store.position(position_name("audit", 1)) == 5
    store.close()


def test_a_worker_fills_in_the_records_its_stream_never_brought(tmp_path: Path) -> None:
    # the group's committed offset ran past the stored position at the end of a burst (a
    # worker that lost the partitions acknowledged records it left alone): no record
    # follows, so nothing reaches the new owner's stream, and the held partitions are read
    # from the topic at their stored positions instead
    from mnemo.entrypoints.workers import Worker

    with running_distributed(distributed_settings(tmp_path / "data")) as platform:
        result = platform.app.publish(
            CTX, [declare(f"fact number {i}", f"user:U{i % STREAMS}") for i in range(16)]
        )
        accepted = [a.event_id for a in result.accepted]
        topic = platform.distributed.topic  # type: ignore[union-attr]
        ends = topic.end_offsets()
        busy = sorted(p for p, end in ends.items() if end)
        assert len(busy) >= 2, ends
        held, left = busy[:-1], busy[-1]
        worker = Worker("registrar", platform.settings, platform)
        try:
            worker.ownership.assign(held)
            # a partition whose stream brought a batch just now is the stream's to handle
            worker._arrived[held[0]] = time.monotonic()
            worker.fill_in(quiet=60.0)
            assert platform.store.position(position_name("registrar", held[0])) == 0
            looks = 0
            while worker.fill_in(quiet=0.0):  # the registrar's own records follow its batch
                looks += 1
                assert looks < 20
            lag = worker.lag()["registrar"]
            assert [lag[p] for p in held] == [0] * len(held)
            # a partition this worker does not hold is left to its owner
            assert platform.store.position(position_name("registrar", left)) == 0
            assert lag[left] == ends[left]
            worker.ownership.assign(busy)
            while worker.fill_in(quiet=0.0):
                looks += 1
                assert looks < 40
            assert worker.lag() == {"registrar": {p: 0 for p in sorted(ends)}}
            assert worker.filled_in >= sum(ends.values())
            assert (
                f'mnemo_consumer_filled_in_records_total{{consumer="registrar"}} '
                f"{worker.filled_in}" in worker.metrics_text()
            )
        finally:
            worker.executor.shutdown(wait=True)
            worker._unwatch()
        Pump(platform, ("indexer", "decay", "audit")).drain()
        assert_each_event_once(platform, accepted)


def declared_batch(platform: Platform) -> tuple[list[str], list[LogRecord], list[int]]:
    """Twelve declarations published over the streams: their event ids, every record of
    the topic as one batch, and the partitions it spans."""
    result = platform.app.publish(
        CTX, [declare(f"fact number {i}", f"user:U{i % STREAMS}") for i in range(12)]
    )
    batch = [r for records in fetch_all(platform).values() for r in records]
    return [a.event_id for a in result.accepted], batch, sorted({r.partition for r in batch})


def count_batches(worker: Any) -> list[int]:
    """The sizes of the batches `worker`'s processor handles, as they are handled."""
    calls: list[int] = []
    real = worker.processor.process

    def counted(records: Any) -> int:
        calls.append(len(records))
        return real(records)

    worker.processor.process = counted
    return calls


def test_a_follower_handles_a_batch_once_the_registrar_has_passed_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a follower's stream brings it each record when it brings the registrar the same: the
    # worker watches the registrar's positions and handles the batch once, not first for
    # nothing (NotReady) and then again
    import asyncio
    import threading

    from mnemo.entrypoints import workers
    from mnemo.entrypoints.workers import Worker

    # however slow this machine, the follower goes on watching until the registrar passes
    monkeypatch.setattr(workers, "_WAIT_LOOK_LIMIT", 300.0)
    with running_distributed(distributed_settings(tmp_path / "data")) as platform:
        accepted, batch, partitions = declared_batch(platform)
        worker = Worker("audit", platform.settings, platform)  # it reads every event
        calls = count_batches(worker)
        looks = threading.Semaphore(0)
        positions = platform.store.positions

        def looked(names: Any) -> dict[str, int]:
            looks.release()
            return positions(names)

        platform.store.positions = looked  # type: ignore[method-assign]
        try:
            worker.ownership.assign(partitions)
            handled = threading.Thread(target=asyncio.run, args=(worker._process(batch),))
            handled.start()
            for _ in range(3):  # the follower looks at the registrar's positions, and waits
                assert looks.acquire(timeout=30)
            assert calls == []
            Pump(platform, ("registrar",)).drain()
            handled.join(timeout=60)
            assert not handled.is_alive()
            assert calls == [len(batch)]
            for p in partitions:
                end = max(r.offset for r in batch if r.partition == p) + 1
                assert platform.store.position(position_name("audit", p)) == end
        finally:
            worker.executor.shutdown(wait=True)
            worker._unwatch()
        Pump(platform, ("registrar", "indexer", "decay", "audit")).drain()
        assert_each_event_once(platform, accepted)


def test_an_off_path_follower_gives_way_while_the_registrar_has_a_backlog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the audit consumer is off the path from a publish to its search: while the registrar
    # has more than `give_way_backlog` records to take in a batch's partitions, the batch
    # waits (its records, their store and vault requests, leave the machine to the path)
    import asyncio
    import threading

    from mnemo.entrypoints import workers
    from mnemo.entrypoints.workers import Worker

    monkeypatch.setattr(workers, "_WAIT_LOOK_LIMIT", 300.0)
    settings = distributed_settings(tmp_path / "data", give_way_backlog=1, give_way_seconds=300.0)
    with running_distributed(settings) as platform:
        accepted, batch, partitions = declared_batch(platform)
        worker = Worker("audit", platform.settings, platform)
        calls = count_batches(worker)
        looks = threading.Semaphore(0)
        backlog = worker.processor.sequencer_backlog  # type: ignore[union-attr]

        def looked(ends: Any) -> int:
            looks.release()
            return backlog(ends)

        worker.processor.sequencer_backlog = looked  # type: ignore[union-attr]
        try:
            worker.ownership.assign(partitions)
            handled = threading.Thread(
                target=asyncio.run, args=(worker._process(batch),), daemon=True
            )
            handled.start()
            for _ in range(3):  # it looks at the registrar's backlog, and gives way
                assert looks.acquire(timeout=30)
            assert calls == []
            assert 'mnemo_consumer_giving_way{consumer="audit"} 1' in worker.metrics_text()
            # the held partitions are not quiet (the worker holds their batch): the fill-in
            # look, due for a stream that brought nothing for seconds, reads none of them
            worker._arrived.update({p: 0.0 for p in partitions})
            for _ in range(2):
                assert looks.acquire(timeout=30)
            assert worker.fill_in() == 0
            assert calls == []
            # the registrar takes every record (its own emitted ones too): no backlog left
            Pump(platform, ("registrar",)).drain()
            handled.join(timeout=60)
            assert not handled.is_alive()
            assert calls == [len(batch)]
            text = worker.metrics_text()
            assert 'mnemo_consumer_giving_way{consumer="audit"} 0' in text
            gave = float(
                text.split('mnemo_consumer_gave_way_seconds_total{consumer="audit"} ')[1].split()[0]
            )
            assert gave > 0
        finally:
            worker.executor.shutdown(wait=True)
            worker._unwatch()
        Pump(platform, ("registrar", "indexer", "decay", "audit")).drain()
        assert_each_event_once(platform, accepted)


def test_an_off_path_follower_gives_way_for_give_way_seconds_at_most(tmp_path: Path) -> None:
    # a registrar that stays behind (here: a second publish it never takes) holds the
    # decay consumer's batch for `give_way_seconds`, then the batch is handled
    import asyncio

    from mnemo.entrypoints.workers import Worker

    settings = distributed_settings(tmp_path / "data", give_way_backlog=1, give_way_seconds=0.5)
    with running_distributed(settings) as platform:
        accepted, _, _ = declared_batch(platform)
        Pump(platform, ("registrar",)).drain()
        registered = [r for records in fetch_all(platform).values() for r in records]
        # the registrar now has a backlog again
        later = [
            a.event_id
            for a in platform.app.publish(
                CTX, [declare(f"another fact {i}", f"user:U{i % STREAMS}") for i in range(12)]
            ).accepted
        ]
        worker = Worker("decay", platform.settings, platform)
        try:
            worker.ownership.assign(sorted({r.partition for r in registered}))
            started = time.monotonic()
            asyncio.run(asyncio.wait_for(worker._process(registered), 60))
            waited = time.monotonic() - started
            assert waited >= 0.5
            for p in {r.partition for r in registered}:
                end = max(r.offset for r in registered if r.partition == p) + 1
                assert platform.store.position(position_name("decay", p)) == end
            assert worker.gave_way_seconds >= 0.5
        finally:
            worker.executor.shutdown(wait=True)
            worker._unwatch()
        Pump(platform, ("registrar", "indexer", "decay", "audit")).drain()
        assert_each_event_once(platform, accepted + later)


def test_a_follower_stops_giving_way_once_its_partitions_are_revoked(tmp_path: Path) -> None:
    # a rebalance takes the partitions away while a batch of decay's waits: the batch goes
    # on at once (and leaves the records it no longer owns), not at the end of the wait
    import asyncio
    import threading

    from mnemo.entrypoints.workers import Worker

    settings = distributed_settings(tmp_path / "data", give_way_backlog=1, give_way_seconds=300.0)
    with running_distributed(settings) as platform:
        accepted, batch, partitions = declared_batch(platform)  # the registrar is behind
        worker = Worker("decay", platform.settings, platform)
        try:
            worker.ownership.assign(partitions)
            handled = threading.Thread(
                target=asyncio.run, args=(worker._process(batch),), daemon=True
            )
            handled.start()
            deadline = time.monotonic() + 30
            while not worker.giving_way:
                assert time.monotonic() < deadline
                assert handled.is_alive()
                time.sleep(0.01)
            worker.ownership.revoke(partitions)
            handled.join(timeout=30)
            assert not handled.is_alive()
            assert not worker.giving_way
            for p in partitions:  # the new owner's to handle
                assert platform.store.position(position_name("decay", p)) == 0
        finally:
            worker.executor.shutdown(wait=True)
            worker._unwatch()
        Pump(platform, ("registrar", "indexer", "decay", "audit")).drain()
        assert_each_event_once(platform, accepted)


def test_a_follower_handles_at_once_a_batch_of_what_it_does_not_read(tmp_path: Path) -> None:
    # the indexer reads no declaration: a batch of them is handled, and its position moved
    # past them, without a look at the registrar's positions and before the registrar ran
    import asyncio

    from mnemo.entrypoints.workers import Worker

    with running_distributed(distributed_settings(tmp_path / "data")) as platform:
        accepted, batch, partitions = declared_batch(platform)
        worker = Worker("indexer", platform.settings, platform)
        looked: list[Any] = []
        positions = platform.store.positions

        def looking(names: Any) -> dict[str, int]:
            looked.append(names)
            return positions(names)

        platform.store.positions = looking  # type: ignore[method-assign]
        try:
            worker.ownership.assign(partitions)
            asyncio.run(asyncio.wait_for(worker._process(batch), 60))
            assert looked == []
            for p in partitions:
                end = max(r.offset for r in batch if r.partition == p) + 1
                assert platform.store.position(position_name("indexer", p)) == end
                assert platform.store.position(position_name("registrar", p)) == 0
        finally:
            platform.store.positions = positions  # type: ignore[method-assign]
            worker.executor.shutdown(wait=True)
            worker._unwatch()
        Pump(platform, ("registrar", "indexer", "decay", "audit")).drain()
        assert_each_event_once(platform, accepted)
        hits = platform.app.search(CTX, "fact number 3", streams=[f"user:U{3 % STREAMS}"])
        assert "fact number 3" in [h.memory.content for h in hits]


def test_a_sequencer_reads_a_streams_head_again_only_after_another_process_moved_on(
    tmp_path: Path,
) -> None:
    # between its batches of a partition the registrar keeps the heads it numbered up to;
    # once another process has handled the partition, it reads them from the archive again
    with running_distributed(distributed_settings(tmp_path / "data")) as platform:
        topic = platform.distributed.topic  # type: ignore[union-attr]
        archive = platform.distributed.archive  # type: ignore[union-attr]
        mine = sequencer(platform)
        asked: list[tuple[str, str]] = []
        real = archive.stream_heads

        def heads(keys: Any, below: Any = None) -> dict[tuple[str, str], int]:
            asked.extend(keys)
            return real(keys, below)

        archive.stream_heads = heads  # type: ignore[method-assign]

        def step(processor: Sequencer, at: Platform) -> None:
            for p in topic.partitions():
                start = at.store.position(position_name("registrar", p))
                records = topic.fetch(p, start, 1_000)
                if records:
                    processor.process(records)

        numbers = itertools.count()

        def publish(*streams: str) -> list[str]:
            events = [declare(f"fact {next(numbers)} on {s}", s) for s in streams]
            return [a.event_id for a in platform.app.publish(CTX, events).accepted]

        accepted = publish("user:U0", "user:U1", "user:U0")
        step(mine, platform)
        assert sorted(set(asked)) == [("acme", "user:U0"), ("acme", "user:U1")]
        asked.clear()
        # the next batches: their MemoryRegistered records, and a new stream beside them
        accepted += publish("user:U1", "user:U2")
        step(mine, platform)
        assert asked == [("acme", "user:U2")]
        # another process handles the partitions, then this one again
        accepted += publish("user:U0", "user:U1")
        with second_process(platform) as other:
            step(sequencer(other), other)
        asked.clear()
        accepted += publish("user:U0", "user:U1", "user:U2")
        step(mine, platform)
        assert sorted(set(asked)) == [("acme", f"user:U{s}") for s in range(3)]
        Pump(platform).drain()
        assert_each_event_once(platform, accepted)


def test_a_zombie_sequencers_late_archive_rows_do_not_list_an_event_twice(
    tmp_path: Path,
) -> None:
    """A sequencer that lost its partition places an event again, independently of the new
    owner: same stream and number, another archive position, written after the owner's
    (earlier or later). Replay and the tails list the event once, at one position."""
    with running_distributed(distributed_settings(tmp_path / "data")) as platform:
        result = platform.app.publish(CTX, [declare(f"fact {i}", "user:U1") for i in range(3)])
        Pump(platform, ("registrar",)).drain()
        archive = platform.distributed.archive  # type: ignore[union-attr]

        def tails() -> tuple[list[tuple[str, int]], ...]:
            deadline = time.monotonic() + 30
            while True:  # a tail lists positions once they are a second old
                found = tuple(
                    [(e.envelope.event_id, e.offset) for e in archive.read(0, 1_000, scope)]
                    for scope in ("acme", None)
                )
                if all(len(f) == 6 for f in found) or time.monotonic() > deadline:
                    return found
                time.sleep(0.2)

        before = tails()
        assert before[0] == before[1]
        assert len(before[0]) == 6  # 3 declared, 3 registered
        target = result.accepted[1].event_id
        fate = archive.locate([("acme", target)])[("acme", target)]
        stored = archive.get("acme", target)
        assert stored is not None
        for shift in (2_000, -2_000):  # a later position, then an earlier one
            late = ArchivedEvent(
                stored.envelope, fate.partition, fate.offset, fate.position + shift
            )
            archive.record([late], [replace(fate, position=late.position)])
            after = tails()
            for listed in after:
                assert [e for e, _ in listed].count(target) == 1, listed
                assert sorted(e for e, _ in listed) == sorted(e for e, _ in before[0])
            position = dict(after[0])[target]
            assert position == min(fate.position, fate.position + shift)
        replayed = platform.app.replay(CTX, "user:U1", 1, 100)
        assert [e.envelope.event_id for e in replayed].count(target) == 1
        assert [e.envelope.seq for e in replayed] == [1, 2, 3, 4, 5, 6]


def test_feedback_from_several_partitions_moves_a_memory_only_in_its_own_partition(
    tmp_path: Path,
) -> None:
    """A memory is cited from eight other streams, spread over the partitions, and two
    decay processes hold half of the partitions each: neither moves the memory where the
    citations are; each relays them to the memory's stream. There, the owner that lost the
    partition moves nothing (its commit is refused) and the new owner moves the weight
    once per citation, in the stream's order."""
    with running_distributed(distributed_settings(tmp_path / "data")) as platform:
        declared = platform.app.publish(CTX, [declare("the office opens at nine", "team:facts")])
        Pump(platform).drain()
        [outcome] = platform.store.outcome("acme", declared.accepted[0].event_id)
        memory_id = str(outcome.memory_id)
        with platform.store.transaction() as tx:
            start = tx.weight_of("acme", memory_id)
        assert start is not None
        archive = platform.distributed.archive  # type: ignore[union-attr]
        home = archive.locate([("acme", declared.accepted[0].event_id)])
        home_partition = home[("acme", declared.accepted[0].event_id)].partition
        # eight contexts, one per stream, each showing the memory, and the answer to each
        # citing it: a citation names the context that showed the memory
        shown = [
            platform.app.context(CTX, ContextRequest(subjects=(f"user:C{i}", "team:facts")))
            for i in range(8)
        ]
        assert all(
            memory_id in [i.candidate.memory.memory_id for i in s.assembly.included] for s in shown
        )
        Pump(platform, ("registrar",)).drain()
        cites = [
            {
                "type": "MemoryCited",
                "schema_version": 1,
                "stream": f"user:C{i}",
                "payload": {
                    "memory_id": memory_id,
                    "request_id": s.request_id,
                    "position": "beginning",
                },
            }
            for i, s in enumerate(shown)
        ]
        platform.app.publish(CTX, cites)
        Pump(platform, ("registrar",)).drain()
        everything = sorted(fetch_all(platform))
        first = Follower(platform.runner, platform.store, archive, "decay")
        owned(first, platform).assign([p for p in everything if p % 2 == 0])
        with second_process(platform) as other:
            second = Follower(other.runner, other.store, other.distributed.archive, "decay")  # type: ignore[union-attr]
            owned(second, other).assign([p for p in everything if p % 2 == 1])
            for partition, records in fetch_all(platform).items():
                start_at = platform.store.position(position_name("decay", partition))
                todo = [r for r in records if r.offset >= start_at]
                if todo:
                    (first if partition % 2 == 0 else second).process(todo)
            with platform.store.transaction() as tx:
                assert tx.weight_of("acme", memory_id) == start  # nothing moved elsewhere
            Pump(platform, ("registrar",)).drain()  # sequences the relays
            relays = [
                e.envelope
                for e in platform.log.read_stream("acme", "team:facts", 1, 100)
                if e.envelope.type == "FeedbackRelayed"
                and e.envelope.payload["feedback"] == "MemoryCited"
            ]
            assert len(relays) == 8
            # the memory's partition changes hands before its owner handles the relays
            zombie, successor = (first, second) if home_partition % 2 == 0 else (second, first)
            new_owner = other if successor is second else platform
            owned(successor, new_owner).assign(
                [*sorted(successor.ownership.assigned), home_partition]
            )  # type: ignore[union-attr]
            records = fetch_all(platform)[home_partition]
            start_at = platform.store.position(position_name("decay", home_partition))
            todo = [r for r in records if r.offset >= start_at]
            assert zombie.process(todo) == 0
            with platform.store.transaction() as tx:
                assert tx.weight_of("acme", memory_id) == start
            assert successor.process(todo) == len(todo)
        Pump(platform).drain()
        with platform.store.transaction() as tx:
            moved = tx.weight_of("acme", memory_id)
        assert moved is not None
        assert moved[0] == round(min(0.99, start[0] + 8 * 0.05), 6)
        assert moved[1] == round(min(1.0, start[1] + 8 * 0.02), 6)

        def decided(stream: str) -> list[Any]:
            events = platform.log.read_stream("acme", stream, 1, 1_000)
            return [e for e in events if e.envelope.type == "MemoryDecayed"]

        assert len(decided("team:facts")) == 8
        assert [decided(f"user:C{i}") for i in range(8)] == [[]] * 8
        assert platform.app.get(CTX, memory_id).semantic_weight == moved[0]
        [stats] = platform.store.memory_stats("acme", [memory_id])
        assert stats.cited == 8


def test_the_decay_scan_waits_for_the_registrar_not_only_for_decays_position(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # decay passes over declarations before the registrar decides on them: its position at
    # the topic's end does not mean the memories they register (and their timers) are in
    from mnemo.entrypoints.workers import Worker

    with running_distributed(distributed_settings(tmp_path / "data")) as platform:
        platform.app.publish(
            CTX, [declare(f"fact number {i}", f"user:U{i % STREAMS}") for i in range(6)]
        )
        scans: list[int] = []
        monkeypatch.setattr(platform.runner, "decay_scan", lambda: scans.append(1) or 0)
        worker = Worker("decay", platform.settings, platform)
        try:
            Pump(platform, ("decay",)).drain()  # to the end, with nothing decided
            worker._scan_when_caught_up()
            assert scans == []
            Pump(platform, ("registrar",)).drain()  # registered: new records decay reads
            worker._scan_when_caught_up()
            assert scans == []
            Pump(platform, ("registrar", "decay")).drain()
            worker._scan_when_caught_up()
            assert scans == [1]
        finally:
            worker.executor.shutdown(wait=True)
            worker._unwatch()
