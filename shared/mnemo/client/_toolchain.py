"""The toolchain calls (docs/toolchains.md): start a toolchain, record each step's outcome,
read its state to resume from. Every call may be repeated: a step recorded again with the
same content is a duplicate, so a retry after a lost answer records nothing twice."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pydantic import Field

from mnemo.client._core import Call, _instant, seg
from mnemo.client.models import _Model

__all__ = [
    "StepDone",
    "StepError",
    "StepFailed",
    "Toolchain",
    "complete_step",
    "fail_step",
    "get",
    "start",
]


class StepError(_Model):
    type: str
    field: str | None = None
    reason: str
    retryable: bool


class StepDone(_Model):
    step_id: str
    output: Any = None
    at: datetime


class StepFailed(_Model):
    step_id: str
    error: StepError
    attempts: int
    at: datetime


class Toolchain(_Model):
    """A toolchain's state: run `next_step` next (None once it is over)."""

    toolchain_id: str
    subject: str
    status: str = Field(description="running, failed, completed or expired")
    steps: list[str]
    done: list[StepDone] = Field(default_factory=list)
    failed: StepFailed | None = None
    next_step: str | None = None
    started_at: datetime
    expires_at: datetime
    ttl_seconds: int
    as_of: datetime
    duplicate: bool | None = None

    def output(self, step_id: str) -> Any:
        """The output of a step done (KeyError when it is not done)."""
        for done in self.done:
            if done.step_id == step_id:
                return done.output
        raise KeyError(step_id)


def _toolchain(body: Any) -> Toolchain:
    return Toolchain.model_validate(body)


def start(
    toolchain_id: str, subject: str, steps: list[str], ttl_seconds: int | None = None
) -> Call[Toolchain]:
    body: dict[str, Any] = {"toolchain_id": toolchain_id, "subject": subject, "steps": steps}
    if ttl_seconds is not None:
        body["ttl_seconds"] = ttl_seconds
    return Call("POST", "/v1/toolchains", _toolchain, body=body, idempotent=True)


def complete_step(toolchain_id: str, step_id: str, output: Any) -> Call[Toolchain]:
    path = f"/v1/toolchains/{seg(toolchain_id)}/steps/{seg(step_id)}"
    body = {"status": "completed", "output": output}
    return Call("POST", path, _toolchain, body=body, idempotent=True)


def fail_step(
    toolchain_id: str,
    step_id: str,
    *,
    type: str,
    reason: str,
    retryable: bool,
    field: str | None = None,
) -> Call[Toolchain]:
    path = f"/v1/toolchains/{seg(toolchain_id)}/steps/{seg(step_id)}"
    error: dict[str, Any] = {"type": type, "reason": reason, "retryable": retryable}
    if field is not None:
        error["field"] = field
    return Call("POST", path, _toolchain, body={"status": "failed", "error": error})


def get(toolchain_id: str, as_of: datetime | str | None = None) -> Call[Toolchain]:
    params = {"as_of": _instant(as_of)} if as_of is not None else None
    return Call("GET", f"/v1/toolchains/{seg(toolchain_id)}", _toolchain, params=params)
