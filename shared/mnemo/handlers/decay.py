"""The decay engine: what Mnemo forgets, fades or asks about, and when.

- Hard decay: a memory's validity ends at an exact instant (its TTL or valid_until, in
  event time); MemoryExpired removes it from every read model and the vector index.
- Soft decay: a long-lived memory (a preference, a fact) comes due for verification on a
  schedule per type (VerificationDue). MemoryVerified renews it; no answer by the deadline
  lowers its weight to a floor (MemoryDecayed, reason "unverified").
- Feedback: a citation raises weight (and trust when cited at the beginning of the
  answer); a correction lowers the weight and trust of what was used; behaviour that
  contradicts a memory (MemoryContradicted) lowers its weight instead of deleting it.
- Engagement: every use (a context it appeared in, a citation) pushes its archive timer
  back; a memory unused for its type's period is archived (out of default retrieval).
- Weight also fades with age by a half-life per type; that is a pure function of the
  memory and the instant (`decayed_weight`), so it needs no event.

Feedback moves a memory only in its own stream: feedback published on another stream
(an answer citing memories of several streams) is relayed to each memory's stream as a
FeedbackRelayed event, and handled there. A memory's weight, trust and timers are then
moved by one partition of the log, in that partition's order, under its fence (ADR 0014):
two consumers never read-modify-write them side by side, and a rebuild moves them in the
same order.

Timers live in a read model built from the log, so they survive restarts. Scans read the
time from the clock port, and each emitted event's id derives from the memory, the timer
kind and the due instant: the same decision is never emitted twice. Every decision is an
event, so replaying the log reproduces the same weights.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mnemo.domain.events import (
    Actor,
    ActorKind,
    ContextAssembled,
    Envelope,
    EventPayload,
    FeedbackRelayed,
    MemoryArchived,
    MemoryCited,
    MemoryContradicted,
    MemoryCorrected,
    MemoryDecayed,
    MemoryExpired,
    MemoryForgotten,
    MemoryRegistered,
    MemorySuperseded,
    MemoryVerified,
    VerificationDue,
    decode_payload,
)
from mnemo.domain.ids import derived_id, id_time
from mnemo.domain.memory import MAX_SEMANTIC_WEIGHT, Memory, MemoryStatus, MemoryType
from mnemo.domain.projection import (
    ContextRecord,
    DropTimer,
    DropWeight,
    PutTimer,
    PutWeight,
    Timer,
    Write,
    cited_context_ids,
    credits_citation,
)
from mnemo.handlers import Decision, emit, toolchain

__all__ = [
    "CONSUMER",
    "HALF_LIFE_DAYS",
    "HANDLED",
    "DecayPolicy",
    "DecayState",
    "decayed_weight",
    "handle",
    "scan",
]

CONSUMER = "decay"
# the event types `handle` reads only outside their sealed (PRIVATE) fields: a registration
# gives its memory's id, weight, trust, type and times, none of them sealed, so the
# consumer need not open it (no data key unwrapped in the vault for it)
READ_SEALED = frozenset({MemoryRegistered.TYPE})
TIMER_KINDS = ("expire", "verify", "verify_deadline", "archive")

# Half-life of semantic weight by memory type, in days; None: the weight does not fade.
HALF_LIFE_DAYS: dict[MemoryType, float | None] = {
    MemoryType.CONSTRAINT: None,
    MemoryType.EXTERNAL: None,
    MemoryType.PREFERENCE: 180.0,
    MemoryType.FACT: 365.0,
    MemoryType.CONTEXT: 7.0,
    MemoryType.HISTORY: 30.0,
    MemoryType.EPISODE: 30.0,
    MemoryType.LONG_TERM: None,  # a document's sections stay as weighty as they came
}
WEIGHT_FLOOR = 0.1

# How feedback moves a memory: (weight change, trust change)
CITED = {"beginning": (0.05, 0.02), "middle": (0.03, 0.0), "end": (0.02, 0.0), None: (0.02, 0.0)}
CORRECTED_WEIGHT_FACTOR = 0.7
CORRECTED_TRUST_STEP = 0.1
CONTRADICTED_WEIGHT_FACTOR = 0.5
CONTRADICTED_TRUST_STEP = 0.05


class DecayPolicy(BaseModel):
    """When memories come due for verification and when unused ones are archived."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    verify_after_days: dict[MemoryType, float] = Field(
        default_factory=lambda: {MemoryType.PREFERENCE: 90.0, MemoryType.FACT: 180.0},
        description="types absent here are never asked about",
    )
    answer_within_days: float = Field(default=7.0, gt=0)

    @field_validator("verify_after_days", "archive_after_days")
    @classmethod
    def _positive(cls, value: dict[MemoryType, float]) -> dict[MemoryType, float]:
        for kind, days in value.items():
            if days <= 0:
                raise ValueError(f"{kind.value}: the number of days must be positive")
        return value

    unverified_weight: float = Field(default=WEIGHT_FLOOR, ge=0.0, le=MAX_SEMANTIC_WEIGHT)
    archive_after_days: dict[MemoryType, float] = Field(
        default_factory=lambda: {
            MemoryType.CONTEXT: 30.0,
            MemoryType.HISTORY: 90.0,
            MemoryType.EPISODE: 90.0,
            MemoryType.PREFERENCE: 365.0,
            MemoryType.FACT: 365.0,
        },
        description="types absent here (constraints, external sources) are never archived",
    )


class DecayState(toolchain.ToolchainReads, Protocol):
    def get(self, tenant: str, memory_id: str) -> Memory | None: ...

    def weight_of(self, tenant: str, memory_id: str) -> tuple[float, float, float] | None: ...

    def context_record(self, tenant: str, request_id: str) -> ContextRecord | None: ...


def decayed_weight(memory: Memory, now: datetime) -> float:
    """The memory's weight at `now`: halved every half-life since it was created, never
    below the floor (unless it started below it)."""
    half_life = HALF_LIFE_DAYS.get(memory.type)
    if half_life is None:
        return memory.semantic_weight
    since = memory.verified_at or memory.created_at  # a verification renews the memory
    age_days = max(0.0, (now - since).total_seconds() / 86400.0)
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
    weight, trust, base = current
    new_weight = round(min(MAX_SEMANTIC_WEIGHT, max(0.0, weight * factor + d_weight)), 6)
    new_trust = round(min(1.0, max(0.0, trust + d_trust)), 6)
    payload = MemoryDecayed(
        memory_id=memory_id, semantic_weight=new_weight, trust=new_trust, reason=reason
    )
    return Decision(
        events=[emit(event, payload, CONSUMER, memory_id)],
        writes=[PutWeight(event.tenant, memory_id, new_weight, new_trust, base)],
    )


def _days(value: float) -> timedelta:
    return timedelta(days=value)


def _registered(memory: Memory, policy: DecayPolicy) -> Decision:
    writes: list[Write] = [
        PutWeight(
            memory.tenant,
            memory.memory_id,
            memory.semantic_weight,
            memory.provenance.trust,
            memory.semantic_weight,
        )
    ]
    t, m = memory.tenant, memory.memory_id
    if memory.valid_until is not None:
        writes.append(PutTimer(Timer(t, m, memory.valid_until, "expire")))
    verify = policy.verify_after_days.get(memory.type)
    if verify is not None:
        writes.append(PutTimer(Timer(t, m, memory.created_at + _days(verify), "verify")))
    archive = policy.archive_after_days.get(memory.type)
    if archive is not None:
        writes.append(PutTimer(Timer(t, m, arrival(memory) + _days(archive), "archive")))
    return Decision(writes=writes)


def arrival(memory: Memory) -> datetime:
    """When Mnemo received the memory: the latest of its event time, the instant Mnemo
    accepted the event that declared it (`received_at`, stamped by the gateway or the
    SDK's publisher) and the instant in that event's id (a UUIDv7, stamped when the event
    was sent; what a trusted producer's event without `received_at` has). Imported
    history keeps its real, past event time, and is still only archived once unused for
    its period after it arrived, whatever instant its client stamped in its ids."""
    times = [memory.created_at]
    if (sent := id_time(memory.source_event_id)) is not None:
        times.append(sent)
    if memory.received_at is not None:
        times.append(memory.received_at)
    return max(times)


def used_at(event: Envelope) -> datetime:
    """When a use (a context, a citation, a verification) reached Mnemo: the latest of its
    event time, its `received_at` and the instant in its id. A use sent now with an old
    event time (an import, a client's clock) counts from now, so it never brings a
    memory's archival forward."""
    times = [event.occurred_at]
    if event.received_at is not None:
        times.append(event.received_at)
    if (sent := id_time(event.event_id)) is not None:
        times.append(sent)
    return max(times)


def _hour_ceiling(at: datetime) -> datetime:
    """The first whole hour (UTC) at or after `at`."""
    at = at.astimezone(UTC)
    floor = at.replace(minute=0, second=0, microsecond=0)
    return floor if floor == at else floor + timedelta(hours=1)


def _used(
    event: Envelope, memory_ids: Sequence[str], state: DecayState, policy: DecayPolicy
) -> Decision:
    """A use pushes the archive timer back by the memory type's period, to the whole hour
    after: the uses of a memory within one hour leave its timer where the first put it
    (the store writes nothing for a timer that did not move), and the memory is archived
    once unused for at least its period, at most an hour later."""
    writes: list[Write] = []
    for memory_id in memory_ids:
        memory = state.get(event.tenant, memory_id)
        if memory is None or memory.status is not MemoryStatus.ACTIVE:
            continue
        archive = policy.archive_after_days.get(memory.type)
        if archive is not None:
            due = _hour_ceiling(used_at(event) + _days(archive))
            writes.append(PutTimer(Timer(event.tenant, memory_id, due, "archive")))
    return Decision(writes=writes)


def handle(event: Envelope, state: DecayState, policy: DecayPolicy | None = None) -> Decision:
    """Keep timers and weights in step with the log; turn feedback into decay decisions."""
    policy = policy or DecayPolicy()
    if event.type == MemoryRegistered.TYPE:
        registered = decode_payload(event)
        assert isinstance(registered, MemoryRegistered)
        return _registered(registered.memory, policy)
    if event.type in _ENDED:
        memory_id = str(event.payload["memory_id"])
        gone: list[Write] = [DropTimer(event.tenant, memory_id, kind) for kind in TIMER_KINDS]
        if event.type != MemoryArchived.TYPE:  # an archived memory can still be cited
            gone.append(DropWeight(event.tenant, memory_id))
        return Decision(writes=gone)
    if event.type == MemoryDecayed.TYPE:
        # the log's decision is the truth: after a rebuild the recorded value wins over any
        # value recomputed on the way
        decayed = decode_payload(event)
        assert isinstance(decayed, MemoryDecayed)
        current = state.weight_of(event.tenant, decayed.memory_id)
        if current is None:
            return Decision()
        trust = decayed.trust if decayed.trust is not None else current[1]
        put = PutWeight(event.tenant, decayed.memory_id, decayed.semantic_weight, trust, current[2])
        return Decision(writes=[put])
    payload = decode_payload(event) if event.type in _FEEDBACK else None
    if isinstance(payload, FeedbackRelayed):
        # feedback from another stream about memories of this one: handled here, in the
        # partition of the memories' own stream
        return _feedback(event, state, policy, payload.feedback, payload.memory_ids, payload)
    if payload is None:
        return Decision()
    ids = _feedback_ids(payload)
    if isinstance(payload, MemoryCited) and not _genuine(event, state, payload):
        return Decision()
    here, away = _by_stream(event, state, ids)
    decision = _feedback(event, state, policy, payload.TYPE, here, payload)
    for stream, memory_ids in sorted(away.items()):
        relayed = FeedbackRelayed(
            feedback=payload.TYPE,
            memory_ids=tuple(memory_ids),
            position=getattr(payload, "position", None),
            # never the reason: it is the words of the cause's stream (a user's correction),
            # which would outlive that user's forget here, under another stream's key; no
            # one reads it from the relay, and the cause (its causation id) keeps it
            reason=None,
        )
        relay = emit(event, relayed, CONSUMER, stream=stream)
        # the relay arrived when its cause did: a use relayed keeps the cause's arrival
        arrived = used_at(event)
        if arrived != relay.occurred_at:
            relay = relay.model_copy(update={"received_at": arrived})
        decision.events.append(relay)
    return decision


_FEEDBACK = {
    MemoryCited.TYPE,
    MemoryCorrected.TYPE,
    MemoryContradicted.TYPE,
    MemoryVerified.TYPE,
    ContextAssembled.TYPE,
    FeedbackRelayed.TYPE,
}
# what ends a memory's timers (and, but for archiving, its weight)
_ENDED = {
    MemorySuperseded.TYPE,
    MemoryExpired.TYPE,
    MemoryForgotten.TYPE,
    MemoryArchived.TYPE,
}
# the event types the decay handler reads (handlers/registry.py lists them)
HANDLED = frozenset({MemoryRegistered.TYPE, MemoryDecayed.TYPE, *_ENDED, *_FEEDBACK})


def _genuine(event: Envelope, state: DecayState, cited: MemoryCited) -> bool:
    """A citation counts only when it names the context it comes from, that context
    included the memory, and it is the citation the registrar credited: the first of that
    memory in that context, whatever the event ids of the repeats (the relay to the
    memory's own stream is made after this check). The decay consumer reads an event only
    after the registrar has handled it, so the registrar's choice is on the record."""
    record = None
    for request_id in cited_context_ids(cited.request_id, event.causation_id):
        record = state.context_record(event.tenant, request_id)
        if record is not None:
            break
    return (
        credits_citation(record, event.stream, cited.memory_id)
        and record is not None
        and record.credited_by(cited.memory_id) == event.event_id
    )


def memory_lookups(event: Envelope) -> tuple[str, ...]:
    """The memories of the event's tenant that `handle` reads for this event (a hint for a
    store that reads them all at once): those that feedback names."""
    if event.type not in _FEEDBACK:
        return ()
    try:
        payload = decode_payload(event)
    except (KeyError, ValueError):  # handle() says what is wrong with it
        return ()
    if isinstance(payload, FeedbackRelayed):
        return tuple(payload.memory_ids)
    return _feedback_ids(payload)


def _feedback_ids(payload: EventPayload) -> tuple[str, ...]:
    if isinstance(payload, MemoryCorrected | ContextAssembled):
        return payload.memory_ids
    memory_id = getattr(payload, "memory_id", None)
    return (memory_id,) if isinstance(memory_id, str) else ()


def _by_stream(
    event: Envelope, state: DecayState, memory_ids: Sequence[str]
) -> tuple[list[str], dict[str, list[str]]]:
    """The memories of the event's own stream, and those of each other stream. A memory
    that is not in the read model (unknown, another tenant's) is in neither."""
    here: list[str] = []
    away: dict[str, list[str]] = {}
    for memory_id in dict.fromkeys(memory_ids):
        memory = state.get(event.tenant, memory_id)
        if memory is None:
            continue
        if memory.stream == event.stream:
            here.append(memory_id)
        else:
            away.setdefault(memory.stream, []).append(memory_id)
    return here, away


def _feedback(
    event: Envelope,
    state: DecayState,
    policy: DecayPolicy,
    kind: str,
    memory_ids: Sequence[str],
    payload: EventPayload,
) -> Decision:
    """What feedback of type `kind` does to memories of the event's stream."""
    decision = Decision()
    position = getattr(payload, "position", None)
    if kind == MemoryCited.TYPE:
        d_weight, d_trust = CITED[position]
        why = f"cited:{position or 'unknown'}"
        for memory_id in memory_ids:
            decision.extend(_moved(event, state, memory_id, (1.0, d_weight, d_trust), why))
        decision.extend(_used(event, memory_ids, state, policy))
    elif kind == MemoryCorrected.TYPE:
        move = (CORRECTED_WEIGHT_FACTOR, 0.0, -CORRECTED_TRUST_STEP)
        for memory_id in memory_ids:
            decision.extend(_moved(event, state, memory_id, move, "corrected"))
    elif kind == MemoryContradicted.TYPE:
        move = (CONTRADICTED_WEIGHT_FACTOR, 0.0, -CONTRADICTED_TRUST_STEP)
        for memory_id in memory_ids:
            decision.extend(_moved(event, state, memory_id, move, "contradicted"))
    elif kind == MemoryVerified.TYPE:
        for memory_id in memory_ids:
            decision.extend(_verified(event, memory_id, state, policy))
    elif kind == ContextAssembled.TYPE:
        decision.extend(_used(event, memory_ids, state, policy))
    return decision


def _verified(event: Envelope, memory_id: str, state: DecayState, policy: DecayPolicy) -> Decision:
    """Renewal: the deadline is off, the next verification is scheduled, and a weight that
    fell for want of an answer comes back to what it was registered with."""
    memory = state.get(event.tenant, memory_id)
    if memory is None or memory.status is not MemoryStatus.ACTIVE:
        return Decision()
    t = event.tenant
    decision = Decision(writes=[DropTimer(t, memory_id, "verify_deadline")])
    verify = policy.verify_after_days.get(memory.type)
    if verify is not None:
        # counted from the confirmation's event time, but never from before the memory's
        # own: a confirmation dated earlier must not bring the next question forward
        renewed = max(event.occurred_at, memory.created_at)
        decision.writes.append(PutTimer(Timer(t, memory_id, renewed + _days(verify), "verify")))
    decision.extend(_used(event, [memory_id], state, policy))
    current = state.weight_of(t, memory_id)
    if current is not None and current[0] < current[2]:
        decision.extend(_moved(event, state, memory_id, (0.0, current[2], 0.0), "verified"))
    return decision


def _decision_event(memory: Memory, timer: Timer, payload: EventPayload) -> Envelope:
    return Envelope(
        event_id=derived_id(
            timer.due_at,
            CONSUMER,
            memory.tenant,
            memory.memory_id,
            timer.kind,
            timer.due_at.isoformat(),
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


def _kind_order(kind: str) -> int:
    return TIMER_KINDS.index(kind) if kind in TIMER_KINDS else len(TIMER_KINDS)


def scan(
    due: Sequence[Timer],
    state: DecayState,
    policy: DecayPolicy | None = None,
    decided: Callable[[str, str], bool] | None = None,
) -> Decision:
    """Act on the timers that are due. Event time is the due instant itself, not the scan's
    time, so a late scan still records the exact moment. `decided(tenant, event_id)`: has
    the registrar recorded its outcome of that event (a toolchain timer whose start it has
    not is kept for a later scan; see toolchain.expire)."""
    policy = policy or DecayPolicy()
    decision = Decision()
    ended: set[tuple[str, str]] = set()  # memories this scan already expired or archived
    for timer in sorted(due, key=lambda t: (t.due_at, _kind_order(t.kind))):
        if timer.kind == toolchain.TIMER_KIND:  # a toolchain's time to live
            decision.extend(toolchain.expire(timer, state, decided))
            continue
        memory = state.get(timer.tenant, timer.memory_id)
        decision.writes.append(DropTimer(timer.tenant, timer.memory_id, timer.kind))
        if memory is None or memory.status is not MemoryStatus.ACTIVE:
            continue
        if (timer.tenant, timer.memory_id) in ended:
            # a scan that runs late can find several timers of one memory due at once: the
            # first end (expiry or archival) is its fate, and the later ones never happened
            continue
        if timer.kind == "expire":
            payload: EventPayload = MemoryExpired(
                memory_id=memory.memory_id, expired_at=timer.due_at
            )
            # an expired memory is gone: none of its other timers may fire later
            decision.writes.extend(
                DropTimer(timer.tenant, timer.memory_id, kind)
                for kind in TIMER_KINDS
                if kind != timer.kind
            )
            ended.add((timer.tenant, timer.memory_id))
        elif timer.kind == "verify":
            # an imported memory can be due long before it arrived: the answering period
            # runs from when the agent could first ask, never from a past event time alone
            deadline = max(timer.due_at, arrival(memory)) + _days(policy.answer_within_days)
            payload = VerificationDue(
                memory_id=memory.memory_id, due_at=timer.due_at, deadline=deadline
            )
            decision.writes.append(
                PutTimer(Timer(memory.tenant, memory.memory_id, deadline, "verify_deadline"))
            )
        elif timer.kind == "verify_deadline":
            current = state.weight_of(memory.tenant, memory.memory_id)
            if current is None or current[0] <= policy.unverified_weight:
                continue
            _, trust, base = current
            payload = MemoryDecayed(
                memory_id=memory.memory_id,
                semantic_weight=policy.unverified_weight,
                trust=trust,
                reason="unverified",
            )
            decision.writes.append(
                PutWeight(memory.tenant, memory.memory_id, policy.unverified_weight, trust, base)
            )
        elif timer.kind == "archive":
            period = policy.archive_after_days.get(memory.type)
            if period is None:
                continue
            payload = MemoryArchived(
                memory_id=memory.memory_id, unused_since=timer.due_at - _days(period)
            )
            ended.add((timer.tenant, timer.memory_id))
        else:
            continue
        decision.events.append(_decision_event(memory, timer, payload))
    return decision
