"""A memory's life: which events touched it. A pure reading of each event into the
timeline read model that the console shows; the registrar projects it (handlers/registry.py
declares it).

An entry's detail never holds a person's words: the timeline is no sealed event and is
not purged when its user is forgotten. A correction's or a contradiction's reason stays
in its event, sealed on a user stream; the memory's life view opens it from the log
(`WORDS_FROM_EVENT`), so a forgotten user's reasons are gone with their key."""

from __future__ import annotations

from mnemo.domain.events import Envelope
from mnemo.domain.projection import PutTimeline, TimelineEntry

__all__ = ["HANDLED", "WORDS_FROM_EVENT", "entries"]

# the entries whose event holds a reason in a person's words (its `reason` field): the
# read model keeps the entry without it
WORDS_FROM_EVENT = frozenset({"corrected", "contradicted"})

_BY_MEMORY_ID = {
    "MemorySuperseded": "superseded",
    "MemoryExpired": "expired",
    "MemoryForgotten": "forgotten",
    "MemoryArchived": "archived",
    "MemoryDecayed": "decayed",
    "MemoryCited": "cited",
    "MemoryVerified": "verified",
    "VerificationDue": "verification_due",
    "MemoryContradicted": "contradicted",
}
# the event types that give timeline entries (handlers/registry.py lists them)
HANDLED = frozenset({"MemoryRegistered", "MemoryCorrected", "ContextAssembled", *_BY_MEMORY_ID})


def _entry(
    event: Envelope, offset: int, memory_id: str, what: str, detail: str = ""
) -> PutTimeline:
    return PutTimeline(
        TimelineEntry(
            tenant=event.tenant,
            memory_id=memory_id,
            offset=offset,
            event_id=event.event_id,
            event_type=event.type,
            what=what,
            occurred_at=event.occurred_at.isoformat(),
            detail=detail[:300],
        )
    )


def entries(event: Envelope, offset: int) -> list[PutTimeline]:
    """Timeline entries for every memory an event touched."""
    p = event.payload
    if event.type == "MemoryRegistered":
        memory = p["memory"]
        what = "superseding" if memory.get("supersedes") else "registered"
        return [
            _entry(event, offset, memory["memory_id"], what, f"version {memory.get('version', 1)}")
        ]
    if event.type in _BY_MEMORY_ID and isinstance(p.get("memory_id"), str):
        what = _BY_MEMORY_ID[event.type]
        detail = "" if what in WORDS_FROM_EVENT else str(p.get("position") or "")
        if event.type == "MemoryDecayed":
            # a code; one logged before it was (`corrected:<words>`) is cut to the code
            code = str(p.get("reason", "")).split(":", 1)
            coded = code[0] if code[0] in WORDS_FROM_EVENT else ":".join(code)
            detail = f"weight {p.get('semantic_weight')}: {coded}"
        return [_entry(event, offset, p["memory_id"], what, detail)]
    if event.type == "MemoryCorrected":
        return [_entry(event, offset, m, "corrected") for m in p.get("memory_ids", [])]
    if event.type == "ContextAssembled":
        rid = str(p.get("request_id", ""))
        used = [_entry(event, offset, m, "in_context", rid) for m in p.get("memory_ids", [])]
        cut = [_entry(event, offset, m, "truncated", rid) for m in p.get("truncated", [])]
        return used + cut
    return []
