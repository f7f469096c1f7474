"""A plain-text and Markdown parser that stands in until the document parsers
(`mnemo.adapters.document_parsers`: PDF, DOCX, XLSX) are in; the wiring prefers those
when present. Text only: bytes that look like a PDF or a zip container are refused as
an unsupported type here, anything that is not UTF-8 text as malformed. Sections are
paragraph groups, one per clause when a paragraph starts with a clause number
(第八条, 8.2, Article 5), at most `section_chars` each."""

from __future__ import annotations

import re

from mnemo.domain.documents import (
    DocumentLimits,
    DocumentRejected,
    ParsedDocument,
    Section,
    detect_language,
    normalise_clause,
)

__all__ = ["parse_text_document"]

_CLAUSE = re.compile(
    r"^\s*(第[0-9一二三四五六七八九十百零〇两]+条|(?:Article|Clause|Section)\s+\d+(?:\.\d+)*"
    r"|\d+(?:\.\d+)+|\d+\.)",
    re.IGNORECASE,
)
_PARAGRAPHS = re.compile(r"\n\s*\n|\n(?=\s*第[0-9一二三四五六七八九十百零〇两]+条)")
_BINARY = (b"%PDF", b"PK\x03\x04", b"\xd0\xcf\x11\xe0", b"\x89PNG", b"\xff\xd8\xff", b"GIF8")


def parse_text_document(
    data: bytes, filename: str, media_type: str | None, limits: DocumentLimits
) -> ParsedDocument:
    if len(data) > limits.max_bytes:
        raise DocumentRejected(
            "DOCUMENT_TOO_LARGE",
            f"the document is {len(data)} bytes; the limit is {limits.max_bytes}",
        )
    if data.startswith(_BINARY):
        raise DocumentRejected(
            "UNSUPPORTED_DOCUMENT_TYPE", "only plain text and Markdown are read in this build"
        )
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError:
        raise DocumentRejected("DOCUMENT_MALFORMED", "the document is not UTF-8 text") from None
    if "\x00" in text:
        raise DocumentRejected("DOCUMENT_MALFORMED", "the document holds NUL characters")
    paragraphs = [p.strip() for p in _PARAGRAPHS.split(text)]
    paragraphs = [p for p in paragraphs if p]
    if not paragraphs:
        raise DocumentRejected("DOCUMENT_EMPTY", "no text could be read from the document")
    sections: list[Section] = []
    title = paragraphs[0].lstrip("# ").splitlines()[0][:200] if paragraphs else None
    buffer: list[str] = []
    clause: str | None = None
    heading: str | None = None

    def flush() -> None:
        nonlocal buffer
        body = "\n\n".join(buffer).strip()
        while body:
            part, body = body[: limits.section_chars], body[limits.section_chars :]
            sections.append(Section(len(sections), part, None, clause, heading))
        buffer = []

    for paragraph in paragraphs:
        if paragraph.startswith("#"):
            flush()
            heading = paragraph.lstrip("# ").splitlines()[0][:200]
            buffer = [paragraph]
            clause = None
            continue
        found = _CLAUSE.match(paragraph)
        if found is not None:
            flush()
            clause = normalise_clause(found.group(1))
        buffer.append(paragraph)
        if sum(len(b) for b in buffer) >= limits.section_chars:
            flush()
    flush()
    if len(sections) > limits.max_sections:
        raise DocumentRejected("DOCUMENT_BOMB", "the document has too many sections")
    media = "text/markdown" if filename.lower().endswith((".md", ".markdown")) else "text/plain"
    return ParsedDocument(
        media_type=media,
        pages=max(1, len(text) // 3_000 + 1),
        language=detect_language(text),
        title=title,
        sections=tuple(sections),
    )
