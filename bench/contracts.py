"""A deterministic synthetic contract corpus with its ground truth (seeded: the same seed and
size give the same files, byte for byte, and the same truth: the documents' own dates and
the DOCX/XLSX archives' member dates are fixed).

`python -m bench.contracts --out DIR [--count 300] [--seed 20] [--workers N]` writes the
files and DIR/truth.json (last: its presence means the corpus is whole). The files are
rendered by N processes (one per core by default); the contracts are drawn in one, so the
files and the truth do not depend on N. Each contract is Chinese or English and is written
as PDF (reportlab, the built-in STSong-Light CID font for Chinese, so no font file is
needed and pypdf reads the text back), DOCX (python-docx), XLSX (openpyxl: a sheet of
facts and a sheet of clauses), Markdown or plain text. What each one says is known:

* contract number (HT-2023-0917, C-2024-0042), unique in the corpus;
* Party A and Party B (甲方/乙方), from a pool of organisations with near-duplicates
  (华信科技有限公司 next to 华信科技发展有限公司, Acme Ltd. next to Acme Systems Ltd.);
* the signing date (2022-2024) in the header, an effective date some days later;
* the contract amount and an advance payment, in CNY or USD, written several ways
  (50万元, 人民币500,000元, USD 1.2 million, $1,200,000, RMB 800,000);
* the penalty rate (5%, 百分之八, 0.5‰ per day) in a clause whose number varies, the
  advance share and the VAT rate as other rates;
* the delivery period in days and the term in months; the clause numbers.

Organisation names are compared as the query grammar does: `normalise_org` folds case,
spaces and full-width forms and removes the legal suffixes.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import re
import sys
import unicodedata
import zipfile
from collections.abc import Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from datetime import date, timedelta
from functools import partial
from pathlib import Path
from typing import Any

__all__ = [
    "FORMATS",
    "Contract",
    "generate",
    "normalise_org",
    "read_corpus",
    "render",
    "write_corpus",
]

FORMATS = ("pdf", "docx", "xlsx", "md", "txt")
# shares of the formats: most are PDF and DOCX, a fifth XLSX, the rest text
_FORMAT_WEIGHTS = (0.36, 0.34, 0.2, 0.05, 0.05)

# pairs of near-duplicates first: distinct names once normalised, one a part of the other
ZH_ORG_PAIRS = (
    ("华信科技有限公司", "华信科技发展有限公司"),
    ("东方数据有限公司", "东方数据服务有限公司"),
    ("长城建设股份有限公司", "长城建设工程股份有限公司"),
    ("蓝海贸易有限公司", "蓝海国际贸易有限公司"),
    ("远景能源有限责任公司", "远景新能源有限责任公司"),
)
ZH_ORG_SINGLES = (
    "中科软件有限公司",
    "星河物流有限公司",
    "金石医药股份有限公司",
    "瑞丰食品有限公司",
    "天成机械制造有限公司",
)
EN_ORG_PAIRS = (
    ("Acme Ltd.", "Acme Systems Ltd."),
    ("Blue River LLC", "Blue River Partners LLC"),
    ("Globex Corp.", "Globex International Corp."),
    ("Summit Co., Ltd.", "Summit Energy Co., Ltd."),
    ("Northwind Inc.", "Northwind Logistics Inc."),
)
EN_ORG_SINGLES = (
    "Initech Inc.",
    "Umbrella Logistics Limited",
    "Vertex Software Inc.",
    "Harbor Foods LLC",
    "Pioneer Machinery Corp.",
)
ZH_ORGS = tuple(n for pair in ZH_ORG_PAIRS for n in pair) + ZH_ORG_SINGLES
EN_ORGS = tuple(n for pair in EN_ORG_PAIRS for n in pair) + EN_ORG_SINGLES
ZH_PEOPLE = ("张伟", "王芳", "李娜", "刘洋", "陈静", "杨磊", "赵丽", "黄强", "周杰", "吴婷")
EN_PEOPLE = (
    "John Smith", "Mary Johnson", "David Brown", "Sarah Miller", "James Wilson",
    "Linda Davis", "Robert Taylor", "Emily Clark", "Michael Lewis", "Anna Walker",
)  # fmt: skip

_LEGAL_SUFFIXES = (
    "股份有限公司",
    "有限责任公司",
    "有限公司",
    "集团",
    "co., ltd.",
    "co.,ltd.",
    "co. ltd.",
    "limited",
    "ltd.",
    "ltd",
    "inc.",
    "inc",
    "llc",
    "corp.",
    "corp",
    "co.",
)


def normalise_org(name: str) -> str:
    """The grammar's equality form of an organisation name: full-width folded to half-width
    (NFKC), case folded, legal suffixes removed, spaces and trailing punctuation dropped."""
    text = unicodedata.normalize("NFKC", name).casefold().strip()
    changed = True
    while changed:
        changed = False
        for suffix in _LEGAL_SUFFIXES:
            if text.endswith(suffix) and len(text) > len(suffix):
                text = text[: -len(suffix)].rstrip(" ,.")
                changed = True
    return "".join(text.split())


@dataclass(frozen=True)
class Money:
    amount: float
    currency: str  # "CNY" | "USD"
    text: str  # as written


@dataclass
class Clause:
    number: str  # "8"
    heading: str
    paragraphs: list[str]  # body text; a paragraph may start with a sub-number "8.1 "
    page: int | None = None  # where its heading landed (PDF), sheet (XLSX)


@dataclass
class Contract:
    """One contract: what it says (the truth) and its clauses (what is written)."""

    index: int
    filename: str
    format: str
    language: str  # "zh" | "en"
    title: str
    contract_no: str
    party_a: str
    party_b: str
    contact_a: str
    contact_b: str
    signed_at: str  # YYYY-MM-DD
    signed_text: str
    effective_date: str
    total: Money
    advance: Money
    advance_rate: float
    vat_rate: float
    penalty_rate: float  # a fraction: 5% -> 0.05, 0.5‰ -> 0.0005
    penalty_text: str
    penalty_per_day: bool
    penalty_clause: str  # "8"
    penalty_subclause: str | None  # "8.1" when the clause has numbered sub-paragraphs
    delivery_days: int
    term_months: int
    clauses: list[Clause] = field(default_factory=list)
    pages: int | None = None
    # PDF: the page on which the penalty itself is written (its clause may start earlier)
    penalty_text_page: int | None = None

    @property
    def amounts(self) -> list[Money]:
        return [self.total, self.advance]

    @property
    def clause_numbers(self) -> list[str]:
        return [c.number for c in self.clauses]

    @property
    def penalty_page(self) -> int | None:
        for c in self.clauses:
            if c.number == self.penalty_clause:
                return c.page
        return None

    @property
    def penalty_pages(self) -> list[int]:
        """The pages a hit for the penalty may name: its clause's first page and the page
        the penalty is written on (the same but for a clause across a page break)."""
        pages = {self.penalty_page, self.penalty_text_page} - {None}
        return sorted(p for p in pages if p is not None)

    def truth(self) -> dict[str, Any]:
        """The document's entities, as JSON."""
        return {
            "filename": self.filename,
            "format": self.format,
            "language": self.language,
            "title": self.title,
            "pages": self.pages,
            "contract_no": self.contract_no,
            "party_a": self.party_a,
            "party_b": self.party_b,
            "persons": [self.contact_a, self.contact_b],
            "signed_at": self.signed_at,
            "signed_text": self.signed_text,
            "effective_date": self.effective_date,
            "amounts": [asdict(m) for m in self.amounts],
            "total": asdict(self.total),
            "rates": [self.advance_rate, self.vat_rate],
            "penalty_rate": self.penalty_rate,
            "penalty_text": self.penalty_text,
            "penalty_per_day": self.penalty_per_day,
            "penalty_clause": self.penalty_clause,
            "penalty_subclause": self.penalty_subclause,
            "penalty_page": self.penalty_page,
            "penalty_pages": self.penalty_pages,
            "delivery_days": self.delivery_days,
            "term_months": self.term_months,
            "clause_numbers": self.clause_numbers,
        }


# ---- how values are written -----------------------------------------------------------------

_ZH_DIGITS = "零一二三四五六七八九"
_EN_MONTHS = (
    "January", "February", "March", "April", "May", "June", "July", "August",
    "September", "October", "November", "December",
)  # fmt: skip


def zh_numeral(n: int) -> str:
    """1..99 in Chinese numerals: 8 -> 八, 12 -> 十二, 20 -> 二十."""
    if n < 10:
        return _ZH_DIGITS[n]
    tens, ones = divmod(n, 10)
    head = "" if tens == 1 else _ZH_DIGITS[tens]
    return head + "十" + (_ZH_DIGITS[ones] if ones else "")


def _zh_date(d: date) -> str:
    return f"{d.year}年{d.month}月{d.day}日"


def _en_date(d: date, style: int) -> str:
    month = _EN_MONTHS[d.month - 1]
    return f"{d.day} {month} {d.year}" if style == 0 else f"{month} {d.day}, {d.year}"


def _plain(value: float) -> str:
    return f"{value:g}" if value != int(value) else str(int(value))


def _money_text(amount: int, currency: str, language: str, style: int) -> str:
    if language == "zh":
        if currency == "CNY":
            if style == 0 and amount % 10_000 == 0:
                return f"{_plain(amount / 10_000)}万元"
            if style == 1:
                return f"人民币{amount:,}.00元"
            return f"人民币{amount:,}元"
        return f"USD {amount:,}" if style % 2 == 0 else f"{amount:,}美元"
    if currency == "CNY":
        return f"RMB {amount:,}" if style % 2 == 0 else f"CNY {amount:,}"
    if style == 0 and amount % 100_000 == 0 and amount >= 1_000_000:
        return f"USD {_plain(amount / 1_000_000)} million"
    return f"${amount:,}" if style == 1 else f"USD {amount:,}"


def _percent_text(rate_percent: int, language: str, style: int) -> str:
    if language == "zh" and style == 1:
        return "百分之" + zh_numeral(rate_percent)
    return f"{rate_percent}%"


# filler sentences: no numbers, dates, amounts, rates or names
_ZH_FILLER = (
    "双方应本着诚实信用的原则履行本合同项下的各项义务。",
    "任何一方不得擅自变更或者解除本合同。",
    "乙方应按照国家标准和行业标准提供合格的产品与服务。",
    "甲方应当为乙方履行合同提供必要的协助和便利条件。",
    "未经对方书面同意，任何一方不得向第三方转让本合同项下的权利义务。",
    "双方对在履行本合同过程中知悉的商业秘密负有保密义务。",
    "因不可抗力导致合同不能履行的，受影响一方应及时通知对方。",
    "本合同未尽事宜，由双方另行协商并签订补充协议。",
    "乙方交付的成果的知识产权归甲方所有，双方另有约定的除外。",
    "甲方有权对乙方的履约情况进行监督和检查。",
    "乙方应建立完善的质量管理体系，确保交付质量稳定可靠。",
    "双方往来的通知应以书面形式送达合同载明的地址。",
)
_EN_FILLER = (
    "Each party shall perform its obligations under this Contract in good faith.",
    "Neither party may amend or terminate this Contract without the consent of the other.",
    "The Seller shall supply goods and services that meet the applicable standards.",
    "The Buyer shall give the Seller the assistance reasonably required for performance.",
    "Neither party may assign its rights under this Contract without written consent.",
    "Each party shall keep confidential the business information of the other party.",
    "A party prevented from performing by force majeure shall promptly notify the other.",
    "Matters not covered here shall be settled by a supplementary agreement.",
    "Intellectual property in the deliverables vests in the Buyer unless agreed otherwise.",
    "The Buyer may inspect the performance of the Seller at reasonable times.",
    "The Seller shall maintain a quality management system for the deliverables.",
    "Notices shall be given in writing to the addresses stated in this Contract.",
)
_ZH_FILLER_HEADINGS = (
    "质量标准", "验收", "保密", "知识产权", "不可抗力", "通知", "转让", "监督检查",
)  # fmt: skip
_EN_FILLER_HEADINGS = (
    "Quality", "Acceptance", "Confidentiality", "Intellectual Property", "Force Majeure",
    "Notices", "Assignment", "Inspection",
)  # fmt: skip
_ZH_TITLES = ("采购合同", "技术服务合同", "软件开发合同", "设备租赁合同", "物流服务合同")
_EN_TITLES = (
    "Purchase Contract", "Technical Services Agreement", "Software Development Contract",
    "Equipment Lease Agreement", "Logistics Services Agreement",
)  # fmt: skip


def _random_date(rng: random.Random) -> date:
    start = date(2022, 1, 1)
    return start + timedelta(days=rng.randrange((date(2024, 12, 31) - start).days + 1))


def _contract(index: int, rng: random.Random) -> Contract:
    language = "zh" if rng.random() < 0.5 else "en"
    fmt = rng.choices(FORMATS, weights=_FORMAT_WEIGHTS)[0]
    pairs = ZH_ORG_PAIRS if language == "zh" else EN_ORG_PAIRS
    orgs = ZH_ORGS if language == "zh" else EN_ORGS
    people = ZH_PEOPLE if language == "zh" else EN_PEOPLE
    party_a = rng.choice(orgs)
    # Party B is neither Party A nor its near-duplicate
    twins = {n for pair in pairs if party_a in pair for n in pair} | {party_a}
    party_b = rng.choice([o for o in orgs if o not in twins])
    contact_a, contact_b = rng.sample(people, 2)
    signed = _random_date(rng)
    effective = signed + timedelta(days=rng.randint(3, 40))
    currency = (
        ("CNY" if rng.random() < 0.8 else "USD")
        if language == "zh"
        else ("USD" if rng.random() < 0.7 else "CNY")
    )
    total = rng.randint(5, 500) * 10_000 if currency == "CNY" else rng.randint(5, 300) * 10_000
    if currency == "USD" and rng.random() < 0.3:
        total = rng.randint(10, 30) * 100_000  # a round figure that reads as "1.2 million"
    style = rng.randrange(3)
    advance_percent = rng.choice((10, 20, 30, 40))
    advance = total * advance_percent // 100
    vat_percent = rng.choice((6, 9, 13))
    delivery_days = rng.choice((10, 15, 20, 30, 45, 60, 90))
    term_months = rng.choice((12, 18, 24, 36))

    kind = rng.random()
    if kind < 0.25:  # a daily rate in per mille
        per_mille = rng.choice((0.3, 0.5, 1.0))
        penalty_rate = round(per_mille / 1000, 6)
        penalty_text = f"{_plain(per_mille)}‰"
        per_day = True
    else:
        percent = rng.choice((3, 5, 8, 10, 15, 20))
        penalty_rate = round(percent / 100, 6)
        penalty_text = _percent_text(percent, language, 1 if rng.random() < 0.4 else 0)
        per_day = False

    year = signed.year
    prefix = "HT" if language == "zh" else "C"
    c = Contract(
        index=index,
        filename=f"contract-{index:05d}-{language}.{fmt}",
        format=fmt,
        language=language,
        title=rng.choice(_ZH_TITLES if language == "zh" else _EN_TITLES),
        contract_no=f"{prefix}-{year}-{index + 1:04d}",
        party_a=party_a,
        party_b=party_b,
        contact_a=contact_a,
        contact_b=contact_b,
        signed_at=signed.isoformat(),
        signed_text=_zh_date(signed) if language == "zh" else _en_date(signed, index % 2),
        effective_date=effective.isoformat(),
        total=Money(float(total), currency, _money_text(total, currency, language, style)),
        advance=Money(float(advance), currency, _money_text(advance, currency, language, 2)),
        advance_rate=advance_percent / 100,
        vat_rate=vat_percent / 100,
        penalty_rate=penalty_rate,
        penalty_text=penalty_text,
        penalty_per_day=per_day,
        penalty_clause="",
        penalty_subclause=None,
        delivery_days=delivery_days,
        term_months=term_months,
    )
    c.clauses = _clauses(c, rng, effective, advance_percent, vat_percent)
    return c


def _clauses(
    c: Contract, rng: random.Random, effective: date, advance_percent: int, vat_percent: int
) -> list[Clause]:
    zh = c.language == "zh"
    filler = _ZH_FILLER if zh else _EN_FILLER
    headings = _ZH_FILLER_HEADINGS if zh else _EN_FILLER_HEADINGS
    if zh:
        first = [
            ("合同标的", [f"甲方委托乙方提供{c.title.removesuffix('合同')}相关的产品与服务。"]),
            (
                "合同金额",
                [
                    f"本合同总金额为{c.total.text}（含增值税，税率{vat_percent}%）。",
                    f"甲方应在合同生效后支付合同金额的{advance_percent}%作为预付款，"
                    f"即{c.advance.text}。",
                ],
            ),
            ("交付期限", [f"乙方应在合同生效之日起{c.delivery_days}日内完成交付。"]),
        ]
        if c.penalty_per_day:
            penalty_sentence = f"乙方逾期交付的，每日按合同金额的{c.penalty_text}向甲方支付违约金。"
        else:
            penalty_sentence = f"任何一方违约的，违约金为合同金额的{c.penalty_text}。"
        penalty = ("违约责任", [penalty_sentence, rng.choice(filler)])
        last = [
            (
                "合同期限",
                [f"本合同自{_zh_date(effective)}起生效，有效期为{c.term_months}个月。"],
            ),
            ("争议解决", ["因本合同引起的争议，双方应协商解决；协商不成的，提交甲方所在地法院。"]),
        ]
    else:
        first = [
            ("Subject Matter", [f"The Seller shall provide the Buyer with the {c.title.lower()}."]),
            (
                "Contract Price",
                [
                    f"The total Contract Price is {c.total.text}, including VAT at "
                    f"{vat_percent}%.",
                    f"The Buyer shall pay an advance of {advance_percent}% of the Contract "
                    f"Price, being {c.advance.text}.",
                ],
            ),
            (
                "Delivery",
                [f"The Seller shall complete delivery within {c.delivery_days} days of "
                 "the effective date."],
            ),
        ]  # fmt: skip
        if c.penalty_per_day:
            penalty_sentence = (
                "If the Seller delays delivery, it shall pay a late penalty of "
                f"{c.penalty_text} of the Contract Price per day."
            )
        else:
            penalty_sentence = (
                f"A party in breach shall pay a penalty of {c.penalty_text} of the Contract Price."
            )
        penalty = ("Liability for Breach", [penalty_sentence, rng.choice(filler)])
        last = [
            (
                "Term",
                [f"This Contract takes effect on {_en_date(effective, 0)} and has a term "
                 f"of {c.term_months} months."],
            ),
            ("Disputes", ["Disputes shall be settled by negotiation or by the competent court."]),
        ]  # fmt: skip
    middle = [
        (h, rng.sample(filler, rng.randint(2, 4)))
        for h in rng.sample(headings, rng.randint(2, len(headings)))
    ]
    middle.insert(rng.randint(0, len(middle)), penalty)
    ordered = first + middle + last
    clauses = []
    for n, item in enumerate(ordered, start=1):
        heading, paragraphs = item
        number = str(n)
        if item is penalty:
            c.penalty_clause = number
            if not zh and rng.random() < 0.5:
                # numbered sub-paragraphs: "8.1 A party in breach ..."
                paragraphs = [f"{number}.{k} {p}" for k, p in enumerate(paragraphs, start=1)]
                c.penalty_subclause = f"{number}.1"
        clauses.append(Clause(number, heading, list(paragraphs)))
    return clauses


def generate(count: int = 300, seed: int = 20) -> list[Contract]:
    """`count` contracts; the same seed gives the same contracts."""
    rng = random.Random(seed)
    return [_contract(i, rng) for i in range(count)]


# ---- writing --------------------------------------------------------------------------------


def clause_label(c: Contract, number: str) -> str:
    return f"第{zh_numeral(int(number))}条" if c.language == "zh" else f"Clause {number}"


def header_lines(c: Contract) -> list[str]:
    if c.language == "zh":
        return [
            f"合同编号：{c.contract_no}",
            f"甲方：{c.party_a}",
            f"乙方：{c.party_b}",
            f"签订日期：{c.signed_text}",
            f"甲方联系人：{c.contact_a}",
            f"乙方联系人：{c.contact_b}",
        ]
    return [
        f"Contract No.: {c.contract_no}",
        f"Party A: {c.party_a}",
        f"Party B: {c.party_b}",
        f"This Contract is signed on {c.signed_text}.",
        f"Contacts: {c.contact_a} and {c.contact_b}",
    ]


def _text_lines(c: Contract, markdown: bool) -> list[str]:
    lines = [("# " if markdown else "") + c.title, ""]
    for line in header_lines(c):
        lines += [line, ""] if markdown else [line]
    lines.append("")
    for clause in c.clauses:
        lines.append(
            ("## " if markdown else "") + f"{clause_label(c, clause.number)} {clause.heading}"
        )
        lines += clause.paragraphs
        lines.append("")
    return lines


def _render_docx(c: Contract) -> bytes:
    import docx

    d = docx.Document()
    d.add_heading(c.title, level=1)
    for line in header_lines(c):
        d.add_paragraph(line)
    for clause in c.clauses:
        d.add_heading(f"{clause_label(c, clause.number)} {clause.heading}", level=2)
        for p in clause.paragraphs:
            d.add_paragraph(p)
    # fixed core properties: the same contract gives the same bytes
    d.core_properties.created = d.core_properties.modified = _FIXED_TIME
    d.core_properties.last_modified_by = d.core_properties.author = "bench"
    out = io.BytesIO()
    d.save(out)
    return _fixed_zip_times(out.getvalue())


def _render_xlsx(c: Contract) -> bytes:
    import openpyxl

    wb = openpyxl.Workbook()
    facts = wb.active
    zh = c.language == "zh"
    facts.title = "合同信息" if zh else "Contract"
    facts.append(["项目", "内容"] if zh else ["Item", "Value"])
    facts.append(["合同名称" if zh else "Title", c.title])
    for line in header_lines(c):
        if zh or ":" in line:
            key, _, value = line.partition("：" if zh else ": ")
            facts.append([key, value])
        else:
            facts.append(["Signing" if not zh else "签订", line])
    clauses = wb.create_sheet("条款" if zh else "Clauses")
    clauses.append(["条款", "标题", "内容"] if zh else ["Clause", "Heading", "Text"])
    for clause in c.clauses:
        clause.page = 2
        clauses.append(
            [clause_label(c, clause.number), clause.heading, "\n".join(clause.paragraphs)]
        )
    wb.properties.created = wb.properties.modified = _FIXED_TIME
    out = io.BytesIO()
    wb.save(out)
    return _fixed_zip_times(out.getvalue())


_MODIFIED = re.compile(rb"(<dcterms:modified[^>]*>)[^<]*(</dcterms:modified>)")


def _fixed_zip_times(data: bytes) -> bytes:
    """The archive with every member, and its modification property, dated _FIXED_TIME:
    python-docx and openpyxl stamp them with the time of writing, which would make each
    writing of a corpus differ."""
    members = []
    with zipfile.ZipFile(io.BytesIO(data)) as src:
        for info in src.infolist():
            body = src.read(info)
            if info.filename == "docProps/core.xml":
                # openpyxl sets the modification time to the time of saving
                body = _MODIFIED.sub(rb"\g<1>2024-01-01T00:00:00Z\g<2>", body)
            members.append((info, body))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as dst:
        for info, body in members:
            fixed = zipfile.ZipInfo(info.filename, date_time=_FIXED_TIME.timetuple()[:6])
            fixed.compress_type = info.compress_type
            fixed.external_attr = info.external_attr
            dst.writestr(fixed, body)
    return out.getvalue()


_PAGE_W, _PAGE_H = 595.27, 841.89  # A4 in points
_MARGIN = 56.0
_FONT_SIZE = 10.5
_LEADING = 16.0


def _wrap(text: str, font: str, width: float) -> list[str]:
    """Lines no wider than `width`, broken at spaces or after CJK punctuation only: an
    amount, a date or a rate is never split across lines."""
    from reportlab.pdfbase.pdfmetrics import stringWidth

    pieces: list[str] = []
    current = ""
    for ch in text:
        current += ch
        if ch == " " or ch in "，。；、：）":
            pieces.append(current)
            current = ""
    if current:
        pieces.append(current)
    lines: list[str] = []
    line = ""
    for piece in pieces:
        if line and stringWidth(line + piece, font, _FONT_SIZE) > width:
            lines.append(line.rstrip())
            line = piece
        else:
            line += piece
    if line.strip():
        lines.append(line.rstrip())
    return lines


def _render_pdf(c: Contract) -> bytes:
    from reportlab.pdfbase import pdfmetrics
    from reportlab.pdfbase.cidfonts import UnicodeCIDFont
    from reportlab.pdfgen import canvas

    if c.language == "zh":
        if "STSong-Light" not in pdfmetrics.getRegisteredFontNames():
            pdfmetrics.registerFont(UnicodeCIDFont("STSong-Light"))
        font = "STSong-Light"
    else:
        font = "Helvetica"
    out = io.BytesIO()
    pdf = canvas.Canvas(out, pagesize=(_PAGE_W, _PAGE_H), invariant=True)
    pdf.setTitle(c.title)
    width = _PAGE_W - 2 * _MARGIN
    page = 1
    y = _PAGE_H - _MARGIN

    def line(text: str, size: float = _FONT_SIZE, gap: float = 0.0) -> None:
        nonlocal page, y
        if y < _MARGIN + _LEADING:
            pdf.showPage()
            page += 1
            y = _PAGE_H - _MARGIN
        pdf.setFont(font, size)
        pdf.drawString(_MARGIN, y, text)
        y -= _LEADING + gap

    line(c.title, 15, 8)
    for h in header_lines(c):
        line(h)
    y -= _LEADING
    for clause in c.clauses:
        # a heading never sits alone at the foot of a page
        if y < _MARGIN + 3 * _LEADING:
            y = 0.0
        line(f"{clause_label(c, clause.number)} {clause.heading}", 12, 2)
        clause.page = page
        for p in clause.paragraphs:
            for wrapped in _wrap(p, font, width):
                if clause.number == c.penalty_clause and c.penalty_text in wrapped:
                    c.penalty_text_page = page
                line(wrapped)
        y -= _LEADING / 2
    pdf.showPage()
    pdf.save()
    c.pages = page
    return out.getvalue()


def render(c: Contract) -> bytes:
    """The contract's file, in its format (sets the clauses' pages as they land)."""
    if c.format == "pdf":
        return _render_pdf(c)
    if c.format == "docx":
        return _render_docx(c)
    if c.format == "xlsx":
        c.pages = 2
        return _render_xlsx(c)
    c.pages = None
    return ("\n".join(_text_lines(c, markdown=c.format == "md")) + "\n").encode("utf-8")


def _fixed_time() -> Any:
    from datetime import datetime

    return datetime(2024, 1, 1)


_FIXED_TIME = _fixed_time()


def iter_files(contracts: list[Contract]) -> Iterator[tuple[Contract, bytes]]:
    for c in contracts:
        yield c, render(c)


def _write_one(out: Path, c: Contract) -> dict[str, Any]:
    """Renders one contract into `out` (in a worker process); returns its truth, which
    rendering completes (pages, the clauses' pages)."""
    (out / c.filename).write_bytes(render(c))
    return c.truth()


def _write_truth(out: Path, count: int, seed: int, truth: list[dict[str, Any]]) -> None:
    # written last and under another name first: a truth.json present means a whole corpus
    body = {"seed": seed, "count": count, "documents": truth}
    text = json.dumps(body, ensure_ascii=False, indent=1)
    part = out / "truth.json.part"
    part.write_text(text + "\n", encoding="utf-8")
    part.replace(out / "truth.json")


def write_corpus(
    out: Path, count: int = 300, seed: int = 20, workers: int = 1
) -> list[dict[str, Any]]:
    """Writes the files and truth.json under `out`; returns the truth. With `workers` > 1
    the files are rendered by that many processes (the contracts are drawn here, in order,
    so the files and the truth are the same bytes as with one)."""
    out.mkdir(parents=True, exist_ok=True)
    contracts = generate(count, seed)
    if workers <= 1 or count < 2:
        truth = [_write_one(out, c) for c in contracts]
    else:
        chunk = max(1, min(50, count // (workers * 4)))
        with ProcessPoolExecutor(workers) as pool:
            truth = list(pool.map(partial(_write_one, out), contracts, chunksize=chunk))
    _write_truth(out, count, seed, truth)
    return truth


def read_corpus(out: Path, count: int, seed: int) -> list[dict[str, Any]] | None:
    """The truth of the first `count` contracts of a corpus already written under `out` for
    this seed, or None when there is none, it is of another seed or smaller, or one of
    those files is missing. Contract i is drawn after contracts 0..i-1 and from nothing
    else, so the first `count` of a larger corpus are the corpus of `count`."""
    try:
        written = json.loads((out / "truth.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(written, dict) or written.get("seed") != seed:
        return None
    truth = written.get("documents")
    if not isinstance(truth, list) or written.get("count") != len(truth) or len(truth) < count:
        return None
    truth = truth[:count]
    if not all((out / str(t.get("filename"))).is_file() for t in truth):
        return None
    return truth


def default_workers() -> int:
    return max(1, len(os.sched_getaffinity(0)))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.contracts", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--count", type=int, default=300)
    ap.add_argument("--seed", type=int, default=20)
    ap.add_argument(
        "--workers", type=int, default=default_workers(), help="rendering processes (the cores)"
    )
    args = ap.parse_args(argv)
    truth = write_corpus(args.out, args.count, args.seed, args.workers)
    by_format: dict[str, int] = {}
    for t in truth:
        by_format[t["format"]] = by_format.get(t["format"], 0) + 1
    print(f"wrote {len(truth)} contracts to {args.out}: {by_format}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
