"""Forgetting one memory leaves no read of its words: the contexts that rendered it read
redacted (the inspector, a stream's replay, the tenant's tail, the console's events),
while a context that did not include it still reads as it was rendered."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.support import embedded_platform, gateway_client, headers_for

from mnemo.adapters.clocks import FixedClock

H = headers_for("acme")
EMAIL = "zed.unique77@example.net"
WORD = "Zorblax"
KEPT = "Quillfeather"


@pytest.fixture
def client(tmp_path: Path, clock: FixedClock) -> Iterator[TestClient]:
    with gateway_client(embedded_platform(tmp_path / "data", clock, "acme")) as c:
        yield c


def _declare(client: TestClient, stream: str, content: str) -> str:
    event = {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": stream,
        "payload": {"memory": {"type": "fact", "content": content}},
    }
    # a context with a query finds memories through the index: wait until it holds them
    answer = client.post("/v1/events?wait=indexed", json=event, headers=H)
    assert answer.status_code in (200, 202), answer.text
    assert answer.json()["complete"], answer.text
    return str(answer.json()["accepted"][0]["outcomes"][0]["memory_id"])


def _context(client: TestClient, stream: str, query: str) -> dict[str, Any]:
    answer = client.post("/v1/context", json={"subjects": [stream], "query": query}, headers=H)
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


def _recorded(client: TestClient, request_id: str) -> str:
    """The inspector's answer, once the registrar has recorded the context."""
    deadline = time.monotonic() + 30
    while True:
        answer = client.get(f"/v1/insights/contexts/{request_id}", headers=H)
        if answer.status_code == 200 or time.monotonic() > deadline:
            assert answer.status_code == 200, answer.text
            return answer.text
        time.sleep(0.05)


def _reads(client: TestClient, stream: str, request_id: str) -> dict[str, str]:
    return {
        "inspector": _recorded(client, request_id),
        "replay": client.get(f"/v1/subjects/{stream}/events", headers=H).text,
        "tail": client.get("/v1/events", params={"limit": 1000}, headers=H).text,
        "console events": client.get("/v1/insights/events", headers=H).text,
    }


@pytest.mark.parametrize("stream", ["user:U1", "session:S1"])
def test_a_context_that_rendered_a_forgotten_memory_reads_redacted(
    client: TestClient, stream: str
) -> None:
    forgotten = _declare(client, stream, f"backup email is {EMAIL} and nickname {WORD}")
    shown = _context(client, stream, "backup email nickname")
    assert EMAIL in shown["context"]
    assert WORD in shown["context"]
    before = _reads(client, stream, shown["request_id"])
    assert EMAIL in before["inspector"]
    assert WORD in before["inspector"]

    forget = {
        "type": "ForgetRequested",
        "schema_version": 1,
        "stream": stream,
        "payload": {"memory_id": forgotten},
    }
    assert client.post("/v1/events?wait=registered", json=forget, headers=H).status_code in (
        200,
        202,
    )
    # a memory kept, and a context rendered after the forget, read as they were
    _declare(client, stream, f"favourite pen is {KEPT}")
    later = _context(client, stream, "favourite pen")
    assert KEPT in later["context"]

    for where, text in _reads(client, stream, shown["request_id"]).items():
        assert EMAIL not in text, where
        assert WORD not in text, where
    assert "⟦redacted⟧" in _reads(client, stream, shown["request_id"])["inspector"]
    assert KEPT in _recorded(client, later["request_id"])


def test_a_forgotten_shared_stream_reads_redacted_where_it_made_no_memory(
    client: TestClient,
) -> None:
    stream = "session:S9"
    said = {
        "type": "ObservationRecorded",
        "schema_version": 2,
        "stream": stream,
        "payload": {"text": f"hmm the weather {WORD}, ping {EMAIL}"},
    }
    answer = client.post("/v1/events?wait=registered", json=said, headers=H)
    assert answer.status_code in (200, 202), answer.text
    assert answer.json()["accepted"][0]["outcomes"][0]["outcome"] == "ignored"
    memory_id = _declare(client, stream, "likes tea")
    contradicted = {
        "type": "MemoryContradicted",
        "schema_version": 1,
        "stream": stream,
        "payload": {"memory_id": memory_id, "reason": f"{WORD} said to write to {EMAIL}"},
    }
    assert client.post("/v1/events", json=contradicted, headers=H).status_code == 202
    started = {"toolchain_id": "tc-9", "subject": stream, "steps": ["a"]}
    assert client.post("/v1/toolchains", json=started, headers=H).status_code == 201
    step = {"status": "completed", "output": {"mail": EMAIL, "who": WORD}}
    assert client.post("/v1/toolchains/tc-9/steps/a", json=step, headers=H).status_code == 201
    replay = client.get(f"/v1/subjects/{stream}/events", headers=H).text
    assert EMAIL in replay
    assert WORD in replay

    forget = {"type": "ForgetRequested", "schema_version": 1, "stream": stream, "payload": {}}
    answer = client.post("/v1/events?wait=registered", json=forget, headers=H)
    assert answer.status_code in (200, 202), answer.text
    _declare(client, stream, f"favourite pen is {KEPT}")  # written after: reads as written

    reads = {
        "replay": client.get(f"/v1/subjects/{stream}/events", headers=H).text,
        "tail": client.get("/v1/events", params={"limit": 1000}, headers=H).text,
        "console events": client.get("/v1/insights/events", headers=H).text,
    }
    for where, text in reads.items():
        assert EMAIL not in text, where
        assert WORD not in text, where
    assert KEPT in reads["replay"]
