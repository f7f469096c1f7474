"""Documents: what a parsed document is, the entities found in its sections, and the typed
values structured queries compare them with.

A parser (`mnemo.adapters.document_parsers`) turns a document's bytes into a
`ParsedDocument`: its sections in reading order, each with the page (PDF), sheet (XLSX) and
clause number it came from. `extract_entities` then reads each section with the entity
rules (`mnemo/rules/entities.yaml`, extended by the operator's file named by
`MNEMO_ENTITY_RULES_FILE`): parties, organisations, people, contract and clause numbers,
dates, periods, amounts, rates and durations, each normalised to a typed value so that a
query compares values, not spellings ("50万元" equals "人民币500,000元", "5%" equals "百分之五").

Everything here is pure: the same text and rules give the same entities. The patterns run
on the linear-time engine (`mnemo.domain.patterns`), the operator's as well as Mnemo's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date, timedelta
from typing import Any, Literal

from mnemo.domain.errors import InvalidInput
from mnemo.domain.patterns import LinearPattern, UnsupportedPattern, linear_pattern

__all__ = [
    "DOCUMENT_FIELDS",
    "FIELD_KINDS",
    "KINDS",
    "OPS_BY_KIND",
    "DocumentLimits",
    "DocumentRejected",
    "Entity",
    "EntityKind",
    "EntityValue",
    "Language",
    "ParsedDocument",
    "Section",
]

EntityKind = Literal["text", "number", "percent", "money", "date", "period", "duration"]
Language = Literal["zh", "en", "mixed"]
# text: normalised string; number/percent/duration: float (percent as a fraction, duration
# in days); money: {"amount": float, "currency": "CNY"}; date: "YYYY-MM-DD"; period:
# {"start": "YYYY-MM-DD", "end": "YYYY-MM-DD"}
EntityValue = str | float | dict[str, Any]

KINDS: tuple[str, ...] = ("text", "number", "percent", "money", "date", "period", "duration")

# the fields Mnemo's own rules fill, with their kinds; `party` is a query-side alias that
# matches party_a or party_b. An operator's rules may add fields.
FIELD_KINDS: dict[str, str] = {
    "party_a": "text",
    "party_b": "text",
    "party": "text",
    "organisation": "text",
    "person": "text",
    "contract_no": "text",
    "clause_no": "text",
    "signed_at": "date",
    "date": "date",
    "period": "period",
    "amount": "money",
    "penalty_rate": "percent",
    "rate": "percent",
    "duration": "duration",
}

# fields found in any section that hold for the whole document
DOCUMENT_FIELDS: frozenset[str] = frozenset({"party_a", "party_b", "contract_no", "signed_at"})

_ORDERED = ("eq", "ne", "in", "gt", "gte", "lt", "lte", "between")
OPS_BY_KIND: dict[str, frozenset[str]] = {
    "text": frozenset({"eq", "ne", "in", "contains"}),
    "number": frozenset(_ORDERED),
    "percent": frozenset(_ORDERED),
    "money": frozenset(_ORDERED),
    "duration": frozenset(_ORDERED),
    "date": frozenset({*_ORDERED, "within"}),
    # a period is within a query period when it lies inside it, and contains a date or a
    # period inside it; the order compares starts
    "period": frozenset({*_ORDERED, "within", "contains"}),
}


class DocumentRejected(InvalidInput):
    """A document Mnemo will not store; nothing of it is kept. `status` is the HTTP status
    its code answers with."""

    code = "DOCUMENT_MALFORMED"
    STATUS: dict[str, int] = {  # noqa: RUF012 (a constant table)
        "DOCUMENT_TOO_LARGE": 413,
        "UNSUPPORTED_DOCUMENT_TYPE": 415,
        "DOCUMENT_MALFORMED": 400,
        "DOCUMENT_ENCRYPTED": 400,
        "DOCUMENT_BOMB": 400,
        "DOCUMENT_EMPTY": 400,
    }

    def __init__(self, code: str, message: str) -> None:
        if code not in self.STATUS:
            raise ValueError(f"unknown document error code {code}")
        super().__init__(message, code=code)

    @property
    def status(self) -> int:
        return self.STATUS[self.code]


@dataclass(frozen=True, slots=True)
class DocumentLimits:
    """What a parser accepts; the settings fill it. Zip containers (DOCX, XLSX) are checked
    from their central directory before any member is inflated."""

    max_bytes: int = 20 * 1024 * 1024
    max_pages: int = 2_000  # PDF pages, XLSX sheets, estimated pages of the other formats
    max_zip_members: int = 2_000
    max_expanded_bytes: int = 200 * 1024 * 1024  # the members' declared sizes, added up
    max_compression_ratio: float = 100.0  # a member's declared size over its packed size
    max_sections: int = 20_000
    section_chars: int = 4_000  # the longest a section's text may be
    # spreadsheet cells read, blank ones before a row's last cell and blank rows included:
    # a few bytes can place a cell a billion rows down or 16,384 columns across
    max_cells: int = 10_000_000

    def __post_init__(self) -> None:
        for name in (
            "max_bytes",
            "max_pages",
            "max_zip_members",
            "max_expanded_bytes",
            "max_cells",
        ):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive")
        if self.max_compression_ratio < 1:
            raise ValueError("max_compression_ratio must be at least 1")
        if not 200 <= self.section_chars <= 4_000:
            raise ValueError("section_chars must be between 200 and 4000")


@dataclass(frozen=True, slots=True)
class Section:
    index: int  # 0.. in reading order, stable for the same bytes
    text: str  # one clause, paragraph group or block of sheet rows; at most 4,000 chars
    page: int | None  # 1-based page (PDF), sheet index + 1 (XLSX), None otherwise
    clause: str | None  # the clause number, normalised: "5.2"; "第八条" -> "8"
    heading: str | None


@dataclass(frozen=True, slots=True)
class ParsedDocument:
    media_type: str
    pages: int
    language: Language
    title: str | None
    sections: tuple[Section, ...] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class Entity:
    field: str  # the role: party_a, amount, signed_at, ... (FIELD_KINDS and the operator's)
    kind: str  # one of KINDS
    value: EntityValue
    text: str  # the span as written
    start: int  # offsets of that span in the section's text
    end: int


class EntityRulesInvalid(InvalidInput):
    """An entity rule file Mnemo refuses; the message names the file, line and rule."""

    code = "ENTITY_RULES_INVALID"


def _query_invalid(field: str, message: str) -> InvalidInput:
    return InvalidInput(message, code="QUERY_INVALID", field=field)


# ---------------------------------------------------------------------------------------
# Text folding, language

# full-width ASCII forms and the ideographic space, one character for one (offsets hold)
_WIDTH = {c: c - 0xFEE0 for c in range(0xFF01, 0xFF5F)} | {0x3000: 0x20}


def fold_width(text: str) -> str:
    """`text` with full-width ASCII forms (１２３，ＡＢＣ：) as their half-width characters,
    character for character, so that offsets in the result are offsets in `text`."""
    return text.translate(_WIDTH)


def _is_han(c: str) -> bool:
    return "\u4e00" <= c <= "\u9fff" or "\u3400" <= c <= "\u4dbf"


def detect_language(text: str) -> Language:
    """zh when Chinese characters carry the text, en when Latin words do, else mixed (a
    Chinese character counts about as much as a five-letter word's worth of letters)."""
    han = sum(1 for c in text if _is_han(c))
    latin = sum(1 for c in text if c.isascii() and c.isalpha()) / 5
    if han + latin == 0:
        return "en"
    share = han / (han + latin)
    if share >= 0.8:
        return "zh"
    if share <= 0.2:
        return "en"
    return "mixed"


# ---------------------------------------------------------------------------------------
# Numbers

_CN_DIGITS = {
    "零": 0, "〇": 0, "一": 1, "壹": 1, "二": 2, "贰": 2, "貳": 2, "两": 2, "兩": 2,
    "三": 3, "叁": 3, "參": 3, "四": 4, "肆": 4, "五": 5, "伍": 5, "六": 6, "陆": 6,
    "陸": 6, "七": 7, "柒": 7, "八": 8, "捌": 8, "九": 9, "玖": 9,
}  # fmt: skip
_CN_UNITS = {"十": 10, "拾": 10, "百": 100, "佰": 100, "千": 1000, "仟": 1000}
_CN_BIG = {"万": 10**4, "萬": 10**4, "亿": 10**8, "億": 10**8}
_EN_NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12,
    "thirteen": 13, "fourteen": 14, "fifteen": 15, "sixteen": 16, "seventeen": 17,
    "eighteen": 18, "nineteen": 19, "twenty": 20, "thirty": 30, "forty": 40, "forty-five": 45,
    "fifty": 50, "sixty": 60, "ninety": 90, "hundred": 100,
}  # fmt: skip


def chinese_number(text: str) -> float | None:
    """A number written in Chinese numerals (also the financial forms 壹贰叁 and a decimal
    point 点): 三十 -> 30, 二〇二三 -> 2023, 伍拾万 -> 500000, 三点五 -> 3.5; None when it
    is not one."""
    text = text.strip()
    if not text:
        return None
    if "点" in text:
        whole, _, fraction = text.partition("点")
        head = chinese_number(whole) if whole else 0.0
        if head is None or not fraction or any(c not in _CN_DIGITS for c in fraction):
            return None
        return float(f"{int(head)}.{''.join(str(_CN_DIGITS[c]) for c in fraction)}")
    if all(c in _CN_DIGITS for c in text):  # digit by digit: 二〇二三
        return float("".join(str(_CN_DIGITS[c]) for c in text))
    total = section = number = 0
    last_big = 0
    for c in text:
        if c in _CN_DIGITS:
            number = _CN_DIGITS[c]
        elif c in _CN_UNITS:
            section += (number or 1) * _CN_UNITS[c]
            number = 0
        elif c in _CN_BIG:
            big = _CN_BIG[c]
            if last_big and big > last_big:  # 一万亿: the 亿 scales what came before too
                total = (total + section + number) * big
            else:
                total += (section + number or (0 if total else 1)) * big
            last_big = big
            section = number = 0
        else:
            return None
    return float(total + section + number)


def parse_number(text: str) -> float | None:
    """Digits (with thousands separators), Chinese numerals, or an English number word."""
    cleaned = fold_width(text).strip().replace(",", "").replace(" ", "")
    if not cleaned:
        return None
    try:
        number = float(cleaned)
    except ValueError:
        pass
    else:
        # float() also reads "nan", "inf" and "1e999": no number a filter can compare with
        return number if math.isfinite(number) else None
    if cleaned.lower() in _EN_NUMBERS:
        return float(_EN_NUMBERS[cleaned.lower()])
    return chinese_number(cleaned)


def _leading_number(text: str) -> tuple[float, str] | None:
    """The number a text starts with (digits or Chinese numerals) and the rest of it."""
    i = 0
    while i < len(text) and ((text[i].isdigit() and text[i].isascii()) or text[i] in ",."):
        i += 1
    if i:
        digits = text[:i].rstrip(",.")
        if not digits:
            return None
        try:
            return float(digits.replace(",", "")), text[len(digits) :]
        except ValueError:
            return None
    while i < len(text) and (
        text[i] in _CN_DIGITS or text[i] in _CN_UNITS or text[i] in _CN_BIG or text[i] == "点"
    ):
        i += 1
    if i:
        value = chinese_number(text[:i])
        return None if value is None else (value, text[i:])
    return None


def _clean_float(value: float) -> float:
    return float(round(value, 10))


# ---------------------------------------------------------------------------------------
# Normalisers: the text of a match to a typed value (None: not a value after all)

# (marker, currency): the longer and more specific markers first
_CURRENCIES: tuple[tuple[str, str], ...] = (
    ("us dollars", "USD"), ("us dollar", "USD"), ("us$", "USD"), ("hk$", "HKD"),
    ("美元", "USD"), ("美金", "USD"), ("欧元", "EUR"), ("港元", "HKD"), ("港币", "HKD"),
    ("日元", "JPY"), ("英镑", "GBP"), ("人民币", "CNY"), ("rmb", "CNY"), ("cny", "CNY"),
    ("yuan", "CNY"), ("usd", "USD"), ("dollars", "USD"), ("dollar", "USD"), ("eur", "EUR"),
    ("euros", "EUR"), ("euro", "EUR"), ("€", "EUR"), ("gbp", "GBP"), ("pounds", "GBP"),
    ("£", "GBP"), ("hkd", "HKD"), ("jpy", "JPY"), ("yen", "JPY"), ("$", "USD"),
    ("￥", "CNY"), ("¥", "CNY"), ("元", "CNY"), ("圆", "CNY"),
)  # fmt: skip
_MULTIPLIERS: tuple[tuple[str, float], ...] = (
    ("billion", 1e9), ("million", 1e6), ("thousand", 1e3), ("bn", 1e9), ("mn", 1e6),
    ("k", 1e3), ("m", 1e6), ("亿", 1e8), ("億", 1e8), ("万", 1e4), ("萬", 1e4),
    ("千", 1e3), ("仟", 1e3), ("百", 1e2),
)  # fmt: skip
CURRENCY_CODES = frozenset(code for _, code in _CURRENCIES)


def parse_money(text: str) -> dict[str, Any] | None:
    """{"amount", "currency"} of "50万元", "人民币500,000元", "USD 1.2 million",
    "$1,200,000", "伍拾万元整"; None without a currency or a number."""
    folded = fold_width(text).strip().lower()
    currency = None
    for marker, code in _CURRENCIES:
        if marker in folded:
            currency = code
            break
    if currency is None:
        return None
    body = folded
    for marker, _ in sorted(_CURRENCIES, key=lambda pair: -len(pair[0])):
        body = body.replace(marker, " ")
    body = body.replace("整", " ").strip()
    parsed = _leading_number(body)
    if parsed is None:
        return None
    amount, rest = parsed
    rest = rest.strip()
    while rest:
        for word, factor in _MULTIPLIERS:
            if rest.startswith(word):
                amount *= factor
                rest = rest[len(word) :].strip()
                break
        else:
            return None
    return {"amount": _clean_float(amount), "currency": currency}


def parse_percent(text: str) -> float | None:
    """A percentage as a fraction: "5%" -> 0.05, "百分之五" -> 0.05, "0.5‰" -> 0.0005,
    "5 percent" and "5 per cent" -> 0.05; None without a percent sign or word."""
    compact = fold_width(text).strip().lower().replace(" ", "")
    for prefix, scale in (("百分之", 100.0), ("千分之", 1000.0)):
        if compact.startswith(prefix):
            number = parse_number(compact[len(prefix) :])
            return None if number is None else _clean_float(number / scale)
    for suffix, scale in (
        ("%", 100.0), ("‰", 1000.0), ("个百分点", 100.0), ("percentagepoints", 100.0),
        ("percentagepoint", 100.0), ("percent", 100.0), ("pct", 100.0),
    ):  # fmt: skip
        if compact.endswith(suffix):
            number = parse_number(compact[: -len(suffix)])
            return None if number is None else _clean_float(number / scale)
    return None


_MONTHS = {
    "january": 1, "february": 2, "march": 3, "april": 4, "may": 5, "june": 6, "july": 7,
    "august": 8, "september": 9, "october": 10, "november": 11, "december": 12, "jan": 1,
    "feb": 2, "mar": 3, "apr": 4, "jun": 6, "jul": 7, "aug": 8, "sep": 9, "sept": 9,
    "oct": 10, "nov": 11, "dec": 12,
}  # fmt: skip


def _day(year: int, month: int, day: int) -> date | None:
    if not 1900 <= year <= 2199:
        return None
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _year(text: str) -> int | None:
    text = text.strip()
    if len(text) == 4 and text.isascii() and text.isdigit():
        return int(text)
    if len(text) == 4 and all(c in _CN_DIGITS for c in text):
        return int("".join(str(_CN_DIGITS[c]) for c in text))
    return None


def _small(text: str) -> int | None:
    value = parse_number(text)
    if value is None or value != int(value):
        return None
    return int(value)


def _words(text: str) -> list[str]:
    out: list[str] = []
    word = ""
    for c in text:
        if c.isascii() and c.isalnum():
            word += c
        else:
            if word:
                out.append(word)
            word = ""
    if word:
        out.append(word)
    return out


def _ordinal(word: str) -> int | None:
    for suffix in ("st", "nd", "rd", "th"):
        if word.endswith(suffix) and word[: -len(suffix)].isdigit():
            return int(word[: -len(suffix)])
    return int(word) if word.isdigit() else None


def parse_date(text: str) -> str | None:
    """ "YYYY-MM-DD" of 2023年8月15日, 二〇二三年八月十五日, 2023-08-15, 2023/8/15,
    2023.08.15, 15 August 2023, August 15, 2023, Aug. 15th, 2023."""
    folded = fold_width(text).strip()
    if "年" in folded and "月" in folded:
        year_text, _, rest = folded.partition("年")
        month_text, _, day_text = rest.partition("月")
        day_text = day_text.rstrip("日号 ")
        year, month, day = _year(year_text), _small(month_text), _small(day_text)
        if year is None or month is None or day is None:
            return None
        found = _day(year, month, day)
        return found.isoformat() if found else None
    for sep in "-/.":
        parts = folded.split(sep)
        if len(parts) == 3 and all(p.strip().isdigit() for p in parts):
            y, m, d = (p.strip() for p in parts)
            if len(y) != 4 or len(m) > 2 or len(d) > 2:
                return None
            found = _day(int(y), int(m), int(d))
            return found.isoformat() if found else None
    words = [w.lower() for w in _words(folded)]
    if len(words) == 3:
        if words[1] in _MONTHS:  # 15 August 2023
            day_n, month_n, year_w = _ordinal(words[0]), _MONTHS[words[1]], words[2]
        elif words[0] in _MONTHS:  # August 15, 2023
            day_n, month_n, year_w = _ordinal(words[1]), _MONTHS[words[0]], words[2]
        else:
            return None
        if day_n is None or len(year_w) != 4 or not year_w.isdigit():
            return None
        found = _day(int(year_w), month_n, day_n)
        return found.isoformat() if found else None
    return None


def _period(first: date, last: date) -> dict[str, Any]:
    return {"start": first.isoformat(), "end": last.isoformat()}


def _month_period(year: int, month: int) -> dict[str, Any] | None:
    if not 1 <= month <= 12 or _day(year, month, 1) is None:
        return None
    following = date(year + (month == 12), month % 12 + 1, 1)
    return _period(date(year, month, 1), following - timedelta(days=1))


def _quarter_period(year: int, quarter: int) -> dict[str, Any] | None:
    if not 1 <= quarter <= 4 or _day(year, 1, 1) is None:
        return None
    first = _month_period(year, quarter * 3 - 2)
    last = _month_period(year, quarter * 3)
    assert first is not None
    assert last is not None
    return {"start": first["start"], "end": last["end"]}


def _half_period(year: int, half: int) -> dict[str, Any] | None:
    if _day(year, 1, 1) is None:
        return None
    return (
        _period(date(year, 1, 1), date(year, 6, 30))
        if half == 1
        else _period(date(year, 7, 1), date(year, 12, 31))
    )


def _year_period(year: int) -> dict[str, Any] | None:
    return _period(date(year, 1, 1), date(year, 12, 31)) if _day(year, 1, 1) else None


_ORDINAL_WORDS = {"first": 1, "second": 2, "third": 3, "fourth": 4, "1st": 1, "2nd": 2,
                  "3rd": 3, "4th": 4}  # fmt: skip
_RANGE_SEPARATORS = ("/", "至", "到", "~", "～", " to ", " through ", " until ", "–", "—")


def parse_period(text: str) -> dict[str, Any] | None:
    """{"start", "end"} of 2023年第三季度, 2023年Q3, Q3 2023, 2023-Q3, the third quarter of
    2023, 2023年上半年, H1 2023, first half of 2023, 2023年7月, 2023-07, July 2023,
    2023年度, 2023, FY2023, and a range of two dates (2023-07-01/2023-09-30,
    2023年7月1日至2023年9月30日, 1 July 2023 to 30 September 2023)."""
    folded = fold_width(text).strip()
    lower = folded.lower()
    for sep in _RANGE_SEPARATORS:
        if sep in lower:
            head, _, tail = lower.partition(sep)
            start, end = parse_date(head.strip(" 自从起")), parse_date(tail.strip(" 止"))
            if start and end and start <= end:
                return {"start": start, "end": end}
    compact = lower.replace(" ", "")
    words = _words(lower)
    year: int | None = None
    for w in words:
        candidate = w[2:] if w.startswith("fy") else w
        if len(candidate) == 4 and candidate.isdigit():
            year = int(candidate)
    if year is None and "年" in compact:
        year = _year(compact.partition("年")[0])
    if year is None:
        return None
    if "季度" in compact:  # 2023年第三季度, 2023年三季度
        number = compact.partition("年")[2].replace("第", "").partition("季度")[0]
        quarter = _small(number)
        return _quarter_period(year, quarter) if quarter else None
    if "半年" in compact:
        if "上半年" in compact:
            return _half_period(year, 1)
        if "下半年" in compact:
            return _half_period(year, 2)
        return None
    for w in words:
        if len(w) == 2 and w[0] == "q" and w[1] in "1234":
            return _quarter_period(year, int(w[1]))
        if len(w) == 2 and w[0] == "h" and w[1] in "12":
            return _half_period(year, int(w[1]))
    if "quarter" in words:
        for w in words:
            if w in _ORDINAL_WORDS:
                return _quarter_period(year, _ORDINAL_WORDS[w])
        return None
    if "half" in words:
        for w in words:
            if w in ("first", "second"):
                return _half_period(year, 1 if w == "first" else 2)
        return None
    if "月" in compact:  # 2023年7月
        month = _small(compact.partition("年")[2].partition("月")[0])
        return _month_period(year, month) if month else None
    for w in words:
        if w in _MONTHS and len(words) == 2:  # July 2023
            return _month_period(year, _MONTHS[w])
    if len(words) == 2 and words[0] == str(year) and words[1].isdigit() and "-" in lower:
        return _month_period(year, int(words[1]))  # 2023-07
    rest = [w for w in words if w not in (str(year), f"fy{year}", "fy", "fiscal", "year")]
    if not rest and all(c.isascii() or c in "年度" for c in compact):
        return _year_period(year)
    return None


_DURATION_UNITS: tuple[tuple[str, float], ...] = (
    ("个工作日", 1), ("工作日", 1), ("个自然日", 1), ("自然日", 1), ("个日历日", 1),
    ("个星期", 7), ("星期", 7), ("个月", 30), ("个周", 7), ("周", 7), ("天", 1),
    ("日", 1), ("年", 365), ("business days", 1), ("business day", 1),
    ("working days", 1), ("working day", 1), ("calendar days", 1), ("calendar day", 1),
    ("days", 1), ("day", 1), ("weeks", 7), ("week", 7), ("months", 30), ("month", 30),
    ("years", 365), ("year", 365),
)  # fmt: skip


def parse_duration(text: str) -> float | None:
    """Days in 30日, 30天, 三个月, 两周, 半年, 30 days, 2 weeks, three months, 1 year
    (a month counts 30 days, a year 365); a bare number in a query counts days."""
    folded = fold_width(text).strip().lower()
    folded = folded.replace("(", " ").replace(")", " ").strip()
    for unit, days in _DURATION_UNITS:
        if folded.endswith(unit):
            number_text = folded[: -len(unit)].strip().removesuffix("个").strip()
            if number_text in ("半", "a half", "half a"):
                number: float | None = 0.5
            else:
                number_text = number_text.replace("-", " ").split()[-1] if number_text else ""
                number = parse_number(number_text)
            if number is None or number <= 0:
                return None
            return _clean_float(number * days)
    number = parse_number(folded)
    return None if number is None or number < 0 else _clean_float(number)


_LEGAL_SUFFIXES_ZH = ("股份有限公司", "有限责任公司", "有限公司", "集团", "公司")
_LEGAL_SUFFIXES_EN = frozenset(
    {"co", "co.", "ltd", "ltd.", "inc", "inc.", "llc", "l.l.c.", "limited", "corp", "corp.",
     "corporation", "plc", "gmbh", "company"}
)  # fmt: skip
_EDGE_PUNCTUATION = " \t\n\"'“”‘’()（）[]【】《》「」,，.。;；:：、"


def normalise_text(text: str) -> str:
    """Width folded, case folded, runs of space made one, edge punctuation removed."""
    return " ".join(fold_width(text).casefold().split()).strip(_EDGE_PUNCTUATION)


def normalise_organisation(text: str) -> str:
    """An organisation's name for equality: case and spaces folded, full width to half
    width, legal suffixes removed (有限公司, 股份有限公司, 有限责任公司, 集团, Co., Ltd.,
    Inc., LLC, Limited, Corp.)."""
    name = normalise_text(text)
    tokens = name.replace(",", " ").split()
    while len(tokens) > 1 and tokens[-1] in _LEGAL_SUFFIXES_EN:
        tokens.pop()
    name = "".join(tokens).strip(_EDGE_PUNCTUATION)
    changed = True
    while changed:
        changed = False
        for suffix in _LEGAL_SUFFIXES_ZH:
            if name.endswith(suffix) and len(name) > len(suffix):
                name = name[: -len(suffix)].strip(_EDGE_PUNCTUATION)
                changed = True
    return name


def normalise_code(text: str) -> str | None:
    """A contract or reference number: width folded, upper case, no spaces; None without
    a digit (a word, not a number)."""
    code = "".join(fold_width(text).upper().split()).strip(_EDGE_PUNCTUATION)
    return code if any(c.isdigit() for c in code) else None


def normalise_clause(text: str) -> str | None:
    """A clause number: 第八条 -> "8", 第8.2条 -> "8.2", Article 5 -> "5",
    Clause 8.2 -> "8.2", 5.2 -> "5.2"."""
    folded = fold_width(text).strip().rstrip(".、)） ")
    for word in ("article", "clause", "section", "第"):
        if folded.lower().startswith(word):
            folded = folded[len(word) :].strip()
    for end in ("条", "款", "章"):
        folded = folded.removesuffix(end)
    folded = folded.strip()
    if not folded:
        return None
    parts = folded.split(".")
    out = []
    for part in parts:
        if part.isascii() and part.isdigit():
            out.append(str(int(part)))
        else:
            number = chinese_number(part)
            if number is None or number != int(number):
                return None
            out.append(str(int(number)))
    return ".".join(out)


NORMALISERS: dict[str, tuple[str, Callable[[str], EntityValue | None]]] = {
    # name: (the kind it yields, the function)
    "text": ("text", normalise_text),
    "organisation": ("text", normalise_organisation),
    "person": ("text", normalise_text),
    "code": ("text", normalise_code),
    "clause": ("text", normalise_clause),
    "number": ("number", parse_number),
    "percent": ("percent", parse_percent),
    "money": ("money", parse_money),
    "date": ("date", parse_date),
    "period": ("period", parse_period),
    "duration": ("duration", parse_duration),
}


# ---------------------------------------------------------------------------------------
# Entity rules

_RULE_KEYS = frozenset(
    {"name", "field", "kind", "pattern", "normaliser", "language", "ignore_case",
     "not_before", "not_after", "description"}
)  # fmt: skip
_TEMPLATE = r"\{[A-Z][A-Z0-9_]+\}"  # two characters at least: \p{L} is a class
_FIELD_NAME = "^[a-z][a-z0-9_]{0,39}$"
_CONTEXT = 24  # characters around a match that not_before / not_after look at


@dataclass(frozen=True, slots=True)
class RuleLayer:
    """One rule file as read: its templates and rules, each rule with its line."""

    file: str
    templates: Mapping[str, str]
    rules: Sequence[tuple[Mapping[str, Any], int]]


@dataclass(frozen=True, slots=True)
class EntityRule:
    name: str
    field: str
    kind: str
    normaliser: str
    language: str  # zh | en | any
    pattern: LinearPattern
    value_group: int  # the group holding the value (0: the whole match)
    not_before: LinearPattern | None
    not_after: LinearPattern | None
    source: str  # file:line

    def normalise(self, text: str) -> EntityValue | None:
        return NORMALISERS[self.normaliser][1](text)


@dataclass(frozen=True, slots=True)
class EntityRules:
    """Rules in the order they claim text: a span one rule took, a later one skips."""

    rules: tuple[EntityRule, ...]

    def field_kinds(self) -> dict[str, str]:
        """Every field these rules fill, with its kind (and the query alias `party`)."""
        kinds = dict(FIELD_KINDS)
        for rule in self.rules:
            kinds.setdefault(rule.field, rule.kind)
        return kinds

    def normaliser_of(self, field: str) -> str:
        """How a text field's query values are normalised: as its first rule does."""
        if field == "party":
            field = "party_a"
        for rule in self.rules:
            if rule.field == field:
                return rule.normaliser
        return self.field_kinds().get(field, "text")


def _expand(pattern: str, templates: Mapping[str, str], where: str) -> str:
    seen = 0
    template = linear_pattern(_TEMPLATE)
    while (found := template.search(pattern)) is not None:
        name = pattern[found.start() + 1 : found.end() - 1]
        if name not in templates:
            raise ValueError(f"unknown template {{{name}}} {where}")
        pattern = pattern[: found.start()] + templates[name] + pattern[found.end() :]
        seen += 1
        if seen > 200:
            raise ValueError(f"templates nest too deep {where}")
    return pattern


def _compile(pattern: str, ignore_case: bool) -> LinearPattern:
    return LinearPattern(pattern, ignore_case=ignore_case)  # held by its rule, not cached


def compile_entity_rules(layers: Sequence[RuleLayer]) -> EntityRules:
    """Entity rules from their files, the first layer's rules first (an operator's file
    before Mnemo's defaults, so its rules claim text first). A later layer's template of
    the same name gives way to an earlier one's. Refuses a bad rule with
    `EntityRulesInvalid` naming its file, line and rule."""
    templates: dict[str, str] = {}
    for layer in reversed(layers):
        for name, value in layer.templates.items():
            if not isinstance(name, str) or not isinstance(value, str):
                raise EntityRulesInvalid(f"{layer.file}: templates must map names to patterns")
            if linear_pattern("^[A-Z][A-Z0-9_]+$").search(name) is None:
                raise EntityRulesInvalid(
                    f"{layer.file}: template name {name!r} must be upper case (A-Z, 0-9, _)"
                )
            templates[name] = value
    rules: list[EntityRule] = []
    names: set[str] = set()
    kinds: dict[str, str] = dict(FIELD_KINDS)
    for layer in layers:
        for raw, line in layer.rules:
            where = f"{layer.file}:{line}"
            label = raw.get("name") if isinstance(raw, Mapping) else None
            try:
                rule = _rule(raw, templates, where)
            except (ValueError, UnsupportedPattern, TypeError) as exc:
                raise EntityRulesInvalid(f"{where}: rule {label!r}: {exc}") from None
            if rule.name in names:
                raise EntityRulesInvalid(f"{where}: rule {rule.name!r}: the name is taken")
            if kinds.setdefault(rule.field, rule.kind) != rule.kind:
                raise EntityRulesInvalid(
                    f"{where}: rule {rule.name!r}: field {rule.field} is of kind "
                    f"{kinds[rule.field]}, not {rule.kind}"
                )
            names.add(rule.name)
            rules.append(rule)
    return EntityRules(tuple(rules))


def _rule(raw: Any, templates: Mapping[str, str], where: str) -> EntityRule:
    if not isinstance(raw, Mapping):
        raise ValueError("a rule must be a mapping")
    unknown = set(raw) - _RULE_KEYS
    if unknown:
        raise ValueError(f"unknown keys {sorted(unknown)}")
    for key in ("name", "field", "kind", "pattern"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise ValueError(f"{key} is required (a string)")
    name, fld, kind = raw["name"], raw["field"], raw["kind"]
    if linear_pattern(_FIELD_NAME).search(fld) is None:
        raise ValueError(f"field {fld!r} must be lower case letters, digits and _")
    if fld == "party":
        raise ValueError("party is the query alias of party_a and party_b, not a field")
    if kind not in KINDS:
        raise ValueError(f"kind {kind!r} is not one of {', '.join(KINDS)}")
    normaliser = raw.get("normaliser", kind)
    if normaliser not in NORMALISERS:
        raise ValueError(f"normaliser {normaliser!r} is not one of {', '.join(NORMALISERS)}")
    if NORMALISERS[normaliser][0] != kind:
        raise ValueError(f"normaliser {normaliser} yields {NORMALISERS[normaliser][0]}, not {kind}")
    language = raw.get("language", "any")
    if language not in ("zh", "en", "any"):
        raise ValueError("language must be zh, en or any")
    ignore_case = raw.get("ignore_case", False)
    if not isinstance(ignore_case, bool):
        raise ValueError("ignore_case must be true or false")
    pattern = _compile(_expand(raw["pattern"], templates, "in pattern"), ignore_case)
    value_group = pattern.groupindex.get("value", 0)
    context: dict[str, LinearPattern | None] = {}
    for key, anchor in (("not_before", "$"), ("not_after", "^")):
        value = raw.get(key)
        if value is None:
            context[key] = None
            continue
        if not isinstance(value, str):
            raise ValueError(f"{key} must be a pattern")
        body = _expand(value, templates, f"in {key}")
        body = f"(?:{body}){anchor}" if anchor == "$" else f"^(?:{body})"
        context[key] = _compile(body, ignore_case)
    return EntityRule(
        name=name,
        field=fld,
        kind=kind,
        normaliser=normaliser,
        language=language,
        pattern=pattern,
        value_group=value_group,
        not_before=context["not_before"],
        not_after=context["not_after"],
        source=where,
    )


def extract_entities(
    section_text: str, *, language: Language | str, rules: EntityRules
) -> tuple[Entity, ...]:
    """The entities of one section's text, ordered by position. A rule applies when its
    language is `any` or the text's (both for `mixed`); a span an earlier rule took is not
    read again, so "签订日期：2023年8月15日" is a signed_at and not also a date."""
    folded = fold_width(section_text)
    claimed: list[tuple[int, int]] = []
    found: list[Entity] = []
    for rule in rules.rules:
        if rule.language != "any" and language != "mixed" and rule.language != language:
            continue
        for match in rule.pattern.finditer(folded):
            start, end = match.start(rule.value_group), match.end(rule.value_group)
            if start < 0 or end <= start:
                continue
            if any(start < e and s < end for s, e in claimed):
                continue
            if rule.not_before is not None and rule.not_before.search(
                folded[max(0, start - _CONTEXT) : start]
            ):
                continue
            if rule.not_after is not None and rule.not_after.search(folded[end : end + _CONTEXT]):
                continue
            value = rule.normalise(folded[start:end])
            if value is None or value == "":
                continue
            claimed.append((start, end))
            found.append(Entity(rule.field, rule.kind, value, section_text[start:end], start, end))
    found.sort(key=lambda e: (e.start, e.end, e.field))
    return tuple(found)


# ---------------------------------------------------------------------------------------
# The value side of structured queries: a filter's value parsed for its field's kind, and
# an entity's value compared with it


@dataclass(frozen=True, slots=True)
class Condition:
    """One filter, checked: its field, the field's kind, the op and the parsed value (a
    list for `in`, a (low, high) pair for `between`, a period for `within`)."""

    field: str
    kind: str
    op: str
    value: Any

    def matches(self, entity: Entity) -> bool:
        """Whether this entity meets the condition (its field, then its value)."""
        if self.field == "party":
            if entity.field not in ("party_a", "party_b"):
                return False
        elif entity.field != self.field:
            return False
        return compare(self.kind, self.op, entity.value, self.value)


def parse_condition(
    field: Any, op: Any, value: Any, *, rules: EntityRules, path: str = "where[0]"
) -> Condition:
    """A filter checked and its value parsed for its field's kind; `QUERY_INVALID` naming
    `path.field`, `path.op` or `path.value` when the field is unknown, the op is not one
    of its kind's, or the value does not parse."""
    kinds = rules.field_kinds()
    if not isinstance(field, str) or field not in kinds:
        raise _query_invalid(f"{path}.field", f"unknown field {field!r}")
    kind = kinds[field]
    if not isinstance(op, str) or op not in OPS_BY_KIND[kind]:
        allowed = ", ".join(sorted(OPS_BY_KIND[kind]))
        raise _query_invalid(f"{path}.op", f"{field} is {kind}: its ops are {allowed}")
    where = f"{path}.value"
    if op == "in":
        if not isinstance(value, list) or not value or len(value) > 1_000:
            raise _query_invalid(where, "in takes a list of 1 to 1000 values")
        parsed: Any = [
            parse_value(field, kind, "eq", item, rules=rules, path=f"{where}[{i}]")
            for i, item in enumerate(value)
        ]
    elif op == "between":
        if not isinstance(value, list) or len(value) != 2:
            raise _query_invalid(where, "between takes [low, high]")
        low = parse_value(field, kind, "gte", value[0], rules=rules, path=f"{where}[0]")
        high = parse_value(field, kind, "lte", value[1], rules=rules, path=f"{where}[1]")
        if kind == "money" and low["currency"] != high["currency"]:
            raise _query_invalid(where, "between needs one currency")
        if _order_key(kind, low) > _order_key(kind, high):
            raise _query_invalid(where, "between needs low <= high")
        parsed = (low, high)
    else:
        parsed = parse_value(field, kind, op, value, rules=rules, path=where)
    return Condition(field, kind, op, parsed)


def parse_value(
    field: str, kind: str, op: str, value: Any, *, rules: EntityRules, path: str
) -> Any:
    """One filter value for a field of `kind`: "5%" or 0.05 for a percent,
    {"amount": 500000, "currency": "CNY"} or "50万元" for money, "2023-Q3" or
    "2023年第三季度" for a period (and for a date with `within`), and so on."""
    if isinstance(value, bool) or value is None:
        raise _query_invalid(path, f"{field} needs a {kind} value")
    parsed: Any = None
    if op == "within" or (kind == "period" and op != "contains"):
        parsed = parse_period(value) if isinstance(value, str) else None
        if parsed is None:
            raise _query_invalid(path, f"{value!r} is not a period (2023, 2023-Q3, 2023-07, ...)")
        return parsed
    if kind == "period":  # contains: a date or a period
        if isinstance(value, str):
            day = parse_date(value)
            parsed = {"start": day, "end": day} if day else parse_period(value)
        if parsed is None:
            raise _query_invalid(path, f"{value!r} is neither a date nor a period")
        return parsed
    if kind == "text":
        if isinstance(value, int | float):
            value = str(value)
        if not isinstance(value, str) or not value.strip() or len(value) > 1_000:
            raise _query_invalid(path, f"{field} needs a text value (1 to 1000 characters)")
        normaliser = rules.normaliser_of(field)
        function = NORMALISERS.get(normaliser, NORMALISERS["text"])[1]
        parsed = function(value) if NORMALISERS.get(normaliser, ("",))[0] == "text" else None
        if not parsed:
            parsed = normalise_text(value)
        if not parsed:
            raise _query_invalid(path, f"{value!r} is empty once normalised")
        return parsed
    if kind == "money":
        parsed = _money_value(value, path)
    elif kind in ("number", "percent", "duration"):
        if isinstance(value, int | float):
            parsed = float(value) if math.isfinite(value) else None
        elif isinstance(value, str):
            parser = {"number": parse_number, "percent": parse_percent,
                      "duration": parse_duration}[kind]  # fmt: skip
            parsed = parser(value)
            if parsed is None and kind == "percent":
                parsed = parse_number(value)  # "0.05"
    elif kind == "date":
        parsed = parse_date(value) if isinstance(value, str) else None
    if parsed is None:
        raise _query_invalid(path, f"{value!r} is not a {kind} value")
    return parsed


def _money_value(value: Any, path: str) -> dict[str, Any] | None:
    if isinstance(value, str):
        return parse_money(value)
    if not isinstance(value, Mapping):
        raise _query_invalid(path, 'money is {"amount": 500000, "currency": "CNY"} or "50万元"')
    unknown = set(value) - {"amount", "currency"}
    if unknown:
        raise _query_invalid(f"{path}.{sorted(unknown)[0]}", "money has amount and currency")
    amount = value.get("amount")
    if isinstance(amount, bool) or not isinstance(amount, int | float | str):
        raise _query_invalid(f"{path}.amount", "amount must be a number")
    number = float(amount) if isinstance(amount, int | float) else parse_number(amount)
    if number is None or not math.isfinite(number):
        raise _query_invalid(f"{path}.amount", f"{amount!r} is not a number")
    currency = value.get("currency")
    if not isinstance(currency, str) or currency.upper() not in CURRENCY_CODES:
        codes = ", ".join(sorted(CURRENCY_CODES))
        raise _query_invalid(f"{path}.currency", f"currency must be one of {codes}")
    return {"amount": float(number), "currency": currency.upper()}


def _order_key(kind: str, value: Any) -> Any:
    if kind == "money":
        return value["amount"]
    if kind == "period":
        return value["start"]
    return value


_EPSILON = 1e-9


def _equal(kind: str, held: Any, wanted: Any) -> bool:
    if kind == "money":
        return bool(
            held["currency"] == wanted["currency"]
            and abs(held["amount"] - wanted["amount"]) <= _EPSILON * max(1.0, abs(held["amount"]))
        )
    if kind in ("number", "percent", "duration"):
        return abs(float(held) - float(wanted)) <= _EPSILON * max(1.0, abs(float(held)))
    if kind == "period":
        return bool(held["start"] == wanted["start"] and held["end"] == wanted["end"])
    return bool(held == wanted)


def compare(kind: str, op: str, held: EntityValue, wanted: Any) -> bool:
    """Whether an entity's value `held` meets `op` against a parsed filter value. Money
    compares only within one currency: another currency meets no op, ne included."""
    if kind == "money":
        if not isinstance(held, Mapping):
            return False
        currencies = (
            {w["currency"] for w in wanted}
            if op == "in"
            else {wanted[0]["currency"]}
            if op == "between"
            else {wanted["currency"]}
        )
        if held["currency"] not in currencies:
            return False
    if op == "eq":
        return _equal(kind, held, wanted)
    if op == "ne":
        return not _equal(kind, held, wanted)
    if op == "in":
        return any(_equal(kind, held, w) for w in wanted)
    if op == "contains":
        if kind == "period":
            assert isinstance(held, Mapping)
            return bool(held["start"] <= wanted["start"] and wanted["end"] <= held["end"])
        return isinstance(held, str) and wanted in held
    if op == "within":
        if kind == "period":
            assert isinstance(held, Mapping)
            return bool(wanted["start"] <= held["start"] and held["end"] <= wanted["end"])
        return isinstance(held, str) and wanted["start"] <= held <= wanted["end"]
    key = _order_key(kind, held)
    if op == "between":
        low, high = wanted
        return bool(_order_key(kind, low) <= key <= _order_key(kind, high)) or (
            _equal(kind, held, low) or _equal(kind, held, high)
        )
    bound = _order_key(kind, wanted)
    if op == "gt":
        return bool(key > bound) and not _equal(kind, held, wanted)
    if op == "gte":
        return bool(key >= bound) or _equal(kind, held, wanted)
    if op == "lt":
        return bool(key < bound) and not _equal(kind, held, wanted)
    if op == "lte":
        return bool(key <= bound) or _equal(kind, held, wanted)
    raise ValueError(f"unknown op {op}")
