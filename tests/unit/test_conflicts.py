"""Conflicts between constraints without keys: the same matter (similar texts, the same
quantity or action) with incompatible values, decided by trust, specificity, recency."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from mnemo.adapters.cn2an_numbers import arabic_numerals
from mnemo.adapters.hashing_embedder import HashingEmbedder
from mnemo.domain.conflicts import claim_of, find_conflicts
from mnemo.domain.memory import Memory, MemoryType, Provenance, Scope
from mnemo.service.context import CONFLICT_SIMILARITY

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=UTC)
EMBEDDER = HashingEmbedder()
THRESHOLD = CONFLICT_SIMILARITY["hashing"]


def constraint(
    text: str,
    n: int,
    *,
    trust: float = 0.5,
    scope: Scope = Scope.USER,
    at: datetime = T0,
    tags: tuple[str, ...] = (),
) -> Memory:
    return Memory(
        memory_id=f"01a22b37-0000-7000-8000-{n:012d}",
        tenant="acme",
        stream="user:U1",
        type=MemoryType.CONSTRAINT,
        scope=scope,
        content=text,
        tags=tags,
        provenance=Provenance(trust=trust),
        created_at=at,
        source_event_id=f"01a22b37-0000-7000-8000-{n:012d}",
        content_hash=str(n),
    )


def cosine(a: Memory, b: Memory) -> float:
    va, vb = EMBEDDER.embed_query(a.text()), EMBEDDER.embed_query(b.text())
    return sum(x * y for x, y in zip(va, vb, strict=True))


def conflicts(a: str, b: str) -> list[str]:
    found = find_conflicts(
        [constraint(a, 1), constraint(b, 2)], cosine, THRESHOLD, numbers=arabic_numerals
    )
    return [d.why for d in found]


@pytest.mark.parametrize(
    ("a", "b", "why"),
    [
        ("单笔转账不得超过5万元", "单笔转账上限为2万元", "money"),
        ("客户年龄必须满18岁", "客户年龄至少20岁", "age"),
        ("允许向VIP客户推荐私募基金", "禁止向VIP客户推荐私募基金", "allows"),
        ("单笔转账亏损不超过百分之十", "单笔转账亏损不超过5%", "percent"),
        ("Discounts must not exceed 20%", "Maximum discount is 15%", "percent"),
        ("Agents may offer refunds", "Agents must never offer refunds", "allows"),
        ("Daily withdrawals are capped at $2,000", "Daily withdrawals: at most $500", "money"),
        # limits in Chinese numerals, against digits or each other
        ("单笔转账不超过5000元", "单笔转账上限两万", "money"),
        ("单笔转账不超过5000元", "单笔转账上限两万元", "money"),
        ("单笔转账不超过五千元", "单笔转账上限为20000元", "money"),
        ("单笔转账上限两万元", "单笔转账上限五万元", "money"),
        ("每月最多退货三次", "每月最多退货5次", "times"),
        ("每月最多退货两次", "每月最多退货3次", "times"),
        # 限额 bounds like 上限 does; 八折 is a discount as 80% of the price
        ("单笔转账限额两万", "单笔转账限额3万", "number"),
        ("折扣不能低于八折", "折扣不能低于七折", "discount"),
        ("会员价最低打八五折", "会员价最低打7折", "discount"),
        ("单笔转账上限一点五万元", "单笔转账不超过2万元", "money"),
        # 每笔 and 单笔 say the same quantity
        ("每笔转账上限2万元", "单笔转账不得超过5万元", "money"),
        ("每日取现上限2万元", "每天取现最多5万元", "money"),  # 天 and 日 say the same
        # the same group, the same action: allowed and denied
        ("不得向未成年人销售", "可以向未成年人销售", "allows"),
        ("允许向成年人推荐信贷产品", "禁止向成年人推荐信贷产品", "allows"),
        ("非会员不得预订房间", "非会员可以预订房间", "allows"),
        ("Non-members must not book rooms", "Non-members may book rooms", "allows"),
        ("Users under 18 may open accounts", "Users under 18 must not open accounts", "allows"),
        # a deny that is a bound's wording against an allow beyond the bound
        ("单笔转账不得超过5万元", "单笔转账可以在5万元以上", "allows"),
        # the same words in another form (recommended, calling)
        ("Do not recommend crypto funds", "Crypto funds may be recommended", "allows"),
        ("Never call the customer after 9pm", "Calling the customer after 9pm is fine", "allows"),
        # a verb that only carries its object (offer, give) names nothing of its own
        ("Never offer discounts above 10%", "Discounts above 10% are allowed", "allows"),
        ("Never give refunds without a receipt", "Refunds without a receipt are allowed", "allows"),
        # a duty and a waiver said with the act's noun (verify, verification)
        (
            "Always verify identity before changing the address",
            "Identity verification is not needed to change the address",
            "waives",
        ),
        # hours and weeks are counted in days; "within" bounds as "at most" does
        ("Reply to complaints within 24 hours", "Reply to complaints within 2 days", "days"),
        ("Returns are accepted within 2 weeks", "Returns are accepted within 30 days", "days"),
        ("退款在48小时内处理", "退款在3天内处理", "days"),
    ],
)
def test_contradicting_constraints_conflict(a: str, b: str, why: str) -> None:
    [found] = conflicts(a, b)
    assert why in found


@pytest.mark.parametrize(
    ("a", "b"),
    [
        # alike in shape, but about different quantities or actions
        ("单笔转账不得超过5万元", "单日取现不得超过2万元"),
        ("禁止向未成年人推荐信贷产品", "允许向老客户推荐信贷产品"),
        ("Discounts must not exceed 20%", "Commission must not exceed 5%"),
        ("Never call customers after 9pm", "Agents may call customers before noon"),
        ("Never share passwords", "Sharing files is allowed"),
        ("Never offer free shipping", "Discounts above 10% are allowed"),
        # a narrower rule beside the general one: an exception, not a conflict
        ("Discounts must not exceed 20%", "Discounts for VIP members must not exceed 30%"),
        ("单笔转账不得超过5万元", "VIP客户单笔转账不得超过20万元"),
        (
            "Refunds must not exceed $500",
            "Refunds for damaged items may exceed $500 with manager approval",
        ),
        # the same limit said twice, in other words or units
        ("单笔转账不得超过5万元", "单笔转账最多50000元"),
        ("Discounts must not exceed 20%", "Maximum discount is 20 percent"),
        # a floor and a ceiling of the same quantity can both hold
        ("单笔转账不低于100元", "单笔转账不超过5万元"),
        # the same action for different groups: a negated group (未成年人, 未满18岁, 非会员,
        # non-members) is not the plain one, nor is one group another (老年人, 成年人)
        ("未成年人不得购买酒类", "成年人可以购买酒类"),
        ("禁止向未成年人推荐信贷产品", "允许向成年人推荐信贷产品"),
        ("禁止向未成年人推荐信贷产品", "可以向成年人推荐信贷产品"),
        ("未满18岁的用户不能开户", "满18岁的用户可以开户"),
        ("Do not sell alcohol to minors", "You may sell alcohol to adults"),
        ("禁止向老年人推荐信贷产品", "允许向成年人推荐信贷产品"),
        ("老年人不得购买酒类", "成年人可以购买酒类"),
        ("老年人每日取现不超过2000元", "成年人每日取现不超过5000元"),
        ("非会员不得预订房间", "会员可以预订房间"),
        ("Non-members must not book rooms", "Members may book rooms"),
        # an allow and a deny on ranges that do not meet
        ("18岁以下的用户不能开户", "18岁以上的用户可以开户"),
        ("Users under 18 must not open accounts", "Users over 18 may open accounts"),
        # the same limit in Chinese numerals and in digits
        ("单笔转账上限两万元", "单笔转账上限2万元"),
        ("单笔转账上限两万", "单笔转账不得超过2万元"),
        ("单笔转账上限一点五万元", "单笔转账不超过15000元"),
        ("每月最多退货三次", "每月退货不超过3次"),
        ("折扣不能低于八折", "折扣不能低于8折"),
        ("单笔转账限额两万", "单笔转账不得超过2万元"),
        # the same span in hours, weeks and days
        ("Reply to complaints within 24 hours", "Reply to complaints within 1 day"),
        ("Returns are accepted within 2 weeks", "Returns are accepted within 14 days"),
        ("退款在48小时内处理", "退款在2天内处理"),
        # a narrower group's own limit beside the general one ("within" is a bound word,
        # not what is constrained)
        ("VIP customers can return items within 60 days", "Items can be returned within 30 days"),
    ],
)
def test_constraints_that_only_look_alike_do_not_conflict(a: str, b: str) -> None:
    assert conflicts(a, b) == []


def test_texts_too_far_apart_in_meaning_are_not_the_same_matter() -> None:
    a, b = constraint("单笔转账不得超过5万元", 1), constraint("单笔转账上限为2万元", 2)
    assert find_conflicts([a, b], lambda x, y: 0.1, THRESHOLD) == []


def test_trust_then_specificity_then_recency_decides() -> None:
    low = constraint("Discounts must not exceed 20%", 1, trust=0.4, at=T0 + timedelta(days=1))
    high = constraint("Maximum discount is 15%", 2, trust=0.9)
    [d] = find_conflicts([low, high], cosine, THRESHOLD)
    assert (d.kept, d.dropped, d.rule) == (high, low, "trust")
    broad = constraint("单笔转账不得超过5万元", 3, scope=Scope.TENANT, at=T0 + timedelta(days=1))
    narrow = constraint("单笔转账上限为2万元", 4, scope=Scope.SESSION)
    [d] = find_conflicts([broad, narrow], cosine, THRESHOLD)
    assert (d.kept, d.rule) == (narrow, "specificity")
    old = constraint("Agents may offer refunds", 5)
    new = constraint("Agents must never offer refunds", 6, at=T0 + timedelta(hours=1))
    [d] = find_conflicts([new, old], cosine, THRESHOLD)
    assert (d.kept, d.dropped, d.rule) == (new, old, "recency")


def test_claims_read_bounds_units_and_polarity() -> None:
    claim = claim_of("单笔转账不得超过5万元")
    assert claim.polarity == "deny"
    assert [(k, b, f"{v:f}") for k, b, v in claim.limits] == [("money", "max", "50000")]
    assert claim_of("Agents may offer refunds").polarity == "allow"
    assert [k for k, _, _ in claim_of("亏损不超过百分之十").limits] == ["percent"]


def limits(text: str) -> list[tuple[str, str, str]]:
    return [(k, b, f"{v:f}") for k, b, v in claim_of(text, arabic_numerals).limits]


def test_claims_read_chinese_numerals_that_state_a_quantity() -> None:
    assert limits("单笔转账上限两万") == [("number", "max", "20000")]
    assert limits("单笔转账不超过五千元") == [("money", "max", "5000")]
    assert limits("单笔转账上限一点五万元") == [("money", "max", "15000")]
    assert limits("每月最多退货三次") == [("times", "max", "3")]
    assert limits("客户年龄必须满十八岁") == [("age", "min", "18")]
    # words, ordinals and 一次性 are not quantities
    assert limits("千万不要向未成年人销售烟酒") == []
    assert limits("一律不得超过两万元") == [("money", "max", "20000")]
    assert limits("第一次转账不超过五千元") == [("money", "max", "5000")]
    assert limits("一次性转账不超过五万元") == [("money", "max", "50000")]
    # without the platform's numbers, only digits (and 百分之…) are read
    assert claim_of("单笔转账上限两万").limits == ()


def test_claims_read_who_is_meant() -> None:
    under, over = claim_of("未满18岁的用户不能开户"), claim_of("满18岁的用户可以开户")
    assert [(k, b) for k, b, _ in under.limits] == [("age", "max")]
    assert [(k, b) for k, b, _ in over.limits] == [("age", "min")]
    assert (under.action, over.action) == ("deny", "allow")
    # the deny of 不得超过 is the bound's wording, not what is done
    assert claim_of("单笔转账不得超过5万元").action == ""
    assert "¬成" in claim_of("未成年人不得购买酒类").subject
    assert "成" in claim_of("成年人可以购买酒类").subject
    assert "¬member" in claim_of("Non-members must not book rooms").subject


@pytest.mark.parametrize(
    ("a", "b"),
    [
        # a duty against a prohibition of the same action
        (
            "Always ask for photo ID before issuing a refund",
            "Never ask for photo ID before issuing a refund",
        ),
        ("退款前必须核实客户身份证", "退款前禁止核实客户身份证"),
        # a duty against a waiver of it
        ("退款前必须核实客户身份证", "退款前不需要核实客户身份证"),
        (
            "Agents must confirm the address before shipping",
            "Agents need not confirm the address before shipping",
        ),
    ],
)
def test_a_duty_conflicts_with_a_prohibition_or_a_waiver_of_it(a: str, b: str) -> None:
    [found] = conflicts(a, b)
    assert "requires" in found


@pytest.mark.parametrize(
    ("a", "b"),
    [
        # a waiver leaves the action allowed, and a duty does not forbid what is allowed
        ("You don't have to call the customer back", "You may call the customer back"),
        ("退款前必须核实客户身份证", "退款前可以核实客户身份证"),
        # a waiver and a prohibition both hold: the action is simply not done
        ("退款前不需要核实客户身份证", "退款前不要核实客户身份证"),
        # a duty bounded from below and a ceiling of the same quantity
        ("Orders must be at least 20 dollars", "Orders must not exceed 300 dollars"),
        ("每笔订单必须至少100元", "每笔订单不得超过5000元"),
        # the same ceiling, said as a duty and as a prohibition
        ("Refunds must not exceed 200 dollars", "Refunds never exceed 200 dollars"),
    ],
)
def test_duties_and_waivers_that_can_both_hold_do_not_conflict(a: str, b: str) -> None:
    assert conflicts(a, b) == []


def test_claims_read_duties_and_waivers() -> None:
    assert claim_of("Always ask for photo ID").action == "require"
    assert claim_of("退款前必须核实身份").action == "require"
    assert claim_of("退款前不需要核实身份").polarity == "exempt"
    assert claim_of("You don't have to call back").polarity == "exempt"
    # the must of a bound's deny is no duty
    assert claim_of("Refunds must not exceed 200 dollars").action == ""
    assert claim_of("Agents must never offer refunds").action == "deny"


@pytest.mark.parametrize(
    "forms",
    [
        ("call", "calls", "calling", "called"),
        ("recommend", "recommended", "recommending", "recommends"),
        ("share", "shared", "sharing", "shares"),
        ("exceed", "exceeds", "exceeded", "exceeding"),
        ("add", "added", "adds"),
        ("plan", "planned", "planning", "plans"),
        ("price", "prices", "pricing"),
    ],
)
def test_forms_of_one_english_word_are_one_word(forms: tuple[str, ...]) -> None:
    assert len({claim_of(f"never {word} it").subject for word in forms}) == 1
