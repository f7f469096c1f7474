"""Documents in the distributed mode, on a real Kafka broker and a real Cassandra node:
the bytes go sealed into Cassandra's chunked blob rows, the registrar reads them back,
registers each section as a long_term memory with its location and writes the entity read
model's Cassandra tables; structured queries answer from them exactly (text values kept
only as keyed hashes); a rebuild from the log gives the same rows; forgetting the subject
deletes its blobs, documents and entity rows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.distributed_support import Pump, distributed_settings, running_distributed
from tests.document_samples import docx_bytes

from mnemo.bootstrap import Platform
from mnemo.domain.memory import MemoryType
from mnemo.service.app import RequestContext

CTX = RequestContext("acme", "doc-agent")
TEXT = b"Party A: Acme Ltd.\n\nClause 8.2 A penalty of 6% of the amount applies.\n"
CHINESE = (
    "合同编号：HT-2023-0917\n\n甲方：XX科技有限公司\n乙方：远山贸易有限公司\n\n"
    "第一条 合同金额为人民币600,000元。\n\n第八条 违约金为合同金额的8%。\n\n"
    "签订日期：2023年8月15日\n"
).encode()
DOCX = docx_bytes(
    [
        ("p", "Contract No. C-2023-117"),
        ("p", "Party A: Globex Corp."),
        ("p", "Clause 8.2 A penalty of 3% of the contract amount applies."),
        ("p", "Signed on 15 July 2023."),
    ]
)


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    with running_distributed(distributed_settings(tmp_path / "data")) as built:
        yield built


def ask(platform: Platform, *where: dict[str, Any], **extra: Any) -> dict[str, Any]:
    documents = platform.app.documents
    assert documents is not None
    return documents.query(CTX, {"where": list(where), **extra})


def names(answer: dict[str, Any]) -> list[str]:
    return sorted(d["filename"] for d in answer["documents"])


def test_a_document_in_the_distributed_mode(platform: Platform, tmp_path: Path) -> None:
    documents = platform.app.documents
    assert documents is not None
    pump = Pump(platform)
    subject = "user:D1"
    ingested = documents.ingest(CTX, subject, "c.txt", TEXT)
    documents.ingest(CTX, subject, "zh.txt", CHINESE)
    documents.ingest(CTX, "user:D2", "g.docx", DOCX)
    blobs = documents.source.blobs.store
    assert type(blobs).__name__ == "CassandraBlobStore"
    # stored under a keyed hash of the digest: the rows and their tombstones do not tell
    # whoever holds the document that it is stored
    name = documents.source.blobs.name_of("acme", subject, ingested.sha256)
    assert name in blobs.digests("acme", subject)
    assert ingested.sha256 not in blobs.digests("acme", subject)
    stored = blobs.get("acme", subject, name)
    assert stored is not None
    assert b"Acme" not in stored  # sealed under the user's key
    pump.drain()
    sections = platform.app.list_memories(CTX, subject, types=[MemoryType.LONG_TERM])
    assert all(m.provenance.source_id.startswith("document:") for m in sections)
    assert len(sections) >= ingested.sections

    # exact filters served by the Cassandra tables
    acme = ask(
        platform,
        {"field": "party_a", "op": "eq", "value": "ACME Ltd"},
        {"field": "penalty_rate", "op": "gt", "value": "5%"},
    )
    assert names(acme) == ["c.txt"]
    [hit] = acme["documents"][0]["hits"]
    assert "penalty of 6%" in hit["text"]
    assert {"field": "penalty_rate", "value": 0.06, "text": "6%"} in hit["entities"]
    q3 = ask(platform, {"field": "signed_at", "op": "within", "value": "2023-Q3"})
    assert names(q3) == ["g.docx", "zh.txt"]
    cny = ask(
        platform,
        {"field": "party", "op": "eq", "value": "远山贸易"},
        {"field": "amount", "op": "gte", "value": {"amount": 500000, "currency": "CNY"}},
    )
    assert names(cny) == ["zh.txt"]
    assert (
        ask(platform, {"field": "amount", "op": "gte", "value": {"amount": 1, "currency": "USD"}})[
            "total"
        ]
        == 0
    )
    # contains and ne read the field's rows; their values come back from the sections
    partial = ask(platform, {"field": "party_a", "op": "contains", "value": "glob"})
    assert names(partial) == ["g.docx"]
    [found] = partial["documents"][0]["hits"][0]["entities"]
    assert found["field"] == "party_a"
    assert found["value"] == "globex"
    others = ask(platform, {"field": "party_a", "op": "ne", "value": "acme"})
    assert names(others) == ["g.docx", "zh.txt"]
    assert names(ask(platform, {"field": "contract_no", "op": "in", "value": ["C-2023-117"]})) == [
        "g.docx"
    ]
    only_d2 = ask(
        platform, {"field": "penalty_rate", "op": "gte", "value": 0}, subjects=["user:D2"]
    )
    assert names(only_d2) == ["g.docx"]

    # a rebuild from the log into an empty keyspace gives the same rows: its registrar
    # reads the documents' bytes from the live keyspace (they are not a read model)
    live = platform.store.checksum()
    counts = platform.store.counts()
    assert counts["documents"] == 3
    assert counts["entities"] > 6
    fresh = platform.settings.model_copy(
        update={
            "cassandra_keyspace": f"{platform.settings.cassandra_keyspace}_r",
            "document_blob_keyspace": platform.settings.cassandra_keyspace,
            "data_dir": tmp_path / "rebuild",
        }
    )
    with running_distributed(fresh, "rebuild") as rebuilt:
        Pump(rebuilt).drain(timeout=300)
        assert rebuilt.store.counts()["entities"] == counts["entities"]
        assert rebuilt.store.checksum() == live

    # forgetting the subject: its blobs, documents and entity rows go
    forget = {"type": "ForgetRequested", "schema_version": 1, "stream": subject, "payload": {}}
    platform.app.publish(CTX, [forget])
    pump.drain()
    assert blobs.digests("acme", subject) == []
    assert platform.store.stream_documents("acme", subject) == []  # type: ignore[attr-defined]
    assert ask(platform, {"field": "party_a", "op": "eq", "value": "acme"})["total"] == 0
    assert names(ask(platform, {"field": "penalty_rate", "op": "gte", "value": 0})) == ["g.docx"]
    assert platform.store.counts()["documents"] == 1
