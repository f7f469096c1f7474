"""Crypto-shredding end to end, on a real server with the OpenBao transit adapter.

Plaintext markers (a resident ID, a card, a phone, an e-mail, a password) are published
over HTTP. Authorized reads return them; no file of the data directory and no captured
log line holds them. Forgetting the user, and then a whole tenant, destroys the keys:
afterwards reads show the redaction marker, the read models and vectors are purged, and
the raw scan still finds nothing.
"""

from __future__ import annotations

import base64
import logging
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.shred_support import (
    Markers,
    Words,
    feedback_events,
    plant_markers,
    refuse_zones,
    scan,
    word_events,
)
from tests.support import headers_for, missing, running_server
from tests.vault_support import vault_settings

from mnemo.domain.errors import Unavailable
from mnemo.domain.ids import new_event_id
from mnemo.domain.pii import REDACTED
from mnemo.ports import KeyVault
from mnemo.service.runner import CONSUMERS


class Recording(KeyVault):
    """The real vault, remembering every plaintext data key it hands out (to look for them
    in the logs afterwards)."""

    def __init__(self, inner: KeyVault) -> None:
        self.inner = inner
        self.secrets: list[bytes] = []

    def data_key(self, key_id: str) -> tuple[bytes, bytes, int]:
        plaintext, wrapped, version = self.inner.data_key(key_id)
        self.secrets.append(plaintext)
        return plaintext, wrapped, version

    def unwrap(self, key_id: str, wrapped: bytes) -> bytes:
        plaintext = self.inner.unwrap(key_id, wrapped)
        self.secrets.append(plaintext)
        return plaintext

    def rewrap(self, key_id: str, wrapped: bytes) -> tuple[bytes, int]:
        return self.inner.rewrap(key_id, wrapped)

    def rotate(self, key_id: str) -> int:
        return self.inner.rotate(key_id)

    def search_key(self, key_id: str) -> bytes:
        secret = self.inner.search_key(key_id)
        self.secrets.append(secret)
        return secret

    def destroy(self, key_id: str) -> None:
        self.inner.destroy(key_id)

    def has_key(self, key_id: str) -> bool:
        return self.inner.has_key(key_id)

    def is_destroyed(self, key_id: str) -> bool:
        return self.inner.is_destroyed(key_id)


@pytest.fixture
def token() -> str:
    _, found = vault_settings()
    if found is None:
        missing("OpenBao", "no MNEMO_VAULT_TOKEN and no var/run/services.env")
    return found


@pytest.fixture
def vault(token: str) -> Recording:
    from mnemo.adapters.vault_key_vault import VaultKeyVault

    url, _ = vault_settings()
    built = VaultKeyVault(url, token, prefix=f"shred{uuid.uuid4().hex[:10]}", timeout=3)
    try:
        built.rotate("probe")
    except Unavailable as exc:
        missing("OpenBao", f"{url}: {exc.message}")
    return Recording(built)


def event(event_type: str, stream: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "event_id": new_event_id(datetime.now(UTC)),
        "type": event_type,
        "schema_version": 2 if event_type == "ObservationRecorded" else 1,
        "stream": stream,
        "payload": payload,
    }


def plant(client: httpx.Client, tenant: str, user: str, m: Markers) -> list[str]:
    """Publish the markers for one user; the ids of the memories registered."""
    batch = [
        event("ObservationRecorded", user, {"text": f"remember my phone is {m.phone}"}),
        event(
            "MemoryDeclared",
            user,
            {
                "memory": {
                    "type": "fact",
                    "content": f"ID {m.id_number}, card {m.card}, mail {m.email}, "
                    f"password: {m.password}",
                    "tags": ["kyc"],
                }
            },
        ),
        event(
            "MemoryDeclared",
            user,
            {"memory": {"type": "fact", "key": "locker", "value": m.card, "sensitive": True}},
        ),
    ]
    r = client.post("/v1/events?wait=indexed", json={"events": batch}, headers=headers_for(tenant))
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["complete"] is True
    ids = [o["memory_id"] for a in body["accepted"] for o in a["outcomes"]]
    assert len(ids) == 3
    return ids


def test_forgetting_shreds_users_and_tenants(
    tmp_path: Path, vault: Recording, token: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    data = tmp_path / "data"
    alice, bob, other = plant_markers(), plant_markers(), plant_markers()
    markers = alice.all() + bob.all() + other.all()
    with running_server(data, vault=vault) as (url, platform):
        client = httpx.Client(base_url=url, timeout=30, headers={"X-Mnemo-Principal": "agent-1"})
        acme = headers_for("acme", "agent-1")
        alice_ids = plant(client, "acme", "user:alice", alice)
        plant(client, "acme", "user:bob", bob)
        other_ids = plant(client, "globex", "user:carol", other)

        # authorized reads give the plaintext back: the markers are really there
        phone = client.get(f"/v1/memories/{alice_ids[0]}", headers=acme).json()
        assert (phone["key"], phone["value"]) == ("phone", alice.phone)
        kyc = client.get(f"/v1/memories/{alice_ids[1]}", headers=acme).json()
        for value in (alice.id_number, alice.card, alice.email, alice.password):
            assert value in kyc["content"]
        assert client.get(f"/v1/memories/{alice_ids[2]}", headers=acme).json()["value"] == (
            alice.card
        )
        hits = client.post(
            "/v1/search",
            json={"query": f"+86 {alice.phone}", "subjects": ["user:alice"]},
            headers=acme,
        ).json()["hits"]
        assert hits[0]["memory"]["memory_id"] == alice_ids[0]  # exact match by keyed hash
        ctx = client.post(
            "/v1/context", json={"subjects": ["user:alice"], "budget": 400}, headers=acme
        ).json()
        assert alice.id_number in ctx["context"]
        replayed = client.get("/v1/subjects/user:alice/events", headers=acme)
        assert alice.phone in replayed.text

        # ...and yet no file holds them: they were sealed before the log
        platform.index.flush()
        assert scan(markers, [data]) == []

        # forget alice: her key is destroyed, her read models purged
        r = client.post(
            "/v1/events?wait=indexed",
            json=event("ForgetRequested", "user:alice", {"reason": "user asked"}),
            headers=acme,
        )
        assert r.status_code == 202, r.text
        assert r.json()["complete"], r.text
        assert r.json()["accepted"][0]["outcomes"][0]["outcome"] == "applied"
        for memory_id in alice_ids:
            gone = client.get(f"/v1/memories/{memory_id}", headers=acme).json()
            assert gone["status"] == "forgotten"
            assert gone["content"] == ""
            assert gone["value"] is None
        assert not set(alice_ids) & set(platform.index.ids("acme"))
        replayed = client.get("/v1/subjects/user:alice/events", headers=acme)
        assert REDACTED in replayed.text
        assert alice.phone not in replayed.text
        # bob, in the same tenant, is untouched
        bob_list = client.get("/v1/subjects/user:bob/memories", headers=acme).json()
        assert any(bob.email in m["content"] for m in bob_list["memories"])

        # a new sensitive write for a forgotten user is refused, never stored in plaintext
        again = client.post(
            "/v1/events",
            json=event(
                "ObservationRecorded", "user:alice", {"text": f"my id is {alice.id_number}"}
            ),
            headers=acme,
        )
        assert again.status_code == 410
        assert again.json()["error"]["code"] == "KEY_DESTROYED"

        # forget the whole of tenant globex
        r = client.post(
            "/v1/events?wait=indexed",
            json=event("ForgetRequested", "tenant", {"tenant": True}),
            headers=headers_for("globex"),
        )
        assert r.status_code == 202, r.text
        assert r.json()["complete"], r.text
        listed = client.get(
            "/v1/subjects/user:carol/memories", headers=headers_for("globex")
        ).json()
        assert listed["memories"] == []
        assert platform.index.ids("globex") == []
        assert (
            client.get(f"/v1/memories/{other_ids[1]}", headers=headers_for("globex")).status_code
            == 404
        )
        platform.index.flush()
        client.close()

    logs = [r.getMessage() for r in caplog.records] + [caplog.text]
    messages = [r.getMessage() for r in caplog.records]
    shredded = [line for line in messages if "destroyed (crypto-shredded)" in line]
    assert shredded  # the logs were captured
    assert [line for line in shredded if "user:" in line] == []  # no forgotten user named
    assert scan(markers, [data], logs) == []
    # no secret in any log line: the Vault token, any data key or search key in any encoding
    assert vault.secrets
    secrets = [token]
    for raw in vault.secrets:
        secrets += [raw.hex(), base64.b64encode(raw).decode(), raw.decode("latin-1")]
    assert scan(secrets, [], logs) == []


def plant_words(client: httpx.Client, tenant: str, user: str, w: Words) -> tuple[str, str]:
    """Publish a user's words in every free-text field, correct and contradict the memory
    declared, and assemble a context for them; the context's request id and the memory's
    id."""
    events = [{"event_id": new_event_id(datetime.now(UTC)), **e} for e in word_events(user, w)]
    as_principal = headers_for(tenant, w.principal)
    r = client.post(
        "/v1/events?wait=indexed",
        json={"events": events},
        headers=as_principal,
    )
    assert r.status_code == 202, r.text
    assert r.json()["complete"] is True
    [memory_id] = [o["memory_id"] for o in r.json()["accepted"][1]["outcomes"]]

    def publish(event: dict[str, Any]) -> tuple[str, str]:
        refused = client.post("/v1/events", json=event, headers=as_principal)
        assert refused.status_code == 400, refused.text
        return refused.json()["error"]["code"], refused.text

    refuse_zones(publish, user, w)
    # reasons in the user's words (the timeline, the decay decisions), and a stale write
    # of their key (the outcome's detail)
    feedback = feedback_events(user, w, memory_id)
    r = client.post("/v1/events?wait=indexed", json={"events": feedback}, headers=as_principal)
    assert r.status_code == 202, r.text
    assert r.json()["accepted"][2]["outcomes"][0]["reason_code"] == "VERSION_CONFLICT"
    ctx = client.post(
        "/v1/context",
        json={"subjects": [user], "query": f"tea {w.content}", "budget": 800},
        headers=as_principal,
    )
    assert ctx.status_code == 200, ctx.text
    assert w.content in ctx.json()["context"]
    request_id = str(ctx.json()["request_id"])
    # a citation names the context that showed the memory (its request id is no free text)
    cited = event("MemoryCited", user, {"memory_id": memory_id, "request_id": request_id})
    r = client.post("/v1/events?wait=indexed", json=cited, headers=as_principal)
    assert r.status_code == 202, r.text
    return request_id, memory_id


def test_forgetting_a_user_leaves_none_of_their_words(
    tmp_path: Path, vault: Recording, caplog: pytest.LogCaptureFixture
) -> None:
    """Finding 6: every field a person's words can sit in is sealed under the subject's key
    before the log, whatever the detector finds; after forgetting the user no byte of any
    store or log holds them, and no read gives them back, while a control user's words are
    still there (so the scan can fail)."""
    caplog.set_level(logging.DEBUG)
    data = tmp_path / "data"
    alice, bob = Words.fresh(), Words.fresh()
    with running_server(data, vault=vault) as (url, platform):
        client = httpx.Client(base_url=url, timeout=30)
        acme = headers_for("acme", "agent-1")
        alice_ctx, alice_memory = plant_words(client, "acme", "user:alice", alice)
        _, bob_memory = plant_words(client, "acme", "user:bob", bob)
        waited = client.get("/v1/subjects/user:alice/events", headers=acme)
        assert waited.status_code == 200
        for word in alice.all():  # replay opens every field (the zones were refused)
            if word not in (alice.principal, alice.zone, alice.memory_zone):
                assert word in waited.text, word
        ctx_view = client.get(f"/v1/insights/contexts/{alice_ctx}", headers=acme).json()
        assert alice.content in (ctx_view["rendered"] or "")
        life = client.get(f"/v1/insights/memories/{alice_memory}/life", headers=acme).text
        assert alice.correction in life  # opened from the log
        assert alice.contradiction in life
        # the log holds no one's words at all, forgotten or not
        logs_files = [p for p in data.iterdir() if p.name.startswith("log.sqlite3")]
        assert logs_files
        assert scan(alice.all() + bob.all(), logs_files) == []

        r = client.post(
            "/v1/events?wait=indexed",
            json=event("ForgetRequested", "user:alice", {"reason": "user asked"}),
            headers=acme,
        )
        assert r.status_code == 202, r.text
        assert r.json()["complete"] is True
        platform.index.flush()
        forgotten_at = platform.log.stream_head("acme", "user:alice")
        # feedback from another stream about the forgotten memory (the decay consumer would
        # relay it to the user's stream)
        corrected = event(
            "MemoryCorrected", "team:ops", {"memory_ids": [alice_memory], "reason": "outdated"}
        )
        r = client.post("/v1/events?wait=indexed", json=corrected, headers=acme)
        assert r.status_code == 202, r.text

        def served(method: str, path: str, body: Any = None) -> str:
            r = client.request(method, path, json=body, headers=acme)
            assert r.status_code in (200, 404), (path, r.status_code, r.text)
            return r.text

        reads = [
            served("GET", "/v1/subjects/user:alice/events"),
            served(
                "GET",
                "/v1/subjects/user:alice/memories"
                "?include_archived=true&include_expired=true&include_superseded=true",
            ),
            served("GET", "/v1/subjects/user:alice/snapshot"),
            served("GET", "/v1/events?after_offset=0&limit=1000"),
            served("POST", "/v1/search", {"query": f"tea {alice.content}"}),
            served("POST", "/v1/context", {"subjects": ["user:alice"], "query": alice.content}),
            served("GET", "/v1/insights/events?after_offset=0&limit=1000"),
            served("GET", "/v1/insights/heatmap?include_inactive=true"),
            served("GET", "/v1/insights/contexts"),
            served("GET", f"/v1/insights/contexts/{alice_ctx}"),
            served("GET", "/v1/insights/rejections"),
            served("GET", f"/v1/insights/memories/{alice_memory}/life"),
        ]
        for text in reads:
            assert not [w for w in alice.all() if w in text], text[:400]
        deadline = time.monotonic() + 60
        while (
            time.monotonic() < deadline
            and min(platform.store.positions(CONSUMERS).values(), default=0) < platform.log.head()
        ):
            time.sleep(0.05)  # the consumers catch up (the decay consumer relays feedback)
        assert min(platform.store.positions(CONSUMERS).values()) >= platform.log.head()
        # the forgotten stream took no record of use: no context, no relayed feedback
        after = platform.log.read_stream("acme", "user:alice", 1, 10_000)
        taken = [e.envelope.type for e in after if (e.envelope.seq or 0) > forgotten_at]
        assert not {"ContextAssembled", "FeedbackRelayed"} & set(taken), taken
        # bob, the control, reads back whole
        assert bob.content in served("GET", "/v1/subjects/user:bob/memories")
        assert bob.correction in served("GET", f"/v1/insights/memories/{bob_memory}/life")
        client.close()

    logs = [r.getMessage() for r in caplog.records] + [caplog.text]
    assert scan(alice.all(), [data], logs) == []
    found = scan(bob.all(), [data], logs)
    for word in bob.stored():  # the read models keep what a live user's reads need
        assert any(hit.startswith(word) for hit in found), (word, found)


def test_forgetting_a_user_leaves_none_of_their_documents_words(
    tmp_path: Path, vault: Recording
) -> None:
    """A document's words (its text, its filename, its entities) are sealed in the blob
    store and in the log; forgetting its user leaves them in no byte of the data
    directory, while a control user's document is still answered (so the scan can fail)."""
    data = tmp_path / "data"
    # a name as an organisation is written (the read model keeps it lower-cased)
    words = {u: (f"Wdoc{uuid.uuid4().hex[:12]}", f"wfile{uuid.uuid4().hex[:12]}") for u in "ab"}

    def text(marker: str) -> bytes:
        return f"Party A: {marker} Ltd.\n\nA penalty of 6% applies.\n".encode()

    with running_server(data, vault=vault) as (url, _platform):
        client = httpx.Client(base_url=url, timeout=30)
        acme = headers_for("acme", "agent-1")
        for user, (marker, filename) in words.items():
            r = client.post(
                "/v1/documents",
                params={"subject": f"user:{user}", "filename": filename, "wait": "registered"},
                content=text(marker),
                headers=acme,
            )
            assert r.status_code == 200, r.text
            assert r.json()["status"] == "registered"
        blobs = data / "blobs"
        logs = [p for p in data.iterdir() if p.name.startswith("log.sqlite3")]
        every = [f for pair in words.values() for w in pair for f in (w, w.lower())]
        assert scan(every, [blobs, *logs]) == []  # sealed before they were written
        question = {"where": [{"field": "party_a", "op": "eq", "value": words["a"][0]}]}
        assert client.post("/v1/query", json=question, headers=acme).json()["total"] == 1
        r = client.post(
            "/v1/events?wait=indexed",
            json=event("ForgetRequested", "user:a", {"reason": "user asked"}),
            headers=acme,
        )
        assert r.status_code == 202, r.text
        assert client.post("/v1/query", json=question, headers=acme).json()["total"] == 0
        control = {"where": [{"field": "party_a", "op": "eq", "value": words["b"][0]}]}
        found = client.post("/v1/query", json=control, headers=acme).json()
        assert found["total"] == 1
        assert found["documents"][0]["filename"] == words["b"][1]
    assert scan([*words["a"], words["a"][0].lower()], [data]) == []
    assert scan([words["b"][0].lower()], [data]) != []  # the control is there: the scan works
