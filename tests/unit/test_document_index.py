"""The entity read model's row form and the filters a store is asked for: every value
round-trips through its row, a filter is never narrower than the exact check, and the
query body is refused with the path of what is wrong."""

from __future__ import annotations

from typing import Any

import pytest

from mnemo.domain.document_index import (
    EntityRow,
    decode,
    encode,
    location,
    parse_location,
    parse_query,
    row_filter,
    row_matches,
    text_value,
)
from mnemo.domain.documents import Entity, Section, extract_entities
from mnemo.domain.errors import InvalidInput
from mnemo.service.entity_rules import load_entity_rules

RULES = load_entity_rules()
RATE = {"field": "rate", "op": "eq", "value": 0.1}


def row(field: str, kind: str, value: Any) -> EntityRow:
    key, low, high = encode(kind, value)
    return EntityRow("acme", "d", "user:U1", "m", 0, 0, field, kind, key, low, high, 0, 1, False)


@pytest.mark.parametrize(
    ("kind", "value"),
    [
        ("text", "xx科技"),
        ("money", {"amount": 500000.0, "currency": "CNY"}),
        ("percent", 0.05),
        ("date", "2023-08-15"),
        ("period", {"start": "2023-07-01", "end": "2023-09-30"}),
        ("duration", 30.0),
    ],
)
def test_values_round_trip_through_their_rows(kind: str, value: Any) -> None:
    assert decode(row("f", kind, value)) == value


def _served(body: dict[str, Any], r: EntityRow) -> bool:
    """Whether the store filter would return the row (what SQLite's WHERE does)."""
    (c,) = parse_query({"where": [body]}, RULES).conditions
    f = row_filter(c)
    return (
        r.field in f.fields
        and (f.keys is None or r.key in f.keys)
        and (f.low_min is None or (r.low is not None and r.low >= f.low_min))
        and (f.low_max is None or (r.low is not None and r.low <= f.low_max))
        and (f.high_max is None or (r.high is not None and r.high <= f.high_max))
    )


@pytest.mark.parametrize(
    ("condition", "held", "matches"),
    [
        ({"field": "penalty_rate", "op": "gt", "value": "5%"}, ("percent", 0.05), False),
        ({"field": "penalty_rate", "op": "gte", "value": "5%"}, ("percent", 0.05), True),
        ({"field": "penalty_rate", "op": "gt", "value": 0.05}, ("percent", 0.0500001), True),
        ({"field": "signed_at", "op": "within", "value": "2023-Q3"}, ("date", "2023-09-30"), True),
        ({"field": "signed_at", "op": "within", "value": "2023-Q3"}, ("date", "2023-10-01"), False),
        (
            {"field": "period", "op": "within", "value": "2023"},
            ("period", {"start": "2023-07-01", "end": "2024-01-31"}),
            False,
        ),
        (
            {"field": "amount", "op": "gte", "value": {"amount": 500000, "currency": "CNY"}},
            ("money", {"amount": 500000.0, "currency": "USD"}),
            False,
        ),
        (
            {"field": "amount", "op": "between", "value": ["40万元", "50万元"]},
            ("money", {"amount": 500000.0, "currency": "CNY"}),
            True,
        ),
    ],
)
def test_a_filter_serves_every_row_the_exact_check_keeps(
    condition: dict[str, Any], held: tuple[str, Any], matches: bool
) -> None:
    field = condition["field"]
    r = row(field, *held)
    (c,) = parse_query({"where": [condition]}, RULES).conditions
    assert row_matches(c, r) is matches
    if matches:
        assert _served(condition, r)


def test_a_filter_names_the_kind_of_its_field() -> None:
    """A store that keeps texts and currencies apart (Cassandra) tells `keys` by it."""
    kinds = {
        "party_a": ("eq", "acme"),
        "amount": ("ne", {"amount": 1, "currency": "CNY"}),
        "penalty_rate": ("gt", "5%"),
        "signed_at": ("within", "2023"),
    }
    for field, (op, value) in kinds.items():
        (c,) = parse_query(
            {"where": [{"field": field, "op": op, "value": value}]}, RULES
        ).conditions
        assert row_filter(c).kind == c.kind


@pytest.mark.parametrize(
    ("text", "language"),
    [
        ("合同编号：ＨＴ-2023-0917\n甲方：ＸＸ科技有限公司\n联系人：张三\n第八条 违约金", "zh"),
        ("Contract No. c-2023-117\nParty A: Acme  Trading Co., Ltd.\nContact: John Smith", "en"),
    ],
)
def test_a_text_value_is_read_again_from_its_span(text: str, language: str) -> None:
    """What a store that keeps only keyed hashes of text returns for `ne`/`contains`: the
    query engine reads the value from the section at the entity's offsets, the same value
    extraction gave."""
    found = [e for e in extract_entities(text, language=language, rules=RULES) if e.kind == "text"]
    assert {e.field for e in found} >= {"contract_no", "party_a", "person"}
    for e in found:
        assert text_value(RULES, e.field, text[e.start : e.end]) == e.value


def test_party_reads_both_parties() -> None:
    query = {"where": [{"field": "party", "op": "eq", "value": "Acme Ltd."}]}
    (c,) = parse_query(query, RULES).conditions
    assert set(row_filter(c).fields) == {"party_a", "party_b"}
    assert row_matches(c, row("party_b", "text", "acme"))


@pytest.mark.parametrize(
    ("body", "path"),
    [
        ([], "body"),
        ({"where": [{"field": "amount", "op": "gt"}]}, "where[0].value"),
        ({"where": [{"field": "amount", "op": "gt", "value": 1, "x": 1}]}, "where[0].x"),
        ({"where": [{"field": "rate", "op": "eq", "value": 0.1}], "limit": 0}, "limit"),
        (
            {"where": [{"field": "rate", "op": "eq", "value": 0.1}], "subjects": ["../x"]},
            "subjects[0]",
        ),
        ({"where": [{"field": "rate", "op": "eq", "value": 0.1}], "bogus": 1}, "bogus"),
    ],
)
def test_a_bad_query_names_its_path(body: Any, path: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        parse_query(body, RULES)
    assert refused.value.code == "QUERY_INVALID"
    assert refused.value.field == path


def test_locations_read_back() -> None:
    section = Section(3, "x", 3, "8.2", None)
    assert location(section) == "p.3 §8.2"
    assert parse_location("p.3 §8.2") == (3, "8.2")
    assert parse_location("§8") == (None, "8")
    assert location(Section(0, "x", None, None, None)) is None
    assert Entity("f", "text", "v", "v", 0, 1).field == "f"
