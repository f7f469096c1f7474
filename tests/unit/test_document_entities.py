"""Entities found in documents' sections, the operator's entity rules, and the value side of
structured queries (a filter's value parsed for its kind, compared with an entity's)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from tests.document_samples import docx_bytes

from mnemo.adapters.document_parsers import parse_document
from mnemo.bootstrap import load_document_entity_rules
from mnemo.domain.documents import (
    DOCUMENT_FIELDS,
    FIELD_KINDS,
    DocumentLimits,
    Entity,
    EntityRulesInvalid,
    detect_language,
    extract_entities,
    parse_condition,
)
from mnemo.domain.errors import InvalidInput
from mnemo.service.entity_rules import load_entity_rules
from mnemo.settings import MnemoSettings

RULES = load_entity_rules()


def entities(text: str, language: str = "mixed") -> tuple[Entity, ...]:
    found = extract_entities(text, language=language, rules=RULES)
    for entity in found:  # every span is where the entity says it is
        assert text[entity.start : entity.end] == entity.text
    return found


def values(text: str, field: str, language: str = "mixed") -> list[Any]:
    return [e.value for e in entities(text, language) if e.field == field]


CNY_500K = {"amount": 500000.0, "currency": "CNY"}
USD_1_2M = {"amount": 1200000.0, "currency": "USD"}
Q3_2023 = {"start": "2023-07-01", "end": "2023-09-30"}

# (text, field, value, the span as written), Chinese and English for every field
FOUND = [
    ("甲方：XX科技有限公司\n", "party_a", "xx科技", "XX科技有限公司"),
    (
        "甲方（买方）：北京云图数据股份有限公司，地址：北京",
        "party_a",
        "北京云图数据",
        "北京云图数据股份有限公司",
    ),
    ("乙方：上海明达贸易有限责任公司", "party_b", "上海明达贸易", "上海明达贸易有限责任公司"),
    (
        '由甲方深圳前海科技有限公司（以下简称"甲方"）签署',
        "party_a",
        "深圳前海科技",
        "深圳前海科技有限公司",
    ),
    ("Acme Corp, a Delaware corporation (the “Party A”)", "party_a", "acme", "Acme Corp"),
    ("Party A: Acme Trading Co., Ltd.\n", "party_a", "acmetrading", "Acme Trading Co., Ltd."),
    ("Party B: Beta Inc. Address: 1 Main St.", "party_b", "beta", "Beta Inc."),
    ('between Acme Ltd. ("Party A") and Beta LLC ("Party B")', "party_b", "beta", "Beta LLC"),
    ("本合同由ＸＸ科技集团有限公司负责实施。", "organisation", "xx科技", "ＸＸ科技集团有限公司"),
    ("运维由甲方云图数据有限公司负责", "organisation", "云图数据", "云图数据有限公司"),
    (
        "Services are hosted by Northwind Systems Limited in Dublin.",
        "organisation",
        "northwindsystems",
        "Northwind Systems Limited",
    ),
    ("联系人：张三\n", "person", "张三", "张三"),
    ("Contact: John Smith, phone", "person", "john smith", "John Smith"),
    # a name ends at its line: a DOCX paragraph, an XLSX row or a PDF line that follows it
    # ("Phone: ...", a table's "Milestone | Amount") is not its surname
    ("Contact: John Smith\nPhone: 123-4567", "person", "john smith", "John Smith"),
    ("Signed by: Mary Jones\nMilestone | Amount", "person", "mary jones", "Mary Jones"),
    ("合同编号：HT-2023-0917\n", "contract_no", "HT-2023-0917", "HT-2023-0917"),
    ("Contract No. C-2023-117.", "contract_no", "C-2023-117", "C-2023-117"),
    ("依照第八条的约定", "clause_no", "8", "第八条"),
    ("as set out in Clause 8.2 above", "clause_no", "8.2", "Clause 8.2"),
    ("Article 12 Termination", "clause_no", "12", "Article 12"),
    ("签订日期：2023年8月15日", "signed_at", "2023-08-15", "2023年8月15日"),
    ("本合同于二〇二三年八月十五日在北京签订。", "signed_at", "2023-08-15", "二〇二三年八月十五日"),
    ("This Agreement is signed on 15 August 2023.", "signed_at", "2023-08-15", "15 August 2023"),
    ("Dated as of August 15, 2023", "signed_at", "2023-08-15", "August 15, 2023"),
    ("交付日期为2023-09-30。", "date", "2023-09-30", "2023-09-30"),
    ("Delivery by 30 September 2023.", "date", "2023-09-30", "30 September 2023"),
    ("2023年第三季度的服务", "period", Q3_2023, "2023年第三季度"),
    ("2023年Q3交付", "period", Q3_2023, "2023年Q3"),
    ("delivered in Q3 2023", "period", Q3_2023, "Q3 2023"),
    ("during the third quarter of 2023", "period", Q3_2023, "the third quarter of 2023"),
    ("2023年7月的账单", "period", {"start": "2023-07-01", "end": "2023-07-31"}, "2023年7月"),
    ("2024年上半年", "period", {"start": "2024-01-01", "end": "2024-06-30"}, "2024年上半年"),
    ("for July 2023 only", "period", {"start": "2023-07-01", "end": "2023-07-31"}, "July 2023"),
    ("服务期自2023年7月1日至2023年9月30日", "period", Q3_2023, "2023年7月1日至2023年9月30日"),
    ("合同总价为50万元。", "amount", CNY_500K, "50万元"),
    ("价款为人民币500,000元", "amount", CNY_500K, "人民币500,000元"),
    ("合计人民币伍拾万元整", "amount", CNY_500K, "人民币伍拾万元整"),
    ("a fee of USD 1.2 million", "amount", USD_1_2M, "USD 1.2 million"),
    ("a fee of $1,200,000.", "amount", USD_1_2M, "$1,200,000"),
    ("1.5亿元", "amount", {"amount": 150000000.0, "currency": "CNY"}, "1.5亿元"),
    ("EUR 250 thousand", "amount", {"amount": 250000.0, "currency": "EUR"}, "EUR 250 thousand"),
    ("违约金为合同金额的5%。", "penalty_rate", 0.05, "5%"),
    ("违约金按合同总价的百分之五计算", "penalty_rate", 0.05, "百分之五"),
    ("每日按合同金额的0.5‰向甲方支付违约金", "penalty_rate", 0.0005, "0.5‰"),
    ("a penalty of 5% of the price", "penalty_rate", 0.05, "5%"),
    ("liquidated damages of 0.5‰ per day", "penalty_rate", 0.0005, "0.5‰"),
    ("年利率为3.5%", "rate", 0.035, "3.5%"),
    ("a discount of 10 per cent", "rate", 0.1, "10 per cent"),
    ("付款期限为30日。", "duration", 30.0, "30日"),
    ("服务期三个月。", "duration", 90.0, "三个月"),
    ("within 2 weeks of delivery", "duration", 14.0, "2 weeks"),
    ("within thirty (30) days", "duration", 30.0, "thirty (30) days"),
]


@pytest.mark.parametrize(("text", "field", "value", "span"), FOUND)
def test_each_field_is_found_and_normalised(text: str, field: str, value: Any, span: str) -> None:
    found = [e for e in entities(text) if e.field == field]
    assert [(e.value, e.text) for e in found] == [(value, span)]
    assert found[0].kind == FIELD_KINDS[field]


def test_every_field_of_the_table_is_covered_in_both_languages() -> None:
    def script(text: str) -> str:
        return detect_language(text)

    covered: dict[str, set[str]] = {}
    for text, field, _, _ in FOUND:
        covered.setdefault(field, set()).add("zh" if script(text) != "en" else "en")
    fields = set(FIELD_KINDS) - {"party"}  # party is the query alias
    assert set(covered) == fields
    assert all(covered[f] == {"zh", "en"} for f in fields), covered


NOT_FOUND = [
    ("联系电话：13800138000", "amount"),
    ("Call 555-1234 or +1 212 555 0100.", "amount"),
    ("1.5 million people use it", "amount"),
    ("升级到版本 v2.3.1", "date"),
    ("Release version 2023.08.15 is out", "date"),
    ("build 2023-08-15-rc1", "date"),
    ("订单号：DD-2023-0917", "contract_no"),
    ("Order No. 2023-117", "contract_no"),
    ("see the contract notes attached", "contract_no"),
    ("每月15日付款", "duration"),
    ("3月份的账单", "duration"),
    ("甲方应按时付款", "party_a"),
    ("10元", "rate"),
    ("a 5-star rating", "rate"),
    ("预付款为合同金额的30%，逾期支付违约金", "penalty_rate"),
]


@pytest.mark.parametrize(("text", "field"), NOT_FOUND)
def test_look_alikes_are_not_taken(text: str, field: str) -> None:
    assert values(text, field) == []


def test_a_specific_rule_takes_its_span_before_the_general_one() -> None:
    found = entities("签订日期：2023年8月15日；违约金为5%；利率4%")
    assert [(e.field, e.text) for e in found] == [
        ("signed_at", "2023年8月15日"),
        ("penalty_rate", "5%"),
        ("rate", "4%"),
    ]


def test_full_width_text_is_read_with_the_offsets_of_the_original() -> None:
    text = "甲方：ＸＸ科技有限公司，合同编号：ＨＴ－２０２３－０９１７，金额５０万元"
    found = {e.field: e for e in entities(text)}
    assert found["party_a"].value == "xx科技"
    assert found["contract_no"].value == "HT-2023-0917"
    assert found["contract_no"].text == "ＨＴ－２０２３－０９１７"
    assert found["amount"].value == CNY_500K


def test_a_language_keeps_the_other_languages_keyword_rules_out() -> None:
    text = "Party A: Acme Ltd.\n甲方：XX科技有限公司"
    assert values(text, "party_a", "zh") == ["xx科技"]
    assert values(text, "party_a", "en") == ["acme"]
    assert values(text, "party_a", "mixed") == ["acme", "xx科技"]
    assert values("USD 1.2 million", "amount", "zh") == [USD_1_2M]  # any-language rule


def test_organisation_names_compare_equal_across_spellings() -> None:
    spellings = ["XX科技有限公司", "ＸＸ科技股份有限公司", "xx科技集团"]
    assert {values(f"甲方：{s}\n", "party_a")[0] for s in spellings} == {"xx科技"}
    english = ["Acme Trading Co., Ltd.", "ACME  Trading Limited", "Acme Trading Inc."]
    assert {values(f"Party A: {s}\n", "party_a")[0] for s in english} == {"acmetrading"}


def test_extraction_is_deterministic() -> None:
    text = "甲方：XX科技有限公司 乙方：YY有限公司 金额50万元，违约金5%，2023年第三季度交付。" * 5
    assert entities(text) == entities(text)
    assert len(entities(text)) == 25  # two parties, an amount, a penalty, a period, 5 times


def test_a_parsed_contract_yields_its_document_fields() -> None:
    data = docx_bytes(
        [
            ("h1", "技术服务合同"),
            ("p", "合同编号：HT-2023-0917"),
            ("p", "甲方：XX科技有限公司"),
            ("p", "乙方：云图数据股份有限公司"),
            ("p", "第一条 服务内容"),
            ("p", "乙方于2023年第三季度提供运维服务，服务期三个月。"),
            ("p", "第二条 价款"),
            ("p", "合同总价为人民币50万元。"),
            ("p", "第八条 违约责任"),
            ("p", "违约金为合同金额的5%。"),
            ("p", "签订日期：2023年8月15日"),
        ]
    )
    doc = parse_document(data, "c.docx", None, DocumentLimits())
    by_field: dict[str, list[tuple[Any, str | None]]] = {}
    for section in doc.sections:
        for e in extract_entities(section.text, language=doc.language, rules=RULES):
            by_field.setdefault(e.field, []).append((e.value, section.clause))
    assert by_field["contract_no"] == [("HT-2023-0917", None)]
    assert by_field["party_a"] == [("xx科技", None)]
    assert by_field["party_b"] == [("云图数据", None)]
    assert by_field["period"] == [(Q3_2023, "1")]
    assert by_field["amount"] == [(CNY_500K, "2")]
    assert by_field["penalty_rate"] == [(0.05, "8")]
    assert by_field["signed_at"] == [("2023-08-15", "8")]
    assert {"party_a", "party_b", "contract_no", "signed_at"} == DOCUMENT_FIELDS


# --- the operator's rules --------------------------------------------------------------


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "entities.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_an_operators_rules_add_fields_and_claim_text_first(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "templates:\n"
        "  INVOICE: 'INV-[0-9]{6}'\n"
        "rules:\n"
        "  - name: invoice_no\n"
        "    field: invoice_no\n"
        "    kind: text\n"
        "    normaliser: code\n"
        "    ignore_case: true\n"
        "    pattern: '(?:发票号|Invoice)\\s*:?\\s*(?P<value>{INVOICE})'\n"
        "  - name: budget\n"
        "    field: amount\n"
        "    kind: money\n"
        "    pattern: '预算(?P<value>{MONEY})'\n",
    )
    rules = load_entity_rules(path)
    found = extract_entities("发票号：inv-202301，预算50万元", language="zh", rules=rules)
    assert [(e.field, e.value) for e in found] == [
        ("invoice_no", "INV-202301"),
        ("amount", CNY_500K),
    ]
    assert rules.rules[1].source == f"{path}:10"
    assert rules.field_kinds()["invoice_no"] == "text"
    # a filter may name the new field
    assert parse_condition("invoice_no", "eq", "inv-202301", rules=rules).value == "INV-202301"


def test_the_setting_names_the_operators_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(
        tmp_path,
        "rules:\n  - {name: ticket, field: ticket_no, kind: text, pattern: 'T#[0-9]+'}\n",
    )
    monkeypatch.setenv("MNEMO_ENTITY_RULES_FILE", str(path))
    rules = load_document_entity_rules(MnemoSettings())
    assert [e.value for e in extract_entities("see T#42", language="en", rules=rules)] == ["t#42"]
    monkeypatch.delenv("MNEMO_ENTITY_RULES_FILE")
    assert "ticket_no" not in load_document_entity_rules(MnemoSettings()).field_kinds()


BAD_FILES = [
    (
        "rules:\n  - name: a\n    field: x\n    kind: text\n    pattern: '(?<=a)b'\n",
        ":2",
        "'a'",
        "linear-time",
    ),
    (
        "rules:\n  - name: a\n    field: x\n    kind: text\n    pattern: '{NOPE}'\n",
        ":2",
        "'a'",
        "unknown template",
    ),
    (
        "rules:\n  - name: ok\n    field: y\n    kind: text\n    pattern: y\n"
        "  - name: bad\n    field: amount\n    kind: text\n    pattern: x\n",
        ":6",
        "'bad'",
        "amount is of kind money",
    ),
    (
        "rules:\n  - name: a\n    field: x\n    kind: money\n"
        "    normaliser: date\n    pattern: x\n",
        ":2",
        "'a'",
        "yields date",
    ),
    (
        "rules:\n  - name: a\n    field: x\n    kind: text\n    pattern: x\n    colour: red\n",
        ":2",
        "'a'",
        "unknown keys",
    ),
    (
        "rules:\n  - name: a\n    field: x\n    kind: vector\n    pattern: x\n",
        ":2",
        "'a'",
        "kind 'vector'",
    ),
    (
        "rules:\n  - name: a\n    field: party\n    kind: text\n    pattern: x\n",
        ":2",
        "'a'",
        "alias",
    ),
    ("rules: [\n  {name: a\n", ":3", "", "not valid YAML"),
    ("patterns: []\n", ":1", "", "unknown key"),
]


@pytest.mark.parametrize(("text", "line", "rule", "reason"), BAD_FILES)
def test_a_bad_rule_file_is_refused_with_its_file_line_and_rule(
    tmp_path: Path, text: str, line: str, rule: str, reason: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(EntityRulesInvalid) as caught:
        load_entity_rules(path)
    message = caught.value.message
    assert message.startswith(f"{path}{line}:"), message
    assert rule in message
    assert reason in message
    assert caught.value.code == "ENTITY_RULES_INVALID"


def test_a_missing_rule_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(EntityRulesInvalid, match="cannot be read"):
        load_entity_rules(tmp_path / "absent.yaml")


# --- the value side of structured queries ---------------------------------------------


def condition(field: str, op: str, value: Any) -> Any:
    return parse_condition(field, op, value, rules=RULES, path="where[2]")


def entity(field: str, text: str) -> Entity:
    found = [e for e in entities(text) if e.field == field]
    assert len(found) == 1, (text, found)
    return found[0]


@pytest.mark.parametrize(
    ("field", "op", "value", "parsed"),
    [
        ("penalty_rate", "gt", "5%", 0.05),
        ("penalty_rate", "gt", 0.05, 0.05),
        ("penalty_rate", "gte", "百分之五", 0.05),
        ("amount", "gte", {"amount": 500000, "currency": "cny"}, CNY_500K),
        ("amount", "gte", "50万元", CNY_500K),
        ("amount", "lt", "USD 1.2 million", USD_1_2M),
        ("signed_at", "within", "2023-Q3", Q3_2023),
        ("signed_at", "within", "2023年第三季度", Q3_2023),
        ("signed_at", "within", "2023-07-01/2023-09-30", Q3_2023),
        ("signed_at", "within", "2023", {"start": "2023-01-01", "end": "2023-12-31"}),
        ("signed_at", "eq", "2023年8月15日", "2023-08-15"),
        ("date", "lt", "15 August 2023", "2023-08-15"),
        ("period", "eq", "Q3 2023", Q3_2023),
        ("period", "contains", "2023-08-15", {"start": "2023-08-15", "end": "2023-08-15"}),
        ("party", "eq", "XX科技有限公司", "xx科技"),
        ("party_a", "contains", "ＸＸ", "xx"),
        ("contract_no", "eq", "ht-2023-0917", "HT-2023-0917"),
        ("clause_no", "eq", "第八条", "8"),
        ("duration", "gte", "三个月", 90.0),
        ("duration", "lte", 30, 30.0),
        ("amount", "in", ["50万元", "USD 1.2 million"], [CNY_500K, USD_1_2M]),
        ("penalty_rate", "between", ["3%", "5%"], (0.03, 0.05)),
    ],
)
def test_filter_values_parse_for_their_kind(field: str, op: str, value: Any, parsed: Any) -> None:
    assert condition(field, op, value).value == parsed


@pytest.mark.parametrize(
    ("field", "op", "value", "path", "reason"),
    [
        ("colour", "eq", "red", "where[2].field", "unknown field"),
        ("party_a", "gt", "XX", "where[2].op", "its ops are contains, eq, in, ne"),
        ("amount", "contains", "50万元", "where[2].op", "money"),
        ("signed_at", "within", "2023-Q5", "where[2].value", "not a period"),
        ("signed_at", "within", "soon", "where[2].value", "not a period"),
        ("signed_at", "eq", "2023-02-30", "where[2].value", "not a date"),
        ("amount", "gte", {"amount": 5}, "where[2].value.currency", "currency"),
        ("amount", "gte", {"amount": "lots", "currency": "CNY"}, "where[2].value.amount", "number"),
        ("amount", "gte", 500000, "where[2].value", "money is"),
        ("amount", "gte", "500000", "where[2].value", "not a money"),
        ("penalty_rate", "gt", "high", "where[2].value", "not a percent"),
        ("penalty_rate", "between", ["5%"], "where[2].value", "[low, high]"),
        ("penalty_rate", "between", ["5%", "3%"], "where[2].value", "low <= high"),
        ("amount", "between", ["50万元", "USD 2"], "where[2].value", "one currency"),
        ("penalty_rate", "in", ["5%", "x"], "where[2].value[1]", "not a percent"),
        ("party", "eq", "   ", "where[2].value", "text value"),
        ("party", "eq", None, "where[2].value", "needs a text"),
        # float() reads these, but they are no value: NaN met nothing (ne: everything),
        # an infinity every row below it
        ("amount", "lt", {"amount": "NaN", "currency": "CNY"}, "where[2].value.amount", "number"),
        ("amount", "lt", {"amount": "inf", "currency": "CNY"}, "where[2].value.amount", "number"),
        ("amount", "lt", {"amount": "1e999", "currency": "CNY"}, "where[2].value.amount", "number"),
        ("penalty_rate", "lt", "nan", "where[2].value", "not a percent"),
        ("penalty_rate", "lt", "-Infinity", "where[2].value", "not a percent"),
        ("penalty_rate", "gt", float("nan"), "where[2].value", "not a percent"),
        ("duration", "lt", "inf", "where[2].value", "not a duration"),
        ("rate", "in", ["5%", "infinity"], "where[2].value[1]", "not a percent"),
    ],
)
def test_bad_filters_are_query_invalid_naming_the_path(
    field: str, op: str, value: Any, path: str, reason: str
) -> None:
    with pytest.raises(InvalidInput) as caught:
        condition(field, op, value)
    assert caught.value.code == "QUERY_INVALID"
    assert caught.value.field == path
    assert reason in caught.value.message


def test_conditions_compare_entity_values() -> None:
    penalty = entity("penalty_rate", "违约金为合同金额的5.5%")
    assert condition("penalty_rate", "gt", "5%").matches(penalty)
    assert not condition("penalty_rate", "gt", "5.5%").matches(penalty)
    assert condition("penalty_rate", "gte", 0.055).matches(penalty)
    assert condition("penalty_rate", "between", ["5.5%", "6%"]).matches(penalty)
    assert not condition("rate", "gt", "1%").matches(penalty)  # another field

    amount = entity("amount", "合同总价为人民币伍拾万元整")
    assert condition("amount", "gte", {"amount": 500000, "currency": "CNY"}).matches(amount)
    assert condition("amount", "eq", "50万元").matches(amount)
    assert not condition("amount", "lt", "50万元").matches(amount)
    # another currency meets no op, ne included: there is no exchange rate
    assert not condition("amount", "lt", "USD 1 million").matches(amount)
    assert not condition("amount", "ne", "USD 1 million").matches(amount)
    assert condition("amount", "ne", "40万元").matches(amount)

    signed = entity("signed_at", "签订日期：2023年8月15日")
    assert condition("signed_at", "within", "2023-Q3").matches(signed)
    assert condition("signed_at", "within", "2023年8月").matches(signed)
    assert not condition("signed_at", "within", "2023年第四季度").matches(signed)
    assert condition("signed_at", "gt", "2023-08-14").matches(signed)
    assert condition("signed_at", "between", ["2023-08-15", "2023-08-15"]).matches(signed)

    party = entity("party_b", "乙方：XX科技有限公司\n")
    assert condition("party", "eq", "xx科技").matches(party)
    assert condition("party", "in", ["YY公司", "ＸＸ科技股份有限公司"]).matches(party)
    assert condition("party_b", "contains", "科技").matches(party)
    assert not condition("party_a", "eq", "XX科技").matches(party)
    assert condition("party_b", "ne", "YY").matches(party)

    quarter = entity("period", "2023年第三季度交付")
    assert condition("period", "within", "2023").matches(quarter)
    assert not condition("period", "within", "2023-07").matches(quarter)
    assert condition("period", "contains", "2023-08-15").matches(quarter)
    assert condition("period", "contains", "2023-07").matches(quarter)
    assert condition("period", "eq", "Q3 2023").matches(quarter)

    duration = entity("duration", "服务期三个月")
    assert condition("duration", "gt", "30 days").matches(duration)
    assert condition("duration", "eq", "90天").matches(duration)
