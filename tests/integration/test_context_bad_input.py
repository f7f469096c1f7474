"""A context request with an instant out of range or an unknown history mode answers a
coded 400, never a 500, and the connection serves the next request."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from tests.support import headers_for, running_server


@pytest.mark.parametrize(
    ("body", "code"),
    [
        ({"query": "what happened last week", "as_of": "0001-01-01T00:00:00Z"}, "INVALID_AS_OF"),
        ({"query": "next week", "as_of": "9999-12-31T00:00:00Z"}, "INVALID_AS_OF"),
        (
            {"query": "hello", "as_of": "9999-12-31T23:59:59-14:00", "timezone": "Asia/Tokyo"},
            "INVALID_AS_OF",
        ),
        ({"query": "明天", "as_of": "1969-12-31T23:00:00Z"}, "INVALID_AS_OF"),
        ({"history": "summary"}, "INVALID_HISTORY_MODE"),
    ],
)
def test_a_bad_context_request_is_a_coded_400(
    tmp_path: Path, body: dict[str, object], code: str
) -> None:
    with (
        running_server(tmp_path / "data") as (url, _),
        httpx.Client(base_url=url, timeout=30, headers=headers_for("acme")) as client,
    ):
        answer = client.post("/v1/context", json={"subjects": ["user:m1"], **body})
        assert answer.status_code == 400, answer.text
        assert answer.json()["error"]["code"] == code
        fine = client.post(
            "/v1/context",
            json={
                "subjects": ["user:m1"],
                "query": "yesterday",
                "as_of": "2200-06-30T00:00:00Z",
            },
        )
        assert fine.status_code == 200, fine.text


def test_a_time_given_as_a_number_is_refused_not_guessed_at(tmp_path: Path) -> None:
    with (
        running_server(tmp_path / "data") as (url, _),
        httpx.Client(base_url=url, timeout=30, headers=headers_for("acme")) as client,
    ):
        context = client.post("/v1/context", json={"subjects": ["user:m1"], "as_of": 1.7e9})
        assert context.status_code == 422, context.text
        assert context.json()["error"]["field"] == "as_of"
        result = {"stream": "user:m1", "tool": "crm.get", "result": {"a": 1}, "source": "crm",
                  "fetched_at": 1_700_000_000, "fresh_for_seconds": 60}  # fmt: skip
        tool = client.post("/v1/tool-results", json=result)
        assert tool.status_code == 422, tool.text
        assert tool.json()["error"]["field"] == "fetched_at"
