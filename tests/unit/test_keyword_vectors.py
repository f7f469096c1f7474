"""Keyword vectors: a turn's date is searchable without making the turn longer."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from mnemo.bootstrap import Platform
from mnemo.domain.keywords import date_terms, passage_vector, term_id
from mnemo.domain.text import query_terms
from mnemo.service.app import RequestContext

CTX = RequestContext("acme", "agent-1")


def test_date_terms_are_the_calendar_day_in_the_memorys_time_zone() -> None:
    late = datetime(2023, 5, 8, 20, 30, tzinfo=UTC)
    assert date_terms(late) == ["8", "may", "2023"]
    assert date_terms(late, "Asia/Tokyo") == ["9", "may", "2023"]  # already the 9th there
    assert date_terms(late, "Not/AZone") == ["8", "may", "2023"]  # unknown: UTC


def test_date_terms_do_not_make_a_memory_longer() -> None:
    text = "Caroline: we adopted a puppy and named it Oscar"
    plain = dict(zip(*_pairs(passage_vector(text)), strict=True))
    dated = dict(zip(*_pairs(passage_vector(text, ["8", "may", "2023"])), strict=True))
    assert {k: dated[k] for k in plain} == plain  # the text's own values are unchanged
    assert set(dated) - set(plain) == {term_id("8"), term_id("may"), term_id("2023")}


def _pairs(vector: object) -> tuple[tuple[int, ...], tuple[float, ...]]:
    return vector.indices, vector.values  # type: ignore[attr-defined]


def test_a_turn_is_found_by_the_day_it_was_said(platform: Platform) -> None:
    day = datetime(2023, 5, 8, 13, 56, tzinfo=UTC)
    turns = [
        (day, "Caroline: we went hiking by the lake"),
        (day + timedelta(days=26), "Caroline: we went hiking in the hills"),
    ]
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
    for query, want in (("hiking on 8 May 2023", 0), ("hiking on 3 June 2023", 1)):
        hits = platform.app.search(CTX, query, streams=["user:U1"], include_archived=True)
        assert hits[0].memory.content == turns[want][1]


def test_stopwords_are_dropped_from_queries_in_their_stemmed_form() -> None:
    # "why" and "does" stem to "whi" and "doe": dropped all the same
    assert query_terms("Why does Caroline paint sunsets?") == ["carolin", "paint", "sunset"]
    assert query_terms("why does it") == ["whi", "doe", "it"]  # nothing else: kept
