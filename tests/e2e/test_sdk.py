"""The Python SDK (`mnemo.client`) against a real Mnemo server; the retry schedule against
an in-process mock transport; the Kafka publisher's records without a broker."""

from __future__ import annotations

import asyncio
import json
import random
import socket
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest
from tests.support import fixed_key, install_keys, running_server

from mnemo.client import (
    AsyncMnemoClient,
    ContextResponse,
    Memory,
    MnemoAPIError,
    MnemoClient,
    MnemoConnectionError,
    RetryPolicy,
)
from mnemo.client._core import retry_after_seconds
from mnemo.client.kafka import (
    EventPublisher,
    build_envelope,
    producer_config,
    record_for,
)
from mnemo.domain.errors import InvalidInput
from mnemo.domain.ids import new_event_id
from mnemo.domain.memory import MemoryDraft, MemoryStatus, MemoryType, Scope

TENANT = "sdk"
TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


# ---- a real server ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real server (embedded platform, gateway, uvicorn) on a free port, in a thread."""
    with running_server(tmp_path_factory.mktemp("server")) as (url, platform):
        install_keys(platform, TENANT, "other-tenant")
        yield url


@pytest.fixture
def mnemo(server_url: str) -> Iterator[MnemoClient]:
    with MnemoClient(
        server_url, tenant=TENANT, principal="sdk-test", api_key=fixed_key(TENANT)
    ) as client:
        yield client


def _unused_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


# ---- retries, against a mock transport ----------------------------------------------------


class Script:
    """A mock server that answers from a list, records each request and each sleep."""

    def __init__(self, *answers: httpx.Response | Exception) -> None:
        self.answers = list(answers)
        self.requests: list[httpx.Request] = []
        self.sleeps: list[float] = []

    def handle(self, request: httpx.Request) -> httpx.Response:
        self.requests.append(request)
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def ahandle(self, request: httpx.Request) -> httpx.Response:
        return self.handle(request)

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)

    async def asleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)

    def client(self, retry: RetryPolicy | None = None) -> MnemoClient:
        return MnemoClient(
            "http://mnemo.test",
            tenant="acme",
            principal="p",
            transport=httpx.MockTransport(self.handle),
            retry=retry,
            sleep=self.sleep,
            rng=random.Random(7),
        )


def _error(status: int, code: str, **headers: str) -> httpx.Response:
    body = {"error": {"code": code, "message": "try later"}}
    return httpx.Response(status, json=body, headers=headers)


MEMORY = {
    "memory_id": "01a22b07-8623-7c5d-b658-fa7a79aa796b",
    "tenant": "acme",
    "stream": "user:U1",
    "type": "preference",
    "scope": "user",
    "content": "",
    "key": "size",
    "value": "L",
    "created_at": "2026-11-30T09:00:00+08:00",
    "source_event_id": "01a22b07-8623-7982-82a6-1108a3234f6e",
    "content_hash": "c03b6bb3801fe2c9",
}


def test_retries_503_honouring_retry_after_then_succeeds() -> None:
    script = Script(
        _error(503, "LOG_UNAVAILABLE", **{"Retry-After": "1"}),
        _error(503, "STORE_UNAVAILABLE", **{"Retry-After": "2"}),
        httpx.Response(200, json=MEMORY),
    )
    with script.client() as client:
        memory = client.get(MEMORY["memory_id"])
    assert memory.key == "size"
    assert len(script.requests) == 3
    assert script.sleeps[0] >= 1.0
    assert script.sleeps[1] >= 2.0
    assert all(r.headers["X-Mnemo-Tenant"] == "acme" for r in script.requests)


def test_429_backs_off_exponentially_with_jitter() -> None:
    policy = RetryPolicy(attempts=5, base_delay=0.1, max_delay=0.3)
    script = Script(*[_error(429, "RATE_LIMITED")] * 4, httpx.Response(200, json=MEMORY))
    with script.client(policy) as client:
        client.get(MEMORY["memory_id"])
    caps = [0.1, 0.2, 0.3, 0.3]  # base * 2**n, capped at max_delay
    assert len(script.sleeps) == 4
    assert all(0.0 <= s <= cap for s, cap in zip(script.sleeps, caps, strict=True))
    assert len(set(script.sleeps)) == 4  # jittered, not a fixed schedule


def test_gives_up_after_the_last_attempt_with_the_api_error() -> None:
    script = Script(*[_error(503, "LOG_UNAVAILABLE", **{"Retry-After": "1"})] * 3)
    with script.client(RetryPolicy(attempts=3)) as client, pytest.raises(MnemoAPIError) as info:
        client.get("x")
    assert (info.value.status, info.value.code, info.value.retry_after) == (
        503,
        "LOG_UNAVAILABLE",
        1.0,
    )
    assert len(script.requests) == 3


def test_connection_errors_are_retried_only_when_safe() -> None:
    # a GET is idempotent: a broken read is retried
    script = Script(httpx.ReadError("reset"), httpx.Response(200, json=MEMORY))
    with script.client() as client:
        assert client.get("x").memory_id == MEMORY["memory_id"]
    # a report moves weights: a broken read might have been applied, so it is not repeated
    script = Script(httpx.ReadError("reset"), httpx.Response(200, json={}))
    with script.client() as client, pytest.raises(MnemoConnectionError):
        client.report("01a22b07-8623-7982-82a6-1108a3234f6e", "answer")
    assert len(script.requests) == 1
    # ... but a request that never left (connect error) is always safe to repeat
    feedback = {"request_id": "r", "response_hash": "h", "cited": []}
    script = Script(httpx.ConnectError("refused"), httpx.Response(200, json=feedback))
    with script.client() as client:
        assert client.report("r", "answer").response_hash == "h"


def test_a_retried_publish_resends_the_same_event_id() -> None:
    accepted = {"accepted": [{"event_id": "e", "offset": 1, "seq": 1, "duplicate": True}]}
    script = Script(
        httpx.ReadTimeout("lost"),
        _error(503, "LOG_UNAVAILABLE"),
        httpx.Response(202, json=accepted),
    )
    with script.client() as client:
        client.observe("user:U1", "hello", wait="none")
    ids = {json.loads(r.content)["event_id"] for r in script.requests}
    assert len(script.requests) == 3
    assert len(ids) == 1


def test_async_client_retries_too() -> None:
    script = Script(
        _error(503, "LOG_UNAVAILABLE", **{"Retry-After": "0.5"}), httpx.Response(200, json=MEMORY)
    )

    async def run() -> Memory:
        async with AsyncMnemoClient(
            "http://mnemo.test",
            tenant="acme",
            transport=httpx.MockTransport(script.ahandle),
            sleep=script.asleep,
        ) as client:
            return await client.get("x")

    assert asyncio.run(run()).value == "L"
    assert script.sleeps
    assert script.sleeps[0] >= 0.5


def test_retry_after_as_an_http_date() -> None:
    when = datetime.now(UTC) + timedelta(seconds=30)
    response = httpx.Response(503, headers={"Retry-After": format_datetime(when, usegmt=True)})
    seconds = retry_after_seconds(response)
    assert seconds is not None
    assert 25 <= seconds <= 31
    assert retry_after_seconds(httpx.Response(503, headers={"Retry-After": "soon"})) is None


def test_unreachable_server_raises_a_connection_error() -> None:
    no_wait = RetryPolicy(attempts=2, base_delay=0.0)
    url = f"http://127.0.0.1:{_unused_port()}"
    with MnemoClient(url, retry=no_wait) as client, pytest.raises(MnemoConnectionError) as info:
        client.templates()
    assert info.value.code == "UNREACHABLE"
    assert info.value.status == 0


# ---- the real server ----------------------------------------------------------------------


class LosesFirstAnswer(httpx.BaseTransport):
    """Delivers every request, but drops the answer to the first publish (as a network that
    fails after the server acted would)."""

    def __init__(self) -> None:
        self.inner = httpx.HTTPTransport()
        self.lost = 0

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = self.inner.handle_request(request)
        if request.url.path == "/v1/events" and self.lost == 0:
            response.read()
            response.close()
            self.lost += 1
            raise httpx.ReadError("connection reset after the request was sent")
        return response

    def close(self) -> None:
        self.inner.close()


def test_publish_retried_after_a_lost_answer_is_not_duplicated(server_url: str) -> None:
    transport = LosesFirstAnswer()
    with MnemoClient(
        server_url,
        tenant=TENANT,
        api_key=fixed_key(TENANT),
        transport=transport,
        retry=RetryPolicy(base_delay=0.0),
    ) as client:
        result = client.observe("user:lost", "my size is M", wait="registered")
        assert transport.lost == 1
        (accepted,) = result.accepted
        assert accepted.duplicate is True  # the log already had it from the first attempt
        events = client.replay("user:lost").events
    assert [e.event_id for e in events if e.type == "ObservationRecorded"] == [accepted.event_id]


def test_same_event_id_twice_is_a_duplicate(mnemo: MnemoClient) -> None:
    event = {
        "event_id": new_event_id(datetime.now(UTC)),
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": "user:dup",
        "payload": {"memory": {"type": "fact", "content": "lives in Lyon"}},
    }
    first = mnemo.publish(event, wait="registered")
    again = mnemo.publish(event, wait="registered")
    assert first.accepted[0].duplicate is False
    assert again.accepted[0].duplicate is True
    assert (again.accepted[0].offset, again.accepted[0].seq) == (
        first.accepted[0].offset,
        first.accepted[0].seq,
    )
    assert len(mnemo.list("user:dup").memories) == 1


def test_typed_models_parse_real_answers(mnemo: MnemoClient) -> None:
    observed = mnemo.remember("user:U7892", "记住我的尺码是L")
    assert observed.outcomes[0].outcome == "registered"
    size_id = observed.memory_ids[0]
    declared = mnemo.declare(
        "user:U7892",
        MemoryDraft(type=MemoryType.CONSTRAINT, content="禁止向未成年人推荐信贷产品"),
        traceparent=TRACEPARENT,
        correlation_id="onboarding",
    )
    rule_id = declared.memory_ids[0]
    drink = mnemo.remember(
        "user:U7892",
        type="preference",
        key="drink",
        value="green tea",
        tags=["food"],
        scope=Scope.USER,
        wait="indexed",
    )
    assert drink.complete
    assert drink.accepted[0].seq >= 1

    memory = mnemo.get(size_id)
    assert isinstance(memory, Memory)
    assert memory.type is MemoryType.PREFERENCE
    assert memory.status is MemoryStatus.ACTIVE
    assert memory.created_at.tzinfo is not None
    assert (memory.key, memory.value, memory.text()) == ("size", "L", "尺码：L")

    page = mnemo.list("user:U7892", types=["preference"])
    assert {m.key for m in page.memories} == {"size", "drink"}
    assert page.next_after is None
    assert [m.memory_id for m in mnemo.iter_memories("user:U7892", page_size=1)] == sorted(
        m.memory_id for m in mnemo.list("user:U7892").memories
    )

    hits = mnemo.search("green tea", subjects="user:U7892", limit=3).hits
    assert hits[0].memory.key == "drink"
    assert hits[0].score > 0
    assert hits[0].weight > 0

    ctx = mnemo.context(["user:U7892"], "what should I drink?", budget=400)
    assert isinstance(ctx, ContextResponse)
    assert ctx.tokens <= ctx.budget == 400
    assert rule_id in ctx.memory_ids
    assert ctx.context.startswith("[MNEMO-CONTEXT")
    assert ctx.included[0].score.relevance >= 0

    feedback = mnemo.report(ctx.request_id, f'Green tea <memory_ref id="{drink.memory_ids[0]}"/>')
    assert [c.memory_id for c in feedback.cited] == drink.memory_ids

    mnemo.remember("user:U7892", "记住我的尺码是XL")
    versions = mnemo.history("user:U7892", "size")
    assert [(m.value, m.status) for m in versions] == [
        ("L", MemoryStatus.SUPERSEDED),
        ("XL", MemoryStatus.ACTIVE),
    ]

    events = mnemo.replay("user:U7892", from_seq=1, limit=2)
    assert [e.seq for e in events.events] == [1, 2]
    assert events.next == 3
    traced = [e for e in mnemo.replay("user:U7892").events if e.trace]
    assert traced
    assert traced[0].trace is not None
    assert traced[0].trace.traceparent == TRACEPARENT
    tail = mnemo.tail(after_offset=0, limit=1000)
    assert all(e.tenant == TENANT and e.offset for e in tail.events)
    assert tail.next

    outcome = mnemo.outcome(declared.event_ids[0])
    assert outcome[0].memory_id == rule_id


def test_feedback_forget_and_templates(mnemo: MnemoClient) -> None:
    mid = mnemo.remember("user:fb", "likes jazz", type="preference").memory_ids[0]
    # a context with a query finds memories through the index: wait until it holds them
    indexed = mnemo.remember("user:fb", "owns a cat", type="fact", wait="indexed")
    assert indexed.complete
    other = indexed.memory_ids[0]
    ctx = mnemo.context(["user:fb"], "what music?", budget=400)
    assert mid in ctx.memory_ids
    cited = mnemo.cite(mid, request_id=ctx.request_id, position="beginning")
    assert cited.accepted
    again = mnemo.cite(mid, request_id=ctx.request_id, position="end")
    assert again.event_ids == cited.event_ids  # once per context and memory
    with pytest.raises(MnemoAPIError) as refused:
        mnemo.cite(other, request_id="01a22b07-8623-7c5d-b658-fa7a79aa796b")
    assert refused.value.code == "CONTEXT_NOT_FOUND"
    assert len(mnemo.correct([mid, other], "not true any more").accepted) == 1  # one stream
    assert mnemo.verify(other).accepted
    kinds = [e.type for e in mnemo.replay("user:fb").events]
    assert {"MemoryCited", "MemoryCorrected", "MemoryVerified"} <= set(kinds)

    forgotten = mnemo.forget("user:fb", other)
    assert forgotten.outcomes[0].outcome == "applied"
    assert [m.memory_id for m in mnemo.list("user:fb").memories] == [mid]
    missing = mnemo.forget("user:fb", "01a22b07-8623-7c5d-b658-fa7a79aa796b")
    assert missing.outcomes[0].reason_code == "MEMORY_NOT_FOUND"

    template = {
        "name": "sdk-tpl",
        "version": 1,
        "sections": [{"name": "all", "priority": 1, "budget": 200}],
    }
    created = mnemo.register_template(template)
    assert created.created is True
    assert created.template.name == "sdk-tpl"
    assert mnemo.register_template(template).created is False
    names = {t.template.name for t in mnemo.templates()}
    assert {"default", "sdk-tpl"} <= names
    assert mnemo.template("sdk-tpl").fingerprint == created.fingerprint


def test_due_verifications_answers_a_list_or_a_clear_404(mnemo: MnemoClient) -> None:
    answer: list[dict[str, Any]] | MnemoAPIError
    try:
        answer = mnemo.due_verifications("user:fb")
    except MnemoAPIError as exc:  # the endpoint is new; an older server has no such route
        answer = exc
    if isinstance(answer, MnemoAPIError):
        assert (answer.status, answer.code) == (404, "ROUTE_NOT_FOUND")
    else:
        assert all(isinstance(item, dict) for item in answer)


def test_api_errors_carry_status_code_and_field(server_url: str, mnemo: MnemoClient) -> None:
    with pytest.raises(MnemoAPIError) as info:
        mnemo.get("01a22b07-8623-7c5d-b658-fa7a79aa796b")
    assert (info.value.status, info.value.code, info.value.field) == (
        404,
        "MEMORY_NOT_FOUND",
        "memory_id",
    )
    with pytest.raises(MnemoAPIError) as info:
        mnemo.declare("user:bad", {"type": "fact", "content": "x", "semantic_weight": 2})
    assert info.value.status == 400
    assert info.value.field is not None
    assert info.value.field.startswith("events[0].payload.memory")
    with MnemoClient(server_url) as anonymous, pytest.raises(MnemoAPIError) as info:
        anonymous.list("user:U1")
    assert (info.value.status, info.value.code) == (401, "UNAUTHENTICATED")


def test_tenants_see_only_their_own_memories(server_url: str, mnemo: MnemoClient) -> None:
    mnemo.remember("user:shared-name", "secret plan", type="fact")
    other = mnemo.with_identity(tenant=None, principal="x", api_key=fixed_key("other-tenant"))
    assert other.list("user:shared-name").memories == []
    assert other.search("secret plan").hits == []


def test_async_client_against_the_server(server_url: str) -> None:
    async def run() -> tuple[list[str], list[str]]:
        async with AsyncMnemoClient(
            server_url, tenant=TENANT, principal="async", api_key=fixed_key(TENANT)
        ) as m:
            results = await asyncio.gather(
                *[m.remember("user:async", f"fact number {i}", type="fact") for i in range(10)]
            )
            ids = [r.memory_ids[0] for r in results]
            listed = [x.memory_id async for x in m.iter_memories("user:async", page_size=4)]
            return ids, listed

    ids, listed = asyncio.run(run())
    assert len(set(ids)) == 10
    assert sorted(listed) == sorted(ids)


def test_wait_indexed_gives_read_your_writes(mnemo: MnemoClient) -> None:
    text = "The user's parking spot is number 417 on level B2"
    assert mnemo.remember("user:ryw", text, type="fact", wait="indexed").complete
    hits = mnemo.search("parking spot level B2", subjects=["user:ryw"]).hits
    assert hits
    assert hits[0].memory.content == text


# ---- the Kafka publisher, without a broker -----------------------------------------------

OBSERVATION = {
    "type": "ObservationRecorded",
    "schema_version": 2,
    "stream": "user:U7892",
    "payload": {"text": "记住我的尺码是L"},
}


def test_kafka_envelope_key_headers_and_value() -> None:
    now = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
    envelope = build_envelope(
        {**OBSERVATION, "trace": {"traceparent": TRACEPARENT, "tracestate": "k=v"}},
        tenant="acme",
        principal="ingest",
        now=now,
    )
    assert envelope.tenant == "acme"
    assert envelope.actor.id == "ingest"
    assert envelope.occurred_at == now
    assert envelope.event_id[14] == "7"
    record = record_for(envelope, "mnemo.events")
    assert record.key == b"acme:user:U7892"
    headers = dict(record.headers)
    assert headers["mnemo-event-type"] == b"ObservationRecorded"
    assert headers["mnemo-schema-version"] == b"2"
    assert headers["mnemo-event-id"] == envelope.event_id.encode()
    assert headers["traceparent"] == TRACEPARENT.encode()
    assert headers["tracestate"] == b"k=v"
    value = json.loads(record.value)
    assert value["event_id"] == envelope.event_id
    assert "seq" not in value
    assert value["payload"] == {"text": "记住我的尺码是L"}
    assert record.timestamp_ms == int(now.timestamp() * 1000)
    assert "traceparent" not in dict(
        record_for(build_envelope(OBSERVATION, tenant="a", principal="p")).headers
    )


def test_kafka_envelope_is_validated_like_the_gateway() -> None:
    with pytest.raises(InvalidInput) as info:
        build_envelope({**OBSERVATION, "type": "Nope"}, tenant="acme", principal="p")
    assert info.value.code == "UNKNOWN_EVENT_TYPE"
    with pytest.raises(InvalidInput) as info:
        build_envelope({**OBSERVATION, "tenant": "other"}, tenant="acme", principal="p")
    assert info.value.code == "TENANT_MISMATCH"
    with pytest.raises(InvalidInput) as info:
        build_envelope({**OBSERVATION, "type": "MemoryRegistered"}, tenant="acme", principal="p")
    assert info.value.code == "EVENT_TYPE_NOT_PUBLISHABLE"


def test_kafka_producer_is_idempotent_with_acks_all() -> None:
    config = producer_config("kafka:9092")
    assert config["enable_idempotence"] is True
    assert config["acks"] == "all"
    with pytest.raises(ValueError, match="acks"):
        producer_config("kafka:9092", acks=1)


class FakeProducer:
    def __init__(self, **config: Any) -> None:
        self.config = config
        self.sent: list[dict[str, Any]] = []
        self.started = self.stopped = False

    async def start(self) -> None:
        self.started = True

    async def stop(self) -> None:
        self.stopped = True

    async def send(self, topic: str, **record: Any) -> asyncio.Future[None]:
        self.sent.append({"topic": topic, **record})
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


def test_kafka_publisher_sends_validated_batches_in_order() -> None:
    producers: list[FakeProducer] = []

    def factory(**config: Any) -> FakeProducer:
        producers.append(FakeProducer(**config))
        return producers[-1]

    second = {**OBSERVATION, "payload": {"text": "my size is M"}}

    async def run() -> list[str]:
        async with EventPublisher(
            "kafka:9092", tenant="acme", principal="ingest", producer_factory=factory
        ) as pub:
            ids = await pub.publish([OBSERVATION, second])
            with pytest.raises(InvalidInput) as info:
                await pub.publish([OBSERVATION, {**OBSERVATION, "schema_version": 9}])
            assert info.value.field == "events[1].schema_version"
            return ids

    ids = asyncio.run(run())
    (producer,) = producers
    assert producer.started
    assert producer.stopped
    assert producer.config["acks"] == "all"
    assert len(producer.sent) == 2  # the invalid batch sent nothing
    assert [json.loads(s["value"])["event_id"] for s in producer.sent] == ids
    assert [s["key"] for s in producer.sent] == [b"acme:user:U7892"] * 2
    assert producer.sent[0]["topic"] == "mnemo.events"


def test_record_turn_keeps_every_occurrence_as_history(mnemo: MnemoClient) -> None:
    stream = "user:sdk-turns"
    first = mnemo.record_turn(stream, "Thanks!", speaker="Ana", occurred_at="2026-01-05T10:00:00Z")
    second = mnemo.record_turn(stream, "Thanks!", speaker="Ana", occurred_at="2026-02-09T10:00:00Z")
    ids = [first.outcomes[0].memory_id, second.outcomes[0].memory_id]
    assert [first.outcomes[0].outcome, second.outcomes[0].outcome] == ["registered", "registered"]
    assert None not in ids
    assert len(set(ids)) == 2
    listed = mnemo.list(stream, types=["history"]).memories
    assert {m.memory_id for m in listed} == set(ids)  # both visible, months-old dates or not


def test_tool_results_from_both_clients(server_url: str, mnemo: MnemoClient) -> None:
    """record_tool_result and suggestions, blocking and async, against a real server; a
    repeated call (the same idempotency key) is recorded once."""
    stream = "user:tools-sdk"
    first = mnemo.record_tool_result(
        stream,
        "fx.rate",
        {"pair": "EUR/USD", "rate": 1.08},
        arguments={"pair": "EUR/USD"},
        source="ecb",
        fresh_for_seconds=60,
        wait="registered",
    )
    assert first.memory_id is not None
    memory = mnemo.get(first.memory_id)
    assert memory.provenance.source_id == "tool:fx.rate"
    assert memory.fetched_at is not None
    assert memory.valid_until == memory.fetched_at + timedelta(seconds=60)
    assert mnemo.suggestions(stream).suggestions == []  # the server declares no triggers

    async def run() -> tuple[str | None, list[Any]]:
        async with AsyncMnemoClient(
            server_url, tenant=TENANT, principal="sdk-async", api_key=fixed_key(TENANT)
        ) as client:
            recorded = await client.record_tool_result(
                stream,
                "crm.get_deal",
                {"stage": "won"},
                source="crm",
                fresh_for_seconds=3_600,
                wait="registered",
            )
            found = await client.suggestions(stream, as_of=datetime.now(UTC))
            return recorded.memory_id, found.suggestions

    memory_id, suggestions = asyncio.run(run())
    assert memory_id is not None
    assert mnemo.get(memory_id).provenance.source_location == "crm"
    assert suggestions == []
    with pytest.raises(MnemoAPIError) as caught:
        mnemo.record_tool_result(
            stream, "fx.rate", {"blob": "x" * 6_000}, source="ecb", fresh_for_seconds=60
        )
    assert (caught.value.status, caught.value.code) == (413, "TOOL_RESULT_TOO_LARGE")
    with pytest.raises(ValueError, match="not JSON compliant"):  # never leaves the client
        mnemo.record_tool_result(
            stream, "fx.rate", float("nan"), source="ecb", fresh_for_seconds=60
        )


def test_archived_memories_can_be_asked_for_by_both_clients() -> None:
    """`include_archived` reaches the server from list, iter_memories and search, on the
    blocking and the async client; left unset, it is not sent at all."""
    page = {"memories": [MEMORY], "next_after": None}
    script = Script(
        httpx.Response(200, json=page),
        httpx.Response(200, json=page),
        httpx.Response(200, json={"hits": []}),
        httpx.Response(200, json=page),
        httpx.Response(200, json={"hits": []}),
        httpx.Response(200, json=page),
    )
    with script.client() as client:
        client.list("user:U1", include_archived=True)
        assert [m.value for m in client.iter_memories("user:U1", include_archived=True)] == ["L"]
        client.search("size", include_archived=True)

    async def run() -> None:
        async with AsyncMnemoClient(
            "http://mnemo.test", tenant="acme", transport=httpx.MockTransport(script.ahandle)
        ) as client:
            await client.list("user:U1", include_archived=True)
            await client.search("size", include_archived=True)
            await client.list("user:U1")

    asyncio.run(run())
    lists = [r for r in script.requests if r.method == "GET"]
    searches = [json.loads(r.content) for r in script.requests if r.method == "POST"]
    assert [r.url.params.get("include_archived") for r in lists] == ["true", "true", "true", None]
    assert [s["include_archived"] for s in searches] == [True, True]
