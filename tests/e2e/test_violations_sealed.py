"""The guard rule ids an answer broke are sealed in the context report's event, as the
constraint's own events seal them: the log holds no rule id in clear, replay through
Mnemo shows them, and forgetting the user leaves them unreadable."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.support import embedded_platform, gateway_client, headers_for

from mnemo.adapters.clocks import FixedClock
from mnemo.bootstrap import Platform

H = headers_for("acme")
RULE = "no-floribunda-rule"
STREAM = "user:G1"


@pytest.fixture
def made(tmp_path: Path, clock: FixedClock) -> Iterator[tuple[TestClient, Platform]]:
    platform = embedded_platform(tmp_path / "data", clock, "acme")
    with gateway_client(platform) as c:
        yield c, platform


def _raw_reports(platform: Platform) -> list[str]:
    return [
        json.dumps(e.envelope.payload)
        for e in platform.log.read_stream("acme", STREAM, 1, 1000)
        if e.envelope.type == "ContextResponseReported"
    ]


def test_broken_rule_ids_are_sealed_in_the_report(made: tuple[TestClient, Platform]) -> None:
    client, platform = made
    guard = {"rule_id": RULE, "patterns": ["floribunda"]}
    memory = {"type": "constraint", "content": "never mention Floribunda", "guard": guard}
    declared = {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": STREAM,
        "payload": {"memory": memory},
    }
    assert client.post("/v1/events?wait=registered", json=declared, headers=H).status_code == 202
    shown = client.post("/v1/context", json={"subjects": [STREAM], "query": "x"}, headers=H)
    request_id = shown.json()["request_id"]
    answer = {"response": "Floribunda is great"}
    broke = client.post(f"/v1/context/{request_id}/response", json=answer, headers=H)
    assert broke.status_code == 422, broke.text
    assert broke.json()["error"]["rule_ids"] == [RULE]

    [raw] = _raw_reports(platform)
    assert RULE not in raw
    replay = client.get(f"/v1/subjects/{STREAM}/events", headers=H).json()["events"]
    [report] = [e for e in replay if e["type"] == "ContextResponseReported"]
    assert report["payload"]["violations"] == [RULE]

    forget = {"type": "ForgetRequested", "schema_version": 1, "stream": STREAM, "payload": {}}
    assert client.post("/v1/events?wait=registered", json=forget, headers=H).status_code == 202
    assert RULE not in json.dumps(client.get("/v1/events", headers=H).json())
