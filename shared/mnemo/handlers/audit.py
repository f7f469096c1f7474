"""Audit: an append-only record of every event, hash-chained per (tenant, stream).

Each link's hash covers the previous link's hash and the event's canonical JSON, so
changing, removing or reordering any record breaks every link after it in its stream.

A chain per stream, not per tenant, because a stream is the unit the log orders: its
events have gapless sequence numbers and, in the distributed mode, sit in one partition
consumed in order. Link n therefore holds the stream's event n on every replay, however
the partitions of a tenant interleave, and a rebuilt chain is identical to the live one
(a tenant-wide chain would follow the interleaving instead). Several audit consumers can
share a tenant's partitions: a stream's links are written by whoever owns its partition,
and two writers of the same link write the same row.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence

from mnemo.domain.events import Envelope
from mnemo.domain.projection import AuditRecord, PutAudit
from mnemo.handlers import Decision

__all__ = ["CONSUMER", "GENESIS", "canonical", "handle", "heads_digest", "link_hash", "verify"]

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
    """The link of a sequenced event: number n = the event's seq in its stream; `last` is
    that stream's last link, if any.

    A link is a pure function of the chain before it, so writing it twice (a redelivered
    batch, or a consumer that lost its partition and has not noticed yet) writes the same
    row. An event at or below the stream's last link is linked already: nothing to do. A
    stream whose chain stops short of seq - 1 gets the link anyway, chained to the last
    one it has; verification then names the gap rather than the consumer stalling."""
    seq = event.seq
    if seq is None:
        raise ValueError("only sequenced events are linked")
    if last is not None and last.n >= seq:
        return Decision()
    prev_hash = last.hash if last is not None else GENESIS
    record = AuditRecord(
        tenant=event.tenant,
        stream=event.stream,
        n=seq,
        event_id=event.event_id,
        event_type=event.type,
        offset=offset,
        prev_hash=prev_hash,
        hash=link_hash(prev_hash, canonical(event)),
    )
    return Decision(writes=[PutAudit(record)])


def verify(
    records: Sequence[AuditRecord],
    events: dict[str, Envelope],
    start_hash: str = GENESIS,
    start_n: int = 0,
) -> int | None:
    """The number n of the first broken link of one stream's chain, or None when it holds.

    `records` are consecutive links after link `start_n` (whose hash is `start_hash`);
    `events` maps event ids to the events as the log holds them now. A link is broken when
    it is not the next number, when it does not follow the link before it, when its event
    is missing, changed, of another stream or numbered otherwise, or when its event appears
    twice.
    """
    prev, expected = start_hash, start_n + 1
    seen: set[str] = set()
    for record in records:
        event = events.get(record.event_id)
        if (
            record.n != expected
            or event is None
            or record.prev_hash != prev
            or record.event_id in seen
            or event.seq != record.n
            or event.stream != record.stream
        ):
            return record.n
        seen.add(record.event_id)
        if link_hash(prev, canonical(event)) != record.hash:
            return record.n
        prev, expected = record.hash, expected + 1
    return None


def heads_digest(heads: Sequence[AuditRecord]) -> str:
    """One hash over every stream's last link: the tenant's whole trail in 64 hex digits,
    the same for the live read models and a rebuild."""
    digest = hashlib.sha256()
    for head in sorted(heads, key=lambda h: h.stream):
        digest.update(f"{head.stream}\t{head.n}\t{head.hash}\n".encode())
    return digest.hexdigest()
