"""History compression: typed facts read from conversation turns by rules.

A customer-service conversation runs to hundreds of turns, most of them small talk; what
an agent needs from it later fits in a few lines: `[Complaint] order=20240511-3 delay=3d
compensation=5元`. The history rules (mnemo/rules/history.yaml, operator-extendable) say
which turns carry such facts and which fields their patterns capture. No model reads the
turns: the patterns run on the linear-time engine (mnemo.domain.patterns), Chinese
numerals are written as digits by the `numbers` function the platform passes in.

A fact is a memory of its own (type `history`, tags `fact` and `fact:<kind>`, and one
`from:<memory id>` tag per turn it was read from). Its key names the matter it is about,
`fact.<kind>.<identity>` (the identity is the kind's identity field, an order number or a
preference's topic), so a later turn about the same matter supersedes it with the fields
merged: a field said again takes the newer value, the others stay. A turn that names no
identity continues the matter last spoken of: the most recent fact of the same kind, else
the most recent fact of any kind that holds the identity field (an agent's "we refunded
50元" after a complaint about order 20240511-3 is the refund of that order).

This module only reads turns and folds facts; registration (mnemo.handlers.registration)
registers what it returns, so redelivery, replay and rebuild treat facts as any memory.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mnemo.domain.memory import Memory, MemoryDraft, MemoryStatus, MemoryType, Provenance
from mnemo.domain.patterns import UnsupportedPattern, linear_pattern

__all__ = [
    "FACT_TAG",
    "FACT_TAG_PREFIX",
    "FROM_TAG_PREFIX",
    "MAX_SOURCES",
    "FactDraft",
    "FactKind",
    "FactRule",
    "FactRules",
    "FactUpdate",
    "FactView",
    "fact_sources",
    "is_fact",
    "normalize_days",
    "normalize_money",
    "render",
]

FACT_TAG = "fact"
FACT_TAG_PREFIX = "fact:"
FROM_TAG_PREFIX = "from:"
KEY_PREFIX = "fact."
# a fact links at most this many turns (the most recent ones): a memory holds 32 tags,
# and the fact's own three (fact, fact:<kind>, its episode) come first
MAX_SOURCES = 28
_MAX_FIELD_CHARS = 120
_NAME = r"^[a-z][a-z0-9_]{0,31}$"
_SLUG_JUNK = re.compile(r"[^\w.-]+")
_SPACES = re.compile(r"\s+")
_TRIM = "。.!！?？,，;；、:： "

Normalizer = Literal["days", "money", "number", "upper", "lower"]

# what the money normaliser reads: an amount, and a currency before or after it
_MONEY = re.compile(
    r"(?P<pre>[¥￥$€£]|RMB|CNY|USD|EUR)?\s*(?P<amount>\d+(?:\.\d+)?)\s*"
    r"(?P<post>元|块钱|块|人民币|rmb|yuan|dollars?|usd|euros?|eur)?",
    re.IGNORECASE,
)
_CURRENCY = {
    "¥": "元",
    "￥": "元",
    "rmb": "元",
    "cny": "元",
    "元": "元",
    "块": "元",
    "块钱": "元",
    "人民币": "元",
    "yuan": "元",
    "$": "$",
    "usd": "$",
    "dollar": "$",
    "dollars": "$",
    "€": "€",
    "eur": "€",
    "euro": "€",
    "euros": "€",
    "£": "£",
}
_DAYS = re.compile(
    r"(?P<n>\d+(?:\.\d+)?|an?|one|two|three|four|five|six|seven|eight|nine|ten|[一两二三四五六七八九十])\s*"
    r"(?P<unit>天|日|周|星期|个星期|小时|days?|weeks?|hours?)?",
    re.IGNORECASE,
)
_WORDS = {
    "a": 1,
    "an": 1,
    "one": 1,
    "two": 2,
    "three": 3,
    "four": 4,
    "five": 5,
    "six": 6,
    "seven": 7,
    "eight": 8,
    "nine": 9,
    "ten": 10,
    "一": 1,
    "两": 2,
    "二": 2,
    "三": 3,
    "四": 4,
    "五": 5,
    "六": 6,
    "七": 7,
    "八": 8,
    "九": 9,
    "十": 10,
}


def _number_text(value: float) -> str:
    return str(int(value)) if value == int(value) else f"{value:g}"


def normalize_days(value: str) -> str:
    """A delay or a wait as days or hours: 3天 -> 3d, two weeks -> 14d, 36小时 -> 36h."""
    match = _DAYS.search(value)
    if match is None:
        return value
    raw = match.group("n").lower()
    number = float(_WORDS[raw]) if raw in _WORDS else float(raw)
    unit = (match.group("unit") or "天").lower()
    if unit in ("小时", "hour", "hours"):
        return f"{_number_text(number)}h"
    if unit in ("周", "星期", "个星期", "week", "weeks"):
        number *= 7
    return f"{_number_text(number)}d"


def normalize_money(value: str) -> str:
    """An amount with its currency: 5块 -> 5元, ¥12.5 -> 12.5元, 20 dollars -> $20."""
    match = _MONEY.search(value)
    if match is None:
        return value
    amount = _number_text(float(match.group("amount")))
    mark = (match.group("pre") or match.group("post") or "").lower()
    currency = _CURRENCY.get(mark, "")
    if currency == "元" or not currency:
        return f"{amount}{currency}"
    return f"{currency}{amount}"


class FactKind(BaseModel):
    """A kind of fact: its label, its fields in rendering order, and the field that names
    the matter (an order number, a preference's topic; none: one matter per subject)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    label: str = Field(min_length=1, max_length=32)
    fields: tuple[str, ...] = Field(min_length=1, max_length=16)
    identity: str | None = None
    weight: float = Field(default=0.6, ge=0.0, le=0.99)

    @field_validator("fields")
    @classmethod
    def _names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not re.fullmatch(_NAME, name):
                raise ValueError(f"field {name!r} is not a lower-case name (a-z, 0-9, _)")
        if len(set(value)) != len(value):
            raise ValueError("a field is named twice")
        return value

    @model_validator(mode="after")
    def _identity_is_a_field(self) -> FactKind:
        if self.identity is not None and self.identity not in self.fields:
            raise ValueError(f"identity {self.identity!r} is not one of the fields")
        return self


class FactRule(BaseModel):
    """A pattern whose named groups are fields of a kind of fact."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")
    description: str = ""
    kind: str = Field(pattern=_NAME)
    pattern: str = Field(min_length=1, max_length=2_000)
    values: dict[str, str] = Field(
        default_factory=dict, description="fields the rule sets to a constant when it matches"
    )
    normalize: dict[str, Normalizer] = Field(default_factory=dict)
    speakers: tuple[str, ...] = Field(
        default=(), description="only turns of these speakers (any when empty)"
    )
    questions: bool = Field(default=False, description="a question yields a fact too")
    updates_only: bool = Field(
        default=False, description="only adds to a matter already held; never opens one"
    )

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            linear_pattern(value, ignore_case=True)
        except UnsupportedPattern as exc:
            raise ValueError(str(exc)) from None
        return value

    def groups(self) -> set[str]:
        return set(linear_pattern(self.pattern, ignore_case=True).groupindex)


@dataclass(frozen=True, slots=True)
class FactUpdate:
    """What one rule read in one turn: fields of a kind of fact."""

    rule_id: str
    kind: str
    fields: dict[str, str]
    updates_only: bool = False


@dataclass(frozen=True, slots=True)
class FactDraft:
    """A fact to register: the rule that opened or last changed it, and its memory."""

    rule_id: str
    draft: MemoryDraft


class FactView(Protocol):
    """The subject's facts as the folding sees them (registration's read model)."""

    def current(self, key: str) -> Memory | None: ...

    def facts(self) -> Sequence[Memory]: ...


# A question asks about a matter rather than stating it: "我的订单20240511-3到哪了？"
_QUESTION = re.compile(
    r"[?？]\s*$|吗\s*[?？。]?\s*$|是否|什么时候|为什么|怎么办|怎么样|多少|能不能|可不可以|是不是|有没有"
    r"|^\s*(?:what|where|when|why|how|which|is|are|can|could|would|will|do|does|did)\b",
    re.IGNORECASE,
)
# a question that asks the agent to do something states a wish: "could you reach me by
# email", "麻烦以后用短信联系我好吗"
_REQUEST = re.compile(r"请|麻烦|帮我|\b(?:can|could|would|will)\s+you\b|\bplease\b", re.IGNORECASE)
# "如果晚了三天会赔偿吗", "if it were three days late": a supposition states nothing
_SUPPOSED = re.compile(r"如果|假如|假设|要是|万一|\bif\b|\bsuppose\b|\bwhat\s+if\b", re.IGNORECASE)
# "不是订单20240511-3", "not order 20240511-3" (just before what a rule heard), "订单
# 20240511-3不要退款了", "I don't want a refund" (in or just before it): no fact is stated
_DENIED_BEFORE = re.compile(r"不是|并没有|没有下|\bnot\b|\bnever\b|\bno\b", re.IGNORECASE)
_DECLINED = re.compile(
    r"不要|不用|不需要|不想|不打算|\bdon'?t\s+(?:want|need)\b|\bdo\s+not\s+(?:want|need)\b"
    r"|\bno\s+longer\s+(?:want|need)\b",
    re.IGNORECASE,
)


class FactRules:
    """The kinds and rules of a history rule file, checked against each other."""

    def __init__(
        self,
        kinds: Mapping[str, FactKind],
        rules: Sequence[FactRule],
        *,
        numbers: Callable[[str], str] | None = None,
    ) -> None:
        ids = [r.id for r in rules]
        if len(ids) != len(set(ids)):
            raise ValueError("rule ids must be unique")
        for name in kinds:
            if not re.fullmatch(_NAME, name):
                raise ValueError(f"kind {name!r} is not a lower-case name (a-z, 0-9, _)")
        for rule in rules:
            self.check(rule, kinds)
        self.kinds = dict(kinds)
        self.rules = tuple(rules)
        self._numbers = numbers
        self._compiled = [(r, linear_pattern(r.pattern, ignore_case=True)) for r in rules]

    @staticmethod
    def check(rule: FactRule, kinds: Mapping[str, FactKind]) -> None:
        """Why a rule does not fit the kinds (ValueError), if it does not."""
        kind = kinds.get(rule.kind)
        if kind is None:
            raise ValueError(f"rule {rule.id}: kind {rule.kind!r} is not declared")
        named = rule.groups() | set(rule.values)
        unknown = named - set(kind.fields)
        if unknown:
            raise ValueError(
                f"rule {rule.id}: {sorted(unknown)} are not fields of {rule.kind} "
                f"({', '.join(kind.fields)})"
            )
        if not named:
            raise ValueError(f"rule {rule.id}: captures no field and sets none")
        stray = set(rule.normalize) - set(kind.fields)
        if stray:
            raise ValueError(f"rule {rule.id}: normalizes {sorted(stray)}, not fields")

    def __bool__(self) -> bool:
        return bool(self.rules)

    # ---- reading a turn -------------------------------------------------------------------

    def read(self, text: str, speaker: str | None = None) -> list[FactUpdate]:
        """The fields each rule reads in a turn, in rule order (one update per rule)."""
        asks = bool(_QUESTION.search(text)) and not _REQUEST.search(text)
        supposes = bool(_SUPPOSED.search(text))
        who = (speaker or "").casefold()
        updates: list[FactUpdate] = []
        for rule, pattern in self._compiled:
            if rule.speakers and who not in {s.casefold() for s in rule.speakers}:
                continue
            if supposes or (asks and not rule.questions):
                continue
            hit = pattern.search(text)
            if hit is None:
                continue
            if _DENIED_BEFORE.search(text[max(0, hit.start() - 8) : hit.start()]):
                continue
            if _DECLINED.search(text[max(0, hit.start() - 16) : hit.end()]):
                continue
            fields = dict(rule.values)
            for name, raw in hit.groupdict().items():
                value = self._normalized(rule, name, raw or "")
                if value:
                    fields[name] = value
            kind = self.kinds[rule.kind]
            if not any(f != kind.identity for f in fields) and not rule.values:
                continue  # an identity alone (an order number said in passing) is no fact
            updates.append(FactUpdate(rule.id, rule.kind, fields, rule.updates_only))
        return updates

    def _normalized(self, rule: FactRule, name: str, raw: str) -> str:
        value = _SPACES.sub(" ", raw).strip().strip(_TRIM).strip()
        if "⟦" in value:
            return value  # a sealed value's placeholder is kept exactly as it is
        step = rule.normalize.get(name)
        if step is not None and self._numbers is not None and step in ("days", "money", "number"):
            value = self._numbers(value)
        if step == "days":
            value = normalize_days(value)
        elif step == "money":
            value = normalize_money(value)
        elif step == "upper":
            value = value.upper()
        elif step == "lower":
            value = value.lower()
        return value[:_MAX_FIELD_CHARS]

    # ---- folding updates into facts -------------------------------------------------------

    def fold(
        self,
        updates: Sequence[FactUpdate],
        view: FactView,
        *,
        turn_id: str,
        episode: str | None,
        timezone: str | None,
    ) -> list[FactDraft]:
        """The facts a turn's updates open or change, as drafts to register (at most one
        per matter): each merges the fields of the fact it supersedes and links the turn."""
        pending: dict[str, tuple[str, dict[str, str], tuple[str, ...]]] = {}
        order: list[str] = []
        spoken: dict[str, str] = {}  # identity field -> the value this turn names
        for update in updates:
            kind = self.kinds[update.kind]
            if kind.identity is not None and kind.identity in update.fields:
                spoken.setdefault(kind.identity, update.fields[kind.identity])
        for update in updates:
            kind = self.kinds[update.kind]
            fields = dict(update.fields)
            if kind.identity is not None and kind.identity not in fields:
                matter = spoken.get(kind.identity) or _last_matter(view, update.kind, kind.identity)
                if matter is not None:
                    fields[kind.identity] = matter
            key = _key(update.kind, fields.get(kind.identity) if kind.identity else None)
            if key in pending:
                rule_id, merged, sources = pending[key]
                pending[key] = (update.rule_id, {**merged, **fields}, sources)
                continue
            held = view.current(key)
            if held is None and update.updates_only:
                continue
            if turn_id in fact_sources(held):
                continue  # this turn was read into the fact already (a re-import)
            merged = {**_fields_of(held), **fields}
            sources = fact_sources(held) if held is not None else ()
            pending[key] = (update.rule_id, merged, sources)
            order.append(key)
        drafts: list[FactDraft] = []
        for key in order:
            rule_id, merged, sources = pending[key]
            kind_name = key.split(".")[1]
            kind = self.kinds[kind_name]
            linked = (*tuple(s for s in sources if s != turn_id), turn_id)
            linked = linked[-MAX_SOURCES:]
            tags = [FACT_TAG, FACT_TAG_PREFIX + kind_name]
            if episode is not None:
                tags.append(episode)
            tags += [FROM_TAG_PREFIX + s for s in linked]
            drafts.append(
                FactDraft(
                    rule_id,
                    MemoryDraft(
                        type=MemoryType.HISTORY,
                        key=key,
                        value=json.dumps(merged, ensure_ascii=False, sort_keys=True),
                        content=render(kind, merged),
                        tags=tuple(tags),
                        timezone=timezone,
                        semantic_weight=kind.weight,
                        provenance=Provenance(source_id=f"history-rule:{rule_id}"),
                    ),
                )
            )
        return drafts


def render(kind: FactKind, fields: Mapping[str, str]) -> str:
    """A fact's line: `[Complaint] order=20240511-3 delay=3d compensation=5元`, its fields
    in the kind's order (a field the kind no longer declares is left out)."""
    parts = [f"{name}={fields[name]}" for name in kind.fields if fields.get(name)]
    return f"[{kind.label}] " + " ".join(parts)


def is_fact(memory: Memory) -> bool:
    return memory.type is MemoryType.HISTORY and FACT_TAG in memory.tags


def fact_sources(memory: Memory | None) -> tuple[str, ...]:
    """The turns a fact was read from, oldest first (their memory ids)."""
    if memory is None:
        return ()
    linked = [t[len(FROM_TAG_PREFIX) :] for t in memory.tags if t.startswith(FROM_TAG_PREFIX)]
    # tags are kept sorted; memory ids are time-ordered, so sorting restores the order
    return tuple(sorted(linked))


def _fields_of(memory: Memory | None) -> dict[str, str]:
    if memory is None or not memory.value:
        return {}
    try:
        data = json.loads(memory.value)
    except ValueError:
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): str(v) for k, v in data.items()}


def _key(kind: str, identity: str | None) -> str:
    if not identity:
        return f"{KEY_PREFIX}{kind}"
    slug = _SLUG_JUNK.sub("_", identity.strip().lower()).strip("_.-")
    return f"{KEY_PREFIX}{kind}.{slug}"[:64].rstrip("_.-")


def _last_matter(view: FactView, kind: str, identity: str) -> str | None:
    """The identity of the matter last spoken of: the newest fact of this kind that has
    one, else the newest fact of any kind that holds the identity field."""
    live = [m for m in view.facts() if m.status is MemoryStatus.ACTIVE and is_fact(m) and m.key]
    live.sort(key=lambda m: (m.created_at, m.memory_id), reverse=True)
    for same_kind in (True, False):
        for memory in live:
            if same_kind != (FACT_TAG_PREFIX + kind in memory.tags):
                continue
            value = _fields_of(memory).get(identity)
            if value:
                return value
    return None
