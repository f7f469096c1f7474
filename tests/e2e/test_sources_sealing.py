"""Who said a turn, and where a declared memory came from, hold a person's words as often
as the text does: the detector reads them too, so an e-mail address there reaches no file
of the data directory in clear (the memories table once held both), and authorized reads
show them whole."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient
from mnemo_gateway.app import create_app
from tests.support import headers_for

from mnemo.bootstrap import Platform

H = headers_for("acme", "agent")
SPEAKER = "zhang.san.marker@example.org"
SOURCE = "wang.wu.marker@example.org"
LOCATION = "mail from li.si.marker@example.org"


@pytest.fixture
def client(platform: Platform) -> Iterator[TestClient]:
    with TestClient(create_app(platform)) as c:
        yield c


def test_a_speaker_and_sources_reach_no_file_in_clear(
    client: TestClient, platform: Platform
) -> None:
    turn = {
        "type": "ObservationRecorded",
        "schema_version": 2,
        "stream": "user:dave",
        "payload": {"text": "I need a refund for order 7", "kind": "turn", "speaker": SPEAKER},
    }
    memory = {
        "type": "fact",
        "scope": "user",
        "content": "prefers window seats",
        "provenance": {"source_id": SOURCE, "source_location": LOCATION},
    }
    declared = {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": "user:dave",
        "payload": {"memory": memory},
    }
    for event in (turn, declared):
        answer = client.post("/v1/events?wait=indexed", json=event, headers=H)
        assert answer.status_code == 202, answer.text
    found = client.get("/v1/subjects/user:dave/memories", headers=H)
    assert found.status_code == 200, found.text
    by_type = {m["type"]: m for m in found.json()["memories"]}
    assert by_type["history"]["content"] == f"{SPEAKER}: I need a refund for order 7"
    assert by_type["fact"]["provenance"]["source_id"] == SOURCE
    assert by_type["fact"]["provenance"]["source_location"] == LOCATION
    # the event views (replay, and so a device's sync) show them opened too
    replayed = client.get("/v1/subjects/user:dave/events", headers=H).json()["events"]
    registered = [
        e["payload"]["memory"]["provenance"]
        for e in replayed
        if e["type"] == "MemoryRegistered" and e["payload"]["memory"]["type"] == "fact"
    ]
    assert [(p["source_id"], p["source_location"]) for p in registered] == [(SOURCE, LOCATION)]
    platform.close()  # everything written out, the write-ahead logs included
    markers = [b"zhang.san.marker", b"wang.wu.marker", b"li.si.marker"]
    root = platform.settings.data_dir
    in_clear = {
        (str(path.relative_to(root)), marker.decode())
        for path in root.rglob("*")
        if path.is_file()
        for marker in markers
        if marker in path.read_bytes()
    }
    assert in_clear == set()
