"""Publish Mnemo events straight to a Kafka topic, for the distributed mode.

In the distributed mode the event log is a Kafka topic, and a high-volume producer (an
ingestion pipeline, a device gateway) may append to it directly instead of going
through the HTTP gateway. `EventPublisher` builds exactly the envelope the gateway would
accept, checks it with the same validation, and produces one record per event in the
log's record format (mnemo.records: keyed by tenant and stream, so a stream keeps its order
in one partition; the envelope as compact JSON; headers to route and trace by).
The producer is idempotent with ``acks="all"``: a record is acknowledged only once every
in-sync replica has it, and the broker drops the producer's own retries. The envelope's
`event_id` (a UUIDv7 made here when the event has none) stays the end-to-end idempotency
key: the log's consumers skip an id they have already seen.

Given a `vault` (a KeyVault, e.g. the Vault transit adapter), the publisher seals
sensitive values exactly as the gateway does before anything is produced (PII detector,
the tenant's policy, AES-256-GCM under a vault-wrapped data key; see docs/security.md):
a Kafka segment never holds them in plaintext. A `ForgetRequested` is crypto-shredded
before its record is produced, by the gateway's own code (`Sealer.shred_forgotten`): for a
user stream with a key of its own, that key is destroyed; with ``"tenant": true``, the
tenant's key and every key its events were sealed under, which the publisher finds by
reading the topic's records keyed by the tenant (the whole topic: forgetting a tenant is
rare). Without a vault, events go out as they are: only publish events without sensitive
values that way.

What this does *not* give, compared with `POST /v1/events`: no `expected_seq` check
against the stream head (so a `ForgetRequested` carrying one is refused,
`EXPECTED_SEQ_UNCHECKED`: its key would be destroyed before the sequencer could refuse
it), no `?wait=` for read-your-writes, no registration outcome in the answer (ask
`GET /v1/events/{id}/outcome` later). The distributed log adapter that reads this topic is
being built separately; the record layout above is the contract between the two.
Needs the `aiokafka` package, imported when the publisher starts.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import TracebackType
from typing import Any

from mnemo.domain.acceptance import accept
from mnemo.domain.errors import InvalidInput
from mnemo.domain.events import (
    Envelope,
    ForgetRequested,
    validate_envelope,
)
from mnemo.domain.pii import SecurityPolicy
from mnemo.ports import KeyVault
from mnemo.records import record_headers, record_key, record_key_ids, record_value
from mnemo.sealing import KeyCache, Sealer

__all__ = [
    "DEFAULT_TOPIC",
    "EventPublisher",
    "KafkaRecord",
    "build_envelope",
    "producer_config",
    "record_for",
    "record_headers",
    "record_key",
    "record_key_ids",
]

DEFAULT_TOPIC = "mnemo.events"


def build_envelope(
    event: Mapping[str, Any],
    *,
    tenant: str,
    principal: str,
    now: datetime | None = None,
) -> Envelope:
    """The envelope the gateway would accept for `event` from this tenant and principal:
    event id, occurred_at and actor filled in when absent, the tenant enforced, the whole
    event checked by the gateway's own rule (`mnemo.domain.acceptance.accept`). Raises
    InvalidInput with the gateway's codes."""
    return accept(
        event, tenant=tenant, principal=principal, now=now or datetime.now(UTC), trusted=False
    )


@dataclass(frozen=True, slots=True)
class KafkaRecord:
    """One record to produce; `timestamp_ms` is the event's occurred_at."""

    topic: str
    key: bytes
    value: bytes
    headers: list[tuple[str, bytes]]
    timestamp_ms: int


def record_for(envelope: Envelope, topic: str = DEFAULT_TOPIC) -> KafkaRecord:
    return KafkaRecord(
        topic=topic,
        key=record_key(envelope),
        value=record_value(envelope),
        headers=record_headers(envelope),
        timestamp_ms=int(envelope.occurred_at.timestamp() * 1000),
    )


def producer_config(bootstrap_servers: str | Sequence[str], **overrides: Any) -> dict[str, Any]:
    """aiokafka producer settings: idempotent, acks from every in-sync replica."""
    config: dict[str, Any] = {
        "bootstrap_servers": bootstrap_servers,
        "enable_idempotence": True,
        "acks": "all",
        "client_id": "mnemo-event-publisher",
        "linger_ms": 5,
    }
    config.update(overrides)
    if config.get("enable_idempotence") and config.get("acks") not in ("all", -1):
        raise ValueError("an idempotent producer needs acks='all'")
    return config


ProducerFactory = Callable[..., Any]


def _aiokafka_producer(**config: Any) -> Any:
    module = importlib.import_module("aiokafka")
    return module.AIOKafkaProducer(**config)


# what the topic reader of a tenant forget takes over from the producer's settings
_CONNECTION_SETTINGS = frozenset(
    {
        "bootstrap_servers",
        "security_protocol",
        "ssl_context",
        "sasl_mechanism",
        "sasl_plain_username",
        "sasl_plain_password",
        "sasl_kerberos_service_name",
        "sasl_kerberos_domain_name",
        "sasl_oauth_token_provider",
        "api_version",
        "request_timeout_ms",
        "metadata_max_age_ms",
        "connections_max_idle_ms",
    }
)


def _aiokafka_consumer(**config: Any) -> Any:
    module = importlib.import_module("aiokafka")
    return module.AIOKafkaConsumer(**config)


class EventPublisher:
    """Produces Mnemo events to a Kafka topic for one tenant and principal (see the module
    docstring for the record layout and what this skips compared with the gateway).

        async with EventPublisher("kafka:9092", tenant="acme", principal="ingest") as pub:
            await pub.publish([{"type": "ObservationRecorded", "schema_version": 2,
                                "stream": "user:U7892", "payload": {"text": "..."}}])

    `producer_factory` builds the producer from `producer_config(...)`; the default
    imports aiokafka. `consumer_factory` builds the topic reader that a tenant forget uses
    (with the producer's connection settings). Every event of a `publish` call is validated
    before any is sent.
    """

    def __init__(
        self,
        bootstrap_servers: str | Sequence[str],
        *,
        tenant: str,
        principal: str,
        topic: str = DEFAULT_TOPIC,
        producer_factory: ProducerFactory | None = None,
        consumer_factory: Callable[..., Any] | None = None,
        vault: KeyVault | None = None,
        policy: SecurityPolicy | None = None,
        data_key_ttl: float = 30.0,
        clock: Callable[[], datetime] | None = None,
        **producer_overrides: Any,
    ) -> None:
        self.sealer = Sealer(KeyCache(vault, data_key_ttl), policy) if vault is not None else None
        self.tenant = tenant
        self.principal = principal
        self.topic = topic
        # the instant the events' checks and defaults are taken at (the system's clock)
        self.clock = clock or (lambda: datetime.now(UTC))
        self.config = producer_config(bootstrap_servers, **producer_overrides)
        self._factory = producer_factory or _aiokafka_producer
        self._consumer_factory = consumer_factory or _aiokafka_consumer
        self._producer: Any = None

    async def start(self) -> None:
        if self._producer is None:
            producer = self._factory(**self.config)
            await producer.start()
            self._producer = producer

    async def stop(self) -> None:
        if self._producer is not None:
            producer, self._producer = self._producer, None
            await producer.stop()

    async def __aenter__(self) -> EventPublisher:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def records(self, events: Sequence[Mapping[str, Any]]) -> list[KafkaRecord]:
        """The records for `events`, all validated first; nothing is sent."""
        return [record_for(e, self.topic) for e in self._envelopes(events)]

    def _envelopes(self, events: Sequence[Mapping[str, Any]]) -> list[Envelope]:
        now = self.clock()
        out = []
        for i, event in enumerate(events):
            try:
                envelope = build_envelope(
                    event, tenant=self.tenant, principal=self.principal, now=now
                )
                if self.sealer is not None:
                    sealed = self.sealer.seal(envelope)
                    if sealed is not envelope:
                        envelope = validate_envelope(sealed.model_dump(mode="json"))
            except InvalidInput as exc:
                exc.field = f"events[{i}].{exc.field}" if exc.field else f"events[{i}]"
                raise
            out.append(envelope)
        return out

    async def publish(self, events: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> list[str]:
        """Produce the events and wait for the broker's acknowledgements; their event ids.
        Records of one stream are sent in order, so they keep it in their partition."""
        if self._producer is None:
            raise RuntimeError("start the publisher first (or use `async with`)")
        batch = [events] if isinstance(events, Mapping) else list(events)
        envelopes = self._envelopes(batch)
        if self.sealer is not None:
            for i, e in enumerate(envelopes):
                if e.type == ForgetRequested.TYPE and e.expected_seq is not None:
                    # its key would be shredded before the sequencer could refuse it
                    raise InvalidInput(
                        "a request to forget cannot carry expected_seq here: the publisher "
                        "cannot check it before the key is destroyed; use POST /v1/events",
                        code="EXPECTED_SEQ_UNCHECKED",
                        field=f"events[{i}].expected_seq",
                    )
            tenant_wide = any(
                e.type == ForgetRequested.TYPE and e.payload.get("tenant") is True
                for e in envelopes
            )
            key_ids = await self._tenant_key_ids() if tenant_wide else set()
            self.sealer.shred_forgotten(self.tenant, envelopes, lambda: key_ids)
        records = [record_for(e, self.topic) for e in envelopes]
        pending = [
            await self._producer.send(
                r.topic, value=r.value, key=r.key, headers=r.headers, timestamp_ms=r.timestamp_ms
            )
            for r in records
        ]
        for future in pending:
            await future
        return [dict(r.headers)["mnemo-event-id"].decode() for r in records]

    async def _tenant_key_ids(self) -> set[str]:
        """The key ids of the tenant's events in the topic: every partition read from its
        start to the end it had when asked, outside any consumer group."""
        shared = {k: v for k, v in self.config.items() if k in _CONNECTION_SETTINGS}
        consumer = self._consumer_factory(
            **shared,
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            client_id="mnemo-event-publisher-forget",
        )
        await consumer.start()
        prefix = f"{self.tenant}:".encode()
        values: list[bytes] = []
        try:
            parts = await self._producer.partitions_for(self.topic)
            assigned = [_topic_partition(self.topic, p) for p in sorted(parts)]
            if not assigned:
                return set()
            consumer.assign(assigned)
            await consumer.seek_to_beginning(*assigned)
            ends = await consumer.end_offsets(assigned)
            pending = {tp for tp in assigned if ends[tp] > 0}
            while pending:
                batch = await consumer.getmany(*pending, timeout_ms=1_000)
                for received in batch.values():
                    values += [r.value for r in received if (r.key or b"").startswith(prefix)]
                for tp in list(pending):
                    if await consumer.position(tp) >= ends[tp]:
                        pending.discard(tp)
        finally:
            await consumer.stop()
        return record_key_ids(self.tenant, values)


def _topic_partition(topic: str, partition: int) -> Any:
    module = importlib.import_module("aiokafka")
    return module.TopicPartition(topic, partition)
