"""The telemetry helpers on their own: CQL summaries, batch spans over records of one trace
or of many, the vault wrapper, JSON log lines and configuration from the environment."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from opentelemetry.trace import SpanKind
from tests.otel_support import Captured, captured_telemetry, leaks, metric_points

from mnemo import telemetry
from mnemo.adapters.memory_key_vault import InMemoryKeyVault
from mnemo.domain.errors import KeyDestroyed
from mnemo.domain.events import Actor, ActorKind, Envelope, TraceContext


@pytest.fixture
def captured() -> Iterator[Captured]:
    with captured_telemetry() as c:
        yield c


def envelope(trace: TraceContext | None = None, kind: str = "ObservationRecorded") -> Envelope:
    return Envelope(
        event_id="0190f5a0-0000-7000-8000-000000000001",
        type=kind,
        schema_version=2,
        tenant="acme",
        stream="user:U1",
        occurred_at=datetime(2026, 1, 1, tzinfo=UTC),
        actor=Actor(kind=ActorKind.AGENT, id="a"),
        payload={"text": "hello"},
        trace=trace,
    )


@pytest.mark.parametrize(
    ("cql", "expected"),
    [
        (
            "SELECT body FROM mnemo.memories WHERE tenant = ? AND memory_id = ?",
            {
                "db.operation.name": "SELECT",
                "db.collection.name": "memories",
                "db.namespace": "mnemo",
            },
        ),
        (
            "INSERT INTO ks_1.outcomes (tenant, event_id) VALUES (?, ?) USING TIMESTAMP ?",
            {
                "db.operation.name": "INSERT",
                "db.collection.name": "outcomes",
                "db.namespace": "ks_1",
            },
        ),
        (
            "UPDATE positions SET log_offset = ? WHERE consumer = ?",
            {
                "db.operation.name": "UPDATE",
                "db.collection.name": "positions",
                "db.namespace": "home",
            },
        ),
        (
            "DELETE FROM ks.timers USING TIMESTAMP ? WHERE tenant = ?",
            {"db.operation.name": "DELETE", "db.collection.name": "timers", "db.namespace": "ks"},
        ),
        (
            "BEGIN UNLOGGED BATCH INSERT INTO t (a) VALUES (?); APPLY BATCH",
            {"db.operation.name": "BATCH", "db.namespace": "home"},
        ),
        (
            "CREATE TABLE IF NOT EXISTS ks.x (a int PRIMARY KEY)",
            {"db.operation.name": "CREATE", "db.namespace": "home"},
        ),
    ],
)
def test_cql_summaries_name_operation_table_and_keyspace(
    cql: str, expected: dict[str, str]
) -> None:
    assert telemetry.cql_summary(cql, "home") == expected


def test_records_of_one_trace_are_processed_inside_it(captured: Captured) -> None:
    tracer = telemetry.tracer()
    with tracer.start_as_current_span("send", kind=SpanKind.PRODUCER) as send:
        stamped = telemetry._trace_of()
    assert stamped is not None
    parents = [telemetry.parent_of(stamped)] * 3
    with (
        telemetry.consuming("audit", parents, system="kafka", destination="t") as batch,
        telemetry.handling(batch, envelope(stamped), parents[0], offset=7),
    ):
        pass
    process = [s for s in captured.finished() if s.name == "process t"]
    assert len(process) == 2
    outer = next(s for s in process if "messaging.batch.message_count" in (s.attributes or {}))
    inner = next(s for s in process if s is not outer)
    assert outer.parent is not None
    assert outer.parent.span_id == send.get_span_context().span_id
    assert inner.parent is not None
    assert inner.parent.span_id == outer.context.span_id
    assert (inner.attributes or {})["messaging.kafka.offset"] == 7
    assert len(outer.links) == 1  # the same producer context, linked once


def test_records_of_many_traces_get_a_batch_of_their_own_with_links(captured: Captured) -> None:
    tracer = telemetry.tracer()
    stamps = []
    for _ in range(2):
        with tracer.start_as_current_span("send", kind=SpanKind.PRODUCER):
            stamps.append(telemetry._trace_of())
    parents = [telemetry.parent_of(s) for s in stamps] + [None]
    with (
        telemetry.consuming("indexer", parents, system="kafka", destination="t") as batch,
        telemetry.handling(batch, envelope(stamps[1]), parents[1]),
    ):
        pass
    sends = [s for s in captured.finished() if s.name == "send"]
    outer = next(
        s for s in captured.finished() if "messaging.batch.message_count" in (s.attributes or {})
    )
    inner = next(s for s in captured.finished() if "messaging.message.id" in (s.attributes or {}))
    assert outer.parent is None
    assert outer.context.trace_id not in {s.context.trace_id for s in sends}
    assert {link.context.span_id for link in outer.links} == {s.context.span_id for s in sends}
    # the record's own span stays in its producer's trace, linked to the batch
    assert inner.context.trace_id == sends[1].context.trace_id
    assert [link.context.span_id for link in inner.links] == [outer.context.span_id]


def test_sending_stamps_only_envelopes_without_a_trace(captured: Captured) -> None:
    theirs = TraceContext(traceparent="00-" + "a" * 32 + "-" + "b" * 16 + "-01")
    with telemetry.sending(
        [envelope(), envelope(theirs)], system="kafka", destination="t"
    ) as stamped:
        pass
    (send,) = captured.finished()
    assert stamped[1].trace == theirs
    assert stamped[0].trace is not None
    assert stamped[0].trace.traceparent.startswith(
        f"00-{send.context.trace_id:032x}-{send.context.span_id:016x}-"
    )
    (point,) = metric_points(captured, "mnemo.events.in")
    assert point.value == 2


def test_nothing_is_stamped_when_tracing_is_off() -> None:
    telemetry.reset()
    with telemetry.sending([envelope()], system="kafka", destination="t") as stamped:
        assert stamped[0].trace is None


def test_vault_calls_are_timed_and_traced_without_their_arguments(captured: Captured) -> None:
    vault = telemetry.traced_vault(InMemoryKeyVault())
    plain, wrapped, _ = vault.data_key("acme:user:secret-person")
    vault.destroy("acme:user:secret-person")
    with pytest.raises(KeyDestroyed):
        vault.unwrap("acme:user:secret-person", wrapped)
    spans = captured.finished()
    assert [s.name for s in spans] == ["vault data_key", "vault destroy", "vault unwrap"]
    assert all(s.kind is SpanKind.CLIENT for s in spans)
    failed = spans[-1]
    assert (failed.attributes or {})["error.type"] == "KeyDestroyed"
    assert not failed.events  # no exception event: its message could quote a key id
    points = {
        (p.attributes["mnemo.vault.operation"], p.attributes["mnemo.outcome"]): p.count
        for p in metric_points(captured, "mnemo.vault.duration")
    }
    assert points == {("data_key", "ok"): 1, ("destroy", "ok"): 1, ("unwrap", "KeyDestroyed"): 1}
    assert leaks(captured, ["secret-person", plain.hex(), wrapped.hex()]) == []


def test_json_log_lines_carry_the_current_trace(captured: Captured) -> None:
    logger = logging.getLogger("mnemo.test")
    logger.info("outside any span")
    with telemetry.tracer().start_as_current_span("work") as span:
        logger.warning("inside %s", "a span", extra={"event_id": "e1"})
    outside, inside = (json.loads(line) for line in captured.logs.lines[-2:])
    assert "trace_id" not in outside
    assert outside["message"] == "outside any span"
    context = span.get_span_context()
    assert inside["trace_id"] == f"{context.trace_id:032x}"
    assert inside["span_id"] == f"{context.span_id:016x}"
    assert inside["message"] == "inside a span"
    assert inside["level"] == "WARNING"
    assert inside["event_id"] == "e1"


def test_configure_exports_nothing_without_an_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in (
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    ):
        monkeypatch.delenv(name, raising=False)
    assert telemetry.configure("test") is False
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318")
    monkeypatch.setenv("OTEL_SDK_DISABLED", "true")
    assert telemetry.configure("test") is False
    assert telemetry.fastapi_config() is None


def test_the_kafka_clients_repeated_records_are_held_back_and_counted() -> None:
    """With a broker down, aiokafka logs each failed reconnection, ten a second: one of a
    run of identical records passes per window, the next says how many were held back;
    other loggers' records, and different messages, all pass."""
    import io
    import logging.config

    now = [0.0]
    config = telemetry.logging_config("INFO", "text")
    config["filters"]["repeats"] = {
        "()": telemetry.QuietRepeats,
        "window": 10.0,
        "clock": lambda: now[0],
    }
    stream = io.StringIO()
    config["handlers"]["stderr"]["stream"] = stream
    root, cassandra = logging.getLogger(), logging.getLogger("cassandra")
    before = (root.handlers[:], root.level, cassandra.level)
    logging.config.dictConfig(config)
    try:
        kafka = logging.getLogger("aiokafka.conn")
        ours = logging.getLogger("mnemo.worker")
        for _ in range(30):
            kafka.error("Unable connect to node with id %s: %s", 1, "refused")
            ours.warning("filling in skipped")
            now[0] += 0.1
        kafka.error("Unable to update metadata from %s", [1])
        now[0] = 10.5
        kafka.error("Unable connect to node with id %s: %s", 1, "refused")
        lines = stream.getvalue().splitlines()
    finally:
        root.handlers[:] = before[0]
        root.setLevel(before[1])
        cassandra.setLevel(before[2])
    refused = [x for x in lines if "Unable connect" in x]
    assert len(refused) == 2, lines
    assert "more like it" not in refused[0]
    assert "(29 more like it held back since it was last logged)" in refused[1]
    assert sum("Unable to update metadata" in x for x in lines) == 1
    assert sum("filling in skipped" in x for x in lines) == 30
