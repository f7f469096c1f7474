"""Projection writes: what handlers ask the read models to do. Each write is idempotent."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from mnemo.domain.memory import Memory, MemoryStatus

__all__ = [
    "AuditRecord",
    "DropTimer",
    "Outcome",
    "OutcomeKind",
    "PutAudit",
    "PutMemory",
    "PutOutcome",
    "PutTimer",
    "SetStatus",
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
    """One link of a tenant's hash chain."""

    tenant: str
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


Write = PutMemory | SetStatus | PutOutcome | PutTimer | DropTimer | PutAudit
