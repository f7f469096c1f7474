"""The console: read-only insight endpoints under /v1/insights, and the static page at
/console that draws them (plain HTML, CSS and JavaScript shipped with the gateway).

The page calls the API like any other client, with an API key as a bearer token (typed
into its form, or handed over in the URL's fragment, and kept in sessionStorage). The
heat map, lives and contexts need memory:read; events, rejections, dead letters and the
audit chain need audit:read.
"""

from __future__ import annotations

from datetime import datetime
from importlib import resources
from typing import Annotated, Any
from urllib.parse import urlencode

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import RedirectResponse, Response
from pydantic import BaseModel, Field

from mnemo.domain.access import Scope as KeyScope
from mnemo.domain.access import looks_like_key
from mnemo.domain.errors import NotFound
from mnemo.domain.events import LoggedEvent
from mnemo.domain.memory import Memory
from mnemo.domain.projection import ContextRecord, TimelineEntry
from mnemo.service.insights import (
    CITED_SHARE,
    HEAT_COLOURS,
    HEAT_MEANINGS,
    MIN_CITED,
    MIN_TRUNCATED,
    TRUNCATED_SHARE,
    Heat,
    HeatCell,
    Insights,
    Placed,
)
from mnemo_gateway.deps import AuditCtx, PlatformDep, ReadCtx
from mnemo_gateway.fields import ID_CURSOR

__all__ = ["router"]

router = APIRouter()
TAG = "insights"


def insights_of(platform: PlatformDep) -> Insights:
    # the app's read ports: events and memories opened once, as every other view reads them;
    # the audit checks the log as stored
    return Insights(
        platform.app.log,
        platform.app.store,
        platform.app.clock,
        checkpoints=platform.checkpoints,
        signer=platform.signer,
        logged=platform.log,
        anchors=platform.anchors,
    )


InsightsDep = Annotated[Insights, Depends(insights_of)]


# ---- response models ------------------------------------------------------------------------


class HeatCellOut(BaseModel):
    memory_id: str
    stream: str
    type: str
    scope: str
    status: str
    key: str | None
    label: str = Field(description="the memory's text, shortened to 160 characters")
    tags: list[str]
    version: int
    weight: float = Field(description="the decayed semantic weight now; sizes the cell")
    semantic_weight: float = Field(description="the weight the read model holds")
    freshness: float = Field(description="share of its validity left; 1.0 when permanent")
    stale: bool
    trust: float
    verified: bool
    created_at: datetime
    valid_until: datetime | None
    included: int = Field(description="contexts that rendered it")
    truncated: int = Field(description="contexts that left it out for the budget")
    cited: int = Field(description="answers that cited it")
    corrected: int
    appearances: int = Field(description="included + truncated")
    cited_rate: float = Field(description="cited / included")
    truncated_rate: float = Field(description="truncated / appearances")
    last_used: datetime | None
    heat: Heat

    @classmethod
    def of(cls, c: HeatCell) -> HeatCellOut:
        m, s = c.memory, c.stats
        text = " ".join(m.text().split()) if (m.content or m.value) else ""
        return cls(
            memory_id=m.memory_id,
            stream=m.stream,
            type=m.type.value,
            scope=m.scope.value,
            status=m.status.value,
            key=m.key,
            label=text[:157] + "…" if len(text) > 160 else text,
            tags=list(m.tags),
            version=m.version,
            weight=c.weight,
            semantic_weight=m.semantic_weight,
            freshness=c.freshness,
            stale=c.stale,
            trust=m.provenance.trust,
            verified=m.provenance.verified,
            created_at=m.created_at,
            valid_until=m.valid_until,
            included=s.included,
            truncated=s.truncated,
            cited=s.cited,
            corrected=s.corrected,
            appearances=c.appearances,
            cited_rate=c.cited_rate,
            truncated_rate=c.truncated_rate,
            last_used=s.last_used,
            heat=c.heat,
        )


class LegendOut(BaseModel):
    heat: Heat
    colour: str = Field(description="the CSS colour the console paints the class in")
    meaning: str


class RuleOut(BaseModel):
    min_cited: int = MIN_CITED
    cited_share: float = CITED_SHARE
    min_truncated: int = MIN_TRUNCATED
    truncated_share: float = TRUNCATED_SHARE
    rule: str = (
        "cited often = cited >= min_cited and cited >= cited_share * included; "
        "cut often = truncated >= min_truncated and truncated >= truncated_share * "
        "(included + truncated); hot = both, warm = cited often only, cool = cut often "
        "only, neutral = neither"
    )


class HeatMapOut(BaseModel):
    subject: str | None = Field(description="the subject stream, or null for the whole tenant")
    as_of: datetime
    rule: RuleOut
    legend: list[LegendOut]
    totals: dict[str, int] = Field(description="cells per heat class")
    cells: list[HeatCellOut]
    next_after: str | None = Field(description="cursor for the next page, when there is one")


class TimelineOut(BaseModel):
    offset: int
    event_id: str
    event_type: str
    what: str = Field(
        description="registered, superseding, superseded, in_context, truncated, cited, "
        "corrected, decayed, expired, forgotten, archived, verified, …"
    )
    occurred_at: str
    detail: str

    @classmethod
    def of(cls, e: TimelineEntry) -> TimelineOut:
        return cls(
            offset=e.offset,
            event_id=e.event_id,
            event_type=e.event_type,
            what=e.what,
            occurred_at=e.occurred_at,
            detail=e.detail,
        )


class ContextSummaryOut(BaseModel):
    request_id: str
    stream: str
    template: str
    occurred_at: str | None
    tokens: int
    budget: int
    included: int
    truncated: int
    left_out: int = Field(description="left out for another reason than the budget")
    answered: bool = Field(description="whether the model's answer was reported")

    @classmethod
    def of(cls, r: ContextRecord) -> ContextSummaryOut:
        return cls(
            request_id=r.request_id,
            stream=r.stream,
            template=r.template,
            occurred_at=r.occurred_at,
            tokens=r.tokens,
            budget=r.budget,
            included=len(r.memory_ids),
            truncated=len(r.truncated),
            left_out=len(r.left_out),
            answered=r.response_hash is not None,
        )


class ContextUseOut(BaseModel):
    role: str = Field(description="included or truncated")
    context: ContextSummaryOut


class LifeOut(BaseModel):
    memory: Memory
    cell: HeatCellOut
    versions: list[Memory] = Field(description="every version of its key, oldest first")
    timeline: list[TimelineOut] = Field(description="the events that touched it, in log order")
    contexts: list[ContextUseOut]


class PlacedOut(BaseModel):
    memory_id: str
    section: str
    reason: str | None = Field(
        description="why it was left out: budget, expired, superseded, low_relevance, "
        "not_shown, conflict"
    )
    type: str | None
    label: str | None = Field(description="null when the memory is unknown or forgotten")

    @classmethod
    def of(cls, p: Placed) -> PlacedOut:
        m = p.memory
        label = (
            " ".join(m.text().split())[:200] if m is not None and (m.content or m.value) else None
        )
        return cls(
            memory_id=p.memory_id,
            section=p.section,
            reason=p.reason,
            type=m.type.value if m is not None else None,
            label=label,
        )


class ContextOut(BaseModel):
    summary: ContextSummaryOut
    rendered: str | None = Field(description="the text handed to the model (first 64 KiB)")
    response_hash: str | None
    included: list[PlacedOut]
    left_out: list[PlacedOut]


class ContextsOut(BaseModel):
    contexts: list[ContextSummaryOut]
    next_before: str | None


class EventOut(BaseModel):
    offset: int
    event_id: str
    type: str
    stream: str
    seq: int | None
    occurred_at: datetime
    actor: str
    actor_kind: str
    causation_id: str | None
    payload: dict[str, Any] | None = Field(
        description="the event's payload, opened; null for a key without memory:read"
    )

    @classmethod
    def of(cls, e: LoggedEvent, *, with_payload: bool = True) -> EventOut:
        env = e.envelope
        return cls(
            offset=e.offset,
            event_id=env.event_id,
            type=env.type,
            stream=env.stream,
            seq=env.seq,
            occurred_at=env.occurred_at,
            actor=env.actor.id,
            actor_kind=env.actor.kind.value,
            causation_id=env.causation_id,
            payload=env.payload if with_payload else None,
        )


class EventsOut(BaseModel):
    events: list[EventOut]
    next: int = Field(description="after_offset for the next call (to keep tailing)")
    complete: bool = Field(description="false when the scan stopped at its bound")


class RejectionOut(BaseModel):
    event_id: str
    offset: int
    event_type: str
    stream: str
    occurred_at: datetime
    actor: str
    index: int = Field(description="which memory of the event")
    outcome: str = Field(
        default="rejected",
        description="rejected, or ignored: an utterance that looked like a memory but "
        "yielded none (VALUE_NOT_FOUND, TARGET_NOT_FOUND, REQUEST_NOT_UNDERSTOOD, "
        "AMBIGUOUS_REFERENCE, FORGET_REQUESTED)",
    )
    reason_code: str
    detail: str | None


class RejectionsOut(BaseModel):
    rejections: list[RejectionOut]
    scanned_from: int = Field(description="the lowest log offset examined")
    complete: bool = Field(description="whether the scan reached the start of the log")


class DeadLetterOut(BaseModel):
    consumer: str
    event_id: str
    offset: int
    reason: str
    failed_at: datetime


class AuditOut(BaseModel):
    status: str = Field(
        description="intact, broken, empty, or unverified (the checkpoint signatures could "
        "not be checked: never taken as intact)"
    )
    links: int = Field(description="links verified")
    pending: int = Field(description="events the audit consumer has not linked yet")
    first_broken: int | None = Field(description="the first broken link's number in its stream")
    stream: str | None = Field(description="the stream whose chain is broken")
    streams: int = Field(description="streams with a chain (one chain per stream)")
    reason: str | None
    head_hash: str | None = Field(description="one digest over every stream's last link")
    last_offset: int
    code: str | None = Field(
        default=None,
        description="what is wrong: AUDIT_CHAIN_BROKEN, AUDIT_SIGNATURE_INVALID, "
        "AUDIT_CHECKPOINT_MISSING, AUDIT_CHECKPOINT_MISMATCH, AUDIT_TAIL_MISSING, "
        "AUDIT_CHECKPOINT_ROLLBACK, AUDIT_SIGNER_UNAVAILABLE or AUDIT_CHECKPOINTS_UNAVAILABLE",
    )
    checkpoints: int = Field(default=0, description="signed checkpoints verified")
    signed: int = Field(default=0, description="links covered by a verified checkpoint")
    unsigned: int = Field(
        default=0, description="links past their stream's last checkpoint (not yet signed)"
    )
    anchored: int = Field(
        default=0,
        description="streams whose checkpoints reach their anchor kept outside the store",
    )


# ---- endpoints ------------------------------------------------------------------------------


@router.get(
    "/v1/insights/heatmap",
    tags=[TAG],
    summary="Memory heat map: usage counters and heat class per memory",
    description="Every memory of the tenant, or of one subject, with how often contexts "
    "rendered it, cut it for the budget and answers cited it; its current weight, "
    "freshness and trust; and its heat class (`rule` says how it is computed). Red (hot) "
    "cells flag a budget too small.",
)
def heatmap(
    ctx: ReadCtx,
    insights: InsightsDep,
    subject: Annotated[str | None, Query(max_length=128)] = None,
    include_inactive: bool = False,
    limit: Annotated[int, Query(ge=1, le=2_000)] = 500,
    after: Annotated[
        str | None, Query(pattern=ID_CURSOR, description="the `next_after` of the page before")
    ] = None,
) -> HeatMapOut:
    hm = insights.heatmap(ctx, subject, include_inactive=include_inactive, limit=limit, after=after)
    cells = [HeatCellOut.of(c) for c in hm.cells]
    return HeatMapOut(
        subject=hm.subject,
        as_of=hm.as_of,
        rule=RuleOut(),
        legend=[LegendOut(heat=h, colour=HEAT_COLOURS[h], meaning=HEAT_MEANINGS[h]) for h in Heat],
        totals={h.value: sum(1 for c in cells if c.heat is h) for h in Heat},
        cells=cells,
        next_after=hm.next_after,
    )


@router.get(
    "/v1/insights/memories/{memory_id}/life",
    tags=[TAG],
    summary="A memory's life: versions, events that touched it, contexts it appeared in",
)
def life(ctx: ReadCtx, insights: InsightsDep, memory_id: str) -> LifeOut:
    lf = insights.life(ctx, memory_id)
    return LifeOut(
        memory=lf.memory,
        cell=HeatCellOut.of(lf.cell),
        versions=lf.versions,
        timeline=[TimelineOut.of(e) for e in lf.timeline],
        contexts=[
            ContextUseOut(role=u.role, context=ContextSummaryOut.of(u.record)) for u in lf.contexts
        ],
    )


@router.get("/v1/insights/contexts", tags=[TAG], summary="Assembled contexts, newest first")
def contexts(
    ctx: ReadCtx,
    insights: InsightsDep,
    limit: Annotated[int, Query(ge=1, le=500)] = 50,
    before: Annotated[
        str | None, Query(pattern=ID_CURSOR, description="a request_id: page on from there")
    ] = None,
) -> ContextsOut:
    records = insights.contexts(ctx, limit, before)
    return ContextsOut(
        contexts=[ContextSummaryOut.of(r) for r in records],
        next_before=records[-1].request_id if len(records) == limit else None,
    )


@router.get(
    "/v1/insights/contexts/{request_id}",
    tags=[TAG],
    summary="One assembled context: the rendered text, and what was left out and why",
)
def context(ctx: ReadCtx, insights: InsightsDep, request_id: str) -> ContextOut:
    view = insights.context(ctx, request_id)
    return ContextOut(
        summary=ContextSummaryOut.of(view.record),
        rendered=view.record.rendered,
        response_hash=view.record.response_hash,
        included=[PlacedOut.of(p) for p in view.included],
        left_out=[PlacedOut.of(p) for p in view.left_out],
    )


@router.get(
    "/v1/insights/events",
    tags=[TAG],
    summary="The tenant's event stream, filtered (for a live tail)",
    description="Without after_offset: the latest matching events among the tenant's "
    "newest 50,000 (`complete` is false when fewer than `limit` matched there and the "
    "tenant has older events). With it: the first matching events after it. Repeat the "
    "call with `next` as after_offset to tail. The payloads need memory:read as well: for "
    "a key without it, `payload` is null.",
)
def events(
    ctx: AuditCtx,
    insights: InsightsDep,
    after_offset: Annotated[int | None, Query(ge=0, le=2**63 - 1)] = None,
    limit: Annotated[int, Query(ge=1, le=1_000)] = 100,
    type: Annotated[list[str] | None, Query(description="event types (any of them)")] = None,
    stream: Annotated[str | None, Query(max_length=128)] = None,
    actor: Annotated[str | None, Query(max_length=128, description="the actor's id")] = None,
) -> EventsOut:
    page = insights.events(ctx, after_offset, limit, types=type or (), stream=stream, actor=actor)
    # the payloads are the log's content, which memory:read guards everywhere else
    opened = ctx.allows(KeyScope.MEMORY_READ)
    return EventsOut(
        events=[EventOut.of(e, with_payload=opened) for e in page.events],
        next=page.next,
        complete=page.complete,
    )


@router.get(
    "/v1/insights/rejections",
    tags=[TAG],
    summary="Published events that registration rejected, with reason codes, newest first",
    description="Looks at the tenant's newest 50,000 events, for about 5 seconds at most; "
    "`complete` says whether that reached the tenant's first event, `scanned_from` how far "
    "back it looked.",
)
def rejections(
    ctx: AuditCtx, insights: InsightsDep, limit: Annotated[int, Query(ge=1, le=1_000)] = 100
) -> RejectionsOut:
    page = insights.rejections(ctx, limit)
    return RejectionsOut(
        rejections=[
            RejectionOut(
                event_id=r.event.envelope.event_id,
                offset=r.event.offset,
                event_type=r.event.envelope.type,
                stream=r.event.envelope.stream,
                occurred_at=r.event.envelope.occurred_at,
                actor=r.event.envelope.actor.id,
                index=r.index,
                outcome=r.outcome,
                reason_code=r.reason_code,
                detail=r.detail,
            )
            for r in page.rejections
        ],
        scanned_from=page.scanned_from,
        complete=page.complete,
    )


@router.get(
    "/v1/insights/dead-letters",
    tags=[TAG],
    summary="Dead-letter records (always empty in embedded mode)",
    description="Embedded mode has no dead-letter topic: an event registration fails on "
    "becomes a rejection with HANDLER_ERROR (see /v1/insights/rejections). Distributed "
    "mode will list here what its consumers gave up on.",
)
def dead_letters(ctx: AuditCtx, insights: InsightsDep) -> list[DeadLetterOut]:
    return [DeadLetterOut.model_validate(d) for d in insights.dead_letters(ctx)]


@router.get(
    "/v1/insights/audit",
    tags=[TAG],
    summary="Verify the tenant's audit hash chain against the log",
)
def audit_status(ctx: AuditCtx, insights: InsightsDep) -> AuditOut:
    s = insights.audit(ctx)
    return AuditOut(
        status=s.status,
        links=s.links,
        pending=s.pending,
        first_broken=s.first_broken,
        stream=s.stream,
        streams=s.streams,
        reason=s.reason,
        head_hash=s.head_hash,
        last_offset=s.last_offset,
        code=s.code,
        checkpoints=s.checkpoints,
        signed=s.signed,
        unsigned=s.unsigned,
        anchored=s.anchored,
    )


# ---- the static console ---------------------------------------------------------------------

_ASSETS = {
    "index.html": "text/html; charset=utf-8",
    "console.css": "text/css; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "icon.svg": "image/svg+xml",
}
# everything comes from this origin: no CDN, no inline script, no framing
_HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; "
    "img-src 'self'; connect-src 'self'; base-uri 'none'; form-action 'self'; "
    "frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def _asset(name: str) -> Response:
    if name not in _ASSETS:
        raise NotFound(f"no console asset {name}", code="ASSET_NOT_FOUND", field="name")
    body = resources.files("mnemo_gateway").joinpath("console", name).read_bytes()
    return Response(body, media_type=_ASSETS[name], headers=_HEADERS)


@router.get("/console", include_in_schema=False)
def console_page() -> Response:
    return _asset("index.html")


# the query parameters the page reads (principal, subject) or clears (tenant, from older
# links); anything else, and any value shaped like an API key (a key pasted into the query,
# where it does not belong: the fragment carries it), is not echoed back in Location
_PAGE_PARAMS = ("principal", "subject", "tenant")


@router.get("/console/", include_in_schema=False)
def console_slash(request: Request) -> RedirectResponse:
    kept = [
        (k, v)
        for k, v in request.query_params.multi_items()
        if k in _PAGE_PARAMS and not looks_like_key(v)
    ]
    return RedirectResponse("/console" + (f"?{urlencode(kept)}" if kept else ""))


@router.get("/console/{name}", include_in_schema=False)
def console_asset(name: str) -> Response:
    return _asset(name)
