"""History compression on the embedded platform: conversation turns yield typed facts,
a later turn about the same matter updates the fact (a new version, merged fields), the
context shows the fact in place of the turns it summarises (and the raw turns on request),
redelivery adds nothing, and a rebuild from the log gives the same read model."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from mnemo.adapters.clocks import FixedClock
from mnemo.bootstrap import Platform
from mnemo.domain.errors import InvalidInput
from mnemo.domain.history import fact_sources
from mnemo.domain.memory import MemoryStatus, MemoryType
from mnemo.entrypoints.admin import platform_checksum, rebuild_read_models
from mnemo.service.app import RequestContext
from mnemo.service.context import ContextRequest

CTX = RequestContext("acme", "support-agent")
S = "user:H1"

TURNS = [
    ("客户", "你好，在吗？"),
    ("客服", "您好，请问有什么可以帮您？"),
    ("客户", "订单20240511-3到现在还没到，已经晚了三天了！"),
    ("客服", "非常抱歉，我帮您查一下。"),
    ("客户", "好的，谢谢。今天天气真不错。"),
    ("客服", "为表歉意，给您补偿5元，已经发到您的账户。"),
    ("客户", "以后联系我请用短信。"),
    ("客户", "你们的退款政策是什么？"),
    ("客户", "算了，联系方式改成邮件吧。"),
]


def turn(speaker: str, text: str, at: Any) -> dict[str, Any]:
    return {
        "type": "ObservationRecorded",
        "schema_version": 2,
        "stream": S,
        "occurred_at": at.isoformat(),
        "payload": {"text": text, "kind": "turn", "speaker": speaker},
    }


def facts_of(platform: Platform) -> list[Any]:
    listed = platform.app.list_memories(CTX, S, types=(MemoryType.HISTORY,))
    return sorted((m for m in listed if "fact" in m.tags), key=lambda m: m.key or "")


def test_turns_become_facts_that_update_and_replace_their_turns_in_the_context(
    platform: Platform, clock: FixedClock
) -> None:
    start = clock.now() - timedelta(hours=1)
    events = [
        turn(who, text, start + timedelta(seconds=20 * i)) for i, (who, text) in enumerate(TURNS)
    ]
    result = platform.app.publish(CTX, events)
    platform.runner.drain()
    turn_ids = [platform.app.outcome(CTX, a.event_id)[0].memory_id for a in result.accepted]
    facts = facts_of(platform)
    assert [(m.key, m.content) for m in facts] == [
        (
            "fact.complaint.20240511-3",
            "[Complaint] order=20240511-3 issue=delay delay=3d compensation=5元",
        ),
        ("fact.preference.contact", "[Preference] topic=contact value=邮件"),
    ]
    complaint, preference = facts
    # the compensation, said without the order, updated the complaint: version 2, both turns linked
    assert complaint.version == 2
    assert fact_sources(complaint) == (turn_ids[2], turn_ids[5])
    assert "fact:complaint" in complaint.tags
    assert preference.version == 2
    assert fact_sources(preference) == (turn_ids[6], turn_ids[8])
    old = platform.app.get(CTX, complaint.supersedes or "")
    assert old.status is MemoryStatus.SUPERSEDED
    assert old.content.endswith("delay=3d")
    # the question and the small talk yielded nothing
    assert len(platform.app.list_memories(CTX, S, types=(MemoryType.HISTORY,))) == len(TURNS) + 2

    def history(mode: str) -> tuple[list[str], str]:
        response = platform.app.context(
            CTX,
            ContextRequest(subjects=(S,), query="订单20240511-3 补偿", budget=2_000, history=mode),
        )
        ids = [
            i.candidate.memory.memory_id
            for i in response.assembly.included
            if i.section == "history"
        ]
        return ids, response.assembly.text

    ids, text = history("facts")
    assert complaint.memory_id in ids
    assert not {turn_ids[2], turn_ids[5]} & set(ids)  # the turns it summarises are not shown
    assert "[Complaint] order=20240511-3" in text
    raw_ids, raw_text = history("raw")
    assert complaint.memory_id not in raw_ids
    assert "[Complaint]" not in raw_text
    assert turn_ids[2] in raw_ids  # the raw turn stays reachable
    assert platform.app.get(CTX, turn_ids[2]).content.startswith("客户: 订单20240511-3")
    hits = platform.app.search(CTX, "晚了三天", streams=[S])
    assert turn_ids[2] in [h.memory.memory_id for h in hits]

    only = history("facts_only")[0]
    assert complaint.memory_id in only
    assert set(only) <= {m.memory_id for m in facts}
    with pytest.raises(InvalidInput) as refused:
        history("summary")
    assert refused.value.code == "INVALID_HISTORY_MODE"

    # the same conversation imported again adds nothing (each turn is a duplicate, and
    # each fact holds its turns already)
    platform.app.publish(CTX, events)
    platform.runner.drain()
    assert [(m.memory_id, m.version) for m in facts_of(platform)] == [
        (m.memory_id, m.version) for m in facts
    ]
    # a rebuild from the log reproduces the facts (their events are in the log)
    live = platform_checksum(platform)
    assert rebuild_read_models(platform) == live
    assert facts_of(platform) == facts
