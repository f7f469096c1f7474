"""What the ingest path does per event and per document, made cheaper without changing
what it gives: the sealing log answers which tenants wait from its inner log's index
(without reading the events), an event opened for the consumers leaves the logged one as
it was, and a DOCX paragraph's style is the one python-docx names."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

import docx
import pytest
from docx.enum.style import WD_STYLE_TYPE
from docx.shared import Pt
from tests.vault_support import SwitchableVault

from mnemo.adapters.document_parsers import _paragraph_styles, parse_document
from mnemo.adapters.sqlite_log import SqliteEventLog
from mnemo.domain.documents import DocumentLimits
from mnemo.domain.events import Envelope, LoggedEvent, validate_envelope
from mnemo.domain.ids import new_event_id
from mnemo.sealing import SEALED_TEXT, KeyCache, Sealer
from mnemo.service.sealing import SealingEventLog


@pytest.fixture
def sealer() -> Sealer:
    return Sealer(KeyCache(SwitchableVault(), ttl=30.0))


def observation(tenant: str, stream: str, text: str) -> Envelope:
    return validate_envelope(
        {
            "event_id": new_event_id(datetime.now(UTC)),
            "type": "ObservationRecorded",
            "schema_version": 2,
            "tenant": tenant,
            "stream": stream,
            "occurred_at": datetime.now(UTC).isoformat(),
            "actor": {"kind": "agent", "id": "a1"},
            "payload": {"text": text},
        }
    )


class CountingLog(SqliteEventLog):
    """The SQLite log, counting the events its reads decode."""

    decoded = 0

    def read(self, after_offset: int, limit: int) -> list[LoggedEvent]:
        found = super().read(after_offset, limit)
        self.decoded += len(found)
        return found


def test_the_sealing_log_finds_waiting_tenants_without_reading_events(
    sealer: Sealer, tmp_path: Path
) -> None:
    """The consumers ask on every step which tenants have events past their position; the
    port's fallback pages through every event of that range (a backlog read again on each
    step), the SQLite log answers from its (tenant, offset) index."""
    inner = CountingLog(tmp_path / "log.sqlite3")
    log = SealingEventLog(inner, sealer)
    for i in range(30):
        log.append([observation(("acme", "globex", "initech")[i % 3], "session:S1", f"turn {i}")])
    head = log.head()
    assert log.tenants_between(0, head) == {"acme": 1, "globex": 2, "initech": 3}
    assert log.tenants_between(4, head) == {"globex": 5, "initech": 6, "acme": 7}
    assert log.tenants_between(28, head) == {"globex": 29, "initech": 30}
    assert log.tenants_between(head, head) == {}
    assert inner.decoded == 0
    # the same answers as the port's own paging through the events
    paged = super(SqliteEventLog, inner).tenants_between(4, head)
    assert paged == log.tenants_between(4, head)
    assert inner.decoded > 0


def test_opening_an_event_for_the_consumers_leaves_the_logged_one_as_it_was(
    sealer: Sealer,
) -> None:
    event = observation("acme", "user:U1", "remember my size is L")
    sealed = sealer.seal(event)
    before = sealed.model_dump(mode="json")
    opened = sealer.open_private_envelope(sealed)
    assert opened.payload["text"] == "remember my size is L"
    assert sealed.payload["text"] == SEALED_TEXT
    assert sealed.model_dump(mode="json") == before
    block = sealed.encryption
    assert block is not None
    assert block.values  # the ciphertexts are still in the logged event's block
    again = sealer.open_private_envelope(sealed)
    assert again == opened


def styled_docx() -> bytes:
    d = docx.Document()
    d.add_heading("Purchase Contract", level=1)  # Heading 1
    d.add_paragraph("Contract No.: C-2023-0001")  # no style of its own: the default
    d.add_paragraph("Clause 1 Subject", style="Heading 2")
    d.add_paragraph("A listed item", style="List Bullet")
    custom = d.styles.add_style("标题 3", WD_STYLE_TYPE.PARAGRAPH)
    custom.font.size = Pt(13)
    d.add_paragraph("第一条 合同标的", style=custom)
    d.add_paragraph("Title line", style="Title")
    bad = d.add_paragraph("A paragraph naming a style the document lacks")
    bad.style = "Normal"
    bad._p.get_or_add_pPr().get_or_add_pStyle().val = "NoSuchStyle"
    chars = d.add_paragraph("A paragraph naming a character style")
    chars._p.get_or_add_pPr().get_or_add_pStyle().val = "Strong"  # a character style's id
    out = io.BytesIO()
    d.save(out)
    return out.getvalue()


def test_a_docx_paragraphs_style_is_the_one_python_docx_names() -> None:
    document = docx.Document(io.BytesIO(styled_docx()))
    style_of = _paragraph_styles(document)
    paragraphs = document.paragraphs
    assert len(paragraphs) == 8
    for paragraph in paragraphs:
        expected = paragraph.style.name if paragraph.style is not None else ""
        assert style_of(paragraph) == expected, paragraph.text
    assert [style_of(p) for p in paragraphs] == [
        "Heading 1",
        "Normal",
        "Heading 2",
        "List Bullet",
        "标题 3",
        "Title",
        "Normal",
        "Normal",
    ]


def test_docx_headings_open_sections_as_before() -> None:
    parsed = parse_document(styled_docx(), "c.docx", None, DocumentLimits())
    assert parsed.title == "Purchase Contract"
    texts = [s.text for s in parsed.sections]
    # each heading-styled paragraph (Heading, Title, 标题) opens the section that follows
    assert any(t.startswith("Clause 1 Subject") for t in texts)
    assert any(t.startswith("第一条 合同标的") for t in texts)
    assert any(t.startswith("Title line") for t in texts)
