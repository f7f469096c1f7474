"""Rows from projection writes, and writes in batches that respect Cassandra's limits."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from cassandra import ConsistencyLevel
from cassandra.concurrent import execute_concurrent
from cassandra.query import BatchStatement, BatchType

from mnemo.adapters.cassandra_store.common import (
    _BATCH_PARTITION_BYTES,
    _BATCH_ROWS,
    _BATCH_SPREAD,
    _BATCH_SPREAD_BYTES,
    _EPOCH,
    _HOUR_US,
    _IN_CHUNK,
    Mutation,
    Row,
    _translated,
)
from mnemo.domain.memory import Memory, MemoryStatus
from mnemo.domain.projection import (
    AuditRecord,
    ContextRecord,
    Timer,
)
from mnemo.ports import Blinder, MemoryQuery

# ---- row helpers ----------------------------------------------------------------------------


def _us(value: datetime) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return (value - _EPOCH) // timedelta(microseconds=1)


def _us_or_none(value: datetime | None) -> int | None:
    return _us(value) if value is not None else None


RowSet = dict[tuple[str, str], dict[tuple[Any, ...], tuple[Any, ...]]]


def _filter_row(memory: Memory, blinder: Blinder) -> Row:
    """A memory's filter columns (_FILTER_COLS) as the tables hold them, the key and the
    tags as the blinder's keyed hashes: what `_matcher` reads, whether from the filter
    columns or worked out from a body just read."""
    t = memory.tenant
    return (
        memory.memory_id,
        memory.stream,
        memory.type.value,
        memory.scope.value,
        blinder.blind(t, "key", memory.key) if memory.key is not None else None,
        memory.status.value,
        _us_or_none(memory.valid_until),
        _us_or_none(memory.verification_due_at),
        sorted({blinder.blind(t, "tag", tag) for tag in memory.tags}),
    )


def _memory_rows(memory: Memory, ks: str, blinder: Blinder) -> RowSet:
    """Every row a memory owns, by (keyspace, table): primary key -> values. The key, the
    tags and the content hash are stored as the blinder's keyed hashes in every column
    (lookups and filters hash what they look for the same way); only the body holds them
    in clear, and a forget overwrites the body."""
    t, mid = memory.tenant, memory.memory_id
    _, _, *filters, tags = _filter_row(memory, blinder)
    mkey = filters[2]
    chash = blinder.blind(t, "hash", memory.content_hash)
    rows: RowSet = {
        (ks, "memories"): {
            (t, mid): (
                memory.stream,
                *filters,
                memory.version,
                chash,
                tuple(tags),
                memory.model_dump_json(),
            )
        },
        (ks, "memories_by_stream"): {(t, memory.stream, mid): (*filters, tuple(tags))},
        (ks, "memory_tags"): {(t, tag, mid): () for tag in tags},
    }
    if mkey is not None:
        rows[(ks, "memory_keys")] = {
            (t, memory.stream, mkey, memory.version, mid): (memory.status.value,)
        }
    if memory.status is MemoryStatus.ACTIVE:
        rows[(ks, "memory_hashes")] = {(t, memory.stream, chash, mid): ()}
    return rows


def _timer_rows(timer: Timer, ks: str, home: str) -> RowSet:
    due = _us(timer.due_at)
    iso = timer.due_at.isoformat()
    return {
        (ks, "timers"): {(timer.tenant, timer.memory_id, timer.kind): (due, iso)},
        (home, "timers_by_due"): {
            (due // _HOUR_US, due, timer.tenant, timer.memory_id, timer.kind): (iso,)
        },
    }


def _diff(before: RowSet, after: RowSet, out: list[Mutation]) -> None:
    """Row writes that turn `before` into `after`: deletes of rows that went away, upserts
    of rows that are new or changed. Never both for one row (they share a timestamp, and a
    delete wins a tie)."""
    for place in sorted(set(before) | set(after)):
        old = before.get(place, {})
        new = after.get(place, {})
        ks, table = place
        for key in sorted(old.keys() - new.keys(), key=repr):
            out.append([ks, table, "del", list(key)])
        for key in sorted(new, key=repr):
            if old.get(key) != new[key]:
                out.append([ks, table, "put", [*key, *new[key]]])


def _context_record(body: str) -> ContextRecord:
    data = json.loads(body)
    for name in ("memory_ids", "truncated", "sections", "left_out"):
        data[name] = tuple(data.get(name, ()))
    data["credited"] = tuple((m, e) for m, e in data.get("credited", ()))
    return ContextRecord(**data)


def _audit(tenant: str, stream: str, row: Row) -> AuditRecord:
    n, event_id, event_type, offset, prev_hash, hash_ = row
    return AuditRecord(
        tenant,
        stream,
        int(n),
        str(event_id),
        str(event_type),
        int(offset),
        str(prev_hash),
        str(hash_),
    )


def _matches(query: MemoryQuery, row: Row) -> bool:
    """Whether a row of filter columns (_FILTER_COLS) passes the query's filters (a query
    whose key and tags were blinded like the rows', see `_blinded`)."""
    return _matcher(query)(row)


def _matcher(query: MemoryQuery) -> Callable[[Row], bool]:
    """`_matches` for one query, its filter values worked out once for all the rows a
    listing pages through."""
    types = {t.value for t in query.types}
    scopes = {s.value for s in query.scopes}
    statuses = {s.value for s in query.statuses}
    live_us = _us(query.live_at) if query.live_at is not None else None
    tags = set(query.tags)

    def matches(row: Row) -> bool:
        _, stream, mtype, scope, mkey, status, valid_until, verify_due, row_tags = row
        if query.stream is not None and stream != query.stream:
            return False
        if types and mtype not in types:
            return False
        if scopes and scope not in scopes:
            return False
        if query.key is not None and mkey != query.key:
            return False
        if statuses and status not in statuses:
            return False
        if live_us is not None and valid_until is not None and valid_until <= live_us:
            return False
        if query.verification_due and verify_due is None:
            return False
        return not (tags and not tags.intersection(row_tags or ()))

    return matches


def _plain(value: Any) -> Any:
    """A column value with a stable repr (the driver returns sets as SortedSet)."""
    if value is None or isinstance(value, str | bytes | int | float | bool):
        return value
    return tuple(sorted(value))


def _chunks(items: Sequence[str], size: int = _IN_CHUNK) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


def _bound_size(bound: Any) -> int:
    return sum(len(v) for v in bound.values if isinstance(v, bytes | bytearray)) + 16


def _unlogged(statements: Sequence[Any], consistency: int) -> Any:
    if len(statements) == 1:
        return statements[0]
    batch = BatchStatement(BatchType.UNLOGGED, consistency_level=consistency)
    for statement in statements:
        batch.add(statement)
    return batch


def write_batched(session: Any, bound: Sequence[Any]) -> None:
    """Execute idempotent writes (bound statements) in few requests: unlogged batches.

    The rows of one partition (keyspace + partition key, whatever the table) go in one
    batch, which Cassandra applies as a single mutation. Writes to different partitions
    whose replicas are the same nodes share batches of up to `_BATCH_SPREAD` partitions
    and `_BATCH_SPREAD_BYTES`: the coordinator, a replica of them all, writes them as it
    would have written each alone. Nothing is atomic across the batches, which are sent
    concurrently; callers order their steps by calling this once per step."""
    if not bound:
        return
    partitions: dict[tuple[str, bytes], list[Any]] = {}
    unrouted: list[Any] = []
    for statement in bound:
        key = statement.routing_key
        if key is None:
            unrouted.append(statement)
        else:
            partitions.setdefault((statement.keyspace, key), []).append(statement)
    requests: list[Any] = [*unrouted]
    metadata = session.cluster.metadata
    spread: dict[tuple[Any, ...], list[list[Any]]] = {}
    for (keyspace, key), rows in partitions.items():
        if len(rows) > 1 or _bound_size(rows[0]) > _BATCH_SPREAD_BYTES:
            chunk: list[Any] = []
            size = 0
            for row in rows:
                row_size = _bound_size(row)
                full = len(chunk) >= _BATCH_ROWS or size + row_size > _BATCH_PARTITION_BYTES
                if chunk and full:
                    requests.append(_unlogged(chunk, ConsistencyLevel.LOCAL_QUORUM))
                    chunk, size = [], 0
                chunk.append(row)
                size += row_size
            requests.append(_unlogged(chunk, ConsistencyLevel.LOCAL_QUORUM))
            continue
        replicas = tuple(sorted(str(h.endpoint) for h in metadata.get_replicas(keyspace, key)))
        if not replicas:
            requests.append(rows[0])
            continue
        groups = spread.setdefault((keyspace, replicas), [[]])
        current = groups[-1]
        size = sum(_bound_size(r) for r in current)
        if current and (
            len(current) >= _BATCH_SPREAD or size + _bound_size(rows[0]) > _BATCH_SPREAD_BYTES
        ):
            current = []
            groups.append(current)
        current.append(rows[0])
    for groups in spread.values():
        requests.extend(_unlogged(g, ConsistencyLevel.LOCAL_QUORUM) for g in groups if g)
    with _translated():
        results = execute_concurrent(
            session, [(r, None) for r in requests], concurrency=32, raise_on_first_error=True
        )
        for ok, result in results:
            if not ok:
                raise result


class _NoBlinder(Blinder):
    """The blinder of a store opened without one (schema migrations, connectivity checks):
    it refuses, so that no memory row is ever written or looked up with a clear key."""

    def blind(self, tenant: str, kind: str, value: str) -> str:
        raise RuntimeError("this store was opened without a blinder: it cannot touch memories")


@dataclass(frozen=True, slots=True)
class HeadMove:
    """A key's active memory (the key blinded) changes from `old` (an id, None: none) to
    `new`."""

    tenant: str
    stream: str
    key: str
    old: str | None
    new: Memory | None


def _newest(memory: Memory) -> tuple[int, str]:
    return memory.version, memory.memory_id


def _current_holder(
    memories: Iterable[Memory | None], stream: str, has_key: Callable[[Memory], bool]
) -> Memory | None:
    """The memory current_for_key answers with: active, that key, the highest version."""
    live = [
        m
        for m in memories
        if m is not None and m.stream == stream and has_key(m) and m.status is MemoryStatus.ACTIVE
    ]
    return max(live, key=_newest) if live else None


class _Usage:
    """Usage counters being summed: over a memory's partitions, or a row plus a batch."""

    def __init__(self) -> None:
        self.counts = [0, 0, 0, 0]  # included, truncated, cited, corrected
        self.last = ""  # the latest use, ISO 8601 in UTC ('' for none)

    def add(self, values: Sequence[Any]) -> None:
        for i in range(4):
            self.counts[i] += int(values[i] or 0)
        self.last = max(self.last, str(values[4] or ""))

    @property
    def last_used(self) -> str | None:
        return self.last or None


class _WriteClock:
    """Write timestamps (microseconds) that only go up, within the process and past any
    commit timestamp this store has seen for a consumer."""

    def __init__(self) -> None:
        self._last = 0
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            self._last = max(time.time_ns() // 1000, self._last + 1)
            return self._last

    def observe(self, ts: int) -> None:
        with self._lock:
            self._last = max(self._last, ts)
