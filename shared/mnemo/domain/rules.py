"""Registration rules: regex triggers and example utterances whose values become typed
key/value memories.

Rules come from YAML (see mnemo/rules/default.yaml); this module only checks and applies
them. A rule triggers on its pattern, or, when no pattern does, on being close to its
examples (the platform measures that with the embedder and passes the ranking in); its
slot patterns then extract the value. Corrections, negations and temporary intents are
rule kinds of their own. An utterance that yields nothing says why (a `Reason`).
"""

from __future__ import annotations

import re
import string
import unicodedata
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from enum import StrEnum
from typing import Annotated, Literal, Protocol
from zoneinfo import ZoneInfo

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mnemo.domain.history import FactRules
from mnemo.domain.memory import Memory, MemoryDraft, MemoryType, Provenance, Scope
from mnemo.domain.patterns import (
    LinearPattern,
    PatternMatch,
    UnsupportedPattern,
    linear_pattern,
)
from mnemo.domain.text import query_terms
from mnemo.domain.timeexpr import zone_name_error

__all__ = [
    "ExampleSelector",
    "NoExamples",
    "Reading",
    "Reason",
    "RegistrationRule",
    "RuleKind",
    "RuleMatch",
    "RuleSet",
    "StreamView",
    "end_of_local_day",
    "normalize_size",
    "parse_duration",
    "to_local",
    "ttl_from_text",
    "zone_of",
]

_DURATION = re.compile(r"^(\d+)([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_OFFSET = re.compile(r"^([+-])(\d{2}):?(\d{2})$")


def parse_duration(text: str) -> int:
    """Seconds in a duration such as 30m, 24h, 7d."""
    match = _DURATION.fullmatch(text.strip())
    if not match:
        raise ValueError(f"duration {text!r} is not like 30m, 24h or 7d")
    return int(match.group(1)) * _UNITS[match.group(2)]


def zone_of(name: str | None) -> ZoneInfo | None:
    """The tzinfo for a zone name; None means: use the offset the event carried."""
    if name is None:
        return None
    if (error := zone_name_error(name)) is not None:
        raise ValueError(error)
    if _OFFSET.fullmatch(name):
        return None
    return ZoneInfo(name)


def to_local(instant: datetime, zone_name: str | None) -> datetime:
    """An instant seen on the user's wall clock: in their zone, else at the offset the
    event carried."""
    zone = zone_of(zone_name)
    if zone is not None:
        return instant.astimezone(zone)
    if zone_name is not None:
        match = _OFFSET.fullmatch(zone_name)
        assert match is not None
        sign = 1 if match.group(1) == "+" else -1
        delta = timedelta(hours=int(match.group(2)), minutes=int(match.group(3)))
        return instant.astimezone(timezone(sign * delta))
    return instant


def end_of_local_day(instant: datetime, zone_name: str | None) -> datetime:
    """The next local midnight after `instant`, on the user's calendar."""
    local = to_local(instant, zone_name)
    # wall-clock arithmetic in the zone: a DST change during the day is honoured
    return (local + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)


def end_of_local_week(instant: datetime, zone_name: str | None) -> datetime:
    """The local midnight that ends the user's week (Monday to Sunday) holding `instant`:
    what "this week" and "this weekend" leave of it."""
    local = to_local(instant, zone_name)
    days = 7 - local.weekday()
    return (local + timedelta(days=days)).replace(hour=0, minute=0, second=0, microsecond=0)


def end_of_local_month(instant: datetime, zone_name: str | None) -> datetime:
    """The local midnight that starts the next month on the user's calendar."""
    local = to_local(instant, zone_name)
    later = local.replace(day=28) + timedelta(days=4)  # always in the next month
    return later.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


class RuleKind(StrEnum):
    """What an utterance that a rule hears does to memory."""

    STATEMENT = "statement"  # states a value: "my size is L"
    CORRECTION = "correction"  # changes an earlier value: "actually, make it XL", "换成XL"
    NEGATION = "negation"  # asks for something to stop: "不要再推荐基金了", "no longer ..."
    TEMPORARY = "temporary"  # an intent that ends soon: "今天想喝咖啡", "tonight I want sushi"


class Reason(StrEnum):
    """Why an utterance was not remembered: the outcome's reason code, one the agent acts on."""

    NO_RULE_MATCHED = "NO_RULE_MATCHED"  # nothing in it looks like a memory
    VALUE_NOT_FOUND = "VALUE_NOT_FOUND"  # it reads like a rule's examples, but holds no value
    TARGET_NOT_FOUND = "TARGET_NOT_FOUND"  # a correction, but of what? ask the user
    REQUEST_NOT_UNDERSTOOD = "REQUEST_NOT_UNDERSTOOD"  # asks to be remembered; no rule read it
    ABOUT_SOMEONE_ELSE = "ABOUT_SOMEONE_ELSE"  # reads like a memory, of another person's
    AMBIGUOUS_REFERENCE = "AMBIGUOUS_REFERENCE"  # "I don't want this one": which one? ask
    FORGET_REQUESTED = "FORGET_REQUESTED"  # "forget that I like tea": confirm, then forget


Normalizer = Literal["number", "size", "upper"]

_TTL = r"^(permanent|end_of_day|end_of_tomorrow|end_of_week|end_of_month|from_text|\d+[smhdw])$"


class RegistrationRule(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")
    description: str = ""
    kind: RuleKind = RuleKind.STATEMENT
    pattern: str | None = Field(default=None, description="a regex that triggers the rule")
    examples: tuple[str, ...] = Field(
        default=(), description="utterances whose paraphrases select the rule"
    )
    slots: tuple[str, ...] = Field(
        default=(), description="regexes that extract the value once the examples selected it"
    )
    shape: str | None = Field(
        default=None, description="a regex a bare value of this key fully matches (corrections)"
    )
    keywords: tuple[str, ...] = Field(
        default=(), description="words that name this rule's key (corrections)"
    )
    unless: str | None = Field(
        default=None, description="a regex: an utterance it matches is never this rule's"
    )
    normalize: tuple[Normalizer, ...] = ()
    negates: tuple[str, ...] = Field(
        default=(),
        description="keys whose memory of the same value this rule's memory retires: a "
        "literal key, or `likes.*` for the same thing's key in that family (likes.<value>)",
    )
    steps: dict[str, float] = Field(
        default_factory=dict,
        description="a move of the key's current value (大一号, one size up): the matched "
        "value's words -> how many sizes (or units of a number) to move it",
    )
    shifts: dict[str, float] = Field(
        default_factory=dict,
        description="a change of the key's current amount by the matched value (预算再加一千, "
        "raise my budget by 200): the `direction` group's word -> its sign (1 or -1)",
    )
    several: bool = Field(
        default=False,
        description="the value may list several things (peanuts and shellfish, 海鲜和花生, "
        "milk, eggs or nuts): each becomes a memory of its own; for keys per thing",
    )
    type: MemoryType | None = None
    scope: Scope = Scope.USER
    key: str | None = Field(
        default=None, description="a literal key, or {group} to take it from the match"
    )
    value: str = Field(default="{value}", description="a template over the capture groups")
    content: str | None = Field(default=None, description="template; defaults to key: value")
    ttl: Annotated[str, Field(pattern=_TTL)] = "permanent"
    tags: tuple[str, ...] = ()
    trust: float = Field(default=0.5, ge=0.0, le=1.0)
    semantic_weight: float = Field(default=0.5, ge=0.0, le=0.99)

    @field_validator("pattern", "shape", "unless")
    @classmethod
    def _compiles(cls, value: str | None) -> str | None:
        if value is not None:
            _check_regex(value)
        return value

    @field_validator("slots")
    @classmethod
    def _slots_compile(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for slot in value:
            if "(?P<value>" not in slot:
                raise ValueError(f"slot {slot!r} has no (?P<value>...) group")
            _check_regex(slot)
        return value

    @model_validator(mode="after")
    def _consistent(self) -> RegistrationRule:
        if self.pattern is None and not self.examples:
            raise ValueError("a rule needs a pattern, examples, or both")
        if self.examples and not self.slots and self.pattern is None:
            raise ValueError("a rule with examples needs slots to extract the value")
        if self.kind is not RuleKind.CORRECTION and (self.type is None or self.key is None):
            raise ValueError(
                "a rule needs a type and a key (only corrections take them "
                "from the memory they correct)"
            )
        if self.kind is RuleKind.TEMPORARY and self.ttl == "permanent":
            raise ValueError("a temporary rule needs a ttl")
        if self.ttl == "from_text" and self.kind is not RuleKind.TEMPORARY:
            raise ValueError("ttl from_text is for temporary rules")
        if self.steps and (self.kind is not RuleKind.STATEMENT or "{" in (self.key or "{")):
            raise ValueError("steps move a literal key's current value: a statement's")
        if self.shifts and (self.kind is not RuleKind.STATEMENT or "{" in (self.key or "{")):
            raise ValueError("shifts change a literal key's current amount: a statement's")
        if self.shifts and self.steps:
            raise ValueError("a rule either moves a size (steps) or shifts an amount, not both")
        for word, sign in self.shifts.items():
            if sign not in (1, -1):
                raise ValueError(f"shifts {word!r}: the sign is 1 or -1")
        if self.several and "{value}" not in (self.key or ""):
            raise ValueError("several things make a memory each: the key needs {value}")
        if self.negates and self.kind is RuleKind.CORRECTION:
            raise ValueError("a correction replaces the value it corrects; it negates no keys")
        for negated in self.negates:
            if not _NEGATED.fullmatch(negated):
                raise ValueError(
                    f"negates {negated!r}: name a key (likes) or a family of keys (likes.*)"
                )
        return self

    def compiled(self) -> LinearPattern | None:
        """The pattern on the linear-time engine (RE2), case insensitive."""
        return linear_pattern(self.pattern, ignore_case=True) if self.pattern else None


def _check_regex(value: str) -> None:
    try:
        linear_pattern(value, ignore_case=True)
    except UnsupportedPattern as exc:
        raise ValueError(str(exc)) from None


class RuleMatch(BaseModel):
    model_config = ConfigDict(frozen=True)

    rule_id: str
    kind: RuleKind = RuleKind.STATEMENT
    draft: MemoryDraft
    ttl: str = "permanent"  # the rule's ttl form, as resolved for this utterance
    retires: tuple[str, ...] = ()  # memories a negation or correction ends besides the key's own
    via: Literal["pattern", "examples"] = "pattern"


@dataclass(frozen=True, slots=True)
class Reading:
    """What the rules made of one utterance: memories, or the reason there are none."""

    matches: tuple[RuleMatch, ...] = ()
    reason: Reason | None = None
    detail: str | None = None


class ExampleSelector(Protocol):
    """Ranks the rules whose examples an utterance is close to (above the threshold). The
    platform implements it over the Embedder port; registration only reads the ranking."""

    def select(self, text: str) -> Sequence[str]: ...


class NoExamples:
    """A selector for when no embedder is at hand: only patterns trigger rules."""

    def select(self, text: str) -> Sequence[str]:
        return ()


class StreamView(Protocol):
    """The stream's current memories that corrections and negations look at."""

    def current_for_key(self, key: str) -> Memory | None: ...


def _fill(template: str, groups: dict[str, str]) -> str:
    try:
        return template.format(**groups).strip()
    except (KeyError, IndexError) as exc:
        raise ValueError(f"template {template!r} names a group the pattern lacks") from exc


# Sizes said in words: longest first, so 加大码 is not read as 大码.
_SIZE_WORDS = (
    ("特大", "XXL"),
    ("加加大", "XXL"),
    ("加大", "XL"),
    ("大", "L"),
    ("中", "M"),
    ("小", "S"),
    ("extra large", "XL"),
    ("extra small", "XS"),
    ("large", "L"),
    ("medium", "M"),
    ("small", "S"),
)
_SIZE_TAIL = re.compile(r"\s*(?:码|號|号|size)$", re.IGNORECASE)
_SIZE_HEAD = re.compile(r"^(?:size|尺码)\s*", re.IGNORECASE)

# When a temporary intent ends, read from the words of the utterance.
_TIME_WORDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"明天|明日|\btomorrow\b", re.IGNORECASE), "end_of_tomorrow"),
    (
        re.compile(r"今天|今晚|今日|今儿|\btoday\b|\btonight\b|\bthis evening\b", re.IGNORECASE),
        "end_of_day",
    ),
    (
        re.compile(
            r"周末|这周|本周|这个星期|这星期|\bthis week(?:end)?\b|\b(?:on|over) the weekend\b",
            re.IGNORECASE,
        ),
        "end_of_week",
    ),
    (re.compile(r"这个月|本月|\bthis month\b", re.IGNORECASE), "end_of_month"),
    # lately, for a while: longer than "for now" (24 hours), a week
    (
        re.compile(
            r"最近(?!几天|两天)|这段时间|这阵子|这一阵|\bfor a while\b|\bfor the time being\b",
            re.IGNORECASE,
        ),
        "7d",
    ),
)
_FROM_TEXT_FALLBACK = "24h"
_KEY_JUNK = re.compile(r"[^\w.-]+")
# a sign right after a name's letters is part of the name: c++, c#, f#, disney+
_KEY_SIGNS = re.compile(r"(?<=\w)(?:\+\+|\+|#)")
_SIGN_WORDS = {"++": "plus_plus", "+": "plus", "#": "sharp"}
# what `negates` may name: a key, or a family of keys by its prefix (`likes.*`)
_NEGATED = re.compile(r"[\w-]+(?:\.[\w-]+)*(?:\.\*)?")
# sentence-final particles that are not part of a value: 换成XL吧, 改成M的, 不要葱了
_PARTICLES = re.compile(r"[吧了呢啊呀哦的嘛]+$")
# A question is marked ("?"), or, written without the mark, ends on a question particle,
# holds a Chinese question word, or opens on an English question word or auxiliary.
_QUESTION = re.compile(
    r"[?？]\s*$|吗\s*[?？]|[吗呢么]\s*[。.！!]?\s*$"
    r"|什么|哪里|哪儿|哪个|哪些|怎么样|怎么办|为什么|多少|几点|如何"
    r"|是不是|能不能|可不可以|会不会|有没有|要不要|够不够"
    r"|^\s*(?:what|where|when|why|how|which|who|whose|is|are|am|was|were|do|does|did|can|"
    r"could|would|will|should|shall|may|has|have|had)\b",
    re.IGNORECASE,
)
# An utterance that reports what happened (a past time named) states no lasting fact or
# preference of the user's: "this fund lost 15% last year", "上次买的鞋是四十二码".
_PAST = re.compile(
    r"去年|前年|上次|上回|昨天|前天|上个月|上周|上星期|以前|曾经|\bused\s+to\b"
    r"|\blast\s+(?:year|time|month|week|night)\b|\byesterday\b|\b\d+\s+\w+\s+ago\b",
    re.IGNORECASE,
)


_SOMEONE_ELSE = re.compile(
    r"^\s*(?:他|她|他们|她们|我(?:的)?(?:妈妈|妈|爸爸|爸|朋友|同事|妹妹|姐姐|哥哥|弟弟|老婆|老公|"
    r"孩子|儿子|女儿|父母|家人|领导|老板|女朋友|男朋友|对象|爱人|丈夫|妻子|太太|先生|室友|闺蜜|"
    r"同学|爷爷|奶奶|外公|外婆|姥姥|姥爷|宝宝|小孩|弟|妹|哥|姐))|"
    # 给我妈买件外套，她穿M / 帮我老公挑一件，他穿XXL: a later clause about him or her
    r"[，,;；]\s*(?:他|她|他们|她们)(?:也|都|一般|平时|通常)?(?:穿|要|喜欢|的|对|是|买|预算)|"
    r"^\s*(?:he|she|they|my\s+(?:\w+\s+)?(?:mom|mother|dad|father|friend|brother|sister|wife|"
    r"husband|son|daughter|kids?|parents|colleague|boss|partner))\b",
    re.IGNORECASE,
)


_SOMEONE_ELSE_DETAIL = "it is about someone else, not the user: nothing to ask"
_REFERENCE_DETAIL = "it points at something said or shown before: ask which one is meant"
_SUPPOSED_DETAIL = "a supposition states nothing to remember"
# 我不住在上海了, I don't live in Berlin anymore, 我不穿L码了: a denial of what a
# statement's examples state. Close to those examples to the embedder, but the opposite
# of them; 不错, 不少, 不过, 差不多, 对不起, 特别, 别人, 没关系 are no denials.
_DENIAL = re.compile(
    r"(?<![差对了要得])不(?!错|少|过|久|同|但|仅|管|断|然|如|得不|好意思|见得|起|论|止"
    r"|(?:要|能|可以|得|想|用)?(?:超|高于|多于|低于|到))"
    r"|没(?!关系|事|错|超)|(?:^|[，,。！!\s我你请])别(?!人|的|处|家|超)|并非"
    r"|\b(?:not|never|no\s+longer|nowhere)\b|n['’]t\b",
    re.IGNORECASE,
)
_DENIED_VALUE = re.compile(r"(?:not|never|n['’]t)\b|不是|并非", re.IGNORECASE)
_DENIAL_DETAIL = "reads like rule {rule}, but denies what it would remember: nothing is kept"
_PAST_DETAIL = "it reports something past, not a standing fact"


# what joins the things of a list: "peanuts and shellfish", "milk, eggs or nuts", 海鲜和花生,
# 牛奶、鸡蛋
_LISTED = re.compile(
    r"\s*(?:,\s*(?:and|or)\s+|,|\band\b|\bor\b|&|、|，|和|跟|及|以及|与|或)\s*", re.IGNORECASE
)


class _Part:
    """One thing of a listed value, read as if the match had named it alone."""

    def __init__(self, hit: PatternMatch, value: str) -> None:
        self._hit = hit
        self._groups = {**hit.groupdict(), "value": value}

    def start(self, group: int = 0) -> int:
        return self._hit.start(group)

    def end(self, group: int = 0) -> int:
        return self._hit.end(group)

    def groupdict(self) -> dict[str, str | None]:
        return dict(self._groups)


def _each_listed(rule: RegistrationRule, hit: PatternMatch) -> list[PatternMatch]:
    """The match, or, for a rule that hears several things, one match per thing listed."""
    raw = hit.groupdict().get("value")
    if not rule.several or not raw:
        return [hit]
    parts = [p.strip() for p in _LISTED.split(raw) if p and p.strip()]
    if len(parts) < 2:
        return [hit]
    return [_Part(hit, part) for part in parts]


def _claimed_end(text: str, hit: PatternMatch) -> int:
    """Where a match's claim on the utterance ends: before another clause its value ran
    into ("I like jazz but I don't like country": the dislike is still heard)."""
    raw = hit.groupdict().get("value") or ""
    joined = _NEXT_CLAUSE.search(raw)
    if joined is None:
        return hit.end()
    at = text.find(raw, hit.start())
    return hit.end() if at < 0 else at + joined.start()


def _inner_span(text: str, start: int, end: int) -> tuple[int, int]:
    """[start, end) without the punctuation and spaces at either end: two matches that
    share only the comma between their clauses do not overlap."""
    while start < end and text[start] in _VALUE_TRIM:
        start += 1
    while end > start and text[end - 1] in _VALUE_TRIM:
        end -= 1
    return start, end


def _clause(text: str, start: int, end: int) -> str:
    """The clause of `text` around [start, end): up to the punctuation on either side
    ("just call me on the phone, I don't read emails": the call is not denied)."""
    left = max(text.rfind(mark, 0, start) for mark in _CLAUSE_MARKS) + 1
    ends = [i for i in (text.find(mark, end) for mark in _CLAUSE_MARKS) if i >= 0]
    return text[left : min(ends, default=len(text))]


_CLAUSE_MARKS = ("，", ",", "。", ".", ";", "；", "！", "!", "？", "?")


def _last_match(pattern: LinearPattern, text: str) -> PatternMatch | None:
    """The last of the non-overlapping matches of `pattern` in `text`."""
    last = None
    for last in pattern.finditer(text):  # noqa: B007 (the loop keeps the last)
        pass
    return last


def _about_someone_else(text: str) -> bool:
    """An utterance whose subject is another person: what it says is not the user's own
    preference or fact. Examples never select a rule for one (an explicit pattern, such
    as "remember my wife's name is Anna", still can)."""
    return bool(_SOMEONE_ELSE.search(text))


def _is_question(text: str) -> bool:
    """A question asks; what its words resemble is not stated. Examples never select a
    rule for one (a pattern still can: "could you reply in English?")."""
    return bool(_QUESTION.search(text))


# "if I were allergic", "假如预算只有三千": a supposition states nothing
_SUPPOSED = re.compile(
    r"如果|假如|假设|要是|万一|\bif\s+I\b|\bsuppose\b|\bwhat\s+if\b|\bin\s+case\b",
    re.IGNORECASE,
)
# a question that asks the agent to do something ("能用英文回复我吗", "could you reply in
# English?") is a request: a pattern that hears it keeps working
_REQUEST = re.compile(
    r"请|麻烦|能|可以|帮我|以后|\b(?:can|could|would|will)\s+you\b|\bplease\b|\blet'?s\b",
    re.IGNORECASE,
)


_PLEASE = re.compile(r"请|麻烦|帮我|\bplease\b", re.IGNORECASE)


# a request to forget something said: never heard as what it names ("forget that I like
# tea" is no liking). "Forget it" alone is never mind, and 我忘了… is "I forgot", so a
# Chinese request needs a word that makes it one (掉, 请, 帮我, 别/不要记, 把…删)
_FORGET = re.compile(
    r"^\W*(?:(?:ok|okay|so|and|also|actually|oh|now|hey),?\s+)?(?:please\s+)?"
    r"(?:(?:can|could|would|will)\s+you\s+(?:please\s+)?|you\s+(?:can|may|should)\s+)?"
    r"(?:forget\s+(?!it\b|about\s+it\b|this\b\W*$|that\b\W*$)"
    r"(?:what\b|that\b|about\b|my\b|me\b|everything\b|all\b|the\b|any\b|i\b)"
    r"|(?:delete|erase|wipe|remove|clear)\s+(?:what\s+i\s+(?:said|told)|what\s+you\s+know"
    r"|everything\s+(?:you|about\s+me|i\s+said)|all\s+(?:you|that\s+you|my\s+data)"
    r"|my\s+(?:data|info|information|details|memories|preferences|profile)\b|that\s+i\b)"
    r"|stop\s+remembering\b|(?:don't|do\s+not)\s+(?:remember|keep|store)\s+(?:that|this|my|what)\b)"
    r"|忘掉|(?:请|帮我|麻烦你?)\s*(?:把.{0,30})?(?:忘记|忘了|忘掉)"
    r"|(?:别|不要|不用)(?:再)?记(?:住|着|下)?(?:我|这|那|刚才|之前)"
    r"|把.{0,20}(?:我的|我说|我刚才|我之前|关于我|记忆|记录|这条|那条|这件事).{0,20}"
    r"(?:忘掉|忘了吧|删掉|删了吧?|删除|去掉)",
    re.IGNORECASE,
)
_FORGET_DETAIL = (
    "asks to forget something said before: confirm with the user which memories, "
    "then forget them through the API"
)


_SMALL = {
    w: n
    for n, w in enumerate(
        [
            "zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine",
            "ten", "eleven", "twelve", "thirteen", "fourteen", "fifteen", "sixteen",
            "seventeen", "eighteen", "nineteen",
        ]
    )
}  # fmt: skip
_TENS = {
    w: 10 * n
    for n, w in enumerate(
        ["twenty", "thirty", "forty", "fifty", "sixty", "seventy", "eighty", "ninety"], 2
    )
}
_SCALES = {"hundred": 100, "thousand": 1_000, "million": 1_000_000}
_NUMBER_WORD = "|".join([*_SMALL, *_TENS, *_SCALES])
_WORDS_RUN = (
    rf"(?:(?:{_NUMBER_WORD})(?:[\s-]+(?:and[\s-]+)?(?:{_NUMBER_WORD}))*|a\s+(?:hundred|thousand))"
)
# a number in words that states an amount, a percentage or a size: before its unit, or
# after the words that ask for one ("twenty dollars", "fifteen percent", "size eight");
# elsewhere a number word stays a word ("one size up", "I like one direction")
_EN_AMOUNT = re.compile(
    rf"\b(?P<before>(?:size|budget\s+is|up\s+to|at\s+most|spend|limit\s+(?:is|of))\s+"
    rf"(?:(?:is|of|about|around)\s+)?)?(?P<words>{_WORDS_RUN})"
    rf"(?P<after>\s*(?:dollars?|bucks|euros?|pounds?|yuan|rmb|usd|percent|per\s+cent|%))?\b",
    re.IGNORECASE,
)


def _words_value(words: str) -> int | None:
    total = current = 0
    for word in re.split(r"[\s-]+", words.casefold()):
        if word == "and":
            continue
        if word == "a":
            current = 1
        elif word in _SMALL:
            current += _SMALL[word]
        elif word in _TENS:
            current += _TENS[word]
        elif word == "hundred":
            current = max(current, 1) * 100
        elif word in _SCALES:
            total += max(current, 1) * _SCALES[word]
            current = 0
        else:
            return None
    return total + current


def english_amounts(text: str) -> str:
    """Numbers in words that state an amount, a percentage or a size, written as digits:
    "twenty dollars" -> "20 dollars", "size forty two" -> "size 42"."""

    def digits(m: re.Match[str]) -> str:
        if not (m.group("before") or m.group("after")):
            return m.group()
        value = _words_value(m.group("words"))
        if value is None:
            return m.group()
        return f"{m.group('before') or ''}{value}{m.group('after') or ''}"

    if _EN_HINT.search(text):
        text = _EN_AMOUNT.sub(digits, text)
    # 15 percent is 15%, as the percentage rules spell it
    return _PERCENT.sub(r"\1%", text) if "cent" in text.casefold() else text


_PERCENT = re.compile(r"(\d[\d.]*)\s*(?:percent|per\s+cent)\b", re.IGNORECASE)


_EN_HINT = re.compile(rf"\b(?:{_NUMBER_WORD})\b", re.IGNORECASE)


def _asks_to_forget(text: str) -> bool:
    """A request to forget ("forget that I like tea", "忘掉我喜欢茶这件事"): nothing in it is
    a memory to keep, and what to forget is the agent's to confirm (FORGET_REQUESTED)."""
    return bool(_FORGET.search(text))


def _supposes(text: str) -> bool:
    """A supposition ("如果我对花生过敏…", "what if my budget were 500"): whatever rule hears
    it, the user stated nothing. No rule registers one, by pattern or by examples, unless
    it asks for something ("如果有事请发短信给我": a standing wish)."""
    return bool(_SUPPOSED.search(text)) and not _PLEASE.search(text)


def _asks_without_requesting(text: str) -> bool:
    """A question that asks about something rather than asking the agent to do it
    ("这个理财产品预算五千够吗"): no rule registers one, by pattern or by examples."""
    return _is_question(text) and not _REQUEST.search(text)


# a change made in the past holds now: "我上个月搬到了深圳", "I moved to Oslo last year"
_CHANGED = re.compile(
    r"搬|开始|换成|改成|改为|以后|从此|起就|\bmoved\b|\bstarted\b|\bswitched\b|\bbecame\b"
    r"|\bsince\b|\bever\s+since\b|\bfrom\s+now\b",
    re.IGNORECASE,
)


def _reports_the_past(text: str) -> bool:
    """An account of something past ("last year", "上次"): what it resembles is not the
    user's standing fact or wish, unless it tells of a change that holds now ("我上个月搬到
    了深圳"). Examples never select a rule for one."""
    return bool(_PAST.search(text)) and not _CHANGED.search(text)


_VALUE_TRIM = "。.!！?？,，;；、 "
# words that end a sentence, not a value, whatever the rule: the particle of a change
# (我不吃辣了, 我不喜欢香菜了啦), "anymore"/"again" (I don't like cilantro anymore) and
# "please" (no more spicy food please)
_FINAL_WORDS = re.compile(
    r"[了啦][吧呢啊呀哦嘛]*$|(?:,?\s+(?:any\s?more|again|please))+$", re.IGNORECASE
)
# another clause of the speaker's joined on ("jazz and I hate country music", "tea but my
# wife drinks coffee"): the value ends before it
_NEXT_CLAUSE = re.compile(
    r"\s+(?:and|but|or|so|because|though|although|while|whereas)\s+"
    r"(?:I|I'm|I've|I'd|I'll|my|we|we're|it|it's|you|he|she|they|there)\b.*$",
    re.IGNORECASE,
)
# a value that points at something shown or said before instead of naming it ("I don't
# want this one", "我不要那件"): which thing is for the user to say, never a guess
_REFERENCE = re.compile(
    r"it|them|(?:this|that|these|those)(?:\s+[a-z]+)?|the\s+(?:same|other)(?:\s+[a-z]+)?"
    r"|(?:the\s+)?(?:first|second|last|other)\s+one"
    r"|它们?|[这那](?:(?:个|些|件|款|种|条|双|家|位|样|次|套|杯|份|一个|一件|一款|一种|一双)\w{0,2})?的?",
    re.IGNORECASE,
)
# a value that is only particles holds nothing: 我不要了
_ONLY_PARTICLES = re.compile(r"[吧了呢啊呀哦的嘛]+")
# a value that is only a pronoun names a person, not a thing: "stop calling me"
_PRONOUN = re.compile(
    r"(?:给|跟|向|对|和)?(?:我|你|您|他|她|我们|你们|他们|她们)"
    r"|me|myself|you|him|her|us",
    re.IGNORECASE,
)


# clothing sizes in order, for a move such as 大一号 / one size up
_SIZE_LADDER = ("XXS", "XS", "S", "M", "L", "XL", "XXL", "3XL", "4XL", "5XL")
_SIZE_SPELLINGS = {"2XS": "XXS", "2XL": "XXL", "XXXL": "3XL", "XXXXL": "4XL"}


def moved_size(value: str, step: float) -> str | None:
    """A size moved by `step`: along the letter sizes (L + 1 -> XL), or a number size by
    that much (42 + 1 -> 43, 42 + 0.5 -> 42.5); None when it cannot move so (past the
    largest size, a half step on letters, a value that is no size)."""
    text = value.strip().upper()
    letters = _SIZE_SPELLINGS.get(text, text)
    if letters in _SIZE_LADDER:
        if step != int(step):
            return None
        at = _SIZE_LADDER.index(letters) + int(step)
        return _SIZE_LADDER[at] if 0 <= at < len(_SIZE_LADDER) else None
    if re.fullmatch(r"\d{1,3}(?:\.5)?", text):
        moved = float(text) + step
        if moved <= 0:
            return None
        return str(int(moved)) if moved == int(moved) else f"{moved:g}"
    return None


_AMOUNT = re.compile(r"(\d[\d,]*(?:\.\d+)?)(?:\s*([kK千万]))?")
_AMOUNT_SCALE = {"": 1, "k": 1_000, "千": 1_000, "万": 10_000}


def _amount(text: str) -> tuple[float, re.Match[str]] | None:
    found = _AMOUNT.search(text)
    if found is None:
        return None
    number = float(found.group(1).replace(",", ""))
    return number * _AMOUNT_SCALE[(found.group(2) or "").lower()], found


def shifted_amount(current: str, amount: str, sign: float) -> str | None:
    """`current` (5000, 5000元, $500, 2k, 1万) changed by sign x `amount` (1000, 200 dollars,
    1k), written in the current value's own words; None when either holds no number or the
    result would not be above zero."""
    held, by = _amount(current), _amount(amount)
    if held is None or by is None:
        return None
    (base, where), (change, _) = held, by
    total = base + sign * change
    if total <= 0:
        return None
    unit = where.group(2) or ""
    shown = round(total / _AMOUNT_SCALE[unit.lower()], 3)  # 2k + 500 -> 2.5k
    if abs(shown * _AMOUNT_SCALE[unit.lower()] - total) > 1e-6:  # 1万 + 3333: 13333
        shown, unit = round(total, 3), ""
    if shown == int(shown):
        number = f"{int(shown):,}" if "," in where.group(1) else str(int(shown))
    else:
        number = f"{shown:.3f}".rstrip("0")
    return current[: where.start()] + number + unit + current[where.end() :]


def ttl_from_text(text: str) -> str:
    """The ttl a temporary intent's own words give it; 24 hours when they name no time."""
    for pattern, ttl in _TIME_WORDS:
        if pattern.search(text):
            return ttl
    return _FROM_TEXT_FALLBACK


def normalize_size(value: str) -> str:
    """Sizes as letters or numbers: 加大码 -> XL, L码 -> L, size m -> M, 42码 -> 42."""
    text = _SIZE_HEAD.sub("", value.strip())
    text = _SIZE_TAIL.sub("", text).strip()
    for word, size in _SIZE_WORDS:
        if text.lower() == word or text.lower() == word + "号" or text.lower() == word + "码":
            return size
    if re.fullmatch(r"x{0,3}[sml]|[0-9]+(?:\.5)?|\d?x[sl]", text, re.IGNORECASE):
        return text.upper()
    return value.strip()


def _speaker_key(name: str) -> str:
    """A speaker's name as compared with agent_speakers: NFKC, case-folded, trimmed."""
    return unicodedata.normalize("NFKC", name).strip().casefold()


class RuleSet:
    """Rules in priority order; the first rule to claim a key wins.

    `numbers` turns numerals written in words into digits (五千 -> 5000); the platform
    passes one in, the domain needs no library for it. `cues` are words that ask to be
    remembered (an utterance holding one that no rule reads is REQUEST_NOT_UNDERSTOOD);
    `ignore_examples` are utterances that look like memories and are not; `similarity`
    maps an embedder name prefix to the least similarity that selects a rule.
    `agent_speakers` name the speakers of a conversation's agent side (客服, assistant):
    what they say is the agent's, not the user's, so the rules never read their turns."""

    def __init__(
        self,
        rules: list[RegistrationRule],
        *,
        cues: Sequence[str] = (),
        ignore_examples: Sequence[str] = (),
        similarity: Mapping[str, float] | None = None,
        numbers: Callable[[str], str] | None = None,
        facts: FactRules | None = None,
        agent_speakers: Sequence[str] = (),
    ) -> None:
        ids = [r.id for r in rules]
        if len(ids) != len(set(ids)):
            raise ValueError("rule ids must be unique")
        for rule in rules:
            groups: set[str] = set()
            for regex in ((rule.pattern,) if rule.pattern else ()) + rule.slots:
                groups |= set(linear_pattern(regex, ignore_case=True).groupindex)
            for name, template in (
                ("key", rule.key),
                ("value", rule.value),
                ("content", rule.content),
            ):
                if template is None:
                    continue
                wanted = {f for _, f, _, _ in string.Formatter().parse(template) if f}
                allowed = groups | ({"value"} if name == "content" else set())
                if wanted - allowed:
                    raise ValueError(
                        f"rule {rule.id}: {name} names {sorted(wanted - allowed)}, which the "
                        f"pattern does not capture"
                    )
        for name, value in (similarity or {}).items():
            if not -1.0 <= value <= 1.0:
                raise ValueError(f"similarity {name}: {value} is not between -1 and 1")
        self.rules = rules
        self.by_id = {r.id: r for r in rules}
        self.cues = tuple(c.casefold() for c in cues)
        self.ignore_examples = tuple(ignore_examples)
        self.agent_speakers = frozenset(_speaker_key(s) for s in agent_speakers)
        self.agent_speaker_names = tuple(dict.fromkeys(agent_speakers))
        self.similarity = dict(similarity or {})
        self._numbers = numbers
        # the history rules that read typed facts in conversation turns (mnemo.domain.history)
        self.facts = facts
        self._compiled = [(r, r.compiled()) for r in rules]
        self._slots = {r.id: [linear_pattern(s, ignore_case=True) for s in r.slots] for r in rules}
        self._unless = {
            r.id: linear_pattern(r.unless, ignore_case=True) for r in rules if r.unless is not None
        }
        # the words each rule is written in, for telling a value that is missing from an
        # utterance that only reads like the rule's examples (`_shares_words`)
        self._words = {
            r.id: _content_words(" ".join((*r.examples, r.description, *r.keywords))) for r in rules
        }
        # a shape matches a whole value: anchored, on the same linear-time engine
        self._shapes = {
            r.id: linear_pattern(f"^(?:{r.shape})$", ignore_case=True)
            for r in rules
            if r.shape is not None
        }

    def spoken_by_agent(self, speaker: str | None, stand_ins: Sequence[str] = ()) -> bool:
        """Whether a turn's speaker is the agent side of the conversation (agent_speakers),
        whose words are never the user's memories. `stand_ins`: agent_speakers as the event
        holds them where the detector found a value in them (an e-mail address stands in
        the log as a placeholder), compared whole."""
        if speaker is None:
            return False
        name = _speaker_key(speaker)
        if name in self.agent_speakers or name in {_speaker_key(s) for s in stand_ins}:
            return True
        # 客服小美, 销售小王: a role and a name; "sales rep", "AI advisor": a role among words
        words = re.split(r"[\s_\-./:]+", name)
        if any(w in self.agent_speakers for w in words if w):
            return True
        return any(not agent.isascii() and name.startswith(agent) for agent in self.agent_speakers)

    # ---- what the example selector needs -----------------------------------------------

    def examples(self) -> list[tuple[str | None, str]]:
        """(rule id, example) pairs, then (None, example) for the ignore examples."""
        pairs: list[tuple[str | None, str]] = [
            (r.id, text) for r in self.rules for text in r.examples
        ]
        pairs += [(None, text) for text in self.ignore_examples]
        return pairs

    def threshold_for(self, embedder_name: str) -> float:
        """The least similarity to a rule's examples that selects it, for an embedder."""
        best = ""
        for prefix in self.similarity:
            if prefix != "default" and embedder_name.startswith(prefix) and len(prefix) > len(best):
                best = prefix
        if best:
            return self.similarity[best]
        return self.similarity.get("default", 0.9)

    # ---- reading an utterance ------------------------------------------------------------

    def match(
        self,
        text: str,
        occurred_at: datetime,
        zone_name: str | None,
        *,
        selector: ExampleSelector | None = None,
        stream: StreamView | None = None,
    ) -> list[RuleMatch]:
        """The memories an utterance asks for (see `read` for why there may be none)."""
        return list(
            self.read(text, occurred_at, zone_name, selector=selector, stream=stream).matches
        )

    def read(
        self,
        text: str,
        occurred_at: datetime,
        zone_name: str | None,
        *,
        selector: ExampleSelector | None = None,
        stream: StreamView | None = None,
    ) -> Reading:
        """Patterns first, in file order; when none triggers, the rules the selector ranks
        (their examples are close to the utterance) extract a value with their slots."""
        zone_of(zone_name)  # an unknown zone is an error before anything is read
        # full-width letters and digits read as what they are (我穿Ｌ码, 鞋码是４２), and so
        # does full-width punctuation (the patterns spell both forms)
        text = english_amounts(unicodedata.normalize("NFKC", text))
        if _asks_to_forget(text):
            return Reading(reason=Reason.FORGET_REQUESTED, detail=_FORGET_DETAIL)
        view = stream or _NoStream()
        found: dict[str, RuleMatch] = {}
        claimed: list[tuple[int, int]] = []
        miss: tuple[Reason, str] | None = None
        for rule, hit in self._hits(text):
            first, last = _inner_span(text, hit.start(), _claimed_end(text, hit))
            if any(first < end and start < last for start, end in claimed):
                continue
            if "{key}" not in (rule.key or "") and _about_someone_else(text):
                # 我老公的预算是五千: the rule's key is the user's own; "remember my wife's
                # name is Anna" (a key taken from the words) still is the user's to keep
                miss = miss or (Reason.ABOUT_SOMEONE_ELSE, _SOMEONE_ELSE_DETAIL)
                continue
            for part in _each_listed(rule, hit):
                built = self._build(rule, part, text, occurred_at, zone_name, view, "pattern")
                if isinstance(built, tuple):
                    miss = miss or built
                    continue
                if built.draft.key in found:
                    continue
                found[built.draft.key or ""] = built
            claimed.append((first, last))
        if found:
            return Reading(matches=tuple(found.values()))
        if miss is None:
            ranked = [
                rule_id
                for rule_id in (selector or NoExamples()).select(text)
                if rule_id in self.by_id and not self._excluded(self.by_id[rule_id], text)
            ][:3]
            # examples select no rule for these (see _build_one); said here, before the
            # slots, so that one without a value is not taken for a value to ask for
            if ranked and _about_someone_else(text):
                return Reading(reason=Reason.ABOUT_SOMEONE_ELSE, detail=_SOMEONE_ELSE_DETAIL)
            if ranked and _supposes(text):
                return Reading(reason=Reason.NO_RULE_MATCHED, detail=_SUPPOSED_DETAIL)
            if ranked and _reports_the_past(text):
                return Reading(reason=Reason.NO_RULE_MATCHED, detail=_PAST_DETAIL)
            if ranked and _is_question(text):
                # 有XL的吗: examples never select a rule for a question, so there is no value
                # to ask for either
                return Reading(
                    reason=Reason.NO_RULE_MATCHED, detail="a question states nothing to remember"
                )
            for rule_id in ranked:
                selected = self.by_id[rule_id]
                for slot in self._slots[selected.id]:
                    found_by_slot = slot.search(text)
                    if found_by_slot is None:
                        continue
                    hit = found_by_slot
                    if self._denies_examples(selected, _clause(text, hit.start(), hit.end())):
                        miss = miss or (
                            Reason.VALUE_NOT_FOUND,
                            _DENIAL_DETAIL.format(rule=selected.id),
                        )
                        continue
                    built = self._build(
                        selected, hit, text, occurred_at, zone_name, view, "examples"
                    )
                    if isinstance(built, tuple):
                        miss = miss or built
                        continue
                    return Reading(matches=(built,))
                if miss is None and self._words[selected.id] & _content_words(text):
                    # close to the examples and in the rule's own words: a value to ask
                    # for. Closeness alone is not enough (讲个笑话吧 reads close to a
                    # correction's examples to the embedder): without a word in common it
                    # is no reason to ask for anything
                    miss = (
                        Reason.VALUE_NOT_FOUND,
                        f"reads like rule {selected.id}, but holds no value",
                    )
        if miss is not None:
            return Reading(reason=miss[0], detail=miss[1])
        folded = text.casefold()
        for cue in self.cues:
            if cue in folded:
                return Reading(
                    reason=Reason.REQUEST_NOT_UNDERSTOOD,
                    detail=f"asks to remember ({cue!r}), but no rule reads it",
                )
        return Reading(reason=Reason.NO_RULE_MATCHED)

    def _hits(self, text: str) -> Iterator[tuple[RegistrationRule, PatternMatch]]:
        """Each rule's pattern match, in file order. A correction's is its last (尺码改成XL，
        不对，改成M: the last value the user gave is the one meant); a rule with a key per
        thing (likes.<value>, allergy.<value>) hears every thing the utterance names
        (我对海鲜过敏，还对花生过敏), one match after another."""
        for rule, pattern in self._compiled:
            if pattern is None or self._excluded(rule, text):
                continue
            if rule.kind is RuleKind.CORRECTION:
                hit = _last_match(pattern, text)
                if hit is not None:
                    yield rule, hit
            elif "{value}" in (rule.key or ""):
                for hit in pattern.finditer(text):
                    yield rule, hit
            else:
                hit = pattern.search(text)
                if hit is not None:
                    yield rule, hit

    def _denies_examples(self, rule: RegistrationRule, text: str) -> bool:
        """Whether the utterance denies what a statement rule's examples state: the
        embedder that found it close does not hear the "not", so the slot would take the
        denied value for the user's own. Negations, corrections and intents say "not" in
        their own examples, and are read as they are."""
        if rule.kind is not RuleKind.STATEMENT or not _DENIAL.search(text):
            return False
        return not any(_DENIAL.search(example) for example in rule.examples)

    def _excluded(self, rule: RegistrationRule, text: str) -> bool:
        """Whether the rule's `unless` pattern keeps it from hearing this utterance."""
        unless = self._unless.get(rule.id)
        return unless is not None and unless.search(text) is not None

    def normalized(self, rule: RegistrationRule, value: str) -> str:
        value = value.strip().rstrip(_VALUE_TRIM).strip()
        value = _NEXT_CLAUSE.sub("", value).rstrip(_VALUE_TRIM).strip() or value
        value = _FINAL_WORDS.sub("", value).rstrip(_VALUE_TRIM).strip() or value
        if rule.shape is not None or rule.kind is RuleKind.NEGATION:
            value = _PARTICLES.sub("", value).rstrip(_VALUE_TRIM).strip() or value
        for step in rule.normalize:
            if step == "number" and self._numbers is not None:
                value = self._numbers(value)
            elif step == "size":
                value = normalize_size(value)
            elif step == "upper":
                value = value.upper()
        return value

    def _build(
        self,
        rule: RegistrationRule,
        hit: PatternMatch,
        text: str,
        occurred_at: datetime,
        zone_name: str | None,
        stream: StreamView,
        via: Literal["pattern", "examples"],
    ) -> RuleMatch | tuple[Reason, str]:
        """A rule's memory from its match, or why there is none. A value the memory model
        refuses (too long, say) or a template that cannot be filled is reported as the
        rule's failure to find a value, never as another kind of error."""
        try:
            return self._build_one(rule, hit, text, occurred_at, zone_name, stream, via)
        except ValueError as exc:
            # the error's own text may quote the value: a person's words, kept out of the
            # outcome (which is no sealed event); its class says enough
            kind = type(exc).__name__
            return (Reason.VALUE_NOT_FOUND, f"rule {rule.id} could not make a memory ({kind})")

    def _build_one(
        self,
        rule: RegistrationRule,
        hit: PatternMatch,
        text: str,
        occurred_at: datetime,
        zone_name: str | None,
        stream: StreamView,
        via: Literal["pattern", "examples"],
    ) -> RuleMatch | tuple[Reason, str]:
        # an optional group that took no part in the match fills its templates with ""
        groups = {k: (v or "").strip() for k, v in hit.groupdict().items()}
        raw = _fill(rule.value, groups) if "value" in groups or rule.value != "{value}" else ""
        if via == "examples" and _is_question(text):
            return (Reason.NO_RULE_MATCHED, "a question states nothing to remember")
        if _supposes(text):
            return (Reason.NO_RULE_MATCHED, _SUPPOSED_DETAIL)
        if _asks_without_requesting(text):
            return (Reason.NO_RULE_MATCHED, "a question states nothing to remember")
        if via == "examples" and _about_someone_else(text):
            return (Reason.ABOUT_SOMEONE_ELSE, _SOMEONE_ELSE_DETAIL)
        if via == "examples" and _reports_the_past(text):
            return (Reason.NO_RULE_MATCHED, _PAST_DETAIL)
        if rule.kind is RuleKind.CORRECTION:
            return self._correction(rule, raw, text, occurred_at, zone_name, stream, via)
        if rule.key is None or rule.type is None:  # guarded by the model validator
            return (Reason.VALUE_NOT_FOUND, f"rule {rule.id} has no key")
        value = self.normalized(rule, raw)
        if not value:
            return (Reason.VALUE_NOT_FOUND, f"rule {rule.id} found no value")
        if _DENIED_VALUE.match(value):
            # "my size is not L", "remember my name isn't Sam": what it is not is no value
            return (Reason.VALUE_NOT_FOUND, _DENIAL_DETAIL.format(rule=rule.id))
        if rule.steps:
            moved = self._moved(rule, value, stream)
            if isinstance(moved, tuple):
                return moved
            value = moved
        if rule.shifts:
            shifted = self._shifted(rule, value, groups.get("direction", ""), stream)
            if isinstance(shifted, tuple):
                return shifted
            value = shifted
        if _PRONOUN.fullmatch(value) or _ONLY_PARTICLES.fullmatch(value):
            # "stop calling me": the words after the verb name a person, not a thing
            return (Reason.VALUE_NOT_FOUND, f"rule {rule.id} found a pronoun, not a value")
        if _REFERENCE.fullmatch(value):
            return (Reason.AMBIGUOUS_REFERENCE, _REFERENCE_DETAIL)
        key = _key_of(_fill(rule.key, {**groups, "value": value}))
        if not key or ("{value}" in rule.key and not _key_of(value)):
            # likes.{value} of 😀: no key of its own, and never the family's bare name
            return (Reason.VALUE_NOT_FOUND, f"rule {rule.id} found no key")
        retires: list[str] = []
        for negated in rule.negates:
            # `likes.*`: the key the same thing has in that family (likes.<value>)
            held = _key_of(negated[:-1] + value) if negated.endswith(".*") else negated
            current = stream.current_for_key(held) if held != key else None
            if current is not None and current.value and _same_thing(current.value, value):
                retires.append(current.memory_id)
        ttl = ttl_from_text(text) if rule.ttl == "from_text" else rule.ttl
        return self._match(
            rule, rule.type, key, value, groups, ttl, occurred_at, zone_name, tuple(retires), via
        )

    def _moved(
        self, rule: RegistrationRule, said: str, stream: StreamView
    ) -> str | tuple[Reason, str]:
        """The key's current value moved as the words say (大一号: L -> XL); with no current
        value there is nothing to move from, so the agent asks."""
        assert rule.key is not None
        step = rule.steps.get("".join(said.casefold().split()))
        current = stream.current_for_key(rule.key)
        if current is None or not current.value:
            return (Reason.TARGET_NOT_FOUND, f"a move of {rule.key}, but from what? ask the user")
        moved = moved_size(current.value, step) if step is not None else None
        if moved is None:
            return (Reason.VALUE_NOT_FOUND, f"rule {rule.id} cannot move {rule.key} so")
        return moved

    def _shifted(
        self, rule: RegistrationRule, amount: str, direction: str, stream: StreamView
    ) -> str | tuple[Reason, str]:
        """The key's current amount changed by the one said (5000 + 一千 -> 6000), written
        as the current value writes it ($500 + 200 -> $700); with no current amount there
        is nothing to change, so the agent asks."""
        assert rule.key is not None
        sign = rule.shifts.get(" ".join(direction.casefold().split()))
        current = stream.current_for_key(rule.key)
        if current is None or not current.value:
            return (Reason.TARGET_NOT_FOUND, f"a change of {rule.key}, but from what? ask the user")
        shifted = shifted_amount(current.value, amount, sign) if sign is not None else None
        if shifted is None:
            return (Reason.VALUE_NOT_FOUND, f"rule {rule.id} cannot change {rule.key} so")
        return shifted

    def _correction(
        self,
        rule: RegistrationRule,
        raw: str,
        text: str,
        occurred_at: datetime,
        zone_name: str | None,
        stream: StreamView,
        via: Literal["pattern", "examples"],
    ) -> RuleMatch | tuple[Reason, str]:
        """A correction takes the key, type and template of what it corrects: the rule the
        utterance names by a keyword, else the rules whose value shape fits the new value and
        whose key the stream holds (the most recently stated wins). Never a guess beyond
        that: no target is TARGET_NOT_FOUND, so the agent asks."""
        if not raw:
            return (Reason.VALUE_NOT_FOUND, f"correction {rule.id} found no new value")
        folded = text.casefold()
        targets = [
            r
            for r in self.rules
            if r.kind in (RuleKind.STATEMENT, RuleKind.TEMPORARY)
            and r.key is not None
            and "{" not in r.key
            and r.type is not None
            and not self._excluded(r, text)
        ]
        named = [r for r in targets if any(k.casefold() in folded for k in r.keywords)]
        chosen: RegistrationRule | None = None
        for target in named:
            shape = self._shapes.get(target.id)
            if shape is None or shape.search(self.normalized(target, raw)):
                chosen = target
                break
        if chosen is None and not named:
            held: list[tuple[Memory, RegistrationRule]] = []
            for target in targets:
                shape = self._shapes.get(target.id)
                if shape is None or not shape.search(self.normalized(target, raw)):
                    continue
                assert target.key is not None
                current = stream.current_for_key(target.key)
                if current is not None:
                    held.append((current, target))
            if held:
                # the most recently stated key; of the rules that hold it (zh-size, en-size),
                # the one whose template is written in the utterance's script, so 改成L吧
                # keeps 尺码：L and a Chinese question still finds it by its words
                han = _HAN.search(text) is not None
                held.sort(
                    key=lambda pair: (
                        pair[0].created_at,
                        pair[0].version,
                        (_HAN.search(pair[1].content or "") is not None) == han,
                    )
                )
                chosen = held[-1][1]
        if chosen is None or chosen.key is None or chosen.type is None:
            return (
                Reason.TARGET_NOT_FOUND,
                "a correction, but of which memory is unclear: ask the user",
            )
        value = self.normalized(chosen, raw)
        if _REFERENCE.fullmatch(value):  # 换成这个: which one is for the user to say
            return (Reason.AMBIGUOUS_REFERENCE, _REFERENCE_DETAIL)
        ttl = ttl_from_text(text) if chosen.ttl == "from_text" else chosen.ttl
        current = stream.current_for_key(chosen.key)
        memory_type = current.type if current is not None else chosen.type
        return self._match(
            chosen,
            memory_type,
            chosen.key,
            value,
            {},
            ttl,
            occurred_at,
            zone_name,
            (),
            via,
            kind=RuleKind.CORRECTION,
            rule_id=rule.id,
        )

    def _match(
        self,
        rule: RegistrationRule,
        memory_type: MemoryType,
        key: str,
        value: str,
        groups: dict[str, str],
        ttl: str,
        occurred_at: datetime,
        zone_name: str | None,
        retires: tuple[str, ...],
        via: Literal["pattern", "examples"],
        *,
        kind: RuleKind | None = None,
        rule_id: str | None = None,
    ) -> RuleMatch:
        content = _fill(rule.content, {**groups, "value": value}) if rule.content else ""
        ttl_seconds: int | None = None
        valid_until: datetime | None = None
        if ttl == "end_of_day":
            valid_until = end_of_local_day(occurred_at, zone_name)
        elif ttl == "end_of_tomorrow":
            valid_until = end_of_local_day(end_of_local_day(occurred_at, zone_name), zone_name)
        elif ttl == "end_of_week":
            valid_until = end_of_local_week(occurred_at, zone_name)
        elif ttl == "end_of_month":
            valid_until = end_of_local_month(occurred_at, zone_name)
        elif ttl != "permanent":
            ttl_seconds = parse_duration(ttl)
        used = rule_id or rule.id
        draft = MemoryDraft(
            type=memory_type,
            scope=rule.scope,
            key=key,
            value=value,
            content=content,
            tags=rule.tags,
            ttl_seconds=ttl_seconds,
            valid_until=valid_until,
            timezone=zone_name,
            semantic_weight=rule.semantic_weight,
            provenance=Provenance(source_id=f"rule:{used}", trust=rule.trust),
        )
        return RuleMatch(
            rule_id=used,
            kind=kind or rule.kind,
            draft=draft,
            ttl=ttl,
            retires=retires,
            via=via,
        )


class _NoStream:
    def current_for_key(self, key: str) -> Memory | None:
        return None


_HAN = re.compile(r"[\u4e00-\u9fff]")


def _key_of(text: str) -> str:
    """A key from words: compatibility forms folded (ＸＬ is XL), lower case, and the signs
    that tell languages apart spelled out (C, C++ and C# are three keys, not one)."""
    text = unicodedata.normalize("NFKC", text).strip().lower()
    text = _KEY_SIGNS.sub(lambda m: "_" + _SIGN_WORDS[m.group()], text)
    key = _KEY_JUNK.sub("_", text.replace(" ", "_")).strip("_")
    return key[:64].rstrip("_.-")


def _same_thing(held: str, negated: str) -> bool:
    a, b = (unicodedata.normalize("NFKC", x).casefold().strip() for x in (held, negated))
    return bool(a and b) and (a in b or b in a)


def _content_words(text: str) -> frozenset[str]:
    """The words of a text that say what it is about: English stems but stopwords, and
    Chinese (and other CJK) character pairs; single characters (我, 的) say too little."""
    return frozenset(
        t for t in query_terms(text) if (len(t) >= 2 if _HAN.match(t) else len(t) >= 3)
    )
