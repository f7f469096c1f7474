"""The HTTP gateway: decode the request, call the use case, encode the answer.

Every error leaves as JSON with a machine-readable code: {"error": {"code", "message",
"field"}}. Every route runs inside a request context that names a tenant and a principal.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Annotated, Any

import orjson
from fastapi import Depends, FastAPI, Header, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from mnemo import __version__
from mnemo.bootstrap import Platform
from mnemo.domain.errors import ConflictError, InvalidInput, MnemoError, NotFound, Unavailable
from mnemo.domain.memory import Memory, MemoryType, Scope
from mnemo.domain.projection import Outcome
from mnemo.service.admin import rebuild_read_models
from mnemo.service.app import Mnemo, RequestContext, SearchHit, Wait
from mnemo.settings import GatewaySettings

__all__ = ["create_app"]

log = logging.getLogger("mnemo.gateway")

_STATUS_BY_CODE = {
    "PAYLOAD_TOO_LARGE": 413,
    "TENANT_MISMATCH": 403,
}


def _status(exc: MnemoError) -> int:
    if exc.code in _STATUS_BY_CODE:
        return _STATUS_BY_CODE[exc.code]
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, ConflictError):
        return 409
    if isinstance(exc, Unavailable):
        return 503
    return 400


def _error(status: int, code: str, message: str, field: str | None = None) -> JSONResponse:
    body: dict[str, Any] = {"code": code, "message": message}
    if field is not None:
        body["field"] = field
    headers = {"Retry-After": "1"} if status == 503 else None
    return JSONResponse({"error": body}, status_code=status, headers=headers)


def _depth(value: Any, limit: int) -> bool:
    """True when a JSON value nests deeper than `limit` (checked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if level > limit:
            return True
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    return False


# ---- response models -----------------------------------------------------------------


class ErrorBody(BaseModel):
    code: str
    message: str
    field: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody


class OutcomeOut(BaseModel):
    index: int
    outcome: str
    memory_id: str | None = None
    version: int | None = None
    reason_code: str | None = None
    detail: str | None = None

    @classmethod
    def of(cls, o: Outcome) -> OutcomeOut:
        return cls(
            index=o.index,
            outcome=o.kind.value,
            memory_id=o.memory_id,
            version=o.version,
            reason_code=o.reason_code,
            detail=o.detail,
        )


class AcceptedOut(BaseModel):
    event_id: str
    offset: int
    seq: int
    duplicate: bool
    outcomes: list[OutcomeOut] | None = None


class PublishOut(BaseModel):
    accepted: list[AcceptedOut]
    complete: bool = Field(description="false when the wait timed out before consumers caught up")


class MemoriesOut(BaseModel):
    memories: list[Memory]
    next_after: str | None = Field(default=None, description="cursor for the next page")


class HitOut(BaseModel):
    memory: Memory
    score: float
    vector_rank: int | None
    keyword_rank: int | None
    weight: float

    @classmethod
    def of(cls, h: SearchHit) -> HitOut:
        return cls(
            memory=h.memory,
            score=h.score,
            vector_rank=h.vector_rank,
            keyword_rank=h.keyword_rank,
            weight=h.weight,
        )


class SearchIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    query: str = Field(min_length=1, max_length=2_000)
    subjects: list[str] = Field(default_factory=list, max_length=32)
    types: list[MemoryType] = Field(default_factory=list)
    scopes: list[Scope] = Field(default_factory=list)
    tags: list[str] = Field(default_factory=list, max_length=32)
    limit: int = Field(default=10, ge=1, le=100)


class SearchOut(BaseModel):
    hits: list[HitOut]


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


class EventsOut(BaseModel):
    events: list[dict[str, Any]]
    next: int | None = Field(default=None, description="from_seq or after_offset for the next page")


def request_context(
    x_mnemo_tenant: Annotated[str | None, Header(description="the tenant of the request")] = None,
    x_mnemo_principal: Annotated[str | None, Header(description="who is asking")] = None,
) -> RequestContext:
    if x_mnemo_tenant is None:
        raise InvalidInput(
            "the X-Mnemo-Tenant header is required",
            code="MISSING_TENANT",
            field="X-Mnemo-Tenant",
        )
    principal = (x_mnemo_principal or "anonymous")[:128]
    return RequestContext(tenant=x_mnemo_tenant, principal=principal)


Ctx = Annotated[RequestContext, Depends(request_context)]


# ---- the app ---------------------------------------------------------------------------------


def create_app(
    platform: Platform, settings: GatewaySettings | None = None, *, run_consumers: bool = True
) -> FastAPI:
    settings = settings or GatewaySettings()
    mnemo: Mnemo = platform.app

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if run_consumers:
            platform.runner.start()
        try:
            yield
        finally:
            platform.runner.stop()

    app = FastAPI(
        title="Mnemo",
        version=__version__,
        summary="Durable, governed, shared memory for AI agents.",
        lifespan=lifespan,
        responses={
            400: {"model": ErrorResponse},
            404: {"model": ErrorResponse},
            503: {"model": ErrorResponse},
        },
    )

    @app.exception_handler(MnemoError)
    async def _mnemo_error(_: Request, exc: MnemoError) -> JSONResponse:
        return _error(_status(exc), exc.code, exc.message, exc.field)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        err = exc.errors()[0] if exc.errors() else {"loc": (), "msg": "invalid request"}
        field = ".".join(
            str(p) for p in err.get("loc", ()) if p not in ("body", "query", "path", "header")
        )
        return _error(422, "VALIDATION_ERROR", str(err.get("msg")), field or None)

    @app.exception_handler(ValidationError)
    async def _body_validation(_: Request, exc: ValidationError) -> JSONResponse:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        return _error(422, "VALIDATION_ERROR", str(err["msg"]), field or None)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "ROUTE_NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}.get(
            exc.status_code, "HTTP_ERROR"
        )
        return _error(exc.status_code, code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        return _error(500, "INTERNAL_ERROR", "an unexpected error occurred; it has been logged")

    async def json_body(request: Request) -> Any:
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > settings.max_body_bytes:
            raise InvalidInput(
                f"body over {settings.max_body_bytes} bytes", code="PAYLOAD_TOO_LARGE"
            )
        raw = b""
        async for chunk in request.stream():
            raw += chunk
            if len(raw) > settings.max_body_bytes:
                raise InvalidInput(
                    f"body over {settings.max_body_bytes} bytes", code="PAYLOAD_TOO_LARGE"
                )
        try:
            value = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise InvalidInput(
                f"the body is not valid JSON: {exc.msg}", code="MALFORMED_JSON"
            ) from exc
        if _depth(value, settings.max_json_depth):
            raise InvalidInput(
                f"JSON nests deeper than {settings.max_json_depth}", code="JSON_TOO_DEEP"
            )
        return value

    @app.get("/healthz", tags=["health"], summary="Liveness: the process answers")
    def healthz() -> dict[str, str]:
        return {"status": "ok"}

    @app.get("/readyz", tags=["health"], summary="Readiness: storage answers and consumers run")
    def readyz() -> JSONResponse:
        checks: dict[str, Any] = {}
        ok = True
        try:
            checks["log_head"] = platform.log.head()
            checks["lag"] = platform.runner.lag()
        except MnemoError as exc:
            ok = False
            checks["storage"] = exc.code
        checks["consumers_running"] = platform.runner.running or not run_consumers
        ok = ok and checks["consumers_running"]
        return JSONResponse(
            {"status": "ready" if ok else "not_ready", "checks": checks},
            status_code=200 if ok else 503,
        )

    @app.post(
        "/v1/events",
        tags=["events"],
        summary="Publish one event or a batch",
        description='The body is one event object, or {"events": [...]}. All are validated '
        "before any is appended; one bad event rejects the batch with its index in `field`. "
        "With wait=registered (or indexed) the answer carries each event's registration outcome.",
        response_model=PublishOut,
        status_code=202,
    )
    async def publish(
        ctx: Ctx,
        request: Request,
        wait: Wait = Wait.NONE,
        timeout: Annotated[float | None, Query(gt=0, le=120)] = None,
    ) -> PublishOut:
        body = await json_body(request)
        if isinstance(body, dict) and "events" in body:
            events = body["events"]
            if not isinstance(events, list):
                raise InvalidInput("events must be a list", code="INVALID_ENVELOPE", field="events")
        elif isinstance(body, dict):
            events = [body]
        else:
            raise InvalidInput(
                'the body must be an event object or {"events": [...]}', code="INVALID_ENVELOPE"
            )
        result = await run_in_threadpool(
            mnemo.publish,
            ctx,
            events,
            wait,
            min(timeout or settings.wait_timeout, settings.wait_timeout),
        )
        accepted = [
            AcceptedOut(
                event_id=a.event_id,
                offset=a.offset,
                seq=a.seq,
                duplicate=a.duplicate,
                outcomes=[OutcomeOut.of(o) for o in result.outcomes[a.event_id]]
                if wait is not Wait.NONE
                else None,
            )
            for a in result.accepted
        ]
        return PublishOut(accepted=accepted, complete=result.complete)

    @app.get(
        "/v1/events/{event_id}/outcome",
        tags=["events"],
        summary="What registration made of an event",
    )
    def outcome(ctx: Ctx, event_id: str) -> list[OutcomeOut]:
        return [OutcomeOut.of(o) for o in mnemo.outcome(ctx, event_id)]

    @app.get(
        "/v1/events", tags=["events"], summary="The tenant's events after an offset (for tailing)"
    )
    def tail(
        ctx: Ctx,
        after_offset: Annotated[int, Query(ge=0)] = 0,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    ) -> EventsOut:
        events = mnemo.tail(ctx, after_offset, limit)
        return EventsOut(
            events=[{"offset": e.offset, **e.envelope.model_dump(mode="json")} for e in events],
            next=events[-1].offset if events else after_offset,
        )

    @app.get("/v1/memories/{memory_id}", tags=["memories"], summary="One memory")
    def get_memory(ctx: Ctx, memory_id: str) -> Memory:
        return mnemo.get(ctx, memory_id)

    @app.get(
        "/v1/subjects/{stream}/memories",
        tags=["memories"],
        summary="A subject's memories, filtered",
    )
    def list_memories(
        ctx: Ctx,
        stream: str,
        type: Annotated[list[MemoryType] | None, Query()] = None,
        scope: Annotated[list[Scope] | None, Query()] = None,
        tag: Annotated[list[str] | None, Query()] = None,
        key: str | None = None,
        include_expired: bool = False,
        include_superseded: bool = False,
        limit: Annotated[int, Query(ge=1, le=1000)] = 100,
        after: str | None = None,
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
            limit=limit,
            after=after,
        )
        return MemoriesOut(
            memories=memories, next_after=memories[-1].memory_id if len(memories) == limit else None
        )

    @app.get(
        "/v1/subjects/{stream}/history/{key}", tags=["memories"], summary="Every version of a key"
    )
    def history(ctx: Ctx, stream: str, key: str) -> MemoriesOut:
        return MemoriesOut(memories=mnemo.history(ctx, stream, key))

    @app.post(
        "/v1/search", tags=["memories"], summary="Hybrid search: semantic + keyword + filters"
    )
    async def search(ctx: Ctx, request: Request) -> SearchOut:
        body = SearchIn.model_validate(await json_body(request))
        hits = await run_in_threadpool(
            lambda: mnemo.search(
                ctx,
                body.query,
                streams=body.subjects,
                types=body.types,
                scopes=body.scopes,
                tags=body.tags,
                limit=body.limit,
            )
        )
        return SearchOut(hits=[HitOut.of(h) for h in hits])

    @app.post(
        "/v1/context",
        tags=["context"],
        summary="A basic context for an LLM call, within a token budget",
    )
    async def context(ctx: Ctx, request: Request) -> ContextOut:
        body = ContextIn.model_validate(await json_body(request))
        result = await run_in_threadpool(
            lambda: mnemo.context(ctx, body.subjects, body.query, body.budget, limit=body.limit)
        )
        return ContextOut(
            context=result.text,
            tokens=result.tokens,
            budget=result.budget,
            fingerprint=result.fingerprint,
            included=[HitOut.of(h) for h in result.included],
            left_out=[LeftOut(memory_id=m, reason=r) for m, r in result.left_out],
        )

    @app.get(
        "/v1/subjects/{stream}/events",
        tags=["events"],
        summary="Replay a subject stream from a sequence number",
    )
    def replay(
        ctx: Ctx,
        stream: str,
        from_seq: Annotated[int, Query(ge=1)] = 1,
        limit: Annotated[int, Query(ge=1, le=10_000)] = 1_000,
    ) -> Response:
        events = mnemo.replay(ctx, stream, from_seq, limit)
        body = {
            "events": [e.envelope.model_dump(mode="json") for e in events],
            "next": (events[-1].envelope.seq or 0) + 1 if events else from_seq,
        }
        return Response(orjson.dumps(body), media_type="application/json")

    @app.post(
        "/v1/admin/rebuild",
        tags=["admin"],
        summary="Drop the read models and rebuild them from the log",
    )
    async def rebuild(_: Ctx) -> dict[str, Any]:
        checksum = await run_in_threadpool(rebuild_read_models, platform)
        return {"checksum": checksum, "log_head": platform.log.head()}

    @app.get(
        "/v1/admin/status",
        tags=["admin"],
        summary="Consumers' positions and lag, read-model counts",
    )
    def status(_: Ctx) -> dict[str, Any]:
        return {
            "mode": "embedded",
            "log_head": platform.log.head(),
            "lag": platform.runner.lag(),
            "consumers_running": platform.runner.running,
            "counts": platform.store.counts(),
        }

    return app
