"""The sealing decorators of the ports: an event log that seals what it appends, and views of
the log, the read models and the vector index that open sealed values for authorized
reads (the sealer itself, shared with the Kafka publisher, is mnemo.sealing).

Nothing here logs a value, a key or a ciphertext.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import replace
from datetime import datetime
from typing import Any

import orjson

from mnemo.domain.context import ContextTemplate
from mnemo.domain.errors import KeyDestroyed
from mnemo.domain.events import (
    ContextAssembled,
    ContextResponseReported,
    Envelope,
    FeedbackRelayed,
    ForgetRequested,
    LoggedEvent,
    MemoryCited,
    MemoryCorrected,
)
from mnemo.domain.memory import Memory, MemoryStatus
from mnemo.domain.projection import (
    AuditRecord,
    ContextRecord,
    MemoryStats,
    Outcome,
    TimelineEntry,
    Timer,
)
from mnemo.domain.term_keys import KeyedDimensions
from mnemo.domain.toolchain import ToolchainState
from mnemo.handlers.toolchain import failure_digest, output_digest
from mnemo.ports import (
    Appended,
    Blinder,
    Claim,
    EventLog,
    Fusion,
    MemoryQuery,
    MemoryStore,
    SparseVector,
    StoreTransaction,
    Vector,
    VectorFilter,
    VectorIndex,
    VectorPoint,
)
from mnemo.sealing import (
    KeyCache,
    Sealer,
    is_private_stream,
    is_sealed,
)

log = logging.getLogger("mnemo.sealing")

__all__ = [
    "BlindTagIndex",
    "OpenedEventLog",
    "OpenedMemoryStore",
    "SealingEventLog",
    "TenantBlinder",
]

# Mnemo's records of a subject's memories being used (an assembled context, the feedback on
# it, feedback relayed from another stream): a forgotten subject's stream takes none of them
_RECORDS_OF_USE = frozenset(
    {
        ContextAssembled.TYPE,
        ContextResponseReported.TYPE,
        MemoryCited.TYPE,
        MemoryCorrected.TYPE,
        FeedbackRelayed.TYPE,
    }
)


class SealingEventLog(EventLog):
    """The log as Mnemo's consumers and context assembler append to it: every event is
    sealed (`Sealer.seal`, not strict) on its way in, and records of use bound for a
    forgotten subject's stream (its key shredded) are left out; reads pass through as
    logged."""

    def __init__(self, inner: EventLog, sealer: Sealer) -> None:
        self.inner = inner
        self.sealer = sealer

    def _forgotten_stream(self, envelope: Envelope) -> bool:
        if envelope.type not in _RECORDS_OF_USE:
            return False
        if self.sealer.tenant_forgotten(envelope.tenant):
            return True  # a forgotten tenant: no stream of it takes a record of use
        if not is_private_stream(envelope.stream):
            return False
        return self.sealer.keys.is_destroyed(self.sealer.key_id(envelope.tenant, envelope.stream))

    def append(self, events: Sequence[Envelope]) -> list[Appended]:
        kept = [self.sealer.seal(e, strict=False) for e in events if not self._forgotten_stream(e)]
        return self.inner.append(kept) if kept else []

    def read(self, after_offset: int, limit: int) -> list[LoggedEvent]:
        return self.inner.read(after_offset, limit)

    def read_stream(self, tenant: str, stream: str, from_seq: int, limit: int) -> list[LoggedEvent]:
        return self.inner.read_stream(tenant, stream, from_seq, limit)

    def read_stream_json(self, tenant: str, stream: str, from_seq: int, limit: int) -> list[bytes]:
        return self.inner.read_stream_json(tenant, stream, from_seq, limit)

    def read_tenant(self, tenant: str, after_offset: int, limit: int) -> list[LoggedEvent]:
        return self.inner.read_tenant(tenant, after_offset, limit)

    def read_tenant_back(
        self, tenant: str, before_offset: int | None, limit: int
    ) -> list[LoggedEvent]:
        return self.inner.read_tenant_back(tenant, before_offset, limit)

    def head(self) -> int:
        return self.inner.head()

    def stream_head(self, tenant: str, stream: str) -> int:
        return self.inner.stream_head(tenant, stream)

    def get(self, tenant: str, event_id: str) -> LoggedEvent | None:
        return self.inner.get(tenant, event_id)

    def caused_by(self, tenant: str, event_id: str) -> list[LoggedEvent]:
        return self.inner.caused_by(tenant, event_id)

    def tenants_between(self, after_offset: int, upto_offset: int) -> dict[str, int]:
        # the inner log's own answer (the SQLite log's reads no event); the port's default
        # would page through every event of the range, on every step of every consumer
        return self.inner.tenants_between(after_offset, upto_offset)

    def sealed_key_ids(self, tenant: str) -> set[str]:
        return self.inner.sealed_key_ids(tenant)

    def close(self) -> None:
        self.inner.close()


_NO_FILTER = VectorFilter()
_FUSION = Fusion()


class TenantBlinder(Blinder):
    """The read models' blind indexes: HMAC-SHA256 of a kind and a value under the tenant's
    search key (the vault's, the one BlindTagIndex uses), cut to 128 bits. A memory's key,
    tags and content hash reach the store's lookup columns only this way, so the rows a
    forget deletes leave tombstones that name no word. The tenant's key, not the user's: a
    user's memories are erased after the user's key is destroyed, and their old rows must
    still be found to be deleted. Once the tenant's key is destroyed, hashes are made under
    a key of this process's own, which match nothing stored (a purge finds its rows from
    the stored hashes, see the stores)."""

    def __init__(self, keys: KeyCache) -> None:
        self.keys = keys
        self._lost = os.urandom(32)

    def blind(self, tenant: str, kind: str, value: str) -> str:
        try:
            key = self.keys.search_key(tenant)
        except KeyDestroyed:
            key = self._lost
        digest = hmac.new(key, f"store\x00{kind}\x00{value}".encode(), hashlib.sha256)
        return "b" + digest.hexdigest()[:32]


class BlindTagIndex(VectorIndex):
    """The vector index with no tag and no term id in clear, under the tenant's search key:
    each tag a point carries, and each tag a search filters on, becomes a keyed hash, and
    every keyword dimension (an unkeyed hash of a term, `keywords.term_id`), of a point and
    of a query alike, goes through a keyed permutation (`term_keys`), which leaves scores
    and rankings as they were. So the index's files (segments, payload indexes, write-ahead
    log) hold no word a person chose, and no dimension a guessed word could be hashed to,
    even before a forget deletes the points. Everything else passes through."""

    def __init__(self, inner: VectorIndex, sealer: Sealer) -> None:
        self.inner = inner
        self.sealer = sealer
        self._dims: dict[bytes, KeyedDimensions] = {}  # by the tenant's term key
        self._dims_lock = threading.Lock()

    def _key(self, tenant: str) -> bytes:
        try:
            return self.sealer.keys.search_key(tenant)
        except KeyDestroyed:  # a forgotten tenant: nothing of it matches, nothing is kept
            return os.urandom(32)

    def _tokens(self, tenant: str, tags: Iterable[str]) -> tuple[str, ...]:
        key = self._key(tenant)
        return tuple(
            "#" + hmac.new(key, f"tag\x00{tag}".encode(), hashlib.sha256).hexdigest()[:20]
            for tag in tags
        )

    def _terms(self, tenant: str, keywords: SparseVector) -> SparseVector:
        if not keywords or not self.sealer.permute_terms:
            return keywords
        key = hmac.new(self._key(tenant), b"terms", hashlib.sha256).digest()
        with self._dims_lock:
            dims = self._dims.get(key)
            if dims is None:
                if len(self._dims) >= 64:  # tenants' permutations kept: a bounded few
                    self._dims.clear()
                dims = self._dims[key] = KeyedDimensions(key)
            return dims.vector(keywords)

    def _filter(self, tenant: str, flt: VectorFilter) -> VectorFilter:
        return replace(flt, tags=self._tokens(tenant, flt.tags)) if flt.tags else flt

    def upsert(self, points: Sequence[VectorPoint]) -> None:
        self.inner.upsert(
            [
                replace(
                    p,
                    tags=self._tokens(p.tenant, p.tags) if p.tags else p.tags,
                    keywords=self._terms(p.tenant, p.keywords),
                )
                if p.tags or p.keywords
                else p
                for p in points
            ]
        )

    def delete(self, tenant: str, memory_ids: Sequence[str]) -> None:
        self.inner.delete(tenant, memory_ids)

    def search(
        self, tenant: str, vector: Vector, limit: int, flt: VectorFilter = _NO_FILTER
    ) -> list[tuple[str, float]]:
        return self.inner.search(tenant, vector, limit, self._filter(tenant, flt))

    def keyword_search(
        self, tenant: str, keywords: SparseVector, limit: int, flt: VectorFilter = _NO_FILTER
    ) -> list[tuple[str, float]]:
        return self.inner.keyword_search(
            tenant, self._terms(tenant, keywords), limit, self._filter(tenant, flt)
        )

    def hybrid_search(
        self,
        tenant: str,
        vector: Vector | None,
        keywords: SparseVector,
        limit: int,
        flt: VectorFilter = _NO_FILTER,
        fusion: Fusion = _FUSION,
    ) -> list[tuple[str, float]]:
        return self.inner.hybrid_search(
            tenant, vector, self._terms(tenant, keywords), limit, self._filter(tenant, flt), fusion
        )

    def ids(self, tenant: str | None = None) -> list[str]:
        return self.inner.ids(tenant)

    def flush(self) -> None:
        self.inner.flush()

    def optimize(self) -> None:
        self.inner.optimize()

    def clear(self) -> None:
        self.inner.clear()

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:  # an adapter's own extras (dim, path, count)
        return getattr(self.inner, name)


_FORGET_SCAN_PAGE = 1_000
_FORGET_STREAMS_KEPT = 4_096


class OpenedEventLog(EventLog):
    """The log as every use case reads it (replay, tail, insights, the console): events
    come out opened, whole-sealed fields and the detector's values alike, or redacted
    under a shredded key and when every memory the event made was forgotten (one forgotten
    memory does not shred a key). Views never see a wrapped key or a ciphertext. Appends
    pass through: the publish path seals before it appends."""

    def __init__(self, inner: EventLog, sealer: Sealer, store: MemoryStore) -> None:
        self.inner = inner
        self.sealer = sealer
        self.store = store  # the read models as stored, to tell forgotten memories
        # (tenant, stream) -> (the last seq looked at, the seq of its last whole-stream
        # forget, 0 when none), the streams read most recently kept
        self._stream_forgets: OrderedDict[tuple[str, str], tuple[int, int]] = OrderedDict()
        self._forgets_lock = threading.Lock()

    def _stream_forgotten_upto(self, tenant: str, stream: str) -> int:
        """The seq of the stream's last `ForgetRequested` without a memory id (0: never
        forgotten whole). Every event up to it reads redacted: the words of a forgotten
        stream that made no memory (an utterance no rule matched, a contradiction's reason,
        a toolchain step's output) are gone with its memories, though a shared stream's
        key lives on."""
        key = (tenant, stream)
        with self._forgets_lock:
            scanned, upto = self._stream_forgets.get(key, (0, 0))
        head = self.inner.stream_head(tenant, stream)
        while scanned < head:
            page = self.inner.read_stream(tenant, stream, scanned + 1, _FORGET_SCAN_PAGE)
            if not page:
                break
            for logged in page:
                env = logged.envelope
                if env.type == ForgetRequested.TYPE and env.payload.get("memory_id") is None:
                    upto = max(upto, env.seq or 0)
            scanned = max(scanned + 1, page[-1].envelope.seq or 0)
        with self._forgets_lock:
            self._stream_forgets[key] = (scanned, upto)
            self._stream_forgets.move_to_end(key)
            while len(self._stream_forgets) > _FORGET_STREAMS_KEPT:
                self._stream_forgets.popitem(last=False)
        return upto

    def _redacted(self, tenant: str, envelope: Envelope | Mapping[str, Any]) -> bool:
        if isinstance(envelope, Envelope):
            stream, seq = envelope.stream, envelope.seq
        else:
            stream, seq = str(envelope.get("stream")), envelope.get("seq")
        if isinstance(seq, int) and seq <= self._stream_forgotten_upto(tenant, stream):
            return True
        return self._forgotten(tenant, envelope)

    def _forgotten(self, tenant: str, envelope: Envelope | Mapping[str, Any]) -> bool:
        if isinstance(envelope, Envelope):
            event_id, payload = envelope.event_id, envelope.payload
            event_type = envelope.type
        else:
            event_id, payload = str(envelope.get("event_id")), envelope.get("payload") or {}
            event_type = str(envelope.get("type"))
        if event_type == ContextAssembled.TYPE and isinstance(payload, Mapping):
            # the rendered text holds the words of every memory it included: one of them
            # forgotten, the record of the context reads redacted
            included = [str(m) for m in payload.get("memory_ids") or ()]
            return any(
                m.status is MemoryStatus.FORGOTTEN for m in self.store.get_many(tenant, included)
            )
        memory = payload.get("memory") if isinstance(payload, Mapping) else None
        if isinstance(memory, Mapping) and "memory_id" in memory:
            ids = [str(memory["memory_id"])]
        else:
            ids = [o.memory_id for o in self.store.outcome(tenant, event_id) if o.memory_id]
        if not ids:
            return False
        found = self.store.get_many(tenant, ids)
        return len(found) == len(ids) and all(m.status is MemoryStatus.FORGOTTEN for m in found)

    def _open(self, logged: LoggedEvent) -> LoggedEvent:
        env = logged.envelope
        if not is_sealed(env):
            return logged
        return self.sealer.open_event(logged, redact=self._redacted(env.tenant, env))

    def _opened(self, events: Sequence[LoggedEvent]) -> list[LoggedEvent]:
        return [self._open(e) for e in events]

    def _tenant_gone(self, tenant: str) -> bool:
        """A forgotten tenant (its key shredded): every read of it answers nothing, its
        streams in the log included, whatever they hold in clear."""
        return self.sealer.keys.is_destroyed(tenant)

    def append(self, events: Sequence[Envelope]) -> list[Appended]:
        return self.inner.append(events)

    def append_guarded(
        self, events: Sequence[Envelope], before: Callable[[list[Envelope]], None]
    ) -> list[Appended]:
        return self.inner.append_guarded(events, before)

    def read(self, after_offset: int, limit: int) -> list[LoggedEvent]:
        return self._opened(self.inner.read(after_offset, limit))

    def read_stream(self, tenant: str, stream: str, from_seq: int, limit: int) -> list[LoggedEvent]:
        if self._tenant_gone(tenant):
            return []
        return self._opened(self.inner.read_stream(tenant, stream, from_seq, limit))

    def read_stream_json(self, tenant: str, stream: str, from_seq: int, limit: int) -> list[bytes]:
        if self._tenant_gone(tenant):
            return []
        opened = []
        for body in self.inner.read_stream_json(tenant, stream, from_seq, limit):
            if b'"encryption":{' not in body and b'"sealed":{' not in body:
                opened.append(body)
                continue
            event = orjson.loads(body)
            redact = self._redacted(tenant, event)
            opened.append(orjson.dumps(self.sealer.open_json(event, redact=redact)))
        return opened

    def read_tenant(self, tenant: str, after_offset: int, limit: int) -> list[LoggedEvent]:
        if self._tenant_gone(tenant):
            return []
        return self._opened(self.inner.read_tenant(tenant, after_offset, limit))

    def read_tenant_back(
        self, tenant: str, before_offset: int | None, limit: int
    ) -> list[LoggedEvent]:
        if self._tenant_gone(tenant):
            return []
        return self._opened(self.inner.read_tenant_back(tenant, before_offset, limit))

    def head(self) -> int:
        return self.inner.head()

    def stream_head(self, tenant: str, stream: str) -> int:
        return self.inner.stream_head(tenant, stream)

    def get(self, tenant: str, event_id: str) -> LoggedEvent | None:
        if self._tenant_gone(tenant):
            return None
        found = self.inner.get(tenant, event_id)
        return None if found is None else self._open(found)

    def caused_by(self, tenant: str, event_id: str) -> list[LoggedEvent]:
        if self._tenant_gone(tenant):
            return []
        return self._opened(self.inner.caused_by(tenant, event_id))

    def sealed_key_ids(self, tenant: str) -> set[str]:
        return self.inner.sealed_key_ids(tenant)

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:  # an adapter's own extras
        return getattr(self.inner, name)


def open_toolchain(sealer: Sealer, state: ToolchainState) -> ToolchainState:
    """A toolchain as its readers see it: the placeholders of its steps' outputs and errors
    opened (redacted under a shredded key), the ciphertexts dropped, and each step's digest
    that of the opened content, the one a client sending the same outcome again computes."""
    if not any(d.sealed for d in state.done) and not any(f.sealed for f in state.failures):
        return state
    done = []
    for step in state.done:
        if step.sealed is None:
            done.append(step)
            continue
        opened = sealer.open_block(state.tenant, step.sealed)
        output = sealer.open_text(step.output, opened)
        done.append(
            step.model_copy(
                update={"output": output, "digest": output_digest(output), "sealed": None}
            )
        )
    failures = []
    for failure in state.failures:
        if failure.sealed is None:
            failures.append(failure)
            continue
        opened = sealer.open_block(state.tenant, failure.sealed)
        error = failure.error.model_copy(
            update={
                "reason": sealer.open_text(failure.error.reason, opened),
                "field": None
                if failure.error.field is None
                else sealer.open_text(failure.error.field, opened),
            }
        )
        failures.append(
            failure.model_copy(
                update={"error": error, "digest": failure_digest(error), "sealed": None}
            )
        )
    return state.model_copy(update={"done": tuple(done), "failures": tuple(failures)})


class OpenedMemoryStore(MemoryStore):
    """The read models as every use case reads them: memories come out opened (their
    sealed values put back, or redacted under a shredded key), so the API, the console, the
    search and the context assembler, and with it the token count, all see one text: the
    one the model receives. A forgotten tenant's memories, context records, timelines and
    toolchains read as none, whatever a purge may have missed (fail closed). Writes
    (`transaction`) and everything else pass through."""

    def __init__(self, inner: MemoryStore, sealer: Sealer) -> None:
        self.inner = inner
        self.sealer = sealer

    def _open(self, memory: Memory) -> Memory:
        return self.sealer.open_memory(memory)

    def _gone(self, tenant: str) -> bool:
        return self.sealer.tenant_forgotten(tenant)

    def get(self, tenant: str, memory_id: str) -> Memory | None:
        if self._gone(tenant):
            return None
        found = self.inner.get(tenant, memory_id)
        return None if found is None else self._open(found)

    def get_many(self, tenant: str, memory_ids: Sequence[str]) -> list[Memory]:
        if self._gone(tenant):
            return []
        return [self._open(m) for m in self.inner.get_many(tenant, memory_ids)]

    def query(self, tenant: str, query: MemoryQuery) -> list[Memory]:
        if self._gone(tenant):
            return []
        return [self._open(m) for m in self.inner.query(tenant, query)]

    def query_each(self, tenant: str, queries: Sequence[MemoryQuery]) -> list[list[Memory]]:
        if self._gone(tenant):
            return [[] for _ in queries]
        return [[self._open(m) for m in found] for found in self.inner.query_each(tenant, queries)]

    def history(self, tenant: str, stream: str, key: str) -> list[Memory]:
        if self._gone(tenant):
            return []
        return [self._open(m) for m in self.inner.history(tenant, stream, key)]

    def transaction(self) -> AbstractContextManager[StoreTransaction]:
        return self.inner.transaction()

    def position(self, consumer: str) -> int:
        return self.inner.position(consumer)

    def claim(self, consumer: str) -> int:
        return self.inner.claim(consumer)

    def positions(self, consumers: Sequence[str]) -> dict[str, int]:
        return self.inner.positions(consumers)

    def claims(self, consumers: Sequence[str]) -> dict[str, Claim]:
        return self.inner.claims(consumers)

    def outcome(self, tenant: str, event_id: str) -> list[Outcome]:
        return self.inner.outcome(tenant, event_id)

    def due_timers(self, now: datetime, limit: int) -> list[Timer]:
        return self.inner.due_timers(now, limit)

    def audit_trail(self, tenant: str, stream: str, after_n: int, limit: int) -> list[AuditRecord]:
        return self.inner.audit_trail(tenant, stream, after_n, limit)

    def audit_heads(self, tenant: str) -> list[AuditRecord]:
        return self.inner.audit_heads(tenant)

    def template(
        self, tenant: str, name: str, version: int | None = None
    ) -> ContextTemplate | None:
        return self.inner.template(tenant, name, version)

    def templates(self, tenant: str) -> list[ContextTemplate]:
        return self.inner.templates(tenant)

    def context_record(self, tenant: str, request_id: str) -> ContextRecord | None:
        if self._gone(tenant):
            return None
        return self.inner.context_record(tenant, request_id)

    def memory_stats(self, tenant: str, memory_ids: Sequence[str]) -> list[MemoryStats]:
        if self._gone(tenant):
            return []
        return self.inner.memory_stats(tenant, memory_ids)

    def context_records(
        self, tenant: str, limit: int, before: str | None = None
    ) -> list[ContextRecord]:
        if self._gone(tenant):
            return []
        return self.inner.context_records(tenant, limit, before)

    def timeline(self, tenant: str, memory_id: str, limit: int = 500) -> list[TimelineEntry]:
        if self._gone(tenant):
            return []
        return self.inner.timeline(tenant, memory_id, limit)

    def toolchain(self, tenant: str, toolchain_id: str) -> ToolchainState | None:
        if self._gone(tenant):
            return None
        found = self.inner.toolchain(tenant, toolchain_id)
        return None if found is None else open_toolchain(self.sealer, found)

    def counts(self) -> dict[str, int]:
        return self.inner.counts()

    def checksum(self) -> str:
        return self.inner.checksum()

    def reset(self) -> None:
        self.inner.reset()

    def close(self) -> None:
        self.inner.close()

    def __getattr__(self, name: str) -> Any:  # an adapter's own extras (a session, a path)
        return getattr(self.inner, name)
