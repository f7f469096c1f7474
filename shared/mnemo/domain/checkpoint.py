"""Signed checkpoints of the audit chains: what is signed, and how checkpoints chain.

A checkpoint says "link n of this tenant's stream had this hash", signed by a key the
store's writers cannot use to forge (ADR 0017). Checkpoints of a stream are numbered from 1
(`index`) and each names the digest of the one before it (`prev`), so one removed from the
middle of a stream's checkpoints, or two swapped, no longer line up.

The signed message is a fixed line of text: a version tag and the fields separated by tabs
and percent-escaped, so two different checkpoints never sign the same bytes.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import quote

from mnemo.domain.errors import ConflictError

__all__ = [
    "FIRST",
    "Checkpoint",
    "Signature",
    "anchor_moves",
    "checkpoint_digest",
    "checkpoint_from_record",
    "checkpoint_message",
    "checkpoint_record",
]

FIRST = "0" * 64  # the `prev` of a stream's first checkpoint
_TAG = "mnemo-audit-checkpoint/1"


@dataclass(frozen=True, slots=True)
class Signature:
    """A signature as the signer made it: the key version it used and its text form."""

    key_version: int
    value: str


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """Link `n` of a (tenant, stream) chain had hash `hash` at `signed_at`."""

    tenant: str
    stream: str
    index: int  # 1, 2, ... within the stream
    n: int  # the link signed: the stream's sequence number, so the chain's length
    hash: str  # that link's hash
    prev: str  # checkpoint_digest of checkpoint index - 1, FIRST for index 1
    signed_at: datetime
    signature: Signature

    def message(self) -> bytes:
        return checkpoint_message(
            self.tenant, self.stream, self.index, self.n, self.hash, self.prev, self.signed_at
        )


def checkpoint_message(
    tenant: str, stream: str, index: int, n: int, link_hash: str, prev: str, signed_at: datetime
) -> bytes:
    """The bytes a checkpoint's signature covers."""
    when = signed_at.astimezone(UTC).isoformat(timespec="microseconds")
    fields = [_TAG, tenant, stream, str(index), str(n), link_hash, prev, when]
    return "\t".join(quote(f, safe="") for f in fields).encode("ascii")


def checkpoint_digest(checkpoint: Checkpoint) -> str:
    """What the next checkpoint of the stream names as `prev`: the message and signature."""
    digest = hashlib.sha256(checkpoint.message())
    digest.update(f"\n{checkpoint.signature.key_version}\n{checkpoint.signature.value}".encode())
    return digest.hexdigest()


def checkpoint_record(checkpoint: Checkpoint) -> dict[str, str | int]:
    """A checkpoint as a flat JSON object (an anchor kept outside the store)."""
    c = checkpoint
    return {
        "format": 1,
        "tenant": c.tenant,
        "stream": c.stream,
        "index": c.index,
        "n": c.n,
        "hash": c.hash,
        "prev": c.prev,
        "signed_at": c.signed_at.astimezone(UTC).isoformat(timespec="microseconds"),
        "key_version": c.signature.key_version,
        "signature": c.signature.value,
    }


def checkpoint_from_record(record: object) -> Checkpoint:
    """The checkpoint `checkpoint_record` wrote; ValueError for anything else."""
    if not isinstance(record, dict) or record.get("format") != 1:
        raise ValueError("not a checkpoint record")
    try:
        text = {k: record[k] for k in ("tenant", "stream", "hash", "prev", "signature")}
        numbers = {k: record[k] for k in ("index", "n", "key_version")}
        signed_at = datetime.fromisoformat(record["signed_at"])
    except (KeyError, TypeError) as exc:
        raise ValueError(f"a checkpoint record without {exc}") from None
    if not all(isinstance(v, str) for v in text.values()):
        raise ValueError("a checkpoint record with a field of the wrong type")
    if not all(type(v) is int and v >= 0 for v in numbers.values()):
        raise ValueError("a checkpoint record with a field of the wrong type")
    if signed_at.tzinfo is None:
        raise ValueError("a checkpoint record without a time zone")
    return Checkpoint(
        text["tenant"],
        text["stream"],
        numbers["index"],
        numbers["n"],
        text["hash"],
        text["prev"],
        signed_at,
        Signature(numbers["key_version"], text["signature"]),
    )


def anchor_moves(anchor: Checkpoint | None, checkpoint: Checkpoint) -> bool:
    """Whether a stored `checkpoint` moves its stream's anchor (the newest checkpoint kept
    outside the store), so that the anchor only ever moves forward along one chain: True
    when the stream has no anchor yet or this is the checkpoint right after it (index + 1,
    naming the anchor's digest as `prev`); False when the anchor is at its index or past
    it. A checkpoint further ahead raises ConflictError AUDIT_ANCHOR_GAP (the ones between
    come first); the next index not descended from the anchor raises ConflictError
    AUDIT_CHECKPOINT_ROLLBACK: the store was rolled back and its chain signed again, and
    the anchor must not follow it."""
    if anchor is None:
        return True
    if checkpoint.index <= anchor.index:
        return False
    if checkpoint.index > anchor.index + 1:
        raise ConflictError(
            f"{checkpoint.stream} checkpoint {checkpoint.index}: the checkpoints after the "
            f"anchored checkpoint {anchor.index} must be anchored first",
            code="AUDIT_ANCHOR_GAP",
        )
    if checkpoint.prev != checkpoint_digest(anchor):
        raise ConflictError(
            f"{checkpoint.stream} checkpoint {checkpoint.index} does not descend from the "
            f"anchored checkpoint {anchor.index}: the store was rolled back",
            code="AUDIT_CHECKPOINT_ROLLBACK",
        )
    return True
