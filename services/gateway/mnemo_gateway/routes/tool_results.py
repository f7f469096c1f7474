"""Tool results and suggested tool calls: record a tool call's result as a memory, and read
the calls the operators' triggers suggest for a subject."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query, Request
from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, StrictFloat, StrictInt
from starlette.concurrency import run_in_threadpool

from mnemo.domain.events import TriggerRef
from mnemo.domain.triggers import Suggestion
from mnemo.service.app import Wait
from mnemo_gateway.deps import App, Body, ReadCtx, WriteCtx, checked_as_of, settings_of
from mnemo_gateway.fields import Instant
from mnemo_gateway.routes.events import OutcomeOut

router = APIRouter(tags=["tool results"])


class ToolResultIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    stream: str = Field(min_length=1, max_length=128, description="the subject it is about")
    tool: str = Field(min_length=1, max_length=48, description="the tool's name")
    arguments: dict[str, Any] = Field(default_factory=dict, description="the call's arguments")
    result: Any = Field(description="the tool's structured result (any JSON value)")
    source: str = Field(min_length=1, max_length=256, description="the system it came from")
    fetched_at: Instant | None = Field(
        default=None, description="when the result was fetched, with a UTC offset; now if absent"
    )
    fresh_for_seconds: StrictInt = Field(gt=0, description="how long it stays fresh")
    key: str | None = Field(default=None, max_length=64, description="the memory key")
    trust: StrictFloat | None = Field(default=None, ge=0.0, le=1.0)
    trigger: TriggerRef | None = Field(
        default=None, description="the suggestion this call answers (it then stops firing)"
    )
    event_id: str | None = Field(default=None, description="a UUIDv7: the idempotency key")


class ToolResultOut(BaseModel):
    event_id: str
    offset: int
    duplicate: bool
    complete: bool
    outcomes: list[OutcomeOut] | None = None


class SuggestionOut(BaseModel):
    trigger_id: str
    description: str
    tool: str
    arguments: dict[str, str]
    stream: str
    memory_id: str = Field(description="the memory version that fired the trigger")
    memory_version: int
    key: str | None
    value: str | None
    age_seconds: float
    trigger: TriggerRef = Field(description="send it back with the result to close the loop")

    @classmethod
    def of(cls, s: Suggestion) -> SuggestionOut:
        return cls.model_validate(s.as_dict())


class SuggestionsOut(BaseModel):
    as_of: datetime
    suggestions: list[SuggestionOut]


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    return {"requestBody": {"content": {"application/json": {"schema": model.model_json_schema()}}}}


@router.post(
    "/v1/tool-results",
    summary="Record a tool call's result as a memory, fresh for a while",
    description="Appends a ToolResultRecorded event. A key limited to some tools may record "
    "results of those only (403 TOOL_NOT_ALLOWED); a result that is not JSON is refused "
    "(400 TOOL_RESULT_NOT_JSON), one too large too (413 TOOL_RESULT_TOO_LARGE): nothing is "
    "stored then.",
    status_code=202,
    response_model=ToolResultOut,
    openapi_extra=_schema(ToolResultIn),
)
async def record_tool_result(
    ctx: WriteCtx,
    mnemo: App,
    body: Body,
    request: Request,
    wait: Wait = Wait.NONE,
    timeout: Annotated[float | None, Query(gt=0, le=120)] = None,
) -> ToolResultOut:
    req = ToolResultIn.model_validate(body)
    limit = settings_of(request).wait_timeout

    def run() -> Any:
        return mnemo.record_tool_result(
            ctx,
            req.stream,
            tool=req.tool,
            arguments=req.arguments,
            result=req.result,
            source=req.source,
            fetched_at=req.fetched_at,
            fresh_for_seconds=req.fresh_for_seconds,
            key=req.key,
            trust=req.trust,
            trigger=req.trigger.model_dump() if req.trigger is not None else None,
            event_id=req.event_id,
            wait=wait,
            timeout=min(timeout or limit, limit),
        )

    result = await run_in_threadpool(run)
    a = result.accepted[0]
    return ToolResultOut(
        event_id=a.event_id,
        offset=a.offset,
        duplicate=a.duplicate,
        complete=result.complete,
        outcomes=[OutcomeOut.of(o) for o in result.outcomes[a.event_id]]
        if wait is not Wait.NONE
        else None,
    )


@router.get(
    "/v1/subjects/{stream}/suggestions",
    summary="Tool calls the operators' triggers suggest for a subject's memories",
)
def suggestions(
    ctx: ReadCtx,
    mnemo: App,
    stream: str,
    as_of: Annotated[
        AwareDatetime | None,
        Query(description="the instant to judge ages at, with a UTC offset; now when absent"),
    ] = None,
) -> SuggestionsOut:
    at = checked_as_of(as_of, mnemo.clock.now())
    return SuggestionsOut(
        as_of=at,
        suggestions=[SuggestionOut.of(s) for s in mnemo.suggestions(ctx, [stream], at)],
    )
