"""A memory's life: which events touched it. A pure reading of each event; the registrar
projects the entries into a timeline read model that the console shows."""

from __future__ import annotations

from mnemo.domain.events import Envelope
from mnemo.domain.projection import PutTimeline, TimelineEntry

__all__ = ["entries"]

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
        detail = str(p.get("reason") or p.get("position") or "")
        if event.type == "MemoryDecayed":
            detail = f"weight {p.get('semantic_weight')}: {p.get('reason', '')}"
        return [_entry(event, offset, p["memory_id"], _BY_MEMORY_ID[event.type], detail)]
    if event.type == "MemoryCorrected":
        return [
            _entry(event, offset, m, "corrected", str(p.get("reason", "")))
            for m in p.get("memory_ids", [])
        ]
    if event.type == "ContextAssembled":
        rid = str(p.get("request_id", ""))
        used = [_entry(event, offset, m, "in_context", rid) for m in p.get("memory_ids", [])]
        cut = [_entry(event, offset, m, "truncated", rid) for m in p.get("truncated", [])]
        return used + cut
    return []
