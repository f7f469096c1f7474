"""Toolchains (mnemo.domain.toolchain): the registrar's projection of their events into the
toolchain read model, and the decay consumer's expiry timers.

- `handle` (registrar): a start makes the state; a step outcome is checked against it
  (known toolchain on this stream, not expired, step in the plan, a completed step final,
  the same content once) and recorded, or refused with an outcome's reason code and no
  write; an expiry decided by decay is recorded; forgetting the stream drops its
  toolchains (a forgotten tenant's go with the tenant's purge).
- `timers` (decay): a start sets an expiry timer at the start's instant plus its TTL.
- `expire` (decay's scan): a due timer of a toolchain still unfinished emits
  ToolchainExpired at the due instant, on the toolchain's stream.

Every decision depends only on the toolchain's own events, which all lie on its stream:
a rebuild, in the stream's order, decides the same. Once the subject is forgotten (its key
shredded), a step's output and a failure's reason read as the redaction marker: what was
decided on the words is decided again without them (`_step`), the way it was decided live.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Protocol

from pydantic import ValidationError

from mnemo.domain.events import (
    Actor,
    ActorKind,
    Envelope,
    ForgetRequested,
    ToolchainExpired,
    ToolchainStarted,
    ToolchainStepCompleted,
    ToolchainStepFailed,
    decode_payload,
)
from mnemo.domain.ids import derived_id
from mnemo.domain.pii import REDACTED
from mnemo.domain.projection import (
    DropTimer,
    DropToolchain,
    Outcome,
    OutcomeKind,
    PutOutcome,
    PutTimer,
    PutToolchain,
    Timer,
    Write,
)
from mnemo.domain.sealed import EncryptionBlock
from mnemo.domain.toolchain import (
    StepDone,
    StepError,
    StepFailure,
    ToolchainState,
    canonical_json,
    content_digest,
    expiry_of,
    json_text_problem,
    plan_digest,
)
from mnemo.handlers import Decision

__all__ = [
    "HANDLED",
    "TIMERS_HANDLED",
    "TIMER_KIND",
    "ToolchainReads",
    "expire",
    "handle",
    "timer_of",
    "timers",
]

CONSUMER = "registrar"  # the toolchain read model is projected by the registrar
DECAY = "decay"
TIMER_KIND = "toolchain"
_TIMER_PREFIX = "toolchain:"

STEP_EVENTS = frozenset({ToolchainStepCompleted.TYPE, ToolchainStepFailed.TYPE})
HANDLED = frozenset(
    {ToolchainStarted.TYPE, ToolchainExpired.TYPE, ForgetRequested.TYPE, *STEP_EVENTS}
)
TIMERS_HANDLED = frozenset({ToolchainStarted.TYPE, ToolchainExpired.TYPE})


class ToolchainReads(Protocol):
    """The read-model lookups the toolchain handlers need."""

    def toolchain(self, tenant: str, toolchain_id: str) -> ToolchainState | None: ...

    def stream_toolchains(self, tenant: str, stream: str) -> list[str]: ...


def _outcome(
    event: Envelope, kind: OutcomeKind, code: str | None = None, detail: str = ""
) -> Write:
    return PutOutcome(
        Outcome(event.tenant, event.event_id, 0, kind, reason_code=code, detail=detail or None)
    )


def _refused(event: Envelope, code: str, detail: str) -> Decision:
    """Nothing recorded; the event's outcome says why (the HTTP routes answer with it)."""
    return Decision(writes=[_outcome(event, OutcomeKind.REJECTED, code, detail)])


def handle(event: Envelope, state: ToolchainReads) -> Decision:
    """The registrar's decision on a toolchain event (and on forgetting a stream)."""
    if event.type not in HANDLED:
        return Decision()
    try:
        payload = decode_payload(event)
    except (ValidationError, KeyError, ValueError) as exc:
        if event.type == ForgetRequested.TYPE:
            return Decision()
        return _refused(event, "INVALID_PAYLOAD", str(exc).splitlines()[0][:300])
    if isinstance(payload, ForgetRequested):
        if payload.tenant or payload.memory_id is not None:
            return Decision()  # one memory: no toolchain; a tenant: its purge drops them
        return Decision(
            writes=[
                DropToolchain(event.tenant, t)
                for t in state.stream_toolchains(event.tenant, event.stream)
            ]
        )
    if isinstance(payload, ToolchainStarted):
        return _started(event, state, payload)
    if isinstance(payload, ToolchainExpired):
        current = state.toolchain(event.tenant, payload.toolchain_id)
        if current is None or current.expired_at is not None or current.next_step() is None:
            return Decision()
        ended = current.model_copy(update={"expired_at": payload.expired_at})
        return Decision(writes=[PutToolchain(ended)])
    assert isinstance(payload, ToolchainStepCompleted | ToolchainStepFailed)
    return _step(event, state.toolchain(event.tenant, payload.toolchain_id), payload)


def _started(event: Envelope, state: ToolchainReads, started: ToolchainStarted) -> Decision:
    digest = plan_digest(event.stream, started.steps, started.ttl_seconds)
    existing = state.toolchain(event.tenant, started.toolchain_id)
    if existing is not None:
        if existing.plan_digest == digest:
            return Decision(writes=[_outcome(event, OutcomeKind.DUPLICATE)])
        return _refused(
            event, "TOOLCHAIN_EXISTS", "a toolchain with this id was started with another plan"
        )
    new = ToolchainState(
        tenant=event.tenant,
        toolchain_id=started.toolchain_id,
        stream=event.stream,
        steps=started.steps,
        ttl_seconds=started.ttl_seconds,
        started_at=event.occurred_at,
        expires_at=expiry_of(event.occurred_at, started.ttl_seconds),
        started_event_id=event.event_id,
        plan_digest=digest,
        updated_at=event.occurred_at,
    )
    return Decision(writes=[PutToolchain(new), _outcome(event, OutcomeKind.APPLIED)])


def output_digest(output: str) -> str:
    """A completed step's content: its output as canonical JSON (key order and spacing
    make no difference), or the text itself when it is not JSON (a sealed stand-in)."""
    try:
        text = canonical_json(json.loads(output))
    except ValueError:
        text = output
    return content_digest("completed", text)


def failure_digest(error: StepError) -> str:
    """A failed step's content: its error."""
    return content_digest("failed", error.model_dump_json())


def step_digest(payload: ToolchainStepCompleted | ToolchainStepFailed) -> str:
    """What makes two records of a step the same record."""
    if isinstance(payload, ToolchainStepCompleted):
        return output_digest(payload.output)
    return failure_digest(payload.error)


def _detector_block(event: Envelope) -> EncryptionBlock | None:
    """The ciphertexts of the detector's placeholders the event holds (its whole-sealed
    fields are opened by now), kept with the step so that a read opens them again and a
    shredded key leaves them redacted."""
    block = event.encryption
    if block is None or not block.values or block.wrapped_key is None:
        return None
    return block


def check_step(
    current: ToolchainState | None,
    stream: str,
    step_id: str,
    digest: str,
    completed: bool,
    at: datetime,
) -> tuple[str, str] | None:
    """(code, detail) refusing a step outcome, ("", "duplicate") for one recorded already,
    or None to record it. Shared by the handler and the routes' early check."""
    if current is None or current.stream != stream:
        return "TOOLCHAIN_NOT_FOUND", "no toolchain with this id on this stream"
    if step_id not in current.steps:
        return "STEP_NOT_IN_PLAN", "the toolchain's plan has no step with this id"
    done = current.done_step(step_id)
    if done is not None:
        if completed and done.digest == digest:
            return "", "duplicate"
        return "STEP_CONFLICT", "the step was completed already, with other content"
    failed = current.failure(step_id)
    if failed is not None and not completed and failed.digest == digest:
        return "", "duplicate"
    if current.expired(at):
        return "TOOLCHAIN_EXPIRED", "the toolchain's time to live ran out"
    return None


def redacted(payload: ToolchainStepCompleted | ToolchainStepFailed) -> bool:
    """Whether the step's content reads as the redaction marker: sealed on a user stream
    whose key was shredded when the subject was forgotten, so no one can read it again."""
    if isinstance(payload, ToolchainStepCompleted):
        return payload.output == REDACTED
    return REDACTED in (payload.error.reason, payload.error.field)


def _step(
    event: Envelope,
    current: ToolchainState | None,
    payload: ToolchainStepCompleted | ToolchainStepFailed,
) -> Decision:
    completed = isinstance(payload, ToolchainStepCompleted)
    unreadable = redacted(payload)
    if isinstance(payload, ToolchainStepCompleted) and not unreadable:
        # checked at the edge; again here, opened, for a record sealed before it was read.
        # A redacted output was read live, before its key was shredded (a rebuild after
        # the subject's forget): the marker is not its content, and not a JSON problem
        problem_ = json_text_problem(payload.output)
        if problem_ is not None:
            return _refused(event, *problem_)
    # a redacted record is compared as the content it was: its own, equal to no other
    # record's (the routes append a step's outcome only when it differs from the one
    # recorded, so the log holds no record that was a duplicate of another); otherwise
    # every failure of a forgotten subject would collapse into the first one
    digest = content_digest("redacted", event.event_id) if unreadable else step_digest(payload)
    problem = check_step(
        current, event.stream, payload.step_id, digest, completed, event.occurred_at
    )
    if problem is not None:
        code, detail = problem
        if not code:
            return Decision(writes=[_outcome(event, OutcomeKind.DUPLICATE)])
        return _refused(event, code, detail)
    assert current is not None
    if isinstance(payload, ToolchainStepCompleted):
        done = StepDone(
            step_id=payload.step_id,
            output=payload.output,
            digest=digest,
            at=event.occurred_at,
            event_id=event.event_id,
            sealed=_detector_block(event),
        )
        updated = current.with_done(done)
    else:
        before = current.failure(payload.step_id)
        failure = StepFailure(
            step_id=payload.step_id,
            error=payload.error,
            digest=digest,
            attempts=(before.attempts + 1) if before is not None else 1,
            at=event.occurred_at,
            event_id=event.event_id,
            sealed=_detector_block(event),
        )
        updated = current.with_failure(failure)
    return Decision(writes=[PutToolchain(updated), _outcome(event, OutcomeKind.APPLIED)])


# ---- expiry, in the decay consumer ---------------------------------------------------------


def timer_of(tenant: str, toolchain_id: str, started_event_id: str) -> tuple[str, str]:
    """The (memory_id, kind) under which a start's expiry timer is kept: one per start
    event, so a refused second start never moves the first one's timer."""
    return f"{_TIMER_PREFIX}{started_event_id}:{toolchain_id}", TIMER_KIND


def timers(event: Envelope, state: object = None) -> Decision:
    """The decay consumer's projection: a start sets its expiry timer; the expiry decided
    on it drops the timer (the scan that decided it dropped it live; a rebuild replays
    the start and then this)."""
    if event.type not in TIMERS_HANDLED:
        return Decision()
    try:
        started = decode_payload(event)
    except (ValidationError, KeyError, ValueError):
        return Decision()
    if isinstance(started, ToolchainExpired):
        if event.causation_id is None:
            return Decision()
        key, kind = timer_of(event.tenant, started.toolchain_id, event.causation_id)
        return Decision(writes=[DropTimer(event.tenant, key, kind)])
    assert isinstance(started, ToolchainStarted)
    key, kind = timer_of(event.tenant, started.toolchain_id, event.event_id)
    due = expiry_of(event.occurred_at, started.ttl_seconds)
    return Decision(writes=[PutTimer(Timer(event.tenant, key, due, kind))])


def expire(
    timer: Timer, state: ToolchainReads, decided: Callable[[str, str], bool] | None = None
) -> Decision:
    """A due toolchain timer: ToolchainExpired at the due instant for the toolchain that
    start made, unless it finished, expired already, or is gone (forgotten).

    `decided(tenant, event_id)` says whether the registrar has recorded its outcome of an
    event. The decay consumer reads the log apart from the registrar, so a short TTL can
    come due before the start is in the read model: while the start is undecided the
    timer is kept (no writes at all) and looked at again by a later scan, not dropped."""
    decision = Decision(writes=[DropTimer(timer.tenant, timer.memory_id, timer.kind)])
    started_event_id, _, toolchain_id = timer.memory_id[len(_TIMER_PREFIX) :].partition(":")
    current = state.toolchain(timer.tenant, toolchain_id)
    if current is None or current.started_event_id != started_event_id:
        if decided is not None and not decided(timer.tenant, started_event_id):
            return Decision()
        return decision
    if current.expired_at is not None or current.next_step() is None:
        return decision
    payload = ToolchainExpired(toolchain_id=toolchain_id, expired_at=current.expires_at)
    decision.events.append(
        Envelope(
            event_id=derived_id(
                current.expires_at, DECAY, timer.tenant, toolchain_id, started_event_id, "expire"
            ),
            type=payload.TYPE,
            schema_version=payload.VERSION,
            tenant=timer.tenant,
            stream=current.stream,
            occurred_at=current.expires_at,
            actor=Actor(kind=ActorKind.SYSTEM, id=DECAY),
            causation_id=started_event_id,
            correlation_id=started_event_id,
            payload=payload.model_dump(mode="json"),
        )
    )
    return decision
