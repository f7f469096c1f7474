"""The one rule for accepting an event into the log, whichever way it comes.

Three paths bring events: the gateway (`POST /v1/events`), the SDK's Kafka publisher
(`mnemo.client.kafka`), both on behalf of a tenant's principal, and the registrar reading
the topic, where whoever may write is trusted like the gateway (Kafka's ACLs decide who
may: the gateway and the consumers themselves, trusted ingestion pipelines). All three
call `accept`, so an event gets the same verdict and error code on each, and the two
trust levels differ only where this list says:

- missing event_id, occurred_at, actor: a publisher's are filled in (now, the
  principal); on the topic the record is the event, and they are refused.
- tenant: a publisher's own (another one is TENANT_MISMATCH); on the topic, the
  envelope's (its reader checks the record key).
- `seq`: refused on both (INVALID_ENVELOPE).
- payload over MAX_PAYLOAD_BYTES: PAYLOAD_TOO_LARGE from a publisher; on the topic the
  record size bounds it instead (sealing lengthens a payload).
- actor `system`: ACTOR_NOT_ALLOWED from a publisher; on the topic only with a derived
  (UUIDv8) id, else ACTOR_NOT_ALLOWED.
- event_id: a lowercase UUIDv7 from a publisher; on the topic a UUIDv7 or a derived
  UUIDv8 (the gateway's feedback events have derived ids too); else INVALID_EVENT_ID.
- `encryption`: ENCRYPTION_NOT_ALLOWED from a publisher (Mnemo seals itself); on the
  topic allowed (a trusted producer may seal).
- event types: a publisher's must be public (EVENT_TYPE_NOT_PUBLISHABLE); on the topic
  every type of the catalog.
- received_at: a publisher's event is stamped with `now` (a client may not set it); on
  the topic it is the producer's, or absent.
- digest: a publisher may not set it (INVALID_ENVELOPE); the gateway stamps
  `publication_digest` of what the client sent, so that a log holding the event id
  already tells a retry (the same digest) from another event under a reused id
  (EVENT_ID_REUSED). On the topic it is the producer's, or absent (no check).
- a template's stream: the tenant's `templates` stream, on both (INVALID_STREAM).
- a user stream names its user: `user:` alone is INVALID_STREAM from a publisher; on the
  topic it is accepted (a log may hold such a stream from before, and a rebuild reads it
  as it was read then).
- occurred_at: at most MAX_CLOCK_SKEW ahead of now (OCCURRED_IN_FUTURE), on both; a
  consumer's (system) event keeps its cause's time and is not held to it. A tool
  result's fetched_at likewise (FETCHED_IN_FUTURE).

Pure: the caller gives the instant (`now`, from its Clock).
"""

from __future__ import annotations

import hashlib
import hmac
import json
import re
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any

import orjson

from mnemo.domain.errors import ConflictError, InvalidInput
from mnemo.domain.events import (
    MAX_PAYLOAD_BYTES,
    TEMPLATES_STREAM,
    Actor,
    ActorKind,
    Envelope,
    TemplateRegistered,
    ToolResultRecorded,
    decode_payload,
    validate_envelope,
)
from mnemo.domain.ids import names_no_user, new_event_id

__all__ = ["MAX_CLOCK_SKEW", "accept", "publication_digest", "refuse_reused_id", "reuses_id"]

# what a publisher's retry may change without being another event: the id it is sent
# under, its trace (a new span per attempt) and the tenant (implied by the key)
_NOT_DIGESTED = frozenset({"event_id", "trace", "tenant"})

# how far ahead of the accepting clock an event's occurred_at may be
MAX_CLOCK_SKEW = timedelta(minutes=5)

_PUBLISHED_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")
_DERIVED_ID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$")


def accept(
    raw: object,
    *,
    tenant: str | None,
    principal: str | None,
    now: datetime,
    trusted: bool,
) -> Envelope:
    """The envelope `raw` is accepted as, or InvalidInput with the code that refuses it
    (`field` names the envelope's field, relative to the event). `tenant`: the tenant the
    event must belong to (None on the topic, where the envelope names it); `principal`:
    the actor filled in for a publisher's event without one."""
    if not isinstance(raw, Mapping):
        raise InvalidInput("an event must be a JSON object", code="INVALID_ENVELOPE")
    event: dict[str, Any] = dict(raw)
    if tenant is not None:
        claimed = event.get("tenant")
        if claimed is not None and claimed != tenant:
            raise InvalidInput(
                "the event names another tenant than its publisher",
                code="TENANT_MISMATCH",
                field="tenant",
            )
        event["tenant"] = tenant
    if "seq" in event:
        raise InvalidInput("seq is assigned by the log", code="INVALID_ENVELOPE", field="seq")
    if not trusted:
        if "received_at" in event:
            raise InvalidInput(
                "received_at is stamped by Mnemo when it accepts the event",
                code="INVALID_ENVELOPE",
                field="received_at",
            )
        event["received_at"] = now.isoformat()
        if "digest" in event:
            raise InvalidInput(
                "digest is stamped by Mnemo when it accepts the event",
                code="INVALID_ENVELOPE",
                field="digest",
            )
        if "payload" in event and len(orjson.dumps(event["payload"])) > MAX_PAYLOAD_BYTES:
            raise InvalidInput(
                f"payload over {MAX_PAYLOAD_BYTES} bytes", code="PAYLOAD_TOO_LARGE", field="payload"
            )
        event.setdefault("event_id", new_event_id(now))
        event.setdefault("occurred_at", now.isoformat())
        if principal is not None:
            event.setdefault("actor", Actor(kind=ActorKind.AGENT, id=principal).model_dump())
    actor = event.get("actor")
    system = isinstance(actor, Mapping) and actor.get("kind") == ActorKind.SYSTEM.value
    event_id = event.get("event_id")
    derived = isinstance(event_id, str) and _DERIVED_ID.fullmatch(event_id) is not None
    if system and not (trusted and derived):
        raise InvalidInput(
            "system actors are Mnemo's own consumers, whose events carry derived ids",
            code="ACTOR_NOT_ALLOWED",
            field="actor",
        )
    if isinstance(event_id, str) and not (
        _PUBLISHED_ID.fullmatch(event_id) or (trusted and derived)
    ):
        raise InvalidInput(
            "event_id must be a lowercase UUIDv7"
            + (" (or a consumer's derived UUIDv8)" if trusted else ""),
            code="INVALID_EVENT_ID",
            field="event_id",
        )
    if not trusted and event.get("encryption") is not None:
        # only Mnemo seals what reaches the log through a publisher: a client's block could
        # carry ciphertexts copied from elsewhere (a forgotten memory's) and have them
        # opened as this event's
        raise InvalidInput(
            "events published to Mnemo carry no encryption block; Mnemo seals sensitive "
            "values itself (trusted producers may seal on the topic)",
            code="ENCRYPTION_NOT_ALLOWED",
            field="encryption",
        )
    if event.get("type") == TemplateRegistered.TYPE and event.get("stream") != TEMPLATES_STREAM:
        raise InvalidInput(
            f"a template is registered in the tenant's {TEMPLATES_STREAM!r} stream",
            code="INVALID_STREAM",
            field="stream",
        )
    stream = event.get("stream")
    if not trusted and isinstance(stream, str) and names_no_user(stream):
        raise InvalidInput(
            "a user stream names its user after 'user:', e.g. user:U7892",
            code="INVALID_STREAM",
            field="stream",
        )
    envelope = validate_envelope(event, public=not trusted)
    if not system and envelope.occurred_at > now + MAX_CLOCK_SKEW:
        raise InvalidInput(
            f"occurred_at is more than {MAX_CLOCK_SKEW} ahead of the accepting clock",
            code="OCCURRED_IN_FUTURE",
            field="occurred_at",
        )
    if not system and envelope.type == ToolResultRecorded.TYPE:
        fetched = decode_payload(envelope)
        assert isinstance(fetched, ToolResultRecorded)
        if fetched.fetched_at > now + MAX_CLOCK_SKEW:
            # it would stay fresh from a moment that has not come
            raise InvalidInput(
                f"fetched_at is more than {MAX_CLOCK_SKEW} ahead of the accepting clock",
                code="FETCHED_IN_FUTURE",
                field="payload.fetched_at",
            )
    return envelope


def publication_digest(raw: Mapping[str, Any], key: bytes) -> str:
    """A keyed hash (HMAC-SHA256, 128 bits) of an event as its publisher sent it, before
    anything is filled in: every field but the id, the trace and the tenant, members in
    sorted order. A retry sends the same event and gets the same digest; another event
    under a reused id gets another one. Keyed, so a digest in the log tells nothing about
    a low-entropy value it covers to whoever lacks the key (the subject's search key: it
    goes when the subject is forgotten)."""
    body = {k: v for k, v in raw.items() if k not in _NOT_DIGESTED}
    try:
        canonical = orjson.dumps(body, option=orjson.OPT_SORT_KEYS)
    except (orjson.JSONEncodeError, TypeError):
        # what the fast encoder refuses (an integer past 64 bits, a lone surrogate): the
        # standard library's, escaped to ASCII. The same event always takes the same way
        text = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
        canonical = text.encode()
    digest = hmac.new(key, b"mnemo-publication\x00" + canonical, hashlib.sha256)
    return digest.hexdigest()[:32]


def reuses_id(event: Envelope, held_digest: object) -> bool:
    """Whether `event`, whose id the log holds already with `held_digest`, is another
    event under that id rather than a retry. Only two digests can tell: an event that
    reached the log without one (Mnemo's own, a producer's on the topic, or one logged
    before digests) is taken for a retry, as it always was."""
    return event.digest is not None and isinstance(held_digest, str) and held_digest != event.digest


def refuse_reused_id(event: Envelope, held_digest: object) -> None:
    """ConflictError (EVENT_ID_REUSED) when `reuses_id`."""
    if reuses_id(event, held_digest):
        raise ConflictError(
            f"event_id {event.event_id} is already in the log with other content; a retry "
            "must send the same event, and a new event needs a new id",
            code="EVENT_ID_REUSED",
            field="event_id",
            extra={"event_id": event.event_id},
        )
