"""The registrar's view of documents (BlobDocuments): in the process that ingested a
document, the registrar takes the parse made on ingest instead of parsing the blob again,
with the same sections; never for a blob that is gone or whose key was destroyed, never
for another name or type, and within a bounded memory."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.vault_support import SwitchableVault

from mnemo.adapters.document_parsers import parse_document
from mnemo.adapters.local_blobs import LocalBlobStore
from mnemo.domain.documents import DocumentLimits, EntityRules, ParsedDocument
from mnemo.domain.events import Actor, ActorKind, DocumentIngested, Envelope
from mnemo.domain.ids import new_event_id
from mnemo.sealing import KeyCache, Sealer
from mnemo.service.blobs import SealedBlobs, digest_of
from mnemo.service.documents import BlobDocuments

T0 = datetime(2026, 1, 5, 9, 0, tzinfo=UTC)
TEXT = (
    "# 采购合同\n\n合同编号：HT-2023-0917\n\n## 第一条 合同金额\n总金额为50万元。\n\n"
    "## 第八条 违约责任\n违约金为合同金额的5%。\n"
)
DATA = TEXT.encode()


class CountingParser:
    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []

    def __call__(
        self, data: bytes, filename: str, media_type: str | None, limits: DocumentLimits
    ) -> ParsedDocument:
        self.calls.append((filename, media_type))
        return parse_document(data, filename, media_type, limits)


@pytest.fixture
def blobs(tmp_path: Path) -> SealedBlobs:
    store = LocalBlobStore(tmp_path / "blobs", 1024 * 1024)
    return SealedBlobs(store, Sealer(KeyCache(SwitchableVault(), ttl=30.0)))


def source(blobs: SealedBlobs, parser: CountingParser, cache_chars: int = 100_000) -> BlobDocuments:
    return BlobDocuments(blobs, parser, DocumentLimits(), EntityRules(()), cache_chars)


def ingest(
    docs: BlobDocuments, stream: str, filename: str, data: bytes = DATA
) -> tuple[Envelope, DocumentIngested]:
    """What Documents.ingest does with the source: parse, store the blob, log the event."""
    sha = digest_of(data)
    parsed = docs.parse_ingested("acme", stream, sha, data, filename, None)
    docs.blobs.put("acme", stream, data)
    payload = DocumentIngested(
        document_id="0190f5c2-7d1a-8000-8000-000000000001",
        sha256=sha,
        filename=filename,
        media_type=parsed.media_type,
        size=len(data),
        pages=parsed.pages,
        sections=len(parsed.sections),
        language=parsed.language,
    )
    event = Envelope(
        event_id=new_event_id(T0),
        type=DocumentIngested.TYPE,
        schema_version=1,
        tenant="acme",
        stream=stream,
        occurred_at=T0,
        actor=Actor(kind=ActorKind.SYSTEM, id="gateway"),
        payload=payload.model_dump(mode="json"),
    )
    return event, payload


def test_the_registrar_takes_the_parse_made_on_ingest(blobs: SealedBlobs) -> None:
    parser = CountingParser()
    docs = source(blobs, parser)
    event, ingested = ingest(docs, "user:U1", "contract.md")
    assert len(parser.calls) == 1
    read = docs.read(event, ingested)
    assert read is not None
    assert len(parser.calls) == 1  # not parsed again
    assert read == parse_document(DATA, "contract.md", ingested.media_type, DocumentLimits())
    assert [s.clause for s in read.sections if s.clause] == ["1", "8"]
    assert len(docs.parsed) == 0  # taken: a redelivery parses the blob again, the same way
    again = docs.read(event, ingested)
    assert again == read
    assert parser.calls[-1] == ("contract.md", "text/markdown")


def test_another_process_parses_the_blob(blobs: SealedBlobs) -> None:
    gateway = source(blobs, CountingParser())
    event, ingested = ingest(gateway, "user:U1", "contract.md")
    parser = CountingParser()
    registrar = source(blobs, parser)  # the distributed registrar: a process of its own
    read = registrar.read(event, ingested)
    assert parser.calls == [("contract.md", "text/markdown")]
    assert read == gateway.read(event, ingested)


def test_a_gone_blob_or_a_destroyed_key_is_not_answered_from_the_parse(
    blobs: SealedBlobs,
) -> None:
    docs = source(blobs, CountingParser())
    event, ingested = ingest(docs, "user:U1", "contract.md")
    blobs.sealer.keys.destroy(blobs.sealer.key_id("acme", "user:U1"))
    assert docs.read(event, ingested) is None
    assert len(docs.parsed) == 0  # the parse of a document that is gone is not kept

    event, ingested = ingest(docs, "session:S1", "contract.md")
    docs.forget("acme", "session:S1")  # the blob and the kept parse go
    assert len(docs.parsed) == 0
    assert docs.read(event, ingested) is None


def test_a_forget_drops_only_its_streams_parses(blobs: SealedBlobs) -> None:
    docs = source(blobs, CountingParser())
    ingest(docs, "session:S1", "a.md")
    kept, kept_payload = ingest(docs, "session:S2", "a.md")
    docs.forget("acme", "session:S1")
    assert len(docs.parsed) == 1
    docs.forget("globex", None)  # another tenant's forget
    assert len(docs.parsed) == 1
    parser = docs.parse
    assert isinstance(parser, CountingParser)
    calls = len(parser.calls)
    assert docs.read(kept, kept_payload) is not None
    assert len(parser.calls) == calls


def test_another_name_or_type_is_parsed_anew(blobs: SealedBlobs) -> None:
    """The same bytes as Markdown (by the name) and as text give other sections: an event
    naming the text file never takes the Markdown file's parse, nor one of another type."""
    parser = CountingParser()
    docs = source(blobs, parser)
    event, markdown = ingest(docs, "user:U1", "contract.md")
    as_text = markdown.model_copy(update={"filename": "contract.txt", "media_type": "text/plain"})
    read = docs.read(event, as_text)
    assert parser.calls[-1] == ("contract.txt", "text/plain")
    assert read is not None
    assert read.media_type == "text/plain"
    assert len(docs.parsed) == 1  # the Markdown parse is still kept for its own event
    other_type = markdown.model_copy(update={"media_type": "text/plain"})
    calls = len(parser.calls)
    read = docs.read(event, other_type)
    assert len(parser.calls) == calls + 1
    assert read is not None
    assert read.media_type == "text/markdown"  # the name says Markdown: parsed as such


def test_the_kept_parses_are_bounded(blobs: SealedBlobs) -> None:
    size = sum(len(s.text) for s in parse_document(DATA, "a.md", None, DocumentLimits()).sections)
    docs = source(blobs, CountingParser(), cache_chars=2 * size + 3)
    for name in ("a.md", "b.md", "c.md"):
        ingest(docs, "user:U1", name)
    assert len(docs.parsed) == 2  # the oldest went
    sha = digest_of(DATA)
    assert docs.parsed.take(("acme", "user:U1", sha, "a.md")) is None
    assert docs.parsed.take(("acme", "user:U1", sha, "c.md")) is not None
    tiny = source(blobs, CountingParser(), cache_chars=size // 2)
    ingest(tiny, "user:U1", "a.md")  # larger than the whole budget: not kept
    assert len(tiny.parsed) == 0
