"""Reading memories: one, a subject's with filters, a key's history, hybrid search."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt
from starlette.concurrency import run_in_threadpool

from mnemo.domain.memory import Memory, MemoryType, Scope
from mnemo.service.app import SearchHit
from mnemo_gateway.deps import App, Body, ReadCtx
from mnemo_gateway.fields import ID_CURSOR

router = APIRouter(tags=["memories"])


class MemoriesOut(BaseModel):
    memories: list[Memory]
    next_after: str | None = Field(default=None, description="cursor for the next page")


class HitOut(BaseModel):
    memory: Memory
    score: float
    rank: int | None = Field(
        description="rank in the fused dense + keyword list (1 = best); null for a memory "
        "that joined through its episode"
    )
    weight: float

    @classmethod
    def of(cls, h: SearchHit) -> HitOut:
        return cls(
            memory=h.memory,
            score=h.score,
            rank=h.rank,
            weight=h.weight,
        )


class SearchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=2_000)
    subjects: list[str] = Field(default_factory=list, max_length=32)
    types: list[MemoryType] = Field(default_factory=list, max_length=16)
    scopes: list[Scope] = Field(default_factory=list, max_length=16)
    tags: list[str] = Field(default_factory=list, max_length=32)
    limit: StrictInt = Field(default=10, ge=1, le=100)
    include_archived: StrictBool = Field(
        default=False, description="also memories archived as unused"
    )
    timezone: str | None = Field(
        default=None,
        max_length=64,
        description="IANA zone (e.g. Asia/Shanghai) the query's time expressions such as "
        "'yesterday' are read in; UTC when absent",
    )


class SearchOut(BaseModel):
    hits: list[HitOut]


@router.get("/v1/memories/{memory_id}", summary="One memory")
def get_memory(ctx: ReadCtx, mnemo: App, memory_id: str) -> Memory:
    return mnemo.get(ctx, memory_id)


@router.get("/v1/subjects/{stream}/memories", summary="A subject's memories, filtered")
def list_memories(
    ctx: ReadCtx,
    mnemo: App,
    stream: str,
    type: Annotated[list[MemoryType] | None, Query(max_length=16)] = None,
    scope: Annotated[list[Scope] | None, Query(max_length=16)] = None,
    # each tag is a read of its own: as many as a search takes
    tag: Annotated[list[str] | None, Query(max_length=32)] = None,
    key: str | None = None,
    include_expired: bool = False,
    include_superseded: bool = False,
    include_archived: bool = False,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    after: Annotated[
        str | None, Query(pattern=ID_CURSOR, description="the `next_after` of the page before")
    ] = None,
) -> MemoriesOut:
    memories = mnemo.list_memories(
        ctx,
        stream,
        types=type or (),
        scopes=scope or (),
        tags=tag or (),
        key=key,
        include_expired=include_expired,
        include_superseded=include_superseded,
        include_archived=include_archived,
        limit=limit,
        after=after,
    )
    return MemoriesOut(
        memories=memories,
        next_after=memories[-1].memory_id if len(memories) == limit else None,
    )


@router.get("/v1/subjects/{stream}/history/{key}", summary="Every version of a key")
def history(ctx: ReadCtx, mnemo: App, stream: str, key: str) -> MemoriesOut:
    return MemoriesOut(memories=mnemo.history(ctx, stream, key))


@router.post(
    "/v1/search",
    summary="Hybrid search: semantic + keyword + filters",
    openapi_extra={
        "requestBody": {"content": {"application/json": {"schema": SearchIn.model_json_schema()}}}
    },
)
async def search(ctx: ReadCtx, mnemo: App, body: Body) -> SearchOut:
    req = SearchIn.model_validate(body)
    hits = await run_in_threadpool(
        lambda: mnemo.search(
            ctx,
            req.query,
            streams=req.subjects,
            types=req.types,
            scopes=req.scopes,
            tags=req.tags,
            limit=req.limit,
            include_archived=req.include_archived,
            timezone=req.timezone,
        )
    )
    return SearchOut(hits=[HitOut.of(h) for h in hits])
