"""An utterance that looks like a memory but yields none is reported with its reason code,
through the outcome API and the console's rejections list, on the embedded platform."""

from __future__ import annotations

from typing import Any

from mnemo.bootstrap import Platform
from mnemo.service.app import RequestContext
from mnemo.service.insights import Insights


def observation(text: str) -> dict[str, Any]:
    return {
        "type": "ObservationRecorded",
        "schema_version": 2,
        "stream": "user:U1",
        "payload": {"text": text},
    }


def test_missed_memories_show_in_the_outcome_and_the_console(platform: Platform) -> None:
    ctx = RequestContext("acme", "agent")
    texts = ["记住这个，下次要用", "actually, make it XL", "谢谢！", "remember my size is L"]
    accepted = platform.app.publish(ctx, [observation(t) for t in texts]).accepted
    platform.runner.drain()
    codes = [platform.app.outcome(ctx, a.event_id)[0].reason_code for a in accepted]
    # the correction comes before any size is known: of what, the agent must ask
    assert codes == ["REQUEST_NOT_UNDERSTOOD", "TARGET_NOT_FOUND", "NO_RULE_MATCHED", None]
    page = Insights(platform.log, platform.store, platform.app.clock).rejections(ctx)
    listed = [(r.event.envelope.event_id, r.outcome, r.reason_code) for r in page.rejections]
    assert listed == [
        (accepted[1].event_id, "ignored", "TARGET_NOT_FOUND"),
        (accepted[0].event_id, "ignored", "REQUEST_NOT_UNDERSTOOD"),
    ]


def test_a_correction_leaves_only_the_new_value_current_in_search_and_context(
    platform: Platform,
) -> None:
    from mnemo.service.context import ContextRequest

    ctx = RequestContext("acme", "agent")
    platform.app.publish(ctx, [observation("我的预算是5000元")])
    platform.runner.drain()
    fixed = platform.app.publish(ctx, [observation("把预算改成六千")]).accepted[0]
    platform.runner.drain()
    [outcome] = platform.app.outcome(ctx, fixed.event_id)
    assert (outcome.kind.value, outcome.version) == ("superseded", 2)
    hits = platform.app.search(ctx, "预算", streams=["user:U1"])
    assert [(h.memory.key, h.memory.value) for h in hits] == [("budget", "6000")]
    context = platform.app.context(ctx, ContextRequest(subjects=("user:U1",), query="预算"))
    assert "预算：6000" in context.assembly.text
    assert "5000" not in context.assembly.text


def test_what_a_chinese_rule_remembers_is_found_by_a_chinese_question(platform: Platform) -> None:
    # a Chinese rule's memory is written in Chinese (尺码：XL), so a Chinese question finds
    # it by its words (the fixture's hashing embedder knows no meaning, only words); its
    # English key still answers an English one
    ctx = RequestContext("acme", "agent")
    said = [
        "记住我的尺码是XL",
        "别再给我发短信了",
        "我不喜欢红色",
        "我住在上海",
        "我的预算是五千块",
        "以后请用邮件联系我",
        "我对花生过敏",
        "我的鞋码是42",
    ]
    platform.app.publish(ctx, [observation(t) for t in said])
    platform.runner.drain()

    def top(query: str) -> str | None:
        hits = platform.app.search(ctx, query, streams=["user:U1"], limit=3)
        return hits[0].memory.key if hits else None

    assert top("我穿什么尺码") == "size"
    assert top("鞋码") == "shoe_size"
    assert top("预算多少") == "budget"
    assert top("我住哪里") == "home_city"
    assert top("what is my budget") == "budget"
