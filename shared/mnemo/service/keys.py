"""Rotating a tenant's (or a user's) vault key online, and rewrapping the data keys stored
in the read models under its newest version.

* `rotate` starts a new key version. New values are sealed under it as soon as a server's
  cached data key expires; everything sealed before still opens, since the vault keeps
  every version. Nothing stops.
* `rewrap_page` moves one page of the tenant's memories (in memory-id order) whose
  `sealed` block is wrapped by that key to the current version: each distinct wrapped data
  key is rewrapped by the vault (the plaintext data key is never needed), and the page's
  new wrapped keys go into the log as a `MemoriesRewrapped` event, which registration
  applies to the read model. The read models keep a single writer, a rebuild from the log
  ends with the same keys, and reads open the memories throughout: the old wrapped key
  until registration applies the event, the new one after. A memory whose wrapped key
  changed meanwhile (forgotten, erased) is left alone. Events already in the log are never
  rewritten: they keep the key version recorded with them, and it still opens.

The memories' `sealed` blocks are the only wrapped keys the read models hold (vectors and
keyword terms hold placeholders only; the log's events are immutable).
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass, field
from typing import Any

from mnemo.domain.errors import ConflictError, InvalidInput
from mnemo.domain.events import (
    Actor,
    ActorKind,
    MemoriesRewrapped,
    RewrappedKey,
    validate_envelope,
)
from mnemo.domain.ids import names_no_user, new_event_id, valid_stream
from mnemo.domain.memory import MemoryStatus
from mnemo.handlers.registration import wrapped_digest
from mnemo.ports import MemoryQuery
from mnemo.sealing import Sealer
from mnemo.service.sealing import OpenedMemoryStore

__all__ = ["MAX_PAGE", "RewrapPage", "key_id_for", "rewrap_page", "rotate"]

MAX_PAGE = 200  # memories per page, and at most that many in one MemoriesRewrapped event
KEYS_STREAM = "keys"  # where the tenant key's rewrap events go (a user's go to its stream)


@dataclass(frozen=True, slots=True)
class RewrapPage:
    """What one page of rewrapping did. `next` is the cursor of the next page (None: done)."""

    key_id: str
    scanned: int
    rewrapped: int
    key_versions: list[int] = field(default_factory=list)
    event_ids: list[str] = field(default_factory=list)
    next: str | None = None


def _sealer(app: Any) -> Sealer:
    sealer: Sealer | None = app.sealer
    if sealer is None:
        raise ConflictError("this server seals nothing: there is no key", code="SEALING_OFF")
    return sealer


def key_id_for(app: Any, tenant: str, stream: str | None) -> str:
    """The tenant's key, or the key of a user stream that has one of its own."""
    sealer = _sealer(app)
    if stream is None:
        return tenant
    if not valid_stream(stream) or names_no_user(stream):
        raise InvalidInput(
            "stream must be 1-128 letters, digits or '_.:@-', and a user stream names its user",
            code="INVALID_STREAM",
            field="stream",
        )
    key_id = sealer.key_id(tenant, stream)
    if key_id == tenant:
        raise InvalidInput(
            f"{stream} has no key of its own: rotate the tenant's key instead",
            code="NO_KEY_OF_ITS_OWN",
            field="stream",
        )
    return key_id


def rotate(app: Any, tenant: str, stream: str | None) -> tuple[str, int]:
    """(key id, new version). Raises KeyDestroyed for a forgotten user's key."""
    key_id = key_id_for(app, tenant, stream)
    return key_id, _sealer(app).keys.rotate(key_id)


def rewrap_page(
    app: Any,
    tenant: str,
    principal: str,
    stream: str | None,
    after: str | None = None,
    limit: int = MAX_PAGE,
) -> RewrapPage:
    """Rewrap one page of memories sealed under the key (see the module docstring)."""
    sealer = _sealer(app)
    key_id = key_id_for(app, tenant, stream)
    limit = max(1, min(limit, MAX_PAGE))
    query = MemoryQuery(
        stream=stream, statuses=tuple(MemoryStatus), limit=limit, after=after or None
    )
    stored = app.store.inner if isinstance(app.store, OpenedMemoryStore) else app.store
    page = stored.query(tenant, query)  # as stored: the wrapped keys are what moves
    moved: dict[str, tuple[str, int]] = {}  # stored wrapped key -> (rewrapped, version)
    by_version: dict[int, list[RewrappedKey]] = {}
    for memory in page:
        sealed = memory.sealed
        if sealed is None or sealed.key_id != key_id or not sealed.wrapped_key:
            continue
        if sealed.wrapped_key not in moved:
            try:
                raw = base64.b64decode(sealed.wrapped_key.encode("ascii"), validate=True)
            except (binascii.Error, ValueError):
                continue  # not a key Mnemo wrote: leave it
            rewrapped, version = sealer.keys.rewrap(key_id, raw)
            moved[sealed.wrapped_key] = (base64.b64encode(rewrapped).decode("ascii"), version)
        wrapped, version = moved[sealed.wrapped_key]
        if version <= sealed.key_version:
            continue  # already under the current version
        by_version.setdefault(version, []).append(
            RewrappedKey(
                memory_id=memory.memory_id,
                previous=wrapped_digest(sealed.wrapped_key),
                wrapped_key=wrapped,
            )
        )
    now = app.clock.now()
    events = [
        validate_envelope(
            {
                "event_id": new_event_id(now),
                "type": MemoriesRewrapped.TYPE,
                "schema_version": MemoriesRewrapped.VERSION,
                "tenant": tenant,
                "stream": stream or KEYS_STREAM,
                "occurred_at": now.isoformat(),
                "actor": Actor(kind=ActorKind.AGENT, id=principal).model_dump(),
                "payload": MemoriesRewrapped(
                    key_id=key_id, key_version=version, memories=tuple(entries)
                ).model_dump(mode="json"),
            },
            public=False,
        )
        for version, entries in sorted(by_version.items())
    ]
    if events:
        if app.sealer is not None:  # a user stream's actor id is sealed like any other
            events = [app.sealer.seal(e, strict=False) for e in events]
        app.log.append(events)
        if app.runner is not None:
            app.runner.wake()
        app.notify_changed()
    return RewrapPage(
        key_id=key_id,
        scanned=len(page),
        rewrapped=sum(len(e) for e in by_version.values()),
        key_versions=sorted(by_version),
        event_ids=[e.event_id for e in events],
        next=page[-1].memory_id if len(page) == limit else None,
    )
