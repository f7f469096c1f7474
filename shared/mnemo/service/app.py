"""Mnemo's use cases: publish events, read memories, search, assemble a basic context,
replay a stream. Every call is scoped to the tenant of the request context."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Protocol

import orjson
from pydantic import ValidationError

from mnemo.domain import replica
from mnemo.domain.acceptance import MAX_CLOCK_SKEW, accept, publication_digest
from mnemo.domain.context import ContextTemplate, score_candidate
from mnemo.domain.edge import EDGE, blank
from mnemo.domain.errors import (
    ConflictError,
    InvalidInput,
    MnemoError,
    NotFound,
    Unavailable,
    echoed,
)
from mnemo.domain.events import (
    TEMPLATES_STREAM,
    ActorKind,
    Envelope,
    EventPayload,
    ForgetRequested,
    LoggedEvent,
    MemoryCited,
    MemoryDeclared,
    TemplateRegistered,
    ToolResultRecorded,
    decode_payload,
    error_path,
    validate_envelope,
)
from mnemo.domain.ids import id_time, new_event_id, valid_stream, valid_tenant
from mnemo.domain.memory import Memory, MemoryStatus, MemoryType, Scope
from mnemo.domain.projection import ContextRecord, Outcome, OutcomeKind, credits_citation
from mnemo.domain.tool_result import (
    MAX_ARGUMENTS_CHARS,
    MAX_RESULT_CHARS,
    TOOL_SOURCE_PREFIX,
    canonical_json,
    tool_of,
)
from mnemo.domain.triggers import Suggestion, TriggerSet
from mnemo.handlers import indexing, registration
from mnemo.handlers.decay import decayed_weight
from mnemo.ports import (
    Appended,
    Clock,
    Embedder,
    EventLog,
    MemoryQuery,
    MemoryStore,
    Tokenizer,
    VectorIndex,
)
from mnemo.sealing import Sealer
from mnemo.service import retrieval
from mnemo.service.context import (
    BUILTIN_TEMPLATES,
    ContextAssembler,
    ContextRequest,
    ContextResponse,
    Feedback,
    citation_event_id,
    citation_id,
)
from mnemo.service.runner import EmbeddedRunner

if TYPE_CHECKING:
    from mnemo.service.documents import Documents
from mnemo.service.triggers import suggestions as trigger_suggestions

__all__ = [
    "MAX_BATCH",
    "MAX_SUBJECT_KEYS_PER_REQUEST",
    "Mnemo",
    "RequestContext",
    "SearchHit",
    "Wait",
]

MAX_BATCH = 1_000
# distinct subject keys (users' own vault keys) one request may seal values under: each may
# be a new key in the vault, so a request cannot make hundreds of them at once
MAX_SUBJECT_KEYS_PER_REQUEST = 32
RRF_K = 60
CONTEXT_PROTOCOL = "v1"


ADMIN_SCOPE = "admin"


@dataclass(frozen=True, slots=True)
class RequestContext:
    """Who is asking, for which tenant. Every use case takes one; there is no other way in.

    `scopes` are the caller's API key scopes (the gateway always names them); None is a
    trusted caller in the same process (the CLI on a data directory, tests), which may do
    anything within the tenant."""

    tenant: str
    principal: str
    scopes: frozenset[str] | None = None
    # the tools whose results the caller may record; None: any tool
    tools: frozenset[str] | None = None

    def allows(self, scope: str) -> bool:
        return self.scopes is None or scope in self.scopes

    def allows_tool(self, tool: str) -> bool:
        return self.tools is None or tool in self.tools

    def __post_init__(self) -> None:
        if not valid_tenant(self.tenant):
            raise InvalidInput(
                "tenant must be 1-63 lowercase letters, digits, '_' or '-'",
                code="INVALID_TENANT",
                field="tenant",
            )


class Progress(Protocol):
    """How far the consumers of a distributed deployment are (`?wait=` there)."""

    def wait(self, accepted: Sequence[Appended], indexed: bool, timeout: float) -> bool: ...

    def caught_up(self, timeout: float) -> bool:
        """Until the registrar has handled every record the log held when this was called
        (False when the timeout passed first)."""
        ...

    def refused(self, accepted: Sequence[Appended]) -> dict[str, str]:
        """{event_id: code} of the accepted records the sequencer refused on its own
        without an outcome of theirs (another event under a reused id), once it decided."""
        ...


# a context's request id: the id of its ContextAssembled event, a UUIDv7 made by Mnemo
_CONTEXT_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")

# how long after its assembly a context's record may still be on its way to the read model
# in the distributed mode (a report of an older id that finds none is answered at once)
RECORDING_WINDOW = timedelta(minutes=10)


class Wait(StrEnum):
    NONE = "none"
    REGISTERED = "registered"
    INDEXED = "indexed"


@dataclass(frozen=True, slots=True)
class PublishResult:
    accepted: list[Appended]
    outcomes: dict[str, list[Outcome]] = field(default_factory=dict)
    complete: bool = True


@dataclass(frozen=True, slots=True)
class SearchHit:
    memory: Memory
    score: float
    rank: int | None  # in the engine's fused dense + keyword list
    weight: float


def _stream_or_error(stream: str) -> str:
    if not valid_stream(stream):
        raise InvalidInput(
            "stream must be 1-128 letters, digits or '_.:@-'", code="INVALID_STREAM", field="stream"
        )
    return stream


def _check_admin_events(ctx: RequestContext, i: int, envelope: Envelope) -> None:
    """Events that need the admin scope whoever publishes them: a template (it shapes every
    context assembled with it), and forgetting a whole tenant or a whole stream (without a
    memory id: a user's, which destroys the user's key, or a shared one, whose constraints
    every agent reads), which cannot be undone. Forgetting one memory needs only
    memory:write."""
    if ctx.allows(ADMIN_SCOPE):
        return
    if envelope.type == TemplateRegistered.TYPE:
        what = "registering a template"
    elif envelope.type == ForgetRequested.TYPE:
        request = decode_payload(envelope)
        assert isinstance(request, ForgetRequested)
        if not (request.tenant or request.memory_id is None):
            return
        what = "forgetting a whole tenant or a whole stream"
    else:
        return
    raise MnemoError(
        f"{what} needs a key with the admin scope",
        code="SCOPE_MISSING",
        field=f"events[{i}].type",
        extra={"scope": ADMIN_SCOPE},
    )


def _check_tool(ctx: RequestContext, i: int, envelope: Envelope) -> None:
    """A key limited to some tools records results of those tools only, and declares no
    memory that passes for another tool's result: a `tool:<name>` provenance or tag made it
    read as that tool's result in contexts, and supersede that tool's result under its key."""
    if ctx.tools is None:
        return
    if envelope.type == ToolResultRecorded.TYPE:
        claims = [("payload.tool", envelope.payload.get("tool"))]
    elif envelope.type == MemoryDeclared.TYPE:
        claims = _claimed_tools(envelope.payload.get("memory"))
    else:
        return
    for path, tool in claims:
        if not isinstance(tool, str) or not ctx.allows_tool(tool):
            raise MnemoError(
                f"this key may record results of {', '.join(sorted(ctx.tools)) or 'no tool'} only",
                code="TOOL_NOT_ALLOWED",
                field=f"events[{i}].{path}",
            )


def _claimed_tools(memory: object) -> list[tuple[str, str | None]]:
    """The tools a declared memory names as its source (provenance `tool:<name>`, tags
    `tool:<name>`), with where; the draft was validated already."""
    if not isinstance(memory, Mapping):
        return []
    claims: list[tuple[str, str | None]] = []
    provenance = memory.get("provenance")
    if isinstance(provenance, Mapping):
        source = provenance.get("source_id")
        if isinstance(source, str) and _names_a_tool(source):
            claims.append(("payload.memory.provenance.source_id", _named_tool(source)))
    tags = memory.get("tags")
    for n, tag in enumerate(tags if isinstance(tags, list) else []):
        if isinstance(tag, str) and _names_a_tool(tag):
            claims.append((f"payload.memory.tags[{n}]", _named_tool(tag)))
    return claims


def _names_a_tool(text: str) -> bool:
    """`tool:<name>` in any case and with any white space around it: a variant is refused
    with the exact form, not left to whatever later reads it as a tool's name."""
    return text.strip().casefold().startswith(TOOL_SOURCE_PREFIX)


def _named_tool(text: str) -> str:
    return text.strip()[len(TOOL_SOURCE_PREFIX) :]


class Mnemo:
    """The application service. Adapters come in through the constructor (see bootstrap)."""

    def __init__(
        self,
        log: EventLog,
        store: MemoryStore,
        index: VectorIndex,
        query_embedder: Embedder,
        tokenizer: Tokenizer,
        clock: Clock,
        runner: EmbeddedRunner | None,
        contexts: ContextAssembler,
        progress: Progress | None = None,
        sealer: Sealer | None = None,
        triggers: TriggerSet | None = None,
    ) -> None:
        self.log = log
        self.store = store
        self.index = index
        self.query_embedder = query_embedder
        self.tokenizer = tokenizer
        self.clock = clock
        self.runner = runner
        self.contexts = contexts
        self.progress = progress
        self.sealer = sealer
        self.triggers = triggers or TriggerSet()
        # the document use cases (mnemo.service.documents), set by the wiring
        self.documents: Documents | None = None
        self._changed = threading.Condition()
        self._listeners: list[Callable[[], None]] = []
        if runner is not None:
            runner.on_progress.append(self.notify_changed)

    # ---- write ----------------------------------------------------------------------

    def publish(
        self,
        ctx: RequestContext,
        raw_events: Sequence[Mapping[str, Any]],
        wait: Wait = Wait.NONE,
        timeout: float = 10.0,
    ) -> PublishResult:
        """Validate every event, then append them all or none."""
        if not raw_events:
            raise InvalidInput("no events", code="EMPTY_BATCH", field="events")
        if len(raw_events) > MAX_BATCH:
            raise InvalidInput(
                f"at most {MAX_BATCH} events per call", code="BATCH_TOO_LARGE", field="events"
            )
        now = self.clock.now()
        envelopes = []
        for i, raw in enumerate(raw_events):
            try:
                envelope = accept(
                    raw, tenant=ctx.tenant, principal=ctx.principal, now=now, trusted=False
                )
            except InvalidInput as exc:
                exc.field = f"events[{i}].{exc.field}" if exc.field else f"events[{i}]"
                raise
            _check_admin_events(ctx, i, envelope)
            _check_tool(ctx, i, envelope)
            self._check_tool_key(ctx, i, envelope)
            if envelope.type == TemplateRegistered.TYPE:
                registered = decode_payload(envelope)
                assert isinstance(registered, TemplateRegistered)
                self._check_template_queries(registered.template, f"events[{i}].payload.template.")
            if envelope.type == MemoryCited.TYPE:
                envelope = self._citation(ctx, i, envelope)
            envelopes.append(envelope)
        return self._append(ctx, envelopes, wait, timeout, sent=raw_events)

    def _check_tool_key(self, ctx: RequestContext, i: int, envelope: Envelope) -> None:
        """A key limited to some tools neither replaces nor forgets another tool's result:
        no memory declared and no result of its own tools recorded under a memory key that
        another tool's active result holds (either would supersede it), and no forget of
        such a result. Read from the read models, so a result registered in the same
        instant is not seen."""
        if ctx.tools is None:
            return
        payload = envelope.payload
        held: list[Memory] = []
        if envelope.type in (MemoryDeclared.TYPE, ToolResultRecorded.TYPE):
            memory = payload.get("memory") if envelope.type == MemoryDeclared.TYPE else payload
            key = memory.get("key") if isinstance(memory, Mapping) else None
            path = "payload.memory.key" if envelope.type == MemoryDeclared.TYPE else "payload.key"
            if isinstance(key, str):
                held = [
                    m
                    for m in self.store.history(ctx.tenant, envelope.stream, key)
                    if m.status is MemoryStatus.ACTIVE
                ]
        elif envelope.type == ForgetRequested.TYPE and isinstance(payload.get("memory_id"), str):
            path = "payload.memory_id"
            found = self.store.get(ctx.tenant, payload["memory_id"])
            held = [found] if found is not None and found.stream == envelope.stream else []
        else:
            return
        tools = {tool_of(m.provenance.source_id) for m in held} - {None}
        other = sorted(t for t in tools if t is not None and not ctx.allows_tool(t))
        if other:
            raise MnemoError(
                f"this key may record results of {', '.join(sorted(ctx.tools)) or 'no tool'} "
                f"only, and this would replace or forget a result of {other[0]}",
                code="TOOL_NOT_ALLOWED",
                field=f"events[{i}].{path}",
            )

    def append_own(
        self,
        ctx: RequestContext,
        stream: str,
        payload: EventPayload,
        wait: Wait = Wait.NONE,
        timeout: float = 10.0,
    ) -> PublishResult:
        """Append an event Mnemo writes itself on the caller's behalf (one agents may not
        publish, such as DocumentIngested once its bytes are stored): checked like a
        published event, then sealed and appended the same way."""
        now = self.clock.now()
        raw = {
            "event_id": new_event_id(now),
            "type": payload.TYPE,
            "schema_version": payload.VERSION,
            "tenant": ctx.tenant,
            "stream": stream,
            "occurred_at": now.isoformat(),
            "actor": {"kind": ActorKind.AGENT.value, "id": ctx.principal},
            "payload": payload.model_dump(mode="json", exclude_none=True),
        }
        return self._append(ctx, [validate_envelope(raw, public=False)], wait, timeout)

    def _append(
        self,
        ctx: RequestContext,
        envelopes: list[Envelope],
        wait: Wait,
        timeout: float,
        sent: Sequence[Mapping[str, Any]] | None = None,
    ) -> PublishResult:
        """`sent`: the events as the client sent them, one per envelope, for their digests
        (a publish; None for Mnemo's own events)."""
        if self.sealer is not None:
            # a forgotten tenant takes nothing more, on any stream (a new user's included)
            self.sealer.refuse_forgotten_tenant(ctx.tenant)
            envelopes = self._seal_all(ctx, envelopes, sent)
        elif sent is not None:
            envelopes = [_digested(e, raw, b"") for e, raw in zip(envelopes, sent, strict=True)]
        try:
            if self.sealer is not None and any(e.type == ForgetRequested.TYPE for e in envelopes):
                # keys are shredded only for requests the log will record: never for one it
                # refuses (a stale expected_seq) or holds already (a reused event id)
                accepted = self.log.append_guarded(
                    envelopes, lambda fresh: self._shred_forgotten(ctx, fresh)
                )
            else:
                accepted = self.log.append(envelopes)
        except ConflictError as exc:
            reused = exc.extra.get("event_id")
            if exc.code == "EVENT_ID_REUSED" and exc.field == "event_id":
                at = [i for i, e in enumerate(envelopes) if e.event_id == reused]
                if at:
                    # the later one is at fault; with two in this batch, neither was logged
                    exc.field = f"events[{at[-1]}].event_id"
                if len(at) > 1:
                    exc.message = (
                        f"event_id {reused} is used by events[{at[0]}] and events[{at[-1]}] "
                        "of this batch with other content; nothing was appended"
                    )
            raise
        if self.runner is not None:
            self.runner.wake()
        self.notify_changed()
        if wait is Wait.NONE:
            return PublishResult(accepted)
        refused: dict[str, str] = {}
        if self.progress is not None:
            complete = self.progress.wait(accepted, wait is Wait.INDEXED, timeout)
            refused = self.progress.refused(accepted) if complete else {}
        else:
            complete = self._wait(ctx.tenant, max(a.offset for a in accepted), wait, timeout)
        outcomes = {
            a.event_id: [_refusal(ctx.tenant, a.event_id, refused[a.event_id])]
            if a.event_id in refused
            else self.store.outcome(ctx.tenant, a.event_id)
            for a in accepted
        }
        return PublishResult(accepted, outcomes, complete)

    def _citation(self, ctx: RequestContext, i: int, envelope: Envelope) -> Envelope:
        """A citation moves a memory's weight and trust, so it is taken only for a memory
        that the context it names included. It is filed on that context's stream under an
        id derived from (context, memory), as a reported answer files it, so repeats
        collapse in the log; what counts is the registrar's rule (one credit per context
        and memory, whatever the event id: handlers/registration.py), which holds for
        producers writing to the topic too.

        A context that is in the log but not yet recorded (the registrar has not read it,
        as in the distributed mode right after assembly) is left to the registrar: the
        citation keeps its stream, where the context was assembled when the client cites
        it there, so the log's per-stream order has the registrar record the context
        before it reads the citation, and its outcome says whether it counted."""
        cited = decode_payload(envelope)
        assert isinstance(cited, MemoryCited)
        if cited.request_id is None:
            raise InvalidInput(
                "a citation names the context it comes from (payload.request_id); or "
                "report the answer at POST /v1/context/{request_id}/response",
                code="CITATION_WITHOUT_CONTEXT",
                field=f"events[{i}].payload.request_id",
            )
        # its cause is the context (the context's event id is its request id, in clear in
        # the log): the request id is sealed on a user stream, and a rebuild after the
        # user's forget finds the context through the cause (projection.cited_context_ids)
        cause = envelope.causation_id or (
            cited.request_id if _CONTEXT_ID.fullmatch(cited.request_id) else None
        )
        record = self._context_record(ctx.tenant, cited.request_id)
        if record is None and self._context_pending(ctx.tenant, cited.request_id):
            return envelope.model_copy(
                update={
                    "event_id": citation_event_id(
                        ctx.tenant, cited.request_id, cited.memory_id, None
                    ),
                    "causation_id": cause,
                }
            )
        if record is None:
            raise InvalidInput(
                f"no assembled context {echoed(cited.request_id)}",
                code="CONTEXT_NOT_FOUND",
                field=f"events[{i}].payload.request_id",
            )
        if not credits_citation(record, record.stream, cited.memory_id):
            raise InvalidInput(
                "the cited context did not include that memory",
                code="CITATION_NOT_IN_CONTEXT",
                field=f"events[{i}].payload.memory_id",
            )
        return envelope.model_copy(
            update={
                "stream": record.stream,
                "event_id": citation_id(record, cited.memory_id),
                "causation_id": envelope.causation_id or record.event_id,
            }
        )

    def _context_pending(self, tenant: str, request_id: str) -> bool:
        """Whether a context the registrar has not recorded may still be: in the embedded
        mode when its event is in the log; in the distributed mode always (the gateway
        cannot see the topic's records the registrar has not archived yet)."""
        if self.runner is None:
            return True
        return self.log.get(tenant, request_id) is not None

    def _context_record(
        self, tenant: str, request_id: str, timeout: float = 5.0
    ) -> ContextRecord | None:
        """The record of an assembled context, waiting briefly for the registrar when the
        context is in the log but not yet recorded."""
        record = self.store.context_record(tenant, request_id)
        if record is None and self.runner is not None and self.runner.running:
            found = self.log.get(tenant, request_id)
            if found is not None:
                self.runner.wait_for(registration.CONSUMER, found.offset, timeout, tenant)
                record = self.store.context_record(tenant, request_id)
        return record

    def _recently_assembled(self, request_id: str) -> bool:
        """Whether a context under this request id may have been assembled so recently that
        the registrar has not recorded it yet: a request id is the UUIDv7 of its assembly,
        stamped by the gateway's clock. Any other id, or an older one, was recorded long
        since or never was, and is answered without waiting."""
        at = id_time(request_id)
        if at is None:
            return False
        now = self.clock.now()
        return now - RECORDING_WINDOW <= at <= now + MAX_CLOCK_SKEW

    def _seal_all(
        self,
        ctx: RequestContext,
        envelopes: Sequence[Envelope],
        sent: Sequence[Mapping[str, Any]] | None = None,
    ) -> list[Envelope]:
        """Seal a batch, each event digested first when `sent` gives what the client sent
        (`_digested`); refused (TOO_MANY_SUBJECT_KEYS) once it would make more than
        MAX_SUBJECT_KEYS_PER_REQUEST new subject keys in the vault, before the next one is
        made. Subjects whose keys exist already do not count: a batch may touch any
        number of known users."""
        assert self.sealer is not None
        sealed: list[Envelope] = []
        checked: set[str] = set()
        new_keys = 0
        for i, envelope in enumerate(envelopes):
            if envelope.stream not in checked:
                checked.add(envelope.stream)
                if self.sealer.makes_key(ctx.tenant, envelope.stream):
                    new_keys += 1
                    if new_keys > MAX_SUBJECT_KEYS_PER_REQUEST:
                        raise InvalidInput(
                            f"one request may make at most {MAX_SUBJECT_KEYS_PER_REQUEST} "
                            "new subject keys (users seen for the first time); split the batch",
                            code="TOO_MANY_SUBJECT_KEYS",
                            field=f"events[{i}].stream",
                        )
            if sent is not None:
                key = self.sealer.publication_key(ctx.tenant, envelope.stream)
                if key is not None:
                    envelope = _digested(envelope, sent[i], key)
            sealed.append(self._seal(i, envelope))
        return sealed

    def _seal(self, i: int, envelope: Envelope) -> Envelope:
        """Seal an event's sensitive values before the log sees them (Unavailable when the
        vault cannot be reached: then nothing is appended)."""
        assert self.sealer is not None
        try:
            found = self.sealer.seal_found(envelope)
            if found is not envelope:
                # placeholders are longer than some values: the result must still be valid
                found = validate_envelope(found.model_dump(mode="json"))
            # what seals a user's fields whole stands in with valid values by construction
            return self.sealer.seal_private(found) if self.sealer.seals_whole(found) else found
        except InvalidInput as exc:
            exc.field = f"events[{i}].{exc.field}" if exc.field else f"events[{i}]"
            raise

    def _shred_forgotten(self, ctx: RequestContext, envelopes: Sequence[Envelope]) -> None:
        """Crypto-shred before the log records the request (Sealer.shred_forgotten), with
        the key ids of the tenant's events in the log. A vault that is down fails the
        request (nothing appended)."""
        assert self.sealer is not None
        self.sealer.shred_forgotten(
            ctx.tenant, envelopes, lambda: self.log.sealed_key_ids(ctx.tenant)
        )

    def _wait(self, tenant: str, offset: int, wait: Wait, timeout: float) -> bool:
        """Until the consumers have handled the tenant's events up to `offset` (the other
        tenants' events before it need not be: the consumers let tenants take turns)."""
        if self.runner is None or not self.runner.running:
            raise Unavailable("no consumers run in this process to wait for", code="NO_RUNNER")
        if not self.runner.wait_for(registration.CONSUMER, offset, timeout, tenant):
            return False
        if wait is Wait.INDEXED:
            # the registrar appended what it emitted before committing its position
            return self.runner.wait_for(indexing.CONSUMER, self.log.head(), timeout, tenant)
        return True

    # ---- read ----------------------------------------------------------------------------

    def get(self, ctx: RequestContext, memory_id: str) -> Memory:
        memory = self.store.get(ctx.tenant, memory_id)
        if memory is None:
            raise NotFound(
                f"no memory {echoed(memory_id)}", code="MEMORY_NOT_FOUND", field="memory_id"
            )
        return memory

    def list_memories(
        self,
        ctx: RequestContext,
        stream: str,
        *,
        types: Sequence[MemoryType] = (),
        scopes: Sequence[Scope] = (),
        tags: Sequence[str] = (),
        key: str | None = None,
        include_expired: bool = False,
        include_superseded: bool = False,
        include_archived: bool = False,
        limit: int = 100,
        after: str | None = None,
    ) -> list[Memory]:
        _stream_or_error(stream)
        statuses = [MemoryStatus.ACTIVE]
        if include_expired:
            statuses.append(MemoryStatus.EXPIRED)
        if include_superseded:
            statuses.append(MemoryStatus.SUPERSEDED)
        if include_archived:
            statuses.append(MemoryStatus.ARCHIVED)
        query = MemoryQuery(
            stream=stream,
            types=tuple(types),
            scopes=tuple(scopes),
            tags=tuple(tags),
            key=key,
            statuses=tuple(statuses),
            live_at=None if include_expired else self.clock.now(),
            limit=max(1, min(limit, 1_000)),
            after=after,
        )
        return self.store.query(ctx.tenant, query)

    def due_verifications(self, ctx: RequestContext, stream: str) -> list[Memory]:
        """Memories the agent should confirm with the user ("is your size still L?")."""
        query = MemoryQuery(
            stream=_stream_or_error(stream),
            verification_due=True,
            live_at=self.clock.now(),
            limit=200,
        )
        return self.store.query(ctx.tenant, query)

    def history(self, ctx: RequestContext, stream: str, key: str) -> list[Memory]:
        return self.store.history(ctx.tenant, _stream_or_error(stream), key)

    def search(
        self,
        ctx: RequestContext,
        query: str,
        *,
        streams: Sequence[str] = (),
        types: Sequence[MemoryType] = (),
        scopes: Sequence[Scope] = (),
        tags: Sequence[str] = (),
        limit: int = 10,
        include_archived: bool = False,
        vector: list[float] | None = None,
        timezone: str | None = None,
    ) -> list[SearchHit]:
        """Hybrid search: vector and BM25 rankings fused by reciprocal rank, weighted by the
        memory's current semantic weight and remaining freshness; ties by memory id. The
        query's time expressions ("yesterday") are read in `timezone` (an IANA name; UTC
        when none)."""
        for s in streams:
            _stream_or_error(s)
        zone = retrieval.request_zone(timezone)
        limit = max(1, min(limit, 100))
        depth = max(limit * 4, 40)
        now = self.clock.now()
        if self.sealer is not None:  # sealed values match by keyed hash, never as plaintext
            query = self.sealer.query_text(ctx.tenant, streams, query)
        if vector is None and query.strip():
            vector = self.query_embedder.embed_query(query)
        base = MemoryQuery(
            types=tuple(types),
            scopes=tuple(scopes),
            tags=tuple(tags),
            statuses=retrieval.live_statuses(include_archived),
            live_at=now,
            limit=depth,
        )
        ranked = retrieval.rank(
            self.store,
            self.index,
            ctx.tenant,
            query,
            vector,
            base,
            streams,
            depth,
            as_of=now,
            timezone=zone,
            # the model of the index's own vectors, whoever embedded `vector`
            embed=self.query_embedder.embed_query,
        )
        hits = []
        for r in ranked:
            c = score_candidate(
                r.memory,
                rank=r.fused_rank,
                ranked=True,
                weight=decayed_weight(r.memory, now),
                as_of=now,
                relevance=r.relevance,
            )
            hits.append(SearchHit(r.memory, c.score, r.fused_rank, c.weight))
        hits.sort(key=lambda h: (-h.score, h.memory.memory_id))
        return hits[:limit]

    # ---- context -----------------------------------------------------------------------

    def context(self, ctx: RequestContext, request: ContextRequest) -> ContextResponse:
        """Assemble a context under a template, within a token budget (see service.context)."""
        if self.sealer is None:
            response = self.contexts.assemble(ctx.tenant, ctx.principal, request)
            return self._with_suggestions(ctx, request, response)
        if request.query:
            query = self.sealer.query_text(ctx.tenant, request.subjects, request.query)
            request = dataclasses.replace(request, query=query)
        response = self.contexts.assemble(ctx.tenant, ctx.principal, request)
        return self._with_suggestions(ctx, request, response)

    def _with_suggestions(
        self, ctx: RequestContext, request: ContextRequest, response: ContextResponse
    ) -> ContextResponse:
        if self.triggers.triggers:
            response.suggestions = self.suggestions(ctx, request.subjects, response.as_of)
        return response

    # ---- tool results and suggested tool calls ---------------------------------------------

    def suggestions(
        self, ctx: RequestContext, subjects: Sequence[str], as_of: datetime | None = None
    ) -> list[Suggestion]:
        """The tool calls the operators' triggers suggest for the subjects' memories at
        `as_of` (now when absent); see mnemo.domain.triggers."""
        for s in subjects:
            _stream_or_error(s)
        if as_of is not None and as_of.utcoffset() is None:
            raise InvalidInput("as_of must carry a UTC offset", code="INVALID_AS_OF", field="as_of")
        at = as_of or self.clock.now()
        return trigger_suggestions(self.store, self.triggers, ctx.tenant, subjects, at)

    def record_tool_result(
        self,
        ctx: RequestContext,
        stream: str,
        *,
        tool: str,
        result: Any,
        source: str,
        fresh_for_seconds: int,
        arguments: Mapping[str, Any] | None = None,
        fetched_at: datetime | None = None,
        key: str | None = None,
        trust: float | None = None,
        trigger: Mapping[str, str] | None = None,
        event_id: str | None = None,
        wait: Wait = Wait.NONE,
        timeout: float = 10.0,
    ) -> PublishResult:
        """Record a tool call's result (a ToolResultRecorded event): the arguments and the
        result as structured JSON, turned into JSON text here (TOOL_RESULT_NOT_JSON,
        TOOL_RESULT_TOO_LARGE when they cannot be). `fetched_at` defaults to now."""
        payload: dict[str, Any] = {
            "tool": tool,
            "arguments": canonical_json(
                dict(arguments or {}), field="arguments", limit=MAX_ARGUMENTS_CHARS
            ),
            "result": canonical_json(result, field="result", limit=MAX_RESULT_CHARS),
            "source": source,
            "fetched_at": (fetched_at or self.clock.now()).isoformat(),
            "fresh_for_seconds": fresh_for_seconds,
        }
        if key is not None:
            payload["key"] = key
        if trust is not None:
            payload["trust"] = trust
        if trigger is not None:
            payload["trigger"] = dict(trigger)
        event: dict[str, Any] = {
            "type": ToolResultRecorded.TYPE,
            "schema_version": ToolResultRecorded.VERSION,
            "stream": stream,
            "payload": payload,
        }
        if event_id is not None:
            event["event_id"] = event_id
        try:
            return self.publish(ctx, [event], wait=wait, timeout=timeout)
        except MnemoError as exc:
            if exc.field and exc.field.startswith("events[0]."):
                exc.field = exc.field.removeprefix("events[0].").removeprefix("payload.")
            raise

    def report(
        self,
        ctx: RequestContext,
        request_id: str,
        response_text: str,
        correction: str | None = None,
        corrected_ids: Sequence[str] = (),
        timeout: float = 5.0,
    ) -> Feedback:
        """Record the model's answer to an assembled context (citations, corrections)."""
        record = self._context_record(ctx.tenant, request_id, timeout)
        if record is None and self.progress is not None and self._recently_assembled(request_id):
            # distributed: the consumers record a context after the gateway appended it,
            # so a report sent right after assembly can come first. Once the registrar has
            # passed everything the log held when the report came, the record is there,
            # or no context was assembled under that id (in this tenant)
            self.progress.caught_up(timeout)
        if correction is not None and blank(correction):
            # white space or invisible characters only say no more than "" does: no
            # correction (it would cost every memory of the context weight and trust)
            correction = None
        if self.sealer is not None and correction:  # the correction becomes a logged reason
            correction = self.sealer.mask_text(correction)
        return self.contexts.report(
            ctx.tenant, ctx.principal, request_id, response_text, correction, corrected_ids
        )

    def register_template(
        self, ctx: RequestContext, template: Mapping[str, Any]
    ) -> tuple[ContextTemplate, bool]:
        """Register a template version; (template, created). A taken version with other
        content is a conflict."""
        try:
            parsed = ContextTemplate.model_validate(template, context=EDGE)
        except ValidationError as exc:
            err = exc.errors()[0]
            field = error_path(err)
            code = (
                "TEMPLATE_WITHOUT_CONSTRAINTS"
                if err["type"] == "template_without_constraints"
                else "TEMPLATE_INVALID"
            )
            raise InvalidInput(f"{field}: {err['msg']}", code=code, field=field or None) from exc
        self._check_template_queries(parsed)
        existing = self.store.template(ctx.tenant, parsed.name, parsed.version)
        if existing is not None:
            if existing == parsed:
                return existing, False
            raise ConflictError(
                f"{parsed.name} version {parsed.version} is taken; register a new version",
                code="TEMPLATE_VERSION_EXISTS",
                field="version",
            )
        event = {
            "type": "TemplateRegistered",
            "schema_version": 1,
            "stream": TEMPLATES_STREAM,
            "payload": {"template": parsed.model_dump(mode="json")},
        }
        self.publish(
            ctx,
            [event],
            wait=Wait.REGISTERED if self.runner is not None and self.runner.running else Wait.NONE,
        )
        return parsed, True

    def _check_template_queries(self, template: ContextTemplate, prefix: str = "") -> None:
        """A section filled from a structured query holds conditions POST /v1/query would
        take: checked against the entity rules in force, refused with QUERY_INVALID naming
        the path (`sections.1.where[0].value`)."""
        for index, section in enumerate(template.sections):
            if section.where is None:
                continue
            if self.documents is None:
                raise InvalidInput(
                    "this server has no documents to fill a section from",
                    code="QUERY_INVALID",
                    field=f"{prefix}sections.{index}.where",
                )
            self.documents.conditions(section.where, f"{prefix}sections.{index}.where")

    def templates(self, ctx: RequestContext) -> list[ContextTemplate]:
        builtin = [
            t
            for (n, _), t in sorted(BUILTIN_TEMPLATES.items())
            if self.store.template(ctx.tenant, n, None) is None
        ]
        return builtin + self.store.templates(ctx.tenant)

    def template(self, ctx: RequestContext, name: str, version: int | None) -> ContextTemplate:
        return self.contexts.template(ctx.tenant, name, version)

    # ---- replay ------------------------------------------------------------------------

    def replay(
        self, ctx: RequestContext, stream: str, from_seq: int, limit: int
    ) -> list[LoggedEvent]:
        if from_seq < 1:
            raise InvalidInput("from_seq starts at 1", code="INVALID_SEQUENCE", field="from_seq")
        return self.log.read_stream(
            ctx.tenant, _stream_or_error(stream), from_seq, max(1, min(limit, 10_000))
        )

    def replay_json(
        self, ctx: RequestContext, stream: str, from_seq: int, limit: int
    ) -> list[bytes]:
        """Like replay, as the stored JSON of each event (nothing parsed on the way)."""
        if from_seq < 1:
            raise InvalidInput("from_seq starts at 1", code="INVALID_SEQUENCE", field="from_seq")
        limit = max(1, min(limit, 10_000))
        return self.log.read_stream_json(ctx.tenant, _stream_or_error(stream), from_seq, limit)

    def snapshot(self, ctx: RequestContext, stream: str) -> tuple[int, dict[str, dict[str, Any]]]:
        """A stream's memories as of its latest sequence number: (seq, memory id -> memory
        as JSON). A device loads it, then tails from seq + 1."""
        state: dict[str, dict[str, Any]] = {}
        seq = 0
        while True:
            page = [orjson.loads(body) for body in self.replay_json(ctx, stream, seq + 1, 5_000)]
            if not page:
                return seq, state
            replica.fold(page, state)
            seq = int(page[-1]["seq"])

    def notify_changed(self) -> None:
        """Wake whoever waits for new events (live tails)."""
        with self._changed:
            self._changed.notify_all()
            listeners = tuple(self._listeners)
        for listener in listeners:
            listener()

    @property
    def notifies(self) -> bool:
        """Whether this process hears of every append (`listen`): the embedded mode. In
        the distributed mode other processes sequence the log, so a waiter polls."""
        return self.progress is None

    def listen(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call `listener` whenever new events may have been appended (from the thread that
        appended: it must not block); returns the function that stops it."""
        with self._changed:
            self._listeners.append(listener)

        def stop() -> None:
            with self._changed, contextlib.suppress(ValueError):
                self._listeners.remove(listener)

        return stop

    def wait_for_stream(self, ctx: RequestContext, stream: str, seq: int, timeout: float) -> bool:
        """Block until the stream holds sequence `seq`, or the timeout passes."""
        if self.progress is not None:
            # distributed: other processes sequence the log; nothing here is notified
            deadline = time.monotonic() + timeout
            while self.log.stream_head(ctx.tenant, stream) < seq:
                if time.monotonic() >= deadline:
                    return False
                time.sleep(0.05)
            return True
        with self._changed:
            found: bool = self._changed.wait_for(
                lambda: self.log.stream_head(ctx.tenant, stream) >= seq, timeout
            )
        return found

    def tail(self, ctx: RequestContext, after_offset: int, limit: int) -> list[LoggedEvent]:
        return self.log.read_tenant(ctx.tenant, max(0, after_offset), max(1, min(limit, 1_000)))

    def outcome(self, ctx: RequestContext, event_id: str) -> list[Outcome]:
        found = self.store.outcome(ctx.tenant, event_id)
        if not found and self.log.get(ctx.tenant, event_id) is None:
            raise NotFound(f"no event {echoed(event_id)}", code="EVENT_NOT_FOUND", field="event_id")
        return found


def _refusal(tenant: str, event_id: str, code: str) -> Outcome:
    """The outcome a publish answers for a record the sequencer refused: the id's own
    outcome is the first event's, which this record did not become."""
    return Outcome(
        tenant,
        event_id,
        0,
        OutcomeKind.REJECTED,
        reason_code=code,
        detail="the event id is in the log with other content; the record went to the "
        "dead-letter topic",
    )


def _digested(envelope: Envelope, raw: Mapping[str, Any], key: bytes) -> Envelope:
    """The envelope with the digest of what its client sent, when the client chose its
    id: the log then tells a retry from another event under the same id. An id Mnemo
    chose (a fresh one, or a citation's, derived so that repeats collapse) gets none."""
    if raw.get("event_id") != envelope.event_id:
        return envelope
    return envelope.model_copy(update={"digest": publication_digest(raw, key)})
