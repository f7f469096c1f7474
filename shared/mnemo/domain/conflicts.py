"""Conflicting constraints that carry no key.

Two constraints conflict when they are about the same matter and cannot both hold:

- the same matter: their texts are close in meaning (a similarity the caller measures
  with its embedder, at or above a threshold) AND what they constrain is the same: the
  words left once the numbers, bounds and allow/deny markers are taken out agree (the
  same quantity, or the same action);
- cannot both hold: two different limits of the same kind (a percentage, an amount of
  money, a plain number) bounding in the same direction, or an allow and a deny.

"单笔转账不得超过5万元" and "单笔转账上限为2万元" conflict; "单笔转账不得超过5万元" and
"单日取现不得超过2万元" only look alike (transfers and withdrawals are different
quantities); "不得超过5万元" and "最多50000元" agree. The winner is the more trusted, then
the more specific (narrower scope, then more tags), then the more recent.

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
# bounds: a limit at most (max) or at least (min)
_MAX = re.compile(
    r"不超过|不得超过|不能超过|不可超过|最多|以内|以下|上限|封顶|最高|"
    r"\b(?:at\s+most|no\s+more\s+than|not\s+(?:to\s+)?exceed|up\s+to|under|below|"
    r"max(?:imum)?|limit(?:ed)?\s+to|cap(?:ped)?\s+at)\b",
    re.IGNORECASE,
)
_MIN = re.compile(
    r"不少于|不低于|至少|最少|最低|以上|下限|满(?=\d)|"
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
    r"岁|years?\s+old\b|天|days?\b|次|times\b)?",
    re.IGNORECASE,
)
_PERCENT_WORDS = re.compile(r"百分之([零〇一二两三四五六七八九十]+)")
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
    "次": "times",
    "times": "times",
}
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
_WORD = re.compile(r"[a-z]+|[\u4e00-\u9fff]")


def _stem(word: str) -> str:
    """A crude English stem (discounts -> discount), enough to compare what is constrained."""
    if len(word) > 3 and word.endswith("s") and not word.endswith("ss"):
        return word[:-1]
    return word


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

    polarity: str  # "deny", "allow", or "" when it says neither
    limits: tuple[tuple[str, str, Decimal], ...]  # (kind, bound, value): ("money", "max", 50000)
    subject: frozenset[str]  # the words left: what is constrained


def claim_of(text: str) -> Claim:
    normalized = _PERCENT_WORDS.sub(lambda m: f"{_small_cn_number(m.group(1))}%", text)
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
        limits.append((kind, bound, value.normalize()))
    polarity = "deny" if _DENY.search(normalized) else "allow" if _ALLOW.search(normalized) else ""
    rest = _NUMBER.sub(" ", normalized)
    for pattern in (_MAX, _MIN, _DENY, _ALLOW):  # bounds first: 不得超过 is one bound
        rest = pattern.sub(" ", rest)
    words = frozenset(_stem(w) for w in _WORD.findall(rest.casefold()) if w not in _STOP)
    return Claim(polarity, tuple(limits), words)


def _overlap(a: frozenset[str], b: frozenset[str]) -> float:
    if not a or not b:
        return 0.0
    return len(a & b) / len(a | b)


def same_matter(a: Claim, b: Claim, min_overlap: float = 0.6) -> bool:
    """Whether two claims constrain the same thing: their remaining words agree."""
    return _overlap(a.subject, b.subject) >= min_overlap


def incompatible(a: Claim, b: Claim) -> str | None:
    """Why two claims about the same matter cannot both hold, or None."""
    for kind, bound, value in a.limits:
        for kind_b, bound_b, value_b in b.limits:
            if kind == kind_b and bound == bound_b and value != value_b:
                return f"different {kind} limits ({value:f} and {value_b:f})"
    if {a.polarity, b.polarity} == {"allow", "deny"}:
        return "one allows what the other denies"
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
) -> list[ConflictDecision]:
    """Pairs of keyless constraints that contradict each other, each decided once, in a
    stable order. A memory that lost is not compared again (its winner stands for it)."""
    claims = {m.memory_id: claim_of(m.text()) for m in constraints}
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
