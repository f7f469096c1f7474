"""The entity read model of ingested documents, and the structured query over it.

A document (DocumentIngested) becomes one `long_term` memory per section and one
`DocumentRecord`; each entity found in a section becomes an `EntityRow`, whose value is
kept in a form the store's indexes can serve: a text's normalised value (a lookup key), a
money's currency (a key) and amount, a number, percent or duration as a number, a date as
its day number, a period as its first and last day numbers. A store finds rows by field and
key or by a range of numbers, never by reading a tenant's documents; the query engine then
checks each row it got exactly (`mnemo.domain.documents.compare`), so a store may serve a
filter coarsely but never widens an answer.

Pure: no I/O. The query grammar is docs/documents.md's.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import date
from typing import Any

from mnemo.domain.documents import (
    DOCUMENT_FIELDS,
    NORMALISERS,
    Condition,
    Entity,
    EntityRules,
    EntityValue,
    Section,
    compare,
    fold_width,
    parse_condition,
)
from mnemo.domain.errors import InvalidInput
from mnemo.domain.ids import valid_stream

__all__ = [
    "DocumentRecord",
    "EntityFilter",
    "EntityRow",
    "StructuredQuery",
    "entity_rows",
    "location",
    "parse_location",
    "parse_query",
    "row_filter",
    "row_matches",
    "text_value",
]

MAX_CONDITIONS = 16
MAX_LIMIT = 1_000
DOCUMENT_TAG = "document"


@dataclass(frozen=True, slots=True)
class DocumentRecord:
    """One ingested document as the read model keeps it (its filename and title stay in
    the event, sealed: answers open them from there)."""

    tenant: str
    document_id: str
    stream: str
    event_id: str
    sha256: str
    media_type: str
    pages: int
    sections: int
    language: str
    ingested_at: str  # ISO 8601, the event's time


@dataclass(frozen=True, slots=True)
class EntityRow:
    """One entity of one section, in the form the store indexes (see the module doc)."""

    tenant: str
    document_id: str
    stream: str
    memory_id: str
    section: int
    ordinal: int  # the entity's position among its section's entities
    field: str
    kind: str
    key: str | None  # text: the normalised value (None when a store that keeps only keyed
    # hashes of text read the row from a field's partition: the query engine then reads it
    # from the section's text, `text_value`); money: the currency
    low: float | None  # the number, amount, day number, or a period's first day
    high: float | None  # a period's last day (the same as low otherwise)
    start: int  # the span's offsets in the section's text
    end: int
    document_level: bool  # a party, contract number or signing date: holds for the document


def _day(text: str) -> float:
    return float(date.fromisoformat(text).toordinal())


def _from_day(number: float) -> str:
    return date.fromordinal(int(number)).isoformat()


def encode(kind: str, value: EntityValue) -> tuple[str | None, float | None, float | None]:
    """(key, low, high) of an entity's value."""
    if kind == "text":
        return str(value), None, None
    if kind == "money":
        assert isinstance(value, Mapping)
        amount = float(value["amount"])
        return str(value["currency"]), amount, amount
    if kind == "date":
        day = _day(str(value))
        return None, day, day
    if kind == "period":
        assert isinstance(value, Mapping)
        return None, _day(str(value["start"])), _day(str(value["end"]))
    number = float(value)  # type: ignore[arg-type]
    return None, number, number


def decode(row: EntityRow) -> EntityValue:
    """The entity's value back from its row."""
    if row.kind == "text":
        return row.key or ""
    assert row.low is not None
    if row.kind == "money":
        return {"amount": row.low, "currency": row.key}
    if row.kind == "date":
        return _from_day(row.low)
    if row.kind == "period":
        assert row.high is not None
        return {"start": _from_day(row.low), "end": _from_day(row.high)}
    return row.low


def entity_rows(
    tenant: str,
    document_id: str,
    stream: str,
    memory_id: str,
    section: int,
    entities: Sequence[Entity],
) -> list[EntityRow]:
    rows = []
    for ordinal, entity in enumerate(entities):
        key, low, high = encode(entity.kind, entity.value)
        rows.append(
            EntityRow(
                tenant,
                document_id,
                stream,
                memory_id,
                section,
                ordinal,
                entity.field,
                entity.kind,
                key,
                low,
                high,
                entity.start,
                entity.end,
                entity.field in DOCUMENT_FIELDS,
            )
        )
    return rows


def text_value(rules: EntityRules, field: str, span: str) -> str | None:
    """A text entity's value read again from its span in the section's text, normalised as
    the field's rules normalise it (as `extract_entities` did, over the width-folded text)."""
    function = NORMALISERS.get(rules.normaliser_of(field), NORMALISERS["text"])[1]
    value = function(fold_width(span))
    return value if isinstance(value, str) and value else None


# ---- where a section lies ------------------------------------------------------------

_LOCATION = re.compile(r"^(?:p\.(\d+))?\s?(?:§(\S+))?$")


def location(section: Section) -> str | None:
    """A section's place as provenance shows it: `p.3 §8.2`, `p.3`, `§8`, or None."""
    parts = []
    if section.page is not None:
        parts.append(f"p.{section.page}")
    if section.clause:
        parts.append(f"§{section.clause}")
    return " ".join(parts) or None


def parse_location(text: str | None) -> tuple[int | None, str | None]:
    """(page, clause) back from `location`'s text."""
    found = _LOCATION.match(text or "")
    if not text or found is None:
        return None, None
    page = int(found.group(1)) if found.group(1) else None
    return page, found.group(2)


# ---- the query -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class StructuredQuery:
    conditions: tuple[Condition, ...]
    query: str | None
    subjects: tuple[str, ...]
    limit: int
    hits_limit: int = 100


def _invalid(field: str, message: str) -> InvalidInput:
    return InvalidInput(message, code="QUERY_INVALID", field=field)


_KEYS = {"where", "query", "subjects", "limit", "hits_limit", "as_of"}


def parse_query(body: Any, rules: EntityRules) -> StructuredQuery:
    """A query body checked: QUERY_INVALID naming the bad path (`where[1].value`)."""
    if not isinstance(body, Mapping):
        raise _invalid("body", "a query is a JSON object")
    unknown = sorted(set(body) - _KEYS)
    if unknown:
        raise _invalid(unknown[0], f"unknown key {unknown[0]!r}")
    where = body.get("where")
    if not isinstance(where, list) or not where:
        raise _invalid("where", "where is a list of 1 or more conditions")
    if len(where) > MAX_CONDITIONS:
        raise _invalid("where", f"at most {MAX_CONDITIONS} conditions")
    conditions = []
    for i, item in enumerate(where):
        path = f"where[{i}]"
        if not isinstance(item, Mapping):
            raise _invalid(path, "a condition is an object with field, op and value")
        extra = sorted(set(item) - {"field", "op", "value"})
        if extra:
            raise _invalid(f"{path}.{extra[0]}", f"unknown key {extra[0]!r}")
        if "value" not in item:
            raise _invalid(f"{path}.value", "a condition needs a value")
        conditions.append(
            parse_condition(
                item.get("field"), item.get("op"), item["value"], rules=rules, path=path
            )
        )
    query = body.get("query")
    if query is not None and (not isinstance(query, str) or len(query) > 2_000):
        raise _invalid("query", "query is a text of at most 2000 characters")
    subjects = body.get("subjects") or []
    if not isinstance(subjects, list) or len(subjects) > 100:
        raise _invalid("subjects", "subjects is a list of at most 100 streams")
    for i, subject in enumerate(subjects):
        if not isinstance(subject, str) or not valid_stream(subject):
            raise _invalid(f"subjects[{i}]", "not a subject stream (user:U1, session:S1, ...)")
    limit = body.get("limit", 100)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIMIT:
        raise _invalid("limit", f"limit is a whole number from 1 to {MAX_LIMIT}")
    hits_limit = body.get("hits_limit", 100)
    if (
        isinstance(hits_limit, bool)
        or not isinstance(hits_limit, int)
        or not 1 <= hits_limit <= MAX_LIMIT
    ):
        raise _invalid("hits_limit", f"hits_limit is a whole number from 1 to {MAX_LIMIT}")
    return StructuredQuery(tuple(conditions), query or None, tuple(subjects), limit, hits_limit)


@dataclass(frozen=True, slots=True)
class EntityFilter:
    """What a store is asked for one condition: rows of these fields (within these
    streams, all of the tenant's when empty), with one of `keys` (any when None) and a
    `low` within [low_min, low_max] (any when None), and `high` at most `high_max`.
    `kind` is the fields' kind: a store that keeps text values and currencies apart tells
    by it what `keys` are."""

    fields: tuple[str, ...]
    keys: tuple[str, ...] | None = None
    low_min: float | None = None
    low_max: float | None = None
    high_max: float | None = None
    streams: tuple[str, ...] = ()
    kind: str = "text"


_SLACK = 1e-6  # the store's bounds are loose by this much; `row_matches` is exact


def _loose(value: float) -> float:
    return _SLACK * max(1.0, abs(value))


def row_filter(condition: Condition, streams: tuple[str, ...] = ()) -> EntityFilter:
    """The store filter serving a condition (coarse at the edges, never narrower)."""
    return replace(_row_filter(condition, streams), kind=condition.kind)


def _row_filter(condition: Condition, streams: tuple[str, ...]) -> EntityFilter:
    c = condition
    fields = ("party_a", "party_b") if c.field == "party" else (c.field,)
    if c.kind == "text":
        if c.op == "eq":
            return EntityFilter(fields, (c.value,), streams=streams)
        if c.op == "in":
            return EntityFilter(fields, tuple(dict.fromkeys(c.value)), streams=streams)
        return EntityFilter(fields, streams=streams)  # ne, contains: the field's rows
    keys: tuple[str, ...] | None = None
    if c.kind == "money":
        values = c.value if c.op in ("in", "between") else [c.value]
        keys = tuple(dict.fromkeys(v["currency"] for v in values))

    def number(v: Any) -> float:
        if c.kind == "money":
            return float(v["amount"])
        if c.kind in ("date",):
            return _day(v)
        if c.kind == "period":
            return _day(v["start"])
        return float(v)

    if c.op == "within":  # a date, or a period's start, within the query period
        lo, hi = _day(c.value["start"]), _day(c.value["end"])
        high_max = hi if c.kind == "period" else None
        return EntityFilter(fields, None, lo, hi, high_max, streams)
    if c.kind == "period" and c.op == "contains":
        return EntityFilter(fields, None, None, _day(c.value["start"]), None, streams)
    if c.op in ("eq", "in", "between"):
        values = [c.value] if c.op == "eq" else list(c.value)
        numbers = [number(v) for v in values]
        lo, hi = min(numbers), max(numbers)
        return EntityFilter(fields, keys, lo - _loose(lo), hi + _loose(hi), None, streams)
    if c.op in ("gt", "gte"):
        bound = number(c.value)
        return EntityFilter(fields, keys, bound - _loose(bound), None, None, streams)
    if c.op in ("lt", "lte"):
        bound = number(c.value)
        return EntityFilter(fields, keys, None, bound + _loose(bound), None, streams)
    return EntityFilter(fields, keys, streams=streams)  # ne


def row_matches(condition: Condition, row: EntityRow) -> bool:
    """Whether a row the store returned meets the condition exactly."""
    if condition.field == "party":
        if row.field not in ("party_a", "party_b"):
            return False
    elif row.field != condition.field:
        return False
    return compare(condition.kind, condition.op, decode(row), condition.value)
