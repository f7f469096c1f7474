"""Toolchains: start one, record each step's outcome, read the state to resume from."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Path, Query, Request
from fastapi.responses import JSONResponse
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StrictBool, StrictInt
from starlette.concurrency import run_in_threadpool

from mnemo.domain.access import Scope as KeyScope
from mnemo.domain.edge import EDGE
from mnemo.domain.errors import InvalidInput
from mnemo.domain.toolchain import (
    DEFAULT_TTL_SECONDS,
    MAX_STEPS,
    MAX_TTL_SECONDS,
    StepError,
    StepId,
    ToolchainId,
)
from mnemo.service import toolchains
from mnemo.service.app import RequestContext
from mnemo_gateway.deps import App, Body, ReadCtx, WriteCtx, checked_as_of, settings_of

router = APIRouter(tags=["toolchains"])

_ID = r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$"
_STEP = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$"


class ToolchainIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    toolchain_id: ToolchainId
    subject: str = Field(min_length=1, max_length=128, description="the stream it acts for")
    steps: list[StepId] = Field(min_length=1, max_length=MAX_STEPS)
    ttl_seconds: StrictInt = Field(default=DEFAULT_TTL_SECONDS, ge=1, le=MAX_TTL_SECONDS)


class StepIn(BaseModel):
    """Exactly one of `output` (completed) and `error` (failed)."""

    model_config = ConfigDict(extra="forbid")

    status: Annotated[str, Field(pattern=r"^(completed|failed)$")]
    output: Any = Field(default=None, description="completed: the step's result, any JSON")
    error: StepError | None = Field(default=None, description="failed: why")


class DoneOut(BaseModel):
    step_id: str
    output: Any
    at: str


class FailedOut(BaseModel):
    step_id: str
    error: StepError
    attempts: int
    at: str


class ToolchainOut(BaseModel):
    toolchain_id: str
    subject: str
    status: str = Field(description="running, failed, completed or expired")
    steps: list[str]
    done: list[DoneOut]
    failed: FailedOut | None = Field(description="the next step's last failure")
    next_step: str | None = Field(description="the step to run next; null once over")
    started_at: str
    expires_at: str
    ttl_seconds: int
    as_of: str
    duplicate: StrictBool | None = Field(
        default=None, description="on a write: it had been recorded before"
    )


def _answer(
    recorded: toolchains.Recorded, mnemo: Any, status: int, ctx: RequestContext
) -> JSONResponse:
    body = toolchains.view(recorded.state, mnemo.clock.now())
    if not ctx.allows(KeyScope.MEMORY_READ):
        # reading a state's outputs and failure needs memory:read (GET); a write answers
        # a key without it the plan and the progress only
        for done in body["done"]:
            done["output"] = None
        body["failed"] = None
    body["duplicate"] = recorded.duplicate
    return JSONResponse(body, status_code=200 if recorded.duplicate else status)


@router.post(
    "/v1/toolchains",
    summary="Start a toolchain: its id, subject, planned steps and time to live",
    description="Answers 201 with the state, 200 when the same toolchain was started "
    "before; another plan under the same id is TOOLCHAIN_EXISTS (409).",
    response_model=ToolchainOut,
    status_code=201,
    openapi_extra={
        "requestBody": {
            "content": {"application/json": {"schema": ToolchainIn.model_json_schema()}}
        }
    },
)
async def start(ctx: WriteCtx, mnemo: App, body: Body, request: Request) -> JSONResponse:
    req = ToolchainIn.model_validate(body)
    timeout = settings_of(request).wait_timeout
    recorded = await run_in_threadpool(
        lambda: toolchains.start(
            mnemo,
            ctx,
            req.toolchain_id,
            req.subject,
            list(req.steps),
            req.ttl_seconds,
            timeout=timeout,
        )
    )
    return _answer(recorded, mnemo, 201, ctx)


@router.post(
    "/v1/toolchains/{toolchain_id}/steps/{step_id}",
    summary="Record a step's outcome: completed with its output, or failed with an error",
    description="A step recorded again with the same content answers 200 with "
    "`duplicate: true` and appends nothing; the same step with other content is "
    "STEP_CONFLICT (409), a step outside the plan STEP_NOT_IN_PLAN, an unknown toolchain "
    "TOOLCHAIN_NOT_FOUND (404), an expired one TOOLCHAIN_EXPIRED (409), an output over "
    "32 KiB OUTPUT_TOO_LARGE (413).",
    response_model=ToolchainOut,
    status_code=201,
    openapi_extra={
        "requestBody": {"content": {"application/json": {"schema": StepIn.model_json_schema()}}}
    },
)
async def step(
    ctx: WriteCtx,
    mnemo: App,
    body: Body,
    request: Request,
    toolchain_id: Annotated[str, Path(pattern=_ID)],
    step_id: Annotated[str, Path(pattern=_STEP)],
) -> JSONResponse:
    req = StepIn.model_validate(body, context=EDGE)  # booleans are JSON booleans
    if (req.status == "failed") != (req.error is not None) or (
        req.status == "failed" and "output" in body
    ):
        raise InvalidInput(
            "a completed step carries `output`, a failed one `error`",
            code="INVALID_STEP",
            field="status",
        )
    timeout = settings_of(request).wait_timeout
    recorded = await run_in_threadpool(
        lambda: toolchains.record_step(
            mnemo,
            ctx,
            toolchain_id,
            step_id,
            output=req.output,
            error=req.error,
            timeout=timeout,
        )
    )
    return _answer(recorded, mnemo, 201, ctx)


@router.get(
    "/v1/toolchains/{toolchain_id}",
    summary="A toolchain's state: steps done with outputs, the failed step, what to run next",
    response_model=ToolchainOut,
)
def get(
    ctx: ReadCtx,
    mnemo: App,
    toolchain_id: Annotated[str, Path(pattern=_ID)],
    as_of: Annotated[
        AwareDatetime | None, Query(description="judge expiry at this instant (default now)")
    ] = None,
) -> dict[str, Any]:
    found = toolchains.state(mnemo, ctx, toolchain_id)
    return toolchains.view(found, checked_as_of(as_of, mnemo.clock.now()))
