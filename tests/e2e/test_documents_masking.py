"""A document's sections go through the same PII detector and tenant policy as any other
memory's content: a tenant whose policy masks phone numbers and e-mail addresses gets them
masked inside documents too (in the section memories, the structured query's answers and
contexts), on a user's stream and on the tenant's."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from mnemo_gateway.app import create_app
from tests.support import headers_for, install_keys

from mnemo.adapters.clocks import FixedClock
from mnemo.bootstrap import build_embedded
from mnemo.settings import GatewaySettings, MnemoSettings

H = headers_for("acme", "agent")
PHONE, EMAIL = "13812345678", "zhang.san@example.org"
PHONE_MASK, EMAIL_MASK = "138****5678", "z***@example.org"
POLICY = """
tenants:
  acme:
    actions: {phone: mask, email: mask}
"""
TEXT = (
    "合同编号：HT-2023-0917\n\n甲方：XX科技有限公司\n乙方：远山贸易有限公司\n\n"
    f"第三条 甲方联系人电话{PHONE}，邮箱{EMAIL}。\n\n"
    "第八条 违约金为合同金额的8%。\n"
)


@pytest.fixture
def client(tmp_path: Path, clock: FixedClock) -> Iterator[TestClient]:
    policy = tmp_path / "pii.yaml"
    policy.write_text(POLICY, encoding="utf-8")
    settings = MnemoSettings(
        data_dir=tmp_path / "data",
        embedder="hashing",
        sqlite_synchronous="NORMAL",
        pii_policy_file=policy,
    )
    platform = build_embedded(settings, clock=clock)
    install_keys(platform, "acme")
    try:
        with TestClient(create_app(platform, GatewaySettings(wait_timeout=60))) as c:
            yield c
    finally:
        platform.close()


@pytest.mark.parametrize("subject", ["user:U1", "tenant"])
def test_values_the_policy_masks_are_masked_in_document_sections(
    client: TestClient, subject: str
) -> None:
    # a memory said in conversation is masked by this policy: the document's the same way
    said = client.post(
        "/v1/events",
        json={
            "events": [
                {
                    "type": "MemoryDeclared",
                    "schema_version": 1,
                    "stream": "user:U1",
                    "payload": {"memory": {"type": "fact", "content": f"我的电话是{PHONE}"}},
                }
            ]
        },
        params={"wait": "registered"},
        headers=H,
    )
    assert said.status_code == 202, said.text
    [accepted] = said.json()["accepted"]
    [outcome] = accepted["outcomes"]
    declared = client.get(f"/v1/memories/{outcome['memory_id']}", headers=H).json()
    assert declared["content"] == f"我的电话是{PHONE_MASK}"
    # a context with a query finds the sections through the index: wait until it holds them
    params = {"subject": subject, "filename": "c.txt", "wait": "indexed"}
    done = client.post("/v1/documents", params=params, content=TEXT.encode(), headers=H)
    assert done.status_code == 200, done.text
    assert done.json()["status"] == "registered"  # not "pending": the wait was complete
    where = [{"field": "contract_no", "op": "eq", "value": "HT-2023-0917"}]
    found = client.post("/v1/query", json={"where": where}, headers=H).json()
    [document] = found["documents"]
    document_id = document["document_id"]
    sections = client.get(
        f"/v1/subjects/{subject}/memories",
        params={"tag": f"document:{document_id}", "limit": 100},
        headers=H,
    ).json()["memories"]
    assert sections
    contact = next(m for m in sections if "联系人" in m["content"])
    assert PHONE not in contact["content"]
    assert EMAIL not in contact["content"]
    assert f"电话{PHONE_MASK}" in contact["content"]
    assert EMAIL_MASK in contact["content"]
    # the entities are read on the masked text: the exact answers still hold
    rate = [{"field": "penalty_rate", "op": "gt", "value": "5%"}]
    assert client.post("/v1/query", json={"where": rate}, headers=H).json()["total"] == 1
    context = client.post(
        "/v1/context",
        json={"subjects": [subject], "query": "联系人电话", "budget": 2_000},
        headers=H,
    ).json()
    assert PHONE_MASK in context["context"]
    assert PHONE not in context["context"]
    assert EMAIL not in context["context"]
