"""Registration: turns declared memories and raw observations into registered memories.

- A declared memory is checked and registered.
- An observation goes through the registration rules; one that asks for nothing to be
  remembered (or an action, like a click) is not registered.
- A new value for the same stream and key supersedes the old one (version + 1); the old
  one stays in history.
- An exact duplicate of an active memory is a no-op.
- Whatever cannot be registered becomes MemoryRejected with a reason code.
The same handler projects the lifecycle events other consumers emit (expiry, forgetting,
weight changes) into the memory read model.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import datetime
from typing import Protocol

from pydantic import ValidationError

from mnemo.domain.context import ContextTemplate
from mnemo.domain.derivation import (
    derived_episode,
    episode_of,
    speaker_name,
    speaker_of,
    speaker_tag,
)
from mnemo.domain.document_index import DOCUMENT_TAG, DocumentRecord, entity_rows, location
from mnemo.domain.documents import Entity, ParsedDocument
from mnemo.domain.events import (
    ContextAssembled,
    ContextResponseReported,
    DocumentIngested,
    Envelope,
    EventPayload,
    FeedbackRelayed,
    ForgetRequested,
    MemoriesRewrapped,
    MemoryArchived,
    MemoryCited,
    MemoryCorrected,
    MemoryDecayed,
    MemoryDeclared,
    MemoryExpired,
    MemoryForgotten,
    MemoryRegistered,
    MemoryRejected,
    MemorySuperseded,
    MemoryVerified,
    ObservationRecorded,
    TemplateRegistered,
    ToolResultRecorded,
    VerificationDue,
    decode_payload,
)
from mnemo.domain.history import is_fact
from mnemo.domain.ids import derived_id
from mnemo.domain.memory import (
    Memory,
    MemoryDraft,
    MemoryStatus,
    MemoryType,
    Provenance,
    Scope,
    content_hash,
    expiry,
    occurrence_hash,
)
from mnemo.domain.pii import REDACTED, placeholder_refs
from mnemo.domain.projection import (
    BumpStats,
    ContextRecord,
    DropDocuments,
    Outcome,
    OutcomeKind,
    PurgeTenant,
    PutContextRecord,
    PutDocument,
    PutMemory,
    PutOutcome,
    PutTemplate,
    SetStatus,
    Write,
    citation_refusal,
    cited_context_ids,
)
from mnemo.domain.rules import ExampleSelector, Reading, RuleMatch, RuleSet, zone_of
from mnemo.domain.sealed import EncryptionBlock
from mnemo.domain.tool_result import freshness_deadline, tool_memory_draft
from mnemo.handlers import Decision, emit

__all__ = ["CONSUMER", "HANDLED", "RegistrationState", "handle"]

CONSUMER = "registrar"


class RegistrationState(Protocol):
    """The read-model lookups registration needs."""

    def template(self, tenant: str, name: str, version: int) -> ContextTemplate | None: ...

    def context_record(self, tenant: str, request_id: str) -> ContextRecord | None: ...

    def get(self, tenant: str, memory_id: str) -> Memory | None: ...

    def current_for_key(self, tenant: str, stream: str, key: str) -> Memory | None: ...

    def find_by_hash(self, tenant: str, stream: str, content_hash: str) -> Memory | None: ...

    def stream_memories(self, tenant: str, stream: str) -> list[Memory]: ...

    def memory_before(
        self, tenant: str, stream: str, memory_id: str, type: MemoryType
    ) -> Memory | None: ...

    def tenant_memories(self, tenant: str) -> list[Memory]: ...


# (tenant, the block a memory's values go into, a block holding other values under another
# data key of the same key id, their refs) -> those values sealed under the first block's
# data key; nothing for a key that was destroyed (mnemo.sealing.Sealer.reseal)
Resealer = Callable[[str, EncryptionBlock, EncryptionBlock, Sequence[str]], dict[str, str]]
# (tenant, stream, names) -> those of `names` in which the detector finds a value, as an
# event of that stream holds them (placeholders or masks): a speaker the detector sealed
# is compared with the agent_speakers in that form
StandIns = Callable[[str, str, Sequence[str]], Sequence[str]]


class DocumentSource(Protocol):
    """What registration needs of an ingested document, from outside the handler: its
    sections (read from the blob store and parsed again; None once it is forgotten or its
    key destroyed) and the entities of a section's text (the entity rules)."""

    def read(self, event: Envelope, ingested: DocumentIngested) -> ParsedDocument | None: ...

    def entities(self, text: str, language: str) -> tuple[Entity, ...]: ...

    def seal(self, event: Envelope, text: str) -> tuple[str, EncryptionBlock | None]: ...

    def opened(self, tenant: str, text: str, sealed: EncryptionBlock | None) -> str: ...


def _outcome(
    event: Envelope,
    index: int,
    kind: OutcomeKind,
    *,
    memory_id: str | None = None,
    version: int | None = None,
    reason_code: str | None = None,
    detail: str | None = None,
) -> PutOutcome:
    return PutOutcome(
        Outcome(event.tenant, event.event_id, index, kind, memory_id, version, reason_code, detail)
    )


# the zone's name stays out of the detail: the outcome read model keeps details in clear
_UNKNOWN_ZONE = "the time zone is neither an IANA zone name nor a UTC offset such as +08:00"


def _reject(
    event: Envelope, index: int, code: str, detail: str, current: Memory | None = None
) -> Decision:
    payload = MemoryRejected(
        reason_code=code,
        detail=detail,
        rejected_event_id=event.event_id,
        draft_index=index,
        current_memory_id=current.memory_id if current else None,
        current_version=current.version if current else None,
    )
    return Decision(
        events=[emit(event, payload, CONSUMER, str(index))],
        writes=[_outcome(event, index, OutcomeKind.REJECTED, reason_code=code, detail=detail)],
    )


def _digest(event: Envelope, draft: MemoryDraft) -> str:
    """The content hash a draft deduplicates on."""
    digest = content_hash(draft)
    if draft.type is MemoryType.HISTORY:
        # a conversation repeats itself ("Thanks!" in two sessions): each occurrence is a
        # memory of its own; only the same turn at the same instant (a re-import) is a
        # duplicate. Declared memories of other types deduplicate on content alone.
        digest = occurrence_hash(digest, event.occurred_at)
    return digest


def hash_lookups(event: Envelope) -> list[tuple[str, str, str]]:
    """The (tenant, stream, content hash) lookups `handle` will make for a declared memory
    (its event opened), so that a store can read them for a whole batch at once. Only a
    hint: other events, or a payload that does not decode, give none."""
    if event.type != MemoryDeclared.TYPE:
        return []
    try:
        payload = decode_payload(event)
    except (ValidationError, KeyError, ValueError):
        return []
    if not isinstance(payload, MemoryDeclared):
        return []
    return [(event.tenant, event.stream, _digest(event, payload.memory))]


def turn_lookups(event: Envelope) -> list[tuple[str, str, str, MemoryType]]:
    """The (tenant, stream, memory id, type) lookups of the turn before a new history
    memory that `handle` will make to derive its episode (a conversation turn, or a
    declared history memory the client gave no episode), so that a store can read them for
    a whole batch at once. Only a hint, like `hash_lookups`."""
    if event.type not in (MemoryDeclared.TYPE, ObservationRecorded.TYPE):
        return []
    try:
        payload = decode_payload(event)
    except (ValidationError, KeyError, ValueError):
        return []
    if isinstance(payload, MemoryDeclared):
        memory = payload.memory
        if memory.type is not MemoryType.HISTORY or episode_of(memory.tags) is not None:
            return []
    elif not isinstance(payload, ObservationRecorded):
        return []
    return [(event.tenant, event.stream, _memory_id(event, 0), MemoryType.HISTORY)]


def _memory_id(event: Envelope, index: int) -> str:
    """The id of the memory an event registers at `index` (the same on a redelivery)."""
    return derived_id(event.occurred_at, CONSUMER, event.tenant, event.event_id, str(index))


def _register(
    event: Envelope,
    state: RegistrationState,
    draft: MemoryDraft,
    index: int,
    rule_id: str | None,
    speaker: str | None = None,
    *,
    fetched_at: datetime | None = None,
    carried: EncryptionBlock | None = None,
    reseal: Resealer | None = None,
) -> Decision:
    if draft.timezone is not None:
        try:
            zone_of(draft.timezone)
        except ValueError:
            return _reject(event, index, "INVALID_TIMEZONE", _UNKNOWN_ZONE)
    valid_until = expiry(draft, event.occurred_at)
    if valid_until is not None and valid_until <= event.occurred_at:
        return _reject(
            event, index, "ALREADY_EXPIRED", "the memory's validity ends before it began"
        )
    digest = _digest(event, draft)
    if fetched_at is not None:
        # a tool result fetched again with the same answer is a new fetch: it renews the
        # freshness, so it deduplicates only with the same fetch (a redelivery)
        digest = occurrence_hash(digest, fetched_at)
    memory_id = _memory_id(event, index)
    existing = state.find_by_hash(event.tenant, event.stream, digest)
    if existing is not None and existing.memory_id == memory_id:
        # this event's own memory: it registered before (a redelivery), and keeps the
        # outcome it had; what it emitted then is in the log already
        kind = OutcomeKind.SUPERSEDED if existing.supersedes else OutcomeKind.REGISTERED
        return Decision(
            writes=[_outcome(event, index, kind, memory_id=memory_id, version=existing.version)]
        )
    if existing is not None:
        return Decision(
            writes=[
                _outcome(
                    event,
                    index,
                    OutcomeKind.DUPLICATE,
                    memory_id=existing.memory_id,
                    version=existing.version,
                )
            ]
        )
    current = state.current_for_key(event.tenant, event.stream, draft.key) if draft.key else None
    if (
        fetched_at is not None
        and current is not None
        and current.fetched_at is not None
        and fetched_at < current.fetched_at
    ):
        # a late delivery of an earlier fetch: the answer fetched later stays current
        return _reject(
            event,
            index,
            "TOOL_RESULT_OUTDATED",
            "a result fetched later is current under this key",
            current,
        )
    if draft.expected_version is not None and draft.key:
        have = current.version if current else 0
        if have != draft.expected_version:
            # no key in it: the outcome read model keeps details in clear (the agent knows
            # which key it wrote; the event's current_memory_id names the memory)
            detail = f"the key is at version {have}, not {draft.expected_version}"
            return _reject(event, index, "VERSION_CONFLICT", detail, current)
    tags = draft.tags
    if draft.type is MemoryType.HISTORY:
        tags = _derived_tags(event, state, draft, memory_id, speaker)
    memory = Memory(
        memory_id=memory_id,
        tenant=event.tenant,
        stream=event.stream,
        type=draft.type,
        scope=draft.scope,
        content=draft.content.strip(),
        key=draft.key,
        value=draft.value,
        tags=tags,
        semantic_weight=draft.semantic_weight,
        provenance=draft.provenance,
        guard=draft.guard,
        created_at=event.occurred_at,
        valid_until=valid_until,
        stale_after=draft.stale_after,
        timezone=draft.timezone,
        version=current.version + 1 if current else 1,
        supersedes=current.memory_id if current else None,
        source_event_id=event.event_id,
        received_at=event.received_at,
        rule_id=rule_id,
        content_hash=digest,
        sealed=_sealed_for(event, draft, carried, reseal),
        fetched_at=fetched_at,
    )
    decision = Decision()
    decision.events.append(
        emit(event, MemoryRegistered(memory=memory, draft_index=index), CONSUMER, str(index))
    )
    decision.writes.append(PutMemory(memory))
    kind = OutcomeKind.REGISTERED
    if current is not None:
        assert draft.key is not None
        kind = OutcomeKind.SUPERSEDED
        decision.events.append(
            emit(
                event,
                MemorySuperseded(
                    memory_id=current.memory_id, superseded_by=memory.memory_id, key=draft.key
                ),
                CONSUMER,
                str(index),
            )
        )
        decision.writes.append(SetStatus(event.tenant, current.memory_id, MemoryStatus.SUPERSEDED))
    decision.writes.append(
        _outcome(event, index, kind, memory_id=memory.memory_id, version=memory.version)
    )
    return decision


def _derived_tags(
    event: Envelope,
    state: RegistrationState,
    draft: MemoryDraft,
    memory_id: str,
    speaker: str | None,
) -> tuple[str, ...]:
    """A history memory's tags plus what registration derives (mnemo.domain.derivation):
    its episode from the pause since the subject's turn before it, unless the client
    tagged one, and its speaker, from the turn's speaker or else from its text."""
    tags = set(draft.tags)
    if episode_of(draft.tags) is None:
        before = state.memory_before(event.tenant, event.stream, memory_id, MemoryType.HISTORY)
        previous = (before.created_at, before.tags) if before is not None else None
        tags.add(derived_episode(memory_id, event.occurred_at, previous))
    if speaker_name(draft.tags) is None:
        name = speaker or speaker_of(draft.content)
        tag = speaker_tag(name) if name else None
        if tag is not None:
            tags.add(tag)
    return tuple(sorted(tags))


def _turn(
    event: Envelope,
    state: RegistrationState,
    rules: RuleSet,
    payload: ObservationRecorded,
    selector: ExampleSelector | None,
    reseal: Resealer | None = None,
    stand_ins: StandIns | None = None,
) -> Decision:
    """A conversation turn is kept as a history memory (index 0) whatever the rules make of
    it; what they extract follows (index 1 on). An utterance that looked like a memory but
    yielded none adds an `ignored` outcome with its reason, so the agent can act on it."""
    text = f"{payload.speaker}: {payload.text}" if payload.speaker else payload.text
    draft = MemoryDraft(
        type=MemoryType.HISTORY,
        content=text,
        timezone=payload.timezone,
        tags=("turn",),
    )
    decision = _register(event, state, draft, 0, None, payload.speaker)
    try:
        zone_of(payload.timezone)
    except ValueError:
        return decision  # the history memory was already refused with INVALID_TIMEZONE
    # the speaker the event names, else the one its text names ("客服：我一般穿L码")
    speaker = payload.speaker or speaker_of(payload.text)
    sealed = (
        stand_ins(event.tenant, event.stream, rules.agent_speaker_names)
        if stand_ins is not None and speaker is not None and placeholder_refs(speaker)
        else ()
    )
    if rules.spoken_by_agent(speaker, sealed):
        # the agent's own words ("我自己一般穿L码", "I live in Berlin too") are not the
        # user's memories: the turn is history, and only the history rules read it
        reading = Reading()
    else:
        reading = _read(event, state, rules, payload, selector)
    for index, match in enumerate(reading.matches, start=1):
        registered = _register(event, state, match.draft, index, match.rule_id)
        decision.extend(registered)
        decision.extend(_retire(event, state, match, registered))
    if not reading.matches and reading.reason is not None and reading.reason.value in MISSED:
        decision.writes.append(
            _outcome(
                event,
                1,
                OutcomeKind.IGNORED,
                reason_code=reading.reason.value,
                detail=reading.detail,
            )
        )
    if rules.facts:
        decision.extend(
            _facts(event, state, rules, payload, decision, len(reading.matches) + 2, reseal)
        )
    return decision


def _facts(
    event: Envelope,
    state: RegistrationState,
    rules: RuleSet,
    payload: ObservationRecorded,
    turn: Decision,
    first_index: int,
    reseal: Resealer | None = None,
) -> Decision:
    """The typed facts the history rules read in a turn (mnemo.domain.history), each a
    history memory linked to the turn, superseding the fact of the same matter it updates.
    They take indexes from `first_index` on (after the turn and the rules' memories)."""
    assert rules.facts is not None
    decision = Decision()
    updates = rules.facts.read(payload.text, payload.speaker)
    kept = next(
        (
            w.outcome
            for w in turn.writes
            if isinstance(w, PutOutcome) and w.outcome.index == 0 and w.outcome.memory_id
        ),
        None,
    )
    if not updates or kept is None or kept.memory_id is None:
        return decision
    stored = next(
        (
            w.memory
            for w in turn.writes
            if isinstance(w, PutMemory) and w.memory.memory_id == kept.memory_id
        ),
        None,
    ) or state.get(event.tenant, kept.memory_id)
    drafts = rules.facts.fold(
        updates,
        _FactView(state, event.tenant, event.stream),
        turn_id=kept.memory_id,
        episode=episode_of(stored.tags) if stored is not None else None,
        timezone=payload.timezone,
    )
    for offset, fact in enumerate(drafts):
        key = fact.draft.key
        held = state.current_for_key(event.tenant, event.stream, key) if key else None
        decision.extend(
            _register(
                event,
                state,
                fact.draft,
                first_index + offset,
                fact.rule_id,
                # the fields it keeps from the fact it supersedes keep their sealed values
                carried=held.sealed if held is not None else None,
                reseal=reseal,
            )
        )
    return decision


class _FactView:
    """The stream's facts, as the history rules fold them."""

    def __init__(self, state: RegistrationState, tenant: str, stream: str) -> None:
        self.state, self.tenant, self.stream = state, tenant, stream

    def current(self, key: str) -> Memory | None:
        return self.state.current_for_key(self.tenant, self.stream, key)

    def facts(self) -> list[Memory]:
        return [m for m in self.state.stream_memories(self.tenant, self.stream) if is_fact(m)]


# reasons that say an utterance looked like a memory that registration could not complete
MISSED = frozenset(
    {
        "VALUE_NOT_FOUND",
        "TARGET_NOT_FOUND",
        "REQUEST_NOT_UNDERSTOOD",
        "AMBIGUOUS_REFERENCE",
        "FORGET_REQUESTED",
    }
)


class _StreamView:
    """The stream's current memories, as the rules see them for corrections and negations."""

    def __init__(self, state: RegistrationState, tenant: str, stream: str) -> None:
        self.state, self.tenant, self.stream = state, tenant, stream

    def current_for_key(self, key: str) -> Memory | None:
        return self.state.current_for_key(self.tenant, self.stream, key)


def _read(
    event: Envelope,
    state: RegistrationState,
    rules: RuleSet,
    payload: ObservationRecorded,
    selector: ExampleSelector | None,
) -> Reading:
    """What the registration rules make of an utterance, against the stream's memories."""
    return rules.read(
        payload.text,
        event.occurred_at,
        payload.timezone,
        selector=selector,
        stream=_StreamView(state, event.tenant, event.stream),
    )


def _retire(
    event: Envelope, state: RegistrationState, match: RuleMatch, registered: Decision
) -> Decision:
    """A negation ends the memories of the same value it negates ("I no longer drink
    coffee" retires likes=coffee): superseded by the negation, and kept in history."""
    decision = Decision()
    new = next((w.memory for w in registered.writes if isinstance(w, PutMemory)), None)
    if new is None:  # a duplicate or a rejection: nothing new to supersede with
        return decision
    for memory_id in match.retires:
        old = state.get(event.tenant, memory_id)
        if old is None or old.status is not MemoryStatus.ACTIVE or old.key is None:
            continue
        decision.events.append(
            emit(
                event,
                MemorySuperseded(memory_id=memory_id, superseded_by=new.memory_id, key=old.key),
                CONSUMER,
                memory_id,
            )
        )
        decision.writes.append(SetStatus(event.tenant, memory_id, MemoryStatus.SUPERSEDED))
    return decision


def _sealed_for(
    event: Envelope,
    draft: MemoryDraft,
    carried: EncryptionBlock | None = None,
    reseal: Resealer | None = None,
) -> EncryptionBlock | None:
    """The ciphertexts of the placeholders this memory's content, value and sources hold:
    from the event's block, and, for a memory that carries fields over from the one it supersedes
    (a history fact), from that memory's block. One block holds values under one data key:
    a carried value sealed under another data key than the event's is sealed again under
    the event's (`reseal`, which needs the subject's key: a destroyed one gives nothing)."""
    source = draft.provenance
    refs = (
        placeholder_refs(draft.content)
        | placeholder_refs(draft.value or "")
        | placeholder_refs(source.source_id or "")
        | placeholder_refs(source.source_location or "")
    )
    if not refs:
        return None
    blocks = [b for b in (event.encryption, carried) if b is not None and b.values]
    own = [b for b in blocks if refs & set(b.values)]
    if not own:
        return None
    chosen = own[0]
    values = {ref: v for ref, v in chosen.values.items() if ref in refs}
    for other in own[1:]:
        missing = sorted((refs & set(other.values)) - set(values))
        if not missing:
            continue
        if (other.key_id, other.key_version, other.wrapped_key) == (
            chosen.key_id,
            chosen.key_version,
            chosen.wrapped_key,
        ):
            values.update({ref: other.values[ref] for ref in missing})
        elif reseal is not None:
            values.update(reseal(event.tenant, chosen, other, missing))
    return chosen.model_copy(update={"values": values})


def _forget(event: Envelope, state: RegistrationState, request: ForgetRequested) -> Decision:
    if request.memory_id is not None:
        found = state.get(event.tenant, request.memory_id)
        targets = [found] if found is not None and found.stream == event.stream else []
        if not targets:
            return _reject(event, 0, "MEMORY_NOT_FOUND", "no such memory in this stream")
    elif request.tenant:
        targets = state.tenant_memories(event.tenant)
    else:
        targets = state.stream_memories(event.tenant, event.stream)
    decision = Decision()
    for memory in targets:
        if memory.status is MemoryStatus.FORGOTTEN:
            continue
        decision.events.append(
            emit(event, MemoryForgotten(memory_id=memory.memory_id), CONSUMER, memory.memory_id)
        )
        decision.writes.append(
            SetStatus(event.tenant, memory.memory_id, MemoryStatus.FORGOTTEN, erase_content=True)
        )
    if request.memory_id is not None:
        decision.writes.append(DropDocuments(event.tenant, event.stream, request.memory_id))
    elif not request.tenant:
        decision.writes.append(DropDocuments(event.tenant, event.stream))
    if request.tenant:  # after the per-memory events, so every read model drops the lot
        decision.writes.append(PurgeTenant(event.tenant))
    decision.writes.append(_outcome(event, 0, OutcomeKind.APPLIED))
    return decision


def _template(
    event: Envelope, state: RegistrationState, registered: TemplateRegistered
) -> Decision:
    template = registered.template
    existing = state.template(event.tenant, template.name, template.version)
    if existing is not None and existing != template:
        return _reject(
            event,
            0,
            "TEMPLATE_VERSION_EXISTS",
            f"{template.name} version {template.version} is taken; register a new version",
        )
    kind = OutcomeKind.DUPLICATE if existing is not None else OutcomeKind.APPLIED
    return Decision(writes=[PutTemplate(event.tenant, template), _outcome(event, 0, kind)])


def _usage(event: Envelope, payload: EventPayload, state: RegistrationState) -> Decision:
    """Usage counters and the context records that feedback is checked against."""
    at = event.occurred_at
    if isinstance(payload, ContextAssembled):
        record = ContextRecord(
            tenant=event.tenant,
            request_id=payload.request_id,
            stream=event.stream,
            event_id=event.event_id,
            template=payload.template,
            memory_ids=payload.memory_ids,
            truncated=payload.truncated,
            tokens=payload.rendered_tokens,
            sections=payload.sections,
            left_out=payload.left_out,
            budget=payload.budget,
            rendered=payload.rendered,
            occurred_at=event.occurred_at.isoformat(),
        )
        writes: list[Write] = [PutContextRecord(record)]
        writes += [BumpStats(event.tenant, m, at, included=1) for m in payload.memory_ids]
        writes += [BumpStats(event.tenant, m, at, truncated=1) for m in payload.truncated]
        return Decision(writes=writes)
    if isinstance(payload, ContextResponseReported):
        found = state.context_record(event.tenant, payload.request_id)
        if found is None:
            return Decision()
        return Decision(
            writes=[PutContextRecord(replace(found, response_hash=payload.response_hash))]
        )
    if isinstance(payload, MemoryCited):
        return _cited(event, state, payload)
    if isinstance(payload, MemoryCorrected):
        known = _of_stream(event, state, payload.memory_ids)
        return Decision(writes=[BumpStats(event.tenant, m, at, corrected=1) for m in known])
    return Decision()


def _cited(event: Envelope, state: RegistrationState, cited: MemoryCited) -> Decision:
    """A citation credits a memory only when the context it names included it, and only
    the first citation of that memory in that context does: the registrar files its event
    id on the context's record, and the decay consumer moves weight and trust for that
    event alone. However a publisher names its events (a trusted producer writing to the
    topic picks its own ids), one context credits a memory once. The context is on the
    citation's stream, whose order the log keeps, so it is recorded before the citation is
    read; a citation that arrives without one is refused with its reason."""
    record = _cited_context(event, state, cited)
    refusal = citation_refusal(record, event.stream, cited.memory_id)
    if refusal is not None:
        # the context's request id is the caller's own (PRIVATE: it may carry words), and an
        # outcome outlives a forget: it is not repeated here
        detail = f"the citation of {cited.memory_id} in the context it names moves nothing"
        return Decision(
            writes=[_outcome(event, 0, OutcomeKind.REJECTED, reason_code=refusal, detail=detail)]
        )
    assert record is not None
    first = record.credited_by(cited.memory_id)
    if first is not None and first != event.event_id:
        return Decision(
            writes=[
                _outcome(
                    event,
                    0,
                    OutcomeKind.DUPLICATE,
                    memory_id=cited.memory_id,
                    reason_code="ALREADY_CITED",
                    detail=f"the context it names credited the memory already ({first})",
                )
            ]
        )
    writes: list[Write] = [
        _outcome(event, 0, OutcomeKind.APPLIED, memory_id=cited.memory_id),
    ]
    if first is None:
        credited = (*record.credited, (cited.memory_id, event.event_id))
        writes.append(PutContextRecord(replace(record, credited=credited)))
    known = _of_stream(event, state, (cited.memory_id,))
    writes += [BumpStats(event.tenant, m, event.occurred_at, cited=1) for m in known]
    return Decision(writes=writes)


def _cited_context(
    event: Envelope, state: RegistrationState, cited: MemoryCited
) -> ContextRecord | None:
    """The record of the context a citation names (after a forget, through its cause)."""
    for request_id in cited_context_ids(cited.request_id, event.causation_id):
        record = state.context_record(event.tenant, request_id)
        if record is not None:
            return record
    return None


def _of_stream(event: Envelope, state: RegistrationState, memory_ids: Sequence[str]) -> list[str]:
    """The memories named that belong to the event's stream. Citations and corrections of
    another stream's memories are counted where those memories live, from the relay the
    decay consumer appends there (FeedbackRelayed): whether the read model here already
    holds a memory of another partition depends on timing (a rebuild reads partitions in
    another order), and a count must not. Unknown memories (another tenant's, or none)
    count nothing."""
    known = []
    for memory_id in memory_ids:
        memory = state.get(event.tenant, memory_id)
        if memory is not None and memory.stream == event.stream:
            known.append(memory_id)
    return known


def _verification(
    event: Envelope, state: RegistrationState, payload: VerificationDue | MemoryVerified
) -> Decision:
    memory = state.get(event.tenant, payload.memory_id)
    if memory is None or memory.status is not MemoryStatus.ACTIVE:
        if isinstance(payload, MemoryVerified):
            return _reject(event, 0, "MEMORY_NOT_FOUND", "no active memory with that id")
        return Decision()
    if isinstance(payload, VerificationDue):
        return Decision(
            writes=[PutMemory(memory.model_copy(update={"verification_due_at": payload.due_at}))]
        )
    if memory.stream != event.stream:
        # renewed in its own stream, where the decay consumer relays the verification
        # (FeedbackRelayed): a memory's row is written by its stream's partition only
        return Decision(writes=[_outcome(event, 0, OutcomeKind.APPLIED)])
    renewed = memory.model_copy(
        update={"verified_at": event.occurred_at, "verification_due_at": None}
    )
    return Decision(writes=[PutMemory(renewed), _outcome(event, 0, OutcomeKind.APPLIED)])


def _relayed(event: Envelope, state: RegistrationState, relayed: FeedbackRelayed) -> Decision:
    """Feedback published on another stream about memories of this one: citations and
    corrections are counted here, a verification renews them. (Uses in a context are
    counted from the context's own event.)"""
    at = event.occurred_at
    if relayed.feedback == MemoryCited.TYPE:
        known = _of_stream(event, state, relayed.memory_ids)
        return Decision(writes=[BumpStats(event.tenant, m, at, cited=1) for m in known])
    if relayed.feedback == MemoryCorrected.TYPE:
        known = _of_stream(event, state, relayed.memory_ids)
        return Decision(writes=[BumpStats(event.tenant, m, at, corrected=1) for m in known])
    if relayed.feedback != MemoryVerified.TYPE:
        return Decision()
    writes: list[Write] = []
    for memory_id in relayed.memory_ids:
        memory = state.get(event.tenant, memory_id)
        if memory is None or memory.status is not MemoryStatus.ACTIVE:
            continue
        renewed = memory.model_copy(
            update={"verified_at": event.occurred_at, "verification_due_at": None}
        )
        writes.append(PutMemory(renewed))
    return Decision(writes=writes)


# the event types registration decides on or projects (handlers/registry.py lists them)
HANDLED = frozenset(
    {
        MemoryDeclared.TYPE,
        MemoryArchived.TYPE,
        VerificationDue.TYPE,
        MemoryVerified.TYPE,
        ObservationRecorded.TYPE,
        ForgetRequested.TYPE,
        MemoryExpired.TYPE,
        MemoryDecayed.TYPE,
        TemplateRegistered.TYPE,
        MemoriesRewrapped.TYPE,
        ContextAssembled.TYPE,
        ContextResponseReported.TYPE,
        MemoryCited.TYPE,
        MemoryCorrected.TYPE,
        FeedbackRelayed.TYPE,
        ToolResultRecorded.TYPE,
        DocumentIngested.TYPE,
    }
)


_COMMANDS = {
    MemoryDeclared.TYPE,
    DocumentIngested.TYPE,
    ToolResultRecorded.TYPE,
    ObservationRecorded.TYPE,
    ForgetRequested.TYPE,
}


def is_command(event: Envelope) -> bool:
    """Whether registration decides on this event (and so may have decided before)."""
    return event.type in _COMMANDS


def replay(
    event: Envelope,
    prior: Sequence[Envelope],
    state: RegistrationState,
    documents: DocumentSource | None = None,
) -> Decision:
    """Project the facts registration recorded for `event` the first time, instead of
    deciding again: a rebuild then reproduces what the log says, even after the rules
    changed."""
    writes: list[Write] = []
    for fact in prior:
        payload = decode_payload(fact)
        if isinstance(payload, MemoryRegistered):
            memory = payload.memory
            kind = OutcomeKind.SUPERSEDED if memory.supersedes else OutcomeKind.REGISTERED
            writes.append(PutMemory(memory))
            writes.append(
                _outcome(
                    event,
                    payload.draft_index,
                    kind,
                    memory_id=memory.memory_id,
                    version=memory.version,
                )
            )
        elif isinstance(payload, MemorySuperseded):
            writes.append(SetStatus(event.tenant, payload.memory_id, MemoryStatus.SUPERSEDED))
        elif isinstance(payload, MemoryRejected):
            writes.append(
                _outcome(
                    event,
                    payload.draft_index,
                    OutcomeKind.REJECTED,
                    reason_code=payload.reason_code,
                    detail=payload.detail,
                )
            )
        elif isinstance(payload, MemoryForgotten):
            writes.append(
                SetStatus(
                    event.tenant, payload.memory_id, MemoryStatus.FORGOTTEN, erase_content=True
                )
            )
    if event.type == ForgetRequested.TYPE and event.payload.get("tenant") is True:
        writes.append(PurgeTenant(event.tenant))
    if event.type == ForgetRequested.TYPE and event.payload.get("tenant") is not True:
        memory_id = event.payload.get("memory_id")
        writes.append(DropDocuments(event.tenant, event.stream, memory_id))
    if event.type == DocumentIngested.TYPE and documents is not None:
        registered = [
            payload.memory
            for payload in (decode_payload(f) for f in prior)
            if isinstance(payload, MemoryRegistered)
        ]
        ingested = decode_payload(event)
        assert isinstance(ingested, DocumentIngested)
        sections = [(m.memory_id, _section_of(m), m.content, m.sealed) for m in registered]
        put = _document_write(event, ingested, sections, documents)
        if put is not None:
            writes.append(put)
    if event.type == ForgetRequested.TYPE and not any(isinstance(w, PutOutcome) for w in writes):
        writes.append(_outcome(event, 0, OutcomeKind.APPLIED))
    return Decision(writes=writes)


def handle(
    event: Envelope,
    state: RegistrationState,
    rules: RuleSet,
    prior: Sequence[Envelope] = (),
    selector: ExampleSelector | None = None,
    documents: DocumentSource | None = None,
    reseal: Resealer | None = None,
    stand_ins: StandIns | None = None,
) -> Decision:
    """Registration's decision for one event of the log. `prior` holds the facts it
    recorded for this event before (on a redelivery or a rebuild); those are projected
    again rather than decided anew. `selector` ranks the rules whose examples an utterance
    is close to (the platform measures it with its embedder); without one, only the rules'
    patterns trigger. `reseal` seals a value a history fact carries over from its previous
    version again under the new version's data key (without it, such a value is carried
    only when both versions' values share a data key). `stand_ins` gives agent_speakers as
    the detector leaves them in the event's stream, for a turn whose speaker it sealed."""
    if event.type not in HANDLED:
        return Decision()
    if prior:
        return replay(event, prior, state, documents)
    try:
        payload = decode_payload(event)
    except (ValidationError, KeyError, ValueError) as exc:
        return _reject(event, 0, "INVALID_PAYLOAD", str(exc).splitlines()[0][:300])
    if _words_gone(payload):
        return _decided_without_words(event, state, payload)
    if isinstance(payload, MemoryDeclared):
        return _register(event, state, payload.memory, 0, None)
    if isinstance(payload, ObservationRecorded):
        if payload.kind == "action":
            return Decision(
                writes=[
                    _outcome(event, 0, OutcomeKind.IGNORED, reason_code="ACTION_NOT_REMEMBERED")
                ]
            )
        if payload.kind == "turn":
            return _turn(event, state, rules, payload, selector, reseal, stand_ins)
        try:
            zone_of(payload.timezone)
        except ValueError:
            return _reject(event, 0, "INVALID_TIMEZONE", _UNKNOWN_ZONE)
        reading = _read(event, state, rules, payload, selector)
        if not reading.matches:
            reason = reading.reason.value if reading.reason else "NO_RULE_MATCHED"
            return Decision(
                writes=[
                    _outcome(
                        event, 0, OutcomeKind.IGNORED, reason_code=reason, detail=reading.detail
                    )
                ]
            )
        decision = Decision()
        for index, match in enumerate(reading.matches):
            registered = _register(event, state, match.draft, index, match.rule_id)
            decision.extend(registered)
            decision.extend(_retire(event, state, match, registered))
        return decision
    if isinstance(payload, ForgetRequested):
        return _forget(event, state, payload)
    if isinstance(payload, ToolResultRecorded):
        return _tool_result(event, state, payload)
    if isinstance(payload, DocumentIngested):
        return _document(event, state, payload, documents)
    if isinstance(payload, MemoryExpired | MemoryArchived):
        memory = state.get(event.tenant, payload.memory_id)
        if memory is None or memory.status is not MemoryStatus.ACTIVE:
            return Decision()
        status = (
            MemoryStatus.EXPIRED if isinstance(payload, MemoryExpired) else MemoryStatus.ARCHIVED
        )
        return Decision(writes=[SetStatus(event.tenant, memory.memory_id, status)])
    if isinstance(payload, VerificationDue | MemoryVerified):
        return _verification(event, state, payload)
    if isinstance(payload, MemoryDecayed):
        memory = state.get(event.tenant, payload.memory_id)
        if memory is None:
            return Decision()
        update: dict[str, object] = {"semantic_weight": payload.semantic_weight}
        if payload.trust is not None:
            update["provenance"] = memory.provenance.model_copy(update={"trust": payload.trust})
        return Decision(writes=[PutMemory(memory.model_copy(update=update))])
    if isinstance(payload, TemplateRegistered):
        return _template(event, state, payload)
    if isinstance(payload, MemoriesRewrapped):
        return _rewrap(event, state, payload)
    if isinstance(payload, FeedbackRelayed):
        return _relayed(event, state, payload)
    return _usage(event, payload, state)


def _words_gone(payload: EventPayload) -> bool:
    """Whether a command's words read as the redaction marker: sealed on a stream whose key
    was shredded (its subject, or the tenant, forgotten), so no one can read them again.
    An observation that is an action carries no words to remember."""
    if isinstance(payload, MemoryDeclared):
        return payload.memory.content == REDACTED
    if isinstance(payload, ToolResultRecorded):
        return payload.result == REDACTED
    if isinstance(payload, ObservationRecorded):
        return payload.kind == "turn" and payload.text == REDACTED
    if isinstance(payload, DocumentIngested):
        # its bytes went with the key (and the blob): every section is gone with them
        return payload.filename == REDACTED
    return False


def _decided_without_words(
    event: Envelope, state: RegistrationState, payload: EventPayload
) -> Decision:
    """A command whose words are gone and that has no consequences in the log: a rebuild
    after its subject's forget (or a registrar that reads it after the forget). It
    registers nothing and emits nothing (a memory made of redaction markers, appended to a
    forgotten stream, is what a rebuild must never add). Decided while readable, such a
    command registered nothing either: it was a duplicate of an active memory, found here
    again under its key when it has one (the keys stand in the log as keyed hashes, the
    same in the command and in the memory it duplicated); one without a key cannot be told
    apart any more, and is IGNORED with CONTENT_FORGOTTEN."""
    key: str | None = None
    if isinstance(payload, MemoryDeclared):
        key = payload.memory.key
    elif isinstance(payload, ToolResultRecorded):
        key = payload.key
    current = state.current_for_key(event.tenant, event.stream, key) if key else None
    if current is not None:
        return Decision(
            writes=[
                _outcome(
                    event,
                    0,
                    OutcomeKind.DUPLICATE,
                    memory_id=current.memory_id,
                    version=current.version,
                )
            ]
        )
    detail = "its words were forgotten before they could be decided on again"
    return Decision(
        writes=[
            _outcome(event, 0, OutcomeKind.IGNORED, reason_code="CONTENT_FORGOTTEN", detail=detail)
        ]
    )


def wrapped_digest(wrapped_key: str) -> str:
    """How a MemoriesRewrapped event names the wrapped key it replaces."""
    return hashlib.sha256(wrapped_key.encode("ascii")).hexdigest()[:16]


def _rewrap(event: Envelope, state: RegistrationState, rewrapped: MemoriesRewrapped) -> Decision:
    """A memory takes its new wrapped key only while it still holds the one replaced, under
    that key id: one forgotten (erased) or sealed otherwise meanwhile stays as it is."""
    writes: list[Write] = []
    for entry in rewrapped.memories:
        memory = state.get(event.tenant, entry.memory_id)
        sealed = memory.sealed if memory is not None else None
        if (
            memory is None
            or sealed is None
            or sealed.key_id != rewrapped.key_id
            or sealed.wrapped_key is None
            or wrapped_digest(sealed.wrapped_key) != entry.previous
        ):
            continue
        moved = sealed.model_copy(
            update={"wrapped_key": entry.wrapped_key, "key_version": rewrapped.key_version}
        )
        writes.append(PutMemory(memory.model_copy(update={"sealed": moved})))
    writes.append(_outcome(event, 0, OutcomeKind.APPLIED))
    return Decision(writes=writes)


def _tool_result(
    event: Envelope, state: RegistrationState, recorded: ToolResultRecorded
) -> Decision:
    """A tool's result becomes an external memory with provenance `tool:<name>`, fresh
    until fetched_at + fresh_for_seconds (mnemo.domain.tool_result). One already stale
    when it reaches the log is refused (TOOL_RESULT_STALE): it was never fresh here."""
    deadline = freshness_deadline(recorded.fetched_at, recorded.fresh_for_seconds)
    if deadline <= event.occurred_at:
        return _reject(
            event, 0, "TOOL_RESULT_STALE", "the result's freshness ended before it was recorded"
        )
    trigger = recorded.trigger
    draft = tool_memory_draft(
        recorded.tool,
        recorded.arguments,
        recorded.result,
        recorded.source,
        recorded.fetched_at,
        recorded.fresh_for_seconds,
        recorded.key,
        recorded.trust,
        (trigger.trigger_id, trigger.memory_id) if trigger is not None else None,
    )
    # a result belongs where it was recorded: a session's is the session's (as a document's)
    draft = draft.model_copy(update={"scope": _scope_of(event.stream)})
    return _register(event, state, draft, 0, None, fetched_at=recorded.fetched_at)


# ---- documents (mnemo.domain.document_index) -----------------------------------------

_SCOPES = {"user": Scope.USER, "session": Scope.SESSION, "agent": Scope.AGENT}


def _scope_of(stream: str) -> Scope:
    return _SCOPES.get(stream.split(":", 1)[0], Scope.TENANT)


def _section_of(memory: Memory) -> int:
    for tag in memory.tags:
        if tag.startswith("section:") and tag[8:].isdigit():
            return int(tag[8:])
    return 0


def _document_write(
    event: Envelope,
    ingested: DocumentIngested,
    sections: Sequence[tuple[str, int, str, EncryptionBlock | None]],
    documents: DocumentSource,
) -> PutDocument | None:
    """The document's record and the entity rows of the sections this event registered
    (memory id, section index, text with its placeholders, their ciphertexts); None when it
    registered none (the same document ingested again into the same stream: the first
    event's rows stand). The entities are read from the text opened."""
    if not sections:
        return None
    record = DocumentRecord(
        tenant=event.tenant,
        document_id=ingested.document_id,
        stream=event.stream,
        event_id=event.event_id,
        sha256=ingested.sha256,
        media_type=ingested.media_type,
        pages=ingested.pages,
        sections=ingested.sections,
        language=ingested.language,
        ingested_at=event.occurred_at.isoformat(),
    )
    rows = []
    for memory_id, index, text, sealed in sorted(sections, key=lambda s: s[1]):
        opened = documents.opened(event.tenant, text, sealed)
        found = documents.entities(opened, ingested.language)
        rows += entity_rows(
            event.tenant, ingested.document_id, event.stream, memory_id, index, found
        )
    return PutDocument(record, tuple(rows))


def _document(
    event: Envelope,
    state: RegistrationState,
    ingested: DocumentIngested,
    documents: DocumentSource | None,
) -> Decision:
    """Each section of an ingested document becomes a `long_term` memory (provenance: the
    document and the section's place, `p.3 §8.2`), and its entities rows of the entity read
    model. A document whose bytes are gone by the time the registrar reads it (forgotten,
    or its key destroyed) is rejected with DOCUMENT_UNAVAILABLE."""
    parsed = documents.read(event, ingested) if documents is not None else None
    if parsed is None or documents is None:
        return _reject(
            event,
            0,
            "DOCUMENT_UNAVAILABLE",
            "the document's bytes cannot be read: forgotten, or its key destroyed",
        )
    decision = Decision()
    registered: list[tuple[str, int, str, EncryptionBlock | None]] = []
    for section in parsed.sections:
        # the values the tenant's policy encrypts become placeholders, as in any memory
        text, sealed = documents.seal(event, section.text)
        draft = MemoryDraft(
            type=MemoryType.LONG_TERM,
            scope=_scope_of(event.stream),
            content=text,
            tags=(DOCUMENT_TAG, f"document:{ingested.document_id}", f"section:{section.index}"),
            provenance=Provenance(
                source_id=f"document:{ingested.document_id}",
                source_location=location(section),
                trust=0.7,
            ),
        )
        outcome = _register(event, state, draft, section.index, None, carried=sealed)
        decision.extend(outcome)
        for write in outcome.writes:
            if isinstance(write, PutMemory):
                memory = write.memory
                registered.append((memory.memory_id, section.index, memory.content, memory.sealed))
    put = _document_write(event, ingested, registered, documents)
    if put is not None:
        decision.writes.append(put)
    return decision
