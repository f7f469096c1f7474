"""Documents in the distributed mode, on a real Kafka broker and a real Cassandra node:
the bytes go sealed into Cassandra's chunked blob rows, the registrar reads them back and
registers each section as a long_term memory with its location, forgetting the subject
deletes its blobs, and a structured query answers 503 until the entity read model has
Cassandra tables (docs/documents.md)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.distributed_support import Pump, distributed_settings, running_distributed

from mnemo.bootstrap import Platform
from mnemo.domain.errors import Unavailable
from mnemo.domain.memory import MemoryType
from mnemo.service.app import RequestContext

CTX = RequestContext("acme", "doc-agent")
TEXT = b"Party A: Acme Ltd.\n\nClause 8.2 A penalty of 6% of the amount applies.\n"


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    with running_distributed(distributed_settings(tmp_path / "data")) as built:
        yield built


def test_a_document_in_the_distributed_mode(platform: Platform) -> None:
    documents = platform.app.documents
    assert documents is not None
    pump = Pump(platform)
    subject = "user:D1"
    ingested = documents.ingest(CTX, subject, "c.txt", TEXT)
    blobs = documents.source.blobs.store
    assert type(blobs).__name__ == "CassandraBlobStore"
    assert blobs.digests("acme", subject) == [ingested.sha256]
    stored = blobs.get("acme", subject, ingested.sha256)
    assert stored is not None
    assert b"Acme" not in stored  # sealed under the user's key
    pump.drain()
    sections = platform.app.list_memories(CTX, subject, types=[MemoryType.LONG_TERM])
    assert len(sections) == ingested.sections
    assert all(m.provenance.source_id == f"document:{ingested.document_id}" for m in sections)
    with pytest.raises(Unavailable) as refused:
        documents.query(CTX, {"where": [{"field": "party_a", "op": "eq", "value": "acme"}]})
    assert refused.value.code == "DOCUMENT_QUERY_UNAVAILABLE"
    forget = {"type": "ForgetRequested", "schema_version": 1, "stream": subject, "payload": {}}
    platform.app.publish(CTX, [forget])
    pump.drain()
    assert blobs.digests("acme", subject) == []
