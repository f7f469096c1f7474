"""Publishing events, their outcomes, replay and tail."""

from __future__ import annotations

from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from mnemo.domain.errors import InvalidInput
from mnemo.domain.projection import Outcome
from mnemo.service.app import Wait
from mnemo_gateway.deps import App, Body, ReadCtx, WriteCtx, settings_of

router = APIRouter(tags=["events"])


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


class EventsOut(BaseModel):
    events: list[dict[str, Any]]
    next: int | None = Field(default=None, description="after_offset for the next page")


def _events_of(body: Any) -> list[Any]:
    if isinstance(body, dict) and "events" in body:
        events = body["events"]
        if not isinstance(events, list):
            raise InvalidInput("events must be a list", code="INVALID_ENVELOPE", field="events")
        if extra := sorted(k for k in body if k != "events"):
            # a batch holds its events and nothing else: a key beside them (a misplaced
            # envelope field, a typo) would otherwise be dropped without a word
            raise InvalidInput(
                f'a batch is {{"events": [...]}} alone; unexpected: {", ".join(extra)[:200]}',
                code="INVALID_ENVELOPE",
                field=extra[0][:64],
            )
        return events
    if isinstance(body, dict):
        return [body]
    raise InvalidInput(
        'the body must be an event object or {"events": [...]}', code="INVALID_ENVELOPE"
    )


@router.post(
    "/v1/events",
    summary="Publish one event or a batch",
    description='The body is one event object, or {"events": [...]}. All are validated '
    "before any is appended; one bad event rejects the batch with its index in `field`. "
    "With wait=registered (or indexed) the answer carries each event's registration outcome.",
    response_model=PublishOut,
    status_code=202,
)
async def publish(
    ctx: WriteCtx,
    mnemo: App,
    body: Body,
    request: Request,
    wait: Wait = Wait.NONE,
    timeout: Annotated[float | None, Query(gt=0, le=120)] = None,
) -> PublishOut:
    events = _events_of(body)
    limit = settings_of(request).wait_timeout
    result = await run_in_threadpool(mnemo.publish, ctx, events, wait, min(timeout or limit, limit))
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


@router.get("/v1/events/{event_id}/outcome", summary="What registration made of an event")
def outcome(ctx: ReadCtx, mnemo: App, event_id: str) -> list[OutcomeOut]:
    return [OutcomeOut.of(o) for o in mnemo.outcome(ctx, event_id)]


@router.get("/v1/events", summary="The tenant's events after an offset (for tailing)")
def tail(
    ctx: ReadCtx,
    mnemo: App,
    after_offset: Annotated[int, Query(ge=0, le=2**63 - 1)] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> EventsOut:
    events = mnemo.tail(ctx, after_offset, limit)
    return EventsOut(
        events=[{"offset": e.offset, **e.envelope.model_dump(mode="json")} for e in events],
        next=events[-1].offset if events else after_offset,
    )


@router.get(
    "/v1/subjects/{stream}/events", summary="Replay a subject stream from a sequence number"
)
def replay(
    ctx: ReadCtx,
    mnemo: App,
    stream: str,
    from_seq: Annotated[int, Query(ge=1, le=2**63 - 1)] = 1,
    limit: Annotated[int, Query(ge=1, le=10_000)] = 1_000,
) -> Response:
    events = mnemo.replay_json(ctx, stream, from_seq, limit)
    following = int(orjson.loads(events[-1])["seq"]) + 1 if events else from_seq
    body = b'{"events":[' + b",".join(events) + b'],"next":' + str(following).encode() + b"}"
    return Response(body, media_type="application/json")
