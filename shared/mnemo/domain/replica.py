"""The state of a stream's memories as a fold over its events.

Devices keep a replica by applying the events they replay; the server's snapshots use the
same fold, so a device that has applied every event up to a sequence number holds exactly
the snapshot at that number (same checksum)."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Mapping
from typing import Any

from mnemo.domain.events import (
    Envelope,
    MemoryArchived,
    MemoryDecayed,
    MemoryExpired,
    MemoryForgotten,
    MemoryRegistered,
    MemorySuperseded,
    MemoryVerified,
    VerificationDue,
)
from mnemo.domain.memory import Memory, MemoryStatus

__all__ = ["apply", "checksum", "fold"]

_STATUS = {
    MemorySuperseded.TYPE: MemoryStatus.SUPERSEDED,
    MemoryExpired.TYPE: MemoryStatus.EXPIRED,
    MemoryArchived.TYPE: MemoryStatus.ARCHIVED,
    MemoryForgotten.TYPE: MemoryStatus.FORGOTTEN,
}


def apply(state: dict[str, Memory], event: Envelope) -> None:
    """Apply one event to a replica (memory id -> memory). Unknown types change nothing."""
    p = event.payload
    if event.type == MemoryRegistered.TYPE:
        memory = Memory.model_validate(p["memory"])
        state[memory.memory_id] = memory
        return
    memory_id = p.get("memory_id")
    if not isinstance(memory_id, str) or memory_id not in state:
        return
    current = state[memory_id]
    update: dict[str, Any] = {}
    if event.type in _STATUS:
        if current.status is not MemoryStatus.ACTIVE:
            return
        update["status"] = _STATUS[event.type]
        if event.type == MemoryForgotten.TYPE:
            update.update(content="", value=None, content_hash="erased")
    elif event.type == MemoryDecayed.TYPE:
        update["semantic_weight"] = p["semantic_weight"]
        if p.get("trust") is not None:
            update["provenance"] = current.provenance.model_copy(update={"trust": p["trust"]})
    elif event.type == VerificationDue.TYPE:
        if current.status is not MemoryStatus.ACTIVE:
            return
        update["verification_due_at"] = VerificationDue.model_validate(p).due_at
    elif event.type == MemoryVerified.TYPE:
        if current.status is not MemoryStatus.ACTIVE:
            return
        update.update(verified_at=event.occurred_at, verification_due_at=None)
    if update:
        state[memory_id] = current.model_copy(update=update)


def fold(events: Iterable[Envelope], state: dict[str, Memory] | None = None) -> dict[str, Memory]:
    state = {} if state is None else state
    for event in events:
        apply(state, event)
    return state


def checksum(memories: Mapping[str, Memory]) -> str:
    """A digest of a replica that is the same wherever the same events were applied."""
    digest = hashlib.sha256()
    for memory_id in sorted(memories):
        body = json.dumps(
            memories[memory_id].model_dump(mode="json"), sort_keys=True, separators=(",", ":")
        )
        digest.update(body.encode())
        digest.update(b"\n")
    return digest.hexdigest()
