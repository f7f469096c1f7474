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
    MemoryCited,
    MemoryCorrected,
    MemoryDecayed,
    MemoryExpired,
    MemoryForgotten,
    MemoryRegistered,
    MemorySuperseded,
    decode_payload,
)
from mnemo.domain.ids import derived_id
from mnemo.domain.memory import MAX_SEMANTIC_WEIGHT, Memory, MemoryStatus, MemoryType
from mnemo.domain.projection import DropTimer, PutTimer, PutWeight, Timer, Write
from mnemo.handlers import Decision, emit

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


# How feedback moves a memory: (weight change, trust change)
CITED = {"beginning": (0.05, 0.02), "middle": (0.03, 0.0), "end": (0.02, 0.0), None: (0.02, 0.0)}
CORRECTED_WEIGHT_FACTOR = 0.7
CORRECTED_TRUST_STEP = 0.1


class DecayState(Protocol):
    def get(self, tenant: str, memory_id: str) -> Memory | None: ...

    def weight_of(self, tenant: str, memory_id: str) -> tuple[float, float] | None: ...


def decayed_weight(memory: Memory, now: datetime) -> float:
    """The memory's weight at `now`: halved every half-life since it was created, never
    below the floor (unless it started below it)."""
    half_life = HALF_LIFE_DAYS.get(memory.type)
    if half_life is None:
        return memory.semantic_weight
    age_days = max(0.0, (now - memory.created_at).total_seconds() / 86400.0)
    faded = memory.semantic_weight * math.pow(0.5, age_days / half_life)
    return round(max(min(WEIGHT_FLOOR, memory.semantic_weight), faded), 6)


def _moved(
    event: Envelope,
    state: DecayState,
    memory_id: str,
    move: tuple[float, float, float],
    reason: str,
) -> Decision:
    """Move a memory's weight and trust: weight * factor + step, trust + step, clamped."""
    factor, d_weight, d_trust = move
    current = state.weight_of(event.tenant, memory_id)
    if current is None:
        return Decision()  # unknown, forgotten or another tenant's: nothing to move
    weight, trust = current
    new_weight = round(min(MAX_SEMANTIC_WEIGHT, max(0.0, weight * factor + d_weight)), 6)
    new_trust = round(min(1.0, max(0.0, trust + d_trust)), 6)
    payload = MemoryDecayed(
        memory_id=memory_id, semantic_weight=new_weight, trust=new_trust, reason=reason[:300]
    )
    return Decision(
        events=[emit(event, payload, CONSUMER, memory_id)],
        writes=[PutWeight(event.tenant, memory_id, new_weight, new_trust)],
    )


def handle(event: Envelope, state: DecayState) -> Decision:
    """Keep timers and weights in step with the log; turn feedback into decay decisions."""
    if event.type == MemoryRegistered.TYPE:
        registered = decode_payload(event)
        assert isinstance(registered, MemoryRegistered)
        memory = registered.memory
        writes: list[Write] = [
            PutWeight(
                memory.tenant, memory.memory_id, memory.semantic_weight, memory.provenance.trust
            )
        ]
        if memory.valid_until is not None:
            writes.append(PutTimer(Timer(memory.tenant, memory.memory_id, memory.valid_until)))
        return Decision(writes=writes)
    if event.type in (MemorySuperseded.TYPE, MemoryExpired.TYPE, MemoryForgotten.TYPE):
        memory_id = str(event.payload["memory_id"])
        return Decision(writes=[DropTimer(event.tenant, memory_id)])
    if event.type == MemoryCited.TYPE:
        cited = decode_payload(event)
        assert isinstance(cited, MemoryCited)
        d_weight, d_trust = CITED[cited.position]
        reason = f"cited:{cited.position or 'unknown'}"
        return _moved(event, state, cited.memory_id, (1.0, d_weight, d_trust), reason)
    if event.type == MemoryCorrected.TYPE:
        corrected = decode_payload(event)
        assert isinstance(corrected, MemoryCorrected)
        decision = Decision()
        move = (CORRECTED_WEIGHT_FACTOR, 0.0, -CORRECTED_TRUST_STEP)
        for memory_id in corrected.memory_ids:
            decision.extend(_moved(event, state, memory_id, move, f"corrected:{corrected.reason}"))
        return decision
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
