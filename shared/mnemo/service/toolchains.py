"""Toolchain use cases (mnemo.domain.toolchain): start one, record a step's outcome, read
its state. They publish the toolchain events through the application's publish path (so
they are validated, sealed, logged, audited and replayed like any event), wait for the
registrar, and answer with what it decided.

A request is first checked against the read model, so that a step recorded already is
answered as a duplicate and a conflicting one is refused without anything appended. The
registrar decides again on the logged event (two devices racing past the early check): an
event it refuses leaves its rejected outcome and no state.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from mnemo.domain.errors import ConflictError, InvalidInput, MnemoError, NotFound, Unavailable
from mnemo.domain.events import (
    ToolchainStarted,
    ToolchainStepCompleted,
    ToolchainStepFailed,
)
from mnemo.domain.pii import Action
from mnemo.domain.projection import Outcome, OutcomeKind
from mnemo.domain.toolchain import (
    DEFAULT_TTL_SECONDS,
    StepError,
    ToolchainState,
    canonical_json,
    json_text_problem,
    plan_digest,
)
from mnemo.handlers.toolchain import check_step, output_digest, step_digest
from mnemo.service.app import Mnemo, RequestContext, Wait

__all__ = ["Recorded", "record_step", "start", "state", "view"]

_NOT_FOUND = {"TOOLCHAIN_NOT_FOUND"}
_CONFLICTS = {"STEP_CONFLICT", "TOOLCHAIN_EXISTS", "TOOLCHAIN_EXPIRED"}


@dataclass(frozen=True, slots=True)
class Recorded:
    """What a start or a step record came to: the state after it, and whether it had
    been recorded before (nothing was appended then)."""

    state: ToolchainState
    duplicate: bool
    event_id: str | None = None


def refusal(code: str, detail: str, field: str | None = None) -> MnemoError:
    if code in _NOT_FOUND:
        return NotFound(detail, code=code, field=field)
    if code in _CONFLICTS:
        return ConflictError(detail, code=code, field=field)
    return InvalidInput(detail, code=code, field=field)


def _masks(mnemo: Mnemo, tenant: str) -> bool:
    """Whether the tenant's policy masks (or, in text Mnemo reads, rejects) some kind."""
    if mnemo.sealer is None:
        return False
    policy = mnemo.sealer.policy.for_tenant(tenant)
    return policy.default is not Action.ENCRYPT or any(
        a is not Action.ENCRYPT for a in policy.actions.values()
    )


def state(mnemo: Mnemo, ctx: RequestContext, toolchain_id: str) -> ToolchainState:
    found = mnemo.store.toolchain(ctx.tenant, toolchain_id)
    if found is None:
        raise NotFound(
            "no toolchain with this id", code="TOOLCHAIN_NOT_FOUND", field="toolchain_id"
        )
    return found


def view(found: ToolchainState, at: datetime) -> dict[str, Any]:
    """The state as the API shows it, judged at `at` (expiry)."""
    following = found.next_step()
    failure = found.failure(following) if following is not None else None
    status = found.status(at)
    return {
        "toolchain_id": found.toolchain_id,
        "subject": found.stream,
        "status": status.value,
        "steps": list(found.steps),
        "done": [
            {"step_id": d.step_id, "output": d.output_value(), "at": d.at.isoformat()}
            for d in found.done
        ],
        "failed": None
        if failure is None
        else {
            "step_id": failure.step_id,
            "error": failure.error.model_dump(mode="json"),
            "attempts": failure.attempts,
            "at": failure.at.isoformat(),
        },
        "next_step": following if status.value in ("running", "failed") else None,
        "started_at": found.started_at.isoformat(),
        "expires_at": found.expires_at.isoformat(),
        "ttl_seconds": found.ttl_seconds,
        "as_of": at.isoformat(),
    }


def _decided(
    mnemo: Mnemo, ctx: RequestContext, event: dict[str, Any], toolchain_id: str, timeout: float
) -> Recorded:
    """Publish one toolchain event, wait for the registrar, and answer with its decision.
    A field the edge refuses is named as the request names it (`steps`, `subject`), not
    by its place in the event."""
    try:
        result = mnemo.publish(ctx, [event], Wait.REGISTERED, timeout)
    except InvalidInput as exc:
        if exc.field is not None:
            exc.field = _request_field(exc.field)
        raise
    accepted = result.accepted[0]
    if not result.complete:
        raise Unavailable(
            "the event is logged but not yet registered; read the toolchain again shortly",
            code="REGISTRATION_PENDING",
            extra={"event_id": accepted.event_id},
        )
    outcomes: list[Outcome] = result.outcomes.get(accepted.event_id, [])
    if not outcomes:
        raise Unavailable(
            "the event is logged but the registrar has not recorded an outcome for it",
            code="REGISTRATION_PENDING",
            extra={"event_id": accepted.event_id},
        )
    rejected = next((o for o in outcomes if o.kind is OutcomeKind.REJECTED), None)
    if rejected is not None:
        raise refusal(rejected.reason_code or "REJECTED", rejected.detail or "refused")
    duplicate = accepted.duplicate or any(o.kind is OutcomeKind.DUPLICATE for o in outcomes)
    return Recorded(state(mnemo, ctx, toolchain_id), duplicate, accepted.event_id)


def _request_field(field: str) -> str:
    if field.startswith("events[0].payload."):
        return field.removeprefix("events[0].payload.")
    return {"events[0].stream": "subject"}.get(field, field)


def start(
    mnemo: Mnemo,
    ctx: RequestContext,
    toolchain_id: str,
    subject: str,
    steps: list[str],
    ttl_seconds: int = DEFAULT_TTL_SECONDS,
    *,
    timeout: float = 10.0,
) -> Recorded:
    payload = {"toolchain_id": toolchain_id, "steps": steps, "ttl_seconds": ttl_seconds}
    event = {
        "type": ToolchainStarted.TYPE,
        "schema_version": ToolchainStarted.VERSION,
        "stream": subject,
        "payload": payload,
    }
    existing = mnemo.store.toolchain(ctx.tenant, toolchain_id)
    if existing is not None:
        same = existing.plan_digest == plan_digest(subject, tuple(steps), ttl_seconds)
        if same:
            return Recorded(existing, True)
        raise refusal(
            "TOOLCHAIN_EXISTS",
            "a toolchain with this id was started with another plan",
            "toolchain_id",
        )
    return _decided(mnemo, ctx, event, toolchain_id, timeout)


def record_step(
    mnemo: Mnemo,
    ctx: RequestContext,
    toolchain_id: str,
    step_id: str,
    *,
    output: Any = None,
    error: StepError | None = None,
    timeout: float = 10.0,
) -> Recorded:
    """Record that a step completed with `output` (any JSON value) or failed with `error`."""
    found = state(mnemo, ctx, toolchain_id)
    if error is None:
        try:
            text = canonical_json(output)
        except (TypeError, ValueError) as exc:
            raise InvalidInput(
                "a step's output must be a JSON value", code="OUTPUT_NOT_JSON", field="output"
            ) from exc
        problem = json_text_problem(text)
        if problem is not None:
            raise InvalidInput(problem[1], code=problem[0], field="output")
        model: type[ToolchainStepCompleted | ToolchainStepFailed] = ToolchainStepCompleted
        payload: dict[str, Any] = {"toolchain_id": toolchain_id, "step_id": step_id, "output": text}
        digest = output_digest(text)
    else:
        model = ToolchainStepFailed
        payload = {
            "toolchain_id": toolchain_id,
            "step_id": step_id,
            "error": error.model_dump(mode="json"),
        }
        digest = step_digest(ToolchainStepFailed.model_validate(payload))
    problem = check_step(found, found.stream, step_id, digest, error is None, mnemo.clock.now())
    if problem is not None:
        code, detail = problem
        if not code:
            return Recorded(found, True)
        if not (code == "STEP_CONFLICT" and _masks(mnemo, ctx.tenant)):
            raise refusal(code, detail, "step_id")
        # the recorded outcome holds masks where this one holds the values: the registrar
        # compares the two as logged (masked alike), and answers duplicate or conflict
    event = {
        "type": model.TYPE,
        "schema_version": model.VERSION,
        "stream": found.stream,
        "payload": payload,
    }
    return _decided(mnemo, ctx, event, toolchain_id, timeout)
