"""Projection writes: what handlers ask the read models to do. Each write is idempotent."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from mnemo.domain.context import ContextTemplate
from mnemo.domain.document_index import DocumentRecord, EntityRow
from mnemo.domain.memory import Memory, MemoryStatus
from mnemo.domain.pii import REDACTED
from mnemo.domain.toolchain import ToolchainState

__all__ = [
    "AuditRecord",
    "BumpStats",
    "ContextRecord",
    "DropTimer",
    "DropToolchain",
    "DropWeight",
    "MemoryStats",
    "Outcome",
    "OutcomeKind",
    "PutAudit",
    "PutContextRecord",
    "PutMemory",
    "PutOutcome",
    "PutTemplate",
    "PutTimeline",
    "PutTimer",
    "PutToolchain",
    "PutWeight",
    "SetStatus",
    "TimelineEntry",
    "Timer",
    "Write",
]


class OutcomeKind(StrEnum):
    REGISTERED = "registered"
    SUPERSEDED = "superseded"  # registered, and it replaced an older version
    DUPLICATE = "duplicate"
    REJECTED = "rejected"
    IGNORED = "ignored"  # an observation no rule asked to remember
    APPLIED = "applied"  # a feedback or forget event took effect


@dataclass(frozen=True, slots=True)
class Outcome:
    """What registration made of one published event (one event may yield several)."""

    tenant: str
    event_id: str
    index: int
    kind: OutcomeKind
    memory_id: str | None = None
    version: int | None = None
    reason_code: str | None = None
    detail: str | None = None


@dataclass(frozen=True, slots=True)
class Timer:
    """A decay deadline kept in a read model, so it survives restarts."""

    tenant: str
    memory_id: str
    due_at: datetime
    kind: str = "expire"


@dataclass(frozen=True, slots=True)
class AuditRecord:
    """One link of a stream's hash chain: link n holds the stream's event n (its seq)."""

    tenant: str
    stream: str
    n: int
    event_id: str
    event_type: str
    offset: int
    prev_hash: str
    hash: str


@dataclass(frozen=True, slots=True)
class PutMemory:
    memory: Memory


@dataclass(frozen=True, slots=True)
class SetStatus:
    tenant: str
    memory_id: str
    status: MemoryStatus
    erase_content: bool = False

    def applied_to(self, memory: Memory) -> Memory:
        """The memory with this status; erasing keeps nothing a person said or where it
        came from: content, value, key, tags, sources, time zone, guard and sealed values
        go (the time zone, sealed whole on a user stream, says where the person is)."""
        update: dict[str, object] = {"status": self.status}
        if self.erase_content:
            update.update(
                content="",
                value=None,
                key=None,
                tags=(),
                provenance=memory.provenance.model_copy(
                    update={"source_id": None, "source_location": None}
                ),
                guard=None,
                timezone=None,
                content_hash="erased",
                sealed=None,
            )
        return memory.model_copy(update=update)


@dataclass(frozen=True, slots=True)
class PutOutcome:
    outcome: Outcome


@dataclass(frozen=True, slots=True)
class PutTimer:
    timer: Timer


@dataclass(frozen=True, slots=True)
class DropTimer:
    tenant: str
    memory_id: str
    kind: str = "expire"


@dataclass(frozen=True, slots=True)
class PutAudit:
    record: AuditRecord


@dataclass(frozen=True, slots=True)
class PutTemplate:
    tenant: str
    template: ContextTemplate


@dataclass(frozen=True, slots=True)
class ContextRecord:
    """What an assembled context held, kept so that feedback can be checked against it."""

    tenant: str
    request_id: str
    stream: str
    event_id: str
    template: str
    memory_ids: tuple[str, ...]
    truncated: tuple[str, ...]
    tokens: int
    response_hash: str | None = None
    sections: tuple[str, ...] = ()
    left_out: tuple[str, ...] = ()
    budget: int = 0
    rendered: str | None = None
    occurred_at: str | None = None
    # (memory id, event id) of the citation that credited each memory the context included:
    # the registrar files the first it reads, so one context credits a memory once,
    # whatever event ids its citations carry
    credited: tuple[tuple[str, str], ...] = ()

    def credited_by(self, memory_id: str) -> str | None:
        """The event id of the citation that credited `memory_id` in this context."""
        return next((e for m, e in self.credited if m == memory_id), None)


def credits_citation(record: ContextRecord | None, stream: str, memory_id: str) -> bool:
    """Whether a citation of `memory_id`, published on `stream` and naming the context
    `record`, is worth anything: only when that context exists, was assembled on the same
    stream and included the memory. A citation of a memory the model never saw (or one
    that names no context) moves no weight, trust or count."""
    return record is not None and record.stream == stream and memory_id in record.memory_ids


_STAND_IN_ID = re.compile(r"h[0-9a-f]{16}")


def cited_context_ids(request_id: str | None, causation_id: str | None) -> tuple[str, ...]:
    """The request ids under which to look up the context a citation names: its own
    `request_id`, and, when that reads as a keyed stand-in or the redaction marker (the
    citation's words shredded with its subject's key: a rebuild after a forget), the
    context event that Mnemo names as the citation's cause (its id is the context's request
    id, an event id, which stands in clear in the log)."""
    if request_id is None:
        return ()
    unreadable = request_id == REDACTED or bool(_STAND_IN_ID.fullmatch(request_id))
    if unreadable and causation_id is not None and causation_id != request_id:
        return (request_id, causation_id)
    return (request_id,)


def citation_refusal(record: ContextRecord | None, stream: str, memory_id: str) -> str | None:
    """Why a citation cannot credit `memory_id` (a reason code), or None when it can."""
    if record is None:
        return "CONTEXT_NOT_FOUND"
    if record.stream != stream:
        return "CITATION_STREAM_MISMATCH"
    if memory_id not in record.memory_ids:
        return "CITATION_NOT_IN_CONTEXT"
    return None


@dataclass(frozen=True, slots=True)
class PutContextRecord:
    record: ContextRecord


@dataclass(frozen=True, slots=True)
class MemoryStats:
    """How a memory has been used: the numbers behind engagement and the heat map."""

    tenant: str
    memory_id: str
    included: int = 0
    truncated: int = 0
    cited: int = 0
    corrected: int = 0
    last_used: datetime | None = None


@dataclass(frozen=True, slots=True)
class BumpStats:
    """Add to a memory's usage counters (idempotence comes from the consumer's position)."""

    tenant: str
    memory_id: str
    at: datetime
    included: int = 0
    truncated: int = 0
    cited: int = 0
    corrected: int = 0


@dataclass(frozen=True, slots=True)
class PutWeight:
    """The decay consumer's own record of a memory's weight and trust."""

    tenant: str
    memory_id: str
    weight: float
    trust: float
    base: float  # the weight it was registered with, which verification restores


@dataclass(frozen=True, slots=True)
class TimelineEntry:
    """One event in a memory's life."""

    tenant: str
    memory_id: str
    offset: int
    event_id: str
    event_type: str
    what: str
    occurred_at: str
    detail: str = ""


@dataclass(frozen=True, slots=True)
class PutTimeline:
    entry: TimelineEntry


@dataclass(frozen=True, slots=True)
class DropWeight:
    """The memory left for good (superseded, expired, forgotten): feedback moves it no more."""

    tenant: str
    memory_id: str


@dataclass(frozen=True, slots=True)
class PurgeTenant:
    """Forget a whole tenant: drop its memories, keyword terms, tags, outcomes, timers,
    weights, timeline, usage counters and context records. The audit trail and templates
    stay (they hold no user content)."""

    tenant: str


@dataclass(frozen=True, slots=True)
class PutToolchain:
    """A toolchain's state as its events left it (mnemo.domain.toolchain)."""

    state: ToolchainState


@dataclass(frozen=True, slots=True)
class DropToolchain:
    """A toolchain's state goes (its subject was forgotten)."""

    tenant: str
    toolchain_id: str


@dataclass(frozen=True, slots=True)
class PutDocument:
    """An ingested document and every entity row of its sections (replacing any it had)."""

    record: DocumentRecord
    rows: tuple[EntityRow, ...]


@dataclass(frozen=True, slots=True)
class DropDocuments:
    """A forget: the documents of a stream (and their entity rows) go, or, with
    `memory_id`, the entity rows of that one section."""

    tenant: str
    stream: str
    memory_id: str | None = None


Write = (
    PurgeTenant
    | PutMemory
    | SetStatus
    | PutOutcome
    | PutTimer
    | DropTimer
    | PutAudit
    | PutTemplate
    | PutContextRecord
    | BumpStats
    | PutWeight
    | DropWeight
    | PutTimeline
    | PutToolchain
    | DropToolchain
    | PutDocument
    | DropDocuments
)
