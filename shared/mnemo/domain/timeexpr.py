"""Relative time expressions ("yesterday", "last week", "昨天", "上周", "two days ago", "last
Saturday") resolved to the calendar days, months or years they name, counted from a moment
(when a turn was said, or a query's as_of) in a time zone.

Only expressions whose meaning is fixed by that moment are resolved; "on Saturday" (this
one or the next?), "recently" or "a few days ago" are left alone. A week runs Monday to
Sunday (ISO 8601), as in the calendars of both languages covered.

Each span is returned as (first day, last day, granularity): "days" (one day, a weekend or
a week), a month or a year; `keywords.span_terms` turns spans into keyword terms.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, tzinfo
from datetime import timezone as dt_timezone
from typing import Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

__all__ = ["Span", "Zone", "local_day", "query_zone", "resolve", "zone_of"]

Granularity = Literal["days", "month", "year"]
# An IANA zone name, a tzinfo (a fixed UTC offset such as a request's as_of carries), or
# None for UTC.
Zone = str | tzinfo | None


@dataclass(frozen=True, slots=True)
class Span:
    first: date
    last: date
    granularity: Granularity


_OFFSET_NAME = re.compile(r"^([+-])(\d{2}):?(\d{2})$")
# names the zone database carries that are not places: aliases of the machine's own
# setting, or the same zones again under other rules
_NOT_PLACES = ("localtime", "posixrules", "Factory")
_NOT_PLACE_PREFIXES = ("posix/", "right/")


def _load_zone(name: str) -> ZoneInfo | None:
    """The IANA zone of that name, None when this machine cannot load one: an unknown or
    malformed name, and also a name of a directory of the zone database ("America"),
    which the loader answers with an OSError rather than a not-found."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, OSError):
        return None


def zone_name_error(name: str) -> str | None:
    """Why `name` is not a time zone Mnemo reads (None when it is): an IANA zone name, or
    a UTC offset such as +08:00 within -12:00 to +14:00 with minutes under 60. The reason
    never quotes the name: a zone is the user's (it is sealed in the log), and the reason
    may travel where the user's words may not (a dead letter)."""
    offset = _OFFSET_NAME.fullmatch(name)
    if offset is not None:
        sign, hours, minutes = offset.group(1), int(offset.group(2)), int(offset.group(3))
        if minutes >= 60 or hours > (14 if sign == "+" else 12) or (hours in (12, 14) and minutes):
            return "the UTC offset is out of range (-12:00 to +14:00, minutes under 60)"
        return None
    if name in _NOT_PLACES or name.startswith(_NOT_PLACE_PREFIXES):
        return "not an IANA zone name of a place, such as Asia/Shanghai"
    if _load_zone(name) is None:
        return (
            "unknown time zone: give an IANA name such as Asia/Shanghai or an offset such as +08:00"
        )
    return None


def zone_of(timezone: Zone) -> tzinfo:
    """An IANA time zone or a UTC offset such as +08:00 (a tzinfo as it is), or UTC when
    none is given or this machine does not know it."""
    if isinstance(timezone, tzinfo):
        return timezone
    if timezone:
        offset = _OFFSET_NAME.fullmatch(timezone)
        if offset is not None:
            if zone_name_error(timezone) is not None:
                return UTC
            sign = 1 if offset.group(1) == "+" else -1
            hours, minutes = int(offset.group(2)), int(offset.group(3))
            return dt_timezone(sign * timedelta(hours=hours, minutes=minutes))
        return _load_zone(timezone) or UTC
    return UTC


def seen_in(at: datetime, timezone: Zone = None) -> datetime:
    """`at` on the wall clock of the given zone; with none, at the UTC offset `at` carries
    (a turn said at 00:30+08:00 was said on that day, not on UTC's day before); UTC when
    `at` carries none."""
    if at.tzinfo is None:
        at = at.replace(tzinfo=UTC)
    return at if timezone is None else at.astimezone(zone_of(timezone))


def query_zone(timezone: str | None, as_of: datetime | None) -> Zone:
    """The zone a query's time expressions are read in: the named IANA zone, else the UTC
    offset of the query's as_of when it carries one, else None (UTC). A name this machine
    does not know raises ValueError (the caller reports it)."""
    if timezone is not None:
        zone = _load_zone(timezone)
        if zone is None:
            raise ValueError(f"unknown time zone {timezone!r}")
        return zone
    if as_of is not None and as_of.utcoffset() is not None:
        return as_of.tzinfo
    return None


def local_day(at: datetime, timezone: Zone = None) -> date:
    """The calendar day of `at` in the given time zone, else at the offset `at` carries
    (UTC when `at` is naive)."""
    return seen_in(at, timezone).date()


_NUMBERS = {
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
    "eleven": 11,
    "twelve": 12,
}
_WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
_ZH_NUMBERS = dict(zip("一二三四五六七八九十", range(1, 11), strict=True)) | {"两": 2}
_ZH_WEEKDAYS = {"一": 0, "二": 1, "三": 2, "四": 3, "五": 4, "六": 5, "日": 6, "天": 6}
_MAX_AGO = 400  # "N days ago" beyond this many days is left alone

_EN = re.compile(
    r"\b(?:"
    r"(?P<dby>the\s+day\s+before\s+yesterday)"
    r"|(?P<dat>the\s+day\s+after\s+tomorrow)"
    r"|(?P<yesterday>yesterday)"
    r"|(?P<today>today|tonight|this\s+(?:morning|afternoon|evening))"
    r"|(?P<lastnight>last\s+night)"
    r"|(?P<tomorrow>tomorrow)"
    r"|(?P<ago>(?P<n>\d{1,3}|an?|one|two|three|four|five|six|seven|eight|nine|ten|eleven|twelve)"
    r"\s+(?P<unit>day|week|month|year)s?\s+ago)"
    r"|last\s+(?P<lastday>" + "|".join(_WEEKDAYS) + r")"
    r"|(?P<lastweekend>last\s+weekend)"
    r"|(?P<thisweekend>this\s+weekend)"
    r"|(?P<lastunit>last|this|next)\s+(?P<lunit>week|month|year)"
    r")\b",
    re.IGNORECASE,
)
_ZH_NUM = "[一二两三四五六七八九]?十[一二三四五六七八九]?|[一二两三四五六七八九]|\\d{1,3}"
_ZH = re.compile(
    r"(?P<dby>大前天)|(?P<dbefore>前天)|(?P<yesterday>昨天|昨日|昨晚|昨夜)"
    r"|(?P<today>今天|今日|今晚|今早|今夜)|(?P<dat>大后天)|(?P<dafter>后天)|(?P<tomorrow>明天|明日|明晚)"
    r"|(?:上个?(?:周|星期|礼拜))(?P<lastday>[一二三四五六日天])(?![起样直些下点次切])"
    r"|(?P<lastweekend>上个?周末)"
    r"|(?P<lastweek>上个?(?:周|星期|礼拜))"
    r"|(?P<thisweek>这个?(?:周|星期|礼拜)|本周)"
    r"|(?P<nextweek>下个?(?:周|星期|礼拜))"
    r"|(?P<lastmonth>上个?月)|(?P<thismonth>这个月|本月)|(?P<nextmonth>下个?月)"
    r"|(?P<lastyear2>前年)|(?P<lastyear>去年)|(?P<thisyear>今年)|(?P<nextyear>明年)"
    r"|(?P<ago>(?P<n>" + _ZH_NUM + r")\s*"
    r"(?P<unit>天|日|周|个星期|星期|个礼拜|个月|年)(?:以前|之前|前))"
)


def _zh_number(text: str) -> int:
    """A number written in digits or in Chinese numerals up to 99 (三, 十五, 二十)."""
    if text.isdigit():
        return int(text)
    tens, ten, ones = text.rpartition("十")
    if not ten:
        return _ZH_NUMBERS[text]
    return _ZH_NUMBERS.get(tens, 1) * 10 + _ZH_NUMBERS.get(ones, 0)


_ZH_NUMERAL = "一二三四五六七八九十"
_ZH_DATE = re.compile(
    rf"(?:(\d{{4}})\s*年\s*)?(?<![\d{_ZH_NUMERAL}个])([{_ZH_NUMERAL}]{{1,3}}|\d{{1,2}})\s*月"
    rf"(?:\s*([{_ZH_NUMERAL}]{{1,3}}|\d{{1,2}})\s*[日号])?"
)


def written_dates(text: str) -> list[tuple[int | None, int, int | None]]:
    """The calendar dates written out in Chinese (2026年11月20日, 11月19号, 十一月): each as
    (year or None, month, day or None), first first, without repeats."""
    found: list[tuple[int | None, int, int | None]] = []
    for m in _ZH_DATE.finditer(text):
        try:
            month = _zh_number(m.group(2))
            day = _zh_number(m.group(3)) if m.group(3) else None
        except KeyError:
            continue
        if not 1 <= month <= 12 or (day is not None and not 1 <= day <= 31):
            continue
        written = (int(m.group(1)) if m.group(1) else None, month, day)
        if written not in found:
            found.append(written)
    return found


def _day(d: date) -> Span:
    return Span(d, d, "days")


def _week(d: date, offset: int) -> Span:
    monday = d - timedelta(days=d.weekday()) + timedelta(weeks=offset)
    return Span(monday, monday + timedelta(days=6), "days")


def _month(d: date, offset: int) -> Span:
    index = d.year * 12 + d.month - 1 + offset
    year, month = divmod(index, 12)
    first = date(year, month + 1, 1)
    following = date(year + (month + 1) // 12, (month + 1) % 12 + 1, 1)
    return Span(first, following - timedelta(days=1), "month")


def _year(d: date, offset: int) -> Span:
    year = d.year + offset
    return Span(date(year, 1, 1), date(year, 12, 31), "year")


def _last_weekday(d: date, weekday: int) -> Span:
    """The latest `weekday` strictly before day d ("last Saturday" said on a Saturday is a
    week before)."""
    back = (d.weekday() - weekday) % 7 or 7
    return _day(d - timedelta(days=back))


def _last_weekend(d: date) -> Span:
    """The Saturday and Sunday before the week of day d (said on a Sunday: the one before)."""
    saturday = d - timedelta(days=d.weekday() + 2)
    return Span(saturday, saturday + timedelta(days=1), "days")


def _ago(d: date, n: int, unit: str) -> Span | None:
    if n <= 0:
        return None
    if unit in ("day", "天", "日"):
        return _day(d - timedelta(days=n)) if n <= _MAX_AGO else None
    if unit in ("week", "周", "个星期", "星期", "个礼拜"):
        return _week(d, -n) if n * 7 <= _MAX_AGO else None
    if unit in ("month", "个月"):
        return _month(d, -n) if n <= 24 else None
    return _year(d, -n) if n <= 50 else None


def _english(match: re.Match[str], d: date) -> Span | None:
    g = match.groupdict()
    if g["dby"]:
        return _day(d - timedelta(days=2))
    if g["dat"]:
        return _day(d + timedelta(days=2))
    if g["yesterday"] or g["lastnight"]:
        return _day(d - timedelta(days=1))
    if g["today"]:
        return _day(d)
    if g["tomorrow"]:
        return _day(d + timedelta(days=1))
    if g["ago"]:
        n = g["n"].lower()
        return _ago(d, int(n) if n.isdigit() else _NUMBERS[n], g["unit"].lower())
    if g["lastday"]:
        return _last_weekday(d, _WEEKDAYS.index(g["lastday"].lower()))
    if g["lastweekend"]:
        return _last_weekend(d)
    if g["thisweekend"]:
        saturday = d + timedelta(days=5 - d.weekday())
        return Span(saturday, saturday + timedelta(days=1), "days")
    offset = {"last": -1, "this": 0, "next": 1}[g["lastunit"].lower()]
    unit = g["lunit"].lower()
    if unit == "week":
        return _week(d, offset)
    if unit == "month":
        return _month(d, offset)
    return _year(d, offset)


def _chinese(match: re.Match[str], d: date) -> Span | None:
    g = match.groupdict()
    days = {"dby": -3, "dbefore": -2, "yesterday": -1, "today": 0, "tomorrow": 1, "dafter": 2}
    for name, offset in days.items():
        if g[name]:
            return _day(d + timedelta(days=offset))
    if g["dat"]:
        return _day(d + timedelta(days=3))
    if g["lastday"]:
        monday = d - timedelta(days=d.weekday() + 7)
        return _day(monday + timedelta(days=_ZH_WEEKDAYS[g["lastday"]]))
    if g["lastweekend"]:
        return _last_weekend(d)
    weeks = {"lastweek": -1, "thisweek": 0, "nextweek": 1}
    for name, offset in weeks.items():
        if g[name]:
            return _week(d, offset)
    months = {"lastmonth": -1, "thismonth": 0, "nextmonth": 1}
    for name, offset in months.items():
        if g[name]:
            return _month(d, offset)
    years = {"lastyear2": -2, "lastyear": -1, "thisyear": 0, "nextyear": 1}
    for name, offset in years.items():
        if g[name]:
            return _year(d, offset)
    return _ago(d, _zh_number(g["n"]), g["unit"])


MAX_SPANS = 8


def resolve(text: str, at: datetime, timezone: Zone = None) -> list[Span]:
    """The spans the text's relative time expressions name, counted from `at` in the
    given time zone (UTC when none), first occurrence first, without repeats, at most
    MAX_SPANS."""
    try:
        day = local_day(at, timezone)
    except OverflowError:  # an instant at the calendar's edge has no local day to count from
        return []
    found: list[Span] = []
    matches = sorted(
        [(m.start(), m, _english) for m in _EN.finditer(text)]
        + [(m.start(), m, _chinese) for m in _ZH.finditer(text)],
        key=lambda item: item[0],
    )
    for _, match, read in matches:
        try:
            span = read(match, day)
        except (OverflowError, ValueError):  # a day before year 1 or after 9999: none
            span = None
        if span is not None and span not in found:
            found.append(span)
        if len(found) >= MAX_SPANS:
            break
    return found
