"""A request to forget that the log refuses destroys no key.

Keys are shredded before the log records a request to forget. A request the log then
refuses, for a stale `expected_seq` or an `event_id` it already holds, must leave every
key as it was: nothing was forgotten, so nothing may become unreadable."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from tests.support import headers_for, running_server

from mnemo.domain.ids import new_event_id


def _event(event_type: str, stream: str, payload: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "event_id": new_event_id(datetime.now(UTC)),
        "type": event_type,
        "schema_version": 1,
        "stream": stream,
        "payload": payload,
        **extra,
    }


def _declare(client: httpx.Client, tenant: str, stream: str, content: str) -> httpx.Response:
    return client.post(
        "/v1/events?wait=registered",
        json=_event("MemoryDeclared", stream, {"memory": {"type": "fact", "content": content}}),
        headers=headers_for(tenant),
    )


def test_a_refused_request_to_forget_destroys_no_key(tmp_path: Path) -> None:
    with running_server(tmp_path / "data") as (url, platform):
        client = httpx.Client(base_url=url, timeout=30)
        acme = headers_for("acme")
        assert _declare(client, "acme", "user:ann", "ann keeps bees").status_code == 202
        other = _declare(client, "acme", "user:ben", "ben rows boats")
        assert other.status_code == 202
        used_id = other.json()["accepted"][0]["event_id"]
        assert _declare(client, "globex", "session:s1", "a shared note").status_code == 202
        assert platform.sealer is not None
        keys = platform.sealer.keys
        assert platform.sealer.key_id("acme", "user:ann") == "acme/user:ann"

        # a stale sequence: refused, and ann's key lives on
        stale = client.post(
            "/v1/events",
            json=_event("ForgetRequested", "user:ann", {"tenant": False}, expected_seq=0),
            headers=acme,
        )
        assert stale.status_code == 409, stale.text
        assert stale.json()["error"]["code"] == "STALE_SEQUENCE"
        assert not keys.is_destroyed("acme/user:ann")
        # a batch in which another event is the stale one is refused whole, the same way
        batch = [
            _event("ForgetRequested", "user:ann", {"tenant": False}),
            _event(
                "MemoryDeclared",
                "user:ben",
                {"memory": {"type": "fact", "content": "x"}},
                expected_seq=0,
            ),
        ]
        refused = client.post("/v1/events", json={"events": batch}, headers=acme)
        assert refused.status_code == 409, refused.text
        assert not keys.is_destroyed("acme/user:ann")
        # an event id the log holds already, for another event: refused, not a request
        # to forget
        reused = _event("ForgetRequested", "user:ann", {"tenant": False})
        reused["event_id"] = used_id
        dup = client.post("/v1/events", json=reused, headers=acme)
        assert dup.status_code == 409, dup.text
        assert dup.json()["error"]["code"] == "EVENT_ID_REUSED"
        assert not keys.is_destroyed("acme/user:ann")
        assert _declare(client, "acme", "user:ann", "ann also keeps hens").status_code == 202
        listed = client.get("/v1/subjects/user:ann/memories", headers=acme).json()
        assert {m["content"] for m in listed["memories"]} >= {"ann keeps bees"}

        # the whole tenant, with a stale sequence on its stream: refused, nothing shredded
        whole = client.post(
            "/v1/events",
            json=_event("ForgetRequested", "tenant", {"tenant": True}, expected_seq=99),
            headers=headers_for("globex"),
        )
        assert whole.status_code == 409, whole.text
        assert not keys.is_destroyed("globex")
        assert _declare(client, "globex", "session:s1", "another note").status_code == 202

        # and a request the log records still shreds first
        done = client.post(
            "/v1/events?wait=registered",
            json=_event("ForgetRequested", "user:ann", {"tenant": False}),
            headers=acme,
        )
        assert done.status_code == 202, done.text
        assert keys.is_destroyed("acme/user:ann")
        assert not keys.is_destroyed("acme/user:ben")
