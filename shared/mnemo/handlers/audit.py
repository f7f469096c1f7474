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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta

from mnemo.domain.checkpoint import FIRST, Checkpoint, checkpoint_digest
from mnemo.domain.events import Envelope
from mnemo.domain.projection import AuditRecord, PutAudit
from mnemo.handlers import Decision

__all__ = [
    "CONSUMER",
    "GENESIS",
    "CheckpointProblem",
    "canonical",
    "check_anchor",
    "check_checkpoints",
    "checkpoint_due",
    "handle",
    "heads_digest",
    "link_hash",
    "verify",
]

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


# ---- signed checkpoints (ADR 0017) ----------------------------------------------------------


def checkpoint_due(
    last_n: int, head_n: int, unsigned_since: datetime, now: datetime, every: int, seconds: float
) -> bool:
    """Whether a stream whose last checkpoint signed link `last_n` (0: none) and whose chain
    now ends at `head_n` gets a checkpoint: after `every` new links, or once the first link
    past the checkpoint has waited `seconds`."""
    if head_n <= last_n:
        return False
    return head_n - last_n >= every or now - unsigned_since >= timedelta(seconds=seconds)


@dataclass(frozen=True, slots=True)
class CheckpointProblem:
    """Why a stream's signed checkpoints and its chain disagree; `code` is stable."""

    code: str  # AUDIT_SIGNATURE_INVALID, AUDIT_CHECKPOINT_MISSING, AUDIT_CHECKPOINT_MISMATCH
    # or AUDIT_TAIL_MISSING
    stream: str
    n: int  # the link the checkpoint signed
    index: int  # the checkpoint's number in its stream
    message: str


def check_checkpoints(
    stream: str,
    checkpoints: Sequence[Checkpoint],
    head_n: int,
    hashes: Mapping[int, str],
    valid: Callable[[Checkpoint], bool],
) -> CheckpointProblem | None:
    """The first problem with one stream's checkpoints (by index), or None.

    `head_n` is the stream's chain length as verified against the log, `hashes` the hash of
    each verified link a checkpoint names, `valid` checks a checkpoint's signature. In order
    for each checkpoint: its signature holds; it follows the one before (index + 1, `prev`
    is that one's digest, a link no lower); the chain still reaches its link (else the tail
    was cut); and that link has the signed hash (else the log, or the chain, was changed
    before it, however the links were recomputed)."""
    before: Checkpoint | None = None
    for cp in checkpoints:
        if cp.stream != stream or not valid(cp):
            return CheckpointProblem(
                "AUDIT_SIGNATURE_INVALID",
                stream,
                cp.n,
                cp.index,
                f"{stream} checkpoint {cp.index} (link {cp.n}): the signature does not verify",
            )
        expected = (
            (1, FIRST, 0)
            if before is None
            else (before.index + 1, checkpoint_digest(before), before.n)
        )
        if cp.index != expected[0] or cp.prev != expected[1] or cp.n < expected[2]:
            return CheckpointProblem(
                "AUDIT_CHECKPOINT_MISSING",
                stream,
                cp.n,
                cp.index,
                f"{stream} checkpoint {cp.index} (link {cp.n}) does not follow checkpoint "
                f"{expected[0] - 1}: a checkpoint was removed or replaced",
            )
        if cp.n > head_n:
            return CheckpointProblem(
                "AUDIT_TAIL_MISSING",
                stream,
                cp.n,
                cp.index,
                f"{stream} checkpoint {cp.index} signed link {cp.n}, but the chain ends at "
                f"link {head_n}: events were removed from the end of the stream",
            )
        if hashes.get(cp.n) != cp.hash:
            return CheckpointProblem(
                "AUDIT_CHECKPOINT_MISMATCH",
                stream,
                cp.n,
                cp.index,
                f"{stream} checkpoint {cp.index}: link {cp.n} is not the one signed; the log "
                f"was changed at or before event {cp.n}",
            )
        before = cp
    return None


def check_anchor(
    stream: str,
    anchor: Checkpoint,
    checkpoints: Sequence[Checkpoint],
    valid: Callable[[Checkpoint], bool],
) -> CheckpointProblem | None:
    """Whether a stream's checkpoints in the store (by index, already checked with
    `check_checkpoints`) still reach its anchor: the newest checkpoint recorded outside the
    store, which only moves forward. The store may be ahead of the anchor (anchoring
    follows storing); it may not be behind it. A store that lost the anchored checkpoint
    (and with it, usually, the events after an older one) was rolled back
    (AUDIT_CHECKPOINT_ROLLBACK), and so was a store holding another checkpoint under the
    anchored index (rolled back, then signed again). An anchor whose signature does not
    verify was not written by the audit consumer (AUDIT_SIGNATURE_INVALID)."""
    stored = next((cp for cp in checkpoints if cp.index == anchor.index), None)
    if stored is not None:
        if checkpoint_digest(stored) == checkpoint_digest(anchor):
            return None
        return CheckpointProblem(
            "AUDIT_CHECKPOINT_ROLLBACK",
            stream,
            anchor.n,
            anchor.index,
            f"{stream} checkpoint {anchor.index} is not the one anchored outside the store: "
            "the stream was rolled back before it and signed again",
        )
    if anchor.stream != stream or not valid(anchor):
        return CheckpointProblem(
            "AUDIT_SIGNATURE_INVALID",
            stream,
            anchor.n,
            anchor.index,
            f"{stream}: the anchored checkpoint {anchor.index} (link {anchor.n}): the "
            "signature does not verify",
        )
    newest = checkpoints[-1] if checkpoints else None
    held = f"checkpoint {newest.index} (link {newest.n})" if newest else "no checkpoint"
    return CheckpointProblem(
        "AUDIT_CHECKPOINT_ROLLBACK",
        stream,
        anchor.n,
        anchor.index,
        f"{stream}: the store's newest is {held}, but checkpoint {anchor.index} (link "
        f"{anchor.n}) was signed and anchored: the stream was rolled back, its newer "
        "checkpoints and events removed",
    )
