"""Toolchains: an agent's plan of tool calls (create order, get a payment link, confirm the
payment) and what became of each step, so that a chain broken off by a crash resumes where
it stopped, on any device, without repeating a step that was done.

A toolchain lives on one stream (the subject it acts for) and has a time to live. Its state
is a read model built from its events alone (ToolchainStarted, ToolchainStepCompleted,
ToolchainStepFailed, ToolchainExpired): the steps done with their outputs, the last failure
of each step not done, and the step to run next (the first of the plan not done). Steps are
idempotent by step id: the same step recorded again with the same content changes nothing,
the same step id with other content is refused (STEP_CONFLICT). A completed step is final.

Outputs travel as JSON text (`output`), so that on a person's stream the whole output is
sealed under the subject's key before the log sees it (ADR 0010), like any free text.
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from mnemo.domain.access import no_key_in
from mnemo.domain.edge import JsonBool
from mnemo.domain.sealed import EncryptionBlock

__all__ = [
    "DEFAULT_TTL_SECONDS",
    "MAX_OUTPUT_BYTES",
    "MAX_STEPS",
    "MAX_TTL_SECONDS",
    "StepDone",
    "StepError",
    "StepFailure",
    "StepId",
    "ToolchainId",
    "ToolchainState",
    "ToolchainStatus",
    "canonical_json",
    "content_digest",
    "json_text_problem",
]

DEFAULT_TTL_SECONDS = 24 * 3600
MAX_TTL_SECONDS = 30 * 24 * 3600
MAX_STEPS = 64
MAX_OUTPUT_BYTES = 32 * 1024  # a step's output, as compact JSON text

# identifiers kept and served in clear: one holding an API key is refused
ToolchainId = Annotated[
    str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$"), AfterValidator(no_key_in)
]
StepId = Annotated[
    str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"), AfterValidator(no_key_in)
]


class ToolchainStatus(StrEnum):
    RUNNING = "running"  # steps are left and the next one has not failed
    FAILED = "failed"  # the next step's last attempt failed
    COMPLETED = "completed"  # every planned step is done
    EXPIRED = "expired"  # its time to live ran out first


class StepError(BaseModel):
    """Why a step failed, in a form an agent can act on."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: str = Field(
        pattern=r"^[A-Za-z][A-Za-z0-9_.:-]{0,63}$", description="a code: timeout, validation..."
    )
    field: str | None = Field(default=None, max_length=256, description="the input at fault")
    reason: str = Field(min_length=1, max_length=2_000)
    retryable: JsonBool = Field(description="whether running the step again may succeed")


def canonical_json(value: Any) -> str:
    """A JSON value as compact text with sorted keys: equal values give equal text."""
    return json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
    )


def json_text_problem(text: str) -> tuple[str, str] | None:
    """(code, message) when `text` is not a JSON document of at most MAX_OUTPUT_BYTES, or
    None when it is."""
    if len(text.encode("utf-8")) > MAX_OUTPUT_BYTES:
        return "OUTPUT_TOO_LARGE", f"a step's output is at most {MAX_OUTPUT_BYTES} bytes of JSON"
    try:
        json.loads(text, parse_constant=_no_constant)
    except (ValueError, RecursionError):
        return "OUTPUT_NOT_JSON", "a step's output must be a JSON document"
    return None


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def content_digest(*parts: str) -> str:
    """What identifies a step's content: equal content, equal digest."""
    return hashlib.sha256("\x1f".join(parts).encode("utf-8")).hexdigest()[:32]


class StepDone(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    step_id: str
    output: str  # JSON text
    digest: str
    at: datetime
    event_id: str
    # the ciphertexts of the sensitive values whose placeholders the output holds (the
    # event's detector block); None when it holds none, and when read through Mnemo
    sealed: EncryptionBlock | None = None

    def output_value(self) -> Any:
        """The output as a JSON value (the stand-in text when it cannot be opened)."""
        try:
            return json.loads(self.output)
        except ValueError:
            return self.output


class StepFailure(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    step_id: str
    error: StepError
    digest: str
    attempts: int = Field(ge=1)
    at: datetime
    event_id: str
    sealed: EncryptionBlock | None = None  # as StepDone's, for the reason and field


class ToolchainState(BaseModel):
    """One toolchain as its events left it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tenant: str
    toolchain_id: str
    stream: str
    steps: tuple[str, ...]
    ttl_seconds: int
    started_at: datetime
    expires_at: datetime
    started_event_id: str
    plan_digest: str
    done: tuple[StepDone, ...] = ()
    failures: tuple[StepFailure, ...] = ()  # the last failure of each step not done
    expired_at: datetime | None = None
    updated_at: datetime

    def done_step(self, step_id: str) -> StepDone | None:
        return next((d for d in self.done if d.step_id == step_id), None)

    def failure(self, step_id: str) -> StepFailure | None:
        return next((f for f in self.failures if f.step_id == step_id), None)

    def next_step(self) -> str | None:
        """The first planned step not done: a done step is never run again."""
        finished = {d.step_id for d in self.done}
        return next((s for s in self.steps if s not in finished), None)

    def expired(self, at: datetime) -> bool:
        return self.expired_at is not None or at >= self.expires_at

    def status(self, at: datetime) -> ToolchainStatus:
        """Its status at an instant (the read's `as_of`, or now)."""
        following = self.next_step()
        if following is None:
            return ToolchainStatus.COMPLETED
        if (self.expired_at is not None and at >= self.expired_at) or at >= self.expires_at:
            return ToolchainStatus.EXPIRED
        if self.failure(following) is not None:
            return ToolchainStatus.FAILED
        return ToolchainStatus.RUNNING

    def with_done(self, done: StepDone) -> ToolchainState:
        return self.model_copy(
            update={
                "done": (*self.done, done),
                "failures": tuple(f for f in self.failures if f.step_id != done.step_id),
                "updated_at": done.at,
            }
        )

    def with_failure(self, failure: StepFailure) -> ToolchainState:
        others = tuple(f for f in self.failures if f.step_id != failure.step_id)
        return self.model_copy(update={"failures": (*others, failure), "updated_at": failure.at})


def plan_digest(stream: str, steps: tuple[str, ...], ttl_seconds: int) -> str:
    return content_digest(stream, *steps, str(ttl_seconds))


def expiry_of(started_at: datetime, ttl_seconds: int) -> datetime:
    return started_at + timedelta(seconds=ttl_seconds)
