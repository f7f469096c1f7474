"""The distributed log's topic on Apache Kafka, through aiokafka.

`KafkaTopic` is a blocking facade for the gateway and the consumers' worker threads: its
aiokafka clients live on one event loop in a background thread of their own.

- Producing: an idempotent producer with acks=all (a record counts once every in-sync
  replica has it, and the broker drops the producer's own retries), key = tenant + ":" +
  stream, the event type, schema version and W3C trace context in headers (the record
  layout of mnemo.client.kafka, shared by every publisher).
- Topics: `ensure_topics` creates the log and its dead-letter topic with explicit
  partitions and settings: the log is kept forever (retention.ms = retention.bytes = -1,
  never compacted), and both refuse a write unless `min.insync.replicas` replicas have it.
  A topic that exists with another partition count is an error, never silently accepted:
  the partition of a stream would change under its feet.
- Dead letters: the original key, value and headers, plus `mnemo-dlq-reason`,
  `mnemo-dlq-message` and the source topic, partition and offset.
"""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
import threading
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.conn import create_conn
from aiokafka.errors import KafkaError, SaslAuthenticationFailed, TopicAlreadyExistsError

from mnemo.domain.errors import InvalidInput, Unavailable
from mnemo.ports import PROBE_SECONDS, Coordinates, LogRecord, LogTopic
from mnemo.records import MAX_RECORD_BYTES

__all__ = ["KafkaConfig", "KafkaTopic", "ensure_topics"]

log = logging.getLogger("mnemo.kafka")


class _NoRecordContents(logging.Filter):
    """aiokafka's producer logs every record's key and value at DEBUG: payloads and stream
    names (user ids) must not reach the logs, so those lines keep only their topic."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str) and record.msg.startswith("Sending (key="):
            record.msg = "Sending a record to %s"
            record.args = (record.args[-1],) if isinstance(record.args, tuple) else ()
        return True


logging.getLogger("aiokafka.producer.producer").addFilter(_NoRecordContents())

T = TypeVar("T")


@dataclass(frozen=True)
class KafkaConfig:
    """How to reach the brokers. Secrets come from settings, never from code."""

    bootstrap: str = "127.0.0.1:9092"
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str | None = None
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    # the TLS context of SSL and SASL_SSL (built from the settings' CA, certificate and key)
    ssl_context: ssl.SSLContext | None = field(default=None, repr=False, compare=False)
    client_id: str = "mnemo"
    request_timeout_ms: int = 15_000

    def client_options(self) -> dict[str, Any]:
        options: dict[str, Any] = {
            "bootstrap_servers": self.bootstrap,
            "security_protocol": self.security_protocol,
            "client_id": self.client_id,
            "request_timeout_ms": self.request_timeout_ms,
        }
        if self.sasl_mechanism:
            options.update(
                sasl_mechanism=self.sasl_mechanism,
                sasl_plain_username=self.sasl_username,
                sasl_plain_password=self.sasl_password,
            )
        if "SSL" in self.security_protocol:
            # aiokafka needs a context for SSL; without one, the system's CAs check the brokers
            options["ssl_context"] = self.ssl_context or ssl.create_default_context()
        return options


class _Loop:
    """One asyncio loop on a daemon thread; blocking callers submit coroutines to it."""

    def __init__(self, name: str) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name=name, daemon=True)
        self._thread.start()

    def run(self, coro: Coroutine[Any, Any, T], timeout: float) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=5)


def _unavailable(exc: BaseException) -> Unavailable:
    return Unavailable(
        f"the event log (Kafka) is unavailable: {type(exc).__name__}", code="LOG_UNAVAILABLE"
    )


async def _ensure(
    config: KafkaConfig,
    topic: str,
    partitions: int,
    dead_letters: str,
    replication: int,
    min_insync: int,
) -> list[str]:
    admin = AIOKafkaAdminClient(**config.client_options())
    await admin.start()
    try:
        common = {"min.insync.replicas": str(min_insync), "cleanup.policy": "delete"}
        wanted = {
            topic: NewTopic(
                topic,
                partitions,
                replication,
                topic_configs={
                    **common,
                    "retention.ms": "-1",
                    "retention.bytes": "-1",
                    "max.message.bytes": str(MAX_RECORD_BYTES + 65_536),
                },
            ),
            dead_letters: NewTopic(
                dead_letters,
                max(1, min(partitions, 3)),
                replication,
                topic_configs={
                    **common,
                    "retention.ms": "-1",
                    "max.message.bytes": str(2 * MAX_RECORD_BYTES),
                },
            ),
        }
        created = []
        for name, new in wanted.items():
            try:
                result = await admin.create_topics([new])
                for _, code, *_rest in getattr(result, "topic_errors", []):
                    if code == TopicAlreadyExistsError.errno:
                        break
                    if code:
                        raise RuntimeError(f"creating topic {name} failed with error {code}")
                else:
                    created.append(name)
            except TopicAlreadyExistsError:
                pass
        found = 0
        for _ in range(50):  # a topic just created may not be in the metadata yet
            described = await admin.describe_topics([topic])
            found = len(described[0]["partitions"]) if described else 0
            if found:
                break
            await asyncio.sleep(0.2)
        if found != partitions:
            raise InvalidInput(
                f"topic {topic} has {found} partitions, not the {partitions} configured; "
                "a stream's partition would change: configure the count the topic has",
                code="PARTITIONS_MISMATCH",
                field="kafka_partitions",
            )
        return created
    finally:
        await admin.close()


def ensure_topics(
    config: KafkaConfig,
    topic: str,
    partitions: int,
    dead_letters: str,
    *,
    replication: int = 1,
    min_insync: int = 1,
) -> list[str]:
    """Create the log and dead-letter topics when missing; returns the names created.
    Brokers none of whose certificates verifies against the configured CA are a
    configuration error (InvalidInput, TLS_CONFIG_INVALID), not an outage to wait out."""
    try:
        return asyncio.run(
            _ensure(config, topic, partitions, dead_letters, replication, min_insync)
        )
    except KafkaError as exc:
        _refuse_unverified_brokers(config)
        _refuse_refused_login(config)
        raise _unavailable(exc) from exc


def _refuse_unverified_brokers(config: KafkaConfig, timeout: float = 5.0) -> None:
    """After a failed first contact over TLS: shake hands with each bootstrap broker
    directly, with the same context. When every one answers and none of their certificates
    verifies, retrying cannot mend it (the client only reports that it could not connect):
    a configuration error naming the setting. A broker that does not answer, or that
    verifies, leaves the failure an outage."""
    if "SSL" not in config.security_protocol:
        return
    context = config.ssl_context or ssl.create_default_context()
    servers = [s.strip() for s in config.bootstrap.split(",") if s.strip()]
    if not servers:
        return
    for server in servers:
        host, _, port = server.rpartition(":")
        host = host.strip("[]")
        try:
            with (
                socket.create_connection((host, int(port)), timeout=timeout) as raw,
                context.wrap_socket(raw, server_hostname=host),
            ):
                return  # this one verifies: the failure lies elsewhere
        except ssl.SSLCertVerificationError:
            continue
        except (OSError, ValueError):
            return  # unreachable or unnamed: an outage, or not this
    raise InvalidInput(
        "no Kafka broker's certificate verifies against MNEMO_KAFKA_SSL_CAFILE (or names the "
        "address connected to): set the CA that signed the brokers' certificates",
        code="TLS_CONFIG_INVALID",
        field="kafka_ssl_cafile",
    ) from None


def _refuse_refused_login(config: KafkaConfig, timeout_ms: int = 5_000) -> None:
    """After a failed first contact with SASL: log in to each bootstrap broker directly.
    When every one answers and refuses the credentials, retrying cannot mend it (the client
    only reports that it could not bootstrap): a configuration error naming the setting.
    A broker that does not answer, or that takes the login, leaves the failure an outage.
    The password is never in the message."""
    if not config.sasl_mechanism:
        return
    options = config.client_options()
    servers = [s.strip() for s in config.bootstrap.split(",") if s.strip()]

    async def refused(server: str) -> bool:
        host, _, port = server.rpartition(":")
        try:
            conn = await create_conn(
                host.strip("[]"),
                int(port),
                request_timeout_ms=timeout_ms,
                ssl_context=options.get("ssl_context"),
                security_protocol=config.security_protocol,
                sasl_mechanism=config.sasl_mechanism,
                sasl_plain_username=config.sasl_username,
                sasl_plain_password=config.sasl_password,
            )
        except SaslAuthenticationFailed:
            return True
        except (TimeoutError, KafkaError, OSError, ValueError):
            return False
        conn.close()
        return False

    async def every() -> bool:
        return bool(servers) and all([await refused(server) for server in servers])

    if asyncio.run(every()):
        raise InvalidInput(
            "every Kafka broker refused the login of MNEMO_KAFKA_SASL_USERNAME with "
            "MNEMO_KAFKA_SASL_PASSWORD (and MNEMO_KAFKA_SASL_MECHANISM): set credentials the "
            "brokers know",
            code="KAFKA_CREDENTIALS_REFUSED",
            field="kafka_sasl_password",
        ) from None


class KafkaTopic(LogTopic):
    """The LogTopic port over one Kafka topic and its dead-letter topic."""

    def __init__(
        self,
        config: KafkaConfig,
        name: str = "mnemo.events",
        dead_letters: str | None = None,
        *,
        timeout: float = 30.0,
    ) -> None:
        self.name = name
        self.dead_letters = dead_letters or f"{name}.dlq"
        self.config = config
        self.timeout = timeout
        self._loop = _Loop(f"kafka-{name}")
        self._producer: AIOKafkaProducer | None = None
        self._reader: AIOKafkaConsumer | None = None
        self._lock = threading.Lock()

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        try:
            return self._loop.run(coro, self.timeout)
        except KafkaError as exc:
            raise _unavailable(exc) from exc
        except TimeoutError as exc:
            raise _unavailable(exc) from exc

    async def _get_producer(self) -> AIOKafkaProducer:
        if self._producer is None:
            producer = AIOKafkaProducer(
                **self.config.client_options(),
                enable_idempotence=True,
                acks="all",
                linger_ms=2,
                max_request_size=2 * MAX_RECORD_BYTES,
            )
            await producer.start()
            self._producer = producer
        return self._producer

    async def _get_reader(self) -> AIOKafkaConsumer:
        if self._reader is None:
            reader = AIOKafkaConsumer(
                **self.config.client_options(),
                enable_auto_commit=False,
                group_id=None,
                isolation_level="read_committed",
                fetch_max_wait_ms=10,
                fetch_max_bytes=8 * MAX_RECORD_BYTES,
                max_partition_fetch_bytes=2 * MAX_RECORD_BYTES,
            )
            await reader.start()
            self._reader = reader
        return self._reader

    async def _produce(
        self,
        topic: str,
        records: Sequence[tuple[bytes | None, bytes | None, Sequence[tuple[str, bytes]]]],
    ) -> list[Coordinates]:
        producer = await self._get_producer()
        try:
            futures = [
                await producer.send(topic, value=value, key=key, headers=list(headers))
                for key, value, headers in records
            ]
            done = await asyncio.gather(*futures, return_exceptions=True)
        except Exception:
            await self._drop_producer()
            raise
        failed = [d for d in done if isinstance(d, BaseException)]
        if failed:
            # an idempotent producer whose sequence the broker no longer knows (a broker
            # restart, an expired producer id) stays broken: start a new one next time
            await self._drop_producer()
            raise failed[0]
        return [Coordinates(m.partition, m.offset) for m in done]  # type: ignore[union-attr]

    async def _drop_producer(self) -> None:
        producer, self._producer = self._producer, None
        if producer is not None:
            try:
                await producer.stop()
            except Exception:
                log.debug("stopping a failed producer failed", exc_info=True)

    def produce(
        self, records: Sequence[tuple[bytes, bytes, Sequence[tuple[str, bytes]]]]
    ) -> list[Coordinates]:
        if not records:
            return []
        return self._call(self._produce(self.name, records))

    def dead_letter(self, records: Sequence[tuple[LogRecord, str, str]]) -> None:
        out = []
        for record, code, message in records:
            headers = [
                *record.headers,
                ("mnemo-dlq-reason", code.encode()),
                ("mnemo-dlq-message", message[:1000].encode("utf-8", "replace")),
                ("mnemo-dlq-source", f"{self.name}/{record.partition}/{record.offset}".encode()),
            ]
            out.append((record.key, record.value, headers))
        if out:
            self._call(self._produce(self.dead_letters, out))

    async def _partitions(self) -> list[int]:
        producer = await self._get_producer()
        return sorted(await producer.partitions_for(self.name))

    def partitions(self) -> list[int]:
        return self._call(self._partitions())

    def reachable(self, timeout: float = PROBE_SECONDS) -> None:
        """The partitions' end offsets asked of their leaders, within `timeout`: a broker
        that is down fails this at once or at the bound, where `partitions` still answers
        from the producer's metadata."""
        future = asyncio.run_coroutine_threadsafe(self._end_offsets(), self._loop.loop)
        try:
            future.result(timeout)
        except KafkaError as exc:
            raise _unavailable(exc) from exc
        except TimeoutError as exc:
            future.cancel()  # the request is not left to run on to its own timeout
            raise _unavailable(exc) from exc

    async def _end_offsets(self) -> dict[int, int]:
        reader = await self._get_reader()
        parts = [TopicPartition(self.name, p) for p in await self._partitions()]
        ends = await reader.end_offsets(parts)
        return {tp.partition: int(offset) for tp, offset in ends.items()}

    def end_offsets(self) -> dict[int, int]:
        return self._call(self._end_offsets())

    async def _fetch(self, partition: int, from_offset: int, limit: int) -> list[LogRecord]:
        reader = await self._get_reader()
        tp = TopicPartition(self.name, partition)
        end = (await reader.end_offsets([tp]))[tp]
        if from_offset >= end:
            return []
        reader.assign([tp])
        reader.seek(tp, from_offset)
        out: list[LogRecord] = []
        while len(out) < limit:
            batch = await reader.getmany(tp, timeout_ms=1000, max_records=limit - len(out))
            got = batch.get(tp, [])
            if not got:
                break
            for m in got:
                out.append(
                    LogRecord(
                        m.partition,
                        m.offset,
                        m.key,
                        m.value,
                        tuple((k, bytes(v)) for k, v in (m.headers or ())),
                        m.timestamp / 1000 if m.timestamp is not None else None,
                    )
                )
            if out[-1].offset + 1 >= end:
                break
        return out

    def fetch(self, partition: int, from_offset: int, limit: int) -> list[LogRecord]:
        with self._lock:
            return self._call(self._fetch(partition, from_offset, limit))

    def dead_letter_count(self) -> int:
        """Records in the dead-letter topic (its end offsets summed)."""
        other = KafkaTopic(self.config, self.dead_letters, dead_letters=self.dead_letters)
        try:
            return sum(other.end_offsets().values())
        finally:
            other.close()

    def fetch_dead_letters(self, limit: int = 10_000) -> list[LogRecord]:
        """Every dead letter (for operators and tests), oldest first per partition."""
        other = KafkaTopic(self.config, self.dead_letters, dead_letters=self.dead_letters)
        try:
            out: list[LogRecord] = []
            for partition in other.partitions():
                out.extend(other.fetch(partition, 0, limit))
            return out
        finally:
            other.close()

    async def _close(self) -> None:
        if self._producer is not None:
            await self._producer.stop()
            self._producer = None
        if self._reader is not None:
            await self._reader.stop()
            self._reader = None

    def close(self) -> None:
        try:
            self._loop.run(self._close(), 10)
        except Exception:
            log.debug("closing the Kafka clients failed", exc_info=True)
        self._loop.stop()
