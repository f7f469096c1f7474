"""Decay: hard TTL expiry by event time, and weight decay over time.

Timers live in a read model built from the log (MemoryRegistered sets one, expiry,
supersede and forget clear it), so they survive restarts. A scan asks the clock port for
the time, never the wall clock, and an expiry event's id is derived from the memory, so
the same expiry is never emitted twice.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import datetime
from typing import Protocol

from mnemo.domain.events import (
    Actor,
    ActorKind,
    Envelope,
    MemoryExpired,
    MemoryForgotten,
    MemoryRegistered,
    MemorySuperseded,
    decode_payload,
)
from mnemo.domain.ids import derived_id
from mnemo.domain.memory import Memory, MemoryStatus, MemoryType
from mnemo.domain.projection import DropTimer, PutTimer, Timer
from mnemo.handlers import Decision

__all__ = ["CONSUMER", "HALF_LIFE_DAYS", "DecayState", "decayed_weight", "handle", "scan"]

CONSUMER = "decay"

# Half-life of semantic weight by memory type, in days; None: the weight does not fade.
HALF_LIFE_DAYS: dict[MemoryType, float | None] = {
    MemoryType.CONSTRAINT: None,
    MemoryType.EXTERNAL: None,
    MemoryType.PREFERENCE: 180.0,
    MemoryType.FACT: 365.0,
    MemoryType.CONTEXT: 7.0,
    MemoryType.HISTORY: 30.0,
    MemoryType.EPISODE: 30.0,
}
WEIGHT_FLOOR = 0.1


class DecayState(Protocol):
    def get(self, tenant: str, memory_id: str) -> Memory | None: ...


def decayed_weight(memory: Memory, now: datetime) -> float:
    """The memory's weight at `now`: halved every half-life since it was created, never
    below the floor (unless it started below it)."""
    half_life = HALF_LIFE_DAYS.get(memory.type)
    if half_life is None:
        return memory.semantic_weight
    age_days = max(0.0, (now - memory.created_at).total_seconds() / 86400.0)
    faded = memory.semantic_weight * math.pow(0.5, age_days / half_life)
    return round(max(min(WEIGHT_FLOOR, memory.semantic_weight), faded), 6)


def handle(event: Envelope) -> Decision:
    """Keep the timers read model in step with the log."""
    if event.type == MemoryRegistered.TYPE:
        registered = decode_payload(event)
        assert isinstance(registered, MemoryRegistered)
        memory = registered.memory
        if memory.valid_until is None:
            return Decision()
        return Decision(
            writes=[PutTimer(Timer(memory.tenant, memory.memory_id, memory.valid_until))]
        )
    if event.type in (MemorySuperseded.TYPE, MemoryExpired.TYPE, MemoryForgotten.TYPE):
        memory_id = str(event.payload["memory_id"])
        return Decision(writes=[DropTimer(event.tenant, memory_id)])
    return Decision()


def scan(due: Sequence[Timer], state: DecayState) -> Decision:
    """Expire what is due. Event time is the due instant itself, not the scan's time, so a
    late scan still records the exact moment the memory stopped being valid."""
    decision = Decision()
    for timer in due:
        memory = state.get(timer.tenant, timer.memory_id)
        decision.writes.append(DropTimer(timer.tenant, timer.memory_id, timer.kind))
        if memory is None or memory.status is not MemoryStatus.ACTIVE:
            continue
        payload = MemoryExpired(memory_id=memory.memory_id, expired_at=timer.due_at)
        decision.events.append(
            Envelope(
                event_id=derived_id(
                    timer.due_at, CONSUMER, memory.tenant, memory.memory_id, "expired"
                ),
                type=payload.TYPE,
                schema_version=payload.VERSION,
                tenant=memory.tenant,
                stream=memory.stream,
                occurred_at=timer.due_at,
                actor=Actor(kind=ActorKind.SYSTEM, id=CONSUMER),
                causation_id=memory.source_event_id,
                correlation_id=memory.source_event_id,
                payload=payload.model_dump(mode="json"),
            )
        )
    return decision
