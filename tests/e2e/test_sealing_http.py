"""Sealing through the HTTP gateway: a vault that is down fails sensitive writes closed
(503, nothing appended, nothing lost once it is back); forgetting one memory removes it
from every read model and the vector index while its event stays, unreadable, in the log."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from tests.shred_support import plant_markers, scan
from tests.support import headers_for, running_server
from tests.vault_support import SwitchableVault

from mnemo.domain.ids import new_event_id
from mnemo.domain.pii import REDACTED

H = headers_for("acme", "agent-1")


def event(event_type: str, payload: dict[str, Any], stream: str = "user:U1") -> dict[str, Any]:
    return {
        "event_id": new_event_id(datetime.now(UTC)),
        "type": event_type,
        "schema_version": 2 if event_type == "ObservationRecorded" else 1,
        "stream": stream,
        "payload": payload,
    }


def test_vault_down_fails_sensitive_writes_closed(tmp_path: Path) -> None:
    vault = SwitchableVault()
    m = plant_markers()
    with running_server(tmp_path / "data", vault=vault) as (url, platform):
        client = httpx.Client(base_url=url, headers=H, timeout=30)
        vault.down = True
        sensitive = event("ObservationRecorded", {"text": f"remember my phone is {m.phone}"})
        head = platform.log.head()
        r = client.post("/v1/events?wait=registered", json=sensitive)
        assert r.status_code == 503
        assert r.json()["error"]["code"] == "VAULT_UNAVAILABLE"
        assert r.headers["Retry-After"] == "1"
        assert m.phone not in r.text
        assert platform.log.head() == head  # nothing appended, in plaintext or otherwise
        # a batch with one sensitive event is refused whole
        plain = event("ObservationRecorded", {"text": "remember my size is M"})
        assert client.post("/v1/events", json={"events": [plain, sensitive]}).status_code == 503
        assert platform.log.head() == head
        # a user's words are sealed whatever the detector finds: without the vault nothing
        # of theirs is logged either (fail closed)
        refused = client.post("/v1/events?wait=registered", json=plain)
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] == "VAULT_UNAVAILABLE"
        assert platform.log.head() == head
        # nor on a shared stream: its words are sealed under the tenant's key
        team = {**plain, "stream": "team:ops"}
        refused = client.post("/v1/events?wait=registered", json=team)
        assert refused.status_code == 503
        assert refused.json()["error"]["code"] == "VAULT_UNAVAILABLE"
        assert platform.log.head() == head

        vault.down = False  # back: the same event, retried, goes through
        r = client.post("/v1/events?wait=registered", json=sensitive)
        assert r.status_code == 202, r.text
        outcome = r.json()["accepted"][0]["outcomes"][0]
        assert outcome["outcome"] == "registered"
        memory = client.get(f"/v1/memories/{outcome['memory_id']}").json()
        assert (memory["key"], memory["value"]) == ("phone", m.phone)
        client.close()
        platform.index.flush()
    assert scan([m.phone], [tmp_path / "data"]) == []


def test_forgetting_one_memory(tmp_path: Path) -> None:
    gone, kept = plant_markers(), plant_markers()
    with running_server(tmp_path / "data") as (url, platform):
        client = httpx.Client(base_url=url, headers=H, timeout=30)
        batch = [
            event("MemoryDeclared", {"memory": {"type": "fact", "content": f"card {gone.card}"}}),
            event("MemoryDeclared", {"memory": {"type": "fact", "content": f"mail {kept.email}"}}),
        ]
        r = client.post("/v1/events?wait=indexed", json={"events": batch})
        assert r.status_code == 202, r.text
        assert r.json()["complete"] is True, r.text
        forgotten_id, kept_id = (a["outcomes"][0]["memory_id"] for a in r.json()["accepted"])

        def search(query: str) -> list[str]:
            hits = client.post("/v1/search", json={"query": query, "subjects": ["user:U1"]})
            return [h["memory"]["memory_id"] for h in hits.json()["hits"]]

        assert search(gone.card)[0] == forgotten_id
        assert set(platform.index.ids("acme")) == {forgotten_id, kept_id}
        events_before = len(client.get("/v1/subjects/user:U1/events").json()["events"])

        forget = event("ForgetRequested", {"memory_id": forgotten_id})
        r = client.post("/v1/events?wait=indexed", json=forget)
        assert r.json()["complete"] is True, r.text
        assert r.json()["accepted"][0]["outcomes"][0]["outcome"] == "applied"

        memory = client.get(f"/v1/memories/{forgotten_id}").json()
        assert memory["status"] == "forgotten"
        assert memory["content"] == ""
        assert memory["sealed"] is None
        listed = client.get("/v1/subjects/user:U1/memories").json()["memories"]
        assert [m["memory_id"] for m in listed] == [kept_id]
        assert platform.index.ids("acme") == [kept_id]
        assert forgotten_id not in search(gone.card)
        assert search(kept.email)[0] == kept_id

        # the events stay in the log; the forgotten memory's values read as redacted
        replayed = client.get("/v1/subjects/user:U1/events").json()["events"]
        assert len(replayed) > events_before
        declared = [e for e in replayed if e["type"] == "MemoryDeclared"]
        # a user's content is sealed whole: all of it reads redacted
        assert declared[0]["payload"]["memory"]["content"] == REDACTED
        assert declared[1]["payload"]["memory"]["content"] == f"mail {kept.email}"
        registered = [e for e in replayed if e["type"] == "MemoryRegistered"]
        contents = {e["payload"]["memory"]["memory_id"]: e["payload"]["memory"]["content"]
                    for e in registered}  # fmt: skip
        assert contents == {forgotten_id: REDACTED, kept_id: f"mail {kept.email}"}
        client.close()
