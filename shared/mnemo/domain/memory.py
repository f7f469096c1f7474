"""The memory model: what a memory is, where it belongs, how fresh and how trusted it is."""

from __future__ import annotations

import hashlib
import re
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Annotated

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from mnemo.domain.edge import JsonBool, at_edge, blank, json_int, json_number
from mnemo.domain.patterns import UnsupportedPattern, linear_pattern
from mnemo.domain.pii import REDACTED, SEALED_TEXT
from mnemo.domain.sealed import EncryptionBlock
from mnemo.domain.timeexpr import zone_name_error

__all__ = [
    "MAX_SEMANTIC_WEIGHT",
    "Guard",
    "Memory",
    "MemoryDraft",
    "MemoryStatus",
    "MemoryType",
    "Provenance",
    "Scope",
    "content_hash",
    "occurrence_hash",
]

MAX_SEMANTIC_WEIGHT = 0.99
DEFAULT_SEMANTIC_WEIGHT = 0.5
TAG_RE = re.compile(r"^[\w][\w:./-]{0,63}$")
KEY_RE = re.compile(r"^[\w][\w.-]{0,63}$")
MAX_CONTENT_CHARS = 8_000
MAX_TTL_SECONDS = 100 * 366 * 86_400  # a century
MIN_YEAR, MAX_YEAR = 1970, 2200
MAX_GUARD_PATTERN_CHARS = 500


class MemoryType(StrEnum):
    CONSTRAINT = "constraint"
    CONTEXT = "context"
    HISTORY = "history"
    EXTERNAL = "external"
    PREFERENCE = "preference"
    FACT = "fact"
    EPISODE = "episode"
    LONG_TERM = "long_term"  # a section of an ingested document (docs/documents.md)


class Scope(StrEnum):
    SESSION = "session"
    USER = "user"
    AGENT = "agent"
    TENANT = "tenant"


class MemoryStatus(StrEnum):
    ACTIVE = "active"
    SUPERSEDED = "superseded"
    EXPIRED = "expired"
    FORGOTTEN = "forgotten"
    ARCHIVED = "archived"  # unused for long: out of default retrieval, still there on request


class Provenance(BaseModel):
    """Where a memory came from and how far to trust it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    source_id: str | None = Field(default=None, max_length=256)
    source_location: str | None = Field(default=None, max_length=256)
    trust: Annotated[float, Field(ge=0.0, le=1.0)] = 0.5
    verified: JsonBool = False

    _numbers = field_validator("trust", mode="before")(json_number)


Weight = Annotated[float, Field(ge=0.0, le=MAX_SEMANTIC_WEIGHT)]


def _without_fragment(reason: str) -> str:
    """RE2's reason without the piece of the pattern it quotes (`missing ): (abc`)."""
    head, sep, rest = reason.partition("(RE2): ")
    return head + sep + rest.split(": ", 1)[0] if sep else reason


class Guard(BaseModel):
    """A constraint's circuit breaker: a reported response matching any pattern breaks it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    rule_id: str = Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$")
    patterns: tuple[str, ...] = Field(min_length=1, max_length=16)
    break_on_violation: JsonBool = True

    @field_validator("patterns")
    @classmethod
    def _compiles(cls, value: tuple[str, ...], info: ValidationInfo) -> tuple[str, ...]:
        # a refusal names the pattern by its place, never its text (which may hold a
        # person's words: a guard is sealed whole on every stream)
        for index, pattern in enumerate(value):
            if len(pattern) > MAX_GUARD_PATTERN_CHARS:
                raise ValueError(f"a guard pattern is at most {MAX_GUARD_PATTERN_CHARS} characters")
            if not at_edge(info):
                continue  # stored guards are read back as they were accepted
            try:
                compiled = linear_pattern(pattern, ignore_case=True)
            except UnsupportedPattern as exc:
                raise PydanticCustomError(
                    "unsupported_pattern",
                    "guard pattern {index}: {reason}",
                    {"index": index, "reason": _without_fragment(str(exc))},
                ) from None
            if compiled.search("") is not None:
                # it would match every answer: the guard could never pass
                raise PydanticCustomError(
                    "pattern_matches_everything",
                    "guard pattern {index} matches empty text, so every answer would violate it",
                    {"index": index},
                )
        return value

    def violated_by(self, text: str) -> bool:
        """Whether the text matches any pattern, on the linear-time engine (RE2), case
        insensitive. A stored pattern that engine cannot run (one accepted before guards
        were checked for it) counts as broken: a guard fails closed."""
        for pattern in self.patterns:
            try:
                compiled = linear_pattern(pattern, ignore_case=True)
            except UnsupportedPattern:
                return True
            if compiled.search(text) is not None:
                return True
        return False


# what pydantic reads as seconds (or milliseconds) since 1970 when it is a string
_NUMBER_TEXT = re.compile(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*")


def is_number_as_time(value: object) -> bool:
    """A number, or a string holding only a number, given where a time is expected."""
    if isinstance(value, bool):
        return False
    if isinstance(value, int | float):
        return True
    return isinstance(value, str) and _NUMBER_TEXT.fullmatch(value) is not None


def refuse_number_as_time(value: object, info: ValidationInfo) -> object:
    """At the edge, a time is an ISO 8601 string: a number (seconds? milliseconds?), or a
    string holding one ("1700000000"), is refused rather than guessed at, and never reaches
    the log as a number."""
    if at_edge(info) and is_number_as_time(value):
        raise PydanticCustomError(
            "time_as_number", "a time is an ISO 8601 string with a UTC offset, not a number"
        )
    return value


def checked_zone(value: str | None, info: ValidationInfo) -> str | None:
    """At the edge, a time zone is an IANA name or a UTC offset in range (INVALID_TIMEZONE);
    what the log holds already is read back as it was accepted."""
    if value is None or value in (SEALED_TEXT, REDACTED) or not at_edge(info):
        return value  # a sealed zone was checked before it was sealed
    if (error := zone_name_error(value)) is not None:
        raise PydanticCustomError("invalid_timezone", "{error}", {"error": error})
    return value


class MemoryDraft(BaseModel):
    """A memory as an agent declares it, before registration gives it an id and a version."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: MemoryType
    scope: Scope = Scope.USER
    content: str = Field(default="", max_length=MAX_CONTENT_CHARS)
    key: str | None = None
    value: str | None = Field(default=None, max_length=1_000)
    tags: tuple[str, ...] = ()
    ttl_seconds: int | None = Field(default=None, gt=0, le=MAX_TTL_SECONDS)
    valid_until: datetime | None = None
    stale_after: datetime | None = None
    timezone: str | None = Field(default=None, max_length=64)
    semantic_weight: Weight = DEFAULT_SEMANTIC_WEIGHT
    provenance: Provenance = Provenance()
    guard: Guard | None = Field(default=None, description="constraints only: a circuit breaker")
    expected_version: int | None = Field(
        default=None,
        ge=0,
        description="with a key: the version the writer last saw (0: none); another current "
        "version is a conflict, reported, never overwritten",
    )
    _ints = field_validator("ttl_seconds", "expected_version", mode="before")(json_int)
    _numbers = field_validator("semantic_weight", mode="before")(json_number)
    sensitive: JsonBool = Field(
        default=False,
        description="x-mnemo-sensitive: the content and value are sealed whole, whatever the "
        "PII detector finds in them",
    )

    @field_validator("key")
    @classmethod
    def _key_shape(cls, value: str | None) -> str | None:
        if value is not None and not KEY_RE.fullmatch(value):
            raise ValueError("key must be 1-64 word characters, dots or dashes")
        return value

    @field_validator("tags")
    @classmethod
    def _tags_shape(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        if len(value) > 32:
            raise ValueError("at most 32 tags")
        for index, tag in enumerate(value):
            if not TAG_RE.fullmatch(tag):
                # named by its place: a tag may hold a person's words (sealed whole)
                raise ValueError(f"tag {index} is not 1-64 word characters, ':', '.', '/' or '-'")
        return tuple(sorted(set(value)))

    @field_validator("valid_until", "stale_after", mode="before")
    @classmethod
    def _not_a_number(cls, value: object, info: ValidationInfo) -> object:
        return refuse_number_as_time(value, info)

    @field_validator("timezone")
    @classmethod
    def _zone(cls, value: str | None, info: ValidationInfo) -> str | None:
        return checked_zone(value, info)

    @field_validator("valid_until", "stale_after")
    @classmethod
    def _aware(cls, value: datetime | None) -> datetime | None:
        if value is not None and value.utcoffset() is None:
            raise ValueError("times must carry a UTC offset")
        if value is not None and not MIN_YEAR <= value.year <= MAX_YEAR:
            raise ValueError(f"times must fall between the years {MIN_YEAR} and {MAX_YEAR}")
        return value

    @model_validator(mode="after")
    def _has_substance(self, info: ValidationInfo) -> MemoryDraft:
        # new input that shows nothing (zero-width characters only) is as empty as blanks;
        # what the log holds from before reads as it was read then
        empty = blank(self.content) if at_edge(info) else not self.content.strip()
        if empty and not (self.key and self.value):
            raise ValueError("a memory needs content, or a key with a value")
        if (self.key is None) != (self.value is None):
            raise ValueError("key and value go together")
        if self.guard is not None and self.type is not MemoryType.CONSTRAINT:
            raise ValueError("only a constraint can carry a guard")
        return self

    def text(self) -> str:
        """The text that represents this memory for embedding and keyword search."""
        if self.content.strip():
            return self.content.strip()
        return f"{self.key}: {self.value}"


class Memory(BaseModel):
    """A registered memory: a draft plus identity, version, freshness and status."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    memory_id: str
    tenant: str
    stream: str
    type: MemoryType
    scope: Scope
    content: str
    key: str | None = None
    value: str | None = None
    tags: tuple[str, ...] = ()
    semantic_weight: Weight = DEFAULT_SEMANTIC_WEIGHT
    provenance: Provenance = Provenance()
    guard: Guard | None = None
    created_at: datetime
    valid_until: datetime | None = None
    stale_after: datetime | None = None
    timezone: str | None = None
    version: int = 1
    supersedes: str | None = None
    status: MemoryStatus = MemoryStatus.ACTIVE
    source_event_id: str
    received_at: datetime | None = Field(
        default=None, description="when Mnemo accepted the event that declared it"
    )
    rule_id: str | None = None
    verified_at: datetime | None = None
    verification_due_at: datetime | None = None
    fetched_at: datetime | None = Field(
        default=None,
        description="a tool result's fetch instant: its age counts from here (its freshness "
        "deadline is valid_until)",
    )
    content_hash: str
    sealed: EncryptionBlock | None = Field(
        default=None,
        description="ciphertexts of the sensitive values whose placeholders the content holds",
    )

    def text(self) -> str:
        if self.content.strip():
            return self.content.strip()
        return f"{self.key}: {self.value}"

    def is_live(self, now: datetime) -> bool:
        """Active and not past its validity at `now`."""
        if self.status is not MemoryStatus.ACTIVE:
            return False
        return self.valid_until is None or now < self.valid_until

    def remaining_fraction(self, now: datetime) -> float:
        """How much of its validity is left, 1.0 for a permanent memory."""
        if self.valid_until is None:
            return 1.0
        total = (self.valid_until - self.created_at).total_seconds()
        if total <= 0:
            return 0.0
        left = (self.valid_until - now).total_seconds()
        return max(0.0, min(1.0, left / total))


def content_hash(draft: MemoryDraft) -> str:
    """A stable hash of what a memory says, used to spot exact duplicates."""
    parts = [
        draft.type.value,
        draft.scope.value,
        draft.key or "",
        draft.value or "",
        " ".join(draft.content.split()),
        ",".join(draft.tags),
    ]
    if draft.guard is not None:
        # a guard is part of what a constraint says: the same words with another guard
        # are not a duplicate, or a widened guard would be dropped. Patterns in any order
        # are one guard. Left out when absent, so hashes of unguarded memories stay as
        # they were.
        guard = draft.guard
        parts.append(
            "guard\x1e"
            + "\x1e".join(
                [guard.rule_id, str(guard.break_on_violation), *sorted(set(guard.patterns))]
            )
        )
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:32]


def occurrence_hash(digest: str, occurred_at: datetime) -> str:
    """A content hash that also says when it was said: what a history memory (one turn of
    a conversation) deduplicates on."""
    instant = occurred_at.astimezone(UTC).isoformat()
    return hashlib.sha256(f"{digest}\x1f{instant}".encode()).hexdigest()[:32]


def expiry(draft: MemoryDraft, occurred_at: datetime) -> datetime | None:
    """The instant a draft stops being valid: the earlier of its TTL and valid_until."""
    candidates: list[datetime] = []
    if draft.ttl_seconds is not None:
        candidates.append(occurred_at + timedelta(seconds=draft.ttl_seconds))
    if draft.valid_until is not None:
        candidates.append(draft.valid_until)
    return min(candidates) if candidates else None
