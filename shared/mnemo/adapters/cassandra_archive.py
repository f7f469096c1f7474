"""The event archive on Apache Cassandra: the sequenced copy of the distributed log.

Tables (schemas/cql/0003_event_archive.cql): `events_by_stream` ((tenant, stream), seq)
for replay, `events_by_id` ((tenant, event_id)) for duplicates and lookups,
`events_by_cause` for the registrar's earlier decisions, `events_by_position` ((scope,
day), position) for tails, and `record_fates` ((topic, part, block), koffset), the verdict
on every topic record, which the other consumers follow.

Writing (no multi-partition transactions): `events_by_id`, the other event rows and the
fates of a batch in one step of unlogged batches (a partition's rows together:
cassandra_store.write_batched), sent concurrently. They need no order among themselves. A
sequencer that crashes half-way reads its partition again from its last position, which
its store commit moves only after this step: an id it finds placed keeps its number, and
an event whose id row is missing is numbered again from the stream heads below the
batch's first offset (`stream_heads(..., below=...)`), which leave out whatever the
crashed batch placed, so it gets the same number and the same rows are written again
instead of an event placed twice. A fate alone does not make a record processed: the
other consumers handle a record once its fate is there and the registrar's committed
position is past it, and that position is written after this step (the indexer takes a
`MemoryRegistered` on its fate alone: `registry.Consumer.on_fate`).

The archive does not arbitrate between two sequencers of one partition; the store does
(ADR 0014: the commit of one that lost the partition is refused). The new owner redoes the
batch, and `stream_heads(..., below=(partition, offset))` leaves out what was placed from
the batch's first offset on, so its events get the same numbers whoever placed them first.

Archive positions order events across streams for tails. They are microseconds of the
sequencer's clock, kept strictly increasing within a process; reads only return positions
older than `settle_seconds`, so an event a slower sequencer archives a moment later with
an earlier position is not skipped by a reader that already passed it.

Two sequencers can place one event independently (one that lost its partition, still
writing, and the new owner): same stream and number, two positions. Each event is listed
once by a tail all the same: the stream row keeps the earliest position whatever the order
the writes land in (see `_EARLIEST_WINS`), and a tail lists an event only at the position
its stream row holds. A reader that listed the event at the later position before the
earlier one landed has passed the earlier one already, so it does not list it again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import orjson
from cassandra import ConsistencyLevel
from cassandra.concurrent import execute_concurrent
from cassandra.query import PreparedStatement

from mnemo.adapters.cassandra_store.common import _DRIVER_UNAVAILABLE, _valid_keyspace
from mnemo.adapters.cassandra_store.rows import write_batched
from mnemo.domain.errors import Unavailable
from mnemo.domain.events import Envelope, LoggedEvent
from mnemo.ports import ArchivedEvent, EventArchive, RecordFate, RecordStatus

__all__ = ["CassandraEventArchive"]

_BLOCK = 100_000
# Placements of one event by two sequencers (one that lost the partition and its successor)
# differ only in their archive position. The rows that name an event's position
# (`events_by_stream`, `events_by_id`) are written with the write timestamp
# _EARLIEST_WINS - position: whichever lands last, the placement with the earlier position
# is the one kept, so the position of an event only ever moves down. These tables are
# insert-only (TRUNCATE empties them for a rebuild), so nothing else competes with these
# timestamps.
_EARLIEST_WINS = 1 << 53
_DAY_US = 86_400_000_000
# a position row whose stream row is missing is waited for this long past the settle
# window (its batch's other unlogged batches, or their redo, still landing), then passed
_LANDING_US = 60_000_000
# a row of events_by_position: position, tenant, stream, seq, event_id
_PositionRow = tuple[int, str, str, int, str]
_ALL = "*"

# Only identifiers are formatted into CQL: "{ks}" becomes a validated keyspace name.
_Q = {
    "by_id:put": "INSERT INTO {ks}.events_by_id (tenant, event_id, stream, seq, part, koffset, "
    "position) VALUES (?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?",
    "by_id:get": "SELECT stream, seq, part, koffset, position FROM {ks}.events_by_id "
    "WHERE tenant = ? AND event_id = ?",
    "stream:put": "INSERT INTO {ks}.events_by_stream (tenant, stream, seq, event_id, part, "
    "koffset, position, body) VALUES (?, ?, ?, ?, ?, ?, ?, ?) USING TIMESTAMP ?",
    "stream:head": "SELECT seq FROM {ks}.events_by_stream WHERE tenant = ? AND stream = ? "
    "ORDER BY seq DESC LIMIT 1",
    "stream:top": "SELECT seq, part, koffset FROM {ks}.events_by_stream WHERE tenant = ? "
    "AND stream = ? ORDER BY seq DESC LIMIT ?",
    "stream:read": "SELECT seq, body FROM {ks}.events_by_stream WHERE tenant = ? AND stream = ? "
    "AND seq >= ? LIMIT ?",
    "stream:one": "SELECT body, position FROM {ks}.events_by_stream WHERE tenant = ? "
    "AND stream = ? AND seq = ?",
    "cause:put": "INSERT INTO {ks}.events_by_cause (tenant, causation_id, event_id, stream, seq) "
    "VALUES (?, ?, ?, ?, ?)",
    "cause:get": "SELECT stream, seq FROM {ks}.events_by_cause WHERE tenant = ? "
    "AND causation_id = ?",
    "pos:put": "INSERT INTO {ks}.events_by_position (scope, day, position, tenant, event_id, "
    "stream, seq) VALUES (?, ?, ?, ?, ?, ?, ?)",
    "pos:read": "SELECT position, tenant, stream, seq, event_id FROM {ks}.events_by_position "
    "WHERE scope = ? AND day = ? AND position > ? AND position <= ? LIMIT ?",
    "pos:at": "SELECT position, tenant, stream, seq, event_id FROM {ks}.events_by_position "
    "WHERE scope = ? AND day = ? AND position = ?",
    "pos:last": "SELECT position FROM {ks}.events_by_position WHERE scope = ? AND day = ? "
    "ORDER BY position DESC LIMIT 1",
    "days:put": "INSERT INTO {ks}.archive_days (scope, day) VALUES (?, ?)",
    "days:from": "SELECT day FROM {ks}.archive_days WHERE scope = ? AND day >= ?",
    "days:last": "SELECT day FROM {ks}.archive_days WHERE scope = ? ORDER BY day DESC LIMIT 1",
    "days:to": "SELECT day FROM {ks}.archive_days WHERE scope = ? AND day <= ? ORDER BY day DESC",
    "pos:back": "SELECT position, tenant, stream, seq, event_id FROM {ks}.events_by_position "
    "WHERE scope = ? AND day = ? AND position < ? ORDER BY position DESC LIMIT ?",
    "fate:put": "INSERT INTO {ks}.record_fates (topic, part, block, koffset, status, tenant, "
    "event_id, stream, seq, position, reason) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
    "fate:range": "SELECT koffset, status, tenant, event_id, stream, seq, position, reason "
    "FROM {ks}.record_fates WHERE topic = ? AND part = ? AND block = ? AND koffset >= ? "
    "AND koffset <= ?",
}
_TRUNCATE = (
    "events_by_stream",
    "events_by_id",
    "events_by_cause",
    "events_by_position",
    "archive_days",
    "record_fates",
)


@contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except _DRIVER_UNAVAILABLE as exc:
        raise Unavailable(
            f"the event archive (Cassandra) is unavailable: {type(exc).__name__}",
            code="STORE_UNAVAILABLE",
        ) from exc


class CassandraEventArchive(EventArchive):
    """The EventArchive port over the keyspaces of a CassandraMemoryStore.

    `keyspace_for(tenant)` gives the keyspace holding a tenant's rows (and makes sure it
    exists and is migrated); record fates and the all-tenant tail live in `home`.
    """

    def __init__(
        self,
        session: Any,
        home: str,
        topic: str,
        *,
        keyspace_for: Callable[[str], str] | None = None,
        settle_seconds: float = 1.0,
        clock_us: Callable[[], int] | None = None,
    ) -> None:
        self._session = session
        self.home = _valid_keyspace(home)
        self.topic = topic
        self._keyspace_for = keyspace_for
        self.settle_us = int(settle_seconds * 1_000_000)
        self._clock_us = clock_us or (lambda: time.time_ns() // 1_000)
        self._prepared: dict[tuple[str, str], PreparedStatement] = {}
        self._last_position = 0
        self._lock = threading.Lock()

    # -- plumbing

    def _ks(self, tenant: str) -> str:
        if self._keyspace_for is None or tenant == _ALL:
            return self.home
        return _valid_keyspace(self._keyspace_for(tenant))

    def _stmt(self, ks: str, name: str) -> PreparedStatement:
        key = (ks, name)
        stmt = self._prepared.get(key)
        if stmt is None:
            with _translated():
                stmt = self._session.prepare(_Q[name].replace("{ks}", ks))
            stmt.consistency_level = ConsistencyLevel.LOCAL_QUORUM
            self._prepared[key] = stmt
        return stmt

    def _rows(self, ks: str, name: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with _translated():
            return [tuple(r) for r in self._session.execute(self._stmt(ks, name), list(params))]

    def _many(self, items: Sequence[tuple[str, str, Sequence[Any]]]) -> list[list[tuple[Any, ...]]]:
        if not items:
            return []
        statements = [(self._stmt(ks, name), list(params)) for ks, name, params in items]
        with _translated():
            results = execute_concurrent(self._session, statements, concurrency=64)
            out = []
            for ok, result in results:
                if not ok:
                    raise result
                out.append([tuple(r) for r in result])
            return out

    def _write(self, items: Sequence[tuple[str, str, Sequence[Any]]]) -> None:
        """One step of writes, in unlogged batches (cassandra_store.write_batched)."""
        with _translated():
            bound = [self._stmt(ks, name).bind(list(params)) for ks, name, params in items]
        write_batched(self._session, bound)

    def next_position(self) -> int:
        """A new archive position: this process's clock in microseconds, strictly rising."""
        with self._lock:
            self._last_position = max(self._clock_us(), self._last_position + 1)
            return self._last_position

    # -- the sequencer's side

    def fates(self, partition: int, first: int, last: int) -> dict[int, RecordFate]:
        if last < first:
            return {}
        items = [
            (
                self.home,
                "fate:range",
                [
                    self.topic,
                    partition,
                    block,
                    max(first, block * _BLOCK),
                    min(last, (block + 1) * _BLOCK - 1),
                ],
            )
            for block in range(first // _BLOCK, last // _BLOCK + 1)
        ]
        found: dict[int, RecordFate] = {}
        for rows in self._many(items):
            for offset, status, tenant, event_id, stream, seq, position, reason in rows:
                found[int(offset)] = RecordFate(
                    partition,
                    int(offset),
                    RecordStatus(status),
                    tenant or "",
                    event_id or "",
                    stream or "",
                    int(seq or 0),
                    int(position or 0),
                    reason or "",
                )
        return found

    def locate(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], RecordFate]:
        unique = list(dict.fromkeys(keys))
        results = self._many([(self._ks(t), "by_id:get", [t, e]) for t, e in unique])
        found: dict[tuple[str, str], RecordFate] = {}
        for (tenant, event_id), rows in zip(unique, results, strict=True):
            if rows:
                stream, seq, part, offset, position = rows[0]
                found[(tenant, event_id)] = RecordFate(
                    int(part),
                    int(offset),
                    RecordStatus.ARCHIVED,
                    tenant,
                    event_id,
                    str(stream),
                    int(seq),
                    int(position),
                )
        return found

    def stream_head(self, tenant: str, stream: str) -> int:
        rows = self._rows(self._ks(tenant), "stream:head", [tenant, stream])
        return int(rows[0][0]) if rows else 0

    def stream_heads(
        self, keys: Sequence[tuple[str, str]], below: tuple[int, int] | None = None
    ) -> dict[tuple[str, str], int]:
        unique = list(dict.fromkeys(keys))
        if below is None:
            results = self._many([(self._ks(t), "stream:head", [t, s]) for t, s in unique])
            return {
                key: int(rows[0][0]) if rows else 0
                for key, rows in zip(unique, results, strict=True)
            }
        partition, start = below
        heads: dict[tuple[str, str], int] = {}
        pending = unique
        limit = 16
        while pending:
            results = self._many([(self._ks(t), "stream:top", [t, s, limit]) for t, s in pending])
            again = []
            for key, rows in zip(pending, results, strict=True):
                kept = [
                    int(seq)
                    for seq, part, offset in rows
                    if not (int(part) == partition and int(offset) >= start)
                ]
                if kept or len(rows) < limit:
                    heads[key] = kept[0] if kept else 0
                else:  # every row read was placed at or after `start`: read further
                    again.append(key)
            pending, limit = again, limit * 8
        return heads

    def record(self, events: Sequence[ArchivedEvent], fates: Sequence[RecordFate]) -> None:
        # where each id went (a redo finds these and reuses their sequence numbers), the
        # event rows and the fates: one step, see the module's docstring
        rows: list[tuple[str, str, Sequence[Any]]] = [
            (
                self._ks(e.envelope.tenant),
                "by_id:put",
                [
                    e.envelope.tenant,
                    e.envelope.event_id,
                    e.envelope.stream,
                    e.envelope.seq,
                    e.partition,
                    e.offset,
                    e.position,
                    _EARLIEST_WINS - e.position,
                ],
            )
            for e in events
        ]
        days: set[tuple[str, str, int]] = set()
        for e in events:
            env = e.envelope
            ks = self._ks(env.tenant)
            body = orjson.dumps(env.model_dump(mode="json", exclude_none=True)).decode()
            rows.append(
                (
                    ks,
                    "stream:put",
                    [
                        env.tenant,
                        env.stream,
                        env.seq,
                        env.event_id,
                        e.partition,
                        e.offset,
                        e.position,
                        body,
                        _EARLIEST_WINS - e.position,
                    ],
                )
            )
            if env.causation_id:
                rows.append(
                    (
                        ks,
                        "cause:put",
                        [env.tenant, env.causation_id, env.event_id, env.stream, env.seq],
                    )
                )
            day = e.position // _DAY_US
            for scope, scope_ks in ((env.tenant, ks), (_ALL, self.home)):
                rows.append(
                    (
                        scope_ks,
                        "pos:put",
                        [scope, day, e.position, env.tenant, env.event_id, env.stream, env.seq],
                    )
                )
                days.add((scope_ks, scope, day))
        rows.extend((ks, "days:put", [scope, day]) for ks, scope, day in sorted(days))
        rows.extend(
            (
                self.home,
                "fate:put",
                [
                    self.topic,
                    f.partition,
                    f.offset // _BLOCK,
                    f.offset,
                    f.status.value,
                    f.tenant,
                    f.event_id,
                    f.stream,
                    f.seq,
                    f.position,
                    f.reason,
                ],
            )
            for f in fates
        )
        self._write(rows)

    # -- reads

    def _logged(self, tenant: str, stream: str, seq: int) -> LoggedEvent | None:
        rows = self._rows(self._ks(tenant), "stream:one", [tenant, stream, seq])
        if not rows:
            return None
        body, position = rows[0]
        return LoggedEvent(offset=int(position), envelope=Envelope.model_validate_json(body))

    def read(self, after_position: int, limit: int, tenant: str | None = None) -> list[LoggedEvent]:
        scope = tenant if tenant is not None else _ALL
        ks = self._ks(scope)
        ceiling = self._clock_us() - self.settle_us
        events: list[LoggedEvent] = []
        cursor = after_position
        while len(events) < limit:
            rows: list[_PositionRow] = []
            days = self._rows(ks, "days:from", [scope, cursor // _DAY_US])
            for (day,) in days:
                if len(rows) >= limit - len(events) or int(day) * _DAY_US > ceiling:
                    break
                rows += self._position_rows(
                    ks,
                    "pos:read",
                    [scope, int(day), cursor, ceiling, limit - len(events) - len(rows)],
                )
            if not rows:
                return events
            rows = self._whole_position(ks, scope, rows)
            placed, waiting = self._placed(rows, late_after=ceiling - _LANDING_US)
            if waiting is not None:
                # a stream row not landed yet: stop before its position (and before what
                # else shares it), so the next page starts there and lists it once it lands
                return [*events, *(e for e in placed if e.offset < waiting)]
            events += placed
            cursor = rows[-1][0]  # past rows an event placed twice left behind, too
        return events

    def read_back(
        self, before_position: int | None, limit: int, tenant: str | None = None
    ) -> list[LoggedEvent]:
        scope = tenant if tenant is not None else _ALL
        ks = self._ks(scope)
        # settled events only, as read() gives them: a position above the ceiling may
        # still be joined by an earlier one a slower sequencer writes
        ceiling = self._clock_us() - self.settle_us
        below = ceiling + 1
        if before_position is not None:
            below = min(below, before_position)
        events: list[LoggedEvent] = []
        while len(events) < limit:
            rows: list[_PositionRow] = []
            for (day,) in self._rows(ks, "days:to", [scope, below // _DAY_US]):
                if len(rows) >= limit - len(events):
                    break
                rows += self._position_rows(
                    ks, "pos:back", [scope, int(day), below, limit - len(events) - len(rows)]
                )
            if not rows:
                return events
            rows = self._whole_position(ks, scope, rows)
            placed, waiting = self._placed(rows, late_after=ceiling - _LANDING_US)
            if waiting is not None:
                # an event still landing: nothing newer is shown (a tail that starts from
                # the newest event listed must not start past it); read on below it
                events = []
                below = waiting
                continue
            events += placed
            below = rows[-1][0]
        return events

    def _position_rows(self, ks: str, name: str, params: Sequence[Any]) -> list[_PositionRow]:
        return [
            (int(position), str(owner), str(stream), int(seq), str(event_id))
            for position, owner, stream, seq, event_id in self._rows(ks, name, params)
        ]

    def _whole_position(self, ks: str, scope: str, rows: list[_PositionRow]) -> list[_PositionRow]:
        """`rows` with every other row of its last position: two sequencers' clocks can give
        two events one position, and a page that ended between them would lose the second
        to the next page's exclusive bound."""
        last = rows[-1][0]
        seen = {(r[1], r[4]) for r in rows if r[0] == last}
        more = [
            r
            for r in self._position_rows(ks, "pos:at", [scope, last // _DAY_US, last])
            if (r[1], r[4]) not in seen
        ]
        return rows + more

    def _placed(
        self, rows: Sequence[_PositionRow], late_after: int | None
    ) -> tuple[list[LoggedEvent], int | None]:
        """The events of position rows, in their order, and the first position whose
        stream row has not landed yet, when one is younger than `late_after` (older ones,
        and all when it is None, are passed over)."""
        found = self._many(
            [
                (self._ks(owner), "stream:one", [owner, stream, seq])
                for _, owner, stream, seq, _ in rows
            ]
        )
        events: list[LoggedEvent] = []
        for (position, _, _, _, _), hit in zip(rows, found, strict=True):
            if not hit:
                if late_after is not None and position > late_after:
                    return events, position
                continue
            body, kept = hit[0]
            # an event placed twice (by a sequencer that lost its partition, and again by
            # its successor) has a position row for each placement: it is listed at the one
            # its stream row keeps, the earliest, and only there
            if int(kept) == position:
                events.append(
                    LoggedEvent(offset=position, envelope=Envelope.model_validate_json(body))
                )
        return events, None

    def head(self) -> int:
        days = self._rows(self.home, "days:last", [_ALL])
        if not days:
            return 0
        rows = self._rows(self.home, "pos:last", [_ALL, int(days[0][0])])
        return int(rows[0][0]) if rows else 0

    def read_stream(self, tenant: str, stream: str, from_seq: int, limit: int) -> list[bytes]:
        rows = self._rows(self._ks(tenant), "stream:read", [tenant, stream, from_seq, limit])
        # up to the first number missing: a batch's rows land in concurrent unlogged
        # batches, so seq 201 can be readable a moment before seq 200; a reader given 201
        # would move past 200 (a live tail, a replay's `next`, a device's sync) for good
        out: list[bytes] = []
        expected = max(from_seq, 1)
        for seq, body in rows:
            if int(seq) != expected:
                break
            out.append(str(body).encode())
            expected += 1
        return out

    def get(self, tenant: str, event_id: str) -> LoggedEvent | None:
        rows = self._rows(self._ks(tenant), "by_id:get", [tenant, event_id])
        if not rows:
            return None
        stream, seq = str(rows[0][0]), int(rows[0][1])
        return self._logged(tenant, stream, seq)

    def caused_by(self, tenant: str, event_id: str) -> list[LoggedEvent]:
        rows = self._rows(self._ks(tenant), "cause:get", [tenant, event_id])
        found = [self._logged(tenant, str(stream), int(seq)) for stream, seq in rows]
        return sorted((e for e in found if e is not None), key=lambda e: e.offset)

    def causes(
        self, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], list[tuple[str, int]]]:
        unique = list(dict.fromkeys(keys))
        found = self._many([(self._ks(t), "cause:get", [t, e]) for t, e in unique])
        return {
            key: [(str(stream), int(seq)) for stream, seq in rows]
            for key, rows in zip(unique, found, strict=True)
        }

    def caused_events(
        self, places: Mapping[tuple[str, str], Sequence[tuple[str, int]]]
    ) -> dict[tuple[str, str], list[LoggedEvent]]:
        wanted = [(key, stream, seq) for key, held in places.items() for stream, seq in held]
        bodies = self._many(
            [(self._ks(t), "stream:one", [t, stream, seq]) for (t, _), stream, seq in wanted]
        )
        out: dict[tuple[str, str], list[LoggedEvent]] = {key: [] for key in places}
        for (key, _, _), rows in zip(wanted, bodies, strict=True):
            if rows:
                body, position = rows[0]
                out[key].append(
                    LoggedEvent(offset=int(position), envelope=Envelope.model_validate_json(body))
                )
        for events in out.values():
            events.sort(key=lambda e: e.offset)
        return out

    def reset(self) -> None:
        keyspaces = {self.home}
        with _translated():
            for row in self._session.execute(
                f"SELECT name FROM {self.home}.keyspaces WHERE shard = 0"  # noqa: S608 - validated
            ):
                keyspaces.add(_valid_keyspace(str(row[0])))
            for ks in sorted(keyspaces):
                for table in _TRUNCATE:
                    self._session.execute(f"TRUNCATE {ks}.{table}")
