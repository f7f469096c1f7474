"""Documents end to end in the distributed mode (gateway and consumers as processes on
Kafka, Cassandra and OpenBao): a PDF and a DOCX contract through the gateway's
`POST /v1/documents?wait=registered`, exact structured questions through `POST /v1/query`
answered from the Cassandra entity tables, and a forget of the subject after which the
same questions answer nothing."""

from __future__ import annotations

from typing import Any

from tests.document_samples import docx_bytes, pdf_bytes
from tests.e2e.test_distributed import Deployment, deployment  # noqa: F401 - a fixture

SUBJECT = "user:C1"
PDF = pdf_bytes(
    [
        ["采购合同", "合同编号：HT-2023-0917", "甲方：XX科技有限公司", "乙方：远山贸易有限公司"],
        ["第一条 价款", "合同总价为人民币60万元。", "第八条 违约责任", "违约金为合同金额的8%。"],
        ["签订日期：2023年8月15日"],
    ]
)
DOCX = docx_bytes(
    [
        ("p", "Contract No. C-2023-117"),
        ("p", "Party A: Acme Ltd."),
        ("p", "Clause 8.2 A penalty of 3% of the contract amount applies."),
        ("p", "Signed on 15 July 2023."),
    ]
)
QUESTION: dict[str, Any] = {
    "where": [
        {"field": "party_a", "op": "eq", "value": "XX科技"},
        {"field": "penalty_rate", "op": "gt", "value": "5%"},
        {"field": "signed_at", "op": "within", "value": "2023-Q3"},
        {"field": "amount", "op": "gte", "value": {"amount": 500000, "currency": "CNY"}},
    ]
}


def ingest(d: Deployment, name: str, data: bytes) -> dict[str, Any]:
    params = {"subject": SUBJECT, "filename": name, "wait": "registered"}
    answer = d.http.post("/v1/documents", params=params, content=data)
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    assert body["status"] == "registered"
    return body


def ask(d: Deployment, body: dict[str, Any]) -> dict[str, Any]:
    answer = d.http.post("/v1/query", json=body)
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def test_documents_through_the_distributed_gateway(
    deployment: Deployment,  # noqa: F811
) -> None:
    d = deployment
    pdf = ingest(d, "contract.pdf", PDF)
    assert pdf["pages"] == 3
    ingest(d, "acme.docx", DOCX)

    exact = ask(d, QUESTION)
    assert exact["total"] == 1
    [document] = exact["documents"]
    assert (document["document_id"], document["filename"]) == (pdf["document_id"], "contract.pdf")
    assert document["subject"] == SUBJECT
    penalty = [h for h in document["hits"] if h["clause"] == "8"]
    assert penalty
    assert penalty[0]["page"] == 2
    assert "违约金为合同金额的8%" in penalty[0]["text"]
    assert {"field": "penalty_rate", "value": 0.08, "text": "8%"} in penalty[0]["entities"]
    q3 = ask(d, {"where": [{"field": "signed_at", "op": "within", "value": "2023-Q3"}]})
    assert sorted(x["filename"] for x in q3["documents"]) == ["acme.docx", "contract.pdf"]
    partial = ask(d, {"where": [{"field": "party", "op": "contains", "value": "远山"}]})
    assert [x["filename"] for x in partial["documents"]] == ["contract.pdf"]
    bad = d.http.post("/v1/query", json={"where": [{"field": "nope", "op": "eq", "value": 1}]})
    assert (bad.status_code, bad.json()["error"]["code"]) == (400, "QUERY_INVALID")

    forget = {"type": "ForgetRequested", "schema_version": 1, "stream": SUBJECT, "payload": {}}
    done = d.http.post("/v1/events", params={"wait": "registered"}, json={"events": [forget]})
    assert done.status_code in (200, 202), done.text
    assert ask(d, QUESTION) == {"documents": [], "total": 0}
    assert ask(d, {"where": [{"field": "penalty_rate", "op": "gte", "value": 0}]})["total"] == 0
