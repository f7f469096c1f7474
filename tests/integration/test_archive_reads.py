"""How the distributed archive is read, on a real Cassandra node: tails and views go by
position, replay and sync by a stream's numbers. Rows of one batch land in concurrent
unlogged batches, and two sequencers' clocks can give two events one position, so:

- a stream is read up to its first missing number (a reader given seq 3 before seq 2 had
  landed moved past seq 2 for good: a live tail, a replay's `next`, a device's sync);
- a page never ends between two events of one position (the next page's bound is
  exclusive, and the second event was never listed);
- a position whose stream row has not landed yet stops the page before it, and a row an
  event placed twice left behind is passed over (a page of such rows held a tail's cursor
  in place for good)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.contract.test_event_log import ev
from tests.distributed_support import distributed_settings, running_distributed

from mnemo.adapters.cassandra_archive import CassandraEventArchive
from mnemo.adapters.cassandra_store import CassandraMemoryStore
from mnemo.domain.events import Envelope
from mnemo.ports import ArchivedEvent

NOW = 1_800_000_000_000_000  # microseconds: the archive's clock in these tests


class Clock:
    def __init__(self) -> None:
        self.now = NOW

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def store(tmp_path: Path) -> Iterator[CassandraMemoryStore]:
    with running_distributed(distributed_settings(tmp_path / "data")) as platform:
        assert isinstance(platform.store, CassandraMemoryStore)
        yield platform.store


def archive_on(store: CassandraMemoryStore, clock: Clock) -> CassandraEventArchive:
    return CassandraEventArchive(
        store.session,
        store.home,
        "test.archive",
        keyspace_for=store.keyspace_of,
        settle_seconds=1.0,
        clock_us=clock,
    )


def placed(envelope: Envelope, seq: int, position: int, offset: int = 0) -> ArchivedEvent:
    return ArchivedEvent(envelope.model_copy(update={"seq": seq}), 0, offset, position)


def test_a_stream_is_read_up_to_its_first_missing_number(store: CassandraMemoryStore) -> None:
    clock = Clock()
    archive = archive_on(store, clock)
    events = [ev("user:U1", i=i) for i in range(4)]
    archive.record([placed(events[0], 1, NOW - 10), placed(events[2], 3, NOW - 8)], [])
    archive.record([placed(events[3], 4, NOW - 7)], [])
    assert [
        Envelope.model_validate_json(b).seq for b in archive.read_stream("acme", "user:U1", 1, 10)
    ] == [1]
    assert archive.read_stream("acme", "user:U1", 2, 10) == []
    archive.record([placed(events[1], 2, NOW - 9)], [])
    got = [
        Envelope.model_validate_json(b).seq for b in archive.read_stream("acme", "user:U1", 1, 10)
    ]
    assert got == [1, 2, 3, 4]
    assert [
        Envelope.model_validate_json(b).seq for b in archive.read_stream("acme", "user:U1", 3, 1)
    ] == [3]


def test_a_page_never_ends_between_two_events_of_one_position(
    store: CassandraMemoryStore,
) -> None:
    clock = Clock()
    archive = archive_on(store, clock)
    same = NOW - 5_000_000
    first, second, third = ev("user:U1", i=1), ev("user:U2", i=2), ev("user:U3", i=3)
    # two sequencers' clocks gave two events one position
    archive.record([placed(first, 1, same)], [])
    archive.record([placed(second, 1, same, offset=7)], [])
    archive.record([placed(third, 1, same + 10)], [])
    tail, listed = 0, []
    while page := archive.read(tail, 1, "acme"):
        listed += [e.envelope.event_id for e in page]
        tail = page[-1].offset
    assert sorted(listed) == sorted(e.event_id for e in (first, second, third))
    assert len(listed) == 3
    back, before = [], None
    while page := archive.read_back(before, 1, "acme"):
        back += [e.envelope.event_id for e in page]
        before = page[-1].offset
    assert sorted(back) == sorted(listed)


def position_row_only(
    store: CassandraMemoryStore, envelope: Envelope, position: int, seq: int = 1
) -> None:
    """The tenant's position row of an event whose stream row has not landed (yet)."""
    ks = store.keyspace_of(envelope.tenant)
    store.session.execute(
        f"INSERT INTO {ks}.events_by_position (scope, day, position, tenant, event_id, "
        "stream, seq) VALUES (%s, %s, %s, %s, %s, %s, %s)",
        (
            envelope.tenant,
            position // 86_400_000_000,
            position,
            envelope.tenant,
            envelope.event_id,
            envelope.stream,
            seq,
        ),
    )


def test_a_missing_stream_row_stops_a_tail_and_a_row_left_behind_is_passed(
    store: CassandraMemoryStore,
) -> None:
    clock = Clock()
    archive = archive_on(store, clock)
    early, twice, late = ev("user:U1", i=1), ev("user:U2", i=2), ev("user:U3", i=3)
    archive.record([placed(early, 1, NOW - 9_000_000)], [])
    # placed twice: the stream row keeps the earliest position, the later row is left over
    archive.record([placed(twice, 1, NOW - 8_000_000)], [])
    archive.record([placed(twice, 1, NOW - 7_000_000)], [])
    start = NOW - 8_000_000  # a tail that listed `twice` at its position
    # `late`'s position row has landed, its stream row not yet: the tail waits for it
    position_row_only(store, late, NOW - 6_000_000)
    assert archive.read(start, 10, "acme") == []
    archive.record([placed(late, 1, NOW - 6_000_000)], [])
    assert [e.envelope.event_id for e in archive.read(start, 1, "acme")] == [late.event_id]
    # a stream row that never lands, long past the settle window, no longer holds the tail
    lost, newer = ev("user:U4", i=4), ev("user:U5", i=5)
    position_row_only(store, lost, NOW - 5_000_000)
    archive.record([placed(newer, 1, NOW - 4_000_000)], [])
    after_late = NOW - 6_000_000
    assert archive.read(after_late, 10, "acme") == []
    clock.now = NOW + 120_000_000
    assert [e.envelope.event_id for e in archive.read(after_late, 10, "acme")] == [newer.event_id]


def test_the_latest_events_show_nothing_newer_than_an_event_still_landing(
    store: CassandraMemoryStore,
) -> None:
    """The console's latest-events view hands `next` (its newest event) to a tail: an
    event below it still landing would never be listed by that tail."""
    clock = Clock()
    archive = archive_on(store, clock)
    older, landing, newer = ev("user:U1", i=1), ev("user:U2", i=2), ev("user:U3", i=3)
    archive.record([placed(older, 1, NOW - 9_000_000)], [])
    position_row_only(store, landing, NOW - 8_000_000)
    archive.record([placed(newer, 1, NOW - 7_000_000)], [])
    assert [e.envelope.event_id for e in archive.read_back(None, 10, "acme")] == [older.event_id]
    archive.record([placed(landing, 1, NOW - 8_000_000)], [])
    assert [e.envelope.event_id for e in archive.read_back(None, 10, "acme")] == [
        newer.event_id,
        landing.event_id,
        older.event_id,
    ]


def test_a_tail_of_the_console_never_stops_between_two_events_of_one_offset(
    store: CassandraMemoryStore,
) -> None:
    from mnemo.adapters.clocks import SystemClock
    from mnemo.adapters.distributed_log import DistributedEventLog
    from mnemo.service.app import RequestContext
    from mnemo.service.insights import Insights

    clock = Clock()
    archive = archive_on(store, clock)
    same = NOW - 5_000_000
    first, second = ev("user:U1", i=1), ev("user:U2", i=2)
    archive.record([placed(first, 1, same)], [])
    archive.record([placed(second, 1, same, offset=7)], [])
    log = DistributedEventLog(None, archive)  # type: ignore[arg-type]  # reads only
    insights = Insights(log, store, SystemClock())
    ctx = RequestContext("acme", "auditor")
    seen: list[str] = []
    after = 0
    while page := insights.events(ctx, after_offset=after, limit=1).events:
        seen += [e.envelope.event_id for e in page]
        after = page[-1].offset
    assert sorted(seen) == sorted([first.event_id, second.event_id])
