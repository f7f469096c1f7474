"""History compression in the distributed mode, on a real Kafka broker, a real Cassandra
node and OpenBao: turns published to the topic yield typed facts through the registrar,
a later turn updates the fact (its lookups run on Cassandra), the context shows the fact
in place of its turns and the raw turns on request, and an operator's rule file (read
from MNEMO_HISTORY_RULES_FILE, extending the defaults) adds a kind of its own."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.distributed_support import Pump, distributed_settings, running_distributed

from mnemo.bootstrap import Platform
from mnemo.domain.history import fact_sources
from mnemo.domain.memory import MemoryStatus, MemoryType
from mnemo.service.app import RequestContext
from mnemo.service.context import ContextRequest

CTX = RequestContext("acme", "support-agent")
S = "user:D1"
PATTERN = r"ticket\s*#(?P<ticket>\d+)\s+(?:is|was|has been)\s+(?P<state>opened|closed|escalated)"
RULES = f"""extends: default
kinds:
  ticket:
    label: Ticket
    fields: [ticket, state]
    identity: ticket
facts:
  - id: en-ticket-state
    kind: ticket
    pattern: '{PATTERN}'
"""


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    path = tmp_path / "history.yaml"
    path.write_text(RULES, encoding="utf-8")
    settings = distributed_settings(tmp_path / "data", history_rules_file=path)
    with running_distributed(settings) as built:
        yield built


def turn(speaker: str, text: str, at: datetime) -> dict[str, Any]:
    return {
        "type": "ObservationRecorded",
        "schema_version": 2,
        "stream": S,
        "occurred_at": at.isoformat(),
        "payload": {"text": text, "kind": "turn", "speaker": speaker},
    }


def test_turns_become_facts_in_the_distributed_mode(platform: Platform) -> None:
    app, pump = platform.app, Pump(platform)
    start = datetime.now(UTC) - timedelta(minutes=30)
    said = [
        ("customer", "Hi there, hope you are well."),
        ("customer", "My order 20240511-3 still hasn't arrived, it's three days late."),
        ("agent", "I'm sorry, let me check with the carrier."),
        ("customer", "Ticket #881 was escalated yesterday, by the way."),
    ]
    first = app.publish(
        CTX,
        [turn(who, text, start + timedelta(seconds=10 * i)) for i, (who, text) in enumerate(said)],
    )
    pump.drain()
    # the update arrives in a later batch: the registrar finds the fact on Cassandra
    later = app.publish(
        CTX,
        [
            turn(
                "agent",
                "To make up for it, we will compensate you $5.",
                start + timedelta(minutes=1),
            ),
            turn("agent", "Ticket #881 has been closed.", start + timedelta(minutes=2)),
        ],
    )
    pump.drain()
    turn_ids = [
        app.outcome(CTX, a.event_id)[0].memory_id for a in [*first.accepted, *later.accepted]
    ]
    facts = sorted(
        (m for m in app.list_memories(CTX, S, types=(MemoryType.HISTORY,)) if "fact" in m.tags),
        key=lambda m: m.key or "",
    )
    assert [(m.key, m.content, m.version) for m in facts] == [
        (
            "fact.complaint.20240511-3",
            "[Complaint] order=20240511-3 issue=delay delay=3d compensation=$5",
            2,
        ),
        ("fact.ticket.881", "[Ticket] ticket=881 state=closed", 2),
    ]
    complaint = facts[0]
    assert fact_sources(complaint) == (turn_ids[1], turn_ids[4])
    assert app.get(CTX, complaint.supersedes or "").status is MemoryStatus.SUPERSEDED

    def history(mode: str) -> list[str]:
        response = app.context(
            CTX,
            ContextRequest(
                subjects=(S,), query="order 20240511-3 compensation", budget=1_000, history=mode
            ),
        )
        return [
            i.candidate.memory.memory_id
            for i in response.assembly.included
            if i.section == "history"
        ]

    compressed = history("facts")
    assert complaint.memory_id in compressed
    assert turn_ids[1] not in compressed
    assert turn_ids[4] not in compressed
    raw = history("raw")
    assert turn_ids[1] in raw
    assert complaint.memory_id not in raw
    assert set(history("facts_only")) <= {m.memory_id for m in facts}
