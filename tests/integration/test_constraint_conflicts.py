"""Keyless constraints that contradict each other, through a real context assembly: both
reported, the winner rendered, the loser left out, the decision in the audit event."""

from __future__ import annotations

from typing import Any

from mnemo.bootstrap import Platform
from mnemo.domain.events import ContextAssembled
from mnemo.service.app import RequestContext
from mnemo.service.context import ContextRequest

CTX = RequestContext("acme", "agent")
S = "user:U1"


def constraint(content: str, trust: float) -> dict[str, Any]:
    return {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": S,
        "payload": {
            "memory": {
                "type": "constraint",
                "content": content,
                "provenance": {"trust": trust, "source_id": f"policy:{trust}"},
            }
        },
    }


def test_contradicting_constraints_are_reported_and_the_more_trusted_wins(
    platform: Platform,
) -> None:
    result = platform.app.publish(
        CTX,
        [
            constraint("单笔转账不得超过5万元", 0.9),
            constraint("单笔转账上限为2万元", 0.6),
            constraint("单日取现不得超过2万元", 0.6),  # looks alike, another quantity
        ],
    )
    platform.runner.drain()
    strict, loose, cash = (
        platform.app.outcome(CTX, a.event_id)[0].memory_id for a in result.accepted
    )
    response = platform.app.context(CTX, ContextRequest(subjects=(S,), query="转账限额"))
    [conflict] = response.conflicts
    assert (conflict["kept"], conflict["dropped"], conflict["decided_by"]) == (
        strict,
        loose,
        "trust",
    )
    assert conflict["key"] is None
    assert "money" in str(conflict["why"])
    assert {conflict["kept_text"], conflict["dropped_text"]} == {
        "单笔转账不得超过5万元",
        "单笔转账上限为2万元",
    }
    rendered = {i.candidate.memory.memory_id for i in response.assembly.included}
    assert strict in rendered
    assert cash in rendered
    assert loose not in rendered
    assert any(x.memory_id == loose and x.reason == "conflict" for x in response.left_out)
    platform.runner.drain()
    [recorded] = [
        e
        for e in platform.log.read_stream("acme", S, 1, 100)
        if e.envelope.type == ContextAssembled.TYPE
    ]
    assert recorded.envelope.payload["conflicts"] == [f"{strict}>{loose}:trust"]


def test_the_assembly_reads_chinese_numerals_and_keeps_rules_for_other_groups(
    platform: Platform,
) -> None:
    result = platform.app.publish(
        CTX,
        [
            constraint("单笔转账不超过五千元", 0.9),
            constraint("单笔转账上限两万元", 0.6),  # the same quantity, another limit
            constraint("禁止向未成年人推荐信贷产品", 0.8),
            constraint("允许向成年人推荐信贷产品", 0.7),  # another group: both hold
        ],
    )
    platform.runner.drain()
    strict, loose, minors, adults = (
        platform.app.outcome(CTX, a.event_id)[0].memory_id for a in result.accepted
    )
    response = platform.app.context(CTX, ContextRequest(subjects=(S,), query="转账限额 信贷"))
    [conflict] = response.conflicts
    assert (conflict["kept"], conflict["dropped"]) == (strict, loose)
    assert conflict["why"] in (
        "different money limits (5000 and 20000)",
        "different money limits (20000 and 5000)",  # the pair in memory id order
    )
    rendered = {i.candidate.memory.memory_id for i in response.assembly.included}
    assert {strict, minors, adults} <= rendered
    assert loose not in rendered
