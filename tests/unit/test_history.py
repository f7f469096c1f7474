"""History rules: every kind of fact in Chinese and English, the look-alikes that must
yield nothing, how facts fold (merge, continue the matter last spoken of, re-imports),
the rule file's checks with their lines, and registration's handling of facts."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.unit.test_registration import T0, DictState, observe, outcomes
from tests.vault_support import SwitchableVault

from mnemo.bootstrap import load_history_facts, load_rules
from mnemo.domain.history import (
    MAX_SOURCES,
    FactRules,
    fact_sources,
    normalize_days,
    normalize_money,
)
from mnemo.domain.memory import Memory, MemoryStatus, MemoryType
from mnemo.domain.projection import OutcomeKind
from mnemo.handlers import Decision, registration
from mnemo.sealing import KeyCache, Sealer
from mnemo.service.history_rules import HistoryRuleFileError, load_history_rules

FACTS = load_history_facts()
RULES = load_rules()
RULES.facts = FACTS

AGENT_ZH, AGENT_EN, USER_ZH, USER_EN = "客服", "agent", "客户", "customer"

# (speaker, turn, kind, the fields read)
POSITIVE: list[tuple[str, str, str, dict[str, str]]] = [
    # complaints
    (
        USER_ZH,
        "订单20240511-3到现在还没到，已经晚了三天了！",
        "complaint",
        {"order": "20240511-3", "issue": "delay", "delay": "3d"},
    ),
    (
        USER_EN,
        "My order 20240511-3 still hasn't arrived, it's three days late.",
        "complaint",
        {"order": "20240511-3", "issue": "delay", "delay": "3d"},
    ),
    (
        USER_ZH,
        "我要投诉，20240602-1这单比承诺的延误了两周",
        "complaint",
        {"order": "20240602-1", "issue": "delay", "delay": "14d"},
    ),
    (
        USER_ZH,
        "订单20240511-3收到的杯子是碎的",
        "complaint",
        {"order": "20240511-3", "issue": "damaged"},
    ),
    (
        USER_EN,
        "Order 20240511-3 arrived damaged, the box was crushed.",
        "complaint",
        {"order": "20240511-3", "issue": "damaged"},
    ),
    (AGENT_ZH, "为表歉意，给您补偿五元。", "complaint", {"compensation": "5元"}),
    (AGENT_EN, "We will compensate you $5 for the trouble.", "complaint", {"compensation": "$5"}),
    # orders
    (
        USER_ZH,
        "我买了一件蓝色衬衫，订单号是20240601-7，付了一百二十九元。",
        "order",
        {"order": "20240601-7", "item": "一件蓝色衬衫", "amount": "129元"},
    ),
    (
        USER_EN,
        "I bought a blue shirt, order number 20240601-7, paid $29.",
        "order",
        {"order": "20240601-7", "item": "blue shirt", "amount": "$29"},
    ),
    # refunds
    (
        USER_ZH,
        "订单20240511-3我要申请退款。",
        "refund",
        {"order": "20240511-3", "state": "requested"},
    ),
    (
        USER_EN,
        "I'd like a refund for order 20240511-3.",
        "refund",
        {"order": "20240511-3", "state": "requested"},
    ),
    (AGENT_ZH, "您的退款50元已经审核通过。", "refund", {"amount": "50元", "state": "approved"}),
    (AGENT_ZH, "退款已原路退回，请注意查收。", "refund", {"state": "refunded"}),
    (AGENT_ZH, "很抱歉，您的退款申请未通过。", "refund", {"state": "rejected"}),
    (
        AGENT_EN,
        "Your refund of $50 has been approved.",
        "refund",
        {"amount": "$50", "state": "approved"},
    ),
    (AGENT_EN, "Your refund was credited to your card.", "refund", {"state": "refunded"}),
    (
        AGENT_EN,
        "Unfortunately your refund request was declined.",
        "refund",
        {"state": "rejected"},
    ),
    # deliveries
    (
        AGENT_ZH,
        "订单20240601-7已经发货了。",
        "delivery",
        {"order": "20240601-7", "state": "shipped"},
    ),
    (
        AGENT_ZH,
        "顺丰快递，运单号SF12345678901",
        "delivery",
        {"carrier": "顺丰", "tracking": "SF12345678901"},
    ),
    (AGENT_ZH, "预计5月14日送达。", "delivery", {"eta": "5月14日"}),
    (
        AGENT_EN,
        "Order 20240601-7 has shipped.",
        "delivery",
        {"order": "20240601-7", "state": "shipped"},
    ),
    (
        AGENT_EN,
        "It goes with UPS, tracking number 1z99988877.",
        "delivery",
        {"carrier": "UPS", "tracking": "1Z99988877"},
    ),
    (AGENT_EN, "It is expected to arrive on May 14.", "delivery", {"eta": "May 14"}),
    # preference changes
    (USER_ZH, "以后联系我请用短信。", "preference", {"topic": "contact", "value": "短信"}),
    (USER_ZH, "联系方式改成邮件吧", "preference", {"topic": "contact", "value": "邮件"}),
    (
        USER_ZH,
        "送货时间改成周末",
        "preference",
        {"topic": "delivery_time", "value": "周末"},
    ),
    (USER_ZH, "以后都用简易包装", "preference", {"topic": "packaging", "value": "简易包装"}),
    (
        USER_EN,
        "Please contact me by Email from now on.",
        "preference",
        {"topic": "contact", "value": "email"},
    ),
    (
        USER_EN,
        "Please deliver on weekends instead.",
        "preference",
        {"topic": "delivery_time", "value": "weekends"},
    ),
    (
        USER_EN,
        "From now on I want plain packaging.",
        "preference",
        {"topic": "packaging", "value": "plain packaging"},
    ),
]

# turns that look like facts and state none
LOOK_ALIKES: list[tuple[str, str]] = [
    (USER_ZH, "你们的退款政策是什么？"),  # a question
    (USER_ZH, "如果晚了三天会有补偿吗"),  # a supposition (and a question)
    (USER_ZH, "要是订单20240511-3晚了三天，你们怎么办"),  # a supposition
    (USER_ZH, "订单20240511-3不要退款了"),  # declined
    (USER_ZH, "订单20240511-3是否已经发货"),  # asks
    (USER_ZH, "订单20240511-3还没发货"),  # not shipped
    (USER_ZH, "补偿5元太少了"),  # the customer names an amount: no compensation given
    (USER_ZH, "我朋友的快递晚了三天"),  # no order
    (USER_ZH, "订单20240511-3"),  # an order number alone
    (USER_ZH, "以后再说吧"),
    (USER_EN, "What is your refund policy?"),
    (USER_EN, "If order 20240511-3 were three days late, would I get anything?"),
    (USER_EN, "I don't want a refund for order 20240511-3."),
    (USER_EN, "Has order 20240511-3 shipped?"),
    (USER_EN, "Order 20240511-3 hasn't shipped yet."),
    (AGENT_EN, "This is not order 20240511-3, it arrived two days late."),
    (USER_EN, "You should compensate you $5, I think."),  # said by the customer
    (USER_EN, "My friend's parcel was three days late."),
    (USER_EN, "I like weekends."),
]


@pytest.mark.parametrize(("speaker", "text", "kind", "fields"), POSITIVE)
def test_each_kind_of_fact_is_read_in_both_languages(
    speaker: str, text: str, kind: str, fields: dict[str, str]
) -> None:
    updates = FACTS.read(text, speaker)
    assert [(u.kind, u.fields) for u in updates if u.kind == kind] == [(kind, fields)]
    assert {u.kind for u in updates} == {kind}


@pytest.mark.parametrize(("speaker", "text"), LOOK_ALIKES)
def test_look_alikes_yield_no_fact(speaker: str, text: str) -> None:
    assert FACTS.read(text, speaker) == []


def test_normalisers() -> None:
    assert [normalize_days(v) for v in ("3天", "two weeks", "36小时", "1.5 days", "两周")] == [
        "3d",
        "14d",
        "36h",
        "1.5d",
        "14d",
    ]
    assert [normalize_money(v) for v in ("5块钱", "¥12.50", "20 dollars", "$7", "8")] == [
        "5元",
        "12.5元",
        "$20",
        "$7",
        "8",
    ]


# ---- folding, through registration over a dict read model -------------------------------


def say(state: DictState, speaker: str, text: str, minutes: int) -> Decision:
    env = observe(text, kind="turn", speaker=speaker, at=T0 + timedelta(minutes=minutes))
    decision = registration.handle(env, state, RULES)
    state.apply(decision)
    return decision


def facts(state: DictState, status: MemoryStatus = MemoryStatus.ACTIVE) -> list[Memory]:
    return sorted(
        (m for m in state.memories.values() if "fact" in m.tags and m.status is status),
        key=lambda m: (m.key or "", m.version),
    )


def turn_of(decision: Decision) -> str:
    [memory] = [
        w.memory
        for w in decision.writes
        if hasattr(w, "memory") and "turn" in w.memory.tags and "fact" not in w.memory.tags
    ]
    return memory.memory_id


def test_a_later_turn_updates_the_fact_of_the_same_matter() -> None:
    state = DictState()
    first = say(state, USER_ZH, "订单20240511-3到现在还没到，已经晚了三天了！", 0)
    say(state, USER_ZH, "今天天气不错", 1)
    second = say(state, USER_ZH, "订单20240511-3现在已经晚了五天了", 2)
    third = say(state, AGENT_ZH, "为表歉意，给您补偿5元。", 3)
    [fact] = facts(state)
    assert fact.type is MemoryType.HISTORY
    assert fact.key == "fact.complaint.20240511-3"
    assert fact.content == "[Complaint] order=20240511-3 issue=delay delay=5d compensation=5元"
    assert fact.version == 3
    assert fact_sources(fact) == tuple(turn_of(d) for d in (first, second, third))
    assert {"fact", "fact:complaint"} <= set(fact.tags)
    episode = next(t for t in fact.tags if t.startswith("episode:"))
    assert episode in state.memories[turn_of(first)].tags  # the conversation's episode
    old = facts(state, MemoryStatus.SUPERSEDED)
    assert [m.content.split()[-1] for m in old] == ["delay=3d", "delay=5d"]


def test_a_turn_without_an_order_continues_the_matter_last_spoken_of() -> None:
    state = DictState()
    say(state, USER_ZH, "订单20240511-3到现在还没到，已经晚了三天了", 0)
    say(state, USER_ZH, "订单20240602-9我要申请退款", 1)
    say(state, AGENT_ZH, "您的退款30元已经审核通过", 2)  # the refund of 20240602-9
    say(state, USER_EN, "Order 20240511-3 arrived damaged.", 3)
    say(state, AGENT_EN, "We will compensate you $5.", 4)  # the complaint last spoken of
    contents = [m.content for m in facts(state)]
    assert contents == [
        "[Complaint] order=20240511-3 issue=damaged delay=3d compensation=$5",
        "[Refund] order=20240602-9 amount=30元 state=approved",
    ]


def test_an_update_only_rule_opens_no_matter_and_another_kind_borrows_the_order() -> None:
    state = DictState()
    say(state, AGENT_ZH, "为表歉意，给您补偿5元。", 0)  # no complaint held: nothing
    assert facts(state) == []
    say(state, USER_ZH, "我买了一件蓝色衬衫，订单号是20240601-7，付了129元。", 1)
    say(state, AGENT_ZH, "已经发货了，顺丰快递，运单号SF12345678901，预计5月14日送达。", 2)
    assert [m.content for m in facts(state)] == [
        "[Delivery] order=20240601-7 carrier=顺丰 tracking=SF12345678901 eta=5月14日 state=shipped",
        "[Order] order=20240601-7 item=一件蓝色衬衫 amount=129元",
    ]
    # one turn that the delivery rules read three times is one fact, version 1
    assert [m.version for m in facts(state)] == [1, 1]


def test_a_preference_change_supersedes_the_earlier_value() -> None:
    state = DictState()
    say(state, USER_ZH, "以后联系我请用短信。", 0)
    say(state, USER_EN, "Please contact me by email from now on.", 1)
    [fact] = facts(state)
    assert (fact.key, fact.content, fact.version) == (
        "fact.preference.contact",
        "[Preference] topic=contact value=email",
        2,
    )


def test_redelivery_emits_the_same_events_and_a_reimport_adds_nothing() -> None:
    text = "订单20240511-3到现在还没到，已经晚了三天了"
    env = observe(text, kind="turn", speaker=USER_ZH, at=T0)
    first = registration.handle(env, DictState(), RULES)
    again = registration.handle(env, DictState(), RULES)
    assert [e.event_id for e in first.events] == [e.event_id for e in again.events]
    assert len(first.events) == 2  # the turn and its fact
    state = DictState()
    state.apply(registration.handle(env, state, RULES))
    # handled again over its own memories (a second owner of the partition)
    seen_again = registration.handle(env, state, RULES)
    assert seen_again.events == []
    # the same turn imported again as another event: a duplicate turn, the fact unchanged
    copy = observe(text, kind="turn", speaker=USER_ZH, at=T0)
    reimport = registration.handle(copy, state, RULES)
    assert outcomes(reimport) == [(OutcomeKind.DUPLICATE, None)]
    assert reimport.events == []


def test_a_fact_links_its_most_recent_turns_only() -> None:
    state = DictState()
    for i in range(MAX_SOURCES + 5):
        say(state, USER_ZH, f"订单20240511-3已经晚了{i + 1}天了", i)
    [fact] = facts(state)
    assert len(fact_sources(fact)) == MAX_SOURCES
    assert len(fact.tags) <= 32
    assert fact.content.endswith(f"delay={MAX_SOURCES + 5}d")


def test_without_history_rules_turns_yield_no_facts() -> None:
    state = DictState()
    env = observe("订单20240511-3已经晚了三天了", kind="turn", speaker=USER_ZH, at=T0)
    decision = registration.handle(env, state, load_rules())
    assert len(decision.events) == 1


# ---- the rule file -----------------------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "history.yaml"
    path.write_text(text, encoding="utf-8")
    return path


KIND = """kinds:
  ticket:
    label: Ticket
    fields: [ticket, state]
    identity: ticket
"""


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("kinds: {}\nfacts: []\nrulez: []\n", 3, "unknown key(s) rulez"),
        (KIND + "facts:\n  - id: t1\n    kind: ticket\n    pattern: '(a)\\1'\n", 9, "t1"),
        (
            KIND + "facts:\n  - id: t1\n    kind: ticket\n    pattern: '(?P<owner>\\w+)'\n",
            8,
            "not fields of ticket",
        ),
        (KIND + "facts:\n  - id: t1\n    kind: case\n    pattern: 'x'\n", 8, "not declared"),
        (
            KIND + "facts:\n  - {id: t1, kind: ticket, pattern: '#(?P<ticket>\\d+)'}\n"
            "  - {id: t1, kind: ticket, pattern: 'T(?P<ticket>\\d+)'}\n",
            8,
            "declared twice",
        ),
        ("kinds:\n  ticket:\n    label: T\n    fields: [a]\n    identity: b\n", 3, "identity"),
        ("kinds: [1]\n", 1, "kinds must be a mapping"),
        ("facts:\n  - id: x\n   kind: y\n", 3, "not valid YAML"),
    ],
)
def test_a_bad_rule_file_is_refused_with_its_line(
    tmp_path: Path, text: str, line: int, words: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(HistoryRuleFileError) as caught:
        load_history_rules(path)
    message = str(caught.value)
    assert message.startswith(f"{path}:{line}:"), message
    assert words in message


def test_an_operator_file_extends_the_defaults(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "extends: default\n" + KIND + "facts:\n  - id: ticket-closed\n    kind: ticket\n"
        "    pattern: 'ticket\\s*#(?P<ticket>\\d+)\\s+(?:is|was)\\s+closed'\n"
        "    values: {state: closed}\n",
    )
    rules = load_history_rules(path)
    assert rules.rules[0].id == "ticket-closed"
    assert len(rules.rules) == len(FACTS.rules) + 1
    [update] = rules.read("Ticket #4411 was closed this morning.")
    assert (update.kind, update.fields) == ("ticket", {"ticket": "4411", "state": "closed"})
    # without extends, the file replaces the defaults
    alone = load_history_rules(write(tmp_path, KIND))
    assert not alone
    assert alone.read("订单20240511-3已经晚了三天了") == []


def test_the_default_rules_cover_every_kind_in_both_languages() -> None:
    kinds: dict[str, set[str]] = {}
    for rule in FACTS.rules:
        kinds.setdefault(rule.kind, set()).add(rule.id.split("-")[0])
    assert kinds == {k: {"zh", "en"} for k in FACTS.kinds}
    assert set(FACTS.kinds) >= {"complaint", "order", "refund", "delivery", "preference"}


def test_fact_rules_check_their_kinds() -> None:
    kinds: dict[str, Any] = {}
    with pytest.raises(ValueError, match="kind 'complaint' is not declared"):
        FactRules(kinds, [FACTS.rules[0].model_copy(update={"kind": "complaint"})])


def test_a_sealed_value_is_read_as_its_placeholder_and_kept_whole() -> None:
    # an 11-digit number starting with 1 reads as a Chinese mobile number: the scanner
    # seals it, and the rules see its placeholder
    sealed = "⟦phone:h0123456789abcdef⟧"
    [update] = [
        u
        for u in FACTS.read(f"顺丰快递，运单号SF{sealed}，请注意查收", AGENT_ZH)
        if "tracking" in u.fields
    ]
    assert update.fields["tracking"] == f"SF{sealed}"  # not upper-cased


# ---- a sealed value in a fact's next version ----------------------------------------------

SHIPPED = "订单20240601-7已经发货了，顺丰快递，运单号SF13812345678，预计5月14日送达。"
TRACKING = "SF13812345678"


def sealed_say(
    state: DictState, sealer: Sealer, speaker: str, text: str, minutes: int, **kw: Any
) -> Decision:
    """A turn as the registrar reads it on a real platform: sealed by the detector (the
    tracking number reads as a mobile number), its whole-sealed fields opened again."""
    env = observe(text, kind="turn", speaker=speaker, at=T0 + timedelta(minutes=minutes))
    env = sealer.open_private_envelope(sealer.seal(env))
    decision = registration.handle(env, state, RULES, **kw)
    state.apply(decision)
    return decision


def fresh_keys_sealer() -> tuple[Sealer, KeyCache]:
    # no cache: every event gets a data key of its own (as events further apart than
    # MNEMO_DATA_KEY_TTL do)
    keys = KeyCache(SwitchableVault(), ttl=0.0)
    return Sealer(keys), keys


def test_a_fact_keeps_a_sealed_field_in_its_next_version() -> None:
    sealer, keys = fresh_keys_sealer()
    state = DictState()
    sealed_say(state, sealer, AGENT_ZH, SHIPPED, 0)
    sealed_say(state, sealer, AGENT_ZH, "您的包裹已经签收了。", 1)
    [fact] = facts(state)
    assert fact.version == 2
    assert TRACKING not in fact.content  # still sealed in the read model
    assert "tracking=SF⟦phone:h" in fact.content
    opened = sealer.open_memory(fact)
    assert opened.content == (
        f"[Delivery] order=20240601-7 carrier=顺丰 tracking={TRACKING} eta=5月14日 state=delivered"
    )
    # forgettable: the subject's key destroyed, the carried value no longer opens
    assert fact.sealed is not None
    keys.destroy(fact.sealed.key_id)
    assert TRACKING not in sealer.open_memory(fact).content


def test_a_carried_value_is_sealed_again_under_the_new_versions_data_key(
    tmp_path: Path,
) -> None:
    """A fact whose next version both keeps a sealed field and gets a new sealed value from
    its turn, under another data key: one block, both values open."""
    rules = load_rules()
    rules.facts = load_history_rules(
        write(
            tmp_path,
            """
kinds:
  callback:
    label: Callback
    fields: [order, phone, email]
    identity: order
facts:
  - id: cb-phone
    kind: callback
    pattern: '订单(?P<order>\\d{8}-\\d)[^。]*?电话(?P<phone>⟦phone:h[0-9a-f]{16}⟧)'
  - id: cb-email
    kind: callback
    pattern: '订单(?P<order>\\d{8}-\\d)[^。]*?邮箱(?P<email>⟦email:h[0-9a-f]{16}⟧)'
""",
        )
    )
    sealer, _ = fresh_keys_sealer()
    state = DictState()

    def say_sealed(text: str, minutes: int, **kw: Any) -> None:
        env = observe(text, kind="turn", speaker=USER_ZH, at=T0 + timedelta(minutes=minutes))
        env = sealer.open_private_envelope(sealer.seal(env))
        state.apply(registration.handle(env, state, rules, **kw))

    say_sealed("订单20240601-7请回电话13812345678。", 0)
    say_sealed("订单20240601-7也可以发邮箱zhang.san@example.org。", 1, reseal=sealer.reseal)
    [fact] = facts(state)
    assert fact.version == 2
    assert "13812345678" not in fact.content
    assert "zhang.san" not in fact.content
    assert sealer.open_memory(fact).content == (
        "[Callback] order=20240601-7 phone=13812345678 email=zhang.san@example.org"
    )
    # without a way to seal it again, the new version holds its own value only (and
    # never another data key's ciphertext it could not open)
    plain = DictState()
    for minutes, text in enumerate(
        ("订单20240601-8请回电话13812345678。", "订单20240601-8也可以发邮箱li.si@example.org。")
    ):
        env = observe(text, kind="turn", speaker=USER_ZH, at=T0 + timedelta(minutes=minutes))
        env = sealer.open_private_envelope(sealer.seal(env))
        plain.apply(registration.handle(env, plain, rules))
    [other] = facts(plain)
    assert "li.si@example.org" in sealer.open_memory(other).content


def test_reseal_opens_under_the_target_key_and_refuses_another_key_id() -> None:
    sealer, keys = fresh_keys_sealer()
    first = sealer.seal(observe("我的电话13812345678", kind="turn", at=T0))
    second = sealer.seal(observe("我的邮箱zhang.san@example.org", kind="turn", at=T0))
    a = sealer.open_private_envelope(first).encryption
    b = sealer.open_private_envelope(second).encryption
    assert a is not None
    assert b is not None
    assert a.wrapped_key != b.wrapped_key
    phone_ref = next(r for r in a.values if r.startswith("phone:"))
    moved = sealer.reseal("acme", b, a, [phone_ref])
    merged = b.model_copy(update={"values": {**b.values, **moved}})
    assert sealer.open_block("acme", merged)[phone_ref] == "13812345678"
    other = a.model_copy(update={"key_id": "acme/user:someone-else"})
    assert sealer.reseal("acme", b, other, [phone_ref]) == {}
    keys.destroy(a.key_id)
    assert sealer.reseal("acme", b, a, [phone_ref]) == {}
