"""Tool results as memories and memory-triggered tool calls on the embedded platform:
freshness judged at the boundary instant across time zones, expiry by the decay consumer,
a suggestion that stops firing once answered, tool-limited keys and refused results that
store nothing."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest

from mnemo.adapters.clocks import FixedClock
from mnemo.bootstrap import Platform
from mnemo.domain.errors import InvalidInput, MnemoError
from mnemo.domain.memory import MemoryStatus
from mnemo.entrypoints.admin import platform_checksum, rebuild_read_models
from mnemo.service.app import RequestContext, Wait
from mnemo.service.context import ContextRequest
from mnemo.service.triggers import load_triggers

CTX = RequestContext("acme", "sales-agent")
CLIENT = "user:C42"
SHANGHAI = timezone(timedelta(hours=8))
NEW_YORK = timezone(timedelta(hours=-5))

TRIGGERS = """
tools:
  - name: crm.get_deal
    description: the deal's current stage in the CRM
    arguments: [client, stage]
  - name: fx.rate
triggers:
  - id: stale-proposal
    description: a proposal sent over a day ago; check the deal in the CRM
    when:
      key: stage
      value: proposal_sent
      older_than: 1d
    suggest:
      tool: crm.get_deal
      arguments:
        client: "{stream}"
        stage: "{value}"
"""


def declare(platform: Platform, stream: str, key: str, value: str) -> str:
    event = {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": stream,
        "payload": {"memory": {"type": "fact", "key": key, "value": value}},
    }
    result = platform.app.publish(CTX, [event])
    platform.runner.drain()
    [outcome] = platform.app.outcome(CTX, result.accepted[0].event_id)
    assert outcome.memory_id is not None, outcome
    return outcome.memory_id


def record(platform: Platform, ctx: RequestContext = CTX, **kwargs: Any) -> str:
    fields: dict[str, Any] = {
        "tool": "fx.rate",
        "arguments": {"pair": "USD/EUR"},
        "result": {"rate": 0.92, "pair": "USD/EUR"},
        "source": "ecb",
        "fresh_for_seconds": 60,
    }
    fields.update(kwargs)
    result = platform.app.record_tool_result(ctx, fields.pop("stream", CLIENT), **fields)
    platform.runner.drain()
    [outcome] = platform.app.outcome(ctx, result.accepted[0].event_id)
    assert outcome.memory_id is not None, outcome
    return outcome.memory_id


def shown(platform: Platform, as_of: datetime) -> tuple[list[str], list[tuple[str, str]], str]:
    response = platform.app.context(
        CTX, ContextRequest(subjects=(CLIENT,), budget=2_000, as_of=as_of)
    )
    included = [i.candidate.memory.memory_id for i in response.assembly.included]
    left = [(o.memory_id, o.reason) for o in response.left_out]
    return included, left, response.assembly.text


def test_a_tool_result_is_a_memory_with_provenance_age_and_a_deadline(
    platform: Platform, clock: FixedClock
) -> None:
    fetched = clock.now().astimezone(SHANGHAI) - timedelta(seconds=10)
    memory_id = record(platform, fetched_at=fetched)
    memory = platform.app.get(CTX, memory_id)
    assert memory.provenance.source_id == "tool:fx.rate"
    assert memory.provenance.source_location == "ecb"
    assert memory.fetched_at == fetched
    deadline = fetched + timedelta(seconds=60)
    assert memory.valid_until == deadline
    assert memory.stale_after == deadline
    assert {"tool:fx.rate", "tool-result"} <= set(memory.tags)
    assert '"rate":0.92' in memory.content  # the whole result, opened on a user stream

    # one microsecond before the deadline, judged from another time zone: shown, with age
    just_before = (deadline - timedelta(microseconds=1)).astimezone(NEW_YORK)
    included, _, text = shown(platform, just_before)
    assert memory_id in included
    assert "[fx.rate result, fetched 59s ago]" in text
    # at the deadline instant (written in a third zone): stale, so never shown
    at_deadline = deadline.astimezone(timezone(timedelta(hours=5, minutes=30)))
    included, left, text = shown(platform, at_deadline)
    assert memory_id not in included
    assert (memory_id, "expired") in left
    assert "fx.rate" not in text


def test_the_decay_consumer_expires_a_stale_result_and_a_refetch_renews_it(
    platform: Platform, clock: FixedClock
) -> None:
    first = record(platform, fetched_at=clock.now())
    clock.advance(timedelta(seconds=59))
    platform.runner.drain()
    assert platform.app.get(CTX, first).status is MemoryStatus.ACTIVE
    clock.advance(timedelta(seconds=1))
    platform.runner.drain()
    assert platform.app.get(CTX, first).status is MemoryStatus.EXPIRED
    types = [e.envelope.type for e in platform.app.replay(CTX, CLIENT, 1, 100)]
    assert "MemoryExpired" in types
    # a context judged before the deadline does not bring back a result the timer ended
    included, _, _ = shown(platform, clock.now() - timedelta(seconds=30))
    assert first not in included
    # the same answer fetched again is a new fetch: fresh again
    second = record(platform, fetched_at=clock.now())
    assert second != first
    assert platform.app.get(CTX, second).status is MemoryStatus.ACTIVE
    assert second in shown(platform, clock.now())[0]
    # fetched again while fresh: a new version of the key supersedes it
    clock.advance(timedelta(seconds=30))
    third = record(platform, fetched_at=clock.now())
    assert platform.app.get(CTX, third).version == 2
    assert platform.app.get(CTX, second).status is MemoryStatus.SUPERSEDED
    # the superseded one's expiry timer is gone: only the newer one expires, at its own time
    clock.advance(timedelta(seconds=45))
    platform.runner.drain()
    assert platform.app.get(CTX, third).status is MemoryStatus.ACTIVE


def test_a_result_stale_on_arrival_is_refused(platform: Platform, clock: FixedClock) -> None:
    result = platform.app.record_tool_result(
        CTX,
        CLIENT,
        tool="fx.rate",
        result={"rate": 1},
        source="ecb",
        fetched_at=clock.now() - timedelta(seconds=61),
        fresh_for_seconds=60,
    )
    platform.runner.drain()
    [outcome] = platform.app.outcome(CTX, result.accepted[0].event_id)
    assert outcome.reason_code == "TOOL_RESULT_STALE"


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"result": float("nan")}, "TOOL_RESULT_NOT_JSON"),
        ({"result": {"x": object()}}, "TOOL_RESULT_NOT_JSON"),
        ({"result": {"blob": "x" * 6_000}}, "TOOL_RESULT_TOO_LARGE"),
        ({"arguments": {"q": "y" * 3_000}}, "TOOL_RESULT_TOO_LARGE"),
        ({"tool": "no spaces"}, "INVALID_PAYLOAD"),
        ({"trigger": {"trigger_id": "x", "memory_id": "nope"}}, "INVALID_PAYLOAD"),
    ],
)
def test_bad_results_are_refused_and_store_nothing(
    platform: Platform, kwargs: dict[str, Any], code: str
) -> None:
    head = platform.log.head()
    fields: dict[str, Any] = {
        "tool": "fx.rate",
        "result": {"rate": 1},
        "source": "ecb",
        "fresh_for_seconds": 60,
    }
    fields.update(kwargs)
    with pytest.raises(InvalidInput) as caught:
        platform.app.record_tool_result(CTX, CLIENT, **fields)
    assert caught.value.code == code
    assert platform.log.head() == head


def test_a_raw_event_whose_result_is_not_json_is_refused(platform: Platform) -> None:
    event = {
        "type": "ToolResultRecorded",
        "schema_version": 1,
        "stream": CLIENT,
        "payload": {
            "tool": "fx.rate",
            "result": "{not json",
            "source": "ecb",
            "fetched_at": "2026-11-30T12:00:00+00:00",
            "fresh_for_seconds": 60,
        },
    }
    head = platform.log.head()
    with pytest.raises(InvalidInput) as caught:
        platform.app.publish(CTX, [event])
    assert caught.value.code == "TOOL_RESULT_NOT_JSON"
    assert platform.log.head() == head


def test_a_key_limited_to_some_tools_records_only_theirs(platform: Platform) -> None:
    limited = RequestContext(
        "acme", "crm-bot", frozenset({"memory:write"}), frozenset({"crm.get_deal"})
    )
    head = platform.log.head()
    with pytest.raises(MnemoError) as caught:
        platform.app.record_tool_result(
            limited, CLIENT, tool="fx.rate", result=1, source="ecb", fresh_for_seconds=60
        )
    assert caught.value.code == "TOOL_NOT_ALLOWED"
    assert platform.log.head() == head
    record(platform, limited, tool="crm.get_deal", arguments={"client": CLIENT}, result={"s": 1})


def test_a_trigger_fires_once_per_memory_version(
    platform: Platform, clock: FixedClock, tmp_path: Path
) -> None:
    path = tmp_path / "triggers.yaml"
    path.write_text(TRIGGERS)
    platform.app.triggers = load_triggers(path)
    stage = declare(platform, CLIENT, "stage", "proposal_sent")
    assert platform.app.suggestions(CTX, [CLIENT]) == []  # not a day old yet
    clock.advance(timedelta(days=1))
    [suggestion] = platform.app.suggestions(CTX, [CLIENT])
    assert (suggestion.trigger_id, suggestion.memory_id) == ("stale-proposal", stage)
    assert suggestion.arguments == {"client": CLIENT, "stage": "proposal_sent"}
    assert suggestion.age_seconds == 86_400.0
    # the boundary: a microsecond short of a day it has not fired
    early = clock.now() - timedelta(microseconds=1)
    assert platform.app.suggestions(CTX, [CLIENT], early.astimezone(SHANGHAI)) == []
    # the context lists it too
    response = platform.app.context(CTX, ContextRequest(subjects=(CLIENT,), budget=2_000))
    assert [s.memory_id for s in response.suggestions] == [stage]
    # the agent takes it and records the result with the reference: it stops firing
    record(
        platform,
        tool="crm.get_deal",
        arguments=suggestion.arguments,
        result={"stage": "negotiation"},
        source="crm",
        fresh_for_seconds=3_600,
        trigger={"trigger_id": suggestion.trigger_id, "memory_id": suggestion.memory_id},
        wait=Wait.NONE,
    )
    assert platform.app.suggestions(CTX, [CLIENT]) == []
    clock.advance(timedelta(days=3))  # still answered, however old the memory gets
    assert platform.app.suggestions(CTX, [CLIENT]) == []
    # a new version of the memory can fire it again, once it is a day old
    clock.advance(timedelta(seconds=1))
    declare(platform, CLIENT, "stage", "negotiation")
    newer = declare(platform, CLIENT, "stage", "proposal_sent")
    assert platform.app.suggestions(CTX, [CLIENT]) == []
    clock.advance(timedelta(days=1))
    [again] = platform.app.suggestions(CTX, [CLIENT])
    assert again.memory_id == newer
    assert again.memory_version == 3


def test_only_a_result_of_the_suggested_tool_closes_a_suggestion(
    platform: Platform, clock: FixedClock, tmp_path: Path
) -> None:
    """A key limited to fx.rate once closed the CRM suggestion by quoting it on an fx.rate
    result, and any writer by declaring a memory with the trigger's tags: the agent was then
    never told to check the CRM."""
    path = tmp_path / "triggers.yaml"
    path.write_text(TRIGGERS)
    platform.app.triggers = load_triggers(path)
    stage = declare(platform, CLIENT, "stage", "proposal_sent")
    clock.advance(timedelta(days=1))
    [suggestion] = platform.app.suggestions(CTX, [CLIENT])
    quoted = {"trigger_id": suggestion.trigger_id, "memory_id": stage}
    fx_only = RequestContext("acme", "fx-bot", frozenset({"memory:write"}), frozenset({"fx.rate"}))
    record(platform, fx_only, tool="fx.rate", trigger=quoted)
    event = {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": CLIENT,
        "payload": {
            "memory": {
                "type": "fact",
                "scope": "user",
                "content": "the deal was checked",
                "tags": ["trigger:stale-proposal", f"answers:{stage}", "tool-result"],
            }
        },
    }
    platform.app.publish(fx_only, [event])
    platform.runner.drain()
    assert [s.memory_id for s in platform.app.suggestions(CTX, [CLIENT])] == [stage]
    # the suggested tool's result closes it
    record(platform, tool="crm.get_deal", arguments=suggestion.arguments, trigger=quoted)
    assert platform.app.suggestions(CTX, [CLIENT]) == []


def test_an_answer_stays_an_answer_however_many_results_answer_the_memory(
    platform: Platform, clock: FixedClock, tmp_path: Path
) -> None:
    """Two triggers fire on one memory; the agent records a hundred results answering
    the first (a polled tool), then one answering the second: neither fires again. (The
    answers were read a hundred at a time, oldest first, so the second's answer was not
    seen and its suggestion came back.)"""
    path = tmp_path / "triggers.yaml"
    path.write_text(
        TRIGGERS
        + """
  - id: stage-rate
    description: a deal in a stage; look the rate up
    when:
      key: stage
    suggest:
      tool: fx.rate
"""
    )
    platform.app.triggers = load_triggers(path)
    stage = declare(platform, CLIENT, "stage", "proposal_sent")
    clock.advance(timedelta(days=1))
    fired = {s.trigger_id: s for s in platform.app.suggestions(CTX, [CLIENT])}
    assert set(fired) == {"stale-proposal", "stage-rate"}
    for n in range(100):
        record(
            platform,
            result={"rate": n},
            trigger={"trigger_id": "stage-rate", "memory_id": stage},
            wait=Wait.NONE,
        )
        clock.advance(timedelta(seconds=1))
    assert [s.trigger_id for s in platform.app.suggestions(CTX, [CLIENT])] == ["stale-proposal"]
    record(
        platform,
        tool="crm.get_deal",
        arguments=fired["stale-proposal"].arguments,
        result={"stage": "negotiation"},
        source="crm",
        fresh_for_seconds=3_600,
        trigger={"trigger_id": "stale-proposal", "memory_id": stage},
        wait=Wait.NONE,
    )
    assert platform.app.suggestions(CTX, [CLIENT]) == []


def test_a_rebuild_reproduces_tool_result_memories_and_their_timers(
    platform: Platform, clock: FixedClock
) -> None:
    fresh = record(platform, fetched_at=clock.now())
    stale = record(platform, tool="crm.get_deal", fresh_for_seconds=30, fetched_at=clock.now())
    clock.advance(timedelta(seconds=40))
    platform.runner.drain()
    before = {m: platform.app.get(CTX, m) for m in (fresh, stale)}
    assert before[stale].status is MemoryStatus.EXPIRED
    live = platform_checksum(platform)
    assert rebuild_read_models(platform) == live
    after = {m: platform.app.get(CTX, m) for m in (fresh, stale)}
    assert after == before
    # the rebuilt expiry timer still ends the fresh one at its deadline
    clock.advance(timedelta(seconds=20))
    platform.runner.drain()
    assert platform.app.get(CTX, fresh).status is MemoryStatus.EXPIRED
