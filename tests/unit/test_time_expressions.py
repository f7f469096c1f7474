"""Relative time expressions resolved against when a turn was said or a query's as_of:
English and Chinese, month and year rollovers, time zones, and the keyword terms they
add to a history turn and to a query."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta, timezone
from zoneinfo import ZoneInfo

import pytest

from mnemo.adapters.clocks import FixedClock
from mnemo.bootstrap import Platform
from mnemo.domain.errors import InvalidInput
from mnemo.domain.keywords import history_terms, query_vector, span_terms, term_id
from mnemo.domain.timeexpr import Span, Zone, query_zone, resolve
from mnemo.service.app import RequestContext
from mnemo.service.context import ContextRequest

CTX = RequestContext("acme", "agent-1")
MONDAY = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)  # Monday 8 May 2023


def _days(text: str, at: datetime = MONDAY, zone: Zone = None) -> list[date]:
    spans = resolve(text, at, zone)
    assert len(spans) == 1, spans
    span = spans[0]
    assert span.granularity == "days"
    return [date.fromordinal(o) for o in range(span.first.toordinal(), span.last.toordinal() + 1)]


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("I went to the support group yesterday", date(2023, 5, 7)),
        ("我昨天去了支持小组", date(2023, 5, 7)),
        ("Today I painted a sunrise", date(2023, 5, 8)),
        ("今天我画了日出", date(2023, 5, 8)),
        ("we fly out tomorrow", date(2023, 5, 9)),
        ("明天出发", date(2023, 5, 9)),
        ("the day before yesterday", date(2023, 5, 6)),
        ("前天", date(2023, 5, 6)),
        ("大前天", date(2023, 5, 5)),
        ("two days ago", date(2023, 5, 6)),
        ("3 days ago", date(2023, 5, 5)),
        ("三天前", date(2023, 5, 5)),
        ("二十天前", date(2023, 4, 18)),  # across the month
        ("last Saturday was fun", date(2023, 5, 6)),
        ("last Monday", date(2023, 5, 1)),  # said on a Monday: the one a week before
        ("上周六我们去露营了", date(2023, 5, 6)),
        ("上星期一", date(2023, 5, 1)),
        ("last night", date(2023, 5, 7)),
        ("昨晚", date(2023, 5, 7)),
    ],
)
def test_a_day_is_counted_from_when_it_was_said(text: str, want: date) -> None:
    assert _days(text) == [want]


def test_last_week_is_the_monday_to_sunday_before() -> None:
    week = [date(2023, 5, 1) + timedelta(days=i) for i in range(7)]
    assert _days("I finished it last week") == week
    assert _days("我上周读完了") == week
    assert _days("上个星期") == week
    assert _days("上周末") == _days("last weekend") == [date(2023, 5, 6), date(2023, 5, 7)]
    assert _days("a week ago") == week
    # "上周一起" is "together last week", not last Monday
    assert _days("我们上周一起去的") == week


def test_months_and_years() -> None:
    assert resolve("last month", MONDAY) == [Span(date(2023, 4, 1), date(2023, 4, 30), "month")]
    assert resolve("上个月", MONDAY) == resolve("a month ago", MONDAY)
    assert resolve("去年", MONDAY) == [Span(date(2022, 1, 1), date(2022, 12, 31), "year")]
    assert resolve("two years ago", MONDAY) == resolve("前年", MONDAY)
    assert resolve("两年前", MONDAY) == resolve("前年", MONDAY)


def test_rollover_across_months_and_years() -> None:
    new_year = datetime(2024, 1, 1, 9, 0, tzinfo=UTC)  # a Monday
    assert _days("yesterday", new_year) == [date(2023, 12, 31)]
    assert _days("昨天", new_year) == [date(2023, 12, 31)]
    assert _days("last week", new_year) == [date(2023, 12, 25) + timedelta(i) for i in range(7)]
    assert resolve("last month", new_year)[0].first == date(2023, 12, 1)
    assert resolve("上个月", new_year)[0].last == date(2023, 12, 31)
    assert resolve("去年", new_year)[0].first == date(2023, 1, 1)
    leap = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
    assert _days("yesterday", leap) == [date(2024, 2, 29)]
    assert _days("两天前", leap) == [date(2024, 2, 28)]
    assert resolve("a month ago", leap)[0] == Span(date(2024, 2, 1), date(2024, 2, 29), "month")
    # a week that spans two months and two years: both months' and years' terms
    # (Monday 30 December 2024 to Sunday 5 January 2025)
    terms = span_terms(resolve("上周", datetime(2025, 1, 8, tzinfo=UTC)))
    assert set(terms) == {"30", "31", "1", "2", "3", "4", "5", "decemb", "januari", "2024", "2025"}


def test_the_day_is_the_one_in_the_given_time_zone() -> None:
    late = datetime(2023, 5, 8, 20, 30, tzinfo=UTC)  # already 9 May in Tokyo
    assert _days("yesterday", late) == [date(2023, 5, 7)]
    assert _days("yesterday", late, "Asia/Tokyo") == [date(2023, 5, 8)]
    assert _days("昨天", late, "Asia/Shanghai") == [date(2023, 5, 8)]
    early = datetime(2023, 5, 9, 3, 0, tzinfo=UTC)  # still 8 May in Los Angeles
    assert _days("yesterday", early, "America/Los_Angeles") == [date(2023, 5, 7)]
    assert _days("yesterday", early, "Not/AZone") == [date(2023, 5, 8)]  # unknown: UTC
    # the first of the month in UTC, still the last day of the month before in New York
    assert _days("today", datetime(2023, 6, 1, 2, 0, tzinfo=UTC), "America/New_York") == [
        date(2023, 5, 31)
    ]


def test_what_is_not_fixed_by_the_moment_is_left_alone() -> None:
    for text in ("on Saturday", "a few days ago", "recently", "几天前", "the last time", "周末"):
        assert resolve(text, MONDAY) == [], text


def test_a_history_turn_carries_the_days_it_speaks_of() -> None:
    terms = history_terms("Caroline: I went to the support group yesterday", MONDAY)
    assert terms == ["8", "may", "2023", "7"]  # its own day, then the day it names
    assert history_terms("我昨天去了", MONDAY, "Asia/Shanghai") == ["8", "may", "2023", "7"]
    assert history_terms("no time words here", MONDAY) == ["8", "may", "2023"]


def test_a_query_resolves_its_expressions_against_its_as_of() -> None:
    plain = set(query_vector("what did I adopt yesterday").indices)
    dated = set(query_vector("what did I adopt yesterday", MONDAY).indices)
    assert dated - plain == {term_id("7"), term_id("may"), term_id("2023")}
    zh = set(query_vector("我昨天做了什么", MONDAY, "Asia/Tokyo").indices)
    assert {term_id("7"), term_id("may"), term_id("2023")} <= zh


def _say(platform: Platform, turns: list[tuple[datetime, str]]) -> None:
    platform.app.publish(
        CTX,
        [
            {
                "type": "MemoryDeclared",
                "schema_version": 1,
                "stream": "user:U1",
                "occurred_at": at.isoformat(),
                "payload": {"memory": {"type": "history", "scope": "user", "content": text}},
            }
            for at, text in turns
        ],
    )
    platform.runner.drain()


def test_a_turn_is_found_by_the_day_it_spoke_of(platform: Platform) -> None:
    turns = [
        (MONDAY, "Caroline: I went hiking by the lake yesterday"),
        (MONDAY + timedelta(days=1), "Caroline: I went hiking in the hills"),
        (MONDAY - timedelta(days=20), "Caroline: I went hiking on the coast"),
    ]
    _say(platform, turns)
    hits = platform.app.search(CTX, "hiking on 7 May 2023", streams=["user:U1"])
    assert hits[0].memory.content == turns[0][1]


def test_a_query_says_yesterday_from_its_as_of(platform: Platform, clock: FixedClock) -> None:
    day = datetime(2023, 5, 8, 10, 0, tzinfo=UTC)
    turns = [
        (day - timedelta(days=3), "Caroline: we cooked pasta for dinner"),
        (day - timedelta(days=1), "Caroline: we cooked a curry for dinner"),
        (day - timedelta(days=9), "Caroline: we cooked soup for dinner"),
    ]
    _say(platform, turns)
    clock.set(day)
    hits = platform.app.search(CTX, "what did we cook yesterday", streams=["user:U1"])
    assert hits[0].memory.content == turns[1][1]
    hits = platform.app.search(CTX, "what did we cook three days ago", streams=["user:U1"])
    assert hits[0].memory.content == turns[0][1]


# 23:30 on Saturday 1 March 2025 in Los Angeles: already 07:30 on Sunday 2 March in UTC
LATE_LOCAL = datetime(2025, 3, 1, 23, 30, tzinfo=ZoneInfo("America/Los_Angeles"))
COOKED = [
    (datetime(2025, 2, 28, 20, 0, tzinfo=UTC), "Maya: we cooked a curry for dinner"),  # local 28th
    (datetime(2025, 3, 1, 20, 0, tzinfo=UTC), "Maya: we cooked pasta for dinner"),  # local 1st
    (datetime(2025, 2, 20, 20, 0, tzinfo=UTC), "Maya: we cooked soup for dinner"),
]


def test_a_query_zone_is_its_named_zone_else_its_as_of_offset_else_utc() -> None:
    offset = datetime(2025, 3, 1, 23, 30, tzinfo=timezone(timedelta(hours=-8)))
    assert query_zone("Asia/Shanghai", offset) == ZoneInfo("Asia/Shanghai")  # the name wins
    assert query_zone(None, offset) == timezone(timedelta(hours=-8))
    assert query_zone(None, datetime(2025, 3, 2, 7, 30, tzinfo=UTC)) == UTC
    assert query_zone(None, None) is None
    # "America" names a directory of the zone database: the loader raises an OSError
    for bad in ("Not/AZone", "+08:00", "../etc/passwd", "", "America", "Etc"):
        with pytest.raises(ValueError, match="unknown time zone"):
            query_zone(bad, offset)
    # yesterday, read at 23:30 local with the as_of's offset: the 28th, not the UTC 1st
    assert _days("yesterday", offset, query_zone(None, offset)) == [date(2025, 2, 28)]
    # no zone: the offset the instant carries; an instant in UTC: UTC's yesterday
    assert _days("昨天", offset) == [date(2025, 2, 28)]
    assert _days("昨天", offset.astimezone(UTC)) == [date(2025, 3, 1)]


def test_search_and_context_read_yesterday_in_the_requests_time_zone(
    platform: Platform, clock: FixedClock
) -> None:
    clock.set(LATE_LOCAL.astimezone(UTC))
    _say(platform, COOKED)
    query = "what did we cook yesterday"

    def top_search(zone: str | None) -> str:
        hits = platform.app.search(CTX, query, streams=["user:U1"], timezone=zone)
        return hits[0].memory.content

    def top_context(as_of: datetime, zone: str | None = None) -> str:
        request = ContextRequest(
            subjects=("user:U1",), query=query, as_of=as_of, timezone=zone, template="default"
        )
        ranked = platform.app.context(CTX, request).assembly.included
        history = [i for i in ranked if i.candidate.memory.type.value == "history"]
        return max(history, key=lambda i: i.candidate.relevance).candidate.memory.content

    assert top_search("America/Los_Angeles") == COOKED[0][1]  # the user's yesterday
    assert top_search(None) == COOKED[1][1]  # UTC's yesterday: the 1st
    assert top_context(LATE_LOCAL) == COOKED[0][1]  # as_of's own offset
    assert top_context(LATE_LOCAL.astimezone(UTC)) == COOKED[1][1]
    assert top_context(LATE_LOCAL.astimezone(UTC), "America/Los_Angeles") == COOKED[0][1]
    with pytest.raises(InvalidInput) as caught:
        platform.app.search(CTX, query, streams=["user:U1"], timezone="Mars/Olympus")
    assert (caught.value.code, caught.value.field) == ("INVALID_TIMEZONE", "timezone")
    with pytest.raises(InvalidInput) as caught:
        platform.app.context(
            CTX, ContextRequest(subjects=("user:U1",), query=query, timezone="Mars/Olympus")
        )
    assert caught.value.code == "INVALID_TIMEZONE"


def test_a_turn_is_dated_at_the_offset_it_was_said_at_when_it_names_no_zone() -> None:
    from mnemo.domain.text import keyword_terms

    said = datetime(2026, 11, 16, 0, 30, tzinfo=timezone(timedelta(hours=8)))  # 15th in UTC
    sixteenth, fifteenth = keyword_terms("16 November 2026"), keyword_terms("15 November 2026")
    assert history_terms("Ok.", said)[:3] == sixteenth
    assert history_terms("我昨天去了西湖", said) == [*sixteenth, "15"]  # yesterday: the 15th
    # a zone given as an offset is read as one, whatever offset the instant was stored at
    in_utc = said.astimezone(UTC)
    assert history_terms("Ok.", in_utc)[:3] == fifteenth
    assert history_terms("Ok.", in_utc, "+08:00")[:3] == sixteenth
    assert history_terms("Ok.", in_utc, "Asia/Shanghai")[:3] == sixteenth


def test_a_question_that_writes_a_date_in_chinese_finds_the_turns_of_that_day(
    platform: Platform, clock: FixedClock
) -> None:
    shanghai = ZoneInfo("Asia/Shanghai")
    said = [
        (datetime(2026, 11, d, 20, 0, tzinfo=shanghai), f"我们去了{place}")
        for d, place in [(18, "博物馆"), (19, "西湖"), (20, "书店"), (21, "公园")]
    ]
    clock.set(datetime(2026, 11, 25, 12, 0, tzinfo=UTC))
    _say(platform, said)

    def top(query: str) -> str:
        return platform.app.search(CTX, query, streams=["user:U1"])[0].memory.content

    assert top("11月19日我们做了什么") == "我们去了西湖"
    assert top("十一月二十号我们去哪了") == "我们去了书店"
    assert top("2026年11月21日的安排") == "我们去了公园"


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("11月19日我做了什么", [(None, 11, 19)]),
        ("2026年11月20日", [(2026, 11, 20)]),
        ("十一月十九号和十一月二十号", [(None, 11, 19), (None, 11, 20)]),
        ("我十一月去了哪", [(None, 11, None)]),
        ("三个月前", []),  # a span of time, not a date
        ("每月还款", []),
        ("12月32日", []),
        ("13月1日", []),
    ],
)
def test_dates_written_in_chinese_are_read(
    text: str, want: list[tuple[int | None, int, int | None]]
) -> None:
    from mnemo.domain.timeexpr import written_dates

    assert written_dates(text) == want
