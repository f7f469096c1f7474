"""Keyword vectors: a memory's and a query's keyword terms as sparse vectors for BM25.

The vector engine keeps one sparse vector per memory next to its dense embedding and
scores a query's sparse vector against it with the IDF modifier, so the engine computes
inverse document frequency from the points it holds; nothing here (or anywhere in Mnemo)
keeps corpus statistics.

* Terms: `keyword_terms` of the memory's key, value and content (stemmed English words,
  CJK characters and bigrams), with the diacritics of Latin letters folded (é -> e),
  without stopwords (text.STOP_TERMS): the engine's IDF, ln(1 + (N - n + 0.5) / (n + 0.5)),
  never weighs a term below ln 2, so a word in most memories would still count, and it
  would lengthen every memory it is in.
* Dimension of a term: the first four bytes of its BLAKE2b digest, an unsigned 32-bit
  number (the engine's sparse indices are u32), so the same term has the same dimension
  in every process and every release. Two terms that collide share a dimension; with 2^32
  dimensions and a few thousand distinct terms per tenant that is rare, and it only
  merges the two terms' counts.
* Memory values: BM25's saturated, length-normalised term frequency,
  tf * (k1 + 1) / (tf + k1 * (1 - b + b * len / REFERENCE_LENGTH)), k1 = 1.2, b = 0.75.
  BM25 normalises by the corpus's mean length; a fixed reference length keeps the value a
  property of the memory alone (what changes with the corpus would have to be rewritten
  into every point), and only sets where "long" begins.
* A conversation turn's date: a history memory also carries the terms of the calendar date
  it was said on ("8 May 2023", in the memory's time zone, else at the UTC offset its
  event time carries: the user's own calendar), so "what did she say in May
  2023" matches the turns of that day by keyword. Like a field of its own (BM25F), the
  date's terms do not make the memory longer: its text alone sets the length.
* Relative time expressions: a history turn that says "yesterday", "last Saturday",
  "上周" or "two days ago" also carries, in the same date field, the terms of the days
  (or month, or year) they name, counted from when it was said in its time zone
  (mnemo.domain.timeexpr); a query's own expressions are resolved against its as_of, so
  "what did I do yesterday" matches yesterday's turns and the turns that spoke of it.
* Query values: 1.0 per distinct query term (stopwords dropped, see `query_terms`), so the
  score of a memory is sum over shared terms of idf(term) * its value: BM25.
"""

from __future__ import annotations

import hashlib
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from mnemo.domain.text import STOP_TERMS, keyword_terms, query_terms
from mnemo.domain.timeexpr import Span, Zone, resolve, seen_in, written_dates

__all__ = [
    "BM25_B",
    "BM25_K1",
    "KEYWORD_FORMAT",
    "REFERENCE_LENGTH",
    "SparseVector",
    "date_terms",
    "fold_term",
    "history_terms",
    "memory_keyword_text",
    "passage_vector",
    "query_vector",
    "span_terms",
    "term_id",
]

BM25_K1 = 1.2
BM25_B = 0.75
# Terms in a typical memory: a chat turn with its date and speaker, or a declared fact.
# LoCoMo's turns ("<date>: <speaker>: <text>") average 35 terms in conversations 0-4 (34.5
# over all ten); the FTS5 index this replaced normalised by that corpus mean, and 24 (the
# words of the text alone) ranked long turns too low.
REFERENCE_LENGTH = 35.0
# Bumped with any change to how terms are made (keyword_terms, fold_term, term_id, which
# terms a memory carries): terms and weights of another release do not mix with these.
# 2: a history memory also carries its date's terms (date_terms).
# 3: ... and the terms of the days its relative time expressions name (history_terms);
#    stopwords (text.STOP_TERMS) are left out of memories as they were of queries.
# 4: a turn's days are those of the offset it was said at when it names no zone (UTC
#    before), and a zone given as an offset (+08:00) is read as one (UTC before).
TERMS_VERSION = 4
# What the stored keyword vectors were made with. An index records it when it is created;
# one made with another format is rebuilt from the log (embedded: at start; server: 503
# INDEX_NEEDS_REBUILD until `mnemo admin rebuild`), since its weights would rank
# differently from every new memory's.
# How the index's dimensions are made from term ids: permuted under the tenant's key
# (term_keys), bumped with any change to that mapping.
TERM_IDS = "ids-keyed-v1"
KEYWORD_FORMAT = (
    f"terms-v{TERMS_VERSION};{TERM_IDS};bm25;k1={BM25_K1};b={BM25_B};ref={REFERENCE_LENGTH}"
)


@dataclass(frozen=True, slots=True)
class SparseVector:
    """Dimensions (ascending, distinct) and their values."""

    indices: tuple[int, ...] = ()
    values: tuple[float, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.indices)


def _latin(ch: str) -> bool:
    code = ord(ch)
    return code < 0x250 or 0x1E00 <= code <= 0x1EFF


def fold_term(term: str) -> str:
    """A keyword term with the diacritics of Latin letters removed (é -> e)."""
    if term.isascii():
        return term
    out: list[str] = []
    for ch in unicodedata.normalize("NFD", term):
        if unicodedata.combining(ch) and out and _latin(out[-1]):
            continue
        out.append(ch)
    return unicodedata.normalize("NFC", "".join(out))


def term_id(term: str) -> int:
    """The sparse dimension of a term: stable across processes and releases."""
    return int.from_bytes(hashlib.blake2b(term.encode(), digest_size=4).digest(), "big")


def memory_keyword_text(key: str | None, value: str | None, content: str) -> str:
    """The text whose terms make a memory's keyword vector."""
    return f"{key or ''} {value or ''} {content}"


_MONTHS = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)


def date_terms(at: datetime, timezone: str | None = None) -> list[str]:
    """The keyword terms of the calendar date of `at` ("8 May 2023" -> 8, may, 2023), in the
    given time zone (an IANA name or a UTC offset), else at the offset `at` carries (the
    one the user was at when it was said), else UTC."""
    day = seen_in(at, timezone)
    return _day_terms(day.day, day.month, day.year)


def _day_terms(day: int, month: int, year: int) -> list[str]:
    return keyword_terms(f"{day} {_MONTHS[month - 1]} {year}")


def written_date_terms(text: str) -> list[str]:
    """The date terms of the calendar dates a text writes out in Chinese (11月19日 -> 19,
    novemb; 2026年11月 -> novemb, 2026), the terms a turn's date field carries, so a
    question that names a day in Chinese finds the turns said on it."""
    terms: list[str] = []
    for year, month, day in written_dates(text):
        parts = [str(day) if day is not None else "", _MONTHS[month - 1], str(year or "")]
        terms.extend(keyword_terms(" ".join(p for p in parts if p)))
    return list(dict.fromkeys(terms))


def span_terms(spans: Sequence[Span]) -> list[str]:
    """The distinct date terms of resolved time expressions: each day of a span of days
    (a weekend or a week: every day number, its months and years), a month's month and
    year, a year's year; first occurrence first."""
    terms: list[str] = []
    for span in spans:
        if span.granularity == "days":
            day = span.first
            while day <= span.last:
                terms.extend(_day_terms(day.day, day.month, day.year))
                day = day.fromordinal(day.toordinal() + 1)
        elif span.granularity == "month":
            terms.extend(keyword_terms(f"{_MONTHS[span.first.month - 1]} {span.first.year}"))
        else:
            terms.extend(keyword_terms(str(span.first.year)))
    return list(dict.fromkeys(terms))


def history_terms(text: str, at: datetime, timezone: str | None = None) -> list[str]:
    """A history memory's date field: the terms of the day it was said on (date_terms)
    and of the days its relative time expressions name, counted from then; each term once
    (a month both said on and spoken of counts once)."""
    return list(
        dict.fromkeys([*date_terms(at, timezone), *span_terms(resolve(text, at, timezone))])
    )


def passage_vector(text: str, dated: Sequence[str] = ()) -> SparseVector:
    """A memory's keyword vector: BM25's term weight of each of its terms, plus the `dated`
    terms (see date_terms), which count as occurrences but not towards the length."""
    terms = [fold_term(t) for t in keyword_terms(text) if t not in STOP_TERMS]
    if not terms and not dated:
        return SparseVector()
    norm = BM25_K1 * (1.0 - BM25_B + BM25_B * max(len(terms), 1) / REFERENCE_LENGTH)
    weights: Counter[int] = Counter()
    for term, tf in Counter([*terms, *dated]).items():
        weights[term_id(term)] += tf
    ordered = sorted(weights.items())
    return SparseVector(
        tuple(i for i, _ in ordered),
        tuple(round(tf * (BM25_K1 + 1.0) / (tf + norm), 6) for _, tf in ordered),
    )


def query_vector(text: str, as_of: datetime | None = None, timezone: Zone = None) -> SparseVector:
    """A query's keyword vector: 1.0 on each distinct query term and on the date terms of
    the dates it writes out in Chinese (written_date_terms), and, given the moment the
    query speaks from (`as_of`, in `timezone`, UTC when none), on the date terms of the
    days its relative time expressions name ("yesterday" -> that day's terms)."""
    terms = [fold_term(t) for t in query_terms(text)]
    terms.extend(written_date_terms(text))
    if as_of is not None:
        terms.extend(span_terms(resolve(text, as_of, timezone)))
    ids = sorted({term_id(t) for t in terms})
    return SparseVector(tuple(ids), tuple(1.0 for _ in ids))
