"""Conflicting constraints that carry no key.

Two constraints conflict when they are about the same matter and cannot both hold:

- the same matter: their texts are close in meaning (a similarity the caller measures
  with its embedder, at or above a threshold) AND what they constrain is the same: the
  words left once the numbers, bounds and allow/deny markers are taken out agree (the
  same quantity, or the same action, for the same people). They agree when they overlap
  enough and neither has a word the other lacks while lacking one of the other's:
  老年人 and 成年人, minors and adults name different groups. A word negated in one
  (未成年人, 未满18岁, 非会员, non-members) is another word than the same word plain in
  the other (成年人, 满18岁, 会员, members);
- cannot both hold: two different limits of the same kind (a percentage, an amount of
  money, a plain number) bounding in the same direction, or an allow and a deny, unless
  the allow and the deny hold on ranges of one quantity that do not meet (未满18岁的用户
  不能开户 and 满18岁的用户可以开户; up to $500 and over $500). A bare number (上限两万)
  is in the unit of the other's one limit (不超过5000元).

Numerals written in words (两万, 五千元, 三次, 一点五万) are read through the `numbers`
function the platform passes in (cn2an's); only a numeral followed by a unit or following
a bound goes through it, so the 一 of 一律 or the 千万 of 千万不要 stay words.

"单笔转账不得超过5万元" and "单笔转账上限为2万元" conflict; "单笔转账不得超过5万元" and
"单日取现不得超过2万元" only look alike (transfers and withdrawals are different
quantities); "不得超过5万元", "最多50000元" and "上限五万元" agree. The winner is the more
trusted, then the more specific (narrower scope, then more tags), then the more recent.

Pure: standard library only; the similarity comes in as a function.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from mnemo.domain.memory import Memory, Scope

__all__ = ["Claim", "ConflictDecision", "claim_of", "find_conflicts", "same_matter"]

# ---- what a constraint says -----------------------------------------------------------------

_DENY = re.compile(
    r"禁止|严禁|不得|不能|不可以?|不允许|不准|不要|切勿|"
    r"\b(?:must\s+not|mustn'?t|never|do\s+not|don'?t|may\s+not|cannot|can'?t|not\s+allowed|"
    r"prohibited|forbidden|is\s+not\s+permitted)\b",
    re.IGNORECASE,
)
_ALLOW = re.compile(r"允许|可以|准许|\b(?:may|allowed|permitted|can|is\s+fine)\b", re.IGNORECASE)
# a duty (must, 必须) and a waiver of one (need not, 不需要): a duty contradicts a deny of the
# same action and a waiver of it; a waiver is read before a deny ("don't have to" waives)
_REQUIRE = re.compile(
    r"必须|务必|一定要|总是|始终|\b(?:must|always|(?:is|are)\s+required\s+to|ha(?:s|ve)\s+to)\b",
    re.IGNORECASE,
)
_EXEMPT = re.compile(
    r"不需要|不必|无需|无须|没必要|"
    r"\b(?:need\s+not|needn'?t|(?:do|does)(?:\s+not|n'?t)\s+(?:need|have)\s+to|no\s+need\s+to|"
    r"(?:is|are)\s+not\s+required\s+to|(?:is|are)\s+not\s+(?:needed|necessary|required)|"
    r"(?:isn'?t|aren'?t)\s+(?:needed|necessary|required)|unnecessary|optional)\b",
    re.IGNORECASE,
)
# pairs of what two claims do to one action that cannot both hold
_CONTRADICTING = ({"allow", "deny"}, {"require", "deny"}, {"require", "exempt"})
# bounds: a limit at most (max) or at least (min)
_MAX = re.compile(
    r"不超过|不得超过|不能超过|不可超过|最多|以内|以下|上限|限额|封顶|最高|(?:未满|不满|不足)(?=\d)|"
    r"\b(?:at\s+most|no\s+more\s+than|not\s+(?:to\s+)?exceed|up\s+to|under|below|within|"
    r"max(?:imum)?|limit(?:ed)?\s+to|cap(?:ped)?\s+at)\b",
    re.IGNORECASE,
)
_MIN = re.compile(
    r"不少于|不低于|至少|最少|最低|以上|下限|(?<![未不])满(?=\d)|"
    r"\b(?:at\s+least|no\s+less\s+than|min(?:imum)?|over|above)\b",
    re.IGNORECASE,
)
_CN_DIGITS = {
    "零": 0,
    "〇": 0,
    "一": 1,
    "二": 2,
    "两": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
}
_NUMBER = re.compile(
    r"(?P<cur>[$€£¥])?\s*(?P<num>\d[\d,]*(?:\.\d+)?)\s*(?P<mult>[kK]\b|万|千|百万|亿)?\s*"
    r"(?P<unit>%|％|percent\b|元|块|人民币|美元|dollars?\b|usd\b|rmb\b|euros?\b|pounds?\b|"
    r"岁|years?\s+old\b|天|days?\b|小时|个小时|hours?\b|hrs?\b|周|个星期|星期|weeks?\b|"
    r"次|times\b|折)?",
    re.IGNORECASE,
)
_PERCENT_WORDS = re.compile(r"百分之([零〇一二两三四五六七八九十]+)")
# a numeral in words (两万, 五千, 三, 一点五万), not one read as an ordinal (第一) or one that
# continues digits (the 万 of 2万, which _NUMBER reads)
_CN_NUMERALS = "零〇一二两三四五六七八九十百千万亿"
_CN_NUMERAL = re.compile(rf"(?<![\d.第])[{_CN_NUMERALS}][{_CN_NUMERALS}点]*")
_CN_DIGIT = re.compile(r"[零〇一二两三四五六七八九十]")
# ... read as a number only when a unit follows it (五千元, 三次, not 一次性) or a bound comes
# right before it (上限两万, 最多三)
_UNIT_AFTER = re.compile(r"\s*(?:元|块|人民币|美元|岁|天|个?小时|周|个?星期|次(?!性)|%|％|折)")
_BOUND_BEFORE = re.compile(
    rf"(?:{_MAX.pattern}|{_MIN.pattern}|满)\s*(?:为|是|[:：])?\s*$", re.IGNORECASE
)
_PLAIN_NUMBER = re.compile(r"\d+(?:\.\d+)?")
_MULTIPLIERS = {"k": 1_000, "千": 1_000, "万": 10_000, "百万": 1_000_000, "亿": 100_000_000}
_UNIT_KIND = {
    "%": "percent",
    "％": "percent",
    "percent": "percent",
    "元": "money",
    "块": "money",
    "人民币": "money",
    "美元": "money",
    "dollar": "money",
    "dollars": "money",
    "usd": "money",
    "rmb": "money",
    "euro": "money",
    "euros": "money",
    "pound": "money",
    "pounds": "money",
    "岁": "age",
    "year old": "age",
    "years old": "age",
    "天": "days",
    "day": "days",
    "days": "days",
    # hours and weeks count in days (24 hours is 1 day, 2 weeks 14 days): "reply within 24
    # hours" and "reply within 2 days" are two limits of one quantity
    "小时": "hours",
    "个小时": "hours",
    "hour": "hours",
    "hours": "hours",
    "hr": "hours",
    "hrs": "hours",
    "周": "weeks",
    "星期": "weeks",
    "个星期": "weeks",
    "week": "weeks",
    "weeks": "weeks",
    "次": "times",
    "times": "times",
    # 八折 (80% of the price), 八五折 or 8.5折 (85%): a discount, read as the share paid
    "折": "discount",
}
_IN_DAYS = {"hours": Decimal(1) / Decimal(24), "weeks": Decimal(7)}
_STOP = frozenset(
    {
        "the",
        "a",
        "an",
        "to",
        "of",
        "for",
        "is",
        "are",
        "be",
        "any",
        "all",
        "and",
        "or",
        "in",
        "on",
        "at",
        "by",
        "with",
        "per",
        "each",
        "must",
        "should",
        "shall",
        "will",
        # verbs that only carry their object: "never offer discounts above 10%" is about
        # the discounts that "discounts above 10% are allowed" allows
        "offer",
        "give",
        # when, relative to another act: "verify identity before changing the address"
        # is about the verification that "verification is not needed to change it" waives
        "before",
        "when",
        "provide",
        "grant",
        "每",
        "各",
        "必",
        "须",
        "的",
        "了",
        "对",
        "向",
        "给",
        "在",
        "为",
    }
)
# a word, or a negated one: non-members, 未成(年人), 未满(18岁), 非会(员), 无(卡)
_WORD = re.compile(
    r"\bnon(?:-|\s+)(?P<en>[a-z]+)|[a-z]+|"
    r"[未非无不](?P<cjk>[\u4e00-\u9fff])|[\u4e00-\u9fff]"
)
_NEGATED = "¬"  # marks a negated word in a claim's subject


def _stem(word: str) -> str:
    """A crude English stem, enough to compare what is constrained: discounts, calling,
    recommended and shared as discount, call, recommend and shar (a final e goes, so share
    is shar too); exceeds and exceed as exceed."""
    if not word.isascii():
        return word
    # the act named after its verb: verification, notification -> verify, notify;
    # confirmation, cancellation -> confirm, cancel
    if len(word) > 8 and word.endswith("ication"):
        return word[: -len("ication")] + "y"
    if len(word) > 7 and word.endswith("ation"):
        base = word[: -len("ation")]
        return base[:-1] if base[-1] == base[-2] else base
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        word = word[:-1]
    if not word.endswith("eed"):
        for suffix in ("ing", "ed"):
            base = word[: -len(suffix)]
            if word.endswith(suffix) and len(base) >= 3:
                if base[-1] == base[-2] and base[-1] not in "lszd":
                    base = base[:-1]  # planned -> plan, but calling -> call, added -> add
                return base
    if len(word) > 4 and word.endswith("e"):
        word = word[:-1]
    return word


# characters that say the same in a limit's wording: 每天 and 每日, 单日 and 单天
_SAME_CHARACTER = {"天": "日"}


def _words(text: str) -> frozenset[str]:
    """The content words of `text` (casefolded, stemmed), a negated one as ¬word."""
    words: set[str] = set()
    for m in _WORD.finditer(text.casefold()):
        negated = m.group("en") or m.group("cjk")
        word = negated or m.group()
        word = _SAME_CHARACTER.get(word, word)
        if word in _STOP:
            continue
        words.add(_NEGATED + _stem(word) if negated else _stem(word))
    return frozenset(words)


def _written_as_digits(numeral: str, numbers: Callable[[str], str]) -> str | None:
    """A numeral in words as digits (两万 -> 20000, 一点五万 -> 1.5万), or None."""
    numeral = numeral.replace("两", "二")  # cn2an reads 两 only in some places
    head, multiplier = numeral[:-1], numeral[-1]
    if "点" in head and multiplier in "千万亿":  # 一点五万: cn2an reads 一点五, _NUMBER the 万
        written = numbers(head)
        return written + multiplier if _PLAIN_NUMBER.fullmatch(written) else None
    written = numbers(numeral)
    return written if _PLAIN_NUMBER.fullmatch(written) else None


def _arabic(text: str, numbers: Callable[[str], str]) -> str:
    """`text` with the numerals in words that state a quantity written as digits."""
    out: list[str] = []
    end = 0
    for m in _CN_NUMERAL.finditer(text):
        if not _CN_DIGIT.search(m.group()):
            continue  # 万, 千: a multiplier alone
        if not (_UNIT_AFTER.match(text, m.end()) or _BOUND_BEFORE.search(text, 0, m.start())):
            continue  # a word: 一律, 千万不要, 万一
        digits = _written_as_digits(m.group(), numbers)
        if digits is not None:
            out += [text[end : m.start()], digits]
            end = m.end()
    return "".join(out) + text[end:]


def _small_cn_number(text: str) -> int:
    """一 to 九十九 in Chinese numerals (enough for percentages said in words)."""
    if "十" in text:
        tens, _, ones = text.partition("十")
        return (_CN_DIGITS.get(tens, 1) if tens else 1) * 10 + (_CN_DIGITS.get(ones, 0))
    return _CN_DIGITS.get(text, 0)


@dataclass(frozen=True, slots=True)
class Claim:
    """What one constraint says: allow or deny, the limits it sets, and the rest of its
    words (what it is about)."""

    # "deny", "allow", "require" (a duty), "exempt" (a duty waived), or "" for none of them
    polarity: str
    limits: tuple[tuple[str, str, Decimal], ...]  # (kind, bound, value): ("money", "max", 50000)
    subject: frozenset[str]  # the words left: what is constrained (¬word: a negated word)
    # the allow or deny once the bounds' own words are out: "deny" for 未满18岁的用户不能开户
    # (the deny holds under the bound), "" for 不得超过5万元 (the deny is the bound's wording)
    action: str = ""


def claim_of(text: str, numbers: Callable[[str], str] | None = None) -> Claim:
    """What `text` says; `numbers` writes Chinese numerals as digits (五千 -> 5000; the
    platform passes cn2an's), without it only 百分之… is read."""
    normalized = _PERCENT_WORDS.sub(lambda m: f"{_small_cn_number(m.group(1))}%", text)
    if numbers is not None:
        normalized = _arabic(normalized, numbers)
    bound = "max" if _MAX.search(normalized) else "min" if _MIN.search(normalized) else ""
    limits: list[tuple[str, str, Decimal]] = []
    for m in _NUMBER.finditer(normalized):
        try:
            value = Decimal(m.group("num").replace(",", ""))
        except InvalidOperation:
            continue
        mult = (m.group("mult") or "").lower()
        value *= _MULTIPLIERS.get(mult, 1)
        unit = (m.group("unit") or "").lower()
        unit = re.sub(r"\s+", " ", unit)
        kind = "money" if m.group("cur") else _UNIT_KIND.get(unit, "number")
        if kind == "discount" and value < 10:
            value *= 10  # 8折 and 8.5折 as 80 and 85, as 八五折 reads 85
        if kind in _IN_DAYS:
            value, kind = value * _IN_DAYS[kind], "days"
        limits.append((kind, bound, value.normalize()))
    polarity = _polarity(normalized)
    action = _polarity(_MIN.sub(" ", _MAX.sub(" ", normalized)))
    if action == "require" and polarity != "require":
        action = ""  # the must of "must not exceed" is the bound's deny, not a duty
    rest = _NUMBER.sub(" ", normalized)
    for pattern in (_MAX, _MIN, _EXEMPT, _DENY, _ALLOW, _REQUIRE):  # bounds first: 不得超过
        rest = pattern.sub(" ", rest)
    return Claim(polarity, tuple(limits), _words(rest), action)


def _polarity(text: str) -> str:
    for polarity, pattern in (
        ("exempt", _EXEMPT),
        ("deny", _DENY),
        ("allow", _ALLOW),
        ("require", _REQUIRE),
    ):
        if pattern.search(text):
            return polarity
    return ""


def _overlap(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def same_matter(a: Claim, b: Claim, min_overlap: float = 0.6) -> bool:
    """Whether two claims constrain the same thing: their remaining words agree. When
    each has a word the other lacks (老年人 and 成年人; 未成年人, whose 成 is negated, and
    成年人), they name different groups, quantities or actions however much else they
    share. A narrower claim that adds words of its own ("for VIP members") is an exception
    the general rule can stand beside, unless the words they share are most of both: a
    reported conflict drops one of them from the context, so a doubt keeps both."""
    if a.subject - b.subject and b.subject - a.subject:
        return False
    return _overlap(a.subject, b.subject) >= min_overlap


def _same_kind(kind: str, kind_b: str, a: Claim, b: Claim) -> bool:
    """Whether two limits count in the same unit: the same kind, or a bare number (上限两万)
    against the other claim's one limit (不超过5000元)."""
    if kind == kind_b:
        return True
    return (kind == "number" and len(b.limits) == 1) or (kind_b == "number" and len(a.limits) == 1)


def _apart(a: Claim, b: Claim) -> bool:
    """Whether an allow and a deny hold on ranges of one quantity that do not meet: 未满18岁
    (under 18) and 满18岁 (18 or more), up to $500 and over $500."""
    if {a.action, b.action} not in _CONTRADICTING:
        return False  # a deny that is a bound's wording (不得超过) bounds what is allowed
    for kind, bound, value in a.limits:
        for kind_b, bound_b, value_b in b.limits:
            if not _same_kind(kind, kind_b, a, b):
                continue
            if (bound, bound_b) == ("max", "min") and value_b >= value:
                return True
            if (bound, bound_b) == ("min", "max") and value >= value_b:
                return True
    return False


def incompatible(a: Claim, b: Claim) -> str | None:
    """Why two claims about the same matter cannot both hold, or None."""
    for kind, bound, value in a.limits:
        for kind_b, bound_b, value_b in b.limits:
            if _same_kind(kind, kind_b, a, b) and bound == bound_b and value != value_b:
                named = kind if kind != "number" else kind_b
                return f"different {named} limits ({value:f} and {value_b:f})"
    if {a.polarity, b.polarity} == {"allow", "deny"} and not _apart(a, b):
        return "one allows what the other denies"
    # a duty against a deny or a waiver, read without the bounds' own words: "must be at
    # least 20" and "must not exceed 300" bound one quantity from both sides
    actions = {a.action, b.action}
    if actions in ({"require", "deny"}, {"require", "exempt"}) and not _apart(a, b):
        other = "denies" if "deny" in actions else "waives"
        return f"one requires what the other {other}"
    return None


# ---- deciding -------------------------------------------------------------------------------

_SCOPE_RANK = {Scope.SESSION: 3, Scope.USER: 2, Scope.AGENT: 1, Scope.TENANT: 0}


@dataclass(frozen=True, slots=True)
class ConflictDecision:
    kept: Memory
    dropped: Memory
    why: str  # what makes them incompatible
    rule: str  # what decided: trust, specificity or recency
    similarity: float


def _decide(a: Memory, b: Memory) -> tuple[Memory, Memory, str]:
    """(kept, dropped, the rule that decided): trust, then specificity, then recency."""
    if a.provenance.trust != b.provenance.trust:
        kept = a if a.provenance.trust > b.provenance.trust else b
        return kept, b if kept is a else a, "trust"
    spec_a = (_SCOPE_RANK.get(a.scope, 0), len(a.tags))
    spec_b = (_SCOPE_RANK.get(b.scope, 0), len(b.tags))
    if spec_a != spec_b:
        kept = a if spec_a > spec_b else b
        return kept, b if kept is a else a, "specificity"
    kept = a if (a.created_at, a.memory_id) > (b.created_at, b.memory_id) else b
    return kept, b if kept is a else a, "recency"


def find_conflicts(
    constraints: Sequence[Memory],
    similarity: Callable[[Memory, Memory], float],
    threshold: float,
    numbers: Callable[[str], str] | None = None,
) -> list[ConflictDecision]:
    """Pairs of keyless constraints that contradict each other, each decided once, in a
    stable order. A memory that lost is not compared again (its winner stands for it).
    `numbers` writes Chinese numerals as digits (claim_of)."""
    claims = {m.memory_id: claim_of(m.text(), numbers) for m in constraints}
    ordered = sorted(constraints, key=lambda m: m.memory_id)
    dropped: set[str] = set()
    decisions: list[ConflictDecision] = []
    for i, a in enumerate(ordered):
        for b in ordered[i + 1 :]:
            if a.memory_id in dropped or b.memory_id in dropped:
                continue
            ca, cb = claims[a.memory_id], claims[b.memory_id]
            why = incompatible(ca, cb)
            if why is None or not same_matter(ca, cb):
                continue
            score = similarity(a, b)
            if score < threshold:
                continue
            kept, lost, rule = _decide(a, b)
            dropped.add(lost.memory_id)
            decisions.append(ConflictDecision(kept, lost, why, rule, round(score, 4)))
    return decisions
