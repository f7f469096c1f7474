"""Documents over HTTP on an embedded Mnemo: ingest (sections become long_term memories
with their location, entities the entity read model), exact structured queries, refused
documents that store nothing, tenant scoping, forgetting, and a rebuild that gives the
same read models."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mnemo_gateway.app import create_app
from tests.support import headers_for

from mnemo.bootstrap import Platform
from mnemo.entrypoints.admin import platform_checksum, rebuild_read_models

H = headers_for("acme", "agent")
OTHER = headers_for("globex", "agent")


def contract(number: str, party_a: str, rate: str, amount: str, signed: str) -> bytes:
    return (
        f"合同编号：{number}\n\n甲方：{party_a}\n乙方：远山贸易有限公司\n\n"
        f"第一条 合同金额为{amount}。\n\n"
        f"第八条 违约金为合同金额的{rate}。\n\n"
        f"签订日期：{signed}\n"
    ).encode()


CONTRACTS = {
    "a.txt": contract("HT-2023-0917", "XX科技有限公司", "8%", "人民币600,000元", "2023年8月15日"),
    "b.txt": contract("HT-2023-0101", "XX科技有限公司", "3%", "人民币900,000元", "2023年9月1日"),
    "c.txt": contract("HT-2024-0002", "XX科技有限公司", "10%", "人民币800,000元", "2024年2月1日"),
    "d.txt": contract("HT-2023-0555", "ZZ集团", "12%", "人民币700,000元", "2023年7月20日"),
}
QUESTION: dict[str, Any] = {
    "where": [
        {"field": "party_a", "op": "eq", "value": "XX科技"},
        {"field": "penalty_rate", "op": "gt", "value": "5%"},
        {"field": "signed_at", "op": "within", "value": "2023-Q3"},
        {"field": "amount", "op": "gte", "value": {"amount": 500000, "currency": "CNY"}},
    ]
}


@pytest.fixture
def client(platform: Platform) -> Iterator[TestClient]:
    with TestClient(create_app(platform)) as c:
        yield c


def ingest(client: TestClient, name: str, data: bytes, subject: str = "user:U1", **kw: Any) -> Any:
    params = {"subject": subject, "filename": name, "wait": "registered", **kw}
    return client.post("/v1/documents", params=params, content=data, headers=H)


def test_ingest_then_an_exact_question(client: TestClient, platform: Platform) -> None:
    for name, data in CONTRACTS.items():
        answered = ingest(client, name, data)
        assert answered.status_code == 200, answered.text
        body = answered.json()
        assert body["status"] == "registered"
        assert body["sections"] >= 3
    found = client.post("/v1/query", json=QUESTION, headers=H)
    assert found.status_code == 200, found.text
    result = found.json()
    assert result["total"] == 1
    (document,) = result["documents"]
    assert document["filename"] == "a.txt"
    assert document["subject"] == "user:U1"
    clauses = {h["clause"] for h in document["hits"]}
    assert "8" in clauses  # the penalty clause is a hit, with its location
    fields = {e["field"]: e for h in document["hits"] for e in h["entities"]}
    assert fields["penalty_rate"]["text"] == "8%"
    assert fields["penalty_rate"]["value"] == 0.08
    assert fields["party_a"]["text"] == "XX科技有限公司"
    # every section is a long_term memory with its place in provenance
    hit = next(h for h in document["hits"] if h["clause"] == "8")
    memory = client.get(f"/v1/memories/{hit['memory_id']}", headers=H).json()
    assert memory["type"] == "long_term"
    assert memory["provenance"]["source_location"] == "§8"
    assert memory["provenance"]["source_id"] == f"document:{document['document_id']}"
    # party matches party_a or party_b; another currency matches nothing
    either = {"where": [{"field": "party", "op": "eq", "value": "远山贸易"}]}
    assert client.post("/v1/query", json=either, headers=H).json()["total"] == 4
    usd = {"where": [{"field": "amount", "op": "gte", "value": {"amount": 1, "currency": "USD"}}]}
    assert client.post("/v1/query", json=usd, headers=H).json()["total"] == 0
    # another tenant sees none of it
    assert client.post("/v1/query", json=either, headers=OTHER).json()["total"] == 0


def test_the_semantic_text_ranks_and_never_widens(client: TestClient) -> None:
    for name, data in CONTRACTS.items():
        assert ingest(client, name, data).status_code == 200
    broad = {"where": [{"field": "penalty_rate", "op": "gte", "value": 0.05}]}
    exact = client.post("/v1/query", json=broad, headers=H).json()
    ranked = client.post("/v1/query", json={**broad, "query": "违约金"}, headers=H).json()
    assert exact["total"] == ranked["total"] == 3
    ids = {d["document_id"] for d in exact["documents"]}
    assert {d["document_id"] for d in ranked["documents"]} == ids


def test_the_same_bytes_again_answer_duplicate(client: TestClient) -> None:
    first = ingest(client, "a.txt", CONTRACTS["a.txt"])
    again = ingest(client, "a-copy.txt", CONTRACTS["a.txt"])
    assert first.json()["status"] == "registered"
    assert again.status_code == 200, again.text
    assert again.json()["status"] == "duplicate"
    assert again.json()["document_id"] == first.json()["document_id"]
    elsewhere = ingest(client, "a.txt", CONTRACTS["a.txt"], subject="user:U2")
    assert elsewhere.json()["status"] == "registered"  # another subject's document


def test_a_long_documents_hits_are_bounded_and_counted(client: TestClient) -> None:
    """A document with a match in every section answers its first `hits_limit` sections
    in order, and `hits_total` counts them all."""
    clauses = "\n\n".join(f"第{n}条 违约金为合同金额的{n % 9 + 1}%。" for n in range(1, 41))
    data = f"合同编号：HT-2025-0040\n\n甲方：XX科技有限公司\n\n{clauses}\n".encode()
    assert ingest(client, "long.txt", data).status_code == 200
    where = [{"field": "penalty_rate", "op": "gt", "value": "0%"}]
    (full,) = client.post("/v1/query", json={"where": where}, headers=H).json()["documents"]
    assert full["hits_total"] == len(full["hits"]) >= 40
    found = client.post("/v1/query", json={"where": where, "hits_limit": 5}, headers=H)
    assert found.status_code == 200, found.text
    (document,) = found.json()["documents"]
    assert document["hits_total"] == full["hits_total"]
    assert [h["memory_id"] for h in document["hits"]] == [h["memory_id"] for h in full["hits"][:5]]
    for bad in (0, 1_001, "5", True):
        refused = client.post("/v1/query", json={"where": where, "hits_limit": bad}, headers=H)
        assert refused.status_code == 400
        assert refused.json()["error"]["field"] == "hits_limit"


@pytest.mark.parametrize(
    ("where", "path"),
    [
        ([{"field": "nope", "op": "eq", "value": "x"}], "where[0].field"),
        ([{"field": "party_a", "op": "gt", "value": "x"}], "where[0].op"),
        ([{"field": "signed_at", "op": "within", "value": "2023-Q5"}], "where[0].value"),
        ([{"field": "penalty_rate", "op": "gt", "value": "lots"}], "where[0].value"),
        ([], "where"),
    ],
)
def test_bad_filters_name_their_path(client: TestClient, where: Any, path: str) -> None:
    refused = client.post("/v1/query", json={"where": where}, headers=H)
    assert refused.status_code == 400
    assert refused.json()["error"] == {
        **refused.json()["error"],
        "code": "QUERY_INVALID",
        "field": path,
    }


@pytest.mark.parametrize(
    ("data", "status", "code"),
    [
        (b"%PDF-1.7 not really", 400, "DOCUMENT_MALFORMED"),
        (b"PK\x03\x04not a zip", 400, "DOCUMENT_MALFORMED"),
        (bytes(range(256)) * 4, 415, "UNSUPPORTED_DOCUMENT_TYPE"),
        (b"\x89PNG\r\n\x1a\n" + b"x" * 50, 415, "UNSUPPORTED_DOCUMENT_TYPE"),
        (b"   \n\n  ", 400, "DOCUMENT_EMPTY"),
    ],
)
def test_a_bad_document_stores_nothing(
    client: TestClient, platform: Platform, data: bytes, status: int, code: str
) -> None:
    head = platform.log.head()
    blobs = platform.app.documents.source.blobs.store  # type: ignore[union-attr]
    answered = ingest(client, "bad.bin", data)
    assert answered.status_code == status, answered.text
    assert answered.json()["error"]["code"] == code
    assert platform.log.head() == head
    assert blobs.count("acme") == 0


@pytest.mark.parametrize(
    ("name", "subject", "code", "field"),
    [
        ("x" * 257, "user:U1", "INVALID_FILENAME", "filename"),
        ("", "user:U1", "INVALID_FILENAME", "filename"),
        ("a.txt", "u" * 200, "INVALID_STREAM", "subject"),
        ("a.txt", "", "INVALID_STREAM", "subject"),
        ("a.txt", "user:", "INVALID_STREAM", "subject"),
    ],
)
def test_a_bad_filename_or_subject_is_the_documented_400(
    client: TestClient, platform: Platform, name: str, subject: str, code: str, field: str
) -> None:
    """docs/documents.md: 400 INVALID_FILENAME for a filename over 256 characters, 400
    INVALID_STREAM for a bad subject, whatever the length; nothing is stored."""
    head = platform.log.head()
    answered = ingest(client, name, CONTRACTS["a.txt"], subject=subject)
    assert answered.status_code == 400, answered.text
    assert answered.json()["error"]["code"] == code
    assert answered.json()["error"]["field"] == field
    assert platform.log.head() == head


def test_too_large_is_refused_before_reading(client: TestClient, platform: Platform) -> None:
    head = platform.log.head()
    limit = platform.settings.document_max_bytes
    answered = ingest(client, "big.txt", b"a" * (limit + 1))
    assert answered.status_code == 413
    assert answered.json()["error"]["code"] == "DOCUMENT_TOO_LARGE"
    assert platform.log.head() == head


def test_forgetting_the_subject_removes_documents_blobs_sections_and_entities(
    client: TestClient, platform: Platform
) -> None:
    assert ingest(client, "a.txt", CONTRACTS["a.txt"]).status_code == 200
    assert ingest(client, "d.txt", CONTRACTS["d.txt"], subject="user:U2").status_code == 200
    blobs = platform.app.documents.source.blobs.store  # type: ignore[union-attr]
    assert blobs.count("acme") == 2
    forget = {"type": "ForgetRequested", "schema_version": 1, "stream": "user:U1", "payload": {}}
    admin = headers_for("acme", "admin")
    done = client.post("/v1/events?wait=registered", json={"events": [forget]}, headers=admin)
    assert done.status_code in (200, 202), done.text
    anyone = {"where": [{"field": "party", "op": "eq", "value": "远山贸易"}]}
    left = client.post("/v1/query", json=anyone, headers=H).json()
    assert [d["subject"] for d in left["documents"]] == ["user:U2"]
    assert blobs.digests("acme", "user:U1") == []
    assert blobs.count("acme") == 1
    assert platform.store.stream_documents("acme", "user:U1") == []  # type: ignore[attr-defined]


def test_a_rebuild_gives_the_same_read_models(client: TestClient, platform: Platform) -> None:
    for name, data in CONTRACTS.items():
        assert ingest(client, name, data).status_code == 200
    platform.runner.drain()
    before = platform_checksum(platform)
    counts = platform.store.counts()
    assert counts["entities"] > 0
    assert counts["documents"] == 4
    assert rebuild_read_models(platform) == before
    assert platform.store.counts() == counts


def test_a_docx_contract_answers_with_its_clause(client: TestClient) -> None:
    import io

    import docx

    document = docx.Document()
    document.add_paragraph("Contract No. C-2023-117")
    document.add_paragraph("Party A: Acme Ltd.")
    document.add_paragraph("Party B: Globex Corp.")
    document.add_paragraph("Clause 8.2 A penalty of 6% of the contract amount applies.")
    document.add_paragraph("Signed on 15 August 2023.")
    buffer = io.BytesIO()
    document.save(buffer)
    assert ingest(client, "acme.docx", buffer.getvalue()).status_code == 200
    question = {
        "where": [
            {"field": "party_a", "op": "eq", "value": "ACME"},
            {"field": "penalty_rate", "op": "between", "value": ["5%", "7%"]},
            {"field": "signed_at", "op": "within", "value": "Q3 2023"},
        ]
    }
    found = client.post("/v1/query", json=question, headers=H).json()
    assert found["total"] == 1
    (document_hit,) = found["documents"]
    assert document_hit["filename"] == "acme.docx"
    penalty = next(
        h for h in document_hit["hits"] if any(e["field"] == "penalty_rate" for e in h["entities"])
    )
    assert "6%" in penalty["text"]
    assert [e["text"] for e in penalty["entities"] if e["field"] == "penalty_rate"] == ["6%"]
