"""The event envelope, the event catalog and the upcasters that keep old events readable.

Evolving an event (docs/events.md has the full rule):
- An optional field with a default may be added within a schema version.
- Anything else (a rename, a removal, a new required field, a changed meaning) is a new
  version, registered here with an upcaster from the version before it. Stored events are
  never rewritten; they are upcast when they are read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from enum import StrEnum
from typing import Annotated, Any, ClassVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from mnemo.domain.access import no_key_in
from mnemo.domain.context import ContextTemplate
from mnemo.domain.edge import EDGE, JsonBool, at_edge, blank, json_int, json_number
from mnemo.domain.errors import InvalidInput
from mnemo.domain.ids import valid_stream, valid_tenant
from mnemo.domain.memory import (
    KEY_RE,
    Memory,
    MemoryDraft,
    checked_zone,
    refuse_number_as_time,
)
from mnemo.domain.pii import REDACTED, SEALED_TEXT
from mnemo.domain.sealed import EncryptionBlock
from mnemo.domain.tool_result import (
    MAX_ARGUMENTS_CHARS,
    MAX_FRESH_FOR_SECONDS,
    MAX_RESULT_CHARS,
    TOOL_NAME_RE,
    parse_json_text,
)
from mnemo.domain.toolchain import (
    DEFAULT_TTL_SECONDS,
    MAX_STEPS,
    MAX_TTL_SECONDS,
    StepError,
    StepId,
    ToolchainId,
    json_text_problem,
)

__all__ = [
    "CATALOG",
    "Actor",
    "ActorKind",
    "EncryptionBlock",
    "Envelope",
    "EventPayload",
    "LoggedEvent",
    "TraceContext",
    "decode_payload",
    "sealed_key_ids",
    "validate_envelope",
]

MAX_PAYLOAD_BYTES = 64 * 1024
# Every string of the envelope has a bound (docs/events.md lists them): ids Mnemo derives
# events from are copied onto those events, so an unbounded one would be copied everywhere.
MAX_ID_CHARS = 128  # correlation_id, causation_id, actor ids
MAX_REQUEST_ID_CHARS = 64  # a context's request id, as feedback events name it


class ActorKind(StrEnum):
    AGENT = "agent"
    DEVICE = "device"
    USER = "user"
    SYSTEM = "system"


_no_credential = no_key_in


class Actor(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: ActorKind
    id: str = Field(min_length=1, max_length=MAX_ID_CHARS)

    @field_validator("id")
    @classmethod
    def _no_key(cls, value: str) -> str:
        return _no_credential(value)


class TraceContext(BaseModel):
    """W3C trace context, carried so one trace follows an event through every consumer."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    traceparent: str = Field(pattern=r"^[0-9a-f]{2}-[0-9a-f]{32}-[0-9a-f]{16}-[0-9a-f]{2}$")
    tracestate: str | None = Field(default=None, max_length=512)


class Envelope(BaseModel):
    """Everything that travels with an event. The event id is the idempotency key."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    event_id: str = Field(
        pattern=r"^[0-9a-f]{8}-[0-9a-f]{4}-[78][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$"
    )
    type: str = Field(min_length=1, max_length=64)
    schema_version: int = Field(ge=1)
    tenant: str
    stream: str
    seq: int | None = Field(default=None, ge=1)
    expected_seq: int | None = Field(default=None, ge=0)
    _ints = field_validator("schema_version", "seq", "expected_seq", mode="before")(json_int)
    occurred_at: datetime
    received_at: datetime | None = Field(
        default=None,
        description="when Mnemo accepted a published event (stamped by the gateway or the "
        "SDK's publisher, never by the client): its memories' disuse counts from here",
    )
    actor: Actor
    causation_id: str | None = Field(default=None, min_length=1, max_length=MAX_ID_CHARS)
    correlation_id: str | None = Field(default=None, min_length=1, max_length=MAX_ID_CHARS)
    trace: TraceContext | None = None
    payload: dict[str, Any]
    encryption: EncryptionBlock | None = None
    digest: str | None = Field(
        default=None,
        pattern=r"^[0-9a-f]{32}$",
        description="a keyed hash of the event as its publisher sent it (stamped by the "
        "gateway, never by the client): the same event_id sent again with other content is "
        "refused (EVENT_ID_REUSED) instead of being taken for a retry",
    )

    @field_validator("tenant")
    @classmethod
    def _tenant(cls, value: str) -> str:
        if not valid_tenant(value):
            raise ValueError("tenant must be 1-63 lowercase letters, digits, '_' or '-'")
        return value

    @field_validator("stream")
    @classmethod
    def _stream(cls, value: str) -> str:
        if not valid_stream(value):
            raise ValueError(
                "stream must be 1-128 letters, digits or '_.:@-', e.g. user:U7892 (a user "
                "stream's prefix is 'user:' in lower case)"
            )
        return _no_credential(value)

    @field_validator("causation_id", "correlation_id")
    @classmethod
    def _ids(cls, value: str | None) -> str | None:
        return None if value is None else _no_credential(value)

    @field_validator("occurred_at", "received_at", mode="before")
    @classmethod
    def _not_a_number(cls, value: object, info: ValidationInfo) -> object:
        return refuse_number_as_time(value, info)

    @field_validator("received_at")
    @classmethod
    def _received(cls, value: datetime | None) -> datetime | None:
        if value is not None and (value.utcoffset() is None or not 1970 <= value.year <= 2200):
            raise ValueError("received_at must carry its UTC offset and fall in 1970-2200")
        return value

    @field_validator("occurred_at")
    @classmethod
    def _aware(cls, value: datetime) -> datetime:
        if value.utcoffset() is None:
            raise ValueError("occurred_at must carry its UTC offset")
        if not 1970 <= value.year <= 2200:
            raise ValueError("occurred_at must fall between the years 1970 and 2200")
        return value


class LoggedEvent(BaseModel):
    """An event as the log holds it: the envelope and its position in the log."""

    model_config = ConfigDict(frozen=True)

    offset: int
    envelope: Envelope


class EventPayload(BaseModel):
    """Base of every payload model. TYPE and VERSION name it in the catalog."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    TYPE: ClassVar[str]
    VERSION: ClassVar[int]
    PUBLIC: ClassVar[bool] = True  # may agents publish it, or only consumers emit it
    # free-text payload paths (dotted) the PII detector reads before the event is logged
    SCANNED: ClassVar[tuple[str, ...]] = ()
    # payload paths holding JSON text the detector reads the same way, string by string
    # (each with the name of the member it is the value of), keeping the text JSON
    SCANNED_JSON: ClassVar[tuple[str, ...]] = ()
    # payload paths (dotted; a list's items each) that may carry a person's words: on a
    # user stream each is sealed whole under the subject's key before the log (ADR 0010)
    PRIVATE: ClassVar[tuple[str, ...]] = ()
    # PRIVATE paths Mnemo's consumers leave sealed (read models keep the stand-in; the views
    # open the logged event)
    UNOPENED: ClassVar[tuple[str, ...]] = ()


# ---- published by agents -------------------------------------------------------------


class MemoryDeclared(EventPayload):
    """An agent declares a memory explicitly."""

    TYPE = "MemoryDeclared"
    VERSION = 1
    SCANNED = (
        "memory.content",
        "memory.value",
        "memory.provenance.source_id",
        "memory.provenance.source_location",
    )
    PRIVATE = (
        "memory.content",
        "memory.value",
        "memory.key",
        "memory.tags",
        "memory.provenance.source_id",
        "memory.provenance.source_location",
        "memory.timezone",
        "memory.guard.rule_id",
        "memory.guard.patterns",
    )
    memory: MemoryDraft


class ObservationRecordedV1(EventPayload):
    """Version 1: a raw utterance under the name `utterance`, no time zone."""

    TYPE = "ObservationRecorded"
    VERSION = 1
    SCANNED = ("utterance",)
    PRIVATE = ("utterance",)
    utterance: str = Field(min_length=1, max_length=8_000)
    kind: str = "utterance"


class ObservationRecorded(EventPayload):
    """A raw observation for the registration rules to read: an utterance, an action (never
    remembered), or a turn of a conversation (always kept as a history memory, and read by
    the rules as an utterance is)."""

    TYPE = "ObservationRecorded"
    VERSION = 2
    SCANNED = ("text", "speaker")
    PRIVATE = ("text", "speaker", "timezone", "language")
    text: str = Field(min_length=1, max_length=8_000)
    kind: Annotated[str, Field(pattern=r"^(utterance|action|turn)$")] = "utterance"
    timezone: str | None = Field(default=None, max_length=64)
    language: str | None = Field(default=None, max_length=16)
    speaker: str | None = Field(
        default=None,
        min_length=1,
        max_length=128,
        description="turns: who said it; the history memory reads 'speaker: text'",
    )

    @field_validator("text")
    @classmethod
    def _said_something(cls, value: str, info: ValidationInfo) -> str:
        if at_edge(info) and blank(value):
            raise PydanticCustomError(
                "blank_text", "text holds nothing but white space or invisible characters"
            )
        return value

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str | None, info: ValidationInfo) -> str | None:
        return checked_zone(value, info)

    @field_validator("speaker")
    @classmethod
    def _speaker(cls, value: str | None, info: ValidationInfo) -> str | None:
        # a name heads the turn's history memory ("speaker: text"): printable, and more
        # than white space
        if value is not None and at_edge(info) and (not value.strip() or not value.isprintable()):
            raise PydanticCustomError(
                "invalid_speaker", "speaker must be a printable name, not blank"
            )
        return value


MemoryId = Annotated[
    str, Field(pattern=r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
]


class MemoryCited(EventPayload):
    TYPE = "MemoryCited"
    VERSION = 1
    PRIVATE = ("request_id",)  # a caller-chosen id: it may carry words
    memory_id: MemoryId
    request_id: str | None = Field(default=None, max_length=MAX_REQUEST_ID_CHARS)
    position: Annotated[str, Field(pattern=r"^(beginning|middle|end)$")] | None = None


def _not_blank_reason(value: str, info: ValidationInfo) -> str:
    """At the edge, a correction's or a contradiction's reason must show something: one of
    white space or invisible characters only counted as a real correction (its memories
    lose weight and trust) where an empty one is refused."""
    if at_edge(info) and blank(value):
        raise PydanticCustomError(
            "blank_reason", "reason holds nothing but white space or invisible characters"
        )
    return value


class MemoryCorrected(EventPayload):
    TYPE = "MemoryCorrected"
    VERSION = 1
    SCANNED = ("reason",)
    PRIVATE = ("reason", "request_id")
    memory_ids: tuple[MemoryId, ...] = Field(min_length=1, max_length=200)
    reason: str = Field(min_length=1, max_length=1_000)
    request_id: str | None = Field(default=None, max_length=MAX_REQUEST_ID_CHARS)

    @field_validator("reason")
    @classmethod
    def _said_why(cls, value: str, info: ValidationInfo) -> str:
        return _not_blank_reason(value, info)


class MemoryVerified(EventPayload):
    """The user (or a system of record) confirmed a memory: it is renewed."""

    TYPE = "MemoryVerified"
    VERSION = 1
    memory_id: MemoryId


class MemoryContradicted(EventPayload):
    """Behaviour went against a memory (bought what they said they dislike): its weight
    drops; the memory is not deleted."""

    TYPE = "MemoryContradicted"
    VERSION = 1
    SCANNED = ("reason",)
    PRIVATE = ("reason",)
    memory_id: MemoryId
    reason: str = Field(min_length=1, max_length=1_000)

    @field_validator("reason")
    @classmethod
    def _said_why(cls, value: str, info: ValidationInfo) -> str:
        return _not_blank_reason(value, info)


class ForgetRequested(EventPayload):
    """Forget one memory, every memory of the stream (`memory_id` absent; for a user stream
    with its own key, that key is destroyed too), or the whole tenant (`tenant`: every
    stream, every key)."""

    TYPE = "ForgetRequested"
    VERSION = 1
    SCANNED = ("reason",)
    PRIVATE = ("reason",)
    memory_id: MemoryId | None = None
    reason: str | None = Field(default=None, max_length=1_000)
    tenant: JsonBool = Field(
        default=False,
        description="forget the whole tenant: destroy its keys and purge its read models",
    )

    @model_validator(mode="after")
    def _one_target(self) -> ForgetRequested:
        if self.tenant and self.memory_id is not None:
            raise ValueError("forget either one memory or the whole tenant, not both")
        return self


class RewrappedKey(BaseModel):
    """One memory's data key, wrapped anew."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    memory_id: MemoryId
    previous: str = Field(
        pattern=r"^[0-9a-f]{16}$",
        description="sha256 of the wrapped key it replaces (as stored, base64), 16 hex digits",
    )
    wrapped_key: str = Field(min_length=1, max_length=4_096, description="base64")


class MemoriesRewrapped(EventPayload):
    """Memories' stored data keys moved to a newer version of their vault key (rotation
    without downtime): registration replaces each memory's wrapped key in the read model
    when it still holds the one replaced. The data keys, the sealed values and the events
    of the log stay as they are; every version keeps unwrapping. Appended by the gateway
    (`POST /v1/admin/keys/rewrap`), never by agents."""

    TYPE = "MemoriesRewrapped"
    VERSION = 1
    PUBLIC = False
    key_id: str = Field(min_length=1, max_length=256)
    key_version: int = Field(ge=1)
    memories: tuple[RewrappedKey, ...] = Field(min_length=1, max_length=200)


# the tenant's stream that holds its templates: a template belongs to the tenant, not to
# a subject, so no subject's forget takes it away
TEMPLATES_STREAM = "templates"


class TemplateRegistered(EventPayload):
    """A context template (validated when published; a version is immutable once taken),
    always in the TEMPLATES_STREAM."""

    TYPE = "TemplateRegistered"
    VERSION = 1
    template: ContextTemplate


class ContextAssembled(EventPayload):
    """The audit record of one context assembly."""

    TYPE = "ContextAssembled"
    VERSION = 1
    PUBLIC = False
    # the rendered context holds opened memories: sealed like what agents publish, and
    # the context record keeps it sealed (the inspector opens it from this event)
    SCANNED = ("rendered",)
    # the hashes are SHA-256 of the caller's query and of the model's answer: in clear, a
    # guess of either could be tested against the log for ever; they stand in keyed
    PRIVATE = ("rendered", "query_hash", "response_hash")
    UNOPENED = ("rendered",)
    request_id: str = Field(max_length=MAX_REQUEST_ID_CHARS)
    template: str = Field(max_length=128, description="name@version")
    template_fingerprint: str = Field(max_length=64)
    protocol: str = Field(max_length=16)
    subjects: tuple[Annotated[str, Field(max_length=128)], ...] = Field(max_length=32)
    query_hash: str = Field(
        max_length=64, description="sha256 of the query; the query itself is not kept"
    )
    memory_ids: tuple[str, ...]
    memory_types: tuple[str, ...]
    sections: tuple[str, ...] = Field(description="the section of each included memory")
    rendered_tokens: int
    budget: int
    tokenizer: str
    truncated: tuple[str, ...] = Field(default=(), description="memory ids cut for the budget")
    left_out: tuple[str, ...] = Field(default=(), description="'memory_id:reason' for the rest")
    conflicts: tuple[str, ...] = Field(
        default=(),
        description="each conflict between constraints decided: 'kept_id>dropped_id:rule', "
        "the rule being trust, specificity or recency",
    )
    response_hash: str | None = None
    as_of: datetime | None = Field(default=None, description="the instant freshness was judged at")
    rendered: str | None = Field(
        default=None, description="the rendered context (at most 64 KiB), for inspection"
    )


class ContextResponseReported(EventPayload):
    """The caller reported the model's answer to an assembled context."""

    TYPE = "ContextResponseReported"
    VERSION = 1
    PUBLIC = False
    # a guard's rule id is the client's text, sealed in the constraint's own events too; the
    # response hash is SHA-256 of the model's answer, which a guess could be tested against:
    # the context record (which a user's forget leaves) keeps its keyed stand-in
    PRIVATE = ("violations", "response_hash")
    UNOPENED = ("response_hash",)
    request_id: str = Field(max_length=MAX_REQUEST_ID_CHARS)
    response_hash: str = Field(max_length=64)
    cited: tuple[str, ...] = ()
    violations: tuple[str, ...] = Field(default=(), description="rule ids the answer broke")


# ---- tool results (mnemo.domain.tool_result) -------------------------------------------


# what a field sealed whole reads as in the log (REDACTED: under a shredded subject's key)
_SEALED = (SEALED_TEXT, REDACTED)


class TriggerRef(BaseModel):
    """The suggested call a tool result answers: the trigger and the memory version that
    fired it. Once recorded, that trigger does not fire again for that version."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    trigger_id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,39}$")
    memory_id: MemoryId


class ToolResultRecorded(EventPayload):
    """An agent called a tool and records its result, to be remembered as an `external`
    memory with provenance `tool:<name>` that is fresh until `fetched_at +
    fresh_for_seconds` (then it expires). `arguments` and `result` are JSON text (an
    object, and any JSON value): on a user stream they are sealed whole, like a person's
    words."""

    TYPE = "ToolResultRecorded"
    VERSION = 1
    PRIVATE = ("arguments", "result", "source", "key")
    SCANNED = ("source",)
    SCANNED_JSON = ("arguments", "result")
    tool: str = Field(pattern=TOOL_NAME_RE.pattern, description="the tool's name")
    arguments: str = Field(
        default="{}",
        max_length=MAX_ARGUMENTS_CHARS,
        description="the call's arguments, a JSON object as text",
    )
    result: str = Field(
        min_length=1, max_length=MAX_RESULT_CHARS, description="the result, JSON text"
    )
    source: str = Field(min_length=1, max_length=256, description="the system the result came from")
    fetched_at: datetime
    fresh_for_seconds: int = Field(
        gt=0, le=MAX_FRESH_FOR_SECONDS, description="how long the result stays fresh"
    )
    key: str | None = Field(
        default=None,
        max_length=64,
        description="the memory key to remember it under; default tool.<name>.<digest of "
        "the arguments>",
    )
    trust: float = Field(default=0.8, ge=0.0, le=1.0)
    _numbers = field_validator("trust", mode="before")(json_number)
    _ints = field_validator("fresh_for_seconds", mode="before")(json_int)
    trigger: TriggerRef | None = Field(
        default=None, description="the suggested call this result answers"
    )

    @field_validator("fetched_at")
    @classmethod
    def _aware_fetch(cls, value: datetime) -> datetime:
        if value.utcoffset() is None:
            raise ValueError("fetched_at must carry its UTC offset")
        if not 1970 <= value.year <= 2200:
            raise ValueError("fetched_at must fall between the years 1970 and 2200")
        return value

    @field_validator("arguments")
    @classmethod
    def _arguments_json(cls, value: str, info: ValidationInfo) -> str:
        if not at_edge(info) or value in _SEALED:
            # stored events read as accepted; on a user stream the field is sealed whole
            # (a topic record is checked at the edge with its stand-in)
            return value
        try:
            parsed = parse_json_text(value)
        except ValueError as exc:
            raise PydanticCustomError(
                "tool_result_not_json", "arguments: {msg}", {"msg": str(exc)}
            ) from None
        if not isinstance(parsed, dict):
            raise PydanticCustomError("tool_result_not_json", "arguments must be a JSON object", {})
        return value

    @field_validator("result")
    @classmethod
    def _result_json(cls, value: str, info: ValidationInfo) -> str:
        if not at_edge(info) or value in _SEALED:
            return value
        try:
            parse_json_text(value)
        except ValueError as exc:
            raise PydanticCustomError(
                "tool_result_not_json", "result: {msg}", {"msg": str(exc)}
            ) from None
        return value

    @field_validator("key")
    @classmethod
    def _key_shape(cls, value: str | None) -> str | None:
        if value is not None and not KEY_RE.fullmatch(value):
            raise ValueError("key must be 1-64 word characters, dots or dashes")
        return value


# ---- documents (mnemo.service.documents) --------------------------------------------


class DocumentIngested(EventPayload):
    """A document was accepted: its bytes are in the blob store under `sha256` (sealed
    under the subject's key on a user stream), it parsed into `sections` sections, and the
    registrar turns each section into a `long_term` memory (its location in provenance)
    and its entities into the entity read model. The gateway parses and stores the
    document before it appends this event, so a document that cannot be read is refused
    and nothing is stored."""

    TYPE = "DocumentIngested"
    VERSION = 1
    PUBLIC = False  # appended by the gateway once the bytes are stored, never by agents
    # the bytes' sha256 is sealed too: in clear, whoever holds the log could tell whether a
    # document they hold was ingested (it stands in the log as a keyed hash)
    PRIVATE = ("filename", "title", "sha256")
    document_id: MemoryId
    sha256: Annotated[
        str,
        Field(
            pattern=r"^(?:[0-9a-f]{64}|h[0-9a-f]{16})$",
            description="sha256 of the bytes (in the log: its keyed stand-in)",
        ),
    ]
    filename: str = Field(min_length=1, max_length=256)
    media_type: str = Field(min_length=1, max_length=128)
    size: int = Field(ge=1, description="bytes")
    pages: int = Field(ge=0)
    sections: int = Field(ge=1, description="how many sections the document parsed into")
    language: Annotated[str, Field(pattern=r"^(zh|en|mixed)$")] = "en"
    title: str | None = Field(default=None, max_length=512)


# ---- emitted by consumers ------------------------------------------------------------


class MemoryRegistered(EventPayload):
    TYPE = "MemoryRegistered"
    VERSION = 1
    PUBLIC = False
    PRIVATE = (
        "memory.content",
        "memory.value",
        "memory.key",
        "memory.tags",
        "memory.provenance.source_id",
        "memory.provenance.source_location",
        "memory.timezone",
        "memory.guard.rule_id",
        "memory.guard.patterns",
        # SHA-256 of what the memory says (key, value, content, tags): in clear, a guessed
        # name or address could be tested against the log, the subject forgotten or not
        "memory.content_hash",
    )
    memory: Memory
    draft_index: int = Field(default=0, ge=0, description="which memory of the cause this is")


class MemorySuperseded(EventPayload):
    TYPE = "MemorySuperseded"
    VERSION = 1
    PUBLIC = False
    PRIVATE = ("key",)
    memory_id: str
    superseded_by: str
    key: str


class MemoryRejected(EventPayload):
    TYPE = "MemoryRejected"
    VERSION = 1
    PUBLIC = False
    PRIVATE = ("detail",)
    reason_code: str
    detail: str
    rejected_event_id: str
    draft_index: int = Field(default=0, ge=0, description="which memory of the cause this is")
    current_memory_id: str | None = Field(default=None, description="on a version conflict")
    current_version: int | None = Field(default=None, description="on a version conflict")


class MemoryExpired(EventPayload):
    TYPE = "MemoryExpired"
    VERSION = 1
    PUBLIC = False
    memory_id: str
    expired_at: datetime


# why a decay decision moved a weight: a code, never a person's words (a correction's or a
# contradiction's own reason stays sealed in the feedback event, the decision's cause)
DECAY_REASON = (
    r"^(unverified|verified|corrected|contradicted|cited:(beginning|middle|end|unknown))$"
)


class MemoryDecayed(EventPayload):
    """A decay decision: the memory's weight (and perhaps trust) moved, and why."""

    TYPE = "MemoryDecayed"
    VERSION = 1
    PUBLIC = False
    memory_id: str
    semantic_weight: float = Field(ge=0.0, le=0.99)
    trust: float | None = Field(default=None, ge=0.0, le=1.0)
    reason: Annotated[str, Field(pattern=DECAY_REASON)]

    @field_validator("reason", mode="before")
    @classmethod
    def _coded(cls, value: Any) -> Any:
        """Events logged before the reason was a code carry `corrected:<the user's
        reason>` (or `contradicted:`): read them as the code alone."""
        if isinstance(value, str) and value.startswith(("corrected:", "contradicted:")):
            return value.split(":", 1)[0]
        return value


RELAYED_FEEDBACK = (
    "MemoryCited",
    "MemoryCorrected",
    "MemoryContradicted",
    "MemoryVerified",
    "ContextAssembled",
)


class FeedbackRelayed(EventPayload):
    """Feedback about memories of another stream (a citation, a correction, a
    contradiction, a verification, a use in a context), carried by the decay consumer to
    the stream the memories belong to, which is where their weight, trust, timers and
    verification move: in one partition, under its fence (ADR 0014). The causation id is
    the feedback event; `feedback` is its type. The registrar counts relayed citations
    and corrections in the memories' stream (uses in a context are counted from the
    context's own event)."""

    TYPE = "FeedbackRelayed"
    VERSION = 1
    PUBLIC = False
    PRIVATE = ("reason",)  # a correction's reason, in the user's words
    feedback: Annotated[str, Field(pattern="^(" + "|".join(RELAYED_FEEDBACK) + ")$")]
    memory_ids: tuple[str, ...] = Field(min_length=1)
    position: Annotated[str, Field(pattern=r"^(beginning|middle|end)$")] | None = None
    reason: str | None = Field(default=None, max_length=1_000)


class VerificationDue(EventPayload):
    """A long-lived memory should be confirmed with the user by `deadline`."""

    TYPE = "VerificationDue"
    VERSION = 1
    PUBLIC = False
    memory_id: str
    due_at: datetime
    deadline: datetime


class MemoryArchived(EventPayload):
    """Unused for long: out of default retrieval, still retrievable on request."""

    TYPE = "MemoryArchived"
    VERSION = 1
    PUBLIC = False
    memory_id: str
    unused_since: datetime


class MemoryForgotten(EventPayload):
    TYPE = "MemoryForgotten"
    VERSION = 1
    PUBLIC = False
    memory_id: str


# ---- toolchains (mnemo.domain.toolchain) ---------------------------------------------


class ToolchainStarted(EventPayload):
    """An agent plans a chain of tool calls on a subject's stream; it lives `ttl_seconds`."""

    TYPE = "ToolchainStarted"
    VERSION = 1
    toolchain_id: ToolchainId
    steps: tuple[StepId, ...] = Field(min_length=1, max_length=MAX_STEPS)
    ttl_seconds: int = Field(default=DEFAULT_TTL_SECONDS, ge=1, le=MAX_TTL_SECONDS)
    _ints = field_validator("ttl_seconds", mode="before")(json_int)

    @field_validator("steps")
    @classmethod
    def _distinct(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(set(value)) != len(value):
            raise PydanticCustomError("duplicate_step", "a plan names each step once")
        return value


class ToolchainStepCompleted(EventPayload):
    """A step of a toolchain succeeded; `output` is its result as JSON text."""

    TYPE = "ToolchainStepCompleted"
    VERSION = 1
    PRIVATE = ("output",)
    # the detector reads the output as it reads a tool result's: on every stream, so the
    # toolchain read model holds placeholders, and the tenant's policy holds for it
    SCANNED_JSON = ("output",)
    toolchain_id: ToolchainId
    step_id: StepId
    output: str = Field(max_length=64 * 1024, description="the step's result, a JSON document")

    @field_validator("output")
    @classmethod
    def _json(cls, value: str, info: ValidationInfo) -> str:
        # checked where it enters; a topic record of a user stream carries the output
        # sealed, as its stand-in (the registrar checks it again once opened)
        if at_edge(info) and value not in (SEALED_TEXT, REDACTED):
            problem = json_text_problem(value)
            if problem is not None:
                raise PydanticCustomError(problem[0].lower(), problem[1])
        return value


class ToolchainStepFailed(EventPayload):
    """A step of a toolchain failed, and why (its reason may carry a person's words)."""

    TYPE = "ToolchainStepFailed"
    VERSION = 1
    PRIVATE = ("error.reason", "error.field")
    SCANNED = ("error.reason", "error.field")
    toolchain_id: ToolchainId
    step_id: StepId
    error: StepError


class ToolchainExpired(EventPayload):
    """The decay consumer's decision: the toolchain's time to live ran out unfinished."""

    TYPE = "ToolchainExpired"
    VERSION = 1
    PUBLIC = False
    toolchain_id: ToolchainId
    expired_at: datetime


TOOLCHAIN_PAYLOADS: tuple[type[EventPayload], ...] = (
    ToolchainStarted,
    ToolchainStepCompleted,
    ToolchainStepFailed,
    ToolchainExpired,
)


PAYLOADS: tuple[type[EventPayload], ...] = (
    MemoryDeclared,
    ObservationRecordedV1,
    ObservationRecorded,
    MemoryCited,
    MemoryCorrected,
    MemoryVerified,
    MemoryContradicted,
    ForgetRequested,
    MemoriesRewrapped,
    TemplateRegistered,
    ContextAssembled,
    ContextResponseReported,
    MemoryRegistered,
    MemorySuperseded,
    MemoryRejected,
    MemoryExpired,
    MemoryDecayed,
    FeedbackRelayed,
    VerificationDue,
    MemoryArchived,
    MemoryForgotten,
    *TOOLCHAIN_PAYLOADS,
    ToolResultRecorded,
    DocumentIngested,
)

Upcaster = Callable[[Mapping[str, Any]], dict[str, Any]]


def _observation_v1_to_v2(old: Mapping[str, Any]) -> dict[str, Any]:
    new = {k: v for k, v in old.items() if k != "utterance"}
    new["text"] = old["utterance"]
    return new


class Catalog:
    """Every event type, its versions, and the upcasters between consecutive versions."""

    def __init__(self, payloads: tuple[type[EventPayload], ...]) -> None:
        self.models: dict[tuple[str, int], type[EventPayload]] = {}
        self.current: dict[str, int] = {}
        for model in payloads:
            self.models[(model.TYPE, model.VERSION)] = model
            self.current[model.TYPE] = max(self.current.get(model.TYPE, 0), model.VERSION)
        self.upcasters: dict[tuple[str, int], Upcaster] = {
            ("ObservationRecorded", 1): _observation_v1_to_v2,
        }

    def versions(self, event_type: str) -> list[int]:
        return sorted(v for (t, v) in self.models if t == event_type)

    def current_model(self, event_type: str) -> type[EventPayload]:
        return self.models[(event_type, self.current[event_type])]

    def upcast(self, event_type: str, version: int, payload: Mapping[str, Any]) -> dict[str, Any]:
        data = dict(payload)
        while version < self.current[event_type]:
            data = self.upcasters[(event_type, version)](data)
            version += 1
        return data


CATALOG = Catalog(PAYLOADS)


def decode_payload(envelope: Envelope, *, edge: bool = False) -> EventPayload:
    """The envelope's payload as the current version's model, upcast if it is older. With
    `edge`, new input is held to the edge's strict rules (mnemo.domain.edge)."""
    if edge and envelope.schema_version != CATALOG.current[envelope.type]:
        # an older version is held to its own model before it is upcast: a field it lacks
        # or one it never had is the caller's error, named in that version's terms
        CATALOG.models[(envelope.type, envelope.schema_version)].model_validate(
            envelope.payload, context=EDGE
        )
    data = CATALOG.upcast(envelope.type, envelope.schema_version, envelope.payload)
    return CATALOG.current_model(envelope.type).model_validate(data, context=EDGE if edge else None)


# pydantic error types that have a code of their own at the edge
_CODES_BY_ERROR_TYPE = {
    "unsupported_pattern": "UNSUPPORTED_PATTERN",
    "strict_boolean": "INVALID_BOOLEAN",
    "strict_number": "INVALID_NUMBER",
    "template_without_constraints": "TEMPLATE_WITHOUT_CONSTRAINTS",
    "output_too_large": "OUTPUT_TOO_LARGE",
    "output_not_json": "OUTPUT_NOT_JSON",
    "duplicate_step": "DUPLICATE_STEP",
    "tool_result_not_json": "TOOL_RESULT_NOT_JSON",
    "invalid_timezone": "INVALID_TIMEZONE",
    "pattern_matches_everything": "PATTERN_MATCHES_EVERYTHING",
    "time_as_number": "INVALID_TIME",
    "blank_text": "BLANK_TEXT",
    "blank_reason": "BLANK_REASON",
    "invalid_speaker": "INVALID_SPEAKER",
}


def _first_error(exc: ValidationError, prefix: str = "") -> tuple[str, str]:
    err = exc.errors()[0]
    loc = error_path(err)
    return (f"{prefix}{loc}" if loc else prefix.rstrip(".")), str(err["msg"])


def error_path(err: Any) -> str:
    """Where a validation error lies, dotted: its location, then the path a model-level
    check names within it (`sections.0.tags`)."""
    parts = [str(p) for p in err["loc"]]
    within = (err.get("ctx") or {}).get("path")
    if isinstance(within, str) and within:
        parts.append(within)
    return ".".join(parts)


def _error_type(exc: ValidationError) -> str:
    return str(exc.errors()[0]["type"])


def sealed_key_ids(tenant: str, events: Iterable[Envelope | Mapping[str, Any]]) -> set[str]:
    """The vault keys of `tenant` that sealed values of these events (as envelopes or as
    their JSON): each event's own encryption block and its memory's sealed block. Keys of
    another tenant are never listed, whatever a malformed event claims."""
    found: set[str] = set()
    for event in events:
        if isinstance(event, Envelope):
            if event.tenant != tenant:
                continue
            blocks: list[Any] = [event.encryption.key_id if event.encryption else None]
            payload: Any = event.payload
        else:
            if event.get("tenant") != tenant:
                continue
            block = event.get("encryption")
            blocks = [block.get("key_id") if isinstance(block, Mapping) else None]
            payload = event.get("payload")
        memory = payload.get("memory") if isinstance(payload, Mapping) else None
        sealed = memory.get("sealed") if isinstance(memory, Mapping) else None
        if isinstance(sealed, Mapping):
            blocks.append(sealed.get("key_id"))
        elif isinstance(sealed, EncryptionBlock):
            blocks.append(sealed.key_id)
        found.update(
            k for k in blocks if isinstance(k, str) and (k == tenant or k.startswith(tenant + "/"))
        )
    return found


def _cut(value: str) -> str:
    """A caller's value as an error may repeat it: a long one cut short (a key pasted in
    stays whole enough for the gateway's redaction to name it by its public id)."""
    return value if len(value) <= 80 else f"{value[:40]}… ({len(value)} characters)"


def validate_envelope(raw: Mapping[str, Any], *, public: bool = True) -> Envelope:
    """Check an incoming event: envelope, known type, supported version, valid payload.

    Raises InvalidInput with a precise code; nothing partial ever comes back.
    """
    event_type = raw.get("type")
    if not isinstance(event_type, str) or event_type not in CATALOG.current:
        # a long or non-text value is not repeated whole: the error stays small
        shown = repr(_cut(event_type)) if isinstance(event_type, str) else "that is no string"
        raise InvalidInput(f"unknown event type {shown}", code="UNKNOWN_EVENT_TYPE", field="type")
    model_for_type = CATALOG.current_model(event_type)
    if public and not model_for_type.PUBLIC:
        raise InvalidInput(
            f"{event_type} is emitted by Mnemo's consumers and cannot be published",
            code="EVENT_TYPE_NOT_PUBLISHABLE",
            field="type",
        )
    version = raw.get("schema_version")
    if (
        not isinstance(version, int)
        or isinstance(version, bool)
        or (event_type, version) not in CATALOG.models
    ):
        raise InvalidInput(
            f"{event_type} has no schema version {version!r}; supported: "
            f"{CATALOG.versions(event_type)}",
            code="UNSUPPORTED_SCHEMA_VERSION",
            field="schema_version",
        )
    try:
        envelope = Envelope.model_validate(raw, context=EDGE)
    except ValidationError as exc:
        field, msg = _first_error(exc)
        code = "INVALID_TENANT" if field == "tenant" else "INVALID_ENVELOPE"
        code = _CODES_BY_ERROR_TYPE.get(_error_type(exc), code)
        raise InvalidInput(f"{field}: {msg}", code=code, field=field) from exc
    if envelope.encryption is not None and envelope.encryption.key_id not in (
        envelope.tenant,
        f"{envelope.tenant}/{envelope.stream}",
    ):
        raise InvalidInput(
            "encryption.key_id must name the tenant's key or the stream's own key",
            code="FOREIGN_ENCRYPTION_KEY",
            field="encryption.key_id",
        )
    try:
        decode_payload(envelope, edge=True)
    except ValidationError as exc:
        field, msg = _first_error(exc, "payload.")
        code = "INVALID_PAYLOAD"
        if _error_type(exc) in _CODES_BY_ERROR_TYPE:
            code = _CODES_BY_ERROR_TYPE[_error_type(exc)]
        elif "semantic_weight" in field:
            code = "INVALID_SEMANTIC_WEIGHT"
        elif field in ("payload.result", "payload.arguments") and _error_type(exc) in (
            "string_too_long",
            "string_too_short",
        ):
            code = "TOOL_RESULT_TOO_LARGE" if "long" in _error_type(exc) else "TOOL_RESULT_NOT_JSON"
        elif "needs content" in msg or ("content" in field and "at least" in msg):
            code = "EMPTY_CONTENT"
        raise InvalidInput(f"{field}: {msg}", code=code, field=field) from exc
    return envelope
