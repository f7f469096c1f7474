"""Cross-device sync: snapshots, a live tail by Server-Sent Events, and the verification
questions an agent should ask."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Annotated

import orjson
from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from mnemo.domain import replica
from mnemo.domain.errors import InvalidInput, MnemoError
from mnemo.domain.memory import Memory
from mnemo_gateway.deps import App, ReadCtx, platform_of, presented_key

router = APIRouter(tags=["sync"])

WAIT_SECONDS = 1.0  # longest wait for news before checking the connection again
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


@router.get(
    "/v1/subjects/{stream}/events/live",
    summary="Live tail of a stream by Server-Sent Events",
    description="Each message carries `id: <seq>`, so a client that reconnects with "
    "Last-Event-ID resumes with no gap and no duplicate. Comments keep idle connections "
    "open. `max_seconds` bounds the connection (0: until the client leaves).",
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
    mnemo.replay(ctx, stream, start, 1)  # validates the stream name before streaming starts
    key = presented_key(request) or ""
    access = platform_of(request).access

    async def messages() -> AsyncIterator[bytes]:
        next_seq = start
        began = time.monotonic()
        quiet_since = checked = began
        while max_seconds == 0 or time.monotonic() - began < max_seconds:
            if time.monotonic() - checked >= KEY_RECHECK_SECONDS:
                checked = time.monotonic()
                try:
                    await run_in_threadpool(access.authenticate, key)
                except MnemoError as exc:
                    error = {"code": exc.code, "message": exc.message}
                    yield f"event: error\ndata: {orjson.dumps(error).decode()}\n\n".encode()
                    return
            page = await run_in_threadpool(mnemo.replay, ctx, stream, next_seq, 500)
            for logged in page:
                env = logged.envelope
                data = orjson.dumps(env.model_dump(mode="json")).decode()
                yield f"id: {env.seq}\nevent: {env.type}\ndata: {data}\n\n".encode()
                next_seq = (env.seq or next_seq) + 1
            if page:
                quiet_since = time.monotonic()
                continue
            if time.monotonic() - quiet_since > HEARTBEAT_SECONDS:
                quiet_since = time.monotonic()
                yield b": keep-alive\n\n"
            wait = WAIT_SECONDS
            if max_seconds:
                wait = max(0.0, min(wait, max_seconds - (time.monotonic() - began)))
            await run_in_threadpool(mnemo.wait_for_stream, ctx, stream, next_seq, wait)

    return StreamingResponse(
        messages(),
        media_type="text/event-stream",
        headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"},
    )


@router.get(
    "/v1/subjects/{stream}/due-verifications",
    summary="Memories to confirm with the user (soft decay)",
)
def due_verifications(ctx: ReadCtx, mnemo: App, stream: str) -> DueOut:
    return DueOut(items=mnemo.due_verifications(ctx, stream))
