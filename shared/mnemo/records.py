"""The log's record format: how an event is framed as a record of the topic (the LogTopic
port) and read back, shared by the distributed log, its consumers and the Kafka publisher.

- key: ``tenant + ":" + stream`` (ADR 0002), so every event of a stream lands in one
  partition and keeps its order there;
- value: the envelope as compact JSON (UTF-8), `seq` left out: the log assigns it;
- headers: ``mnemo-event-type``, ``mnemo-schema-version``, ``mnemo-event-id``,
  ``content-type``, and the W3C ``traceparent`` / ``tracestate`` when the event carries
  a trace, so consumers can route and trace without parsing the value;
- an event's place in the log is ``offset * MAX_PARTITIONS + partition``.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from typing import Any

import orjson

from mnemo.domain.acceptance import accept
from mnemo.domain.errors import InvalidInput
from mnemo.domain.events import CATALOG, Envelope, sealed_key_ids
from mnemo.ports import LogRecord

__all__ = [
    "CONTENT_TYPE",
    "MAX_PARTITIONS",
    "MAX_RECORD_BYTES",
    "decode_offset",
    "encode_offset",
    "parse_record",
    "record_headers",
    "record_key",
    "record_key_ids",
    "record_value",
]

CONTENT_TYPE = b"application/json"
MAX_PARTITIONS = 1024
MAX_RECORD_BYTES = 1_048_576


def encode_offset(partition: int, offset: int) -> int:
    return offset * MAX_PARTITIONS + partition


def decode_offset(value: int) -> tuple[int, int]:
    return value % MAX_PARTITIONS, value // MAX_PARTITIONS


def record_key(envelope: Envelope) -> bytes:
    """The partition key: tenant + ":" + stream."""
    return f"{envelope.tenant}:{envelope.stream}".encode()


def record_headers(envelope: Envelope) -> list[tuple[str, bytes]]:
    headers = [
        ("mnemo-event-type", envelope.type.encode()),
        ("mnemo-schema-version", str(envelope.schema_version).encode()),
        ("mnemo-event-id", envelope.event_id.encode()),
        ("content-type", CONTENT_TYPE),
    ]
    if envelope.trace is not None:
        headers.append(("traceparent", envelope.trace.traceparent.encode()))
        if envelope.trace.tracestate:
            headers.append(("tracestate", envelope.trace.tracestate.encode()))
    return headers


def record_key_ids(tenant: str, values: Iterable[bytes | None]) -> set[str]:
    """The tenant's vault key ids in record values (event JSON, see sealed_key_ids); values
    that are not JSON objects are skipped."""
    events: list[dict[str, Any]] = []
    for value in values:
        if not value:
            continue
        try:
            body = orjson.loads(value)
        except orjson.JSONDecodeError:
            continue
        if isinstance(body, dict):
            events.append(body)
    return sealed_key_ids(tenant, events)


def record_value(envelope: Envelope) -> bytes:
    return orjson.dumps(envelope.model_dump(mode="json", exclude_none=True))


def parse_record(record: LogRecord, now: datetime) -> Envelope:
    """Check one topic record by the rule every event is accepted by (`accept`, trusted:
    whoever may write to the topic is trusted like the gateway, and Kafka's ACLs decide who
    may), plus the record's own framing; raises InvalidInput with the reason code a dead
    letter carries."""
    value = record.value
    if value is None or not value:
        raise InvalidInput("the record has no value", code="EMPTY_RECORD")
    if len(value) > MAX_RECORD_BYTES:
        raise InvalidInput(f"the record is over {MAX_RECORD_BYTES} bytes", code="RECORD_TOO_LARGE")
    try:
        raw = orjson.loads(value)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput("the record is not UTF-8 JSON", code="NOT_JSON") from exc
    envelope = accept(raw, tenant=None, principal=None, now=now, trusted=True)
    if record.key != record_key(envelope):
        raise InvalidInput(
            "the record key must be tenant + ':' + stream of its event",
            code="KEY_MISMATCH",
            field="key",
        )
    _refuse_unsealed_sensitive(envelope)
    return envelope


def _refuse_unsealed_sensitive(envelope: Envelope) -> None:
    """A memory marked sensitive whose content or value a producer wrote to the topic in
    clear (no vault at hand: kcat, the SDK's publisher without one) is a dead letter, not
    a memory: registered, its words would reach the archive, the read models and the
    vectors, where destroying a key can no longer reach them. Fail closed."""
    model = CATALOG.models.get((envelope.type, envelope.schema_version))
    if model is None or not model.PUBLIC:
        return  # Mnemo's own events carry what the registrar sealed on the way in
    memory = envelope.payload.get("memory")
    if not (isinstance(memory, dict) and memory.get("sensitive") is True):
        return
    sealed = set(envelope.encryption.fields) if envelope.encryption is not None else set()
    for name in ("content", "value"):
        if memory.get(name) and f"memory.{name}" not in sealed:
            raise InvalidInput(
                f"payload.memory.{name} of a sensitive memory is not sealed: a producer "
                "writing to the topic must seal it (or publish through the gateway)",
                code="SENSITIVE_NOT_SEALED",
                field=f"payload.memory.{name}",
            )
