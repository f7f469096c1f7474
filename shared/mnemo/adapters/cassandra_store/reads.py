"""MemoryReads, TemplateReads, UsageReads, TimerReads and AuditReads: what the use cases
read."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from cassandra import InvalidRequest, ReadFailure

from mnemo.adapters.cassandra_store.common import (
    _AUDIT_CHUNK,
    _HOUR_US,
    _IN_CHUNK,
    _store_unavailable,
    log,
)
from mnemo.adapters.cassandra_store.connection import _Connection
from mnemo.adapters.cassandra_store.rows import (
    _audit,
    _chunks,
    _context_record,
    _filter_row,
    _matcher,
    _us,
    _Usage,
)
from mnemo.domain.context import ContextTemplate
from mnemo.domain.errors import Unavailable
from mnemo.domain.memory import Memory, MemoryStatus
from mnemo.domain.projection import (
    AuditRecord,
    ContextRecord,
    MemoryStats,
    Outcome,
    OutcomeKind,
    TimelineEntry,
    Timer,
)
from mnemo.domain.toolchain import ToolchainState
from mnemo.ports import MemoryQuery

# chunks of ids whose filter columns a tag or key lookup reads at once
_FILTER_WAVE = 8


def _index_unready(exc: BaseException) -> bool:
    """Whether a read by the index on the type failed because the index cannot answer
    yet: Cassandra is building it, or this keyspace has none (the query then needs
    filtering, which the store never asks for)."""
    cause = exc.__cause__ if isinstance(exc, Unavailable) else exc
    if isinstance(cause, ReadFailure):
        return "INDEX_NOT_AVAILABLE" in str(cause)
    return isinstance(cause, InvalidRequest) and "ALLOW FILTERING" in str(cause)


class _Reads(_Connection):
    def get(self, tenant: str, memory_id: str) -> Memory | None:
        row = self._one(tenant, "mem_get", [tenant, memory_id])
        return Memory.model_validate_json(row[0]) if row is not None else None

    def get_many(self, tenant: str, memory_ids: Sequence[str]) -> list[Memory]:
        ids = list(dict.fromkeys(memory_ids))
        if not ids:
            return []
        ks = self._keyspace(tenant)
        found: dict[str, Memory] = {}
        results = self._concurrently(
            [(ks, "mem_bodies", [tenant, chunk]) for chunk in _chunks(ids)]
        )
        for rows in results:
            for memory_id, body in rows:
                found[memory_id] = Memory.model_validate_json(body)
        return [found[i] for i in ids if i in found]

    def _read_matching(self, tenant: str, ids: Sequence[str], query: MemoryQuery) -> list[Memory]:
        """The memories of `ids` (all of them within the query's limit) that pass the
        (blinded) query, in the order given: their bodies read at once and their filter
        columns worked out from them, not read first in a round trip of their own (an
        episode's turns, a key's versions: nearly every one passes)."""
        return self._passing(self.get_many(tenant, ids), query)

    def _passing(self, memories: Sequence[Memory], query: MemoryQuery) -> list[Memory]:
        """Those of `memories` that pass the (blinded) query, by filter columns worked out
        from their bodies."""
        matches = _matcher(query)
        return [m for m in memories if matches(_filter_row(m, self._blinder))]

    def _filtered(
        self, tenant: str, ids: Sequence[str], query: MemoryQuery, limit: int
    ) -> list[str]:
        """The ids (kept in the given order) whose memories pass the query, up to limit.
        The filter columns are read a wave of chunks at a time, side by side: as many
        chunks as the limit could fill (at most _FILTER_WAVE), then more if it did not."""
        matches = _matcher(query)
        ks = self._keyspace(tenant)
        chunks = list(_chunks(ids))
        wave = min(_FILTER_WAVE, max(1, -(-limit // _IN_CHUNK)))
        out: list[str] = []
        for start in range(0, len(chunks), wave):
            part = chunks[start : start + wave]
            results = self._concurrently([(ks, "mem_filters", [tenant, c]) for c in part])
            for chunk, found in zip(part, results, strict=True):
                rows = {str(r[0]): r for r in found}
                for memory_id in chunk:
                    row = rows.get(memory_id)
                    if row is not None and matches(row):
                        out.append(memory_id)
                        if len(out) >= limit:
                            return out
        return out

    def all_memories(self, tenant: str) -> list[Memory]:
        """Every memory of a tenant whatever its status (for forgetting the tenant)."""
        found: list[Memory] = []
        after: str | None = None
        while True:
            page = self.query(
                tenant, MemoryQuery(statuses=tuple(MemoryStatus), limit=1_000, after=after)
            )
            found += page
            if len(page) < 1_000:
                return found
            after = page[-1].memory_id

    def query(self, tenant: str, query: MemoryQuery) -> list[Memory]:
        if query.limit <= 0:
            return []
        if query.tags:
            return self.query_each(tenant, [query])[0]
        after = query.after or ""
        ks = self._keyspace(tenant)
        query = self._blinded(tenant, query)
        if query.stream is not None and query.key is not None:
            rows = self._rows(tenant, "key_rows", [tenant, query.stream, query.key])
            ids = sorted(str(r[1]) for r in rows if str(r[1]) > after)
            if len(ids) <= query.limit:
                return self._read_matching(tenant, ids, query)
            matched = self._filtered(tenant, ids, query, query.limit)
        elif (
            query.stream is not None
            and query.types
            and ((typed := self._typed(ks, tenant, query, after)) is not None)
        ):
            matched = typed
        else:
            if query.stream is not None:
                name, params = "stream_scan", [tenant, query.stream, after]
            else:
                name, params = "mem_scan", [tenant, after]
            matched = []
            matches = _matcher(query)
            # a listing filtered on what the table cannot select (type, scope) may page
            # through most of the partition to find its few rows: large pages, fewer trips
            narrowed = bool(query.types or query.scopes)
            page = min(max(query.limit * (10 if narrowed else 2), 100), 5_000)
            for row in self._iterate(ks, name, params, page):
                if matches(row):
                    matched.append(str(row[0]))
                    if len(matched) >= query.limit:
                        break
        return self.get_many(tenant, matched)

    def query_each(self, tenant: str, queries: Sequence[MemoryQuery]) -> list[list[Memory]]:
        """What `query` answers for each of `queries`. The tag lookups of all of them are
        read side by side, and the bodies of those within their limits in one wave: the
        turns of a ranking's episodes take two round trips, not two per episode. A query
        past its limit is filtered from the ids read as `query` does; one not by tag is
        answered by `query`."""
        ks = self._keyspace(tenant)
        blinded = [self._blinded(tenant, q) for q in queries]
        lookups = [
            (i, tag)
            for i, q in enumerate(blinded)
            if q.tags and q.limit > 0
            for tag in dict.fromkeys(q.tags)
        ]
        results = self._concurrently(
            [(ks, "tag_ids", [tenant, tag, blinded[i].after or ""]) for i, tag in lookups]
        )
        ids_of: dict[int, set[str]] = {}
        for (i, _), rows in zip(lookups, results, strict=True):
            ids_of.setdefault(i, set()).update(str(r[0]) for r in rows)
        within = {i: sorted(ids) for i, ids in ids_of.items() if len(ids) <= blinded[i].limit}
        bodies = {
            m.memory_id: m
            for m in self.get_many(tenant, sorted({x for ids in within.values() for x in ids}))
        }
        out: list[list[Memory]] = []
        for i, q in enumerate(queries):
            if i in within:
                read = [bodies[x] for x in within[i] if x in bodies]
                out.append(self._passing(read, blinded[i]))
            elif i in ids_of:
                limit = blinded[i].limit
                matched = self._filtered(tenant, sorted(ids_of[i]), blinded[i], limit)
                out.append(self.get_many(tenant, matched))
            else:
                out.append(self.query(tenant, q))
        return out

    def _typed(self, ks: str, tenant: str, query: MemoryQuery, after: str) -> list[str] | None:
        """The ids of a stream's memories of the query's types that pass it, in id order,
        by the index on the type: one paged read per type, not the whole stream. None
        when the index cannot answer yet (being built after the migration that makes it,
        or not made in this keyspace): the caller pages through the stream instead."""
        assert query.stream is not None
        matches = _matcher(query)
        found: list[str] = []
        page = min(max(query.limit, 100), 5_000)
        try:
            for mtype in sorted({t.value for t in query.types}):
                params = [tenant, query.stream, mtype, after]
                kept = 0
                for row in self._execute(ks, "stream_type_scan", params, page):
                    if matches(tuple(row)):
                        found.append(str(row[0]))
                        kept += 1
                        if kept >= query.limit:
                            break
        except (Unavailable, ReadFailure, InvalidRequest) as exc:
            if not _index_unready(exc):
                if isinstance(exc, ReadFailure):  # a later page's read
                    raise _store_unavailable(exc) from exc
                raise
            if ks not in self._unindexed:
                self._unindexed.add(ks)
                log.warning(
                    "%s: listings by type page through streams until the type index is built",
                    ks,
                )
            return None
        return sorted(found)[: query.limit]

    def history(self, tenant: str, stream: str, key: str) -> list[Memory]:
        rows = self._rows(tenant, "key_rows", [tenant, stream, self._blind(tenant, "key", key)])
        return self.get_many(tenant, [str(r[1]) for r in rows])

    def outcome(self, tenant: str, event_id: str) -> list[Outcome]:
        rows = self._rows(tenant, "outcomes", [tenant, event_id])
        return [
            Outcome(tenant, event_id, int(r[0]), OutcomeKind(r[1]), r[2], r[3], r[4], r[5])
            for r in rows
        ]

    def due_timers(self, now: datetime, limit: int) -> list[Timer]:
        if limit <= 0:
            return []
        now_us = _us(now)
        current = now_us // _HOUR_US
        looked_at = self._clock.next()  # a past hour seen empty is dropped as of this instant
        out: list[Timer] = []
        for (bucket,) in list(self._iterate(self.home, "buckets", [current])):
            rows = list(self._iterate(self.home, "due", [bucket, now_us, limit - len(out)]))
            if not rows and int(bucket) < current:
                self._execute(self.home, "timer_buckets:del", [looked_at, 0, bucket])
            out.extend(
                Timer(str(r[1]), str(r[2]), datetime.fromisoformat(str(r[0])), str(r[3]))
                for r in rows
            )
            if len(out) >= limit:
                break
        return out[:limit]

    def audit_trail(self, tenant: str, stream: str, after_n: int, limit: int) -> list[AuditRecord]:
        head = self._one(tenant, "audit_head", [tenant, stream])
        if head is None or limit <= 0:
            return []
        last = int(head[0])
        out: list[AuditRecord] = []
        chunk = max(after_n + 1, 0) // _AUDIT_CHUNK
        while len(out) < limit and chunk <= last // _AUDIT_CHUNK:
            params = [tenant, stream, chunk, after_n, limit - len(out)]
            out.extend(_audit(tenant, stream, r) for r in self._rows(tenant, "audit_from", params))
            chunk += 1
        return out

    def audit_heads(self, tenant: str) -> list[AuditRecord]:
        rows = self._rows(tenant, "audit_heads", [tenant])
        return [_audit(tenant, str(r[0]), r[1:]) for r in rows]

    def template(
        self, tenant: str, name: str, version: int | None = None
    ) -> ContextTemplate | None:
        if version is None:
            row = self._one(tenant, "template_latest", [tenant, name])
        else:
            row = self._one(tenant, "template", [tenant, name, version])
        return ContextTemplate.model_validate_json(row[0]) if row is not None else None

    def templates(self, tenant: str) -> list[ContextTemplate]:
        return [
            ContextTemplate.model_validate_json(r[0])
            for r in self._rows(tenant, "templates", [tenant])
        ]

    def context_record(self, tenant: str, request_id: str) -> ContextRecord | None:
        row = self._one(tenant, "record", [tenant, request_id])
        return _context_record(row[0]) if row is not None else None

    def memory_stats(self, tenant: str, memory_ids: Sequence[str]) -> list[MemoryStats]:
        ids = sorted(set(memory_ids))
        totals: dict[str, _Usage] = {}
        for chunk in _chunks(ids):
            for r in self._rows(tenant, "stats_of", [tenant, chunk]):
                totals.setdefault(str(r[0]), _Usage()).add(r[2:])
        return [
            MemoryStats(
                tenant,
                memory_id,
                included=usage.counts[0],
                truncated=usage.counts[1],
                cited=usage.counts[2],
                corrected=usage.counts[3],
                last_used=datetime.fromisoformat(usage.last) if usage.last else None,
            )
            for memory_id, usage in sorted(totals.items())
        ]

    def context_records(
        self, tenant: str, limit: int, before: str | None = None
    ) -> list[ContextRecord]:
        if limit <= 0:
            return []
        rows = self._rows(tenant, "records_before", [tenant, before or "~", limit])
        return [_context_record(r[0]) for r in rows]

    def toolchain(self, tenant: str, toolchain_id: str) -> ToolchainState | None:
        row = self._one(tenant, "toolchain", [tenant, toolchain_id])
        return ToolchainState.model_validate_json(str(row[0])) if row is not None else None

    def timeline(self, tenant: str, memory_id: str, limit: int = 500) -> list[TimelineEntry]:
        if limit <= 0:
            return []
        rows = self._rows(tenant, "timeline", [tenant, memory_id, limit])
        return [
            TimelineEntry(tenant, memory_id, int(r[0]), r[1], r[2], r[3], r[4], r[5]) for r in rows
        ]

    # -- whole-store operations (admin, rebuild, tests): full scans
