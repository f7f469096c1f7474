"""Ports: the small interfaces the domain and the services need from the outside world.

One adapter module per technology lives in `mnemo.adapters`; every adapter of a port
passes the same contract suite in tests/contract.
"""

from __future__ import annotations

import abc
import hashlib
from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum

from mnemo.domain.acceptance import refuse_reused_id
from mnemo.domain.access import ApiKey, Tenant
from mnemo.domain.checkpoint import Checkpoint, Signature
from mnemo.domain.context import ContextTemplate
from mnemo.domain.document_index import DocumentRecord, EntityFilter, EntityRow
from mnemo.domain.errors import ConflictError
from mnemo.domain.events import Envelope, LoggedEvent, sealed_key_ids
from mnemo.domain.keywords import SparseVector
from mnemo.domain.memory import Memory, MemoryStatus, MemoryType, Scope
from mnemo.domain.projection import (
    AuditRecord,
    ContextRecord,
    MemoryStats,
    Outcome,
    TimelineEntry,
    Timer,
    Write,
)
from mnemo.domain.toolchain import ToolchainState

__all__ = [
    "PROBE_SECONDS",
    "AccessStore",
    "Appended",
    "ArchivedEvent",
    "AuditCheckpoints",
    "AuditReads",
    "Blinder",
    "BlobStore",
    "CheckpointAnchors",
    "Clock",
    "ConsumerStore",
    "Coordinates",
    "DocumentReads",
    "Embedder",
    "EventArchive",
    "EventLog",
    "Fusion",
    "KeyVault",
    "LogRecord",
    "LogTopic",
    "MemoryQuery",
    "MemoryReads",
    "MemoryStore",
    "ProjectionStore",
    "ReadStore",
    "RecordFate",
    "RecordStatus",
    "Signer",
    "SparseVector",
    "StoreOperations",
    "StoreTransaction",
    "TemplateReads",
    "TimerReads",
    "Tokenizer",
    "ToolchainReads",
    "UsageReads",
    "VectorFilter",
    "VectorIndex",
    "VectorPoint",
]

Vector = list[float]


# ---- event log -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Appended:
    """Where an appended event landed. `duplicate` is true when its id was already there."""

    event_id: str
    offset: int
    seq: int
    duplicate: bool


class EventLog(abc.ABC):
    """The append-only log of every event, the source of truth for every read model."""

    @abc.abstractmethod
    def append(self, events: Sequence[Envelope]) -> list[Appended]:
        """Append atomically: all or none. Gives each event the next gapless sequence of its
        stream; an event whose id is already in the log is not appended again.
        Raises ConflictError when an event's expected_seq is not its stream's head."""

    def append_guarded(
        self, events: Sequence[Envelope], before: Callable[[list[Envelope]], None]
    ) -> list[Appended]:
        """Append as `append` does, first calling `before` with the events that will be
        recorded (not those whose id the log holds) once they have passed the checks the
        log can make: what must happen before the log records an event (a key shredded
        before its request to forget) then never happens for an event the log refuses.
        When `before` raises, nothing is appended.

        This default checks against `get` and `stream_head`, which may lag the log (the
        distributed log's archive): an expected_seq below the head is refused here
        (ConflictError, STALE_SEQUENCE); one above it is left to the sequencer. A log that
        checks and records in one transaction overrides this to call `before` inside it."""
        items = list(events)
        fresh: list[Envelope] = []
        for event in items:
            held = self.get(event.tenant, event.event_id)
            if held is not None:
                refuse_reused_id(event, held.envelope.digest)
                continue
            head = self.stream_head(event.tenant, event.stream)
            if event.expected_seq is not None and event.expected_seq < head:
                raise ConflictError(
                    f"stream {event.stream} is at sequence {head}, not {event.expected_seq}",
                    code="STALE_SEQUENCE",
                    field="expected_seq",
                )
            fresh.append(event)
        before(fresh)
        return self.append(items)

    @abc.abstractmethod
    def read(self, after_offset: int, limit: int) -> list[LoggedEvent]:
        """Events after an offset, in log order."""

    @abc.abstractmethod
    def read_stream(self, tenant: str, stream: str, from_seq: int, limit: int) -> list[LoggedEvent]:
        """One stream's events with seq >= from_seq, in sequence order, without a gap:
        the answer stops before a number that is not readable yet."""

    @abc.abstractmethod
    def read_stream_json(self, tenant: str, stream: str, from_seq: int, limit: int) -> list[bytes]:
        """One stream's events as stored JSON (each an envelope with its seq), in order: what
        replay and sync send on without parsing."""

    @abc.abstractmethod
    def read_tenant(self, tenant: str, after_offset: int, limit: int) -> list[LoggedEvent]:
        """One tenant's events after an offset, in log order."""

    @abc.abstractmethod
    def read_tenant_back(
        self, tenant: str, before_offset: int | None, limit: int
    ) -> list[LoggedEvent]:
        """One tenant's newest `limit` events below an offset (from the newest when None),
        newest first: the views that show the latest events page back with it, whatever
        the gaps between a log's offsets."""

    @abc.abstractmethod
    def head(self) -> int:
        """The offset of the last event, 0 for an empty log."""

    @abc.abstractmethod
    def stream_head(self, tenant: str, stream: str) -> int:
        """The last sequence number of a stream, 0 when it has none."""

    @abc.abstractmethod
    def get(self, tenant: str, event_id: str) -> LoggedEvent | None:
        """One event of a tenant by id. Event ids are unique within a tenant."""

    @abc.abstractmethod
    def caused_by(self, tenant: str, event_id: str) -> list[LoggedEvent]:
        """The events whose causation id is `event_id`, in log order."""

    def tenants_between(self, after_offset: int, upto_offset: int) -> dict[str, int]:
        """The tenants with events at offsets in (after_offset, upto_offset], each with the
        first such offset: whose work waits for a consumer at `after_offset`. This default
        pages through `read`; a log indexed by tenant answers without reading the events."""
        firsts: dict[str, int] = {}
        after = after_offset
        while after < upto_offset and (page := self.read(after, 1_000)):
            for e in page:
                if e.offset > upto_offset:
                    return firsts
                firsts.setdefault(e.envelope.tenant, e.offset)
            after = page[-1].offset
        return firsts

    def sealed_key_ids(self, tenant: str) -> set[str]:
        """Every vault key the tenant's events in the whole log were sealed under (forgetting
        the tenant destroys them all). This default pages through `read_tenant`; a log whose
        reads lag its appends must look where every appended event already is."""
        key_ids: set[str] = set()
        after = 0
        while page := self.read_tenant(tenant, after, 1_000):
            key_ids |= sealed_key_ids(tenant, (e.envelope for e in page))
            after = page[-1].offset
        return key_ids

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""


# ---- memory store (read models) -------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemoryQuery:
    """Filters over one tenant's memories."""

    stream: str | None = None
    types: tuple[MemoryType, ...] = ()
    scopes: tuple[Scope, ...] = ()
    tags: tuple[str, ...] = ()
    key: str | None = None
    statuses: tuple[MemoryStatus, ...] = (MemoryStatus.ACTIVE,)
    live_at: datetime | None = None  # hide memories whose validity ended by then
    verification_due: bool = False  # only memories waiting for the user to confirm them
    limit: int = 100
    after: str | None = None  # paging cursor: memory id


class StoreTransaction(abc.ABC):
    """What a consumer sees and does inside one atomic batch."""

    @abc.abstractmethod
    def get(self, tenant: str, memory_id: str) -> Memory | None: ...

    @abc.abstractmethod
    def current_for_key(self, tenant: str, stream: str, key: str) -> Memory | None:
        """The active memory holding a key in a stream, if any."""

    @abc.abstractmethod
    def find_by_hash(self, tenant: str, stream: str, content_hash: str) -> Memory | None:
        """An active memory with exactly this content, if any."""

    def prefetch_hashes(self, keys: Sequence[tuple[str, str, str]]) -> None:
        """A hint: `find_by_hash` will be asked about these (tenant, stream, content hash)
        keys. A store that pays a round trip per lookup reads them all at once here; the
        answers are the same either way. This default does nothing."""
        return None

    def prefetch_before(self, keys: Sequence[tuple[str, str, str, MemoryType]]) -> None:
        """A hint: `memory_before` will be asked about these (tenant, stream, memory id,
        type) keys. A store that pays round trips per lookup reads them all at once here;
        the answers are the same either way. This default does nothing."""
        return None

    def prefetch_lookups(
        self,
        hashes: Sequence[tuple[str, str, str]],
        before: Sequence[tuple[str, str, str, MemoryType]],
    ) -> None:
        """Both hints at once (`prefetch_hashes`, `prefetch_before`): a store that reads
        ahead reads the two kinds side by side."""
        self.prefetch_hashes(hashes)
        self.prefetch_before(before)

    def prefetch_memories(self, tenant: str, memory_ids: Sequence[str]) -> None:
        """A hint: `get` will be asked about these memories of `tenant`. A store that pays a
        round trip per read reads them all at once here; the answers are the same either
        way. This default does nothing."""
        return None

    @abc.abstractmethod
    def stream_memories(self, tenant: str, stream: str) -> list[Memory]:
        """Every memory of a stream whatever its status, by memory id."""

    def memory_before(
        self, tenant: str, stream: str, memory_id: str, type: MemoryType
    ) -> Memory | None:
        """The memory of this type in a stream with the greatest id below `memory_id`,
        whatever its status: the turn right before a new one (ids are time-ordered). This
        default scans the stream; an adapter with an ordered index answers directly."""
        found = None
        for m in self.stream_memories(tenant, stream):
            if m.memory_id >= memory_id:
                break
            if m.type is type:
                found = m
        return found

    @abc.abstractmethod
    def tenant_memories(self, tenant: str) -> list[Memory]:
        """Every memory of a tenant whatever its status, by memory id (forgetting a tenant)."""

    @abc.abstractmethod
    def last_audit(self, tenant: str, stream: str) -> AuditRecord | None:
        """The last link of a stream's audit chain, if any."""

    @abc.abstractmethod
    def template(self, tenant: str, name: str, version: int) -> ContextTemplate | None: ...

    @abc.abstractmethod
    def context_record(self, tenant: str, request_id: str) -> ContextRecord | None: ...

    @abc.abstractmethod
    def weight_of(self, tenant: str, memory_id: str) -> tuple[float, float, float] | None:
        """The decay consumer's (weight, trust, registered weight) of a memory."""

    @abc.abstractmethod
    def toolchain(self, tenant: str, toolchain_id: str) -> ToolchainState | None:
        """A toolchain's state, this transaction's writes included."""

    @abc.abstractmethod
    def stream_toolchains(self, tenant: str, stream: str) -> list[str]:
        """The ids of the toolchains that live on a stream, sorted."""

    @abc.abstractmethod
    def apply(self, writes: Sequence[Write]) -> None:
        """Apply projection writes; each is idempotent."""

    @abc.abstractmethod
    def set_position(self, consumer: str, offset: int, epoch: int | None = None) -> None:
        """Record how far a consumer has read, committed with the writes. With an `epoch`
        (from `MemoryStore.claim`), the commit holds only while that epoch is still the
        latest claim on `consumer`; otherwise it raises FencedOff and writes nothing."""


class ProjectionStore(abc.ABC):
    """What a consumer needs of the read models: atomic batches of projection writes
    committed with its position, and the claims that fence an older holder of a position."""

    @abc.abstractmethod
    def transaction(self) -> AbstractContextManager[StoreTransaction]:
        """One atomic batch: commits on normal exit, rolls back on error."""

    @abc.abstractmethod
    def position(self, consumer: str) -> int:
        """The last offset a consumer has durably processed (0 when none)."""

    @abc.abstractmethod
    def claim(self, consumer: str) -> int:
        """Become the one writer of a position name (a consumer's partition): returns an
        epoch above every earlier claim on it. Commits made under an older epoch are
        refused from then on (FencedOff). Call it before reading `position`."""

    @abc.abstractmethod
    def claims(self, consumers: Sequence[str]) -> dict[str, Claim]:
        """The latest claim on each of these position names that was ever claimed: its
        epoch and which process made it, for the status to show who
        holds each partition."""

    def positions(self, consumers: Sequence[str]) -> dict[str, int]:
        """Several consumers' positions as other readers see them (lag, waits): how far
        each one's writes are applied. Unlike `position`, which a consumer calls before it
        reads on, it need not finish a commit under way."""
        return {c: self.position(c) for c in dict.fromkeys(consumers)}


class MemoryReads(abc.ABC):
    """Memories and what registration made of each event, as the use cases read them."""

    @abc.abstractmethod
    def get(self, tenant: str, memory_id: str) -> Memory | None: ...

    @abc.abstractmethod
    def get_many(self, tenant: str, memory_ids: Sequence[str]) -> list[Memory]: ...

    @abc.abstractmethod
    def query(self, tenant: str, query: MemoryQuery) -> list[Memory]:
        """Memories matching the filters, ordered by memory id (time-ordered)."""

    def query_each(self, tenant: str, queries: Sequence[MemoryQuery]) -> list[list[Memory]]:
        """What `query` answers for each of `queries`, in their order. A store that can
        ask several at once (round trips side by side) answers them so."""
        return [self.query(tenant, q) for q in queries]

    @abc.abstractmethod
    def history(self, tenant: str, stream: str, key: str) -> list[Memory]:
        """Every version of a key in a stream, oldest first."""

    @abc.abstractmethod
    def outcome(self, tenant: str, event_id: str) -> list[Outcome]:
        """What registration made of a published event."""


class TemplateReads(abc.ABC):
    """The registered context templates."""

    @abc.abstractmethod
    def template(
        self, tenant: str, name: str, version: int | None = None
    ) -> ContextTemplate | None:
        """A registered template: that version, or the latest when version is None."""

    @abc.abstractmethod
    def templates(self, tenant: str) -> list[ContextTemplate]:
        """Every registered template of the tenant, by name then version."""


class UsageReads(abc.ABC):
    """Assembled contexts, the usage counters of memories and each memory's timeline."""

    @abc.abstractmethod
    def context_record(self, tenant: str, request_id: str) -> ContextRecord | None: ...

    @abc.abstractmethod
    def context_records(
        self, tenant: str, limit: int, before: str | None = None
    ) -> list[ContextRecord]:
        """The tenant's assembled contexts, newest first (paging: request ids before one)."""

    @abc.abstractmethod
    def memory_stats(self, tenant: str, memory_ids: Sequence[str]) -> list[MemoryStats]:
        """Usage counters of the given memories (absent ones have none yet)."""

    @abc.abstractmethod
    def timeline(self, tenant: str, memory_id: str, limit: int = 500) -> list[TimelineEntry]:
        """The events that touched a memory, oldest first."""


class TimerReads(abc.ABC):
    """The decay's timers that have come due."""

    @abc.abstractmethod
    def due_timers(self, now: datetime, limit: int) -> list[Timer]:
        """Timers due at `now`, earliest first, across tenants."""


class AuditReads(abc.ABC):
    """The hash chains of the audit read model."""

    @abc.abstractmethod
    def audit_trail(self, tenant: str, stream: str, after_n: int, limit: int) -> list[AuditRecord]:
        """A stream's audit links with n > after_n, in order."""

    @abc.abstractmethod
    def audit_heads(self, tenant: str) -> list[AuditRecord]:
        """The last link of each of the tenant's audited streams, by stream."""


class ToolchainReads(abc.ABC):
    """The state of resumable toolchains."""

    @abc.abstractmethod
    def toolchain(self, tenant: str, toolchain_id: str) -> ToolchainState | None:
        """A toolchain's state (mnemo.domain.toolchain), None when the tenant has none by
        that id."""


class DocumentReads(abc.ABC):
    """Reads of the documents' entity read model (mnemo.domain.document_index)."""

    @abc.abstractmethod
    def document(self, tenant: str, document_id: str) -> DocumentRecord | None: ...

    @abc.abstractmethod
    def stream_documents(self, tenant: str, stream: str) -> list[DocumentRecord]: ...

    @abc.abstractmethod
    def entity_rows(self, tenant: str, wanted: EntityFilter) -> list[EntityRow]:
        """The rows one filter names, served by the store's indexes; a tenant's rows are
        never read whole (a filter names its fields, and a key or a range when it has one).
        A text row found by its value carries that value; one read from a field's rows
        (`ne`, `contains`) carries it, or None when the store keeps only a keyed hash of
        text (the query engine then reads it from the section)."""


class StoreOperations(abc.ABC):
    """What operators do to the read models as a whole: count, compare, drop for a
    rebuild."""

    @abc.abstractmethod
    def counts(self) -> dict[str, int]:
        """Row counts per read model, for status and tests."""

    @abc.abstractmethod
    def checksum(self) -> str:
        """A digest of every read model's content (positions excluded)."""

    @abc.abstractmethod
    def reset(self) -> None:
        """Drop every read model and consumer position, for a rebuild from the log."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""


class ConsumerStore(ProjectionStore, TimerReads, AuditReads, abc.ABC):
    """What the runners of the consumers use: batches, positions, due timers and the audit
    links committed (the audit consumer signs only those)."""

    @abc.abstractmethod
    def outcome(self, tenant: str, event_id: str) -> list[Outcome]:
        """What registration made of a published event (the decay scan keeps a toolchain's
        timer until its start has one)."""

    def close(self) -> None:
        """Release resources."""


class ReadStore(MemoryReads, TemplateReads, UsageReads, AuditReads, ToolchainReads, abc.ABC):
    """What the read use cases (the API, context assembly, the console) use."""


class MemoryStore(ConsumerStore, ReadStore, StoreOperations, abc.ABC):
    """The per-tenant read models, every port above: what an adapter implements (each port
    has its contract suite, tests/contract/test_store_*.py)."""


# ---- vector index ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VectorPoint:
    """A memory as the index holds it: its dense embedding and its keyword vector (BM25
    term weights, see mnemo.domain.keywords), with the fields searches filter on."""

    memory_id: str
    tenant: str
    stream: str
    type: str
    scope: str
    tags: tuple[str, ...]
    vector: Vector
    keywords: SparseVector = field(default_factory=SparseVector)


@dataclass(frozen=True, slots=True)
class VectorFilter:
    """Every field narrows the search; tags match when any one of them matches."""

    streams: tuple[str, ...] = ()
    types: tuple[str, ...] = ()
    scopes: tuple[str, ...] = ()
    tags: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Fusion:
    """How a hybrid search fuses its dense and keyword lists: weighted reciprocal-rank
    fusion, sum over lists of weight / (k + rank), rank from 1, a list that misses a memory
    adding nothing. `depth` candidates are taken from each list. The engine computes it in
    the one query: each list's reciprocal ranks by its RRF over that list alone, their
    weighted sum by a formula. (Its weighted RRF, 1 / (k - 1 + rank / weight), divides the
    rank by the weight, so a weight also moves where a list's scores start to fall.)"""

    k: int = 5
    dense_weight: float = 1.0
    keyword_weight: float = 1.25
    depth: int = 40


class VectorIndex(abc.ABC):
    """Nearest-neighbour and keyword (BM25) search over memories, always within one tenant.

    Keyword scores use inverse document frequencies over the tenant's own points only:
    another tenant's data never changes a tenant's scores or ranking."""

    @abc.abstractmethod
    def upsert(self, points: Sequence[VectorPoint]) -> None:
        """Insert or replace points by memory id; replaying the same points changes nothing."""

    @abc.abstractmethod
    def delete(self, tenant: str, memory_ids: Sequence[str]) -> None:
        """Remove points; unknown ids are ignored."""

    @abc.abstractmethod
    def search(
        self, tenant: str, vector: Vector, limit: int, flt: VectorFilter = VectorFilter()
    ) -> list[tuple[str, float]]:
        """Memory ids of the tenant by cosine similarity, best first (ties by id)."""

    @abc.abstractmethod
    def keyword_search(
        self, tenant: str, keywords: SparseVector, limit: int, flt: VectorFilter = VectorFilter()
    ) -> list[tuple[str, float]]:
        """Memory ids of the tenant by BM25: sum over shared dimensions of the query's value
        x the memory's value x idf, idf = ln(1 + (N - n + 0.5) / (n + 0.5)) over the
        tenant's N points that have keywords (n of them holding the dimension); best first,
        ties by id. Only memories sharing a dimension with the query."""

    @abc.abstractmethod
    def hybrid_search(
        self,
        tenant: str,
        vector: Vector | None,
        keywords: SparseVector,
        limit: int,
        flt: VectorFilter = VectorFilter(),
        fusion: Fusion = Fusion(),
    ) -> list[tuple[str, float]]:
        """Memory ids of the tenant by the fusion of the dense list (`vector`, when given)
        and the keyword list (when `keywords` has terms), each `fusion.depth` deep, in one
        query to the engine; fused scores, best first, ties by id."""

    @abc.abstractmethod
    def ids(self, tenant: str | None = None) -> list[str]:
        """Every memory id held, sorted; all tenants when tenant is None."""

    @abc.abstractmethod
    def flush(self) -> None:
        """Make every upsert and delete so far durable."""

    @abc.abstractmethod
    def optimize(self) -> None:
        """Build search structures; may take a while on large indexes."""

    @abc.abstractmethod
    def clear(self) -> None:
        """Remove every point (for a rebuild)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""


# ---- embedder, tokenizer, clock, key vault ------------------------------------------------


class Embedder(abc.ABC):
    """Turns text into unit vectors. Memories and queries are embedded differently."""

    name: str
    dim: int

    @abc.abstractmethod
    def embed_passages(self, texts: Sequence[str]) -> list[Vector]: ...

    @abc.abstractmethod
    def embed_query(self, text: str) -> Vector: ...


class Tokenizer(abc.ABC):
    """Counts tokens the way a model does, offline."""

    name: str

    @abc.abstractmethod
    def count(self, texts: Sequence[str]) -> list[int]: ...

    @abc.abstractmethod
    def truncate(self, text: str, max_tokens: int) -> str:
        """The longest prefix of `text` that fits in max_tokens tokens."""


class Clock(abc.ABC):
    """The only way handlers and services learn the time."""

    @abc.abstractmethod
    def now(self) -> datetime:
        """The current instant, timezone-aware (UTC)."""


class BlobStore(abc.ABC):
    """Content-addressed bytes (ingested documents) by tenant and subject stream: a blob
    is named by 64 hex digits derived from its plaintext (`mnemo.service.blobs`: a keyed
    hash of its sha256), stored once per (tenant, stream, name), and
    what is stored is opaque to the store (a user stream's blobs arrive sealed under the
    subject's key, see `mnemo.service.blobs`). Forgetting a stream or a tenant deletes its
    blobs. Adapters refuse a blob over their size limit (`max_bytes`, a document's
    plaintext, plus a few KiB for the seal around it) with InvalidInput
    (DOCUMENT_TOO_LARGE) and fail with Unavailable when their storage is down."""

    max_bytes: int

    @abc.abstractmethod
    def put(self, tenant: str, stream: str, digest: str, data: bytes) -> None:
        """Store `data` under `digest` (64 hex digits). Idempotent: a blob already there
        is left as it is."""

    @abc.abstractmethod
    def get(self, tenant: str, stream: str, digest: str) -> bytes | None:
        """The stored bytes, or None when there are none (never stored, or deleted)."""

    @abc.abstractmethod
    def digests(self, tenant: str, stream: str) -> list[str]:
        """The digests stored for one stream, sorted."""

    @abc.abstractmethod
    def delete_stream(self, tenant: str, stream: str) -> int:
        """Delete every blob of a stream; how many there were."""

    @abc.abstractmethod
    def delete_tenant(self, tenant: str) -> int:
        """Delete every blob of a tenant; how many there were."""

    @abc.abstractmethod
    def count(self, tenant: str) -> int:
        """How many blobs a tenant has."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release connections or files."""


class Blinder(abc.ABC):
    """Keyed hashes for a read model's lookup columns (blind indexes): a store that finds
    memories by key, tag or content hash keeps the hash in those columns, never the value,
    so its files (and the tombstones a delete leaves) hold nothing a dictionary could be
    tested against without the tenant's key, which lives in the vault."""

    @abc.abstractmethod
    def blind(self, tenant: str, kind: str, value: str) -> str:
        """The keyed hash of `value` for `tenant` (`kind` separates what is hashed: "key",
        "tag", "hash"). The same for equal inputs for as long as the tenant's key lives;
        once it is destroyed, a hash that matches nothing stored before."""


# The key id of a vault's identity (`KeyVault.identity`): tenant ids start with a letter or
# a digit, and a user's key id with its tenant's, so no one else's key is named so.
IDENTITY_KEY_ID = ".vault-identity"
IDENTITY_LABEL = b"mnemo-vault-identity\x00"


class KeyVault(abc.ABC):
    """Master keys by key_id (a tenant, or a user within a tenant) for envelope encryption:
    payload values are sealed with data keys that the vault wraps."""

    @abc.abstractmethod
    def data_key(self, key_id: str) -> tuple[bytes, bytes, int]:
        """A fresh 256-bit data key: (plaintext, wrapped copy, key version). Creates the key
        on first use."""

    @abc.abstractmethod
    def unwrap(self, key_id: str, wrapped: bytes) -> bytes:
        """The plaintext of a wrapped data key. Raises KeyDestroyed when the key is gone."""

    @abc.abstractmethod
    def rewrap(self, key_id: str, wrapped: bytes) -> tuple[bytes, int]:
        """The same data key wrapped under the key's current version, and that version
        (rotation without downtime: old versions keep unwrapping meanwhile). The plaintext
        need not leave the vault. Raises KeyDestroyed."""

    @abc.abstractmethod
    def rotate(self, key_id: str) -> int:
        """Start a new key version; returns it. Old wrapped keys still unwrap."""

    @abc.abstractmethod
    def search_key(self, key_id: str) -> bytes:
        """A stable 32-byte secret for keyed hashes of values sealed under key_id: the same
        across rotations, unrecoverable once the key is destroyed (KeyDestroyed). Creates
        the key on first use."""

    @abc.abstractmethod
    def destroy(self, key_id: str) -> None:
        """Crypto-shred: afterwards nothing wrapped under this key can be unwrapped."""

    @abc.abstractmethod
    def is_destroyed(self, key_id: str) -> bool:
        """Whether key_id's key was destroyed (crypto-shredded): for good, so a forgotten
        tenant's reads can answer nothing. False for a key never made."""

    @abc.abstractmethod
    def has_key(self, key_id: str) -> bool:
        """Whether key_id has a live key now, so that sealing under it makes no new one
        (False for a key never made and for a destroyed one). Never creates a key."""

    def identity(self, *, create: bool) -> bytes | None:
        """A fingerprint of this vault's key material (32 bytes): the digest of the search
        key of a key id no tenant or user has (`IDENTITY_KEY_ID`), so only a vault holding
        that key's material gives it, and a wiped or another vault gives another. None
        when the vault has no such key and `create` is false; with `create` the key is
        made on first use. Nothing else is created either way."""
        if not create and not self.has_key(IDENTITY_KEY_ID):
            return None
        return hashlib.sha256(IDENTITY_LABEL + self.search_key(IDENTITY_KEY_ID)).digest()


# ---- audit checkpoints: a signer and where signed checkpoints are kept -------------------


class Signer(abc.ABC):
    """Signs audit checkpoints with a key that the store's writers cannot read. `tenant`
    says whose checkpoint it is (an adapter may keep a key per tenant)."""

    name: str  # what status pages show: the technology and the key's name

    @abc.abstractmethod
    def sign(self, tenant: str, message: bytes) -> Signature:
        """A signature over `message` under the key's newest version. Raises Unavailable
        when the signer cannot be reached."""

    def sign_many(self, messages: Sequence[tuple[str, bytes]]) -> list[Signature]:
        """`sign` over (tenant, message) pairs, the signatures in their order: all of them
        or, raising as `sign` does, none. An adapter whose signer takes a batch in one
        request overrides this."""
        return [self.sign(tenant, message) for tenant, message in messages]

    @abc.abstractmethod
    def verify(self, tenant: str, message: bytes, signature: Signature) -> bool:
        """Whether `signature` is this signer's over `message`: False for anything else (a
        changed message, another key, a malformed signature). Raises Unavailable when it
        cannot tell."""


class AuditCheckpoints(abc.ABC):
    """Signed checkpoints of the audit chains. Not a read model: a rebuild from the log
    neither drops nor rewrites them, so a rebuilt chain is checked against them."""

    @abc.abstractmethod
    def add(self, checkpoint: Checkpoint) -> bool:
        """Store a checkpoint unless the stream already has one with its index: True when
        stored, False when the index was taken (never overwrites)."""

    @abc.abstractmethod
    def last(self, tenant: str, stream: str) -> Checkpoint | None:
        """The stream's checkpoint with the highest index, if any."""

    @abc.abstractmethod
    def of_tenant(self, tenant: str) -> list[Checkpoint]:
        """Every checkpoint of the tenant, by stream then index."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""


class CheckpointAnchors(abc.ABC):
    """The newest signed checkpoint of each (tenant, stream), kept outside the store, where
    the store's writers cannot roll it back (ADR 0017). An anchor only moves forward: a
    rollback of the store to an older checkpoint is seen against it."""

    name: str  # what status pages show: the technology and where the anchors are

    @abc.abstractmethod
    def advance(self, checkpoint: Checkpoint) -> bool:
        """Make `checkpoint` its stream's anchor when the stream has none or it is the next
        checkpoint after the anchor (`domain.checkpoint.anchor_moves`): True when it moved,
        False when the anchor is at its index or past it. Raises ConflictError with code
        AUDIT_ANCHOR_GAP when checkpoints between them must be anchored first, and with
        AUDIT_CHECKPOINT_ROLLBACK when it does not descend from the anchor. Decided and
        written atomically: concurrent writers never move an anchor back or aside. Raises
        Unavailable when the anchors cannot be reached."""

    @abc.abstractmethod
    def of_tenant(self, tenant: str) -> list[Checkpoint]:
        """The tenant's anchors, one per anchored stream, by stream. Raises Unavailable
        when they cannot be read (never an empty answer instead)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""


# ---- the distributed log: a partitioned topic plus its sequenced archive ----------------


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One record of a partitioned log topic, as a consumer received it."""

    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()
    timestamp: float | None = None  # when the log accepted it (seconds since the epoch)


@dataclass(frozen=True, slots=True)
class Coordinates:
    """Where a produced record landed."""

    partition: int
    offset: int


@dataclass(frozen=True, slots=True)
class Claim:
    """The latest claim on a position name (a consumer's partition): its epoch, and the
    process that made it (the adapters name it host/pid/instance)."""

    epoch: int
    holder: str


# how long a readiness probe gives the brokers to answer (consumers' /readyz, `mnemo status`)
PROBE_SECONDS = 3.0


class LogTopic(abc.ABC):
    """A partitioned, append-only topic (Kafka in production): produce and read raw records.
    It assigns no stream sequences; the sequencer does (see EventArchive)."""

    name: str

    @abc.abstractmethod
    def produce(
        self, records: Sequence[tuple[bytes, bytes, Sequence[tuple[str, bytes]]]]
    ) -> list[Coordinates]:
        """Append (key, value, headers) records, each acknowledged by every in-sync replica;
        records with one key keep their order in one partition."""

    @abc.abstractmethod
    def dead_letter(self, records: Sequence[tuple[LogRecord, str, str]]) -> None:
        """Copy records that cannot be processed to the dead-letter topic with (code,
        message) as the reason."""

    @abc.abstractmethod
    def dead_letter_count(self) -> int:
        """How many records the dead-letter topic holds."""

    @abc.abstractmethod
    def fetch_dead_letters(self, limit: int = 10_000) -> list[LogRecord]:
        """The dead letters, with their reason headers."""

    @abc.abstractmethod
    def partitions(self) -> list[int]: ...

    def reachable(self, timeout: float = PROBE_SECONDS) -> None:
        """Raise Unavailable unless the brokers answer a request within `timeout` seconds
        (readiness: `partitions` may be answered from metadata a client keeps)."""
        self.end_offsets()

    @abc.abstractmethod
    def end_offsets(self) -> dict[int, int]:
        """The next offset each partition will give (its record count when nothing was
        deleted)."""

    @abc.abstractmethod
    def fetch(self, partition: int, from_offset: int, limit: int) -> list[LogRecord]:
        """Records of one partition from an offset, outside any consumer group."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""


class RecordStatus(StrEnum):
    """What the sequencer made of one topic record."""

    ARCHIVED = "archived"  # a new event: sequenced and archived
    DUPLICATE = "duplicate"  # an event id archived before, from another record
    STALE = "stale"  # expected_seq was not the stream's head: refused
    DEAD = "dead"  # not an event: sent to the dead-letter topic


@dataclass(frozen=True, slots=True)
class RecordFate:
    """The sequencer's verdict on the record at (partition, offset)."""

    partition: int
    offset: int
    status: RecordStatus
    tenant: str = ""
    event_id: str = ""
    stream: str = ""
    seq: int = 0
    position: int = 0
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ArchivedEvent:
    """A sequenced event as the archive keeps it."""

    envelope: Envelope  # with its seq
    partition: int
    offset: int
    position: int  # the archive's own order, for reads across streams (tails)


class EventArchive(abc.ABC):
    """The sequenced copy of a partitioned log (Cassandra in production): per-stream
    sequences, lookups by id and cause, and each topic record's fate. Written only by the
    sequencer, which owns a partition at a time."""

    topic: str  # the name of the topic it archives

    @abc.abstractmethod
    def fates(self, partition: int, first: int, last: int) -> dict[int, RecordFate]:
        """The recorded fates of the offsets first..last of a partition."""

    def decided(self, offsets: Mapping[int, int]) -> bool:
        """Whether the sequencer has recorded the fate of each {partition: offset}."""
        return all(o in self.fates(p, o, o) for p, o in offsets.items())

    @abc.abstractmethod
    def locate(self, keys: Sequence[tuple[str, str]]) -> dict[tuple[str, str], RecordFate]:
        """Where (tenant, event id) pairs were archived, for those that were."""

    @abc.abstractmethod
    def stream_head(self, tenant: str, stream: str) -> int: ...

    @abc.abstractmethod
    def stream_heads(
        self, keys: Sequence[tuple[str, str]], below: tuple[int, int] | None = None
    ) -> dict[tuple[str, str], int]:
        """The heads of several (tenant, stream) pairs. With `below` (partition, offset),
        events placed from that offset on in that partition are left out: a batch being
        redone from there, by this process or one that lost the partition, placed them,
        and they get the same numbers again."""

    @abc.abstractmethod
    def record(self, events: Sequence[ArchivedEvent], fates: Sequence[RecordFate]) -> None:
        """Write archived events and the fates of records, atomically and idempotently."""

    @abc.abstractmethod
    def read(self, after_position: int, limit: int, tenant: str | None = None) -> list[LoggedEvent]:
        """Archived events after a position, in position order (every tenant's or one's);
        only those old enough that no earlier position can still appear."""

    @abc.abstractmethod
    def read_back(
        self, before_position: int | None, limit: int, tenant: str | None = None
    ) -> list[LoggedEvent]:
        """The newest `limit` settled events below a position (from the newest when None),
        newest first; one tenant's, or everyone's."""

    @abc.abstractmethod
    def head(self) -> int:
        """The highest archive position written so far (0 when empty)."""

    @abc.abstractmethod
    def read_stream(self, tenant: str, stream: str, from_seq: int, limit: int) -> list[bytes]:
        """One stream's events as stored JSON, from a sequence number, in order, up to the
        first number missing (its rows may land after a later one's)."""

    @abc.abstractmethod
    def get(self, tenant: str, event_id: str) -> LoggedEvent | None: ...

    @abc.abstractmethod
    def caused_by(self, tenant: str, event_id: str) -> list[LoggedEvent]: ...

    def caused_by_many(
        self, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], list[LoggedEvent]]:
        """`caused_by` of several (tenant, event id) pairs."""
        return self.caused_events(self.causes(keys))

    def causes(
        self, keys: Sequence[tuple[str, str]]
    ) -> dict[tuple[str, str], list[tuple[str, int]]]:
        """Where the events each of several (tenant, event id) pairs caused are archived:
        (stream, seq) of each, for every pair asked (empty when it caused none). The first
        half of `caused_by_many`, for a caller that reads the events only for some."""
        return {
            key: [(e.envelope.stream, e.envelope.seq or 0) for e in self.caused_by(*key)]
            for key in dict.fromkeys(keys)
        }

    def caused_events(
        self, places: Mapping[tuple[str, str], Sequence[tuple[str, int]]]
    ) -> dict[tuple[str, str], list[LoggedEvent]]:
        """The events `causes` placed, per pair, in archive order."""
        return {key: self.caused_by(*key) for key in places}

    @abc.abstractmethod
    def reset(self) -> None:
        """Drop everything (a rebuild into the same tables)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""


# ---- tenants and API keys ---------------------------------------------------------------------


class AccessStore(abc.ABC):
    """Tenants and their API keys (digests only, never a secret), and the identity of the
    vault the deployment's keys are in. Not a read model: it is not derived from the log,
    and a rebuild leaves it alone."""

    @abc.abstractmethod
    def create_tenant(self, tenant: Tenant) -> bool:
        """Record a tenant; False (and nothing changed) when the id is taken."""

    @abc.abstractmethod
    def tenant(self, tenant: str) -> Tenant | None: ...

    @abc.abstractmethod
    def tenants(self, limit: int = 1_000) -> list[Tenant]:
        """Tenants by id."""

    @abc.abstractmethod
    def add_key(self, key: ApiKey) -> None:
        """Store a new key. Raises ConflictError when its id is taken (never overwrites)."""

    @abc.abstractmethod
    def key(self, key_id: str) -> ApiKey | None:
        """One key by id, whatever its tenant: how a presented key is found."""

    @abc.abstractmethod
    def keys(self, tenant: str) -> list[ApiKey]:
        """A tenant's keys, revoked and expired ones included, by key id."""

    @abc.abstractmethod
    def revoke_key(self, tenant: str, key_id: str, at: datetime) -> ApiKey | None:
        """Mark a key of that tenant revoked from `at` (an earlier revocation stands).
        None when the tenant has no such key."""

    @abc.abstractmethod
    def vault_identity(self) -> bytes | None:
        """The identity of the key vault this deployment seals in (`KeyVault.identity`), as
        first recorded; None before any was."""

    @abc.abstractmethod
    def record_vault_identity(self, identity: bytes) -> bytes:
        """Record the vault's identity when none is yet, never overwriting one: returns the
        identity recorded now (this one, or the one another process recorded first)."""

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release resources."""
