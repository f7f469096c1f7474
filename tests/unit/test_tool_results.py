"""Tool results and triggers, pure: the registration handler's memory, the edge's checks,
trigger evaluation at its boundaries, and the trigger file refused with file, line and
trigger."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
from tests.unit.test_registration import RULES, DictState, event

from mnemo.domain.errors import InvalidInput
from mnemo.domain.events import MemoryRegistered, MemoryRejected, validate_envelope
from mnemo.domain.memory import Memory, MemoryStatus, MemoryType, Provenance, Scope
from mnemo.domain.pii import SEALED_TEXT
from mnemo.domain.tool_result import canonical_json, default_key, format_age
from mnemo.domain.triggers import Condition, Suggest, ToolSpec, Trigger, TriggerSet
from mnemo.handlers import registration
from mnemo.service.triggers import TriggerFileError, load_triggers

T0 = datetime(2026, 11, 30, 9, 30, tzinfo=UTC)
TOKYO = timezone(timedelta(hours=9))


def recorded(**kw: Any) -> dict[str, Any]:
    payload: dict[str, Any] = {
        "tool": "crm.get_deal",
        "arguments": '{"client":"C42"}',
        "result": '{"stage":"negotiation"}',
        "source": "crm",
        "fetched_at": (T0 - timedelta(seconds=5)).astimezone(TOKYO).isoformat(),
        "fresh_for_seconds": 3600,
    }
    payload.update(kw)
    return payload


def test_registration_makes_an_external_memory_with_provenance_and_deadline() -> None:
    state = DictState()
    env = event("ToolResultRecorded", recorded())
    decision = registration.handle(env, state, RULES)
    [registered] = [e for e in decision.events if e.type == MemoryRegistered.TYPE]
    memory = MemoryRegistered.model_validate(registered.payload).memory
    assert memory.type is MemoryType.EXTERNAL
    assert memory.provenance.source_id == "tool:crm.get_deal"
    assert memory.provenance.source_location == "crm"
    assert memory.provenance.trust == 0.8
    assert memory.fetched_at == T0 - timedelta(seconds=5)
    assert memory.valid_until == T0 - timedelta(seconds=5) + timedelta(hours=1)
    assert memory.key == default_key("crm.get_deal", '{"client":"C42"}')
    assert memory.value == '{"stage":"negotiation"}'
    assert memory.content == 'crm.get_deal({"client":"C42"}) -> {"stage":"negotiation"}'
    assert memory.tags == ("tool-result", "tool:crm.get_deal")
    # a redelivery decides the same; the same result fetched again is a new memory
    state.apply(decision)
    again = registration.handle(env, state, RULES)
    assert not again.events
    later = event(
        "ToolResultRecorded",
        recorded(fetched_at=T0.isoformat()),
        at=T0 + timedelta(seconds=1),
    )
    renewed = registration.handle(later, state, RULES)
    types = [e.type for e in renewed.events]
    assert types == ["MemoryRegistered", "MemorySuperseded"]


@pytest.mark.parametrize(
    ("stream", "scope"),
    [
        ("user:U7892", Scope.USER),
        ("session:S3", Scope.SESSION),
        ("agent:planner", Scope.AGENT),
        ("shared:policies", Scope.TENANT),
    ],
)
def test_a_results_memory_has_the_scope_of_the_stream_it_was_recorded_in(
    stream: str, scope: Scope
) -> None:
    decision = registration.handle(
        event("ToolResultRecorded", recorded(), stream=stream), DictState(), RULES
    )
    [registered] = [e for e in decision.events if e.type == MemoryRegistered.TYPE]
    assert MemoryRegistered.model_validate(registered.payload).memory.scope is scope


def test_a_trigger_reference_tags_the_memory_and_a_stale_result_is_rejected() -> None:
    ref = {"trigger_id": "stale-proposal", "memory_id": "01a22c54-6c60-8c68-a22f-ad1a2ffd25e9"}
    decision = registration.handle(
        event("ToolResultRecorded", recorded(trigger=ref, key="deal.stage")), DictState(), RULES
    )
    memory = MemoryRegistered.model_validate(decision.events[0].payload).memory
    assert memory.key == "deal.stage"
    assert "trigger:stale-proposal" in memory.tags
    assert f"answers:{ref['memory_id']}" in memory.tags
    stale = recorded(fetched_at=(T0 - timedelta(hours=1)).isoformat())
    [rejected] = registration.handle(event("ToolResultRecorded", stale), DictState(), RULES).events
    assert MemoryRejected.model_validate(rejected.payload).reason_code == "TOOL_RESULT_STALE"


def test_a_result_fetched_before_the_current_one_does_not_supersede_it() -> None:
    """A late delivery (a retry, a slow worker) of an earlier fetch must not replace the
    fresher answer under its key: it is rejected, and the later fetch stays current."""
    state = DictState()
    newer = event(
        "ToolResultRecorded",
        recorded(key="fx", result='{"rate":1.10}', fetched_at=T0.isoformat()),
        at=T0 + timedelta(seconds=1),
    )
    first = registration.handle(newer, state, RULES)
    state.apply(first)
    current = MemoryRegistered.model_validate(first.events[0].payload).memory
    late = event(
        "ToolResultRecorded",
        recorded(
            key="fx", result='{"rate":1.05}', fetched_at=(T0 - timedelta(minutes=10)).isoformat()
        ),
        at=T0 + timedelta(seconds=2),
    )
    decision = registration.handle(late, state, RULES)
    [rejected] = decision.events
    payload = MemoryRejected.model_validate(rejected.payload)
    assert payload.reason_code == "TOOL_RESULT_OUTDATED"
    assert payload.current_memory_id == current.memory_id
    state.apply(decision)
    assert state.current_for_key(current.tenant, current.stream, "fx") == current
    # the newer fetch's redelivery keeps its outcome; a fetch at the same instant or later
    # still supersedes
    assert not registration.handle(newer, state, RULES).events
    again = event(
        "ToolResultRecorded",
        recorded(key="fx", result='{"rate":1.11}', fetched_at=T0.isoformat()),
        at=T0 + timedelta(seconds=3),
    )
    assert [e.type for e in registration.handle(again, state, RULES).events] == [
        "MemoryRegistered",
        "MemorySuperseded",
    ]


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"result": "{nope"}, "TOOL_RESULT_NOT_JSON"),
        ({"result": "NaN"}, "TOOL_RESULT_NOT_JSON"),
        ({"result": '{"a": 1} trailing'}, "TOOL_RESULT_NOT_JSON"),
        ({"arguments": "[1, 2]"}, "TOOL_RESULT_NOT_JSON"),
        ({"result": '"' + "x" * 6_000 + '"'}, "TOOL_RESULT_TOO_LARGE"),
        ({"fetched_at": "2026-11-30T09:30:00"}, "INVALID_PAYLOAD"),
        ({"fresh_for_seconds": 0}, "INVALID_PAYLOAD"),
        ({"tool": "x" * 49}, "INVALID_PAYLOAD"),
    ],
)
def test_the_edge_refuses_bad_tool_results(change: dict[str, Any], code: str) -> None:
    raw = {
        "type": "ToolResultRecorded",
        "schema_version": 1,
        "tenant": "acme",
        "stream": "user:C42",
        "event_id": "01a22c54-6c60-7c68-a22f-ad1a2ffd25e9",
        "occurred_at": T0.isoformat(),
        "actor": {"kind": "agent", "id": "a"},
        "payload": recorded(**change),
    }
    with pytest.raises(InvalidInput) as caught:
        validate_envelope(raw)
    assert caught.value.code == code


def test_canonical_json_and_ages() -> None:
    assert canonical_json({"b": 1, "a": [1.5]}, field="r", limit=100) == '{"a":[1.5],"b":1}'
    with pytest.raises(InvalidInput, match="not JSON"):
        canonical_json(float("inf"), field="r", limit=100)
    with pytest.raises(InvalidInput) as caught:
        canonical_json("x" * 100, field="r", limit=100)
    assert caught.value.code == "TOOL_RESULT_TOO_LARGE"
    deep: Any = 1
    for _ in range(40):
        deep = [deep]
    with pytest.raises(InvalidInput):
        canonical_json(deep, field="r", limit=10_000)
    assert [format_age(s) for s in (0, 59, 60, 3600, 3660, 86_400, 90_000)] == [
        "0s",
        "59s",
        "1m",
        "1h",
        "1h 1m",
        "1d",
        "1d 1h",
    ]


def memory(
    key: str = "stage", value: str = "proposal_sent", at: datetime = T0, **kw: Any
) -> Memory:
    return Memory(
        memory_id=kw.pop("memory_id", "01a22c54-6c60-8c68-a22f-ad1a2ffd25e9"),
        tenant="acme",
        stream="user:C42",
        type=kw.pop("type", MemoryType.FACT),
        scope=Scope.USER,
        content="",
        key=key,
        value=value,
        created_at=at,
        source_event_id="e",
        content_hash="h",
        **kw,
    )


TRIGGER = Trigger(
    id="stale-proposal",
    when=Condition(key="stage", value="proposal_sent", older_than="1d"),  # type: ignore[arg-type]
    suggest=Suggest(tool="crm.get_deal", arguments={"client": "{stream}", "v": "{value}"}),
)
SET = TriggerSet([ToolSpec(name="crm.get_deal")], [TRIGGER])


def test_a_trigger_fires_from_the_boundary_instant_in_any_time_zone() -> None:
    m = memory(at=T0.astimezone(TOKYO))
    day = T0 + timedelta(days=1)
    assert SET.fired(TRIGGER, m, day - timedelta(microseconds=1), []) is None
    fired = SET.fired(TRIGGER, m, day.astimezone(timezone(timedelta(hours=-7))), [])
    assert fired is not None
    assert fired.arguments == {"client": "user:C42", "v": "proposal_sent"}
    assert fired.age_seconds == 86_400.0
    # another value, another key, a memory no longer live: no suggestion
    assert SET.fired(TRIGGER, memory(value="won"), day, []) is None
    assert SET.fired(TRIGGER, memory(key="budget"), day, []) is None
    assert SET.fired(TRIGGER, memory(status=MemoryStatus.SUPERSEDED), day, []) is None
    # a tool result's age counts from its fetch
    fetched = memory(at=day, fetched_at=T0)
    assert SET.fired(TRIGGER, fetched, day, []) is not None


def test_an_answered_suggestion_does_not_fire_again_for_that_version() -> None:
    m = memory()
    day = T0 + timedelta(days=2)
    answer = memory(
        key="tool.x",
        value="{}",
        memory_id="01a22c55-0000-8000-8000-000000000000",
        tags=("trigger:stale-proposal", f"answers:{m.memory_id}"),
        provenance=Provenance(source_id="tool:crm.get_deal"),
    )
    assert SET.fired(TRIGGER, m, day, [answer]) is None
    # an answer to another trigger, or to another version, does not count
    other = answer.model_copy(update={"tags": ("trigger:other", f"answers:{m.memory_id}")})
    assert SET.fired(TRIGGER, m, day, [other]) is not None
    # nor does another tool's result, or a memory of no tool, with the same tags
    for source in ("tool:fx.rate", None):
        unlike = answer.model_copy(update={"provenance": Provenance(source_id=source)})
        assert SET.fired(TRIGGER, m, day, [unlike]) is not None
    newer = memory(memory_id="01a22c56-0000-8000-8000-000000000000", version=2)
    assert SET.fired(TRIGGER, newer, day, [answer]) is not None


def test_conditions_and_templates_are_checked() -> None:
    with pytest.raises(ValueError, match="fires on everything"):
        Condition(value="x")
    with pytest.raises(ValueError, match="not a duration"):
        Condition(key="k", older_than="soon")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="names 'secret'"):
        Suggest(tool="t", arguments={"a": "{secret}"})
    with pytest.raises(ValueError, match="plain"):
        Suggest(tool="t", arguments={"a": "{value!r}"})
    with pytest.raises(ValueError, match=r"unknown tool 'crm\.get_deal'"):
        TriggerSet([], [TRIGGER])
    with pytest.raises(ValueError, match="takes no argument"):
        TriggerSet([ToolSpec(name="crm.get_deal", arguments=("client",))], [TRIGGER])


GOOD = """\
tools:
  - name: crm.get_deal
triggers:
  - id: stale-proposal
    when: {key: stage, value: proposal_sent, older_than: 1d}
    suggest:
      tool: crm.get_deal
      arguments: {client: "{stream}"}
"""


def load(tmp_path: Path, text: str) -> TriggerSet:
    path = tmp_path / "triggers.yaml"
    path.write_text(text)
    return load_triggers(path)


def test_the_trigger_file_loads(tmp_path: Path) -> None:
    loaded = load(tmp_path, GOOD)
    assert [t.id for t in loaded.triggers] == ["stale-proposal"]
    assert loaded.triggers[0].when.older_than == 86_400
    assert load_triggers().triggers == ()  # Mnemo's defaults: none


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (GOOD.replace("tool: crm.get_deal", "tool: crm.fetch"), r":7: trigger 'stale-proposal': "
         r"unknown tool 'crm.fetch'; the file declares: crm.get_deal"),
        (GOOD.replace("older_than: 1d", "older_than: soon"), r":5: trigger 'stale-proposal': "
         r"when.older_than: .*not a duration"),
        (GOOD + "  - id: stale-proposal\n    when: {key: k}\n    suggest: {tool: crm.get_deal}\n",
         r":9: trigger 'stale-proposal' is declared twice"),
        (GOOD.replace("arguments: {client", "arguments: {client: [oops], x"),
         r":8: trigger 'stale-proposal': suggest.arguments.client"),
        (GOOD + "extra: 1\n", r":9: unknown key\(s\) extra"),
        (GOOD.replace("    when:", "   when:"), r":5: not valid YAML"),
        ("tools: [{name: 'bad name'}]\n", r":1: tool #1: name"),
        ("- just a list\n", r":1: the top level must be a mapping"),
    ],
)  # fmt: skip
def test_a_bad_trigger_file_is_refused_naming_file_line_and_trigger(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(TriggerFileError, match=r"triggers\.yaml" + message):
        load(tmp_path, text)


def test_a_result_sealed_whole_still_passes_the_edge() -> None:
    """A user stream's event as the topic carries it: its arguments and result sealed
    whole stand in as SEALED_TEXT, and the distributed registrar checks topic records at
    the edge (they were checked as JSON before they were sealed)."""
    raw = {
        "type": "ToolResultRecorded",
        "schema_version": 1,
        "tenant": "acme",
        "stream": "user:C42",
        "event_id": "01a22c54-6c60-7c68-a22f-ad1a2ffd25e9",
        "occurred_at": T0.isoformat(),
        "actor": {"kind": "agent", "id": "a"},
        "payload": recorded(arguments=SEALED_TEXT, result=SEALED_TEXT, source=SEALED_TEXT),
    }
    assert validate_envelope(raw).payload["result"] == SEALED_TEXT
