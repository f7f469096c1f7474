"""Cross-device sync: snapshots, a live tail by Server-Sent Events, and the verification
questions an agent should ask."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncGenerator, Callable
from typing import Annotated

import orjson
from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool
from starlette.types import Receive, Scope, Send

from mnemo.domain import replica
from mnemo.domain.errors import InvalidInput, MnemoError
from mnemo.domain.memory import Memory
from mnemo.service.app import Mnemo, RequestContext
from mnemo_gateway.deps import App, ReadCtx, authenticate, platform_of, presented_key
from mnemo_gateway.tails import TailLimiter, TailNews

router = APIRouter(tags=["sync"])

POLL_SECONDS = 0.05  # distributed mode: how often a waiting tail looks at the stream's head
HEARTBEAT_SECONDS = 15.0
KEY_RECHECK_SECONDS = 5.0  # a tail ends this soon after its key is revoked or expires


class SnapshotOut(BaseModel):
    stream: str
    seq: int = Field(description="the last sequence number folded in; tail from seq + 1")
    checksum: str = Field(description="equal on every replica that applied the same events")
    memories: list[Memory]


class DueOut(BaseModel):
    items: list[Memory]


@router.get(
    "/v1/subjects/{stream}/snapshot",
    summary="A stream's memories at its latest sequence",
    response_model=SnapshotOut,
)
async def snapshot(ctx: ReadCtx, mnemo: App, stream: str) -> Response:
    seq, state = await run_in_threadpool(mnemo.snapshot, ctx, stream)
    body = {
        "stream": stream,
        "seq": seq,
        "checksum": replica.checksum(state),
        "memories": [state[k] for k in sorted(state)],
    }
    # the memories go out exactly as the log holds them, so the checksum can be verified
    return Response(orjson.dumps(body), media_type="application/json")


class _TailResponse(StreamingResponse):
    """A live tail's response: gives its slot back (TailLimiter) however it ends, the
    client leaving included, and closes the tail's generator."""

    def __init__(self, tail: AsyncGenerator[bytes, None], release: Callable[[], None]) -> None:
        super().__init__(
            tail,
            media_type="text/event-stream",
            headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
        )
        self._tail = tail
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            self._release()
            with contextlib.suppress(Exception):
                await self._tail.aclose()


async def _news_or_timeout(
    mnemo: Mnemo, news: asyncio.Event, ctx: RequestContext, stream: str, seq: int, wait: float
) -> None:
    """Wait, holding no worker thread, until the stream may hold `seq` or `wait` passes.
    Embedded: until the service reports an append. Distributed: the stream's head is
    polled (each look a short call on a worker thread)."""
    if wait <= 0:
        return
    if mnemo.notifies:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(news.wait(), wait)
        return
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        await asyncio.sleep(min(POLL_SECONDS, max(0.0, deadline - time.monotonic())))
        if await run_in_threadpool(mnemo.log.stream_head, ctx.tenant, stream) >= seq:
            return


@router.get(
    "/v1/subjects/{stream}/events/live",
    summary="Live tail of a stream by Server-Sent Events",
    description="Each message carries `id: <seq>`, so a client that reconnects with "
    "Last-Event-ID resumes with no gap and no duplicate. Comments keep idle connections "
    "open. `max_seconds` bounds the connection (0: until the client leaves). A tenant and "
    "a key hold a limited number of tails open at once (429 `TOO_MANY_TAILS`).",
    response_class=StreamingResponse,
)
async def live(
    request: Request,
    ctx: ReadCtx,
    mnemo: App,
    stream: str,
    from_seq: Annotated[int, Query(ge=1, le=2**63 - 1)] = 1,
    max_seconds: Annotated[float, Query(ge=0, le=86_400)] = 0,
    last_event_id: Annotated[str | None, Header()] = None,
) -> StreamingResponse:
    start = from_seq
    if last_event_id:
        # what this route sent as an event's id: a sequence number, nothing else
        if not (last_event_id.isascii() and last_event_id.isdigit() and len(last_event_id) < 19):
            raise InvalidInput(
                "Last-Event-ID is the sequence number of the last event received",
                code="INVALID_LAST_EVENT_ID",
                field="Last-Event-ID",
            )
        start = int(last_event_id) + 1
    # validates the stream name before streaming starts
    await run_in_threadpool(mnemo.replay, ctx, stream, start, 1)
    key = presented_key(request) or ""
    access = platform_of(request).access
    limiter: TailLimiter = request.app.state.tail_limiter
    tail_news: TailNews = request.app.state.tail_news
    release = limiter.acquire(ctx.tenant, authenticate(request).key_id)

    async def messages() -> AsyncGenerator[bytes, None]:
        next_seq = start
        began = time.monotonic()
        quiet_since = checked = began
        news = tail_news.subscribe()
        try:
            while max_seconds == 0 or time.monotonic() - began < max_seconds:
                if time.monotonic() - checked >= KEY_RECHECK_SECONDS:
                    checked = time.monotonic()
                    try:
                        await run_in_threadpool(access.authenticate, key)
                    except MnemoError as exc:
                        error = {"code": exc.code, "message": exc.message}
                        yield f"event: error\ndata: {orjson.dumps(error).decode()}\n\n".encode()
                        return
                news.clear()  # news from here on wakes the wait below
                page = await run_in_threadpool(mnemo.replay, ctx, stream, next_seq, 500)
                for logged in page:
                    env = logged.envelope
                    data = orjson.dumps(env.model_dump(mode="json")).decode()
                    yield f"id: {env.seq}\nevent: {env.type}\ndata: {data}\n\n".encode()
                    next_seq = (env.seq or next_seq) + 1
                if page:
                    quiet_since = time.monotonic()
                    continue
                now = time.monotonic()
                if now - quiet_since > HEARTBEAT_SECONDS:
                    quiet_since = now
                    yield b": keep-alive\n\n"
                # until news, the next keep-alive, the next key check or the end
                wait = min(
                    HEARTBEAT_SECONDS - (now - quiet_since),
                    KEY_RECHECK_SECONDS - (now - checked),
                )
                if max_seconds:
                    wait = min(wait, max_seconds - (now - began))
                await _news_or_timeout(mnemo, news, ctx, stream, next_seq, wait)
        finally:
            tail_news.unsubscribe(news)

    try:
        return _TailResponse(messages(), release)
    except BaseException:
        release()
        raise


@router.get(
    "/v1/subjects/{stream}/due-verifications",
    summary="Memories to confirm with the user (soft decay)",
)
def due_verifications(ctx: ReadCtx, mnemo: App, stream: str) -> DueOut:
    return DueOut(items=mnemo.due_verifications(ctx, stream))
