"""Telemetry across the Kafka hop, on a real broker and a real Cassandra node: the gateway's
request, the produced record's W3C headers, each consumer's process spans with their
Cassandra calls as children, all in one trace; dead letters counted; no planted secret
in any span or log line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mnemo_gateway.app import create_app
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind
from tests.distributed_support import Pump, distributed_settings, running_distributed
from tests.otel_support import Captured, captured_telemetry, leaks, metric_points
from tests.support import fixed_key, headers_for, install_keys

from mnemo.bootstrap import Platform
from mnemo.settings import GatewaySettings

H = headers_for("acme", "planner")
API_KEY = "sk-live-PLANTED-0b6e93a1f5c2"
ID_NUMBER = "110101198807150019"


@pytest.fixture
def captured() -> Iterator[Captured]:
    with captured_telemetry() as c:
        yield c


@pytest.fixture
def platform(tmp_path: Path, captured: Captured) -> Iterator[Platform]:
    with running_distributed(distributed_settings(tmp_path / "data", partitions=2)) as built:
        install_keys(built, "acme")
        yield built


def observation(text: str, stream: str = "user:U7892") -> dict[str, Any]:
    return {
        "type": "ObservationRecorded",
        "schema_version": 2,
        "stream": stream,
        "payload": {"text": text},
    }


def descends_from(span: ReadableSpan, ancestor: ReadableSpan, spans: list[ReadableSpan]) -> bool:
    index = {s.context.span_id: s for s in spans}
    parent = span.parent
    while parent is not None:
        if parent.span_id == ancestor.context.span_id:
            return True
        found = index.get(parent.span_id)
        parent = found.parent if found is not None else None
    return False


def test_one_trace_links_the_gateway_through_kafka_into_each_consumer_and_cassandra(
    platform: Platform, captured: Captured
) -> None:
    topic = platform.settings.kafka_topic
    with TestClient(create_app(platform, GatewaySettings(), run_consumers=False)) as client:
        answer = client.post("/v1/events", headers=H, json=observation("记住我的尺码是L"))
    assert answer.status_code == 202, answer.text
    spans = captured.finished()
    (server,) = [s for s in spans if s.kind is SpanKind.SERVER]
    trace_id = server.context.trace_id
    (send,) = [s for s in spans if s.kind is SpanKind.PRODUCER]
    assert send.name == f"send {topic}"
    assert send.context.trace_id == trace_id
    assert (send.attributes or {})["messaging.system"] == "kafka"

    # the W3C context rides in the Kafka record's headers
    assert platform.distributed is not None
    partition = next(p for p, end in platform.distributed.topic.end_offsets().items() if end)
    (record,) = platform.distributed.topic.fetch(partition, 0, 10)
    headers = dict(record.headers)
    _, trace_hex, span_hex, _ = headers["traceparent"].decode().split("-")
    assert (trace_hex, span_hex) == (
        format(trace_id, "032x"),
        format(send.context.span_id, "016x"),
    )

    captured.spans.clear()
    Pump(platform).drain()
    spans = captured.finished()
    batches = {
        (s.attributes or {})["mnemo.consumer"]: s
        for s in spans
        if s.kind is SpanKind.CONSUMER
        and "messaging.batch.message_count" in (s.attributes or {})
        and s.context.trace_id == trace_id
        and s.parent is not None
        and s.parent.span_id == send.context.span_id
    }
    assert set(batches) == {"registrar", "indexer", "decay", "audit"}
    registrar = batches["registrar"]
    attributes = registrar.attributes or {}
    assert attributes["messaging.destination.name"] == topic
    assert attributes["messaging.operation.type"] == "process"
    assert attributes["messaging.consumer.group.name"] == "mnemo-registrar"
    assert attributes["messaging.destination.partition.id"] == str(partition)

    cassandra = [s for s in spans if (s.attributes or {}).get("db.system.name") == "cassandra"]
    under_registrar = [s for s in cassandra if descends_from(s, registrar, spans)]
    assert under_registrar, "the registrar's Cassandra calls are children of its span"
    assert all(
        s.kind is SpanKind.CLIENT and s.context.trace_id == trace_id for s in under_registrar
    )
    operations = {(s.attributes or {})["db.operation.name"] for s in under_registrar}
    assert {"SELECT", "INSERT"} <= operations
    for span in under_registrar:
        assert (span.attributes or {})["db.namespace"] == platform.settings.cassandra_keyspace
        assert span.name.startswith(str((span.attributes or {})["db.operation.name"]))
    (handled,) = [
        s
        for s in spans
        if (s.attributes or {}).get("messaging.message.id")
        == answer.json()["accepted"][0]["event_id"]
        and (s.attributes or {}).get("mnemo.consumer") == "registrar"
    ]
    assert handled.context.trace_id == trace_id
    assert (handled.attributes or {})["messaging.kafka.offset"] == record.offset
    # what the registrar emits inherits the trace, and goes through the topic again
    derived = [
        s
        for s in spans
        if (s.attributes or {}).get("mnemo.event.type") == "MemoryRegistered"
        and s.kind is SpanKind.CONSUMER
    ]
    assert derived
    assert all(s.context.trace_id == trace_id for s in derived)
    assert len([s for s in spans if s.kind is SpanKind.PRODUCER]) >= 1

    outs = {
        (p.attributes["mnemo.consumer"], p.attributes["mnemo.event.type"])
        for p in metric_points(captured, "mnemo.events.out")
    }
    assert ("audit", "ObservationRecorded") in outs
    fresh = metric_points(captured, "mnemo.freshness")
    assert fresh
    assert all(p.min >= 0 for p in fresh)


def test_dead_letters_are_counted_and_no_planted_secret_leaks(
    platform: Platform, captured: Captured
) -> None:
    assert platform.distributed is not None
    topic = platform.distributed.topic
    with TestClient(create_app(platform, GatewaySettings(), run_consumers=False)) as client:
        events = [
            observation(f"记住 my API key is {API_KEY}"),
            observation(f"身份证号 {ID_NUMBER}"),
        ]
        answer = client.post("/v1/events", headers=H, json={"events": events})
        assert answer.status_code == 202, answer.text
    # a broken record straight on the topic, carrying a secret in its value
    topic.produce([(b"acme:user:U7892", f'{{"not": "{API_KEY}"'.encode(), [])])
    Pump(platform).drain()
    (letters,) = metric_points(captured, "mnemo.dead_letters")
    assert letters.value == 1
    assert letters.attributes["error.type"] == "NOT_JSON"
    assert any(
        (s.attributes or {}).get("db.system.name") == "cassandra" for s in captured.finished()
    )
    assert leaks(captured, [API_KEY, ID_NUMBER, fixed_key("acme")]) == []
    # the records carrying them went through the topic (their values may be sealed)
    records = [r for p in topic.partitions() for r in topic.fetch(p, 0, 100)]
    assert len(records) >= 3
