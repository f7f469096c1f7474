"""A context for an LLM call."""

from __future__ import annotations

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool

from mnemo_gateway.deps import App, Body, Ctx
from mnemo_gateway.routes.memories import HitOut

router = APIRouter(tags=["context"])


class ContextIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    subjects: list[str] = Field(min_length=1, max_length=32)
    query: str = Field(default="", max_length=2_000)
    budget: int = Field(default=1_000, ge=16, le=200_000)
    limit: int = Field(default=20, ge=1, le=100)


class LeftOut(BaseModel):
    memory_id: str
    reason: str


class ContextOut(BaseModel):
    context: str
    tokens: int
    budget: int
    fingerprint: str
    included: list[HitOut]
    left_out: list[LeftOut]


@router.post(
    "/v1/context",
    summary="A basic context for an LLM call, within a token budget",
    openapi_extra={
        "requestBody": {"content": {"application/json": {"schema": ContextIn.model_json_schema()}}}
    },
)
async def context(ctx: Ctx, mnemo: App, body: Body) -> ContextOut:
    req = ContextIn.model_validate(body)
    result = await run_in_threadpool(
        lambda: mnemo.context(ctx, req.subjects, req.query, req.budget, limit=req.limit)
    )
    return ContextOut(
        context=result.text,
        tokens=result.tokens,
        budget=result.budget,
        fingerprint=result.fingerprint,
        included=[HitOut.of(h) for h in result.included],
        left_out=[LeftOut(memory_id=m, reason=r) for m, r in result.left_out],
    )
