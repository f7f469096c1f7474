"""Tool results and triggers in the distributed mode, on a real Kafka broker and a real
Cassandra node: a recorded result is registered with its provenance and deadline, a
context never shows it once stale, the decay scan expires it, and a suggestion stops
firing once its result is recorded (the lookup of answers runs on Cassandra)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from tests.distributed_support import Pump, distributed_settings, running_distributed

from mnemo.bootstrap import Platform
from mnemo.domain.memory import MemoryStatus
from mnemo.service.app import RequestContext
from mnemo.service.context import ContextRequest

CTX = RequestContext("acme", "sales-agent")
CLIENT = "user:C7"
TRIGGERS = """
tools:
  - name: crm.get_deal
triggers:
  - id: stale-proposal
    when: {key: stage, value: proposal_sent, older_than: 1d}
    suggest: {tool: crm.get_deal, arguments: {client: "{stream}"}}
"""


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    path = tmp_path / "triggers.yaml"
    path.write_text(TRIGGERS)
    with running_distributed(distributed_settings(tmp_path / "data", triggers_file=path)) as built:
        yield built


def test_tool_results_and_triggers_in_the_distributed_mode(platform: Platform) -> None:
    assert [t.id for t in platform.app.triggers.triggers] == ["stale-proposal"]
    app, pump = platform.app, Pump(platform)
    sent = datetime.now(UTC) - timedelta(days=2)
    declared = {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": CLIENT,
        "occurred_at": sent.isoformat(),
        "payload": {"memory": {"type": "fact", "key": "stage", "value": "proposal_sent"}},
    }
    app.publish(CTX, [declared])
    pump.drain()
    [suggestion] = app.suggestions(CTX, [CLIENT])
    assert suggestion.arguments == {"client": CLIENT}
    answered = app.record_tool_result(
        CTX,
        CLIENT,
        tool="crm.get_deal",
        arguments=suggestion.arguments,
        result={"stage": "negotiation"},
        source="crm",
        fresh_for_seconds=3_600,
        trigger={"trigger_id": suggestion.trigger_id, "memory_id": suggestion.memory_id},
    )
    # an exchange rate fetched (on a clock eight hours ahead of UTC) 57 s ago, fresh for 60 s
    fetched = datetime.now(timezone(timedelta(hours=8))) - timedelta(seconds=57)
    rate = app.record_tool_result(
        CTX,
        CLIENT,
        tool="fx.rate",
        result={"rate": 1.08},
        source="ecb",
        fetched_at=fetched,
        fresh_for_seconds=60,
    )
    pump.drain()
    [crm] = app.outcome(CTX, answered.accepted[0].event_id)
    assert crm.memory_id is not None
    assert app.get(CTX, crm.memory_id).provenance.source_id == "tool:crm.get_deal"
    assert app.suggestions(CTX, [CLIENT]) == []  # answered on Cassandra
    [fx] = app.outcome(CTX, rate.accepted[0].event_id)
    assert fx.memory_id is not None
    deadline = fetched + timedelta(seconds=60)
    assert app.get(CTX, fx.memory_id).valid_until == deadline

    def included(as_of: datetime) -> list[str]:
        response = app.context(CTX, ContextRequest(subjects=(CLIENT,), budget=2_000, as_of=as_of))
        return [i.candidate.memory.memory_id for i in response.assembly.included]

    assert fx.memory_id in included(deadline - timedelta(microseconds=1))
    assert fx.memory_id not in included(deadline.astimezone(UTC))
    # the decay scan expires it once its deadline has passed (polled, with a budget)
    budget = time.monotonic() + 30
    while app.get(CTX, fx.memory_id).status is not MemoryStatus.EXPIRED:
        assert time.monotonic() < budget, "the stale result was not expired within 30 s"
        platform.runner.decay_scan()
        pump.drain()
        time.sleep(0.2)
    types = [e.envelope.type for e in platform.log.read_stream("acme", CLIENT, 1, 100)]
    assert "MemoryExpired" in types
