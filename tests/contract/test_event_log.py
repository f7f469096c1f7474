"""Contract of the EventLog port, run against the embedded SQLite log and the distributed
log (a Kafka topic that the registrar sequences into a Cassandra archive, ADR 0008).

What every log holds: gapless sequences per stream, one event per id and tenant, a stale
`expected_seq` never applied and always reported, reads by offset, stream, tenant, id and
cause, and streams that stay gapless under concurrent publishers. Where the two differ by
design, each suite says so: the SQLite log sequences at append time (`Appended.seq`, the
duplicate flag, a batch refused whole with ConflictError), while the distributed log
numbers events when the sequencer reaches them (`Appended.seq` is 0, a stale event is
refused by an outcome). `settle` is the contract's word for "until the log has sequenced
what was appended": nothing for SQLite, the sequencer's pass over the topic for Kafka."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson
import pytest

from mnemo.adapters.sqlite_log import SqliteEventLog
from mnemo.domain.errors import ConflictError
from mnemo.domain.events import Actor, ActorKind, Envelope
from mnemo.domain.ids import new_event_id
from mnemo.ports import Appended, EventLog

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


def seqs(log: EventLog, tenant: str, stream: str) -> list[int | None]:
    return [e.envelope.seq for e in log.read_stream(tenant, stream, 1, 1000)]


class EventLogContract:
    @contextmanager
    def opened(self, path: Path) -> Iterator[EventLog]:
        raise NotImplementedError
        yield  # pragma: no cover

    def settle(self, log: EventLog) -> None:
        """Until the log has sequenced everything appended so far."""

    def refusal(self, log: EventLog, events: Sequence[Envelope]) -> str:
        """Append a batch holding a stale expected_seq; the code it was refused with."""
        raise NotImplementedError

    def reused(self, log: EventLog, events: Sequence[Envelope]) -> str:
        """Append a batch reusing an event id of the log with other content; the code it
        was refused with."""
        raise NotImplementedError

    @pytest.fixture
    def log(self, tmp_path: Path) -> Iterator[EventLog]:
        with self.opened(tmp_path) as log:
            yield log

    def append(self, log: EventLog, events: Sequence[Envelope]) -> list[Appended]:
        appended = log.append(events)
        self.settle(log)
        return appended

    def test_streams_get_gapless_sequences(self, log: EventLog) -> None:
        got = self.append(
            log, [ev("user:U1"), ev("user:U2"), ev("user:U1"), ev("user:U1", tenant="other")]
        )
        assert len({a.offset for a in got}) == 4
        assert seqs(log, "acme", "user:U1") == [1, 2]
        assert seqs(log, "acme", "user:U2") == [1]
        assert seqs(log, "other", "user:U1") == [1]
        assert [e.envelope.event_id for e in log.read_stream("acme", "user:U1", 1, 10)] == [
            got[0].event_id,
            got[2].event_id,
        ]
        assert log.stream_head("acme", "user:U1") == 2
        assert log.stream_head("other", "user:U1") == 1
        assert log.stream_head("acme", "nobody") == 0

    def test_an_event_id_is_kept_once(self, log: EventLog) -> None:
        event = ev()
        self.append(log, [event])
        self.append(log, [event, ev("user:U2")])  # a publisher's retry, then more
        assert seqs(log, "acme", "user:U1") == [1]
        assert [e.envelope.event_id for e in log.read(0, 100)].count(event.event_id) == 1
        assert len(log.read(0, 100)) == 2

    def test_an_id_sent_again_with_other_content_is_refused_and_the_first_kept(
        self, log: EventLog
    ) -> None:
        first = ev().model_copy(update={"digest": "a" * 32})
        self.append(log, [first])
        other = first.model_copy(update={"digest": "b" * 32, "payload": {"text": "changed"}})
        assert self.reused(log, [other]) == "EVENT_ID_REUSED"
        held = log.get("acme", first.event_id)
        assert held is not None
        assert held.envelope.payload == {"text": "event 0"}
        assert held.envelope.digest == "a" * 32
        # the same digest is a retry; an event logged without one (Mnemo's own, or from
        # before digests) takes anything sent again under its id for a retry
        self.append(log, [first])
        plain = ev(i=1)
        self.append(log, [plain])
        self.append(log, [plain.model_copy(update={"digest": "c" * 32})])
        assert seqs(log, "acme", "user:U1") == [1, 2]
        assert len(log.read(0, 100)) == 2

    def test_a_stale_expected_sequence_is_never_applied(self, log: EventLog) -> None:
        self.append(log, [ev(), ev()])
        stale = ev("user:U1", expected=1)
        assert self.refusal(log, [stale]) == "STALE_SEQUENCE"
        assert log.get("acme", stale.event_id) is None
        assert seqs(log, "acme", "user:U1") == [1, 2]
        fresh = ev("user:U1", expected=2)
        self.append(log, [fresh])
        found = log.get("acme", fresh.event_id)
        assert found is not None
        assert found.envelope.seq == 3

    def test_a_tenants_newest_events_are_read_back_page_by_page(self, log: EventLog) -> None:
        """What the views of the latest events page with: newest first, below an offset,
        one tenant's only, whatever the offsets between them."""
        self.append(log, [ev("user:U1", i=i) for i in range(5)])
        self.append(log, [ev("user:U9", tenant="other")])
        self.append(log, [ev("user:U2", i=i) for i in range(5, 7)])
        ours = [e.offset for e in log.read_tenant("acme", 0, 100)]
        assert len(ours) == 7
        newest = log.read_tenant_back("acme", None, 3)
        assert [e.offset for e in newest] == ours[::-1][:3]
        assert all(e.envelope.tenant == "acme" for e in newest)
        page = log.read_tenant_back("acme", newest[-1].offset, 3)
        assert [e.offset for e in page] == ours[::-1][3:6]
        assert [e.offset for e in log.read_tenant_back("acme", ours[0], 10)] == []
        assert [e.offset for e in log.read_tenant_back("acme", ours[1], 10)] == [ours[0]]
        assert [e.envelope.tenant for e in log.read_tenant_back("other", None, 10)] == ["other"]
        assert log.read_tenant_back("nobody", None, 10) == []

    def test_reads_by_offset_stream_and_tenant(self, log: EventLog) -> None:
        appended = self.append(
            log, [ev("user:U1", i=i) for i in range(5)] + [ev("user:U1", tenant="other")]
        )
        everything = log.read(0, 100)
        assert len(everything) == 6
        offsets = [e.offset for e in everything]
        assert offsets == sorted(offsets)
        assert log.head() == offsets[-1]
        assert [e.offset for e in log.read(offsets[1], 2)] == offsets[2:4]
        stream = log.read_stream("acme", "user:U1", 3, 100)
        assert [e.envelope.seq for e in stream] == [3, 4, 5]
        assert all(e.envelope.tenant == "acme" for e in stream)
        assert [e.envelope.tenant for e in log.read_tenant("other", 0, 100)] == ["other"]
        assert len(log.read_tenant("acme", 0, 100)) == 5
        raw = log.read_stream_json("acme", "user:U1", 4, 100)
        assert [Envelope.model_validate_json(b).seq for b in raw] == [4, 5]
        found = log.get("acme", appended[2].event_id)
        assert found is not None
        assert found.envelope.payload == {"text": "event 2"}
        assert found.envelope.seq == 3
        assert log.get("acme", new_event_id(T0)) is None
        assert log.get("other", appended[2].event_id) is None

    def test_the_tenants_waiting_past_an_offset_with_their_first_event(self, log: EventLog) -> None:
        self.append(log, [ev(i=0), ev(tenant="other", i=1), ev(i=2), ev(tenant="third", i=3)])
        at = [e.offset for e in log.read(0, 10)]
        assert log.tenants_between(0, at[3]) == {"acme": at[0], "other": at[1], "third": at[3]}
        assert log.tenants_between(at[0], at[2]) == {"other": at[1], "acme": at[2]}
        assert log.tenants_between(at[1], at[1]) == {}
        assert log.tenants_between(at[3], at[3] + 1_000) == {}

    def test_events_are_found_by_their_cause(self, log: EventLog) -> None:
        [cause] = self.append(log, [ev()])
        effects = [ev(i=i).model_copy(update={"causation_id": cause.event_id}) for i in (1, 2)]
        self.append(log, effects)
        other = ev(tenant="other", i=3).model_copy(update={"causation_id": cause.event_id})
        self.append(log, [other])
        found = log.caused_by("acme", cause.event_id)
        assert [e.envelope.event_id for e in found] == [e.event_id for e in effects]
        assert log.caused_by("acme", effects[0].event_id) == []

    def test_the_same_event_id_in_two_tenants_is_two_events(self, log: EventLog) -> None:
        mine = ev()
        theirs = mine.model_copy(update={"tenant": "other"})
        self.append(log, [mine])
        self.append(log, [theirs])
        assert [e.envelope.tenant for e in log.read_stream("other", "user:U1", 1, 10)] == ["other"]
        assert [e.envelope.tenant for e in log.read_stream("acme", "user:U1", 1, 10)] == ["acme"]
        assert len(log.read(0, 10)) == 2

    def test_concurrent_publishers_keep_each_stream_gapless(self, log: EventLog) -> None:
        def publish(worker: int) -> None:
            for i in range(25):
                log.append([ev(f"user:U{i % 3}", i=worker * 100 + i)])

        threads = [threading.Thread(target=publish, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        self.settle(log)
        for s in range(3):
            got = seqs(log, "acme", f"user:U{s}")
            assert got == list(range(1, len(got) + 1))
        assert len(log.read(0, 1000)) == 100


class TestSqliteEventLog(EventLogContract):
    @contextmanager
    def opened(self, path: Path) -> Iterator[EventLog]:
        log = SqliteEventLog(path / "log.sqlite3", "NORMAL")
        try:
            yield log
        finally:
            log.close()

    def refusal(self, log: EventLog, events: Sequence[Envelope]) -> str:
        with pytest.raises(ConflictError) as caught:
            log.append(events)
        return caught.value.code

    def reused(self, log: EventLog, events: Sequence[Envelope]) -> str:
        return self.refusal(log, events)

    def test_a_reused_id_refuses_the_whole_batch(self, log: EventLog) -> None:
        first = ev().model_copy(update={"digest": "a" * 32})
        log.append([first])
        with pytest.raises(ConflictError) as caught:
            log.append([ev("user:U9"), first.model_copy(update={"digest": "b" * 32})])
        assert caught.value.code == "EVENT_ID_REUSED"
        assert caught.value.field == "event_id"
        assert log.stream_head("acme", "user:U9") == 0  # nothing of the batch landed

    def test_sequences_and_offsets_come_with_the_append(self, log: EventLog) -> None:
        got = log.append(
            [ev("user:U1"), ev("user:U2"), ev("user:U1"), ev("user:U1", tenant="other")]
        )
        assert [a.seq for a in got] == [1, 1, 2, 1]
        assert [a.offset for a in got] == sorted(a.offset for a in got)

    def test_a_repeated_id_is_flagged_at_the_append(self, log: EventLog) -> None:
        event = ev()
        [first] = log.append([event])
        [again] = log.append([event])
        assert again.duplicate
        assert not first.duplicate
        assert (again.offset, again.seq) == (first.offset, first.seq)
        assert log.head() == first.offset

    def test_a_stale_expected_sequence_rejects_the_whole_batch(self, log: EventLog) -> None:
        log.append([ev(), ev()])
        with pytest.raises(ConflictError) as caught:
            log.append([ev("user:U9"), ev("user:U1", expected=1)])
        assert caught.value.code == "STALE_SEQUENCE"
        assert log.stream_head("acme", "user:U9") == 0  # nothing of the batch landed
        [ok] = log.append([ev("user:U1", expected=2)])
        assert ok.seq == 3

    def test_survives_reopening(self, tmp_path: Path) -> None:
        first = SqliteEventLog(tmp_path / "log.sqlite3")
        first.append([ev(), ev()])
        first.close()
        again = SqliteEventLog(tmp_path / "log.sqlite3")
        assert again.head() == 2
        assert again.append([ev()])[0].seq == 3
        again.close()


class TestDistributedEventLog(EventLogContract):
    """On a real broker and Cassandra node: a topic of its own with 4 partitions, a fresh
    keyspace, and the registrar's sequencer driven in this process."""

    @contextmanager
    def opened(self, path: Path) -> Iterator[EventLog]:
        from tests.distributed_support import Pump, distributed_settings, running_distributed

        with running_distributed(distributed_settings(path / "data", partitions=4)) as platform:
            self.platform = platform
            self.pump = Pump(platform, consumers=("registrar",))
            yield platform.log

    def settle(self, log: EventLog) -> None:
        self.pump.drain()
        # archive reads return positions older than a second (ADR 0008): wait for them
        sequencer = self.pump.processors["registrar"]
        deadline = time.monotonic() + 30
        while len(log.read(0, 100_000)) < sequencer.counters.archived:
            assert time.monotonic() < deadline, "archived events did not become readable"
            time.sleep(0.1)

    def refusal(self, log: EventLog, events: Sequence[Envelope]) -> str:
        appended = self.append(log, events)
        codes = {
            o.reason_code
            for a in appended
            for o in self.platform.store.outcome(events[0].tenant, a.event_id)
        }
        assert len(codes) == 1, codes
        return str(codes.pop())

    def reused(self, log: EventLog, events: Sequence[Envelope]) -> str:
        """The sequencer sends the record to the dead-letter topic with its reason, and its
        fate names the id (the id's outcome stays the first event's)."""
        appended = self.append(log, events)
        topic = self.platform.distributed.topic  # type: ignore[union-attr]
        letters = [
            r
            for r in topic.fetch_dead_letters()
            if orjson.loads(r.value)["event_id"] in {a.event_id for a in appended}
        ]
        assert len(letters) == len(events)
        reasons = {dict(r.headers)["mnemo-dlq-reason"].decode() for r in letters}
        assert len(reasons) == 1, reasons
        return reasons.pop()

    def test_the_same_id_twice_in_one_batch_with_other_content_keeps_the_first(
        self, log: EventLog
    ) -> None:
        first = ev().model_copy(update={"digest": "a" * 32})
        other = first.model_copy(update={"digest": "b" * 32, "payload": {"text": "changed"}})
        self.append(log, [first, other])
        held = log.get("acme", first.event_id)
        assert held is not None
        assert held.envelope.digest == "a" * 32
        topic = self.platform.distributed.topic  # type: ignore[union-attr]
        [letter] = topic.fetch_dead_letters()
        assert dict(letter.headers)["mnemo-dlq-reason"] == b"EVENT_ID_REUSED"
        assert orjson.loads(letter.value)["payload"] == {"text": "changed"}

    def test_the_append_answers_before_sequencing(self, log: EventLog) -> None:
        [a] = log.append([ev()])
        assert a.seq == 0
        assert not a.duplicate
        self.settle(log)
        found = log.get("acme", a.event_id)
        assert found is not None
        assert found.envelope.seq == 1
