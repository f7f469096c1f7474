"""Real document bytes for the parser tests: PDF written by hand (one Type0 font whose
ToUnicode map is the identity, so Chinese and English text both extract), DOCX through
python-docx and XLSX through openpyxl, and the hostile ones (a zip bomb, an encrypted PDF)."""

from __future__ import annotations

import io
import re
import zipfile
import zlib
from collections.abc import Callable, Sequence


def _cmap(high_bytes: Sequence[int]) -> str:
    """An identity ToUnicode map over the 256-code blocks the text uses (pypdf expands
    every range it is given, so the map covers no more than needed)."""
    ranges = "".join(f"<{h:02X}00> <{h:02X}FF> <{h:02X}00>\n" for h in high_bytes)
    return (
        "/CIDInit /ProcSet findresource begin 12 dict begin begincmap\n"
        "/CIDSystemInfo << /Registry (Adobe) /Ordering (UCS) /Supplement 0 >> def\n"
        "/CMapName /Identity-UCS def /CMapType 2 def\n"
        "1 begincodespacerange <0000> <FFFF> endcodespacerange\n"
        f"{len(high_bytes)} beginbfrange\n{ranges}endbfrange\n"
        "endcmap CMapName currentdict /CMap defineresource pop end end\n"
    )


def pdf_bytes(pages: Sequence[Sequence[str]], *, title: str | None = None) -> bytes:
    """A PDF with one page per item, each line of it a line of text."""
    objects: list[bytes] = []

    def add(body: bytes) -> int:
        objects.append(body)
        return len(objects)

    used = sorted({ord(c) >> 8 for lines in pages for line in lines for c in line} | {0})
    assert len(used) <= 100
    assert not any(0xD8 <= h <= 0xDF for h in used)  # no surrogates: the BMP only
    cmap = _cmap(used).encode("ascii")
    cmap_id = add(b"<< /Length %d >>\nstream\n" % len(cmap) + cmap + b"\nendstream")
    descendant = add(
        b"<< /Type /Font /Subtype /CIDFontType2 /BaseFont /Mnemo /CIDSystemInfo "
        b"<< /Registry (Adobe) /Ordering (Identity) /Supplement 0 >> /DW 1000 >>"
    )
    font = add(
        b"<< /Type /Font /Subtype /Type0 /BaseFont /Mnemo /Encoding /Identity-H "
        b"/DescendantFonts [%d 0 R] /ToUnicode %d 0 R >>" % (descendant, cmap_id)
    )
    pages_id = len(objects) + 2 * len(pages) + 1
    kids = []
    for lines in pages:
        ops = ["BT", "/F1 11 Tf", "14 TL", "50 780 Td"]
        for line in lines:
            ops.append(f"<{line.encode('utf-16-be').hex().upper()}> Tj T*")
        ops.append("ET")
        stream = "\n".join(ops).encode("ascii")
        content = add(b"<< /Length %d >>\nstream\n" % len(stream) + stream + b"\nendstream")
        kids.append(
            add(
                b"<< /Type /Page /Parent %d 0 R /MediaBox [0 0 595 842] /Contents %d 0 R "
                b"/Resources << /Font << /F1 %d 0 R >> >> >>" % (pages_id, content, font)
            )
        )
    assert (
        add(
            b"<< /Type /Pages /Kids [%s] /Count %d >>"
            % (b" ".join(b"%d 0 R" % k for k in kids), len(kids))
        )
        == pages_id
    )
    info = b""
    if title is not None:
        info_id = add(b"<< /Title <FEFF%s> >>" % title.encode("utf-16-be").hex().encode())
        info = b" /Info %d 0 R" % info_id
    catalog = add(b"<< /Type /Catalog /Pages %d 0 R >>" % pages_id)
    return _pdf_file(b"%PDF-1.7\n%\xe2\xe3\xcf\xd3\n", objects, catalog, info)


def _pdf_file(header: bytes, objects: Sequence[bytes], root: int, info: bytes = b"") -> bytes:
    """A PDF file of these objects (numbered from 1), its cross-reference table and trailer."""
    out = io.BytesIO()
    out.write(header)
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(out.tell())
        out.write(b"%d 0 obj\n" % number + body + b"\nendobj\n")
    xref = out.tell()
    out.write(b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1))
    for offset in offsets:
        out.write(b"%010d 00000 n \n" % offset)
    out.write(
        b"trailer\n<< /Size %d /Root %d 0 R%s >>\nstartxref\n%d\n%%%%EOF\n"
        % (len(objects) + 1, root, info, xref)
    )
    return out.getvalue()


def encrypted_pdf_bytes(pages: Sequence[Sequence[str]], password: str = "") -> bytes:
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(pdf_bytes(pages))))
    writer.encrypt(user_password=password, owner_password="owner", algorithm="AES-128")
    out = io.BytesIO()
    writer.write(out)
    return out.getvalue()


def docx_bytes(
    blocks: Sequence[tuple[str, str]], *, table: Sequence[Sequence[str]] = (), title: str = ""
) -> bytes:
    """A DOCX of (style, text) paragraphs: style "h1", "h2" or "p"; then a table."""
    import docx

    document = docx.Document()
    document.core_properties.title = title
    for style, text in blocks:
        if style.startswith("h"):
            document.add_heading(text, level=int(style[1:]))
        else:
            document.add_paragraph(text)
    if table:
        grid = document.add_table(rows=len(table), cols=len(table[0]))
        for r, row in enumerate(table):
            for c, value in enumerate(row):
                grid.cell(r, c).text = value
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def xlsx_bytes(sheets: dict[str, Sequence[Sequence[object]]]) -> bytes:
    import openpyxl

    book = openpyxl.Workbook()
    book.remove(book.active)
    for name, rows in sheets.items():
        sheet = book.create_sheet(name)
        for row in rows:
            sheet.append(list(row))
    out = io.BytesIO()
    book.save(out)
    return out.getvalue()


def zip_bomb_docx(size: int = 50 * 1024 * 1024) -> bytes:
    """A DOCX-looking zip whose document.xml inflates from about 50 KiB to `size` bytes."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("[Content_Types].xml", "<Types/>")
        with archive.open("word/document.xml", "w") as member:
            chunk = b"\x20" * (1024 * 1024)
            for _ in range(size // len(chunk)):
                member.write(chunk)
    return out.getvalue()


def many_members_zip(count: int) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_STORED) as archive:
        archive.writestr("word/document.xml", "<w:document/>")
        for i in range(count):
            archive.writestr(f"word/media/{i}.bin", b"x")
    return out.getvalue()


# the "billion laughs": nine levels of entities, each ten of the one below
LAUGHS = (
    '<?xml version="1.0"?><!DOCTYPE lolz [<!ENTITY lol0 "lol">'
    + "".join(f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, 10))
    + "]>"
)


def with_entity_bomb(data: bytes, member: str, placeholder: str) -> bytes:
    """The zip `data` with `member`'s XML declaring the billion laughs and its first
    `placeholder` replaced by the top entity."""

    def bomb(xml: str) -> str:
        if xml.startswith("<?xml"):
            xml = xml.partition("?>")[2]
        assert placeholder in xml
        return LAUGHS + xml.replace(placeholder, "&lol9;", 1)

    return _with_member(data, member, bomb)


def _with_member(data: bytes, member: str, edit: Callable[[str], str]) -> bytes:
    """The zip `data` with `member`'s XML text passed through `edit`."""
    source = zipfile.ZipFile(io.BytesIO(data))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for info in source.infolist():
            body = source.read(info.filename)
            if info.filename == member:
                body = edit(body.decode("utf-8")).encode("utf-8")
            archive.writestr(info.filename, body)
    return out.getvalue()


def sparse_xlsx(cells: Sequence[tuple[str, str]], dimension: str | None = None) -> bytes:
    """A one-sheet XLSX holding only `cells` ((reference, text), in row order), and
    declaring `dimension` (`A1:XFD1048576`) as the sheet's size when given: a few bytes
    that name a sheet of millions of blank cells."""
    rows = "".join(
        f'<row r="{ref.lstrip("ABCDEFGHIJKLMNOPQRSTUVWXYZ")}"><c r="{ref}" t="inlineStr">'
        f"<is><t>{text}</t></is></c></row>"
        for ref, text in cells
    )
    size = f'<dimension ref="{dimension}"/>' if dimension else ""

    def sheet(xml: str) -> str:
        xml = re.sub(r"<dimension [^>]*/>", "", xml)
        return re.sub(r"<sheetData>.*</sheetData>", f"{size}<sheetData>{rows}</sheetData>", xml)

    return _with_member(xlsx_bytes({"s": [["x"]]}), "xl/worksheets/sheet1.xml", sheet)


def spanning_docx(span: int, *, continued_rows: int = 0) -> bytes:
    """A DOCX whose table's one cell spans `span` grid columns (`w:gridSpan`), with
    `continued_rows` rows below it merged into it (`w:vMerge`)."""
    import docx
    from docx.oxml import OxmlElement
    from docx.oxml.ns import qn

    document = docx.Document()
    document.add_paragraph("Article 1 Scope")
    table = document.add_table(rows=1 + continued_rows, cols=1)
    table.cell(0, 0).text = "Party A: Acme"
    for index, row in enumerate(table.rows):
        properties = row._tr.tc_lst[0].get_or_add_tcPr()
        spans = OxmlElement("w:gridSpan")
        spans.set(qn("w:val"), str(span))
        properties.append(spans)
        if continued_rows:
            merge = OxmlElement("w:vMerge")
            if index == 0:
                merge.set(qn("w:val"), "restart")
            properties.append(merge)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def shared_stream_pdf(pages: int, content: bytes) -> bytes:
    """A PDF of `pages` pages that all draw the same content stream (Helvetica as F1): a
    few bytes that cost each page's reading all over again."""
    stream = zlib.compress(content, 9)
    font = 4 + pages
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [%s] /Count %d >>"
        % (b" ".join(b"%d 0 R" % (4 + i) for i in range(pages)), pages),
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n" % len(stream) + stream + b"\nendstream",
    ]
    objects += [
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 3 0 R "
        b"/Resources << /Font << /F1 %d 0 R >> >> >>" % font
    ] * pages
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    return _pdf_file(b"%PDF-1.4\n", objects, 1)
