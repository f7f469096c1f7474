"""An event id is the idempotency key of a publish: the same event sent again is a retry
(answered `duplicate`), while another event sent under an id the log holds is refused
(409 EVENT_ID_REUSED), so that a client never takes new content for stored when it was
dropped."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mnemo_gateway.app import create_app
from tests.support import headers_for

from mnemo.bootstrap import Platform
from mnemo.domain.ids import new_event_id
from mnemo.settings import GatewaySettings

H = headers_for("acme", "agent")
OTHER = headers_for("globex", "agent")


@pytest.fixture
def client(platform: Platform) -> Iterator[TestClient]:
    with TestClient(create_app(platform, GatewaySettings(admin_token="op-token-for-tests"))) as c:
        yield c


def declared(event_id: str, content: str, stream: str = "user:U1", **extra: Any) -> dict[str, Any]:
    return {
        "event_id": event_id,
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": stream,
        "payload": {"memory": {"type": "fact", "content": content}},
        **extra,
    }


def raw_digest(platform: Platform, tenant: str, event_id: str) -> str | None:
    """The digest as the log holds it (the body is read as stored)."""
    logged = platform.log.get(tenant, event_id)
    assert logged is not None
    return logged.envelope.digest


def content_of(client: TestClient, outcome: dict[str, Any]) -> str:
    memory = client.get(f"/v1/memories/{outcome['memory_id']}", headers=H)
    assert memory.status_code == 200, memory.text
    return str(memory.json()["content"])


@pytest.mark.parametrize("stream", ["user:U1", "team:ops"])
def test_another_event_under_a_held_id_is_refused_and_the_first_stays(
    client: TestClient, platform: Platform, stream: str
) -> None:
    # on a user's stream the content is sealed whole, so only the digest tells them apart
    event_id = new_event_id(datetime.now(UTC))
    first = client.post(
        "/v1/events?wait=registered",
        json=declared(event_id, "the customer prefers email", stream),
        headers=H,
    )
    assert first.status_code == 202, first.text
    [outcome] = first.json()["accepted"][0]["outcomes"]
    head = platform.log.head()

    other = client.post(
        "/v1/events?wait=registered",
        json=declared(event_id, "the customer prefers phone calls", stream),
        headers=H,
    )
    assert other.status_code == 409, other.text
    error = other.json()["error"]
    assert (error["code"], error["field"]) == ("EVENT_ID_REUSED", "events[0].event_id")
    assert "phone calls" not in other.text
    assert platform.log.head() == head
    assert content_of(client, outcome) == "the customer prefers email"

    # the same event again is a retry, whatever trace it carries this time
    retry = declared(
        event_id,
        "the customer prefers email",
        stream,
        trace={"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
    )
    again = client.post("/v1/events", json=retry, headers=H)
    assert again.status_code == 202, again.text
    assert again.json()["accepted"][0]["duplicate"] is True
    assert platform.log.head() == head


def test_a_batch_holding_a_reused_id_appends_nothing(
    client: TestClient, platform: Platform
) -> None:
    event_id, fresh = new_event_id(datetime.now(UTC)), new_event_id(datetime.now(UTC))
    r = client.post("/v1/events", json=declared(event_id, "size M"), headers=H)
    assert r.status_code == 202, r.text
    batch = [declared(fresh, "size L"), declared(event_id, "size S")]
    r = client.post("/v1/events", json={"events": batch}, headers=H)
    assert r.status_code == 409, r.text
    assert (r.json()["error"]["code"], r.json()["error"]["field"]) == (
        "EVENT_ID_REUSED",
        "events[1].event_id",
    )
    assert platform.log.get("acme", fresh) is None


def test_one_id_twice_in_a_batch_names_the_second(client: TestClient, platform: Platform) -> None:
    """Neither is in the log: the error once said the first was, and named events[0]."""
    event_id = new_event_id(datetime.now(UTC))
    head = platform.log.head()
    batch = [declared(event_id, "size L"), declared(event_id, "size XL")]
    r = client.post("/v1/events", json={"events": batch}, headers=H)
    assert r.status_code == 409, r.text
    error = r.json()["error"]
    assert (error["code"], error["field"]) == ("EVENT_ID_REUSED", "events[1].event_id")
    assert "events[0] and events[1] of this batch" in error["message"]
    assert platform.log.head() == head


def test_a_client_may_not_set_the_digest(client: TestClient, platform: Platform) -> None:
    head = platform.log.head()
    forged = declared(new_event_id(datetime.now(UTC)), "x", digest="0" * 32)
    r = client.post("/v1/events", json=forged, headers=H)
    assert r.status_code == 400, r.text
    assert (r.json()["error"]["code"], r.json()["error"]["field"]) == (
        "INVALID_ENVELOPE",
        "events[0].digest",
    )
    assert platform.log.head() == head


def test_digests_are_keyed_per_tenant_and_only_for_ids_the_client_chose(
    client: TestClient, platform: Platform
) -> None:
    at = datetime.now(UTC)
    ids = new_event_id(at), new_event_id(at)
    body = declared(ids[0], "the door code is 4711", "team:ops")
    assert client.post("/v1/events", json=body, headers=H).status_code == 202
    assert (
        client.post("/v1/events", json={**body, "event_id": ids[1]}, headers=OTHER).status_code
        == 202
    )
    ours, theirs = raw_digest(platform, "acme", ids[0]), raw_digest(platform, "globex", ids[1])
    assert ours is not None
    assert theirs is not None
    assert len(ours) == 32
    assert ours != theirs  # the same event, another tenant's key
    # an event Mnemo gave its id gets no digest: no client can send it again
    fresh = client.post(
        "/v1/events", json={k: v for k, v in body.items() if k != "event_id"}, headers=H
    )
    assert fresh.status_code == 202, fresh.text
    assert raw_digest(platform, "acme", fresh.json()["accepted"][0]["event_id"]) is None
