"""Identifiers: time-ordered event ids (UUIDv7) and deterministic ids for derived events."""

from __future__ import annotations

import hashlib
import os
import re
import uuid
from datetime import UTC, datetime

__all__ = [
    "TENANT_RE",
    "derived_id",
    "id_time",
    "new_event_id",
    "uuid7_at",
    "valid_tenant",
]

TENANT_RE = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
STREAM_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$")


def valid_tenant(value: str) -> bool:
    return bool(TENANT_RE.fullmatch(value))


def valid_stream(value: str) -> bool:
    """A stream name; a user's stream is spelled `user:` in lower case (USER:V1 would be
    another stream, outside the user's key and the user's forget)."""
    if not STREAM_RE.fullmatch(value):
        return False
    return not (value[:5].casefold() == "user:" and value[:5] != "user:")


def names_no_user(stream: str) -> bool:
    """Whether a stream is a user stream that names no user (`user:` alone): no publisher
    may start one (a log may hold one from before, and is read as it was)."""
    return stream == "user:"


def uuid7_at(ms: int, rand: bytes, version: int = 7) -> uuid.UUID:
    """A UUIDv7 with the given Unix milliseconds and 10 bytes of entropy (or, with
    version=8, the same time-ordered layout marked as Mnemo's own derived id)."""
    if len(rand) < 10:
        raise ValueError("uuid7 needs 10 bytes of entropy")
    value = (ms & ((1 << 48) - 1)) << 80
    value |= version << 76
    value |= (int.from_bytes(rand[0:2], "big") & 0x0FFF) << 64
    value |= 0b10 << 62
    value |= int.from_bytes(rand[2:10], "big") & ((1 << 62) - 1)
    return uuid.UUID(int=value)


def new_event_id(at: datetime) -> str:
    """A fresh, time-ordered event id for an event that happened at `at`."""
    return str(uuid7_at(int(at.timestamp() * 1000), os.urandom(10)))


def derived_id(at: datetime, *parts: str) -> str:
    """A time-ordered id that is the same every time for the same parts.

    Consumers name the events they emit this way, so a redelivered input emits an
    event with the same id, and the log's idempotent append drops the copy. Derived ids
    are UUID version 8 (published events must be version 7), so no publisher can take an
    id a consumer will derive later.
    """
    digest = hashlib.sha256("\x1f".join(parts).encode()).digest()
    return str(uuid7_at(int(at.timestamp() * 1000), digest, version=8))


def id_time(event_id: str) -> datetime | None:
    """The instant stamped in a time-ordered id (UUIDv7, or a derived v8), to the
    millisecond; None for an id of another kind."""
    try:
        value = uuid.UUID(event_id)
    except ValueError:
        return None
    if value.version not in (7, 8):
        return None
    return datetime.fromtimestamp((value.int >> 80) / 1000, UTC)
