"""The context protocol over HTTP: templates, assembly, and feedback on the model's answer."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt
from starlette.concurrency import run_in_threadpool

from mnemo.domain.context import MAX_TEMPLATE_VERSION, PROTOCOL_VERSIONS, ContextTemplate
from mnemo.domain.memory import Memory
from mnemo.service.context import ContextRequest, ContextResponse
from mnemo_gateway.deps import AdminCtx, App, Body, ContextCtx
from mnemo_gateway.fields import Instant

router = APIRouter(tags=["context"])


class ContextIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    subjects: list[str] = Field(
        min_length=1, max_length=32, description="subject streams to draw on"
    )
    query: str = Field(default="", max_length=2_000, description="the current question")
    budget: StrictInt = Field(
        default=1_000, ge=16, le=200_000, description="total tokens, header included"
    )
    template: str = Field(default="default", max_length=64)
    template_version: StrictInt | None = Field(
        default=None, ge=1, le=MAX_TEMPLATE_VERSION, description="latest when absent"
    )
    tokenizer: str | None = Field(
        default=None, max_length=64, description="an encoding or a model name"
    )
    protocol: str = Field(
        default=PROTOCOL_VERSIONS[-1], max_length=16, description="the version you speak"
    )
    allow_downgrade: StrictBool = False
    allow_constraint_drop: StrictBool = Field(
        default=False, description="else a constraint that does not fit is an error"
    )
    include_history: StrictBool = Field(
        default=False, description="also render superseded versions"
    )
    history: str = Field(
        default="facts",
        max_length=32,
        description="facts: typed facts read from the turns in place of the turns they "
        "summarise (listed as summarised); facts_only: the facts alone; raw: the turns "
        "themselves",
    )
    as_of: Instant | None = Field(
        default=None,
        description="the instant to judge freshness at, with a UTC offset; now when absent",
    )
    timezone: str | None = Field(
        default=None,
        max_length=64,
        description="IANA zone (e.g. Asia/Shanghai) the query's time expressions such as "
        "'yesterday' are read in; else as_of's UTC offset, else UTC",
    )
    where: dict[str, list[dict[str, Any]]] | None = Field(
        default=None,
        max_length=16,
        description="per section the template fills from a structured query, the "
        "conditions (POST /v1/query's where) to fill it with in place of the template's",
    )


class ScoreOut(BaseModel):
    relevance: float
    rank: int | None
    weight: float
    freshness: float
    trust: float
    score: float


class IncludedOut(BaseModel):
    memory: Memory
    section: str
    rank: int
    tokens: int
    trimmed: bool
    via: str
    score: ScoreOut


class LeftOutOut(BaseModel):
    memory_id: str
    section: str
    reason: str = Field(
        description="budget, expired, superseded, low_relevance, not_shown, conflict or "
        "summarised (a turn a fact in the context stands for)"
    )


class ContextOut(BaseModel):
    request_id: str = Field(description="quote it when reporting the model's answer")
    protocol: str
    downgraded_from: str | None
    template: str
    fingerprint: str
    tokenizer: str
    as_of: datetime
    context: str
    tokens: int
    budget: int
    section_tokens: dict[str, int]
    included: list[IncludedOut]
    left_out: list[LeftOutOut]
    conflicts: list[dict[str, Any]]
    warnings: list[str]
    due_verifications: list[str] = Field(
        description="included memories the agent should confirm with the user ('is your size "
        "still L?'); see also GET /v1/subjects/{s}/due-verifications"
    )
    suggestions: list[dict[str, Any]] = Field(
        default_factory=list,
        description="tool calls the operators' triggers suggest, each with the memory that "
        "fired it; see GET /v1/subjects/{s}/suggestions",
    )

    @classmethod
    def of(cls, r: ContextResponse, budget: int) -> ContextOut:
        a = r.assembly
        return cls(
            request_id=r.request_id,
            protocol=r.protocol,
            downgraded_from=r.downgraded_from,
            template=r.template,
            fingerprint=r.fingerprint,
            tokenizer=r.tokenizer,
            as_of=r.as_of,
            context=a.text,
            tokens=a.tokens,
            budget=budget,
            section_tokens=a.section_tokens,
            included=[
                IncludedOut(
                    memory=i.candidate.memory,
                    section=i.section,
                    rank=i.rank,
                    tokens=i.tokens,
                    trimmed=i.trimmed,
                    via=i.candidate.via,
                    score=ScoreOut(
                        relevance=i.candidate.relevance,
                        rank=i.candidate.rank,
                        weight=i.candidate.weight,
                        freshness=i.candidate.freshness,
                        trust=i.candidate.trust,
                        score=i.candidate.score,
                    ),
                )
                for i in a.included
            ],
            left_out=[
                LeftOutOut(memory_id=x.memory_id, section=x.section, reason=x.reason)
                for x in r.left_out
            ],
            conflicts=r.conflicts,
            warnings=a.warnings,
            due_verifications=r.due_verifications,
            suggestions=[x.as_dict() for x in r.suggestions],
        )


class ResponseIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    response: str = Field(
        min_length=1,
        max_length=200_000,
        description='the model\'s answer, with <memory_ref id="..."/> tags',
    )
    correction: str | None = Field(
        default=None, max_length=1_000, description="the user's correction, if any"
    )
    corrected_memory_ids: list[str] = Field(
        default_factory=list, max_length=200, description="default: every memory used"
    )


class FeedbackOut(BaseModel):
    request_id: str
    response_hash: str
    cited: list[dict[str, str]]
    unknown_refs: list[str]
    corrected: list[str]


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    return {"requestBody": {"content": {"application/json": {"schema": model.model_json_schema()}}}}


@router.post(
    "/v1/context", summary="Assemble a context for an LLM call", openapi_extra=_schema(ContextIn)
)
async def context(ctx: ContextCtx, mnemo: App, body: Body) -> ContextOut:
    req = ContextIn.model_validate(body)
    request = ContextRequest(
        subjects=tuple(req.subjects),
        query=req.query,
        budget=req.budget,
        template=req.template,
        template_version=req.template_version,
        tokenizer=req.tokenizer,
        protocol=req.protocol,
        allow_downgrade=req.allow_downgrade,
        allow_constraint_drop=req.allow_constraint_drop,
        include_history=req.include_history,
        history=req.history,
        as_of=req.as_of,
        timezone=req.timezone,
        where=req.where,
    )
    result = await run_in_threadpool(mnemo.context, ctx, request)
    return ContextOut.of(result, req.budget)


@router.post(
    "/v1/context/{request_id}/response",
    summary="Report the model's answer: citations, corrections, constraint checks",
    openapi_extra=_schema(ResponseIn),
)
async def report(ctx: ContextCtx, mnemo: App, body: Body, request_id: str) -> FeedbackOut:
    req = ResponseIn.model_validate(body)
    fb = await run_in_threadpool(
        mnemo.report, ctx, request_id, req.response, req.correction, req.corrected_memory_ids
    )
    return FeedbackOut(
        request_id=fb.request_id,
        response_hash=fb.response_hash,
        cited=[{"memory_id": m, "position": p} for m, p in fb.cited],
        unknown_refs=fb.unknown_refs,
        corrected=fb.corrected,
    )


@router.post(
    "/v1/templates",
    summary="Register a context template version (admin: a template shapes every context)",
    openapi_extra=_schema(ContextTemplate),
)
async def register_template(ctx: AdminCtx, mnemo: App, body: Body) -> JSONResponse:
    template, created = await run_in_threadpool(mnemo.register_template, ctx, body)
    return JSONResponse(
        {
            "template": template.model_dump(mode="json"),
            "fingerprint": template.fingerprint(),
            "created": created,
        },
        status_code=201 if created else 200,
    )


@router.get("/v1/templates", summary="The tenant's templates and the built-in ones")
def list_templates(ctx: ContextCtx, mnemo: App) -> list[dict[str, Any]]:
    return [
        {"template": t.model_dump(mode="json"), "fingerprint": t.fingerprint()}
        for t in mnemo.templates(ctx)
    ]


@router.get("/v1/templates/{name}", summary="One template (latest version unless one is named)")
def get_template(
    ctx: ContextCtx,
    mnemo: App,
    name: str,
    version: Annotated[int | None, Query(ge=1, le=MAX_TEMPLATE_VERSION)] = None,
) -> dict[str, Any]:
    t = mnemo.template(ctx, name, version)
    return {"template": t.model_dump(mode="json"), "fingerprint": t.fingerprint()}
