"""Typed views of Mnemo's HTTP answers.

The models accept fields they do not know (`extra="allow"`), so a client keeps working
against a newer server; known fields are parsed and typed. Memory types, scopes and
statuses are the domain's enums.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from mnemo.domain.memory import MemoryStatus, MemoryType, Scope

__all__ = [
    "Accepted",
    "Actor",
    "Citation",
    "ContextResponse",
    "Event",
    "EventPage",
    "Feedback",
    "IncludedMemory",
    "LeftOut",
    "Memory",
    "MemoryPage",
    "Outcome",
    "Provenance",
    "PublishResult",
    "RegisteredTemplate",
    "Score",
    "SearchHit",
    "SearchResult",
    "Template",
    "TemplateInfo",
    "Trace",
]


class _Model(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class Provenance(_Model):
    source_id: str | None = None
    source_location: str | None = None
    trust: float = 0.5
    verified: bool = False


class Memory(_Model):
    """A registered memory as the API returns it."""

    memory_id: str
    tenant: str
    stream: str
    type: MemoryType
    scope: Scope
    content: str = ""
    key: str | None = None
    value: str | None = None
    tags: tuple[str, ...] = ()
    semantic_weight: float = 0.5
    provenance: Provenance = Provenance()
    guard: dict[str, Any] | None = None
    created_at: datetime
    valid_until: datetime | None = None
    stale_after: datetime | None = None
    timezone: str | None = None
    version: int = 1
    supersedes: str | None = None
    status: MemoryStatus = MemoryStatus.ACTIVE
    source_event_id: str
    rule_id: str | None = None
    fetched_at: datetime | None = Field(
        default=None, description="a tool result's fetch instant (its age counts from here)"
    )
    content_hash: str = ""

    def text(self) -> str:
        """What the memory says: its content, or `key: value`."""
        if self.content.strip():
            return self.content.strip()
        return f"{self.key}: {self.value}" if self.key else ""


class MemoryPage(_Model):
    memories: list[Memory]
    next_after: str | None = Field(default=None, description="cursor for the next page")


class Outcome(_Model):
    """What registration made of one published event."""

    index: int = 0
    outcome: str = Field(
        description="registered, superseded, duplicate, rejected, ignored, applied"
    )
    memory_id: str | None = None
    version: int | None = None
    reason_code: str | None = None
    detail: str | None = None


class Accepted(_Model):
    """One published event as the log took it."""

    event_id: str
    offset: int
    seq: int
    duplicate: bool
    outcomes: list[Outcome] | None = Field(
        default=None, description="present when the publish waited for registration"
    )


class PublishResult(_Model):
    accepted: list[Accepted]
    complete: bool = Field(
        default=True, description="false when the wait ended before consumers caught up"
    )

    @property
    def event_ids(self) -> list[str]:
        return [a.event_id for a in self.accepted]

    @property
    def outcomes(self) -> list[Outcome]:
        """Every outcome of every event, in order (empty when the publish did not wait)."""
        return [o for a in self.accepted for o in (a.outcomes or ())]

    @property
    def memory_ids(self) -> list[str]:
        """The memories the events registered (or found as duplicates)."""
        return [o.memory_id for o in self.outcomes if o.memory_id]


class SearchHit(_Model):
    memory: Memory
    score: float
    rank: int | None = None
    weight: float


class SearchResult(_Model):
    hits: list[SearchHit]


class Score(_Model):
    relevance: float
    rank: int | None = None
    weight: float
    freshness: float
    trust: float
    score: float


class IncludedMemory(_Model):
    memory: Memory
    section: str
    rank: int
    tokens: int
    trimmed: bool = False
    via: str = "search"
    score: Score


class LeftOut(_Model):
    memory_id: str
    section: str
    reason: str = Field(
        description="budget, expired, superseded, low_relevance, not_shown, conflict or "
        "summarised (a turn a fact in the context stands for)"
    )


class Suggestion(_Model):
    """A tool call a trigger suggests, and the memory version that fired it. Send
    `trigger` back with the call's result (record_tool_result) to close the loop."""

    trigger_id: str
    description: str = ""
    tool: str
    arguments: dict[str, str] = Field(default_factory=dict)
    stream: str
    memory_id: str
    memory_version: int
    key: str | None = None
    value: str | None = None
    age_seconds: float
    trigger: dict[str, str]


class Suggestions(_Model):
    as_of: datetime
    suggestions: list[Suggestion] = Field(default_factory=list)


class ToolResultRecorded(_Model):
    """A recorded tool result: its event, and (when waited for) what registration made of
    it."""

    event_id: str
    offset: int
    duplicate: bool
    complete: bool = True
    outcomes: list[Outcome] | None = None

    @property
    def memory_id(self) -> str | None:
        return self.outcomes[0].memory_id if self.outcomes else None


class IngestedDocument(_Model):
    """A document Mnemo accepted: its id, its event, and (when waited for) whether its
    sections are registered memories (`status` registered)."""

    document_id: str
    event_id: str
    sha256: str
    pages: int
    sections: int
    status: str


class EntityHit(_Model):
    field: str
    value: Any
    text: str


class SectionHit(_Model):
    memory_id: str
    section: int
    page: int | None = None
    clause: str | None = None
    text: str
    entities: list[EntityHit] = Field(default_factory=list)


class DocumentHit(_Model):
    document_id: str
    filename: str | None = None
    subject: str
    hits: list[SectionHit] = Field(default_factory=list)
    hits_total: int | None = Field(
        default=None, description="sections that met the conditions (hits holds the first)"
    )


class QueryResult(_Model):
    """A structured query's answer: the matching documents (at most the limit) and how
    many matched in all."""

    documents: list[DocumentHit] = Field(default_factory=list)
    total: int


class ContextResponse(_Model):
    """An assembled context; quote `request_id` when reporting the model's answer."""

    request_id: str
    protocol: str
    downgraded_from: str | None = None
    template: str
    fingerprint: str
    tokenizer: str
    as_of: datetime
    context: str
    tokens: int
    budget: int
    section_tokens: dict[str, int] = Field(default_factory=dict)
    included: list[IncludedMemory] = Field(default_factory=list)
    left_out: list[LeftOut] = Field(default_factory=list)
    conflicts: list[dict[str, Any]] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)
    suggestions: list[Suggestion] = Field(
        default_factory=list, description="tool calls the operators' triggers suggest"
    )

    @property
    def memory_ids(self) -> list[str]:
        return [i.memory.memory_id for i in self.included]


class Citation(_Model):
    memory_id: str
    position: str


class Feedback(_Model):
    """What Mnemo made of a reported answer."""

    request_id: str
    response_hash: str
    cited: list[Citation] = Field(default_factory=list)
    unknown_refs: list[str] = Field(default_factory=list)
    corrected: list[str] = Field(default_factory=list)


class Actor(_Model):
    kind: str
    id: str


class Trace(_Model):
    traceparent: str
    tracestate: str | None = None


class Event(_Model):
    """An event as the log holds it; `offset` is set when tailing the tenant's log."""

    event_id: str
    type: str
    schema_version: int
    tenant: str
    stream: str
    seq: int | None = None
    occurred_at: datetime
    actor: Actor
    causation_id: str | None = None
    correlation_id: str | None = None
    trace: Trace | None = None
    payload: dict[str, Any]
    encryption: dict[str, Any] | None = None
    offset: int | None = None


class EventPage(_Model):
    events: list[Event]
    next: int | None = Field(
        default=None, description="from_seq (replay) or after_offset (tail) for the next page"
    )


class Template(_Model):
    name: str
    version: int
    protocol: str = "v1"
    description: str = ""
    sections: list[dict[str, Any]] = Field(default_factory=list)


class TemplateInfo(_Model):
    template: Template
    fingerprint: str


class RegisteredTemplate(_Model):
    template: Template
    fingerprint: str
    created: bool
