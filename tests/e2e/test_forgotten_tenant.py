"""A forgotten tenant takes nothing more and reads as nothing, through the HTTP API.

An outside probe found a tenant half-forgotten: after `ForgetRequested {"tenant": true}`
a write to a shared stream was refused (its key was shredded) but a write to a NEW user
stream was accepted under a fresh user key, registered, and then served by get, list,
search and context while replay and the live tail of that stream were empty. Every write
of a forgotten tenant is now refused with 410 KEY_DESTROYED before anything is stored, and
its memories read as none even if one reached the read models (here: an event put in the
log past the gateway, as a write racing the forget in another process could)."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mnemo_gateway.app import create_app
from tests.support import headers_for

from mnemo.bootstrap import Platform
from mnemo.domain.events import validate_envelope
from mnemo.domain.ids import new_event_id
from mnemo.settings import GatewaySettings

ACME = headers_for("acme", "agent")
GLOBEX = headers_for("globex", "agent")


@pytest.fixture
def client(platform: Platform) -> Iterator[TestClient]:
    with TestClient(
        create_app(platform, GatewaySettings(wait_timeout=60, admin_token="op-token-for-tests"))
    ) as c:
        yield c


def declared(stream: str, content: str) -> dict[str, Any]:
    return {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": stream,
        "payload": {"memory": {"type": "fact", "content": content}},
    }


def publish(client: TestClient, headers: dict[str, str], event: dict[str, Any]) -> Any:
    return client.post("/v1/events?wait=indexed", json=event, headers=headers)


def registered(answer: Any) -> str:
    assert answer.status_code == 202, answer.text
    outcome = answer.json()["accepted"][0]["outcomes"][0]
    assert outcome["outcome"] == "registered", outcome
    return str(outcome["memory_id"])


def refused_gone(answer: Any) -> None:
    assert answer.status_code == 410, answer.text
    assert answer.json()["error"]["code"] == "KEY_DESTROYED"


def reads_nothing(client: TestClient, memory_ids: list[str], streams: list[str]) -> None:
    for memory_id in memory_ids:
        got = client.get(f"/v1/memories/{memory_id}", headers=ACME)
        assert got.status_code == 404, got.text
    for stream in streams:
        listed = client.get(f"/v1/subjects/{stream}/memories", headers=ACME)
        assert listed.status_code == 200, listed.text
        assert listed.json()["memories"] == []
        replayed = client.get(f"/v1/subjects/{stream}/events", headers=ACME)
        assert replayed.status_code == 200, replayed.text
        assert replayed.json()["events"] == []
    found = client.post("/v1/search", json={"query": "zebra", "subjects": streams}, headers=ACME)
    assert found.status_code == 200, found.text
    assert found.json()["hits"] == []
    found = client.post("/v1/search", json={"query": "zebra"}, headers=ACME)
    assert found.status_code == 200, found.text
    assert found.json()["hits"] == []
    ctx = client.post(
        "/v1/context", json={"subjects": streams, "query": "zebra", "budget": 500}, headers=ACME
    )
    assert ctx.status_code == 200, ctx.text
    assert "zebra" not in ctx.json()["context"]
    assert ctx.json()["included"] == []


def test_a_forgotten_tenant_takes_no_write_and_reads_nothing(
    client: TestClient, platform: Platform
) -> None:
    old = registered(publish(client, ACME, declared("session:Z3", "the zebra lives in Z3")))
    other = registered(publish(client, GLOBEX, declared("user:G1", "the zebra of globex")))

    forget = publish(
        client,
        ACME,
        {**declared("tenant", "x"), "type": "ForgetRequested"}
        | {"payload": {"tenant": True, "reason": "contract ended"}},
    )
    assert forget.status_code == 202, forget.text
    assert forget.json()["complete"] is True

    # every write is refused, before anything reaches the log or the blob store
    head = platform.log.head()
    refused_gone(publish(client, ACME, declared("session:Z3", "the zebra is back in Z3")))
    refused_gone(publish(client, ACME, declared("user:Z9", "a new zebra in Z9")))
    refused_gone(
        client.post(
            "/v1/events",
            json={"events": [declared("user:Z8", "zebra one"), declared("agent:A1", "zebra")]},
            headers=ACME,
        )
    )
    refused_gone(
        client.post(
            "/v1/documents",
            params={"subject": "user:Z9", "filename": "zebra.txt", "wait": "registered"},
            content="甲方：XX科技。The zebra contract.".encode(),
            headers=ACME,
        )
    )
    refused_gone(
        client.post(
            "/v1/toolchains",
            json={"toolchain_id": "z-1", "subject": "user:Z9", "steps": ["create_order"]},
            headers=ACME,
        )
    )
    assert platform.log.head() == head
    assert not platform.sealer.keys.vault.has_key("acme/user:Z9")  # no new user key made
    # nor does the key tell about itself any more; another tenant's still does
    refused_gone(client.get("/v1/whoami", headers=ACME))
    # its old admin key issues no new key, and lists none
    refused_gone(
        client.post(
            "/v1/tenants/acme/keys", json={"name": "again", "scopes": ["admin"]}, headers=ACME
        )
    )
    refused_gone(client.get("/v1/tenants/acme/keys", headers=ACME))
    assert client.get("/v1/tenants/globex/keys", headers=GLOBEX).status_code == 200
    assert client.get("/v1/whoami", headers=GLOBEX).json()["tenant"] == "globex"
    # the operator's way back issues no key that could only ever answer 410
    operator = {"X-Mnemo-Admin-Token": "op-token-for-tests"}
    refused_gone(client.post("/v1/admin/tenants/acme/keys", json={}, headers=operator))
    assert (
        client.post("/v1/admin/tenants/globex/keys", json={}, headers=operator).status_code == 201
    )
    listed = client.get("/v1/admin/tenants", headers=operator).json()["tenants"]
    assert [t["tenant"] for t in listed if t["forgotten"]] == ["acme"]
    assert "globex" in [t["tenant"] for t in listed]

    # a write that reached the log past the gateway (a race with the forget elsewhere) is
    # registered by the consumers, but the forgotten tenant's reads still answer nothing
    now = datetime.now(UTC)
    straggler = validate_envelope(
        {
            "event_id": new_event_id(now),
            "type": "MemoryDeclared",
            "schema_version": 1,
            "tenant": "acme",
            "stream": "user:Z7",
            "occurred_at": now.isoformat(),
            "actor": {"kind": "agent", "id": "racer"},
            "payload": {"memory": {"type": "fact", "content": "a racing zebra"}},
        },
        public=False,
    )
    [appended] = platform.log.append([straggler])
    assert platform.runner.wait_for("registrar", appended.offset, 60)
    assert platform.runner.wait_for("indexer", platform.log.head(), 60)
    raced = [o.memory_id for o in platform.store.outcome("acme", straggler.event_id)]
    assert raced, "the straggler was handled"
    assert raced[0], "the straggler was registered in the read model"
    head = platform.log.head()
    reads_nothing(client, [old, *[m for m in raced if m]], ["session:Z3", "user:Z7", "user:Z9"])
    assert platform.log.head() == head  # and the context assembled left no record

    # the other tenant is untouched: it reads and writes as before
    got = client.get(f"/v1/memories/{other}", headers=GLOBEX)
    assert got.status_code == 200, got.text
    assert "zebra" in got.json()["content"]
    found = client.post("/v1/search", json={"query": "zebra"}, headers=GLOBEX)
    assert [h["memory"]["memory_id"] for h in found.json()["hits"]] == [other]
    registered(publish(client, GLOBEX, declared("user:G2", "another zebra of globex")))
