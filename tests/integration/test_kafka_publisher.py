"""The SDK's Kafka publisher against a real broker: records land keyed by tenant and
stream, in order within their partition, with the envelope and its headers intact."""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from tests.shred_support import plant_markers, scan
from tests.support import missing

from mnemo.adapters.memory_key_vault import InMemoryKeyVault
from mnemo.client.kafka import EventPublisher
from mnemo.domain.events import validate_envelope
from mnemo.domain.pii import REDACTED
from mnemo.sealing import KeyCache, Sealer

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
        missing("Kafka", f"no broker at {BOOTSTRAP}")
    return BOOTSTRAP


async def _create_topic(bootstrap: str, topic: str, partitions: int) -> None:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        await admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=1)]
        )
    finally:
        await admin.close()


async def _roundtrip(bootstrap: str, topic: str) -> tuple[list[str], list[object]]:
    from aiokafka import AIOKafkaConsumer

    await _create_topic(bootstrap, topic, 3)
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


def _kafka_data_dir() -> Path | None:
    """The broker's log.dirs when infra/services.py runs it (MNEMO_RUN_DIR or var/run)."""
    default = Path(__file__).resolve().parents[2] / "var" / "run"
    data = Path(os.environ.get("MNEMO_RUN_DIR", default)) / "kafka" / "data"
    return data if data.is_dir() else None


async def _publish_and_read(
    bootstrap: str, topic: str, batches: list[tuple[EventPublisher, list[dict[str, Any]]]]
) -> list[Any]:
    from aiokafka import AIOKafkaConsumer

    await _create_topic(bootstrap, topic, 1)
    count = 0
    for publisher, events in batches:
        async with publisher as pub:
            count += len(await pub.publish(events))
    consumer = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, auto_offset_reset="earliest", group_id=None
    )
    await consumer.start()
    got: list[Any] = []
    try:
        async with asyncio.timeout(30):
            while len(got) < count:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got.extend(records)
    finally:
        await consumer.stop()
    return got


def test_sealed_records_keep_plaintext_out_of_the_segments(broker: str) -> None:
    """With a vault, the publisher seals before producing: the raw log segment holds no
    marker, while a control marker sent without sealing is found there (the scan works);
    forgetting the user through the publisher shreds the key."""
    data_dir = _kafka_data_dir()
    topic = f"mnemo-seal-{uuid.uuid4().hex[:10]}"
    secret, control = plant_markers(), plant_markers()
    vault = InMemoryKeyVault()

    def publisher(with_vault: bool) -> EventPublisher:
        return EventPublisher(
            broker,
            tenant="acme",
            principal="ingest",
            topic=topic,
            vault=vault if with_vault else None,
        )

    def observation(text: str) -> dict[str, Any]:
        return {
            "type": "ObservationRecorded",
            "schema_version": 2,
            "stream": "user:kafka1",
            "payload": {"text": text},
        }

    sealed_events = [
        observation(f"my id is {secret.id_number}, card {secret.card}"),
        observation(f"phone {secret.phone}, mail {secret.email}, password: {secret.password}"),
    ]
    forget = {"type": "ForgetRequested", "schema_version": 1, "stream": "user:kafka1",
              "payload": {}}  # fmt: skip
    records = asyncio.run(
        _publish_and_read(
            broker,
            topic,
            [
                (publisher(True), sealed_events),
                (publisher(False), [observation(f"control {control.email}")]),
            ],
        )
    )
    assert len(records) == 3
    opener = Sealer(KeyCache(vault, 0.0))
    for record, original in zip(records[:2], sealed_events, strict=True):
        body = orjson.loads(record.value)
        assert body["encryption"]["key_id"] == "acme/user:kafka1"
        assert body["encryption"]["key_version"] == 1
        for marker in secret.all():
            assert marker not in record.value.decode()
        assert opener.open_json(body)["payload"]["text"] == original["payload"]["text"]

    if data_dir is not None:
        segments = sorted(data_dir.glob(f"{topic}-*"))
        assert segments
        assert scan(secret.all(), segments) == []
        assert scan([control.email], segments) != []  # the scan does see the segment
    elif os.environ.get("CI") == "true":
        pytest.fail("the Kafka data directory (var/run/kafka/data) is missing under CI")

    async def forget_user() -> None:
        async with publisher(True) as pub:
            await pub.publish(forget)

    asyncio.run(forget_user())
    body = orjson.loads(records[0].value)
    # a user's text is sealed whole: under the destroyed key none of it opens
    assert opener.open_json(body)["payload"]["text"] == REDACTED


async def _records_of(bootstrap: str, topic: str, partitions: int) -> list[Any]:
    """Every record of a topic, read from the start to its current end."""
    from aiokafka import AIOKafkaConsumer, TopicPartition

    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    got: list[Any] = []
    try:
        parts = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        ends = await consumer.end_offsets(parts)
        async with asyncio.timeout(30):
            while [tp for tp in parts if await consumer.position(tp) < ends[tp]]:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got.extend(records)
    finally:
        await consumer.stop()
    return got


def test_forgetting_a_tenant_through_the_publisher_destroys_every_key_first(broker: str) -> None:
    """A ForgetRequested with "tenant": true sent through the Kafka path destroys the
    tenant's key and every user key its earlier records were sealed under (found in the
    topic, by a publisher that sealed none of them itself) before the request is produced;
    another tenant's keys live on. With the vault down, nothing is produced."""
    from tests.vault_support import SwitchableVault

    from mnemo.domain.errors import KeyDestroyed, Unavailable

    topic = f"mnemo-forget-{uuid.uuid4().hex[:10]}"
    secret = plant_markers()
    vault = SwitchableVault()

    def publisher(tenant: str) -> EventPublisher:
        return EventPublisher(broker, tenant=tenant, principal="ingest", topic=topic, vault=vault)

    def observation(stream: str, text: str) -> dict[str, Any]:
        return {"type": "ObservationRecorded", "schema_version": 2, "stream": stream,
                "payload": {"text": text}}  # fmt: skip

    forget = {"type": "ForgetRequested", "schema_version": 1, "stream": "user:k1",
              "payload": {"tenant": True, "reason": "contract ended"}}  # fmt: skip

    async def scenario() -> tuple[list[Any], list[Any], list[Any]]:
        await _create_topic(broker, topic, 3)
        async with publisher("acme") as pub:
            await pub.publish(
                [
                    observation("user:k1", f"my card is {secret.card}"),
                    observation("user:k2", f"my phone is {secret.phone}"),
                    observation("team:ops", f"the shared mail is {secret.email}"),
                ]
            )
        async with publisher("globex") as pub:
            await pub.publish([observation("user:k1", f"my id is {secret.id_number}")])
        before = await _records_of(broker, topic, 3)
        vault.down = True
        async with publisher("acme") as pub:
            with pytest.raises(Unavailable):
                await pub.publish(forget)
        refused = await _records_of(broker, topic, 3)
        vault.down = False
        kept.extend(vault.inner.versions(k) for k in ("acme", "acme/user:k1", "acme/user:k2"))
        async with publisher("acme") as pub:  # a fresh publisher: no key cached, none known
            await pub.publish(forget)
        return before, refused, await _records_of(broker, topic, 3)

    kept: list[list[int]] = []
    before, refused, after = asyncio.run(scenario())
    assert len(before) == 4
    assert len(refused) == 4  # the vault was down: the request was not produced
    assert kept == [[1], [1], [1]]  # and no key was destroyed
    assert len(after) == 5
    kinds = sorted(dict(r.headers)["mnemo-event-type"] for r in after)
    assert kinds == [b"ForgetRequested", *[b"ObservationRecorded"] * 4]
    for key_id in ("acme", "acme/user:k1", "acme/user:k2"):
        assert vault.inner.versions(key_id) == []
        with pytest.raises(KeyDestroyed):
            vault.inner.data_key(key_id)
    assert vault.inner.versions("globex/user:k1") == [1]
    opener = Sealer(KeyCache(vault, 0.0))
    texts = {}
    for record in before:
        body = orjson.loads(record.value)
        texts[(body["tenant"], body["stream"])] = opener.open_json(body)["payload"]["text"]
    assert texts[("acme", "user:k1")] == REDACTED  # users' text: sealed whole
    assert texts[("acme", "user:k2")] == REDACTED
    assert texts[("acme", "team:ops")] == REDACTED  # a shared stream's, under the tenant's key
    assert texts[("globex", "user:k1")] == f"my id is {secret.id_number}"


def test_a_request_to_forget_with_a_sequence_is_refused_before_any_key_goes(broker: str) -> None:
    """The publisher cannot check `expected_seq`, so a request to forget that carries one is
    refused (EXPECTED_SEQ_UNCHECKED) before its key is destroyed and before anything is
    produced: the sequencer could otherwise refuse a request whose key was already gone."""
    from tests.vault_support import SwitchableVault

    from mnemo.domain.errors import InvalidInput

    topic = f"mnemo-forget-seq-{uuid.uuid4().hex[:10]}"
    vault = SwitchableVault()
    observed = {"type": "ObservationRecorded", "schema_version": 2, "stream": "user:q1",
                "payload": {"text": "my phone is 13812345678"}}  # fmt: skip
    forget = {"type": "ForgetRequested", "schema_version": 1, "stream": "user:q1",
              "expected_seq": 1, "payload": {"tenant": False}}  # fmt: skip

    async def scenario() -> str:

        await _create_topic(broker, topic, 1)
        async with EventPublisher(
            broker, tenant="acme", principal="ingest", topic=topic, vault=vault
        ) as pub:
            await pub.publish(observed)
            with pytest.raises(InvalidInput) as refused:
                await pub.publish(forget)
            return refused.value.code

    assert asyncio.run(scenario()) == "EXPECTED_SEQ_UNCHECKED"
    assert vault.has_key("acme/user:q1")
    assert not vault.is_destroyed("acme/user:q1")
