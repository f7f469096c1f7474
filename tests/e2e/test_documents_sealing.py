"""A document's sections hold the values the tenant's policy encrypts as placeholders, like
any memory's content: the memories table, the embedding and the keyword terms never see
them, reads open them, an exact search for the value finds the section, the structured
query reads its entities as before, and forgetting the user leaves nothing readable."""

from __future__ import annotations

import hashlib
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from tests.support import embedded_platform, gateway_client, headers_for
from tests.vault_support import SwitchableVault

from mnemo.adapters.clocks import FixedClock
from mnemo.bootstrap import Platform, build_embedded
from mnemo.domain.errors import Unavailable
from mnemo.entrypoints.admin import platform_checksum, rebuild_read_models
from mnemo.service import documents as documents_module
from mnemo.service.app import RequestContext
from mnemo.settings import MnemoSettings

H = headers_for("acme", "agent")
CARD = "6222021234567890128"
EMAIL = "zhang.san@example.org"
PHONE = "13812345678"
TEXT = (
    "合同编号：HT-2023-0917\n\n甲方：XX科技有限公司\n乙方：远山贸易有限公司\n\n"
    f"第三条 甲方联系人电话{PHONE}，邮箱{EMAIL}，收款卡号{CARD}。\n\n"
    "第八条 违约金为合同金额的8%。\n"
)


@pytest.fixture
def made(tmp_path: Path, clock: FixedClock) -> Iterator[tuple[TestClient, Platform]]:
    platform = embedded_platform(tmp_path / "data", clock, "acme")
    with gateway_client(platform) as c:
        yield c, platform


def _bodies(platform: Platform) -> str:
    with sqlite3.connect(platform.settings.data_dir / "store.sqlite3") as db:
        return "\n".join(str(b) for (b,) in db.execute("SELECT body FROM memories"))


@pytest.mark.parametrize("subject", ["user:U1", "tenant"])
def test_document_sections_hold_placeholders_and_read_opened(
    made: tuple[TestClient, Platform], subject: str
) -> None:
    client, platform = made
    params = {"subject": subject, "filename": "c.txt", "wait": "registered"}
    done = client.post("/v1/documents", params=params, content=TEXT.encode(), headers=H)
    assert done.status_code == 200, done.text
    document_id = done.json()["document_id"]

    stored = _bodies(platform)
    for kind in ("bank_card", "email", "phone"):
        assert f"⟦{kind}:" in stored, kind
    for value in (CARD, EMAIL, PHONE):
        assert value not in stored, value

    stream = "tenant" if subject == "tenant" else subject
    sections = client.get(
        f"/v1/subjects/{stream}/memories",
        params={"tag": f"document:{document_id}", "limit": 100},
        headers=H,
    ).json()["memories"]
    contact = next(m for m in sections if "联系人" in m["content"])
    assert PHONE in contact["content"]
    assert EMAIL in contact["content"]
    assert CARD in contact["content"]
    # the exact value finds the section (its keyword terms hold the placeholder's)
    platform.runner.drain()  # indexed
    search = {"query": CARD, "subjects": [stream], "limit": 5}
    hits = client.post("/v1/search", json=search, headers=H).json()["hits"]
    assert any(h["memory"]["memory_id"] == contact["memory_id"] for h in hits)
    # the entities are read as before
    where = [{"field": "contract_no", "op": "eq", "value": "HT-2023-0917"}]
    assert client.post("/v1/query", json={"where": where}, headers=H).json()["total"] == 1
    rate = [{"field": "penalty_rate", "op": "gt", "value": "5%"}]
    assert client.post("/v1/query", json={"where": rate}, headers=H).json()["total"] == 1
    context = client.post(
        "/v1/context",
        json={"subjects": [stream], "query": "联系人电话", "budget": 2_000},
        headers=H,
    ).json()
    assert PHONE in context["context"]


def test_a_rebuild_gives_the_same_read_models(made: tuple[TestClient, Platform]) -> None:
    client, platform = made
    params = {"subject": "user:U2", "filename": "c.txt", "wait": "registered"}
    done = client.post("/v1/documents", params=params, content=TEXT.encode(), headers=H)
    assert done.status_code == 200, done.text
    platform.runner.drain()
    before = platform_checksum(platform)
    counts = platform.store.counts()
    assert counts["entities"] > 0
    assert rebuild_read_models(platform) == before
    assert platform.store.counts() == counts
    assert CARD not in _bodies(platform)


def test_a_section_whose_placeholders_would_overflow_a_memory_is_masked(
    made: tuple[TestClient, Platform],
) -> None:
    client, platform = made
    phones = [f"139{n:08d}" for n in range(10_000_001, 10_000_001 + 320)]
    text = "通讯录\n\n" + "，".join(phones) + "。\n"
    params = {"subject": "user:U3", "filename": "list.txt", "wait": "registered"}
    done = client.post("/v1/documents", params=params, content=text.encode(), headers=H)
    assert done.status_code == 200, done.text
    assert done.json()["status"] == "registered"
    stored = _bodies(platform)
    assert not [p for p in phones if p in stored]
    assert "139****0001" in stored  # masked: nothing kept that a placeholder would open


def _raw_bytes(root: Path) -> bytes:
    """Every file's path and bytes under `root` (a blob's name is its file's name)."""
    return b"".join(
        str(p).encode() + (p.read_bytes() if p.is_file() else b"") for p in sorted(root.rglob("*"))
    )


@pytest.mark.parametrize("subject", ["user:U4", "tenant"])
def test_neither_the_log_nor_the_blob_store_names_the_documents_digest(
    made: tuple[TestClient, Platform], subject: str
) -> None:
    """Whoever holds a document and the log or the blob store's files cannot tell whether it
    was ingested: the log holds a keyed stand-in of its sha256, the id is derived from a
    keyed hash, and the blob is named by one. The registrar still reads the digest, and a
    forgotten user's document event still reads (its stand-in) in a rebuild."""
    client, platform = made
    data = TEXT.encode() + subject.encode()
    digest = hashlib.sha256(data).hexdigest()
    plain_id = str(uuid.uuid5(documents_module._NAMESPACE, f"acme\x00{subject}\x00{digest}"))
    params = {"subject": subject, "filename": "c.txt", "wait": "registered"}
    done = client.post("/v1/documents", params=params, content=data, headers=H)
    assert done.status_code == 200, done.text
    answer = done.json()
    assert answer["status"] == "registered"
    assert answer["sha256"] == digest  # the caller's own document: told back
    assert answer["document_id"] != plain_id
    again = client.post("/v1/documents", params=params, content=data, headers=H).json()
    assert (again["document_id"], again["status"]) == (answer["document_id"], "duplicate")
    platform.runner.drain()

    data_dir = platform.settings.data_dir
    with sqlite3.connect(data_dir / "log.sqlite3") as db:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    files = _raw_bytes(data_dir / "blobs") + b"".join(
        p.read_bytes() for p in data_dir.glob("log.sqlite3*")
    )
    for needle in (digest, digest.upper(), plain_id):
        assert needle.encode() not in files, needle
    # the sections are registered from the blob all the same
    stream = subject
    listed = client.get(
        f"/v1/subjects/{stream}/memories",
        params={"tag": f"document:{answer['document_id']}", "limit": 100},
        headers=H,
    ).json()["memories"]
    assert len(listed) == answer["sections"]

    if subject.startswith("user:"):
        before = platform.store.counts()["documents"]
        forget = {"type": "ForgetRequested", "schema_version": 1, "stream": subject, "payload": {}}
        assert client.post("/v1/events?wait=registered", json=forget, headers=H).status_code < 300
        platform.runner.drain()
        assert platform.store.counts()["documents"] == before - 1
        rebuilt = rebuild_read_models(platform)
        assert rebuilt == platform_checksum(platform)
        assert platform.store.counts()["documents"] == before - 1


class _SearchKeysAway(SwitchableVault):
    """The vault answers everything but search keys while `away` is set."""

    away = False

    def search_key(self, key_id: str) -> bytes:
        if self.away:
            raise Unavailable("vault down", code="VAULT_UNAVAILABLE")
        return super().search_key(key_id)


def test_a_vault_away_while_the_registrar_reads_a_document_holds_it_back_not_refuses_it(
    tmp_path: Path, clock: FixedClock
) -> None:
    """An accepted document whose blob the registrar cannot name or open because the vault
    does not answer is registered once the vault is back, not refused for good
    (`HANDLER_ERROR`): nothing accepted is lost."""
    vault = _SearchKeysAway()
    platform = build_embedded(
        MnemoSettings(data_dir=tmp_path / "data", embedder="hashing"), clock=clock, vault=vault
    )
    try:
        documents = platform.app.documents
        assert documents is not None
        assert platform.sealer is not None
        ctx = RequestContext("acme", "agent")
        ingested = documents.ingest(ctx, "user:U5", "c.txt", TEXT.encode())
        platform.sealer.keys.forget(platform.sealer.key_id("acme", "user:U5"))
        vault.away = True
        platform.runner.run_once()  # the registrar fails its batch, and will try again
        assert platform.app.outcome(ctx, ingested.event_id) == []
        vault.away = False
        platform.runner._retry_at.clear()
        platform.runner.drain()
        outcomes = platform.app.outcome(ctx, ingested.event_id)
        assert {o.kind.value for o in outcomes} == {"registered"}, outcomes
        listed = platform.app.list_memories(ctx, "user:U5")
        assert len(listed) == ingested.sections
    finally:
        platform.close()
