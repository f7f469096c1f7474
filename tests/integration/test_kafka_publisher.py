"""The SDK's Kafka publisher against a real broker: records land keyed by tenant and
stream, in order within their partition, with the envelope and its headers intact."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid

import orjson
import pytest

from mnemo.client.kafka import EventPublisher
from mnemo.domain.events import validate_envelope

BOOTSTRAP = os.environ.get("MNEMO_KAFKA_BOOTSTRAP", "127.0.0.1:9092")


def _broker_up() -> bool:
    host, _, port = BOOTSTRAP.partition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


@pytest.fixture
def broker() -> str:
    if not _broker_up():
        if os.environ.get("CI") == "true":
            pytest.fail(f"no Kafka broker at {BOOTSTRAP} (make test starts one)")
        pytest.skip(f"no Kafka broker at {BOOTSTRAP}; `make services-up TEST_SERVICES=kafka`")
    return BOOTSTRAP


async def _roundtrip(bootstrap: str, topic: str) -> tuple[list[str], list[object]]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics([NewTopic(topic, num_partitions=3, replication_factor=1)])
    finally:
        await admin.close()
    events = [
        {"type": "ObservationRecorded", "schema_version": 2, "stream": f"user:U{i % 2}",
         "payload": {"text": f"记住我的尺码是L {i}"}}
        for i in range(6)
    ]  # fmt: skip
    async with EventPublisher(bootstrap, tenant="acme", principal="ingest", topic=topic) as pub:
        ids = await pub.publish(events)
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None
    )
    await consumer.start()
    got: list[object] = []
    try:
        async with asyncio.timeout(30):
            while len(got) < len(events):
                batch = await consumer.getmany(timeout_ms=500)
                for records in batch.values():
                    got.extend(records)
    finally:
        await consumer.stop()
    return ids, got


def test_published_records_are_keyed_ordered_and_valid(broker: str) -> None:
    topic = f"mnemo-test-{uuid.uuid4().hex[:10]}"
    ids, records = asyncio.run(_roundtrip(broker, topic))
    assert len(records) == 6
    by_key: dict[bytes, list[object]] = {}
    for record in records:
        by_key.setdefault(record.key, []).append(record)  # type: ignore[attr-defined]
    assert set(by_key) == {b"acme:user:U0", b"acme:user:U1"}
    for same in by_key.values():
        assert len({r.partition for r in same}) == 1  # type: ignore[attr-defined]
        texts = [
            orjson.loads(r.value)["payload"]["text"] for r in sorted(same, key=lambda r: r.offset)
        ]  # type: ignore[attr-defined]
        assert texts == sorted(texts, key=lambda t: int(t.split()[-1]))  # publish order kept
    for record in records:
        envelope = validate_envelope(orjson.loads(record.value))  # type: ignore[attr-defined]
        headers = dict(record.headers)  # type: ignore[attr-defined]
        assert headers["mnemo-event-type"] == b"ObservationRecorded"
        assert headers["mnemo-schema-version"] == b"2"
        assert headers["mnemo-event-id"].decode() == envelope.event_id
        assert envelope.tenant == "acme"
    assert sorted(ids) == sorted(dict(r.headers)["mnemo-event-id"].decode() for r in records)  # type: ignore[attr-defined]
