"""Contract of the EventLog port for logs that sequence at append time (the embedded SQLite
log). The distributed log (a Kafka topic sequenced by the registrar, ADR 0008) numbers
events after the append, so `Appended.seq` is 0 there and a stale `expected_seq` ends as
an outcome instead of a ConflictError; tests/integration/test_distributed_log.py holds it
to the same properties (gapless streams, one event per id, reads by stream, tenant, id
and cause, concurrent publishers) on a real broker and Cassandra node."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mnemo.adapters.sqlite_log import SqliteEventLog
from mnemo.domain.errors import ConflictError
from mnemo.domain.events import Actor, ActorKind, Envelope
from mnemo.domain.ids import new_event_id
from mnemo.ports import EventLog

T0 = datetime(2026, 11, 30, tzinfo=UTC)


def ev(
    stream: str = "user:U1", tenant: str = "acme", expected: int | None = None, i: int = 0
) -> Envelope:
    return Envelope(
        event_id=new_event_id(T0 + timedelta(milliseconds=i)),
        type="ObservationRecorded",
        schema_version=2,
        tenant=tenant,
        stream=stream,
        expected_seq=expected,
        occurred_at=T0,
        actor=Actor(kind=ActorKind.AGENT, id="a"),
        payload={"text": f"event {i}"},
    )


class EventLogContract:
    def make_log(self, path: Path) -> EventLog:
        raise NotImplementedError

    @pytest.fixture
    def log(self, tmp_path: Path) -> EventLog:
        return self.make_log(tmp_path)

    def test_streams_get_gapless_sequences_and_offsets_grow(self, log: EventLog) -> None:
        got = log.append(
            [ev("user:U1"), ev("user:U2"), ev("user:U1"), ev("user:U1", tenant="other")]
        )
        assert [a.seq for a in got] == [1, 1, 2, 1]
        assert [a.offset for a in got] == sorted(a.offset for a in got)
        assert len({a.offset for a in got}) == 4
        assert log.stream_head("acme", "user:U1") == 2
        assert log.stream_head("other", "user:U1") == 1
        assert log.stream_head("acme", "nobody") == 0

    def test_an_event_id_is_appended_once(self, log: EventLog) -> None:
        event = ev()
        [first] = log.append([event])
        [again] = log.append([event])
        assert again.duplicate
        assert not first.duplicate
        assert (again.offset, again.seq) == (first.offset, first.seq)
        assert log.head() == first.offset
        assert len(log.read(0, 100)) == 1

    def test_a_stale_expected_sequence_rejects_the_whole_batch(self, log: EventLog) -> None:
        log.append([ev(), ev()])
        with pytest.raises(ConflictError) as caught:
            log.append([ev("user:U9"), ev("user:U1", expected=1)])
        assert caught.value.code == "STALE_SEQUENCE"
        assert log.stream_head("acme", "user:U9") == 0  # nothing of the batch landed
        [ok] = log.append([ev("user:U1", expected=2)])
        assert ok.seq == 3

    def test_reads_by_offset_stream_and_tenant(self, log: EventLog) -> None:
        appended = log.append(
            [ev("user:U1", i=i) for i in range(5)] + [ev("user:U1", tenant="other")]
        )
        assert [e.offset for e in log.read(appended[1].offset, 2)] == [
            a.offset for a in appended[2:4]
        ]
        stream = log.read_stream("acme", "user:U1", 3, 100)
        assert [e.envelope.seq for e in stream] == [3, 4, 5]
        assert all(e.envelope.tenant == "acme" for e in stream)
        assert [e.envelope.tenant for e in log.read_tenant("other", 0, 100)] == ["other"]
        found = log.get("acme", appended[2].event_id)
        assert found is not None
        assert found.envelope.payload == {"text": "event 2"}
        assert log.get("acme", new_event_id(T0)) is None
        assert log.get("other", appended[2].event_id) is None

    def test_events_are_found_by_their_cause(self, log: EventLog) -> None:
        [cause] = log.append([ev()])
        effects = [ev(i=i).model_copy(update={"causation_id": cause.event_id}) for i in (1, 2)]
        log.append(effects)
        log.append([ev(tenant="other", i=3).model_copy(update={"causation_id": cause.event_id})])
        found = log.caused_by("acme", cause.event_id)
        assert [e.envelope.event_id for e in found] == [e.event_id for e in effects]
        assert log.caused_by("acme", effects[0].event_id) == []

    def test_the_same_event_id_in_two_tenants_is_two_events(self, log: EventLog) -> None:
        mine = ev()
        theirs = mine.model_copy(update={"tenant": "other"})
        [a] = log.append([mine])
        [b] = log.append([theirs])
        assert not b.duplicate
        assert b.offset != a.offset
        assert [e.envelope.tenant for e in log.read_stream("other", "user:U1", 1, 10)] == ["other"]

    def test_concurrent_publishers_keep_each_stream_gapless(self, log: EventLog) -> None:
        def publish(worker: int) -> None:
            for i in range(25):
                log.append([ev(f"user:U{i % 3}", i=worker * 100 + i)])

        threads = [threading.Thread(target=publish, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for s in range(3):
            seqs = [e.envelope.seq for e in log.read_stream("acme", f"user:U{s}", 1, 1000)]
            assert seqs == list(range(1, len(seqs) + 1))
        assert log.head() == 100


class TestSqliteEventLog(EventLogContract):
    def make_log(self, path: Path) -> EventLog:
        return SqliteEventLog(path / "log.sqlite3", "NORMAL")

    def test_survives_reopening(self, tmp_path: Path) -> None:
        first = SqliteEventLog(tmp_path / "log.sqlite3")
        first.append([ev(), ev()])
        first.close()
        again = SqliteEventLog(tmp_path / "log.sqlite3")
        assert again.head() == 2
        assert again.append([ev()])[0].seq == 3
