"""Audit: an append-only record of every event, hash-chained per tenant.

Each link's hash covers the previous link's hash and the event's canonical JSON, so
changing, removing or reordering any record breaks every link after it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from mnemo.domain.events import Envelope
from mnemo.domain.projection import AuditRecord, PutAudit
from mnemo.handlers import Decision

__all__ = ["CONSUMER", "GENESIS", "canonical", "handle", "link_hash", "verify"]

CONSUMER = "audit"
GENESIS = "0" * 64


def canonical(event: Envelope) -> str:
    """The event as JSON with sorted keys and no spaces: the same bytes every time."""
    return json.dumps(
        event.model_dump(mode="json"), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )


def link_hash(prev_hash: str, event_json: str) -> str:
    return hashlib.sha256(f"{prev_hash}\n{event_json}".encode()).hexdigest()


def handle(event: Envelope, offset: int, last: AuditRecord | None) -> Decision:
    prev_hash = last.hash if last else GENESIS
    record = AuditRecord(
        tenant=event.tenant,
        n=(last.n + 1) if last else 1,
        event_id=event.event_id,
        event_type=event.type,
        offset=offset,
        prev_hash=prev_hash,
        hash=link_hash(prev_hash, canonical(event)),
    )
    return Decision(writes=[PutAudit(record)])


def verify(
    records: Sequence[AuditRecord], events: dict[str, Envelope], start_hash: str = GENESIS
) -> int | None:
    """The number n of the first broken link, or None when the chain holds.

    `events` maps event ids to the events as the log holds them now.
    """
    prev = start_hash
    seen: set[str] = set()
    for record in records:
        event = events.get(record.event_id)
        if event is None or record.prev_hash != prev or record.event_id in seen:
            return record.n
        seen.add(record.event_id)
        if link_hash(prev, canonical(event)) != record.hash:
            return record.n
        prev = record.hash
    return None
