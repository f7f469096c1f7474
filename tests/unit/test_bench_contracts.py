"""The synthetic contract corpus (bench/contracts.py) and its question set
(bench/contract_questions.py): what the truth says is what the files say, read back with the
same libraries a parser uses, and the answers follow from the truth."""

from __future__ import annotations

import io
import json
import re
from collections import Counter
from pathlib import Path

# the corpus is written with reportlab, python-docx and openpyxl and read back with pypdf:
# all of them are installed by `make install` (runtime and dev dependencies), so a missing
# one is an error here, never a skip
import docx
import openpyxl
import pypdf
import pytest
from bench.contract_questions import Score, build_questions, matches, period_bounds, score
from bench.contracts import (
    generate,
    normalise_org,
    read_corpus,
    render,
    write_corpus,
    zh_numeral,
)


def _read_back(fmt: str, data: bytes) -> tuple[str, list[str]]:
    """The file's text (all of it) and, for PDF and XLSX, the text of each page/sheet."""
    if fmt == "pdf":
        pages = [p.extract_text() or "" for p in pypdf.PdfReader(io.BytesIO(data)).pages]
        return "\n".join(pages), pages
    if fmt == "docx":
        d = docx.Document(io.BytesIO(data))
        return "\n".join(p.text for p in d.paragraphs), []
    if fmt == "xlsx":
        wb = openpyxl.load_workbook(io.BytesIO(data), read_only=True)
        sheets = [
            "\n".join(
                " ".join(str(v) for v in row if v is not None)
                for row in ws.iter_rows(values_only=True)
            )
            for ws in wb.worksheets
        ]
        return "\n".join(sheets), sheets
    return data.decode("utf-8"), []


@pytest.fixture(scope="module")
def corpus() -> list[tuple[dict, str, list[str]]]:
    out = []
    for c in generate(300, seed=20):
        data = render(c)
        text, pages = _read_back(c.format, data)
        out.append((c.truth(), text, pages))
    return out


def test_corpus_size_languages_and_formats(corpus: list[tuple[dict, str, list[str]]]) -> None:
    truth = [t for t, _, _ in corpus]
    assert len(truth) == 300
    langs = Counter(t["language"] for t in truth)
    formats = Counter(t["format"] for t in truth)
    assert langs["zh"] > 100
    assert langs["en"] > 100
    assert {"pdf", "docx", "xlsx"} <= set(formats)
    assert all(formats[f] >= 40 for f in ("pdf", "docx", "xlsx"))
    numbers = [t["contract_no"] for t in truth]
    assert len(set(numbers)) == len(numbers)
    years = {t["signed_at"][:4] for t in truth}
    assert years == {"2022", "2023", "2024"}
    # the ways amounts and rates are written all occur
    written = {m["text"] for t in truth for m in t["amounts"]}
    assert any(re.fullmatch(r"[\d.]+万元", w) for w in written)
    assert any(re.fullmatch(r"人民币[\d,]+元", w) for w in written)
    assert any(re.fullmatch(r"USD [\d.]+ million", w) for w in written)
    assert any(re.fullmatch(r"\$[\d,]+", w) for w in written)
    penalties = {t["penalty_text"] for t in truth}
    assert any(p.startswith("百分之") for p in penalties)
    assert any(p.endswith("‰") for p in penalties)
    assert "5%" in penalties


def test_near_duplicate_parties_occur_and_stay_distinct(
    corpus: list[tuple[dict, str, list[str]]],
) -> None:
    parties = {t[k] for t, _, _ in corpus for k in ("party_a", "party_b")}
    assert {"华信科技有限公司", "华信科技发展有限公司"} <= parties
    assert normalise_org("华信科技有限公司") == "华信科技"
    assert normalise_org("华信科技发展有限公司") == "华信科技发展"
    assert normalise_org("Summit Co., Ltd.") == normalise_org("ＳＵＭＭＩＴ co., ltd.")
    assert normalise_org("Acme Ltd.") != normalise_org("Acme Systems Ltd.")
    for t, _, _ in corpus:
        assert normalise_org(t["party_a"]) != normalise_org(t["party_b"])


def test_files_say_what_the_truth_says(corpus: list[tuple[dict, str, list[str]]]) -> None:
    for t, text, pages in corpus:
        name = t["filename"]
        for value in (t["contract_no"], t["party_a"], t["party_b"], t["signed_text"]):
            assert value in text, (name, value)
        for money in t["amounts"]:
            assert money["text"] in text, (name, money)
        assert t["penalty_text"] in text, name
        for n in t["clause_numbers"]:
            label = f"第{zh_numeral(int(n))}条" if t["language"] == "zh" else f"Clause {n} "
            assert label in text, (name, label)
        if t["penalty_subclause"]:
            assert f"{t['penalty_subclause']} " in text
        if t["format"] in ("pdf", "xlsx"):
            # the page (sheet) recorded for the penalty clause holds it
            assert len(pages) == t["pages"], name
            assert t["penalty_page"] in t["penalty_pages"], name
            assert t["penalty_text"] in pages[t["penalty_pages"][-1] - 1], name
        else:
            assert t["penalty_page"] is None
            assert t["penalty_pages"] == []


def test_pdfs_span_pages_and_chinese_round_trips(
    corpus: list[tuple[dict, str, list[str]]],
) -> None:
    pdfs = [(t, text) for t, text, _ in corpus if t["format"] == "pdf"]
    assert max(t["pages"] for t, _ in pdfs) >= 2
    zh = [text for t, text in pdfs if t["language"] == "zh"]
    assert zh
    assert all("违约" in text and "甲方" in text for text in zh)


def test_same_seed_same_corpus_other_seed_other(tmp_path: Path) -> None:
    a = [c.truth() for c in generate(40, seed=7)]
    b = [c.truth() for c in generate(40, seed=7)]
    c = [c.truth() for c in generate(40, seed=8)]
    assert a == b
    assert a != c
    truth = write_corpus(tmp_path, 12, seed=7)
    saved = json.loads((tmp_path / "truth.json").read_text(encoding="utf-8"))
    assert saved["documents"] == truth
    assert {p.name for p in tmp_path.iterdir()} == {"truth.json", *(t["filename"] for t in truth)}
    first = (tmp_path / truth[0]["filename"]).read_bytes()
    write_corpus(tmp_path, 12, seed=7)
    assert (tmp_path / truth[0]["filename"]).read_bytes() == first


def test_parallel_writer_writes_the_same_bytes(tmp_path: Path) -> None:
    one, two = tmp_path / "one", tmp_path / "two"
    truth_one = write_corpus(one, 30, seed=11)
    truth_two = write_corpus(two, 30, seed=11, workers=2)
    assert truth_two == truth_one
    # every format, so that each renderer's output (PDF pages, archives) is compared
    assert {t["format"] for t in truth_one} == {"pdf", "docx", "xlsx", "md", "txt"}
    names = sorted(p.name for p in one.iterdir())
    assert names == sorted(p.name for p in two.iterdir())
    assert "truth.json" in names
    assert len(names) == 31
    for name in names:
        assert (two / name).read_bytes() == (one / name).read_bytes(), name


def test_a_written_corpus_is_read_back_only_for_its_count_and_seed(tmp_path: Path) -> None:
    assert read_corpus(tmp_path, 8, 3) is None  # nothing written
    truth = write_corpus(tmp_path, 8, seed=3)
    assert read_corpus(tmp_path, 8, 3) == truth
    assert read_corpus(tmp_path, 9, 3) is None  # larger than the one written
    # a smaller count is the first contracts of the written one, as a corpus of its own
    assert read_corpus(tmp_path, 5, 3) == truth[:5]
    smaller = write_corpus(tmp_path / "five", 5, seed=3)
    assert smaller == truth[:5]
    for t in smaller:
        name = t["filename"]
        assert (tmp_path / "five" / name).read_bytes() == (tmp_path / name).read_bytes()
    assert read_corpus(tmp_path, 8, 4) is None
    (tmp_path / truth[5]["filename"]).unlink()  # a file missing: not a whole corpus
    assert read_corpus(tmp_path, 8, 3) is None
    (tmp_path / "truth.json").write_text("{not json", encoding="utf-8")
    assert read_corpus(tmp_path, 8, 3) is None


def test_periods() -> None:
    assert period_bounds("2023-Q3") == period_bounds("2023年第三季度")
    assert str(period_bounds("2023-Q3")[1]) == "2023-09-30"
    assert str(period_bounds("2024-02")[1]) == "2024-02-29"
    assert [str(d) for d in period_bounds("2022")] == ["2022-01-01", "2022-12-31"]
    lo, hi = period_bounds("2023-07-01/2023-09-30")
    assert (lo, hi) == period_bounds("2023-Q3")
    with pytest.raises(ValueError, match="unknown period"):
        period_bounds("next spring")


def test_questions_have_exact_non_empty_answers(
    corpus: list[tuple[dict, str, list[str]]],
) -> None:
    truth = [t for t, _, _ in corpus]
    questions = build_questions(truth, seed=20)
    assert len(questions) >= 60
    kinds = Counter(q.kind for q in questions)
    assert {"party_period_penalty", "amount_range", "contract_no", "penalty_clause"} <= set(kinds)
    assert {q.language for q in questions} == {"zh", "en"}
    by_name = {t["filename"]: t for t in truth}
    for q in questions:
        assert q.answer, q.qid
        assert q.text
        # the answer is exactly the documents meeting every condition
        assert q.answer == sorted(f for f, t in by_name.items() if matches(t, q.where))
    # the same truth, the same questions
    assert [q.as_json() for q in build_questions(truth, seed=20)] == [
        q.as_json() for q in questions
    ]


def test_oracle_reads_the_grammar() -> None:
    doc = {
        "party_a": "华信科技有限公司",
        "party_b": "Acme Ltd.",
        "contract_no": "HT-2023-0917",
        "clause_numbers": ["1", "2", "8"],
        "penalty_subclause": None,
        "signed_at": "2023-08-15",
        "amounts": [{"amount": 500000.0, "currency": "CNY", "text": "50万元"}],
        "penalty_rate": 0.08,
        "rates": [0.3, 0.06],
        "delivery_days": 30,
        "term_months": 12,
    }
    assert matches(doc, [{"field": "party_a", "op": "eq", "value": "华信科技"}])
    assert not matches(doc, [{"field": "party_a", "op": "eq", "value": "华信科技发展有限公司"}])
    assert matches(doc, [{"field": "party", "op": "eq", "value": "ACME"}])
    assert matches(doc, [{"field": "signed_at", "op": "within", "value": "2023年第三季度"}])
    assert not matches(doc, [{"field": "signed_at", "op": "within", "value": "2023-Q4"}])
    assert matches(doc, [{"field": "penalty_rate", "op": "gt", "value": "5%"}])
    assert not matches(doc, [{"field": "penalty_rate", "op": "gt", "value": 0.08}])
    assert matches(doc, [{"field": "penalty_rate", "op": "gte", "value": "8%"}])
    cny = {"field": "amount", "op": "gte", "value": {"amount": 500000, "currency": "CNY"}}
    usd = {"field": "amount", "op": "gte", "value": {"amount": 1, "currency": "USD"}}
    assert matches(doc, [cny])
    assert not matches(doc, [usd])  # no FX
    assert matches(doc, [{"field": "rate", "op": "eq", "value": "6%"}])
    assert not matches(doc, [{"field": "rate", "op": "eq", "value": "8%"}])  # that is the penalty
    assert matches(doc, [{"field": "duration", "op": "lte", "value": 30.0}])
    assert matches(doc, [{"field": "clause_no", "op": "eq", "value": "8"}])
    assert matches(doc, [{"field": "contract_no", "op": "in", "value": ["X-1", "ht-2023-0917"]}])
    # ANDed: one failing condition fails the document
    assert not matches(doc, [cny, usd])


def test_score_names_every_miss_and_extra() -> None:
    s = Score()
    s.add("q1", ["a.pdf", "b.docx"], ["a.pdf", "c.xlsx"])
    s.add("q2", ["d.pdf"], ["d.pdf"])
    assert (s.true_positives, s.returned, s.expected) == (2, 3, 3)
    assert s.precision == pytest.approx(2 / 3)
    assert s.recall == pytest.approx(2 / 3)
    out = s.as_json()
    assert out["misses"] == [{"question": "q1", "document": "b.docx"}]
    assert out["extras"] == [{"question": "q1", "document": "c.xlsx"}]
    assert out["macro_recall"] == pytest.approx(0.75)
    truth = [c.truth() for c in generate(30, seed=3)]
    questions = build_questions(truth, seed=1)
    assert questions
    perfect = score(questions, {q.qid: q.answer for q in questions})
    assert (perfect.precision, perfect.recall, perfect.misses) == (1.0, 1.0, [])
    empty = score(questions, {})
    assert empty.recall == 0.0
    assert len(empty.misses) == sum(len(q.answer) for q in questions)
