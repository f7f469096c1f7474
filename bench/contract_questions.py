"""Structured questions over the synthetic contracts (bench/contracts.py), with exact answers
computed from the ground truth, and the scoring of an answer.

Each question is a `POST /v1/query` filter in the grammar of the documents API (a list of
`{"field", "op", "value"}` conditions, ANDed at document level) and the same question in
natural language (Chinese or English) for the vector-only baseline. Questions are drawn from
the corpus itself (each one starts from a contract it must find, so no answer is empty), and
their answers are computed by `matches`, an oracle over the truth that reads the grammar as
the plan defines it. Clause-level questions also name, for the contract they target, the
clause (and for PDF and XLSX the page) that holds the fact asked about.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from bench.contracts import (
    EN_ORG_PAIRS,
    ZH_ORG_PAIRS,
    normalise_org,
)

__all__ = [
    "Question",
    "Score",
    "build_questions",
    "matches",
    "period_bounds",
    "score",
]

_ZH_QUARTERS = {"一": 1, "二": 2, "三": 3, "四": 4}
_QUARTER_ZH = {1: "一", 2: "二", 3: "三", 4: "四"}
_DAYS_PER_MONTH = 30.0


def period_bounds(value: str) -> tuple[date, date]:
    """The first and last day of a period as the grammar writes it: "2023", "2023-Q3",
    "2023-07", "2023年第三季度", "2023-07-01/2023-09-30"."""
    v = value.strip()
    if "/" in v:
        lo, hi = v.split("/", 1)
        return date.fromisoformat(lo), date.fromisoformat(hi)
    if m := re.fullmatch(r"(\d{4})-Q([1-4])", v):
        year, q = int(m[1]), int(m[2])
        return _quarter(year, q)
    if m := re.fullmatch(r"(\d{4})年第([一二三四])季度", v):
        return _quarter(int(m[1]), _ZH_QUARTERS[m[2]])
    if m := re.fullmatch(r"(\d{4})-(\d{2})", v):
        year, month = int(m[1]), int(m[2])
        return date(year, month, 1), _month_end(year, month)
    if re.fullmatch(r"\d{4}", v):
        return date(int(v), 1, 1), date(int(v), 12, 31)
    raise ValueError(f"unknown period {value!r}")


def _month_end(year: int, month: int) -> date:
    if month == 12:
        return date(year, 12, 31)
    return date.fromordinal(date(year, month + 1, 1).toordinal() - 1)


def _quarter(year: int, q: int) -> tuple[date, date]:
    return date(year, 3 * q - 2, 1), _month_end(year, 3 * q)


def _percent(value: Any) -> float:
    if isinstance(value, str):
        text = value.strip()
        if text.endswith("‰"):
            return float(text[:-1]) / 1000
        if text.endswith("%"):
            return float(text[:-1]) / 100
        return float(text)
    return float(value)


def _compare(op: str, actual: Any, value: Any) -> bool:
    if op == "eq":
        return bool(actual == value)
    if op == "ne":
        return bool(actual != value)
    if op == "gt":
        return bool(actual > value)
    if op == "gte":
        return bool(actual >= value)
    if op == "lt":
        return bool(actual < value)
    if op == "lte":
        return bool(actual <= value)
    if op == "between":
        lo, hi = value
        return bool(lo <= actual <= hi)
    if op == "in":
        return actual in value
    raise ValueError(f"op {op!r} not in the oracle")


def _values(doc: Mapping[str, Any], field_name: str) -> list[Any]:
    """The document's entities of one field."""
    if field_name in ("party_a", "party_b"):
        return [doc[field_name]]
    if field_name == "party":
        return [doc["party_a"], doc["party_b"]]
    if field_name == "contract_no":
        return [doc["contract_no"]]
    if field_name == "clause_no":
        subs = [doc["penalty_subclause"]] if doc.get("penalty_subclause") else []
        return [*doc["clause_numbers"], *subs]
    if field_name == "signed_at":
        return [doc["signed_at"]]
    if field_name == "amount":
        return list(doc["amounts"])
    if field_name == "penalty_rate":
        return [doc["penalty_rate"]]
    if field_name == "rate":
        return list(doc["rates"])
    if field_name == "duration":
        return [float(doc["delivery_days"]), doc["term_months"] * _DAYS_PER_MONTH]
    raise ValueError(f"field {field_name!r} not in the oracle")


def _condition(doc: Mapping[str, Any], cond: Mapping[str, Any]) -> bool:
    fld, op, value = cond["field"], cond["op"], cond["value"]
    for actual in _values(doc, fld):
        if fld in ("party_a", "party_b", "party"):
            a = normalise_org(actual)
            if op == "contains":
                ok = normalise_org(value) in a
            elif op == "in":
                ok = a in {normalise_org(v) for v in value}
            else:
                ok = _compare(op, a, normalise_org(value))
        elif fld in ("contract_no", "clause_no"):
            a = str(actual).casefold()
            if op == "in":
                ok = a in {str(v).casefold() for v in value}
            elif op == "contains":
                ok = str(value).casefold() in a
            else:
                ok = _compare(op, a, str(value).casefold())
        elif fld == "signed_at":
            d = date.fromisoformat(actual)
            if op == "within":
                lo, hi = period_bounds(value)
                ok = lo <= d <= hi
            elif op == "between":
                ok = _compare(op, d, [date.fromisoformat(v) for v in value])
            else:
                ok = _compare(op, d, date.fromisoformat(value))
        elif fld == "amount":
            bound = value[0] if op == "between" else value
            if actual["currency"] != bound["currency"]:
                ok = False  # another currency never matches: no FX
            elif op == "between":
                ok = _compare(op, actual["amount"], [v["amount"] for v in value])
            else:
                ok = _compare(op, actual["amount"], value["amount"])
        elif fld in ("penalty_rate", "rate"):
            target = [_percent(v) for v in value] if op in ("between", "in") else _percent(value)
            ok = _compare(op, round(float(actual), 9), _round(target))
        elif fld == "duration":
            ok = _compare(op, float(actual), value)
        else:
            raise ValueError(fld)
        if ok:
            return True
    return False


def _round(v: Any) -> Any:
    return [round(x, 9) for x in v] if isinstance(v, list) else round(v, 9)


def matches(doc: Mapping[str, Any], where: Sequence[Mapping[str, Any]]) -> bool:
    """Whether the document meets every condition (each by at least one of its entities)."""
    return all(_condition(doc, c) for c in where)


@dataclass
class Question:
    qid: str
    kind: str
    where: list[dict[str, Any]]
    text: str  # the natural-language phrasing
    language: str
    answer: list[str]  # file names, sorted
    # clause-level questions: file name -> the clause numbers accepted and the page (or None)
    locate: dict[str, dict[str, Any]] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        return {
            "id": self.qid,
            "kind": self.kind,
            "where": self.where,
            "text": self.text,
            "language": self.language,
            "answer": self.answer,
            "locate": self.locate,
        }


# ---- drawing the questions -----------------------------------------------------------------


def _quarter_of(d: date) -> int:
    return (d.month - 1) // 3 + 1


def _period_forms(d: date, rng: random.Random, language: str) -> tuple[str, str]:
    """A period holding d, in one of the grammar's forms, and how a person says it."""
    q = _quarter_of(d)
    form = rng.randrange(5)
    if form == 0:
        return f"{d.year}-Q{q}", (
            f"{d.year}年第{_QUARTER_ZH[q]}季度" if language == "zh" else f"Q{q} {d.year}"
        )
    if form == 1:
        return f"{d.year}年第{_QUARTER_ZH[q]}季度", (
            f"{d.year}年第{_QUARTER_ZH[q]}季度"
            if language == "zh"
            else f"the third quarter of {d.year}".replace(
                "third", ("first", "second", "third", "fourth")[q - 1]
            )
        )
    if form == 2:
        month = date(d.year, d.month, 1)
        return f"{d.year}-{d.month:02d}", (
            f"{d.year}年{d.month}月" if language == "zh" else month.strftime("%B %Y")
        )
    if form == 3:
        return str(d.year), (f"{d.year}年" if language == "zh" else f"{d.year}")
    lo, hi = _quarter(d.year, q)
    return f"{lo.isoformat()}/{hi.isoformat()}", (
        f"{lo.isoformat()}至{hi.isoformat()}期间"
        if language == "zh"
        else f"between {lo.isoformat()} and {hi.isoformat()}"
    )


def _pct(rate: float) -> str:
    return f"{rate * 100:g}%"


def _money_words(amount: float, currency: str, language: str) -> str:
    if language == "zh":
        return f"{amount:,.0f}{'元人民币' if currency == 'CNY' else '美元'}"
    return f"{currency} {amount:,.0f}"


def _short(name: str) -> str:
    """A party name as people write it in a question: the legal suffix dropped."""
    for suffix in (
        "股份有限公司",
        "有限责任公司",
        "有限公司",
        " Co., Ltd.",
        " Ltd.",
        " LLC",
        " Inc.",
        " Corp.",
        " Limited",
    ):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _near_duplicated(name: str) -> bool:
    return any(name in pair for pair in (*ZH_ORG_PAIRS, *EN_ORG_PAIRS))


class _Builder:
    def __init__(self, docs: Sequence[Mapping[str, Any]], seed: int) -> None:
        self.docs = list(docs)
        self.rng = random.Random(seed)
        self.questions: list[Question] = []
        self.seen: set[str] = set()

    def answer(self, where: list[dict[str, Any]]) -> list[str]:
        return sorted(d["filename"] for d in self.docs if matches(d, where))

    def add(
        self,
        kind: str,
        where: list[dict[str, Any]],
        text: str,
        language: str,
        locate: dict[str, dict[str, Any]] | None = None,
    ) -> bool:
        key = repr(where)
        answer = self.answer(where)
        if key in self.seen or not answer:
            return False
        self.seen.add(key)
        self.questions.append(
            Question(
                f"q{len(self.questions) + 1:03d}", kind, where, text, language, answer, locate or {}
            )
        )
        return True

    def pick(self, pred: Any = None) -> Mapping[str, Any]:
        pool = [d for d in self.docs if pred is None or pred(d)]
        return self.rng.choice(pool or self.docs)

    def repeat(self, n: int, make: Any) -> None:
        made = tries = 0
        while made < n and tries < n * 20:
            tries += 1
            made += bool(make())

    # -- the kinds ----------------------------------------------------------------------------

    def party_period_penalty(self) -> bool:
        """The issue's example: Party A, a period, the penalty over a threshold."""
        d = self.pick(lambda d: not d["penalty_per_day"])
        lang = d["language"]
        signed = date.fromisoformat(d["signed_at"])
        period, said = _period_forms(signed, self.rng, lang)
        lower = self.rng.choice(
            [r for r in (0.03, 0.05, 0.08, 0.1) if r < d["penalty_rate"]] or [0.01]
        )
        op = self.rng.choice(("gt", "gte"))
        name = self.rng.choice((d["party_a"], _short(d["party_a"])))
        where = [
            {"field": "party_a", "op": "eq", "value": name},
            {"field": "signed_at", "op": "within", "value": period},
            {"field": "penalty_rate", "op": op, "value": _pct(lower)},
        ]
        word = "高于" if op == "gt" else "不低于"
        words = "above" if op == "gt" else "at least"
        text = (
            f"{said}签订、甲方为{name}且违约金比例{word}{_pct(lower)}的合同有哪些？"
            if lang == "zh"
            else f"Which contracts signed in {said} have Party A {name} "
            f"and a penalty {words} {_pct(lower)}?"
        )
        return self.add("party_period_penalty", where, text, lang)

    def party_period(self) -> bool:
        """Either party (the `party` alias) and a period."""
        d = self.pick()
        lang = d["language"]
        name = self.rng.choice((d["party_a"], d["party_b"]))
        period, said = _period_forms(date.fromisoformat(d["signed_at"]), self.rng, lang)
        where = [
            {"field": "party", "op": "eq", "value": name},
            {"field": "signed_at", "op": "within", "value": period},
        ]
        text = (
            f"{said}与{name}签订的合同（无论甲方还是乙方）有哪些？"
            if lang == "zh"
            else f"List the contracts with {name} as either party signed in {said}."
        )
        return self.add("party_period", where, text, lang)

    def near_duplicate_party(self) -> bool:
        """Party B named in full where a near-duplicate organisation exists: the other one
        must not match."""
        d = self.pick(lambda d: _near_duplicated(d["party_b"]))
        lang = d["language"]
        year = d["signed_at"][:4]
        where = [
            {"field": "party_b", "op": "eq", "value": d["party_b"]},
            {"field": "signed_at", "op": "within", "value": year},
        ]
        text = (
            f"乙方为{d['party_b']}、{year}年签订的合同有哪些？"
            if lang == "zh"
            else f"Which contracts signed in {year} have Party B {d['party_b']}?"
        )
        return self.add("near_duplicate_party", where, text, lang)

    def party_contains(self) -> bool:
        """`contains` on a party: a shared stem finds both near-duplicates."""
        pairs = ZH_ORG_PAIRS + EN_ORG_PAIRS
        pair = self.rng.choice(pairs)
        stem = _short(pair[0])
        lang = "zh" if pair in ZH_ORG_PAIRS else "en"
        d = self.pick(lambda d: d["party_a"] in pair)
        period = d["signed_at"][:4]
        where = [
            {"field": "party_a", "op": "contains", "value": stem},
            {"field": "signed_at", "op": "within", "value": period},
        ]
        text = (
            f"{period}年甲方名称中含有“{stem}”的合同有哪些？"
            if lang == "zh"
            else f"Which contracts of {period} have a Party A whose name contains {stem}?"
        )
        return self.add("party_contains", where, text, lang)

    def amount_range(self) -> bool:
        """An amount range in one currency within a year."""
        d = self.pick()
        lang = d["language"]
        total = d["total"]
        cur = total["currency"]
        lo = max(0.0, round(total["amount"] * self.rng.uniform(0.7, 1.0), -4))
        hi = round(total["amount"] * self.rng.uniform(1.0, 1.3), -4) + 10_000
        year = d["signed_at"][:4]
        low_said, high_said = _money_words(lo, cur, lang), _money_words(hi, cur, lang)
        where = [
            {
                "field": "amount",
                "op": "between",
                "value": [{"amount": lo, "currency": cur}, {"amount": hi, "currency": cur}],
            },
            {"field": "signed_at", "op": "within", "value": year},
        ]
        text = (
            f"{year}年签订、合同金额在{low_said}到{high_said}之间的合同有哪些？"
            if lang == "zh"
            else f"Which contracts signed in {year} involve an amount between {low_said} "
            f"and {high_said}?"
        )
        return self.add("amount_range", where, text, lang)

    def amount_floor_low_penalty(self) -> bool:
        """Large contracts in a currency with a low penalty."""
        d = self.pick(lambda d: d["penalty_rate"] < 0.05)
        lang = d["language"]
        cur = d["total"]["currency"]
        floor = round(d["total"]["amount"] * self.rng.uniform(0.5, 1.0), -4)
        floor_said = _money_words(floor, cur, lang)
        where = [
            {"field": "amount", "op": "gte", "value": {"amount": floor, "currency": cur}},
            {"field": "penalty_rate", "op": "lt", "value": "5%"},
            {"field": "party_a", "op": "eq", "value": d["party_a"]},
        ]
        text = (
            f"甲方为{d['party_a']}、金额不低于{floor_said}且违约金比例低于5%的合同有哪些？"
            if lang == "zh"
            else f"Which contracts with Party A {d['party_a']} are worth at least {floor_said} "
            "with a penalty below 5%?"
        )
        return self.add("amount_floor_low_penalty", where, text, lang)

    def contract_no(self) -> bool:
        d = self.pick()
        lang = d["language"]
        where = [{"field": "contract_no", "op": "eq", "value": d["contract_no"]}]
        text = (
            f"合同编号为{d['contract_no']}的合同"
            if lang == "zh"
            else f"The contract numbered {d['contract_no']}"
        )
        return self.add("contract_no", where, text, lang)

    def contract_no_in(self) -> bool:
        chosen = self.rng.sample(self.docs, 3)
        numbers = [d["contract_no"] for d in chosen]
        lang = chosen[0]["language"]
        where = [{"field": "contract_no", "op": "in", "value": numbers}]
        joined = "、".join(numbers) if lang == "zh" else ", ".join(numbers)
        text = f"合同编号为{joined}的合同" if lang == "zh" else f"The contracts numbered {joined}"
        return self.add("contract_no_in", where, text, lang)

    def penalty_clause(self) -> bool:
        """Clause level: which clause (and page) of one contract sets the penalty."""
        d = self.pick()
        lang = d["language"]
        where = [
            {"field": "contract_no", "op": "eq", "value": d["contract_no"]},
            {"field": "penalty_rate", "op": "gte", "value": 0},
        ]
        accepted = [d["penalty_clause"]] + (
            [d["penalty_subclause"]] if d["penalty_subclause"] else []
        )
        locate = {
            d["filename"]: {
                "clauses": accepted,
                "pages": d["penalty_pages"],
                "text": d["penalty_text"],
            }
        }
        text = (
            f"合同{d['contract_no']}的违约金条款是第几条？违约金是多少？"
            if lang == "zh"
            else f"Which clause of contract {d['contract_no']} sets the penalty, "
            "and how much is it?"
        )
        return self.add("penalty_clause", where, text, lang, locate)

    def daily_penalty(self) -> bool:
        """A daily per-mille penalty, a party and a year."""
        d = self.pick(lambda d: d["penalty_per_day"])
        lang = d["language"]
        where = [
            {"field": "penalty_rate", "op": "eq", "value": d["penalty_text"]},
            {"field": "party", "op": "eq", "value": d["party_b"]},
        ]
        text = (
            f"与{d['party_b']}签订、逾期违约金为每日{d['penalty_text']}的合同有哪些？"
            if lang == "zh"
            else f"Which contracts with {d['party_b']} carry a late penalty of "
            f"{d['penalty_text']} per day?"
        )
        return self.add("daily_penalty", where, text, lang)

    def delivery_duration(self) -> bool:
        """A delivery period (days) bound and a party."""
        d = self.pick()
        lang = d["language"]
        days = d["delivery_days"]
        if self.rng.random() < 0.5:
            cond = {"field": "duration", "op": "lte", "value": float(days)}
            said = f"不超过{days}日" if lang == "zh" else f"at most {days} days"
        else:
            cond = {
                "field": "duration",
                "op": "between",
                "value": [float(max(1, days - 10)), float(days + 10)],
            }
            said = (
                f"在{max(1, days - 10)}至{days + 10}日之间"
                if lang == "zh"
                else f"between {max(1, days - 10)} and {days + 10} days"
            )
        where = [{"field": "party_a", "op": "eq", "value": d["party_a"]}, cond]
        text = (
            f"甲方为{d['party_a']}、交付期限{said}的合同有哪些？"
            if lang == "zh"
            else f"Which contracts with Party A {d['party_a']} have a delivery period of {said}?"
        )
        return self.add("delivery_duration", where, text, lang)

    def long_contracts(self) -> bool:
        """Clause numbers: contracts of a party with at least N clauses, signed in a year."""
        d = self.pick(lambda d: len(d["clause_numbers"]) >= 12)
        lang = d["language"]
        n = self.rng.choice([k for k in (11, 12, 13) if k <= len(d["clause_numbers"])])
        where = [
            {"field": "clause_no", "op": "eq", "value": str(n)},
            {"field": "party", "op": "eq", "value": d["party_a"]},
        ]
        text = (
            f"与{d['party_a']}签订、包含第{n}条的合同有哪些？"
            if lang == "zh"
            else f"Which contracts with {d['party_a']} have a Clause {n}?"
        )
        return self.add("clause_count", where, text, lang)

    def signed_between_vat(self) -> bool:
        """A date range and another rate (VAT) equal to a value."""
        d = self.pick()
        lang = d["language"]
        signed = date.fromisoformat(d["signed_at"])
        lo = date.fromordinal(signed.toordinal() - self.rng.randint(0, 45)).isoformat()
        hi = date.fromordinal(signed.toordinal() + self.rng.randint(0, 45)).isoformat()
        vat = d["rates"][1]
        where = [
            {"field": "signed_at", "op": "between", "value": [lo, hi]},
            {"field": "rate", "op": "eq", "value": _pct(vat)},
        ]
        text = (
            f"{lo}至{hi}之间签订、增值税税率为{_pct(vat)}的合同有哪些？"
            if lang == "zh"
            else f"Which contracts signed between {lo} and {hi} apply VAT at {_pct(vat)}?"
        )
        return self.add("signed_between_rate", where, text, lang)


# how many of each kind: 80 in all
_PLAN = (
    ("party_period_penalty", 14),
    ("party_period", 8),
    ("near_duplicate_party", 6),
    ("party_contains", 4),
    ("amount_range", 10),
    ("amount_floor_low_penalty", 5),
    ("contract_no", 8),
    ("contract_no_in", 3),
    ("penalty_clause", 10),
    ("daily_penalty", 4),
    ("delivery_duration", 4),
    ("long_contracts", 2),
    ("signed_between_vat", 2),
)


def build_questions(docs: Sequence[Mapping[str, Any]], seed: int = 20) -> list[Question]:
    """The question set of a corpus' truth (the same truth and seed, the same questions)."""
    b = _Builder(docs, seed)
    for kind, n in _PLAN:
        b.repeat(n, getattr(b, kind))
    return b.questions


# ---- scoring --------------------------------------------------------------------------------


@dataclass
class Score:
    """Precision and recall over a question set: micro (pooled) and macro (mean per
    question), every miss and every extra named by question and document."""

    questions: int = 0
    true_positives: int = 0
    returned: int = 0
    expected: int = 0
    precisions: list[float] = field(default_factory=list)
    recalls: list[float] = field(default_factory=list)
    misses: list[dict[str, str]] = field(default_factory=list)  # expected, not returned
    extras: list[dict[str, str]] = field(default_factory=list)  # returned, not expected

    def add(self, qid: str, expected: Iterable[str], returned: Sequence[str]) -> None:
        want, got = set(expected), list(dict.fromkeys(returned))
        tp = len(want & set(got))
        self.questions += 1
        self.true_positives += tp
        self.returned += len(got)
        self.expected += len(want)
        self.precisions.append(tp / len(got) if got else (1.0 if not want else 0.0))
        self.recalls.append(tp / len(want) if want else 1.0)
        self.misses += [{"question": qid, "document": f} for f in sorted(want - set(got))]
        self.extras += [{"question": qid, "document": f} for f in got if f not in want]

    @property
    def precision(self) -> float:
        return self.true_positives / self.returned if self.returned else 1.0

    @property
    def recall(self) -> float:
        return self.true_positives / self.expected if self.expected else 1.0

    def as_json(self, limit: int = 200) -> dict[str, Any]:
        n = max(1, len(self.precisions))
        return {
            "questions": self.questions,
            "precision": round(self.precision, 4),
            "recall": round(self.recall, 4),
            "macro_precision": round(sum(self.precisions) / n, 4),
            "macro_recall": round(sum(self.recalls) / n, 4),
            "expected": self.expected,
            "returned": self.returned,
            "true_positives": self.true_positives,
            "misses": self.misses[:limit],
            "extras": self.extras[:limit],
            "misses_total": len(self.misses),
            "extras_total": len(self.extras),
        }


def score(questions: Sequence[Question], answers: Mapping[str, Sequence[str]]) -> Score:
    """Scores the returned file names of each question (by id) against its exact answer."""
    s = Score()
    for q in questions:
        s.add(q.qid, q.answer, answers.get(q.qid, ()))
    return s
