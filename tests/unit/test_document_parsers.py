"""Parsing documents' bytes into located sections, and refusing the bad ones with a code."""

from __future__ import annotations

import io
import random
import threading
import zipfile
from collections.abc import Callable
from datetime import datetime

import pytest
from tests.document_samples import (
    docx_bytes,
    encrypted_pdf_bytes,
    many_members_zip,
    pdf_bytes,
    shared_stream_pdf,
    spanning_docx,
    sparse_xlsx,
    with_entity_bomb,
    xlsx_bytes,
    zip_bomb_docx,
)

from mnemo.adapters.document_parsers import MEDIA_TYPES, detect_media_type, parse_document
from mnemo.domain.documents import DocumentLimits, DocumentRejected, ParsedDocument

LIMITS = DocumentLimits()

CONTRACT_PAGES = [
    [
        "采购合同",
        "合同编号：HT-2023-0917",
        "甲方：XX科技有限公司",
        "第一条 标的",
        "乙方提供软件服务。",
    ],
    ["第二条 价款", "合同总价为人民币50万元。", "第八条 违约责任", "违约金为合同金额的5%。"],
    ["8.2 Late delivery", "Article 9 Payment", "Payment within 30 days."],
]


def parse(data: bytes, filename: str = "doc", media_type: str | None = None) -> ParsedDocument:
    return parse_document(data, filename, media_type, LIMITS)


def rejected(data: bytes, filename: str = "doc", limits: DocumentLimits = LIMITS) -> str:
    with pytest.raises(DocumentRejected) as caught:
        parse_document(data, filename, None, limits)
    return caught.value.code


def test_a_pdf_splits_at_its_clauses_and_keeps_each_clause_page_and_number() -> None:
    doc = parse(pdf_bytes(CONTRACT_PAGES, title="采购合同 2023"), "c.pdf")
    assert doc.media_type == "application/pdf"
    assert doc.pages == 3
    assert doc.title == "采购合同 2023"
    assert doc.language == "zh"
    located = [(s.clause, s.page) for s in doc.sections]
    assert located == [(None, 1), ("1", 1), ("2", 2), ("8", 2), ("8.2", 3), ("9", 3)]
    eighth = doc.sections[3]
    assert eighth.text == "第八条 违约责任\n违约金为合同金额的5%。"
    assert eighth.heading == "第八条 违约责任"
    assert [s.index for s in doc.sections] == list(range(len(doc.sections)))
    assert "合同编号：HT-2023-0917" in doc.sections[0].text


def test_the_same_bytes_give_the_same_sections() -> None:
    data = docx_bytes([("h1", "Agreement"), ("p", "Article 1 Scope"), ("p", "Article 2 Fees")])
    assert parse(data) == parse(data)
    pdf = pdf_bytes(CONTRACT_PAGES)
    assert parse(pdf) == parse(pdf)


def test_a_docx_keeps_headings_paragraph_order_and_table_rows() -> None:
    data = docx_bytes(
        [
            ("h1", "Service Agreement"),
            ("p", "Party A: Acme Trading Co., Ltd."),
            ("h2", "Article 1 Scope"),
            ("p", "Acme supplies hosting."),
            ("p", "Article 2 Fees"),
            ("p", "The fee is USD 1.2 million."),
        ],
        table=[["Party B", "Beta Inc."], ["Signed", "15 August 2023"]],
        title="SA-2023",
    )
    doc = parse(data, "sa.docx")
    assert doc.media_type == MEDIA_TYPES["docx"]
    assert doc.title == "SA-2023"
    assert doc.language == "en"
    assert [(s.clause, s.heading) for s in doc.sections] == [
        (None, "Service Agreement"),
        ("1", "Article 1 Scope"),
        ("2", "Article 2 Fees"),
    ]
    assert doc.sections[0].text == "Service Agreement\nParty A: Acme Trading Co., Ltd."
    # the table follows the paragraph before it, a two-cell row read as key: value
    assert doc.sections[2].text.endswith("Party B: Beta Inc.\nSigned: 15 August 2023")
    assert all(s.page is None for s in doc.sections)


def test_an_xlsx_gives_each_sheet_its_page_and_reads_values_not_formulas() -> None:
    data = xlsx_bytes(
        {
            "合同": [
                ["甲方", "XX科技有限公司"],
                ["签订日期", datetime(2023, 8, 15)],
                ["金额", 500000.0],
            ],
            "明细": [["项目", "单价", "数量"], ["服务器", 1200.5, 3], ["合计", "=B2*C2", None]],
        }
    )
    doc = parse(data, "c.xlsx")
    assert doc.media_type == MEDIA_TYPES["xlsx"]
    assert doc.pages == 2
    assert [(s.page, s.heading) for s in doc.sections] == [(1, "合同"), (2, "明细")]
    assert doc.sections[0].text == "甲方: XX科技有限公司\n签订日期: 2023-08-15\n金额: 500000"
    # a formula without a cached value is no value: its text is not read as content
    assert doc.sections[1].text == "项目 | 单价 | 数量\n服务器 | 1200.5 | 3\n合计"


def test_markdown_headings_and_clauses() -> None:
    text = "# 服务协议\n\n第一条 定义\n本协议所称服务……\n\n第二条 价格\n\n服务费为50万元。\n"
    doc = parse(text.encode(), "a.md")
    assert doc.media_type == "text/markdown"
    assert doc.title == "服务协议"
    assert [(s.clause, s.text) for s in doc.sections] == [
        ("1", "服务协议\n第一条 定义\n本协议所称服务……"),
        ("2", "第二条 价格\n服务费为50万元。"),
    ]


@pytest.mark.parametrize("encoding", ["utf-8", "utf-8-sig", "gb18030"])
def test_plain_chinese_text_in_utf8_or_gb18030(encoding: str) -> None:
    text = "技术服务合同\n第一条 服务内容\n乙方提供运维服务。\n第二条 期限\n服务期三个月。\n"
    doc = parse(text.encode(encoding), "a.txt")
    assert doc.media_type == "text/plain"
    assert [s.clause for s in doc.sections] == [None, "1", "2"]
    assert doc.sections[2].text == "第二条 期限\n服务期三个月。"


def test_text_without_clauses_splits_at_headings_and_paragraph_groups() -> None:
    paragraphs = [f"Paragraph {i}." + " word" * 60 for i in range(8)]
    doc = parse("\n\n".join(paragraphs).encode(), "notes.txt")
    assert all(s.clause is None for s in doc.sections)
    assert 1 < len(doc.sections) < len(paragraphs)  # paragraphs grouped, not one block
    assert "\n".join(s.text for s in doc.sections) == "\n".join(paragraphs)


def test_a_long_clause_is_cut_into_sections_of_at_most_4000_characters() -> None:
    body = "本条款约定双方的权利义务。" * 900  # 11,700 characters on one line
    doc = parse(f"第一条 总则\n甲方：XX公司\n第二条 权利义务\n{body}\n".encode(), "a.txt")
    second = [s for s in doc.sections if s.clause == "2"]
    assert len(second) == 3
    assert all(len(s.text) <= 4000 for s in doc.sections)
    assert "".join(s.text for s in second).replace("\n", "") == "第二条 权利义务" + body


def test_the_bytes_decide_the_type_not_the_name() -> None:
    pdf = pdf_bytes([["Hello contract"]])
    assert detect_media_type(pdf, "notes.txt", "text/plain") == "application/pdf"
    assert parse(b"plain words", "scan.pdf", "application/pdf").media_type == "text/plain"
    assert detect_media_type(docx_bytes([("p", "x")]), "a.xlsx") == MEDIA_TYPES["docx"]


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (b"\x89PNG\r\n\x1a\n" + bytes(200), "UNSUPPORTED_DOCUMENT_TYPE"),
        (b"\xff\xd8\xff\xe0" + bytes(200), "UNSUPPORTED_DOCUMENT_TYPE"),
        (bytes(range(256)) * 4, "UNSUPPORTED_DOCUMENT_TYPE"),
        (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(600), "UNSUPPORTED_DOCUMENT_TYPE"),
        (b"%PDF-1.7\n" + b"\x13\x37garbage" * 50, "DOCUMENT_MALFORMED"),
        (b"", "DOCUMENT_EMPTY"),
        (b" \n\t\n", "DOCUMENT_EMPTY"),
    ],
    ids=["png", "jpeg", "binary", "legacy-office", "pdf-magic-garbage", "empty", "blank"],
)
def test_wrong_magic_and_empty_input_get_their_codes(data: bytes, code: str) -> None:
    assert rejected(data) == code


def test_a_zip_that_is_neither_docx_nor_xlsx_is_unsupported() -> None:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("readme.txt", "hello")
    assert rejected(out.getvalue(), "a.docx") == "UNSUPPORTED_DOCUMENT_TYPE"


@pytest.mark.parametrize("kind", ["pdf", "docx", "xlsx"])
def test_a_truncated_document_is_malformed(kind: str) -> None:
    data = {
        "pdf": pdf_bytes(CONTRACT_PAGES),
        "docx": docx_bytes([("p", "第一条 定义")] * 20),
        "xlsx": xlsx_bytes({"s": [["甲方", "XX公司"]] * 50}),
    }[kind]
    assert rejected(data[: len(data) // 2], f"a.{kind}") == "DOCUMENT_MALFORMED"


def test_damaged_bytes_never_escape_as_another_error() -> None:
    rng = random.Random(20)
    originals = [docx_bytes([("p", "Article 1 Scope")] * 5), pdf_bytes(CONTRACT_PAGES)]
    originals.append(xlsx_bytes({"s": [["a", "b"]] * 5}))
    outcomes: list[object] = []
    for original in originals:
        for _ in range(15):
            damaged = bytearray(original)
            for _ in range(8):
                damaged[rng.randrange(8, len(damaged))] = rng.randrange(256)
            try:
                outcomes.append(len(parse(bytes(damaged)).sections) > 0)
            except DocumentRejected as exc:  # a coded refusal is the only other way out
                outcomes.append(exc.status)
    assert len(outcomes) == 45
    assert set(outcomes) <= {True, 400, 413, 415}


def test_a_zip_bomb_is_refused_from_its_directory() -> None:
    bomb = zip_bomb_docx(50 * 1024 * 1024)
    assert len(bomb) < 200_000
    assert rejected(bomb, "a.docx") == "DOCUMENT_BOMB"


def test_too_many_zip_members_or_too_much_inflated_is_a_bomb() -> None:
    assert rejected(many_members_zip(50), limits=DocumentLimits(max_zip_members=20)) == (
        "DOCUMENT_BOMB"
    )
    honest = docx_bytes([("p", "Article 1 Scope")])
    assert rejected(honest, limits=DocumentLimits(max_expanded_bytes=10_000)) == "DOCUMENT_BOMB"
    assert parse(honest).sections  # the same document within the limits


def test_the_compression_ratio_limit_is_the_settings() -> None:
    bomb = zip_bomb_docx(2 * 1024 * 1024)
    lenient = DocumentLimits(max_compression_ratio=5_000)
    with pytest.raises(DocumentRejected) as caught:
        parse_document(bomb, "a.docx", None, lenient)
    assert caught.value.code != "DOCUMENT_BOMB"  # let through the ratio, then unreadable


# a parse that would take hours on a hostile file must end in seconds (the unbounded
# parsers took minutes to hours, holding a worker thread and the interpreter lock)
PARSE_BOUND = 15.0


def within_bound(parse_it: Callable[[], object]) -> object:
    """What `parse_it` returns or raises, failing the test when it is still parsing after
    PARSE_BOUND seconds (the thread is left behind, a daemon)."""
    done: list[object] = []

    def run() -> None:
        try:
            done.append(parse_it())
        except DocumentRejected as exc:
            done.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(PARSE_BOUND)
    assert done, f"still parsing after {PARSE_BOUND} s"
    return done[0]


def test_a_spreadsheet_declaring_millions_of_blank_cells_is_read_for_what_it_holds() -> None:
    # 5 KB that declare a sheet of 16,384 columns by 1,048,576 rows: the declared size
    # padded every row to it, 17 billion blank cells visited
    data = sparse_xlsx([("A1", "Party A: Acme"), ("XFD1048576", "end")], "A1:XFD1048576")
    assert len(data) < 8_000
    doc = within_bound(lambda: parse(data, "a.xlsx"))
    assert isinstance(doc, ParsedDocument), doc
    assert "Party A: Acme" in doc.sections[0].text
    assert "end" in doc.sections[-1].text


def test_a_spreadsheet_with_a_row_a_billion_rows_down_is_too_large() -> None:
    data = sparse_xlsx([("A1", "Party A: Acme"), ("A1000000000", "end")])
    refused = within_bound(lambda: parse(data, "a.xlsx"))
    assert isinstance(refused, DocumentRejected), refused
    assert (refused.code, refused.status) == ("DOCUMENT_TOO_LARGE", 413)


def test_the_cells_a_spreadsheet_may_hold_are_the_limits() -> None:
    data = xlsx_bytes({"s": [[f"r{r}c{c}" for c in range(10)] for r in range(20)]})
    assert parse(data, "a.xlsx").sections
    assert rejected(data, limits=DocumentLimits(max_cells=100)) == "DOCUMENT_TOO_LARGE"


def test_a_docx_cell_spanning_a_billion_columns_is_read_once() -> None:
    # python-docx repeats a cell once per grid column it spans: 10^9 times here
    data = spanning_docx(1_000_000_000)
    doc = within_bound(lambda: parse(data, "a.docx"))
    assert isinstance(doc, ParsedDocument), doc
    assert "Party A: Acme" in "\n".join(s.text for s in doc.sections)


def test_a_docx_cell_merged_down_repeats_the_text_above() -> None:
    doc = parse(spanning_docx(3, continued_rows=2), "a.docx")
    text = "\n".join(s.text for s in doc.sections)
    assert text.count("Party A: Acme") == 3  # each merged row reads as the cell it joins


def test_a_pdf_whose_pages_share_one_long_stream_is_too_large() -> None:
    # 8 KB: 40 pages drawing the same 100,000 text operators took half a minute
    data = shared_stream_pdf(40, b"BT /F1 12 Tf 72 700 Td " + b"(a) Tj " * 100_000 + b"ET")
    assert len(data) < 10_000
    refused = within_bound(lambda: parse(data, "a.pdf"))
    assert isinstance(refused, DocumentRejected), refused
    assert (refused.code, refused.status) == ("DOCUMENT_TOO_LARGE", 413)


def test_a_pdf_of_many_ordinary_pages_sharing_a_stream_is_read() -> None:
    data = shared_stream_pdf(2_000, b"BT /F1 12 Tf 72 700 Td " + b"(Article 1) Tj T* " * 50 + b"ET")
    doc = parse(data, "a.pdf")
    assert doc.pages == 2_000
    assert "Article 1" in doc.sections[0].text


def test_xml_entity_expansion_in_a_docx_or_xlsx_is_refused() -> None:
    docx = with_entity_bomb(docx_bytes([("p", "PLACEHOLDER")]), "word/document.xml", "PLACEHOLDER")
    assert rejected(docx, "a.docx") == "DOCUMENT_MALFORMED"
    sheet = xlsx_bytes({"s": [["甲方", 12345]]})
    xlsx = with_entity_bomb(sheet, "xl/worksheets/sheet1.xml", "<v>12345</v>")
    assert rejected(xlsx, "a.xlsx") == "DOCUMENT_MALFORMED"


@pytest.mark.parametrize("password", ["", "secret"])
def test_an_encrypted_pdf_is_refused_even_with_an_empty_password(password: str) -> None:
    assert rejected(encrypted_pdf_bytes(CONTRACT_PAGES, password)) == "DOCUMENT_ENCRYPTED"


def test_an_encrypted_office_file_or_zip_member_is_refused() -> None:
    ole = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(500) + "EncryptedPackage".encode("utf-16-le")
    assert rejected(ole, "a.docx") == "DOCUMENT_ENCRYPTED"
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        archive.writestr("word/document.xml", "<w:document/>")
    data = bytearray(out.getvalue())
    central = data.rfind(b"PK\x01\x02")  # the last member's directory entry
    data[central + 8] |= 0x1  # its general purpose flag: encrypted
    assert rejected(bytes(data), "a.docx") == "DOCUMENT_ENCRYPTED"


def test_size_and_page_limits() -> None:
    pdf = pdf_bytes(CONTRACT_PAGES)
    too_large = DocumentLimits(max_bytes=len(pdf) - 1)
    with pytest.raises(DocumentRejected) as caught:
        parse_document(pdf, "a.pdf", None, too_large)
    assert (caught.value.code, caught.value.status) == ("DOCUMENT_TOO_LARGE", 413)
    assert rejected(pdf, limits=DocumentLimits(max_pages=2)) == "DOCUMENT_TOO_LARGE"
    sheets = xlsx_bytes({f"s{i}": [["x"]] for i in range(3)})
    assert rejected(sheets, limits=DocumentLimits(max_pages=2)) == "DOCUMENT_TOO_LARGE"
    text = ("第一条 甲方义务\n" * 30).encode()
    assert rejected(text, limits=DocumentLimits(max_sections=10)) == "DOCUMENT_TOO_LARGE"


def test_a_pdf_without_text_is_empty() -> None:
    assert rejected(pdf_bytes([[], []])) == "DOCUMENT_EMPTY"


def test_the_codes_answer_with_their_status() -> None:
    assert DocumentRejected("UNSUPPORTED_DOCUMENT_TYPE", "x").status == 415
    assert DocumentRejected("DOCUMENT_BOMB", "x").as_dict()["code"] == "DOCUMENT_BOMB"
    with pytest.raises(ValueError, match="unknown"):
        DocumentRejected("SOMETHING_ELSE", "x")


def test_a_spreadsheet_row_that_starts_with_a_clause_number_opens_that_clause() -> None:
    data = xlsx_bytes(
        {
            "条款": [
                ["第八条", "交付", "乙方应于30日内交付"],
                ["第九条", "违约责任", "违约金为合同金额的5%"],
                ["第十条", "争议解决", "提交仲裁"],
            ]
        }
    )
    doc = parse(data, "c.xlsx")
    by_clause = {s.clause: s.text for s in doc.sections}
    assert "违约金为合同金额的5%" in by_clause["9"]
    assert "违约金" not in by_clause["8"]
