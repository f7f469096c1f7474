"""Telemetry on the embedded platform, through the gateway: one trace from the HTTP request
through the log into each consumer; metrics; JSON logs with trace ids; and no planted
secret in any span or log line."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mnemo_gateway.app import create_app
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import SpanKind
from tests.otel_support import Captured, captured_telemetry, leaks, metric_points, wait_for_spans
from tests.support import fixed_key, headers_for, install_keys

from mnemo import telemetry
from mnemo.adapters.clocks import FixedClock
from mnemo.adapters.memory_key_vault import InMemoryKeyVault
from mnemo.bootstrap import Platform, build_embedded
from mnemo.handlers import registration
from mnemo.settings import GatewaySettings, MnemoSettings

H = headers_for("acme", "planner")
# planted secrets: none of them may reach a span or a log line
API_KEY = "sk-live-PLANTED-4f9a2c71e8d3"
ID_NUMBER = "110101199003071234"
ADMIN_TOKEN = "adm-PLANTED-token-77c1d0"
SECRETS = (API_KEY, ID_NUMBER, ADMIN_TOKEN, fixed_key("acme"))


@pytest.fixture
def captured() -> Iterator[Captured]:
    with captured_telemetry() as c:
        yield c


@pytest.fixture
def embedded(tmp_path: Path, clock: FixedClock, captured: Captured) -> Iterator[Platform]:
    built = build_embedded(
        MnemoSettings(data_dir=tmp_path / "data", embedder="hashing", sqlite_synchronous="NORMAL"),
        clock=clock,
    )
    install_keys(built, "acme")
    yield built
    built.close()


@pytest.fixture
def client(embedded: Platform) -> Iterator[TestClient]:
    app = create_app(embedded, GatewaySettings(admin_token=ADMIN_TOKEN))
    with TestClient(app) as c:
        yield c


def observation(text: str, stream: str = "user:U7892") -> dict[str, Any]:
    return {
        "type": "ObservationRecorded",
        "schema_version": 2,
        "stream": stream,
        "payload": {"text": text},
    }


def by_kind(spans: list[ReadableSpan], kind: SpanKind, name: str) -> list[ReadableSpan]:
    return [s for s in spans if s.kind is kind and s.name == name]


def ancestors(span: ReadableSpan, spans: list[ReadableSpan]) -> list[str]:
    """The names of a span's ancestors, nearest first."""
    index = {s.context.span_id: s for s in spans}
    out = []
    parent = span.parent
    while parent is not None and parent.span_id in index:
        found = index[parent.span_id]
        out.append(found.name)
        parent = found.parent
    return out


def consumed(spans: list[ReadableSpan], consumer: str, trace_id: int) -> list[ReadableSpan]:
    return [
        s
        for s in by_kind(spans, SpanKind.CONSUMER, "process log.sqlite3")
        if (s.attributes or {}).get("mnemo.consumer") == consumer and s.context.trace_id == trace_id
    ]


def test_a_request_is_one_trace_from_the_gateway_into_every_consumer(
    client: TestClient, embedded: Platform, captured: Captured
) -> None:
    answer = client.post(
        "/v1/events", params={"wait": "indexed"}, headers=H, json=observation("记住我的尺码是L")
    )
    assert answer.status_code == 202, answer.text
    spans = captured.finished()
    (server,) = [s for s in spans if s.kind is SpanKind.SERVER and s.name == "POST /v1/events"]
    trace_id = server.context.trace_id
    (send,) = [
        s
        for s in by_kind(spans, SpanKind.PRODUCER, "send log.sqlite3")
        if s.context.trace_id == trace_id
        and "POST /v1/events" in ancestors(s, spans)
        and "process log.sqlite3" not in ancestors(s, spans)
    ]
    assert send.attributes is not None
    assert send.attributes["messaging.system"] == "sqlite"
    assert send.attributes["messaging.operation.type"] == "send"

    # the event carries the producer span's context in the log
    (logged,) = embedded.log.read(0, 1)
    assert logged.envelope.trace is not None
    assert logged.envelope.trace.traceparent.split("-")[1:3] == [
        format(trace_id, "032x"),
        format(send.context.span_id, "016x"),
    ]

    def complete(found: list[ReadableSpan]) -> bool:
        return all(consumed(found, c, trace_id) for c in ("registrar", "indexer", "decay", "audit"))

    spans = wait_for_spans(captured, complete)
    registrar = consumed(spans, "registrar", trace_id)
    # the registrar's batch span continues the publish: a child of the send span
    batch = next(s for s in registrar if "messaging.batch.message_count" in (s.attributes or {}))
    assert batch.parent is not None
    assert batch.parent.span_id == send.context.span_id
    assert any(link.context.span_id == send.context.span_id for link in batch.links)
    handled = [s for s in registrar if (s.attributes or {}).get("mnemo.event.type")]
    assert {(s.attributes or {})["mnemo.event.type"] for s in handled} >= {"ObservationRecorded"}
    assert all("send log.sqlite3" in ancestors(s, spans) for s in handled)
    # what the registrar emitted (MemoryRegistered) is sent from inside its handling
    emitted = [
        s
        for s in by_kind(spans, SpanKind.PRODUCER, "send log.sqlite3")
        if s.context.trace_id == trace_id and s is not send
    ]
    assert emitted
    assert all("process log.sqlite3" in ancestors(s, spans) for s in emitted)
    # the indexer's vector writes are spans of the same trace
    upserts = [s for s in spans if s.name == "upsert vectors" and s.context.trace_id == trace_id]
    assert upserts
    assert (upserts[0].attributes or {})["db.system.name"] == "qdrant"


def test_metrics_count_events_in_and_out_and_freshness(
    client: TestClient, captured: Captured
) -> None:
    events = [observation("记住我的尺码是L"), observation("I like green tea", "user:U1")]
    answer = client.post(
        "/v1/events", params={"wait": "indexed"}, headers=H, json={"events": events}
    )
    assert answer.status_code == 202
    wait_for_spans(
        captured,
        lambda spans: any((s.attributes or {}).get("mnemo.consumer") == "audit" for s in spans),
    )
    ins = {
        p.attributes["mnemo.event.type"]: p.value
        for p in metric_points(captured, "mnemo.events.in")
    }
    assert ins["ObservationRecorded"] == 2
    outs = {
        (p.attributes["mnemo.consumer"], p.attributes["mnemo.event.type"]): p.value
        for p in metric_points(captured, "mnemo.events.out")
    }
    assert outs[("registrar", "ObservationRecorded")] == 2
    fresh = [
        p
        for p in metric_points(captured, "mnemo.freshness")
        if p.attributes["mnemo.consumer"] == "registrar"
    ]
    assert sum(p.count for p in fresh) >= 2

    answer = client.post(
        "/v1/context", headers=H, json={"subjects": ["user:U7892"], "query": "尺码", "budget": 64}
    )
    assert answer.status_code == 200, answer.text
    (tokens,) = metric_points(captured, "mnemo.context.tokens")
    assert tokens.count == 1
    assert 0 < tokens.sum <= 64
    (duration,) = metric_points(captured, "mnemo.context.duration")
    assert duration.count == 1
    assert duration.sum > 0


def test_consumer_lag_is_observed_per_consumer(embedded: Platform, captured: Captured) -> None:
    stop = telemetry.watch_lag(lambda: {c: {0: n} for c, n in embedded.runner.lag().items()})
    try:
        from mnemo.service.app import RequestContext

        embedded.app.publish(RequestContext("acme", "t"), [observation("hello there")])
        lag = {
            p.attributes["mnemo.consumer"]: p.value
            for p in metric_points(captured, "mnemo.consumer.lag")
        }
        assert lag == {"registrar": 1, "indexer": 1, "decay": 1, "audit": 1}
        embedded.runner.drain()
        lag = {
            p.attributes["mnemo.consumer"]: p.value
            for p in metric_points(captured, "mnemo.consumer.lag")
        }
        assert set(lag.values()) == {0}
    finally:
        stop()


def test_json_logs_carry_the_trace_of_the_event_being_handled(
    client: TestClient, captured: Captured, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken(*_: Any) -> Any:
        raise RuntimeError("a handler bug")

    monkeypatch.setattr(registration, "handle", broken)
    answer = client.post(
        "/v1/events", params={"wait": "registered"}, headers=H, json=observation("hello")
    )
    assert answer.status_code == 202
    server = next(s for s in captured.finished() if s.name == "POST /v1/events")
    wanted = format(server.context.trace_id, "032x")
    lines = [json.loads(line) for line in captured.logs.lines]
    failed = [line for line in lines if line["message"] == "registration failed"]
    assert failed, lines
    assert failed[0]["trace_id"] == wanted
    assert failed[0]["level"] == "ERROR"
    assert "RuntimeError" in failed[0]["exception"]
    assert len(failed[0]["span_id"]) == 16


def test_no_planted_secret_reaches_a_span_or_a_log_line(
    client: TestClient, embedded: Platform, captured: Captured
) -> None:
    events = [
        observation(f"记住 my API key is {API_KEY}"),
        observation(f"身份证号 {ID_NUMBER}, 记住我的尺码是L"),
        {
            "type": "MemoryDeclared",
            "schema_version": 1,
            "stream": "user:U7892",
            "payload": {"memory": {"type": "fact", "content": f"ID number {ID_NUMBER}"}},
        },
    ]
    answer = client.post(
        "/v1/events", params={"wait": "indexed"}, headers=H, json={"events": events}
    )
    assert answer.status_code == 202, answer.text
    assert (
        client.post(
            "/v1/search", headers=H, json={"query": f"key {API_KEY}", "limit": 5}
        ).status_code
        == 200
    )
    assert (
        client.post(
            "/v1/context", headers=H, json={"subjects": ["user:U7892"], "query": ID_NUMBER}
        ).status_code
        == 200
    )
    status = client.get("/v1/admin/status", headers={**H, "X-Mnemo-Admin-Token": ADMIN_TOKEN})
    assert status.status_code < 500, status.text
    # a refused request with the secrets in the body, and one with a wrong token
    assert client.post("/v1/events", headers=H, json={"type": API_KEY}).status_code == 400
    refused = client.post(
        "/v1/admin/rebuild", headers={**H, "X-Mnemo-Admin-Token": ADMIN_TOKEN + "x"}
    )
    assert refused.status_code >= 400
    vault = telemetry.traced_vault(InMemoryKeyVault())
    plain, wrapped, _ = vault.data_key(f"acme:{ID_NUMBER}")
    assert vault.unwrap(f"acme:{ID_NUMBER}", wrapped) == plain
    embedded.runner.drain()

    assert leaks(captured, [*SECRETS, plain.hex(), wrapped.hex()]) == []
    # the events carrying them went all the way (sealed in the log, where a vault is set)
    published = {e.envelope.event_id for e in embedded.log.read(0, 1_000)}
    assert {a["event_id"] for a in answer.json()["accepted"]} <= published
    names = {s.name for s in captured.finished()}
    assert {"POST /v1/events", "send log.sqlite3", "vault data_key", "vault unwrap"} <= names
    (vault_time,) = [
        p
        for p in metric_points(captured, "mnemo.vault.duration")
        if p.attributes["mnemo.vault.operation"] == "data_key"
    ]
    assert vault_time.count == 1
