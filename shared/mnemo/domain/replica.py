"""The state of a stream's memories as a fold over its events.

Devices keep a replica by applying the events they replay; the server's snapshots use the
same fold, so a device that has applied every event up to a sequence number holds exactly
the snapshot at that number (same checksum).

The fold works on events and memories as the JSON the log stores and the API sends
(dicts), not on parsed models: a replica catching up applies tens of thousands of events a
second, and every value it keeps is the server's own serialisation, so two replicas that
applied the same events hold the same bytes."""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

__all__ = ["apply", "checksum", "fold"]

Json = dict[str, Any]

_STATUS = {
    "MemorySuperseded": "superseded",
    "MemoryExpired": "expired",
    "MemoryArchived": "archived",
    "MemoryForgotten": "forgotten",
}


def apply(state: dict[str, Json], event: Mapping[str, Any]) -> None:
    """Apply one event (as JSON) to a replica (memory id -> memory as JSON)."""
    kind = event["type"]
    p = event["payload"]
    if kind == "MemoryRegistered":
        memory = p["memory"]
        state[memory["memory_id"]] = dict(memory)
        return
    if kind == "FeedbackRelayed":  # a verification published on another stream
        if p.get("feedback") == "MemoryVerified":
            for relayed_id in p.get("memory_ids", ()):
                _apply_verified(state, relayed_id, event)
        return
    memory_id = p.get("memory_id")
    if not isinstance(memory_id, str) or memory_id not in state:
        return
    current = state[memory_id]
    active = current.get("status") == "active"
    if kind == "MemoryForgotten":
        if current.get("status") == "forgotten":
            return
        # any version the subject held, superseded or archived ones too, as the server's
        # read model erases them: nothing a person said or where it came from stays
        updated = {
            **current,
            "status": "forgotten",
            "content": "",
            "value": None,
            "key": None,
            "tags": [],
            "provenance": {
                **(current.get("provenance") or {}),
                "source_id": None,
                "source_location": None,
            },
            "guard": None,
            "timezone": None,
            "content_hash": "erased",
            "sealed": None,
        }
    elif kind in _STATUS:
        if not active:
            return
        updated = {**current, "status": _STATUS[kind]}
    elif kind == "MemoryDecayed":
        updated = {**current, "semantic_weight": p["semantic_weight"]}
        if p.get("trust") is not None:
            updated["provenance"] = {**current.get("provenance", {}), "trust": p["trust"]}
    elif kind == "VerificationDue" and active:
        updated = {**current, "verification_due_at": p["due_at"]}
    elif kind == "MemoryVerified" and active:
        _apply_verified(state, memory_id, event)
        return
    else:
        return
    state[memory_id] = updated


def _apply_verified(state: dict[str, Json], memory_id: str, event: Mapping[str, Any]) -> None:
    current = state.get(memory_id)
    if current is None or current.get("status") != "active":
        return
    if current.get("stream", event.get("stream")) != event.get("stream"):
        return  # renewed by the relayed verification in the memory's own stream
    state[memory_id] = {
        **current,
        "verified_at": event["occurred_at"],
        "verification_due_at": None,
    }


def fold(
    events: Iterable[Mapping[str, Any]], state: dict[str, Json] | None = None
) -> dict[str, Json]:
    state = {} if state is None else state
    for event in events:
        apply(state, event)
    return state


def checksum(memories: Mapping[str, Mapping[str, Any]]) -> str:
    """A digest of a replica that is the same wherever the same events were applied."""
    digest = hashlib.sha256()
    for memory_id in sorted(memories):
        digest.update(orjson.dumps(memories[memory_id], option=orjson.OPT_SORT_KEYS))
        digest.update(b"\n")
    return digest.hexdigest()
