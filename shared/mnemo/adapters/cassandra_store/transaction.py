"""The registrar's (and every consumer's) transaction: an overlay of a batch's writes on
the stored rows, planned into mutations when it commits."""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import asdict
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from mnemo.adapters.cassandra_store.common import _AUDIT_CHUNK, _HOUR_US, Mutation, Row
from mnemo.adapters.cassandra_store.documents import Stored, document_rows, hashed
from mnemo.adapters.cassandra_store.rows import (
    HeadMove,
    _audit,
    _chunks,
    _current_holder,
    _diff,
    _memory_rows,
    _timer_rows,
    _us,
    _Usage,
)
from mnemo.adapters.cassandra_store.tables import _BEFORE_PAGE, _PURGED
from mnemo.domain.context import ContextTemplate
from mnemo.domain.memory import Memory, MemoryStatus, MemoryType
from mnemo.domain.projection import (
    AuditRecord,
    BumpStats,
    ContextRecord,
    DropDocuments,
    DropTimer,
    DropToolchain,
    Outcome,
    PurgeTenant,
    PutAudit,
    PutContextRecord,
    PutDocument,
    PutMemory,
    PutOutcome,
    PutTemplate,
    PutTimeline,
    PutTimer,
    PutToolchain,
    PutWeight,
    SetStatus,
    TimelineEntry,
    Timer,
    Write,
)
from mnemo.domain.toolchain import ToolchainState
from mnemo.ports import StoreTransaction

if TYPE_CHECKING:
    from mnemo.adapters.cassandra_store import CassandraMemoryStore


# ---- the transaction overlay -------------------------------------------------------------------


class _Tx(StoreTransaction):
    def __init__(self, store: CassandraMemoryStore) -> None:
        self._store = store
        self.memories: dict[tuple[str, str], Memory] = {}
        self.stored: dict[tuple[str, str], Memory | None] = {}  # rows as they are in Cassandra
        self.outcomes: dict[tuple[str, str, int], Outcome] = {}
        self.timers: dict[tuple[str, str, str], Timer | None] = {}
        self.audit: dict[tuple[str, str, int], AuditRecord] = {}
        self.heads: dict[tuple[str, str], AuditRecord | None] = {}
        self.templates: dict[tuple[str, str, int], ContextTemplate] = {}
        self.records: dict[tuple[str, str], ContextRecord] = {}
        self.stats: dict[tuple[str, str], list[Any]] = {}
        self.weights: dict[tuple[str, str], tuple[float, float, float]] = {}
        self.timeline: dict[tuple[str, str, int, str], TimelineEntry] = {}
        # toolchain states written by this batch; None: dropped
        self.toolchains: dict[tuple[str, str], ToolchainState | None] = {}
        # documents written by this batch (their text keys hashed); None: dropped
        self.documents: dict[tuple[str, str], Stored | None] = {}
        self.stored_documents: dict[tuple[str, str], Stored | None] = {}
        self.position: tuple[str, int] | None = None
        self.epoch: int | None = None  # the claim the commit must still hold (fenced)
        self.purged: set[str] = set()  # tenants purged by this batch: their stored rows go
        # memory ids of stored content-hash rows, read for the whole batch by prefetch_hashes:
        # a partition's streams have one writer (its fenced owner), so nobody else adds or
        # drops them while the batch runs, and the batch's own changes are in the overlay
        self.hash_rows: dict[tuple[str, str, str], list[str]] = {}
        # the stored memory right before each of the batch's new turns, read for the whole
        # batch by prefetch_before (the same reasoning): (tenant, stream, memory id, type) ->
        # the id of the stored memory of the type with the greatest id below it, if any
        self.before_rows: dict[tuple[str, str, str, MemoryType], list[str]] = {}

    # -- reads: the overlay over the stored rows

    def _load(self, tenant: str, memory_ids: Iterable[str]) -> None:
        missing = [m for m in dict.fromkeys(memory_ids) if (tenant, m) not in self.stored]
        if not missing:
            return
        found = {m.memory_id: m for m in self._store.get_many(tenant, missing)}
        for memory_id in missing:
            self.stored[(tenant, memory_id)] = found.get(memory_id)

    def _current(self, tenant: str, memory_ids: Iterable[str]) -> list[Memory]:
        ids = list(dict.fromkeys(memory_ids))
        self._load(tenant, [m for m in ids if (tenant, m) not in self.memories])
        out: list[Memory] = []
        for memory_id in ids:
            key = (tenant, memory_id)
            if key in self.memories:
                memory: Memory | None = self.memories[key]
            else:
                memory = None if tenant in self.purged else self.stored.get(key)
            if memory is not None:
                out.append(memory)
        return out

    def _pending(self, tenant: str) -> Iterator[Memory]:
        return (m for (t, _), m in self.memories.items() if t == tenant)

    def get(self, tenant: str, memory_id: str) -> Memory | None:
        found = self._current(tenant, [memory_id])
        return found[0] if found else None

    def current_for_key(self, tenant: str, stream: str, key: str) -> Memory | None:
        mkey = self._store._blind(tenant, "key", key)
        ids = [
            str(r[1])
            for r in self._store._rows(tenant, "key_rows", [tenant, stream, mkey])
            if r[2] == MemoryStatus.ACTIVE.value
        ]
        ids += [m.memory_id for m in self._pending(tenant) if m.stream == stream and m.key == key]
        return _current_holder(self._current(tenant, ids), stream, lambda m: m.key == key)

    def prefetch_memories(self, tenant: str, memory_ids: Sequence[str]) -> None:
        self._load(tenant, [m for m in memory_ids if (tenant, m) not in self.memories])

    def prefetch_hashes(self, keys: Sequence[tuple[str, str, str]]) -> None:
        self.prefetch_lookups(keys, [])

    def prefetch_lookups(
        self,
        hashes: Sequence[tuple[str, str, str]],
        before: Sequence[tuple[str, str, str, MemoryType]],
    ) -> None:
        # the content-hash rows and the first pages before each new turn in one wave, then
        # the bodies of every memory they name in another
        hashes = [k for k in dict.fromkeys(hashes) if k not in self.hash_rows]
        before = [k for k in dict.fromkeys(before) if k not in self.before_rows]
        if not hashes and not before:
            return
        blind = self._store._blind
        ks = self._store._keyspace
        found = self._store._concurrently(
            [(ks(t), "hash_ids", [t, st, blind(t, "hash", h)]) for t, st, h in hashes]
            + [(ks(t), "stream_before_page", [t, st, mid]) for t, st, mid, _ in before]
        )
        named: dict[str, list[str]] = {}
        for k, rows in zip(hashes, found[: len(hashes)], strict=True):
            self.hash_rows[k] = [str(r[0]) for r in rows]
            named.setdefault(k[0], []).extend(self.hash_rows[k])
        for key, rows in zip(before, found[len(hashes) :], strict=True):
            hit = next((str(r[0]) for r in rows if r[2] == key[3].value), None)
            if hit is None and len(rows) >= _BEFORE_PAGE:
                continue  # none of the type on the first page: memory_before reads on
            self.before_rows[key] = [] if hit is None else [hit]
            if hit is not None:
                named.setdefault(key[0], []).append(hit)
        for tenant, ids in named.items():
            self._load(tenant, ids)

    def find_by_hash(self, tenant: str, stream: str, content_hash: str) -> Memory | None:
        stored = self.hash_rows.get((tenant, stream, content_hash))
        ids = (
            list(stored)
            if stored is not None
            else [
                str(r[0])
                for r in self._store._rows(
                    tenant,
                    "hash_ids",
                    [tenant, stream, self._store._blind(tenant, "hash", content_hash)],
                )
            ]
        )
        ids += [
            m.memory_id
            for m in self._pending(tenant)
            if m.stream == stream and m.content_hash == content_hash
        ]
        live = [
            m
            for m in self._current(tenant, sorted(ids))
            if m.stream == stream
            and m.content_hash == content_hash
            and m.status is MemoryStatus.ACTIVE
        ]
        return live[0] if live else None

    def stream_memories(self, tenant: str, stream: str) -> list[Memory]:
        ids = [str(r[0]) for r in self._store._rows(tenant, "stream_scan", [tenant, stream, ""])]
        ids += [m.memory_id for m in self._pending(tenant) if m.stream == stream]
        found = [m for m in self._current(tenant, ids) if m.stream == stream]
        return sorted(found, key=lambda m: m.memory_id)

    def prefetch_before(self, keys: Sequence[tuple[str, str, str, MemoryType]]) -> None:
        self.prefetch_lookups([], keys)

    def memory_before(
        self, tenant: str, stream: str, memory_id: str, type: MemoryType
    ) -> Memory | None:
        ids = [
            m.memory_id
            for m in self._pending(tenant)
            if m.stream == stream and m.type is type and m.memory_id < memory_id
        ]
        read = self.before_rows.get((tenant, stream, memory_id, type))
        if read is not None:
            ids += read
        else:
            # the stream's rows newest first from just below `memory_id`, until one of the type
            ks = self._store._keyspace(tenant)
            for row in self._store._iterate(ks, "stream_before", [tenant, stream, memory_id], 50):
                if row[2] == type.value:
                    ids.append(str(row[0]))
                    break
        found = [
            m
            for m in self._current(tenant, ids)
            if m.stream == stream and m.type is type and m.memory_id < memory_id
        ]
        return max(found, key=lambda m: m.memory_id, default=None)

    def tenant_memories(self, tenant: str) -> list[Memory]:
        ids = (
            [] if tenant in self.purged else [m.memory_id for m in self._store.all_memories(tenant)]
        )
        ids += [m.memory_id for m in self._pending(tenant)]
        return sorted(self._current(tenant, ids), key=lambda m: m.memory_id)

    def _stored_head(self, tenant: str, stream: str) -> AuditRecord | None:
        if (tenant, stream) not in self.heads:
            row = self._store._one(tenant, "audit_head", [tenant, stream])
            head = _audit(tenant, stream, row) if row is not None else None
            self.heads[(tenant, stream)] = head
        return self.heads[(tenant, stream)]

    def last_audit(self, tenant: str, stream: str) -> AuditRecord | None:
        best = self._stored_head(tenant, stream)
        for (t, st, n), record in self.audit.items():
            if (t, st) == (tenant, stream) and (best is None or n >= best.n):
                best = record
        return best

    def template(self, tenant: str, name: str, version: int) -> ContextTemplate | None:
        pending = self.templates.get((tenant, name, version))
        return pending if pending is not None else self._store.template(tenant, name, version)

    def context_record(self, tenant: str, request_id: str) -> ContextRecord | None:
        pending = self.records.get((tenant, request_id))
        if pending is not None or tenant in self.purged:
            return pending
        return self._store.context_record(tenant, request_id)

    def weight_of(self, tenant: str, memory_id: str) -> tuple[float, float, float] | None:
        pending = self.weights.get((tenant, memory_id))
        if pending is not None or tenant in self.purged:
            return pending
        row = self._store._one(tenant, "weight", [tenant, memory_id])
        return (float(row[0]), float(row[1]), float(row[2])) if row is not None else None

    def _stored_toolchain(self, tenant: str, toolchain_id: str) -> ToolchainState | None:
        if tenant in self.purged:
            return None
        return self._store.toolchain(tenant, toolchain_id)

    def toolchain(self, tenant: str, toolchain_id: str) -> ToolchainState | None:
        if (tenant, toolchain_id) in self.toolchains:
            return self.toolchains[(tenant, toolchain_id)]
        return self._stored_toolchain(tenant, toolchain_id)

    def stream_toolchains(self, tenant: str, stream: str) -> list[str]:
        found: set[str] = set()
        if tenant not in self.purged:
            rows = self._store._rows(tenant, "toolchains_of_stream", [tenant, stream])
            found.update(str(r[0]) for r in rows)
        for (t, toolchain_id), pending in self.toolchains.items():
            if t != tenant:
                continue
            if pending is None:
                found.discard(toolchain_id)
            elif pending.stream == stream:
                found.add(toolchain_id)
        return sorted(found)

    # -- writes: recorded, applied at commit

    def apply(self, writes: Sequence[Write]) -> None:
        for write in writes:
            if isinstance(write, PutToolchain):
                self.toolchains[(write.state.tenant, write.state.toolchain_id)] = write.state
            elif isinstance(write, DropToolchain):
                self.toolchains[(write.tenant, write.toolchain_id)] = None
            elif isinstance(write, PutMemory):
                m = write.memory
                self.memories[(m.tenant, m.memory_id)] = m
            elif isinstance(write, SetStatus):
                current = self.get(write.tenant, write.memory_id)
                if current is None:
                    continue
                self.memories[(write.tenant, write.memory_id)] = write.applied_to(current)
            elif isinstance(write, PurgeTenant):
                # every read-model row of the tenant goes at commit (see _plan_purges); what
                # this batch recorded for it so far goes now, what it records next stays
                tenant = write.tenant
                self.purged.add(tenant)
                pending: tuple[dict[Any, Any], ...] = (
                    self.memories,
                    self.outcomes,
                    self.timers,
                    self.records,
                    self.stats,
                    self.weights,
                    self.timeline,
                    self.toolchains,
                    self.documents,
                )
                for table in pending:
                    for key in [k for k in table if k[0] == tenant]:
                        del table[key]
            elif isinstance(write, PutOutcome):
                o = write.outcome
                self.outcomes[(o.tenant, o.event_id, o.index)] = o
            elif isinstance(write, PutTimer):
                t = write.timer
                self.timers[(t.tenant, t.memory_id, t.kind)] = t
            elif isinstance(write, DropTimer):
                self.timers[(write.tenant, write.memory_id, write.kind)] = None
            elif isinstance(write, PutTemplate):
                tpl = write.template
                self.templates[(write.tenant, tpl.name, tpl.version)] = tpl
            elif isinstance(write, PutContextRecord):
                c = write.record
                self.records[(c.tenant, c.request_id)] = c
            elif isinstance(write, BumpStats):
                delta = self.stats.setdefault((write.tenant, write.memory_id), [0, 0, 0, 0, None])
                delta[0] += write.included
                delta[1] += write.truncated
                delta[2] += write.cited
                delta[3] += write.corrected
                at = write.at.astimezone(UTC).isoformat()
                delta[4] = max(delta[4] or "", at)
            elif isinstance(write, PutWeight):
                self.weights[(write.tenant, write.memory_id)] = (
                    write.weight,
                    write.trust,
                    write.base,
                )
            elif isinstance(write, PutTimeline):
                e = write.entry
                self.timeline[(e.tenant, e.memory_id, e.offset, e.what)] = e
            elif isinstance(write, PutAudit):
                r = write.record
                self.audit[(r.tenant, r.stream, r.n)] = r
            elif isinstance(write, PutDocument):
                doc = write.record
                stored = hashed(write.rows, self._store._blind)
                self.documents[(doc.tenant, doc.document_id)] = (doc, stored)
            elif isinstance(write, DropDocuments):
                self._drop_documents(write)

    def _stored_document(self, tenant: str, document_id: str) -> Stored | None:
        if tenant in self.purged:
            return None
        key = (tenant, document_id)
        if key not in self.stored_documents:
            self.stored_documents[key] = self._store._stored_document(tenant, document_id)
        return self.stored_documents[key]

    def _document(self, tenant: str, document_id: str) -> Stored | None:
        if (tenant, document_id) in self.documents:
            return self.documents[(tenant, document_id)]
        return self._stored_document(tenant, document_id)

    def _drop_documents(self, write: DropDocuments) -> None:
        """A stream's documents go (their rows with them), or, with a memory id, the entity
        rows of that section of the stream's documents."""
        tenant, stream = write.tenant, write.stream
        ids: set[str] = set()
        if tenant not in self.purged:
            store = self._store
            ids.update(
                store._stream_document_ids(tenant, stream)
                if write.memory_id is None
                else store._section_document_ids(tenant, write.memory_id)
            )
        ids.update(d for (t, d), doc in self.documents.items() if t == tenant and doc is not None)
        for document_id in sorted(ids):
            current = self._document(tenant, document_id)
            if current is None or current[0].stream != stream:
                continue
            record, rows = current
            if write.memory_id is None:
                self.documents[(tenant, document_id)] = None
                continue
            kept = tuple(r for r in rows if r.memory_id != write.memory_id)
            if len(kept) != len(rows):
                self.documents[(tenant, document_id)] = (record, kept)

    def set_position(self, consumer: str, offset: int, epoch: int | None = None) -> None:
        self.position = (consumer, offset)
        self.epoch = epoch

    # -- commit planning

    def plan(self) -> tuple[list[Mutation], list[Mutation], list[Mutation], list[HeadMove]]:
        """(row writes at the commit timestamp, row writes once those are in at the same
        timestamp, row writes after them at a fresh one, the moves of keys' active memory
        to make first)."""
        s = self._store
        muts: list[Mutation] = []
        post: list[Mutation] = []
        late: list[Mutation] = []
        touched_keys: set[tuple[str, str, str]] = set()  # (tenant, stream, blinded key)
        for tenant in sorted(self.purged):
            self._plan_purge(tenant, muts, touched_keys)

        by_tenant: dict[str, list[str]] = {}
        for tenant, memory_id in self.memories:
            by_tenant.setdefault(tenant, []).append(memory_id)
        for tenant, ids in sorted(by_tenant.items()):
            ks = s._keyspace(tenant)
            self._load(tenant, ids)
            for memory_id in sorted(ids):
                after = self.memories[(tenant, memory_id)]
                before = None if tenant in self.purged else self.stored[(tenant, memory_id)]
                blinder = s._blinder
                _diff(
                    _memory_rows(before, ks, blinder) if before else {},
                    _memory_rows(after, ks, blinder),
                    muts,
                )
                for m in (before, after):
                    if m is not None and m.key is not None:
                        touched_keys.add((tenant, m.stream, s._blind(tenant, "key", m.key)))

        for o in (self.outcomes[k] for k in sorted(self.outcomes)):
            outcome = [o.tenant, o.event_id, o.index, o.kind.value, o.memory_id, o.version]
            outcome += [o.reason_code, o.detail]
            muts.append([s._keyspace(o.tenant), "outcomes", "put", outcome])
            muts.append([s._keyspace(o.tenant), "outcome_events", "put", [o.tenant, o.event_id]])

        self._plan_timers(muts, post)

        for tenant, stream, n in sorted(self.audit):
            r = self.audit[(tenant, stream, n)]
            link = [r.event_id, r.event_type, r.offset, r.prev_hash, r.hash]
            place = [tenant, stream, n // _AUDIT_CHUNK, n]
            muts.append([s._keyspace(tenant), "audit_links", "put", [*place, *link]])
        for tenant, stream in sorted({(t, st) for t, st, _ in self.audit}):
            top = self.last_audit(tenant, stream)
            if top is not None and top != self._stored_head(tenant, stream):
                head = [top.n, top.event_id, top.event_type, top.offset, top.prev_hash, top.hash]
                row = [tenant, stream, *head]
                # written once the links are (`late`): a head never names a missing link
                late.append([s._keyspace(tenant), "audit_stream_heads", "put", row])

        for (tenant, name, version), tpl in sorted(self.templates.items()):
            tpl_row = [tenant, name, version, tpl.model_dump_json()]
            muts.append([s._keyspace(tenant), "templates", "put", tpl_row])
        for (tenant, request_id), c in sorted(self.records.items()):
            body = json.dumps(asdict(c), sort_keys=True)
            muts.append([s._keyspace(tenant), "context_records", "put", [tenant, request_id, body]])

        self._plan_stats(muts)

        for (tenant, memory_id), (w, t, b) in sorted(self.weights.items()):
            muts.append([s._keyspace(tenant), "decay_weights", "put", [tenant, memory_id, w, t, b]])
        for key in sorted(self.timeline):
            e = self.timeline[key]
            entry = [e.tenant, e.memory_id, e.offset, e.what, e.event_id, e.event_type]
            muts.append(
                [s._keyspace(e.tenant), "timeline", "put", [*entry, e.occurred_at, e.detail]]
            )
        self._plan_toolchains(muts)
        for tenant, document_id in sorted(self.documents):
            ks = s._keyspace(tenant)
            stored_doc = self._stored_document(tenant, document_id)
            new_doc = self.documents[(tenant, document_id)]
            _diff(document_rows(ks, stored_doc), document_rows(ks, new_doc), muts)
        return muts, late, post, self._head_moves(touched_keys)

    def _plan_purge(
        self, tenant: str, muts: list[Mutation], touched_keys: set[tuple[str, str, str]]
    ) -> None:
        """Deletes of every stored read-model row of a purged tenant, by partition key
        (op "purge": applied just below the commit's timestamp, so that what this batch
        writes after the purge survives it). The partitions are named from the stored rows:
        streams and the blinded keys, hashes and tags from the memories (no key is needed: a
        forgotten tenant's is destroyed before its purge), event ids from the outcome index,
        memory ids from every per-memory table. Keys with an active memory are moved to none
        by compare-and-set (see _head_moves)."""
        s = self._store
        ks = s._keyspace(tenant)

        def rows(name: str) -> list[Row]:
            return list(s._iterate(ks, name, [tenant], 5_000))

        streams: set[str] = set()
        partitions: set[tuple[str, tuple[Any, ...]]] = set()
        memory_ids: set[str] = set()
        for memory_id, stream, mkey, chash, tags in rows("purge:memories"):
            memory_ids.add(str(memory_id))
            streams.add(str(stream))
            if mkey is not None:
                partitions.add(("memory_keys", (tenant, stream, mkey)))
                touched_keys.add((tenant, str(stream), str(mkey)))
            if chash is not None:
                partitions.add(("memory_hashes", (tenant, stream, chash)))
            partitions.update(("memory_tags", (tenant, tag)) for tag in tags or ())
        for memory_id, kind, due_us in rows("purge:timers"):
            memory_ids.add(str(memory_id))
            timer = (int(due_us) // _HOUR_US, int(due_us), tenant, memory_id, kind)
            muts.append([s.home, "timers_by_due", "purge", list(timer)])
        for (event_id,) in rows("purge:events"):
            partitions.add(("outcomes", (tenant, event_id)))
        for name in ("purge:stats", "purge:weights"):
            memory_ids.update(str(r[0]) for r in rows(name))
        for stream in streams:
            partitions.add(("memories_by_stream", (tenant, stream)))
        partitions.update(s._document_partitions(tenant))
        partitions.update(("timeline", (tenant, memory_id)) for memory_id in memory_ids)
        for table, width in _PURGED.items():
            if width == 1:
                partitions.add((table, (tenant,)))
        for table, key in sorted(partitions, key=repr):
            muts.append([ks, table, "purge", list(key)])

    def _head_moves(self, keys: set[tuple[str, str, str]]) -> list[HeadMove]:
        """For each key the batch touched (blinded): its current memory (the active one of
        highest version, as current_for_key sees it) before the batch and after it. Stored
        memories hold the key when its rows say so (a purged tenant's key cannot hash them
        again); the batch's own are hashed."""
        moves: list[HeadMove] = []
        blind = self._store._blind

        def keyed(tenant: str, m: Memory, mkey: str) -> bool:
            return m.key is not None and blind(tenant, "key", m.key) == mkey

        for tenant, stream, mkey in sorted(keys):
            rows = self._store._rows(tenant, "key_rows", [tenant, stream, mkey])
            listed = {str(r[1]) for r in rows if r[2] == MemoryStatus.ACTIVE.value}
            ids = sorted(listed)
            ids += [
                mid
                for (t, mid), m in self.memories.items()
                if t == tenant and mid not in listed and keyed(tenant, m, mkey)
            ]
            self._load(tenant, ids)
            stored = [self.stored.get((tenant, mid)) for mid in ids]
            pending = [
                self.memories.get(
                    (tenant, mid), None if tenant in self.purged else self.stored.get((tenant, mid))
                )
                for mid in ids
            ]

            def was_keyed(m: Memory, held_ids: set[str] = listed) -> bool:
                return m.memory_id in held_ids

            def now_keyed(
                m: Memory, t: str = tenant, k: str = mkey, held_ids: set[str] = listed
            ) -> bool:
                if (t, m.memory_id) in self.memories:
                    return keyed(t, m, k)
                return m.memory_id in held_ids

            held = _current_holder(stored, stream, was_keyed)

            holder = _current_holder(pending, stream, now_keyed)
            held_id = held.memory_id if held is not None else None
            if held_id != (holder.memory_id if holder is not None else None):
                moves.append(HeadMove(tenant, stream, mkey, held_id, holder))
        return moves

    def _plan_timers(self, muts: list[Mutation], post: list[Mutation]) -> None:
        s = self._store
        by_tenant: dict[str, list[str]] = {}
        for tenant, memory_id, _ in self.timers:
            by_tenant.setdefault(tenant, []).append(memory_id)
        stored: dict[tuple[str, str, str], Timer] = {}
        for tenant, ids in by_tenant.items():
            if tenant in self.purged:
                continue  # its stored timers go with the purge
            for chunk in _chunks(sorted(set(ids))):
                for r in s._rows(tenant, "timers_of", [tenant, chunk]):
                    due = datetime.fromisoformat(str(r[3]))
                    stored[(tenant, str(r[0]), str(r[1]))] = Timer(
                        tenant, str(r[0]), due, str(r[1])
                    )
        buckets: set[int] = set()
        for key in sorted(self.timers):
            tenant = key[0]
            ks = s._keyspace(tenant)
            after = self.timers[key]
            before = stored.get(key)
            _diff(
                _timer_rows(before, ks, s.home) if before else {},
                _timer_rows(after, ks, s.home) if after else {},
                muts,
            )
            if after is not None:
                buckets.add(_us(after.due_at) // _HOUR_US)
        post.extend([s.home, "timer_buckets", "put", [0, b]] for b in sorted(buckets))

    def _plan_toolchains(self, muts: list[Mutation]) -> None:
        """A toolchain's row and its stream's index row; a dropped one loses both (its
        stream read from the stored row)."""
        s = self._store
        for (tenant, toolchain_id), state in sorted(self.toolchains.items()):
            ks = s._keyspace(tenant)
            if state is not None:
                row = [tenant, toolchain_id, state.stream, state.model_dump_json()]
                muts.append([ks, "toolchains", "put", row])
                index = [tenant, state.stream, toolchain_id]
                muts.append([ks, "toolchains_by_stream", "put", index])
                continue
            stored = self._stored_toolchain(tenant, toolchain_id)
            muts.append([ks, "toolchains", "del", [tenant, toolchain_id]])
            if stored is not None:
                index = [tenant, stored.stream, toolchain_id]
                muts.append([ks, "toolchains_by_stream", "del", index])

    def _plan_stats(self, muts: list[Mutation]) -> None:
        """Usage counters: this batch's additions go to the row of its own consumer
        partition (the position it commits), which no other process writes while the
        commit is fenced, so reading that row and writing back the sum loses nothing. A
        commit without a position counts under ''; such commits take the store's lock."""
        s = self._store
        part = self.position[0] if self.position is not None else ""
        by_tenant: dict[str, list[str]] = {}
        for tenant, memory_id in self.stats:
            by_tenant.setdefault(tenant, []).append(memory_id)
        for tenant, ids in sorted(by_tenant.items()):
            stored: dict[str, Row] = {}
            for chunk in _chunks(sorted(ids) if tenant not in self.purged else []):
                stored.update(
                    (str(r[0]), r[2:])
                    for r in s._rows(tenant, "stats_of", [tenant, chunk])
                    if r[1] == part
                )
            for memory_id in sorted(ids):
                delta = self.stats[(tenant, memory_id)]
                usage = _Usage()
                if memory_id in stored:
                    usage.add(stored[memory_id])
                usage.add((*delta[:4], delta[4]))
                row = [tenant, memory_id, part, *usage.counts, usage.last_used]
                muts.append([s._keyspace(tenant), "memory_usage", "put", row])
