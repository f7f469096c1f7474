"""An agent speaker named by an e-mail address or a phone number, through the HTTP API.

The detector seals such a speaker before the event reaches the log: registration then sees
a placeholder (a keyed hash under the stream's key), never the address. A rule file's
`agent_speakers` holding the same address must still name that speaker as the agent side,
on every stream, so that what the agent says is not taken for the user's memories."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from tests.support import embedded_platform, gateway_client, headers_for

from mnemo.adapters.clocks import FixedClock

ACME = headers_for("acme", "agent")


@pytest.fixture
def client(tmp_path: Path, clock: FixedClock) -> Iterator[TestClient]:
    rules = tmp_path / "rules.yaml"
    rules.write_text(
        "extends: default\nagent_speakers: [Helpdesk@Acme.example, '+1 555 0100']\n",
        encoding="utf-8",
    )
    with gateway_client(embedded_platform(tmp_path / "data", clock, "acme", rules_file=rules)) as c:
        yield c


def outcomes(client: TestClient, stream: str, speaker: str, text: str) -> list[str]:
    event: dict[str, Any] = {
        "type": "ObservationRecorded",
        "schema_version": 2,
        "stream": stream,
        "payload": {"text": text, "kind": "turn", "speaker": speaker},
    }
    answer = client.post("/v1/events?wait=registered", json=event, headers=ACME)
    assert answer.status_code == 202, answer.text
    return [o["outcome"] for o in answer.json()["accepted"][0]["outcomes"]]


def test_a_sealed_agent_speaker_is_still_the_agent_side(client: TestClient) -> None:
    # the user's own words are read by the rules: the turn, then the fact it states
    assert outcomes(client, "user:U1", "user", "I live in Berlin") == ["registered"] * 2
    # the agent's, named by a word, an address (any case) or a phone number: the turn only
    assert outcomes(client, "user:U1", "agent", "I live in Paris") == ["registered"]
    assert outcomes(client, "user:U1", "helpdesk@acme.example", "I live in Rome") == ["registered"]
    assert outcomes(client, "user:U2", "HELPDESK@acme.example", "I live in Oslo") == ["registered"]
    assert outcomes(client, "session:S1", "+1 555 0100", "I live in Lima") == ["registered"]
    # an address that is not an agent's is sealed too, and read as the user's
    assert (
        outcomes(client, "user:U3", "someone@else.example", "I live in Kyiv") == ["registered"] * 2
    )
