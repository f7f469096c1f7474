"""What the console shows: read-only use cases over the read models and the log.

- the heat map: every memory of a tenant (or of one subject) with its usage counters,
  its current weight, freshness and trust, and a heat class (see `heat_of`);
- a memory's life: its versions, the events that touched it, the contexts it was in;
- assembled contexts: the rendered text next to what was left out and why;
- the event stream with filters, registration rejections, dead letters, and the
  verification of the tenant's audit chains (one per stream).

Every call is scoped to the tenant of the request context, like every other use case.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from enum import StrEnum

from mnemo.domain.checkpoint import Checkpoint
from mnemo.domain.errors import InvalidInput, MnemoError, NotFound, Unavailable, echoed
from mnemo.domain.events import CATALOG, Envelope, LoggedEvent
from mnemo.domain.ids import valid_stream
from mnemo.domain.memory import Memory, MemoryStatus
from mnemo.domain.projection import (
    AuditRecord,
    ContextRecord,
    MemoryStats,
    OutcomeKind,
    TimelineEntry,
)
from mnemo.domain.sealed import without_secrets
from mnemo.handlers import audit, timeline
from mnemo.handlers.audit import CheckpointProblem
from mnemo.handlers.decay import decayed_weight
from mnemo.handlers.registration import MISSED
from mnemo.ports import (
    AuditCheckpoints,
    CheckpointAnchors,
    Clock,
    EventLog,
    MemoryQuery,
    MemoryStore,
    Signer,
)
from mnemo.service.app import RequestContext

__all__ = [
    "CITED_SHARE",
    "HEAT_COLOURS",
    "HEAT_MEANINGS",
    "MIN_CITED",
    "MIN_TRUNCATED",
    "TRUNCATED_SHARE",
    "AuditStatus",
    "ContextUse",
    "ContextView",
    "EventPage",
    "Heat",
    "HeatCell",
    "HeatMap",
    "Insights",
    "MemoryLife",
    "Placed",
    "Rejection",
    "RejectionPage",
    "heat_of",
]

# ---- the heat map's colour rule ---------------------------------------------------------------

MIN_CITED = 2  # a memory is "cited often" when cited at least this many times ...
CITED_SHARE = 0.5  # ... and in at least this share of the contexts that included it
MIN_TRUNCATED = 2  # a memory is "cut often" when left out for the budget at least this often ...
TRUNCATED_SHARE = 0.25  # ... and in at least this share of its appearances (included + cut)


class Heat(StrEnum):
    """A heat-map cell's class. Red hot spots flag a budget too small for what is useful."""

    HOT = "hot"  # cited often AND cut often: useful, yet the budget keeps dropping it
    WARM = "warm"  # cited often, rarely cut: useful and it fits
    COOL = "cool"  # cut often, rarely cited: the budget drops it and nobody misses it
    NEUTRAL = "neutral"  # neither (including memories never used)


HEAT_COLOURS: dict[Heat, str] = {
    Heat.HOT: "#dc2626",
    Heat.WARM: "#f97316",
    Heat.COOL: "#2563eb",
    Heat.NEUTRAL: "#9ca3af",
}

HEAT_MEANINGS: dict[Heat, str] = {
    Heat.HOT: "cited often and cut often: the budget is too small",
    Heat.WARM: "cited often",
    Heat.COOL: "cut often, rarely cited",
    Heat.NEUTRAL: "neither cited nor cut often",
}


def heat_of(cited: int, truncated: int, included: int) -> Heat:
    """The heat class of a memory from its counters.

    `included` counts the contexts that rendered the memory, `truncated` those that left it
    out for the budget, `cited` the answers that cited it (only an included memory can be
    cited). Its appearances are included + truncated.

        cited often   = cited >= MIN_CITED (2) and cited >= CITED_SHARE (0.5) * included
        cut often     = truncated >= MIN_TRUNCATED (2)
                        and truncated >= TRUNCATED_SHARE (0.25) * appearances
        hot  (red)    = cited often and cut often
        warm (orange) = cited often only
        cool (blue)   = cut often only
        neutral (grey)= neither
    """
    appearances = included + truncated
    cited_often = cited >= MIN_CITED and cited >= CITED_SHARE * included
    cut_often = truncated >= MIN_TRUNCATED and truncated >= TRUNCATED_SHARE * appearances
    if cited_often and cut_often:
        return Heat.HOT
    if cited_often:
        return Heat.WARM
    if cut_often:
        return Heat.COOL
    return Heat.NEUTRAL


def _share(part: int, whole: int) -> float:
    return round(part / whole, 4) if whole else 0.0


# ---- what the use cases return ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HeatCell:
    memory: Memory
    stats: MemoryStats
    weight: float  # the decayed semantic weight now, as context assembly would score it
    freshness: float  # the share of its validity left (1.0 for a permanent memory)
    stale: bool  # past its stale_after instant
    heat: Heat

    @property
    def appearances(self) -> int:
        return self.stats.included + self.stats.truncated

    @property
    def cited_rate(self) -> float:
        return _share(self.stats.cited, self.stats.included)

    @property
    def truncated_rate(self) -> float:
        return _share(self.stats.truncated, self.appearances)


@dataclass(frozen=True, slots=True)
class HeatMap:
    subject: str | None
    as_of: datetime
    cells: list[HeatCell]
    next_after: str | None


@dataclass(frozen=True, slots=True)
class ContextUse:
    """A context a memory appeared in, and how: rendered ("included") or cut ("truncated")."""

    record: ContextRecord
    role: str


@dataclass(frozen=True, slots=True)
class MemoryLife:
    memory: Memory
    cell: HeatCell
    versions: list[Memory]
    timeline: list[TimelineEntry]
    contexts: list[ContextUse]


@dataclass(frozen=True, slots=True)
class Placed:
    """A memory's place in a context: its section (when rendered) or why it was left out."""

    memory_id: str
    section: str
    reason: str | None
    memory: Memory | None


@dataclass(frozen=True, slots=True)
class ContextView:
    record: ContextRecord
    included: list[Placed]
    left_out: list[Placed]


@dataclass(frozen=True, slots=True)
class EventPage:
    events: list[LoggedEvent]
    next: int  # the after_offset of the next call
    complete: bool  # false when the scan stopped at its bound before the end of the log


@dataclass(frozen=True, slots=True)
class Rejection:
    event: LoggedEvent
    index: int
    reason_code: str
    detail: str | None
    outcome: str = "rejected"  # or "ignored": an utterance that looked like a memory


# Ignored utterances the console lists with the rejections: each looked like a memory that
# registration could not complete, so the agent (or an operator) has something to act on.
MISSED_MEMORY_CODES = MISSED


@dataclass(frozen=True, slots=True)
class RejectionPage:
    rejections: list[Rejection]
    scanned_from: int  # the lowest log offset examined
    complete: bool  # true when the scan reached the start of the log


@dataclass(frozen=True, slots=True)
class AuditStatus:
    status: str  # intact, broken, empty, or unverified (the signatures could not be checked)
    links: int  # links checked
    pending: int  # the tenant's events the audit consumer has not linked yet
    first_broken: int | None = None
    reason: str | None = None
    head_hash: str | None = None  # one digest over every stream's last link
    last_offset: int = 0
    stream: str | None = None  # the stream whose chain is broken
    streams: int = 0  # streams with a chain
    code: str | None = None  # what is wrong, when status is broken or unverified
    checkpoints: int = 0  # signed checkpoints verified
    signed: int = 0  # links covered by a verified checkpoint
    unsigned: int = 0  # links past their stream's last checkpoint: consistent, not yet signed
    anchored: int = 0  # streams whose checkpoints reach their anchor outside the store


@dataclass(frozen=True, slots=True)
class _Unlinked:
    pending: int  # events past their stream's last link, not yet reached by the consumer
    passed: LoggedEvent | None  # the first event the audit consumer passed without a link


# ---- the use cases ----------------------------------------------------------------------------

WINDOW = 2_000  # a tenant's events read per step of a backwards scan
MAX_SCAN = 50_000  # a tenant's events a single call examines at most
REJECTION_SECONDS = 5.0  # the rejections view begins no page of the scan after this
AUDIT_PAGE = 1_000


def bare_memory(memory: Memory) -> Memory:
    """A memory as the views show it: its sealed block without wrapped key or ciphertext."""
    if memory.sealed is None:
        return memory
    return memory.model_copy(update={"sealed": without_secrets(memory.sealed)})


def bare_event(logged: LoggedEvent) -> LoggedEvent:
    """An event as the views show it: no wrapped key or ciphertext, neither in its
    encryption block nor in the sealed block of a memory it carries."""
    env = logged.envelope
    memory = env.payload.get("memory")
    sealed = memory.get("sealed") if isinstance(memory, dict) else None
    if env.encryption is None and not isinstance(sealed, dict):
        return logged
    update: dict[str, object] = {}
    if env.encryption is not None:
        update["encryption"] = without_secrets(env.encryption)
    if isinstance(memory, dict) and isinstance(sealed, dict):
        bare = {**sealed, "wrapped_key": None, "values": {}}
        update["payload"] = {**env.payload, "memory": {**memory, "sealed": bare}}
    return LoggedEvent(offset=logged.offset, envelope=env.model_copy(update=update))


def _blank_none(text: str | None) -> str | None:
    """None for an absent or blank filter, else the filter without surrounding spaces."""
    return (text.strip() or None) if text is not None else None


class Insights:
    """Read-only views for the console. Adapters come in through the constructor."""

    def __init__(
        self,
        log: EventLog,
        store: MemoryStore,
        clock: Clock,
        *,
        checkpoints: AuditCheckpoints | None = None,
        signer: Signer | None = None,
        logged: EventLog | None = None,
        anchors: CheckpointAnchors | None = None,
    ) -> None:
        self.log = log  # as the views read it (opened at the read port)
        self.store = store
        self.clock = clock
        self.checkpoints = checkpoints  # without them, only the hash chains are checked
        self.signer = signer
        self.logged = logged or log  # as stored: what the audit chain hashed
        self.anchors = anchors  # each stream's newest checkpoint, kept outside the store

    # ---- heat map -------------------------------------------------------------------------

    def _cells(self, tenant: str, memories: Sequence[Memory], now: datetime) -> list[HeatCell]:
        stats = {
            s.memory_id: s for s in self.store.memory_stats(tenant, [m.memory_id for m in memories])
        }
        cells = []
        for m in memories:
            s = stats.get(m.memory_id) or MemoryStats(tenant, m.memory_id)
            cells.append(
                HeatCell(
                    memory=bare_memory(m),
                    stats=s,
                    weight=round(decayed_weight(m, now), 6),
                    freshness=round(m.remaining_fraction(now), 6),
                    stale=m.stale_after is not None and m.stale_after <= now,
                    heat=heat_of(s.cited, s.truncated, s.included),
                )
            )
        return cells

    def heatmap(
        self,
        ctx: RequestContext,
        subject: str | None = None,
        *,
        include_inactive: bool = False,
        limit: int = 500,
        after: str | None = None,
    ) -> HeatMap:
        """The tenant's memories (or one subject's) as heat-map cells, by memory id.

        By default only active memories; with include_inactive also superseded, expired,
        archived and forgotten ones."""
        subject = _blank_none(subject)
        if subject is not None and not valid_stream(subject):
            raise InvalidInput(
                "subject must be a stream name such as user:U7892",
                code="INVALID_STREAM",
                field="subject",
            )
        limit = max(1, min(limit, 2_000))
        statuses = tuple(MemoryStatus) if include_inactive else (MemoryStatus.ACTIVE,)
        memories = self.store.query(
            ctx.tenant, MemoryQuery(stream=subject, statuses=statuses, limit=limit, after=after)
        )
        now = self.clock.now()
        return HeatMap(
            subject=subject,
            as_of=now,
            cells=self._cells(ctx.tenant, memories, now),
            next_after=memories[-1].memory_id if len(memories) == limit else None,
        )

    # ---- a memory's life ------------------------------------------------------------------

    def life(self, ctx: RequestContext, memory_id: str) -> MemoryLife:
        """A memory's versions (oldest first), the events that touched it (in log order) and
        the contexts it was rendered in or cut from (in log order)."""
        memory = self.store.get(ctx.tenant, memory_id)
        if memory is None:
            raise NotFound(
                f"no memory {echoed(memory_id)}", code="MEMORY_NOT_FOUND", field="memory_id"
            )
        versions = (
            self.store.history(ctx.tenant, memory.stream, memory.key) if memory.key else [memory]
        ) or [memory]
        entries = self.store.timeline(ctx.tenant, memory_id) or self._timeline_from_log(
            ctx.tenant, memory_id
        )
        if memory.status is not MemoryStatus.FORGOTTEN:  # a forgotten one's stay unsaid
            entries = [self._with_reason(ctx.tenant, entry) for entry in entries]
        contexts: list[ContextUse] = []
        seen: set[str] = set()
        for entry in entries:
            if entry.what not in ("in_context", "truncated") or entry.detail in seen:
                continue
            seen.add(entry.detail)
            record = self.store.context_record(ctx.tenant, entry.detail)
            if record is not None:
                role = "included" if entry.what == "in_context" else "truncated"
                contexts.append(ContextUse(record, role))
        cell = self._cells(ctx.tenant, [memory], self.clock.now())[0]
        return MemoryLife(
            bare_memory(memory), cell, [bare_memory(v) for v in versions], entries, contexts
        )

    def _with_reason(self, tenant: str, entry: TimelineEntry) -> TimelineEntry:
        """A correction's or contradiction's reason, opened from its logged event (the
        timeline keeps none of a person's words): redacted once the user is forgotten."""
        if entry.what not in timeline.WORDS_FROM_EVENT or entry.detail:
            return entry
        logged = self.log.get(tenant, entry.event_id)
        reason = logged.envelope.payload.get("reason") if logged is not None else None
        return replace(entry, detail=reason) if isinstance(reason, str) else entry

    def _timeline_from_log(self, tenant: str, memory_id: str) -> list[TimelineEntry]:
        """The timeline read by the pure timeline handler straight from the log: for when
        the read model holds nothing for the memory (not projected, or not yet). Looks at
        the tenant's first MAX_SCAN events at most."""
        found: list[TimelineEntry] = []
        position = scanned = 0
        while scanned < MAX_SCAN:
            batch = self.log.read_tenant(tenant, position, WINDOW)
            if not batch:
                break
            for e in batch:
                found.extend(
                    w.entry
                    for w in timeline.entries(e.envelope, e.offset)
                    if w.entry.memory_id == memory_id
                )
            scanned += len(batch)
            position = batch[-1].offset
        found.sort(key=lambda t: (t.offset, t.what))
        return found[:500]

    # ---- contexts ---------------------------------------------------------------------------

    def contexts(
        self, ctx: RequestContext, limit: int = 50, before: str | None = None
    ) -> list[ContextRecord]:
        """The tenant's assembled contexts, newest first."""
        return self.store.context_records(ctx.tenant, max(1, min(limit, 500)), before)

    def context(self, ctx: RequestContext, request_id: str) -> ContextView:
        """One assembled context: what it rendered, in order, and what it left out and why
        (budget first, then expired, superseded, low_relevance or conflict)."""
        record = self.store.context_record(ctx.tenant, request_id)
        if record is None:
            raise NotFound(
                f"no assembled context {echoed(request_id)}",
                code="CONTEXT_NOT_FOUND",
                field="request_id",
            )
        sections = (
            record.sections
            if len(record.sections) == len(record.memory_ids)
            else ("",) * len(record.memory_ids)
        )
        left: list[tuple[str, str]] = [(m, "budget") for m in record.truncated]
        for item in record.left_out:
            mid, _, reason = item.rpartition(":")
            left.append((mid, reason) if mid else (item, "unknown"))
        ids = [*record.memory_ids, *(m for m, _ in left)]
        memories = {m.memory_id: bare_memory(m) for m in self.store.get_many(ctx.tenant, ids)}
        if record.rendered is not None:  # kept sealed: shown opened from the logged event
            logged = self.log.get(ctx.tenant, record.event_id)
            shown = logged.envelope.payload.get("rendered") if logged is not None else None
            record = replace(record, rendered=shown if isinstance(shown, str) else None)
        return ContextView(
            record=record,
            included=[
                Placed(m, s, None, memories.get(m))
                for m, s in zip(record.memory_ids, sections, strict=True)
            ],
            left_out=[Placed(m, "", r, memories.get(m)) for m, r in left],
        )

    # ---- the event stream -------------------------------------------------------------------

    def _backwards(
        self,
        tenant: str,
        keep: Callable[[LoggedEvent], bool],
        limit: int,
        seconds: float | None = None,
    ) -> tuple[list[LoggedEvent], int, int, bool]:
        """The tenant's newest `limit` kept events, newest first, looking at its newest
        MAX_SCAN events at most (page by page, whatever the gaps between offsets: the
        distributed archive's positions are microseconds), and no page begun after
        `seconds`; also the newest and the lowest offset examined (0 when none), and
        whether the scan reached the tenant's first event."""
        found: list[LoggedEvent] = []
        newest = lowest = 0
        before: int | None = None
        examined = 0
        stop_at = None if seconds is None else time.monotonic() + seconds
        while examined < MAX_SCAN and (stop_at is None or time.monotonic() < stop_at):
            batch = self.log.read_tenant_back(tenant, before, min(WINDOW, MAX_SCAN - examined))
            if not batch:
                return found, newest, lowest, True
            newest = newest or batch[0].offset
            for event in batch:
                examined += 1
                lowest = before = event.offset
                if keep(event):
                    found.append(event)
                    if len(found) == limit:
                        return found, newest, lowest, False
        return found, newest, lowest, False

    def events(
        self,
        ctx: RequestContext,
        after_offset: int | None = None,
        limit: int = 100,
        *,
        types: Sequence[str] = (),
        stream: str | None = None,
        actor: str | None = None,
    ) -> EventPage:
        """The tenant's events that match every filter, in log order.

        With after_offset, the first matches after it; without, the latest matches. `next`
        is the after_offset for the next call: a client that repeats the call with it tails
        the stream without missing or repeating an event."""
        limit = max(1, min(limit, 1_000))
        wanted = set(types)
        stream = _blank_none(stream)
        actor = _blank_none(actor)
        if stream is not None and not valid_stream(stream):
            raise InvalidInput(
                f"stream {echoed(stream)!r} is not a stream name",
                code="INVALID_STREAM",
                field="stream",
            )

        def keep(e: LoggedEvent) -> bool:
            env = e.envelope
            return (
                (not wanted or env.type in wanted)
                and (stream is None or env.stream == stream)
                and (actor is None or env.actor.id == actor)
            )

        if after_offset is None:
            # `next` is the newest of the tenant's events looked at: every event of its after
            # that one is newer (never the log's head, which tells when another tenant wrote
            # and, in the distributed mode, may pass events not settled yet)
            found, newest, _, reached = self._backwards(ctx.tenant, keep, limit)
            complete = reached or len(found) == limit
            return EventPage([bare_event(e) for e in reversed(found)], newest, complete)
        found = []
        position = max(0, after_offset)
        scanned = 0
        while len(found) < limit and scanned < MAX_SCAN:
            batch = self.log.read_tenant(ctx.tenant, position, WINDOW)
            if not batch:
                return EventPage([bare_event(e) for e in found], position, True)
            for event in batch:
                if len(found) >= limit and event.offset != position:
                    break  # never between two events of one offset: `next` passes both
                position = event.offset
                scanned += 1
                if keep(event):
                    found.append(event)
        return EventPage([bare_event(e) for e in found], position, len(found) >= limit)

    # ---- rejections and dead letters ------------------------------------------------------------

    def rejections(self, ctx: RequestContext, limit: int = 100) -> RejectionPage:
        """Published events that registration rejected, and utterances that looked like a
        memory it could not complete (ignored with a MISSED_MEMORY_CODES reason), newest
        first, with reason codes.

        Looks at the tenant's newest MAX_SCAN events, for REJECTION_SECONDS at most;
        `complete` says whether that reached the tenant's first event."""
        limit = max(1, min(limit, 1_000))
        found: list[Rejection] = []

        def rejected(e: LoggedEvent) -> bool:
            model = CATALOG.models.get((e.envelope.type, e.envelope.schema_version))
            if model is None or not model.PUBLIC:
                return False
            hits = [
                Rejection(
                    bare_event(e), o.index, o.reason_code or "UNKNOWN", o.detail, o.kind.value
                )
                for o in self.store.outcome(ctx.tenant, e.envelope.event_id)
                if o.kind is OutcomeKind.REJECTED
                or (o.kind is OutcomeKind.IGNORED and o.reason_code in MISSED_MEMORY_CODES)
            ]
            found.extend(hits)
            return bool(hits)

        # each public event's outcome is one read: bounded in time as well as in events
        _, _, lowest, reached = self._backwards(ctx.tenant, rejected, limit, REJECTION_SECONDS)
        return RejectionPage(found[:limit], lowest, reached)

    def dead_letters(self, ctx: RequestContext) -> list[dict[str, object]]:
        """Records a consumer gave up on. Embedded mode has no dead-letter topic (a failing
        registration becomes a rejection with HANDLER_ERROR instead): always empty."""
        del ctx
        return []

    # ---- audit ----------------------------------------------------------------------------------

    def audit(self, ctx: RequestContext) -> AuditStatus:
        """Verify the tenant's hash chains, one per stream, against the events the log holds
        now, then the chains against their signed checkpoints (ADR 0017).

        Broken (code AUDIT_CHAIN_BROKEN) when a link's hash does not match its event, a link
        is missing or out of order, an audited event is gone from the log, a link does not
        hold its stream's event of the same number, a chain does not reach its stream's
        recorded head, or (in the embedded mode, where the audit consumer's position is one
        log offset) an event the audit consumer has passed has no link. Then, for each
        stream's checkpoints: a signature that does not verify (AUDIT_SIGNATURE_INVALID), a
        checkpoint removed or replaced (AUDIT_CHECKPOINT_MISSING), a chain shorter than a
        checkpoint (AUDIT_TAIL_MISSING) or a link with another hash than the one signed
        (AUDIT_CHECKPOINT_MISMATCH: the log was edited, however the chain was recomputed or
        rebuilt). Then each stream's anchor, its newest checkpoint kept outside the store:
        the store's checkpoints must still reach it (AUDIT_CHECKPOINT_ROLLBACK: the newest
        checkpoints were removed, with the events after an older one). Links past a stream's
        last checkpoint count as `unsigned`. When the signatures or the anchors cannot be
        checked, the status is `unverified` (AUDIT_SIGNER_UNAVAILABLE), never intact.
        `pending` counts the tenant's events that have no link yet."""
        tenant = ctx.tenant
        # Read in the order the audit consumer writes, backwards, so that a consumer at work
        # meanwhile never looks like a rollback: it stores a checkpoint before anchoring it,
        # and signs links once they are committed. So the anchors first (each one's
        # checkpoint was stored before it), then the checkpoints (each one's links were
        # committed before it), then the position (the links of every event up to it were
        # committed with it, 0 where positions are per partition), then the heads.
        anchors: list[Checkpoint] = []
        unreadable: MnemoError | None = None  # reported where the anchors are compared
        try:
            anchors = self._anchors_of(tenant)
        except MnemoError as exc:
            unreadable = exc
        try:
            signed = self._signed(tenant)
        except MnemoError as exc:
            return AuditStatus(
                "unverified",
                0,
                0,
                reason=f"the signed checkpoints cannot be read ({exc.code})",
                code="AUDIT_CHECKPOINTS_UNAVAILABLE",
                streams=len(self.store.audit_heads(tenant)),
            )
        passed = self.store.position(audit.CONSUMER)
        heads = self.store.audit_heads(tenant)
        wanted = {stream: {cp.n for cp in cps} for stream, cps in signed.items()}
        hashes: dict[str, dict[int, str]] = {}
        links = 0
        for head in heads:
            prev, after_n = audit.GENESIS, 0
            while after_n < head.n:
                records = [  # only up to the head read: links committed since wait their turn
                    r
                    for r in self.store.audit_trail(tenant, head.stream, after_n, AUDIT_PAGE)
                    if r.n <= head.n
                ]
                if not records:
                    break
                try:
                    events = {
                        e.envelope.event_id: e.envelope
                        for e in self.logged.read_stream(
                            tenant, head.stream, after_n + 1, len(records)
                        )
                    }
                except ValueError as exc:  # a record that is no event any more (tampering)
                    return AuditStatus(
                        "broken",
                        links,
                        0,
                        first_broken=after_n + 1,
                        reason=f"{head.stream}: an event from {after_n + 1} to "
                        f"{after_n + len(records)} cannot be read from the log "
                        f"({type(exc).__name__})",
                        stream=head.stream,
                        streams=len(heads),
                        code="AUDIT_LOG_UNREADABLE",
                    )
                broken = audit.verify(records, events, prev, after_n)
                if broken is not None:
                    return self._broken(
                        tenant, heads, passed, head.stream, broken, links, records, events
                    )
                links += len(records)
                marks = wanted.get(head.stream, set())
                for r in records:
                    if r.n in marks:
                        hashes.setdefault(head.stream, {})[r.n] = r.hash
                prev, after_n = records[-1].hash, records[-1].n
            if (after_n, prev) != (head.n, head.hash):
                return self._broken(tenant, heads, passed, head.stream, after_n + 1, links, [], {})
        unlinked = self._unlinked(tenant, heads, passed)
        if unlinked.passed is not None:
            e = unlinked.passed
            return AuditStatus(
                "broken",
                links,
                unlinked.pending,
                first_broken=e.envelope.seq,
                reason=f"{e.envelope.stream} event {e.envelope.seq} ({e.envelope.event_id}) "
                "was passed by the audit consumer and has no link",
                stream=e.envelope.stream,
                streams=len(heads),
                code="AUDIT_CHAIN_BROKEN",
            )
        lengths = {h.stream: h.n for h in heads}
        checked = covered = 0
        for stream, cps in sorted(signed.items()):
            try:
                problem = audit.check_checkpoints(
                    stream,
                    cps,
                    lengths.get(stream, 0),
                    hashes.get(stream, {}),
                    lambda cp: self._signature_holds(tenant, cp),
                )
            except MnemoError as exc:
                return AuditStatus(
                    "unverified",
                    links,
                    unlinked.pending,
                    reason=f"the checkpoint signatures cannot be checked ({exc.code}): "
                    "the trail is not known to be intact",
                    stream=stream,
                    streams=len(heads),
                    code="AUDIT_SIGNER_UNAVAILABLE",
                    checkpoints=checked,
                )
            if problem is not None:
                return AuditStatus(
                    "broken",
                    links,
                    unlinked.pending,
                    first_broken=problem.n,
                    reason=problem.message,
                    stream=stream,
                    streams=len(heads),
                    code=problem.code,
                    checkpoints=checked,
                )
            checked += len(cps)
            covered += cps[-1].n if cps else 0
        try:
            if unreadable is not None:
                raise unreadable
            anchored = self._anchored(tenant, anchors, signed)
        except MnemoError as exc:
            return AuditStatus(
                "unverified",
                links,
                unlinked.pending,
                reason=f"the audit anchors cannot be checked ({exc.code}): the trail is not "
                "known to be intact",
                streams=len(heads),
                code="AUDIT_SIGNER_UNAVAILABLE",
                checkpoints=checked,
            )
        if isinstance(anchored, CheckpointProblem):
            return AuditStatus(
                "broken",
                links,
                unlinked.pending,
                first_broken=anchored.n,
                reason=anchored.message,
                stream=anchored.stream,
                streams=len(heads),
                code=anchored.code,
                checkpoints=checked,
            )
        unsigned = links - covered
        if links == 0:
            return AuditStatus("empty", 0, unlinked.pending)
        return AuditStatus(
            "intact",
            links,
            unlinked.pending,
            head_hash=audit.heads_digest(heads),
            last_offset=max(h.offset for h in heads),
            streams=len(heads),
            checkpoints=checked,
            signed=covered,
            unsigned=unsigned,
            anchored=anchored,
        )

    def _anchors_of(self, tenant: str) -> list[Checkpoint]:
        """The tenant's anchors (none without an anchor store)."""
        if self.anchors is None:
            return []
        return [a for a in self.anchors.of_tenant(tenant) if a.tenant == tenant]

    def _anchored(
        self, tenant: str, anchors: Sequence[Checkpoint], signed: dict[str, list[Checkpoint]]
    ) -> int | CheckpointProblem:
        """How many streams reach their anchor (read before `signed`), or the first that
        does not. Raises MnemoError when a signature cannot be checked."""
        if self.anchors is None:
            return 0
        reached = 0
        for anchor in anchors:
            problem = audit.check_anchor(
                anchor.stream,
                anchor,
                signed.get(anchor.stream, []),
                lambda cp: self._signature_holds(tenant, cp),
            )
            if problem is not None:
                return problem
            reached += 1
        return reached

    def _signed(self, tenant: str) -> dict[str, list[Checkpoint]]:
        """The tenant's signed checkpoints by stream, each stream's by index."""
        if self.checkpoints is None:
            return {}
        out: dict[str, list[Checkpoint]] = {}
        for cp in self.checkpoints.of_tenant(tenant):
            if cp.tenant == tenant:
                out.setdefault(cp.stream, []).append(cp)
        return {s: sorted(cps, key=lambda c: c.index) for s, cps in out.items()}

    def _signature_holds(self, tenant: str, cp: Checkpoint) -> bool:
        """Fails closed: no signer means the signature cannot be checked (Unavailable)."""
        if self.signer is None:
            raise Unavailable("no audit signer is configured", code="AUDIT_SIGNER_UNAVAILABLE")
        return self.signer.verify(tenant, cp.message(), cp.signature)

    def _broken(
        self,
        tenant: str,
        heads: Sequence[AuditRecord],
        passed: int,
        stream: str,
        n: int,
        links: int,
        records: Sequence[AuditRecord],
        events: dict[str, Envelope],
    ) -> AuditStatus:
        record = next((r for r in records if r.n == n), None)
        if record is None:
            what = f"{stream} link {n}: the chain stops before its head link"
        elif record.event_id in events:
            what = (
                f"{stream} link {n} (event {record.event_id}): the link does not match its "
                "event, its number or the link before it"
            )
        elif self.logged.get(tenant, record.event_id) is None:
            what = f"{stream} link {n} (event {record.event_id}): the event is missing from the log"
        else:
            what = f"{stream} link {n} (event {record.event_id}): not the stream's event {n}"
        verified = links + sum(1 for r in records if r.n < n)
        return AuditStatus(
            "broken",
            verified,
            self._unlinked(tenant, heads, passed).pending,
            first_broken=n,
            reason=what,
            stream=stream,
            streams=len(heads),
            code="AUDIT_CHAIN_BROKEN",
        )

    def _unlinked(self, tenant: str, heads: Sequence[AuditRecord], passed_up_to: int) -> _Unlinked:
        """One pass over the tenant's events: those past their stream's last link, and the
        first of them at or below the audit consumer's position."""
        linked = {h.stream: h.n for h in heads}
        pending = 0
        first_passed: LoggedEvent | None = None
        position = 0
        while True:
            batch = self.logged.read_tenant(tenant, position, AUDIT_PAGE)
            if not batch:
                break
            for e in batch:
                if (e.envelope.seq or 0) <= linked.get(e.envelope.stream, 0):
                    continue
                if e.offset <= passed_up_to:
                    first_passed = first_passed or e
                else:
                    pending += 1
            position = batch[-1].offset
        return _Unlinked(pending, first_passed)
