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

__all__ = ["FIRST", "Checkpoint", "Signature", "checkpoint_digest", "checkpoint_message"]

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
