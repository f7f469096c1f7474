"""A query's time expressions are read in the user's time zone, through HTTP and the SDK:
at 23:30 in Los Angeles (already the next day in UTC) "yesterday" is the user's
yesterday when the request names the zone or carries an as_of with its offset, UTC's
when it carries neither; an unknown zone is refused with a code."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest
from fastapi.testclient import TestClient
from mnemo_gateway.app import create_app
from tests.support import headers_for, install_keys

from mnemo.adapters.clocks import FixedClock
from mnemo.bootstrap import Platform, build_embedded
from mnemo.client import MnemoAPIError, MnemoClient
from mnemo.settings import GatewaySettings, MnemoSettings

H = headers_for("acme", "agent-1")
STREAM = "user:U1"
# 23:30 on 1 March 2025 in Los Angeles: 07:30 on 2 March in UTC
LATE_LOCAL = datetime(2025, 3, 1, 23, 30, tzinfo=ZoneInfo("America/Los_Angeles"))
CURRY = "Maya: we cooked a curry for dinner"  # said on the user's 28 February
PASTA = "Maya: we cooked pasta for dinner"  # said on the user's 1 March
TURNS = [
    (datetime(2025, 2, 28, 20, 0, tzinfo=UTC), CURRY),
    (datetime(2025, 3, 1, 20, 0, tzinfo=UTC), PASTA),
    (datetime(2025, 2, 20, 20, 0, tzinfo=UTC), "Maya: we cooked soup for dinner"),
]
QUERY = "what did we cook yesterday"


@pytest.fixture
def server(tmp_path: Path) -> Iterator[TestClient]:
    clock = FixedClock(LATE_LOCAL.astimezone(UTC))
    platform: Platform = build_embedded(
        MnemoSettings(data_dir=tmp_path / "data", embedder="hashing", sqlite_synchronous="NORMAL"),
        clock=clock,
    )
    install_keys(platform, "acme")
    try:
        with TestClient(create_app(platform, GatewaySettings(wait_timeout=60))) as client:
            events = [
                {
                    "type": "MemoryDeclared",
                    "schema_version": 1,
                    "stream": STREAM,
                    "occurred_at": at.isoformat(),
                    "payload": {"memory": {"type": "history", "scope": "user", "content": text}},
                }
                for at, text in TURNS
            ]
            r = client.post("/v1/events?wait=indexed", json={"events": events}, headers=H)
            assert r.status_code == 202, r.text
            assert r.json()["complete"] is True, r.text
            yield client
    finally:
        platform.close()


def _top_history(answer: dict[str, object]) -> str:
    included = [i for i in answer["included"] if i["memory"]["type"] == "history"]  # type: ignore[attr-defined, index]
    best = max(included, key=lambda i: i["score"]["relevance"])
    return str(best["memory"]["content"])


def test_http_search_and_context_read_yesterday_in_the_users_zone(server: TestClient) -> None:
    def search(**extra: object) -> str:
        r = server.post(
            "/v1/search", json={"query": QUERY, "subjects": [STREAM], **extra}, headers=H
        )
        assert r.status_code == 200, r.text
        return str(r.json()["hits"][0]["memory"]["content"])

    def context(**extra: object) -> str:
        body = {"subjects": [STREAM], "query": QUERY, **extra}
        r = server.post("/v1/context", json=body, headers=H)
        assert r.status_code == 200, r.text
        return _top_history(r.json())

    assert search(timezone="America/Los_Angeles") == CURRY
    assert search() == PASTA  # no zone: UTC, where yesterday is the 1st
    assert context(as_of=LATE_LOCAL.isoformat()) == CURRY  # as_of's own offset, -08:00
    assert context(as_of=LATE_LOCAL.astimezone(UTC).isoformat()) == PASTA
    assert context(timezone="America/Los_Angeles") == CURRY
    for path, body in (
        ("/v1/search", {"query": QUERY, "timezone": "Mars/Olympus"}),
        ("/v1/context", {"subjects": [STREAM], "query": QUERY, "timezone": "Mars/Olympus"}),
        # a directory of the zone database, which the loader answers with an OSError
        ("/v1/search", {"query": QUERY, "timezone": "America"}),
        ("/v1/context", {"subjects": [STREAM], "query": QUERY, "timezone": "Europe"}),
    ):
        r = server.post(path, json=body, headers=H)
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "INVALID_TIMEZONE"
        assert r.json()["error"]["field"] == "timezone"


def test_the_sdk_carries_the_time_zone_and_the_as_of_offset(server: TestClient) -> None:
    client = MnemoClient(str(server.base_url), headers=H, http_client=server)
    found = client.search(QUERY, subjects=[STREAM], timezone="America/Los_Angeles")
    assert found.hits[0].memory.content == CURRY
    assert client.search(QUERY, subjects=[STREAM]).hits[0].memory.content == PASTA
    answer = client.context([STREAM], QUERY, as_of=LATE_LOCAL)
    assert _top_history(answer.model_dump(mode="json")) == CURRY
    # the same instant written as a string, as `record_turn(occurred_at=...)` takes one
    answer = client.context([STREAM], QUERY, as_of=LATE_LOCAL.isoformat())
    assert _top_history(answer.model_dump(mode="json")) == CURRY
    answer = client.context([STREAM], QUERY, timezone="America/Los_Angeles")
    assert _top_history(answer.model_dump(mode="json")) == CURRY
    with pytest.raises(MnemoAPIError) as caught:
        client.search(QUERY, timezone="Mars/Olympus")
    assert caught.value.code == "INVALID_TIMEZONE"
