"""A rebuild after a user's forget: the user's key is shredded, so every word the log holds
for them reads as the redaction marker when the consumers replay it. Commands that were
decided on those words (a duplicate declaration, a duplicate tool result, a citation of a
context) must be decided as they were live, and never registered again from the marker: a
rebuild appends nothing to the log and gives the live read models (the same checksum)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mnemo_gateway.app import create_app
from tests.conftest import T0
from tests.support import headers_for

from mnemo.bootstrap import Platform
from mnemo.entrypoints.admin import platform_checksum, rebuild_read_models
from mnemo.settings import GatewaySettings

H = headers_for("acme")
STREAM = "user:U77"


@pytest.fixture
def client(platform: Platform) -> Iterator[TestClient]:
    with TestClient(create_app(platform, GatewaySettings(wait_timeout=60))) as c:
        yield c


def publish(client: TestClient, type_: str, payload: dict[str, Any], version: int = 1) -> str:
    event = {"type": type_, "schema_version": version, "stream": STREAM, "payload": payload}
    r = client.post("/v1/events?wait=registered", json=event, headers=H)
    assert r.status_code == 202, r.text
    [accepted] = r.json()["accepted"]
    return str(accepted["event_id"])


def outcomes(platform: Platform, event_id: str) -> list[tuple[str, str | None, str | None]]:
    return [
        (o.kind.value, o.memory_id, o.reason_code) for o in platform.store.outcome("acme", event_id)
    ]


def forget(client: TestClient, platform: Platform) -> None:
    publish(client, "ForgetRequested", {})
    platform.runner.drain()


def test_duplicates_decided_live_are_decided_the_same_in_a_rebuild(
    client: TestClient, platform: Platform
) -> None:
    drink = {
        "memory": {
            "type": "preference",
            "content": "drinks green tea",
            "key": "drink",
            "value": "green tea",
        }
    }
    first = publish(client, "MemoryDeclared", drink)
    again = publish(client, "MemoryDeclared", drink)
    [(kind, memory_id, _)] = outcomes(platform, again)
    assert (kind, memory_id) == ("duplicate", outcomes(platform, first)[0][1])
    result = {
        "tool": "crm",
        "arguments": json.dumps({"customer": "U77"}),
        "result": json.dumps({"tier": "gold"}),
        "source": "crm",
        "fetched_at": T0.isoformat(),
        "fresh_for_seconds": 3600,
        "key": "crm.tier",
    }
    publish(client, "ToolResultRecorded", result)
    assert outcomes(platform, publish(client, "ToolResultRecorded", result))[0][0] == "duplicate"
    publish(client, "ObservationRecorded", {"text": "Thanks!", "kind": "turn"}, version=2)
    # a context cites the memory: the citation's request id is sealed with the user's words
    memory_id = outcomes(platform, first)[0][1]
    assembled = client.post("/v1/context", json={"subjects": [STREAM]}, headers=H).json()
    request_id = assembled["request_id"]
    answer = {"response": f'Green tea <memory_ref id="{memory_id}"/>'}
    reported = client.post(f"/v1/context/{request_id}/response", json=answer, headers=H)
    assert reported.json()["cited"] == [{"memory_id": memory_id, "position": "end"}]
    platform.runner.drain()
    record = platform.store.context_record("acme", request_id)
    assert record is not None
    assert record.credited_by(memory_id) is not None
    forget(client, platform)
    live = platform_checksum(platform)
    head = platform.log.head()
    assert rebuild_read_models(platform) == live
    assert platform.log.head() == head
    rebuilt = platform.store.context_record("acme", request_id)
    assert rebuilt is not None
    assert rebuilt.credited == record.credited


def test_a_rebuild_registers_nothing_from_words_it_cannot_read(
    client: TestClient, platform: Platform
) -> None:
    """A duplicate without a key cannot be told apart once its words are gone: the rebuild
    still registers no memory of redaction markers and appends nothing."""
    note = {"memory": {"type": "fact", "content": "has a dog called Rex"}}
    publish(client, "MemoryDeclared", note)
    again = publish(client, "MemoryDeclared", note)
    assert outcomes(platform, again)[0][0] == "duplicate"
    forget(client, platform)
    head = platform.log.head()
    rebuild_read_models(platform)
    assert platform.log.head() == head
    counts = platform.store.counts()
    assert (counts["memories_forgotten"], counts["memories_active"]) == (1, 0)
    assert list(platform.index.ids()) == []
    assert outcomes(platform, again) == [("ignored", None, "CONTENT_FORGOTTEN")]


def test_a_document_ingested_again_appends_nothing_in_a_rebuild(
    client: TestClient, platform: Platform
) -> None:
    """The same document ingested twice into one stream: the second registered nothing
    live. After the user's forget its bytes and words are gone; a rebuild decides it
    without them and appends no rejection to the forgotten stream."""
    text = b"Party A: Acme Ltd.\n\nClause 8.2 A penalty of 6% of the amount applies.\n"
    params = {"subject": STREAM, "filename": "c.txt", "wait": "registered"}
    for _ in range(2):
        r = client.post("/v1/documents", params=params, content=text, headers=H)
        assert r.status_code in (200, 201, 202), r.text
    platform.runner.drain()
    forget(client, platform)
    head = platform.log.head()
    rebuild_read_models(platform)
    assert platform.log.head() == head
    assert platform.store.counts()["memories_active"] == 0
