"""One acceptance rule (mnemo.domain.acceptance.accept) on every path an event comes in by:
the same events go through the gateway over HTTP, the SDK's Kafka publisher (its records,
built without a broker) and the registrar's check of a topic record, and get the same
verdicts and codes. The publisher paths (HTTP, Kafka publisher) and the topic differ only
where the trust levels do (the list in mnemo/domain/acceptance.py)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import orjson
import pytest
from fastapi.testclient import TestClient
from mnemo_gateway.app import create_app
from tests.conftest import T0
from tests.support import headers_for

from mnemo.bootstrap import Platform
from mnemo.client.kafka import EventPublisher
from mnemo.domain.acceptance import MAX_CLOCK_SKEW
from mnemo.domain.errors import InvalidInput
from mnemo.domain.ids import derived_id, new_event_id
from mnemo.ports import LogRecord
from mnemo.records import parse_record
from mnemo.settings import GatewaySettings

ACCEPTED = "accepted"
AGENT = {"kind": "agent", "id": "tester"}
SYSTEM = {"kind": "system", "id": "registrar"}
BLOCK = {
    "key_id": "acme/user:U1",
    "key_version": 1,
    "fields": ["text"],
    "wrapped_key": "dmF1bHQ6djE6eHh4",
    "values": {"email:h0123456789abcdef": "AAAA"},
}


def event(**changes: Any) -> dict[str, Any]:
    """A whole envelope (every path sees the same fields), with `changes` applied; a change
    to None removes the field."""
    base: dict[str, Any] = {
        "event_id": new_event_id(T0),
        "type": "ObservationRecorded",
        "schema_version": 2,
        "tenant": "acme",
        "stream": "user:U1",
        "occurred_at": T0.isoformat(),
        "actor": AGENT,
        "payload": {"text": "remember my size is M"},
    }
    base.update(changes)
    return {k: v for k, v in base.items() if v is not None}


def _tool_result(ahead: timedelta) -> dict[str, Any]:
    return event(
        type="ToolResultRecorded",
        schema_version=1,
        payload={
            "tool": "crm.get",
            "result": "{}",
            "source": "crm",
            "fetched_at": (T0 + ahead).isoformat(),
            "fresh_for_seconds": 60,
        },
    )


SAME_ON_EVERY_PATH = [
    ("a valid observation", event(), ACCEPTED),
    ("just within the clock skew", event(occurred_at=(T0 + MAX_CLOCK_SKEW).isoformat()), ACCEPTED),
    (
        "past the clock skew",
        event(occurred_at=(T0 + MAX_CLOCK_SKEW + timedelta(seconds=1)).isoformat()),
        "OCCURRED_IN_FUTURE",
    ),
    ("a time without offset", event(occurred_at="2026-11-30T12:00:00"), "INVALID_ENVELOPE"),
    (
        "a template in a subject's stream",
        event(type="TemplateRegistered", schema_version=1, payload={"template": {}}),
        "INVALID_STREAM",
    ),
    ("a UUIDv4 id", event(event_id="0190a6a0-0000-4000-8000-000000000001"), "INVALID_EVENT_ID"),
    ("an upper-case id", event(event_id=new_event_id(T0).upper()), "INVALID_EVENT_ID"),
    ("an id that is no UUID", event(event_id="evt-1"), "INVALID_EVENT_ID"),
    ("a system actor with a published id", event(actor=SYSTEM), "ACTOR_NOT_ALLOWED"),
    ("a seq", event(seq=1), "INVALID_ENVELOPE"),
    ("an unknown type", event(type="Nope"), "UNKNOWN_EVENT_TYPE"),
    ("an unknown version", event(schema_version=99), "UNSUPPORTED_SCHEMA_VERSION"),
    ("no stream", event(stream=None), "INVALID_ENVELOPE"),
    (
        "a payload off its schema",
        event(
            type="MemoryDeclared",
            schema_version=1,
            payload={"memory": {"type": "fact", "content": "x", "ttl_seconds": 10**12}},
        ),
        "INVALID_PAYLOAD",
    ),
    ("a blank turn", event(payload={"text": "  ", "kind": "turn"}), "BLANK_TEXT"),
    (
        "a text of invisible characters only",
        event(payload={"text": "\u200b\u3000\u00a0\u2060\ufeff"}),
        "BLANK_TEXT",
    ),
    (
        "a memory of zero-width spaces only",
        event(
            type="MemoryDeclared",
            schema_version=1,
            payload={"memory": {"type": "fact", "content": "\u200b\u200b\u200b"}},
        ),
        "EMPTY_CONTENT",
    ),
    (
        "a word joined by a zero-width joiner",
        event(payload={"text": "my name is Ann\u200dna"}),
        ACCEPTED,
    ),
    (
        "a speaker with a control character",
        event(payload={"text": "hi", "kind": "turn", "speaker": "a\u0000b"}),
        "INVALID_SPEAKER",
    ),
    (
        "a blank speaker",
        event(payload={"text": "hi", "kind": "turn", "speaker": "   "}),
        "INVALID_SPEAKER",
    ),
    (
        "a speaker's name in Chinese",
        event(payload={"text": "你好", "kind": "turn", "speaker": "王 小明"}),
        ACCEPTED,
    ),
    (
        "an offset out of range",
        event(payload={"text": "hi", "timezone": "+99:00"}),
        "INVALID_TIMEZONE",
    ),
    ("a time as a number", event(occurred_at=1_700_000_000), "INVALID_TIME"),
    ("a tool result fetched just within the clock skew", _tool_result(MAX_CLOCK_SKEW), ACCEPTED),
    (
        "a tool result fetched past the clock skew",
        _tool_result(MAX_CLOCK_SKEW + timedelta(seconds=1)),
        "FETCHED_IN_FUTURE",
    ),
]

# (what, event, verdict from a publisher, verdict on the topic)
BY_TRUST = [
    # a user stream with no user: refused to a publisher; on the topic a log may hold one
    # from before the rule, and a rebuild must read it as it was read then
    ("a user stream with no user id", event(stream="user:"), "INVALID_STREAM", ACCEPTED),
    ("a user stream with a user id", event(stream="user:u"), ACCEPTED, ACCEPTED),
    (
        "a system actor with a derived id",
        event(actor=SYSTEM, event_id=derived_id(T0, "registrar", "x")),
        "ACTOR_NOT_ALLOWED",
        ACCEPTED,
    ),
    (
        "an agent with a derived id (the gateway's feedback has them)",
        event(event_id=derived_id(T0, "feedback", "x")),
        "INVALID_EVENT_ID",
        ACCEPTED,
    ),
    (
        "a type only consumers emit",
        event(
            type="MemoryExpired",
            schema_version=1,
            payload={"memory_id": "m1", "expired_at": T0.isoformat()},
        ),
        "EVENT_TYPE_NOT_PUBLISHABLE",
        ACCEPTED,
    ),
    ("an encryption block", event(encryption=BLOCK), "ENCRYPTION_NOT_ALLOWED", ACCEPTED),
    ("another tenant", event(tenant="globex"), "TENANT_MISMATCH", ACCEPTED),
    (
        "a system event ahead of the clock",
        event(
            actor=SYSTEM,
            event_id=derived_id(T0, "decay", "y"),
            occurred_at=(T0 + timedelta(hours=1)).isoformat(),
        ),
        "ACTOR_NOT_ALLOWED",
        ACCEPTED,
    ),
]


Verdict = tuple[str, str | None]  # (ACCEPTED or the error code, the field it names)
Judge = Callable[[dict[str, Any]], Verdict]


def _refused(exc: InvalidInput) -> Verdict:
    return exc.code, _own_field(exc.field)


def _own_field(field: str | None) -> str | None:
    """A batch's paths name `events[0].<field>`: the event's own field."""
    if field is None or not field.startswith("events[0]"):
        return field
    return field.removeprefix("events[0]").removeprefix(".") or None


@pytest.fixture
def paths(platform: Platform) -> Iterator[dict[str, Judge]]:
    """Each path as a function from an event to its verdict."""
    publisher = EventPublisher("127.0.0.1:1", tenant="acme", principal="tester", clock=lambda: T0)

    with TestClient(
        create_app(platform, GatewaySettings(admin_token="op-token-for-tests"))
    ) as client:

        def http(raw: dict[str, Any]) -> Verdict:
            r = client.post("/v1/events", json=raw, headers=headers_for("acme", "tester"))
            if r.status_code == 202:
                return ACCEPTED, None
            assert 400 <= r.status_code < 500, r.text
            error = r.json()["error"]
            return str(error["code"]), _own_field(error.get("field"))

        def producer(raw: dict[str, Any]) -> Verdict:
            try:
                publisher.records([raw])
            except InvalidInput as exc:
                return _refused(exc)
            return ACCEPTED, None

        def topic(raw: dict[str, Any]) -> Verdict:
            key = f"{raw.get('tenant')}:{raw.get('stream')}".encode()
            try:
                parse_record(LogRecord(0, 0, key, orjson.dumps(raw)), T0)
            except InvalidInput as exc:
                return _refused(exc)
            return ACCEPTED, None

        yield {"http": http, "kafka publisher": producer, "topic": topic}


@pytest.mark.parametrize(
    ("raw", "code"),
    [(e, v) for _, e, v in SAME_ON_EVERY_PATH],
    ids=[w for w, _, _ in SAME_ON_EVERY_PATH],
)
def test_every_path_gives_the_same_verdict_code_and_field(
    paths: dict[str, Judge], raw: dict[str, Any], code: str
) -> None:
    verdicts = {name: judge(raw) for name, judge in paths.items()}
    assert {name: v[0] for name, v in verdicts.items()} == dict.fromkeys(paths, code)
    assert len(set(verdicts.values())) == 1, verdicts  # the same field named, too


@pytest.mark.parametrize(
    ("raw", "published", "on_topic"),
    [(e, p, t) for _, e, p, t in BY_TRUST],
    ids=[w for w, _, _, _ in BY_TRUST],
)
def test_the_publishers_agree_and_the_topic_differs_only_by_trust(
    paths: dict[str, Judge], raw: dict[str, Any], published: str, on_topic: str
) -> None:
    verdicts = {name: judge(raw) for name, judge in paths.items()}
    assert verdicts["http"] == verdicts["kafka publisher"]
    assert {name: v[0] for name, v in verdicts.items()} == {
        "http": published,
        "kafka publisher": published,
        "topic": on_topic,
    }


# ---- the digest that tells a retry from another event under a reused id ----------------------


def test_a_publication_digest_covers_what_the_client_sent_and_nothing_it_may_change() -> None:
    from mnemo.domain.acceptance import publication_digest

    key = b"k" * 32
    sent = {
        "event_id": "0190e9b4-7c00-7000-8000-000000000001",
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": "user:U1",
        "payload": {"memory": {"type": "fact", "content": "ships on tuesday", "tags": ["a"]}},
    }
    digest = publication_digest(sent, key)
    assert len(digest) == 32
    # members in another order, another trace, the tenant named: the same event
    shuffled = dict(reversed(list(sent.items())))
    shuffled["payload"] = {"memory": dict(reversed(list(sent["payload"]["memory"].items())))}
    assert publication_digest(shuffled, key) == digest
    assert (
        publication_digest(
            {**sent, "trace": {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01"}}, key
        )
        == digest
    )
    assert publication_digest({**sent, "tenant": "acme", "event_id": "x"}, key) == digest
    # any other content, another stream, another key: another digest
    other = {**sent, "payload": {"memory": {"type": "fact", "content": "ships on monday"}}}
    assert publication_digest(other, key) != digest
    assert publication_digest({**sent, "stream": "user:U2"}, key) != digest
    assert publication_digest({**sent, "occurred_at": "2026-12-01T00:00:00+00:00"}, key) != digest
    assert publication_digest(sent, b"j" * 32) != digest
    # what the fast encoder refuses is digested all the same, and stably
    odd = {**sent, "payload": {"n": 2**70, "s": "\ud800"}}
    assert publication_digest(odd, key) == publication_digest(dict(odd), key)
    assert publication_digest(odd, key) != publication_digest(
        {**odd, "payload": {"n": 2**71, "s": "\ud800"}}, key
    )
