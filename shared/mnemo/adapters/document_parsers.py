"""Documents' bytes to sections: PDF through pypdf, DOCX through python-docx, XLSX through
openpyxl (read-only, cell values only), Markdown and plain text (UTF-8, or GB18030 for
Chinese text that is not UTF-8).

The type is read from the bytes (`%PDF-`, a zip holding `word/document.xml` or
`xl/workbook.xml`, text that decodes), never from the name alone; the name or declared
type only tells Markdown from plain text. What a parser refuses it refuses with a
`DocumentRejected` code, never another exception:

- more bytes than `DocumentLimits.max_bytes`, more pages (PDF), sheets (XLSX) or estimated
  pages (3,000 characters each) than `max_pages`, more sections than `max_sections`:
  DOCUMENT_TOO_LARGE;
- a zip container (DOCX, XLSX) with more members than `max_zip_members`, members whose
  declared sizes add up past `max_expanded_bytes`, or a member over 64 KiB declared to
  inflate more than `max_compression_ratio` times its packed size: DOCUMENT_BOMB. That is
  read from the zip's central directory before any member is inflated; a member that
  inflates past its declared size stops there and fails its checksum (zipfile reads no
  further than the declared size), which is DOCUMENT_MALFORMED;
- an encrypted PDF (even one with an empty user password), an encrypted zip member, or an
  encrypted Office file (an OLE container with an EncryptedPackage): DOCUMENT_ENCRYPTED;
- bytes the library cannot read: DOCUMENT_MALFORMED; no text at all: DOCUMENT_EMPTY;
- anything else (images, archives, legacy .doc/.xls, binary data): UNSUPPORTED_DOCUMENT_TYPE.

Sections follow the document's numbered clauses (第八条, Article 5, Clause 8.2, 5.2 at
the start of a line) where it has them, else its headings (DOCX heading styles, Markdown
`#`) and paragraphs, grouped up to about 1,000 characters. Each keeps the page (PDF), the
sheet (XLSX, as sheet index + 1) and the clause number it starts at; a longer section is
cut at line or sentence ends into parts of at most `section_chars`. The same bytes give
the same sections.
"""

from __future__ import annotations

import io
import logging
import math
import zipfile
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from datetime import date, datetime, time
from typing import Any

from mnemo.domain.documents import (
    DocumentLimits,
    DocumentRejected,
    ParsedDocument,
    Section,
    detect_language,
    fold_width,
    normalise_clause,
)
from mnemo.domain.patterns import linear_pattern

__all__ = ["MEDIA_TYPES", "detect_media_type", "parse_document"]

MEDIA_TYPES = {
    "pdf": "application/pdf",
    "docx": "application/vnd.openxmlformats-officedocument.wordprocessingml.document",
    "xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
    "markdown": "text/markdown",
    "text": "text/plain",
}
_OLE = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_ENCRYPTED_PACKAGE = "EncryptedPackage".encode("utf-16-le")
_BINARY_MAGIC = (
    b"\x89PNG", b"\xff\xd8\xff", b"GIF8", b"\x1f\x8b", b"7z\xbc\xaf", b"Rar!", b"\x7fELF",
    b"BM", b"RIFF", b"\x00\x00\x01\x00", b"MZ", b"PK\x05\x06", b"PK\x07\x08", b"BZh",
    b"\xfd7zXZ", b"\x28\xb5\x2f\xfd", b"OggS", b"fLaC", b"ID3", b"wOFF", b"\x00asm",
)  # fmt: skip
_RATIO_CHECKED_FROM = 64 * 1024  # a smaller member may compress well past any ratio
_CHARS_PER_PAGE = 3_000  # pages of a format without pages, for the page limit and rates
_PARAGRAPH_GROUP = 1_000  # paragraphs are grouped into sections up to about this size
_HEADING_CHARS = 80

# a numbered clause at the start of a line: 第八条 / 第8.2条, Article 5, Clause 8.2,
# Section 3, 5.2 Title, 5. Title, 5、标题; a spreadsheet row's first cell (第九条 | 违约责任 | ...)
_CLAUSE_LINE = (
    r"^\s*(?P<clause>第\s*(?:[0-9]{1,3}(?:\.[0-9]{1,3}){0,3}|[一二三四五六七八九十百零〇]{1,5})\s*条"
    r"|(?:Article|ARTICLE|Clause|CLAUSE|Section|SECTION)\s+[0-9]{1,3}(?:\.[0-9]{1,3}){0,3}\b"
    r"|[0-9]{1,3}(?:\.[0-9]{1,3}){1,3}\.?|[0-9]{1,3}[.、])"
    r"\s*(?:[A-Z\p{Han}(（\"“|:：]|$)"
)
_CHAPTER_LINE = (
    r"^\s*(?:第[一二三四五六七八九十百零〇0-9]{1,4}[章节部分]|[一二三四五六七八九十]{1,3}、)"
)
_MARKDOWN_HEADING = r"^\s{0,3}#{1,6}\s+"

log = logging.getLogger("mnemo.documents")


def _reject(code: str, message: str) -> DocumentRejected:
    return DocumentRejected(code, message)


# ---------------------------------------------------------------------------------------
# Detection


def detect_media_type(data: bytes, filename: str = "", media_type: str | None = None) -> str:
    """The media type the bytes are (one of MEDIA_TYPES' values), or DocumentRejected."""
    head = data[:1024]
    if b"%PDF-" in head:
        return MEDIA_TYPES["pdf"]
    if data.startswith(b"PK\x03\x04"):
        names = _zip_names(data)
        if "word/document.xml" in names:
            return MEDIA_TYPES["docx"]
        if "xl/workbook.xml" in names:
            return MEDIA_TYPES["xlsx"]
        raise _reject("UNSUPPORTED_DOCUMENT_TYPE", "a zip archive that is neither DOCX nor XLSX")
    if data.startswith(_OLE):
        if _ENCRYPTED_PACKAGE in data:
            raise _reject("DOCUMENT_ENCRYPTED", "an encrypted Office document")
        raise _reject(
            "UNSUPPORTED_DOCUMENT_TYPE",
            "a legacy Office file (.doc, .xls): save it as DOCX or XLSX",
        )
    if any(data.startswith(magic) for magic in _BINARY_MAGIC):
        raise _reject("UNSUPPORTED_DOCUMENT_TYPE", "not a document Mnemo reads")
    _decode_text(data)  # raises when it is not text
    declared = (media_type or "").split(";")[0].strip().lower()
    name = filename.lower()
    if declared in ("text/markdown", "text/x-markdown") or name.endswith((".md", ".markdown")):
        return MEDIA_TYPES["markdown"]
    return MEDIA_TYPES["text"]


def _zip_names(data: bytes) -> set[str]:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            return set(archive.namelist())
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, RuntimeError):
        raise _reject("DOCUMENT_MALFORMED", "a zip container that cannot be read") from None


def _decode_text(data: bytes) -> str:
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        try:
            text = data.decode("utf-16")
        except UnicodeDecodeError:
            raise _reject("DOCUMENT_MALFORMED", "UTF-16 text that does not decode") from None
    elif b"\x00" in data:
        raise _reject("UNSUPPORTED_DOCUMENT_TYPE", "binary data, not text")
    else:
        try:
            text = data.decode("utf-8-sig")
        except UnicodeDecodeError:
            try:
                text = data.decode("gb18030")
            except UnicodeDecodeError:
                raise _reject(
                    "UNSUPPORTED_DOCUMENT_TYPE", "text that is neither UTF-8 nor GB18030"
                ) from None
    controls = sum(1 for c in text if ord(c) < 32 and c not in "\t\n\r\f")
    if controls > max(8, len(text) // 100):
        raise _reject("UNSUPPORTED_DOCUMENT_TYPE", "binary data, not text")
    return text


def _check_zip(data: bytes, limits: DocumentLimits) -> None:
    """Refuse a zip bomb or an encrypted member from the central directory alone."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            members = archive.infolist()
    except (zipfile.BadZipFile, ValueError, OSError, EOFError, RuntimeError):
        raise _reject("DOCUMENT_MALFORMED", "a zip container that cannot be read") from None
    if len(members) > limits.max_zip_members:
        raise _reject("DOCUMENT_BOMB", f"{len(members)} zip members, over {limits.max_zip_members}")
    expanded = 0
    for member in members:
        if member.flag_bits & 0x1:
            raise _reject("DOCUMENT_ENCRYPTED", "an encrypted zip member")
        expanded += member.file_size
        if member.file_size > _RATIO_CHECKED_FROM and (
            member.file_size > limits.max_compression_ratio * max(member.compress_size, 1)
        ):
            raise _reject(
                "DOCUMENT_BOMB",
                f"a member inflating {member.file_size / max(member.compress_size, 1):.0f} "
                f"times, over {limits.max_compression_ratio:g}",
            )
    if expanded > limits.max_expanded_bytes:
        raise _reject(
            "DOCUMENT_BOMB",
            f"members of {expanded} bytes inflated, over {limits.max_expanded_bytes}",
        )


# ---------------------------------------------------------------------------------------
# Lines, the parsers' common output


@dataclass(frozen=True, slots=True)
class _Line:
    text: str
    page: int | None = None
    heading: bool = False  # a heading by the format (style, `#`), not by its look
    block: bool = False  # starts a new block (a sheet), whatever comes before
    paragraph_end: bool = True  # a paragraph ends after this line
    sheet: str | None = None  # the sheet's name, on a sheet's first line


@dataclass(frozen=True, slots=True)
class _Extracted:
    lines: list[_Line]
    pages: int
    title: str | None


def parse_document(
    data: bytes, filename: str, media_type: str | None, limits: DocumentLimits
) -> ParsedDocument:
    """A document's sections, or DocumentRejected with the reason's code."""
    if len(data) > limits.max_bytes:
        raise _reject("DOCUMENT_TOO_LARGE", f"{len(data)} bytes, over {limits.max_bytes}")
    if not data.strip():
        raise _reject("DOCUMENT_EMPTY", "the document has no content")
    detected = detect_media_type(data, filename, media_type)
    try:
        if detected == MEDIA_TYPES["pdf"]:
            extracted = _pdf(data, limits)
        elif detected == MEDIA_TYPES["docx"]:
            _check_zip(data, limits)
            extracted = _docx(data)
        elif detected == MEDIA_TYPES["xlsx"]:
            _check_zip(data, limits)
            extracted = _xlsx(data, limits)
        else:
            extracted = _text(_decode_text(data), markdown=detected == MEDIA_TYPES["markdown"])
    except DocumentRejected:
        raise
    except RecursionError:
        raise _reject("DOCUMENT_MALFORMED", "the document nests too deep") from None
    except MemoryError:
        raise _reject("DOCUMENT_TOO_LARGE", "the document does not fit in memory") from None
    except Exception as exc:  # a library's own error on bad bytes: never a 500
        log.info("document not readable: %s", type(exc).__name__)
        raise _reject("DOCUMENT_MALFORMED", f"the {_kind(detected)} cannot be read") from None
    chars = sum(len(line.text) for line in extracted.lines)
    pages = extracted.pages or max(1, math.ceil(chars / _CHARS_PER_PAGE))
    if pages > limits.max_pages:
        raise _reject("DOCUMENT_TOO_LARGE", f"{pages} pages, over {limits.max_pages}")
    sections = _sections(extracted.lines, limits)
    if not sections:
        raise _reject("DOCUMENT_EMPTY", "no text could be extracted from the document")
    if len(sections) > limits.max_sections:
        raise _reject("DOCUMENT_TOO_LARGE", f"{len(sections)} sections, over {limits.max_sections}")
    sample = "\n".join(s.text for s in sections[:50])[:20_000]
    title = extracted.title or _first_title(extracted.lines)
    return ParsedDocument(
        media_type=detected,
        pages=pages,
        language=detect_language(sample),
        title=title,
        sections=tuple(sections),
    )


def _kind(media_type: str) -> str:
    return next((k.upper() for k, v in MEDIA_TYPES.items() if v == media_type), "document")


def _first_title(lines: list[_Line]) -> str | None:
    """The first heading, else the first line when it is short enough to be a title."""
    for line in lines:
        if line.heading:
            return _short(line.text)
    if lines and len(lines[0].text) <= _HEADING_CHARS:
        return lines[0].text
    return None


# ---------------------------------------------------------------------------------------
# Formats


# Reading a PDF's pages costs work in proportion to the content streams parsed and the
# operators run, not to the file's size: a stream shared by every page, or a form drawn
# again and again, is parsed each time (an 8 KB file of 40 pages sharing one stream took
# half a minute, 2,000 pages would take half an hour). The work is counted, in units of
# about a quarter of a microsecond, and may reach this floor, or this much per byte of the
# file for a larger one; past it the PDF is DOCUMENT_TOO_LARGE. Deterministic, unlike a
# clock, so the registrar's parse of the same bytes ends the same way.
_PDF_WORK_FLOOR = 16 * 1024 * 1024
_PDF_WORK_PER_FILE_BYTE = 128
_PDF_WORK_PER_CONTENT_BYTE = 8
_PDF_WORK_PER_OPERATOR = 64
_PDF_FORMS_PER_PAGE = 64  # form XObjects drawn while reading one page (pypdf's: 5,000)


def _pdf(data: bytes, limits: DocumentLimits) -> _Extracted:
    from pypdf import PdfReader, apply_configuration

    logging.getLogger("pypdf").setLevel(logging.ERROR)  # warnings name offsets, not causes
    reader = PdfReader(io.BytesIO(data), strict=False)
    if reader.is_encrypted:
        raise _reject("DOCUMENT_ENCRYPTED", "an encrypted PDF")
    count = len(reader.pages)
    if count > limits.max_pages:
        raise _reject("DOCUMENT_TOO_LARGE", f"{count} pages, over {limits.max_pages}")
    budget = max(_PDF_WORK_FLOOR, _PDF_WORK_PER_FILE_BYTE * len(data))
    spent = 0

    def charge(units: int) -> None:
        nonlocal spent
        spent += units
        if spent > budget:
            raise _reject("DOCUMENT_TOO_LARGE", "its pages take more work to read than its size")

    def visit(operator: Any, operands: Any, cm: Any, tm: Any) -> None:
        # pypdf swallows an error raised inside a form; the next operator raises it again
        charge(_PDF_WORK_PER_OPERATOR + _operand_size(operands))

    lines: list[_Line] = []
    with apply_configuration(xform_maximum_invocations_per_extraction=_PDF_FORMS_PER_PAGE):
        for number, page in enumerate(reader.pages, start=1):
            contents = page.get_contents()
            if contents is not None:
                charge(_PDF_WORK_PER_CONTENT_BYTE * len(contents.get_data()))
            text = page.extract_text(visitor_operand_before=visit) or ""
            if spent > budget:
                charge(0)
            lines.extend(_plain_lines(text, page=number))
    title = None
    metadata = reader.metadata
    if metadata is not None and metadata.title:
        title = str(metadata.title).strip()[:_HEADING_CHARS] or None
    return _Extracted(lines, count, title)


def _operand_size(operands: Any) -> int:
    size = 0
    for operand in operands:
        if isinstance(operand, (str, bytes)):
            size += len(operand)
        elif isinstance(operand, list):  # a TJ array
            size += _operand_size(operand)
        else:
            size += 1
    return size


def _docx(data: bytes) -> _Extracted:
    import docx
    from docx.table import Table
    from docx.text.paragraph import Paragraph

    document = docx.Document(io.BytesIO(data))
    style_of = _paragraph_styles(document)
    lines: list[_Line] = []
    for block in document.iter_inner_content():
        if isinstance(block, Paragraph):
            text = block.text.strip()
            if not text:
                continue
            style = style_of(block)
            heading = style.startswith(("Heading", "Title", "标题")) and len(text) <= 200
            for part in text.splitlines():
                if part.strip():
                    lines.append(_Line(part.strip(), heading=heading, paragraph_end=False))
            if lines:
                lines[-1] = replace(lines[-1], paragraph_end=True)
        elif isinstance(block, Table):
            lines.extend(_Line(_row_text(cells)) for cells in _table_rows(block) if cells)
    title = (document.core_properties.title or "").strip()[:_HEADING_CHARS] or None
    return _Extracted(lines, 0, title)


def _table_rows(table: Any) -> Iterator[list[str]]:
    """Each row's cell texts, a cell once however many grid columns it spans, and a cell
    merged into the one above (`w:vMerge`) read as that one. python-docx's `row.cells`
    repeats a cell once per column it spans, so one `w:gridSpan` of 10^9 in a small file
    took hours; the spans are only added up here."""
    from docx.table import _Cell

    above: dict[int, str] = {}  # grid column -> the text of the cell that starts there
    for tr in table._tbl.tr_lst:
        column = tr.grid_before
        texts: list[str] = []
        for tc in tr.tc_lst:
            if tc.vMerge == "continue":
                text = above.get(column, "")
            else:
                text = _Cell(tc, table).text.strip()
                above[column] = text
            texts.append(text)
            column += tc.grid_span
        yield _unique(texts)


def _paragraph_styles(document: Any) -> Callable[[Any], str]:
    """A paragraph's style name, as `Paragraph.style` names it (its style id's style when
    that is a paragraph style, else the document's default paragraph style), from a table
    made once per document: python-docx looks the default up by scanning every style of
    the document for each paragraph that names none, which made that lookup most of the
    time spent reading a DOCX."""
    from docx.enum.style import WD_STYLE_TYPE

    by_id: dict[str, Any] = {}
    for style in document.styles:
        if style.style_id:
            by_id.setdefault(style.style_id, style)  # the first of an id, as python-docx
    default = document.styles.default(WD_STYLE_TYPE.PARAGRAPH)
    default_name = (default.name if default is not None else "") or ""
    names = {
        style_id: (style.name or "") if style.type == WD_STYLE_TYPE.PARAGRAPH else default_name
        for style_id, style in by_id.items()
    }

    def style_of(paragraph: Any) -> str:
        style_id = paragraph._p.style  # the w:pStyle of the paragraph, None without one
        return names.get(style_id, default_name) if style_id else default_name

    return style_of


def _xlsx(data: bytes, limits: DocumentLimits) -> _Extracted:
    import openpyxl

    book = openpyxl.load_workbook(io.BytesIO(data), read_only=True, data_only=True)
    try:
        sheets = book.worksheets
        if len(sheets) > limits.max_pages:
            raise _reject("DOCUMENT_TOO_LARGE", f"{len(sheets)} sheets, over {limits.max_pages}")
        lines: list[_Line] = []
        budget = limits.max_cells
        for number, sheet in enumerate(sheets, start=1):
            first = True
            # the declared size (`<dimension ref="A1:XFD1048576"/>`) would pad every row to
            # its width; without it a row is as wide as its last cell
            sheet.reset_dimensions()
            for row in sheet.iter_rows(values_only=True):
                budget -= max(1, len(row))  # a blank row costs its step too
                if budget < 0:
                    raise _reject(
                        "DOCUMENT_TOO_LARGE", f"over {limits.max_cells} spreadsheet cells"
                    )
                cells = [c for c in (_cell(v) for v in row if v is not None) if c]
                if not cells:
                    continue
                lines.append(
                    _Line(
                        _row_text(cells),
                        page=number,
                        block=first,
                        sheet=_short(str(sheet.title)) if first else None,
                    )
                )
                first = False
            if not first:
                lines[-1] = replace(lines[-1], paragraph_end=True)
        return _Extracted(lines, len(sheets), None)
    finally:
        book.close()


def _text(text: str, *, markdown: bool) -> _Extracted:
    if not markdown:
        return _Extracted(_plain_lines(text), 0, None)
    heading = linear_pattern(_MARKDOWN_HEADING)
    lines: list[_Line] = []
    fenced = False
    for raw in text.splitlines():
        stripped = raw.strip()
        if stripped.startswith(("```", "~~~")):
            fenced = not fenced
        found = None if fenced else heading.search(raw)
        if found is not None:
            title = raw[found.end() :].strip().rstrip("#").strip()
            if title:
                lines.append(_Line(title, heading=True))
            continue
        if not stripped:
            if lines:
                lines[-1] = replace(lines[-1], paragraph_end=True)
            continue
        lines.append(_Line(stripped, paragraph_end=False))
    if lines:
        lines[-1] = replace(lines[-1], paragraph_end=True)
    return _Extracted(lines, 0, None)


def _plain_lines(text: str, page: int | None = None) -> list[_Line]:
    lines: list[_Line] = []
    for raw in text.replace("\r\n", "\n").replace("\r", "\n").replace("\f", "\n\n").split("\n"):
        stripped = raw.strip()
        if not stripped:
            if lines:
                lines[-1] = replace(lines[-1], paragraph_end=True)
            continue
        lines.append(_Line(stripped, page=page, paragraph_end=False))
    if lines:
        lines[-1] = replace(lines[-1], paragraph_end=True)
    return lines


def _unique(cells: Iterable[str]) -> list[str]:
    """A row's cells, a merged cell (repeated by python-docx) once."""
    out: list[str] = []
    for cell in cells:
        if cell and (not out or out[-1] != cell):
            out.append(cell)
    return out


def _row_text(cells: list[str]) -> str:
    """A row as a line: two cells as "key: value" (so 甲方 | XX公司 reads as 甲方: XX公司),
    more joined with " | "."""
    cells = [" ".join(c.split()) for c in cells]
    if len(cells) == 2:
        return f"{cells[0].rstrip(':：')}: {cells[1]}"
    return " | ".join(cells)


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return value.date().isoformat() if value.time() == time(0) else value.isoformat(" ")
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, float):
        if math.isfinite(value) and value == int(value) and abs(value) < 1e15:
            return str(int(value))
        return repr(value)
    return str(value).strip()


# ---------------------------------------------------------------------------------------
# Sections


@dataclass
class _Open:
    lines: list[_Line]
    clause: str | None
    heading: str | None
    heading_only: bool  # opened by a heading that nothing has followed yet

    def chars(self) -> int:
        return sum(len(line.text) + 1 for line in self.lines)


def _clause_of(text: str) -> str | None:
    found = linear_pattern(_CLAUSE_LINE).search(fold_width(text))
    if found is None:
        return None
    return normalise_clause(found.groupdict()["clause"] or "")


def _short(text: str) -> str | None:
    return text if len(text) <= _HEADING_CHARS else None


def _sections(lines: list[_Line], limits: DocumentLimits) -> list[Section]:
    chapter = linear_pattern(_CHAPTER_LINE)
    clauses = [_clause_of(line.text) for line in lines]
    numbered = sum(1 for c in clauses if c) >= 2  # one numbered line is not a structure
    groups: list[_Open] = []
    current: _Open | None = None
    for line, clause in zip(lines, clauses, strict=True):
        starts_clause = numbered and clause is not None
        is_heading = line.heading or (
            len(line.text) <= _HEADING_CHARS and chapter.search(line.text) is not None
        )
        if current is not None and current.heading_only and not line.block:
            # a heading opens the section that follows it (a chapter its first clause)
            current.lines.append(line)
            current.heading_only = is_heading and not starts_clause
            if starts_clause:
                current.clause = clause
                current.heading = _short(line.text) or current.heading
            continue
        if current is None or line.block or starts_clause or is_heading:
            current = _Open(
                [line],
                clause if starts_clause else None,
                _short(line.text) if (starts_clause or is_heading) else line.sheet,
                is_heading and not starts_clause,
            )
            groups.append(current)
            continue
        if not numbered and current.lines[-1].paragraph_end and current.chars() >= _PARAGRAPH_GROUP:
            current = _Open([line], current.clause, current.heading, False)
            groups.append(current)
            continue
        current.lines.append(line)
    sections: list[Section] = []
    for group in groups:
        for text, page in _cut(group.lines, limits.section_chars):
            sections.append(Section(len(sections), text, page, group.clause, group.heading))
    return sections


def _cut(lines: list[_Line], limit: int) -> Iterator[tuple[str, int | None]]:
    """A group's text in parts of at most `limit` characters, cut at line ends, or at
    sentence ends (or anywhere) within a longer line; each part with its first page."""
    part: list[str] = []
    size = 0
    page: int | None = None
    for line in lines:
        for piece in _pieces(line.text, limit):
            if part and size + 1 + len(piece) > limit:
                yield "\n".join(part), page
                part, size = [], 0
            if not part:
                page = line.page
            part.append(piece)
            size += len(piece) + (1 if size else 0)
    if part and "".join(part).strip():
        yield "\n".join(part), page


def _pieces(text: str, limit: int) -> Iterator[str]:
    while len(text) > limit:
        window = text[:limit]
        cut = max(window.rfind(end) for end in ("。", "；", ";", ". ", "！", "？", "! ", "? "))
        cut = cut + 1 if cut >= limit // 2 else limit
        yield text[:cut].strip()
        text = text[cut:].strip()
    if text:
        yield text
