"""Tool results over HTTP: keys limited to named tools, refused results (with a code and
nothing stored), and the suggestions route."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mnemo_gateway.app import create_app
from tests.support import auth, headers_for

from mnemo.bootstrap import Platform

H = headers_for("acme", "agent")


@pytest.fixture
def client(platform: Platform) -> Iterator[TestClient]:
    with TestClient(create_app(platform)) as c:
        yield c


def result(tool: str = "crm.get_deal", **kw: Any) -> dict[str, Any]:
    body = {
        "stream": "user:C42",
        "tool": tool,
        "arguments": {"client": "C42"},
        "result": {"stage": "negotiation"},
        "source": "crm",
        "fresh_for_seconds": 3600,
    }
    body.update(kw)
    return body


def test_a_key_limited_to_named_tools(client: TestClient, platform: Platform) -> None:
    issued = client.post(
        "/v1/tenants/acme/keys",
        json={"name": "crm-bot", "scopes": ["memory:write", "admin"], "tools": ["crm.get_deal"]},
        headers=H,
    )
    assert issued.status_code == 201, issued.text
    assert issued.json()["tools"] == ["crm.get_deal"]
    limited = auth(issued.json()["key"])
    assert client.get("/v1/whoami", headers=limited).json()["tools"] == ["crm.get_deal"]
    head = platform.log.head()
    refused = client.post("/v1/tool-results", json=result("fx.rate"), headers=limited)
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "TOOL_NOT_ALLOWED"
    raw = {
        "type": "ToolResultRecorded",
        "schema_version": 1,
        "stream": "user:C42",
        "payload": {
            "tool": "fx.rate",
            "result": "1.08",
            "source": "ecb",
            "fetched_at": "2026-11-30T12:00:00+00:00",
            "fresh_for_seconds": 60,
        },
    }
    via_events = client.post("/v1/events", json=raw, headers=limited)
    assert via_events.status_code == 403
    assert via_events.json()["error"]["code"] == "TOOL_NOT_ALLOWED"
    assert platform.log.head() == head  # nothing stored
    taken = client.post(
        "/v1/tool-results", params={"wait": "registered"}, json=result(), headers=limited
    )
    assert taken.status_code == 202, taken.text
    assert taken.json()["outcomes"][0]["outcome"] == "registered"
    # it hands on no more tools than it holds
    wider = client.post(
        "/v1/tenants/acme/keys",
        json={"name": "wider", "scopes": ["memory:write"], "tools": ["fx.rate"]},
        headers=limited,
    )
    assert wider.status_code == 403
    assert wider.json()["error"]["code"] == "TOOL_NOT_ALLOWED"
    narrower = client.post(
        "/v1/tenants/acme/keys", json={"name": "same", "scopes": ["memory:write"]}, headers=limited
    )
    assert narrower.status_code == 201
    assert narrower.json()["tools"] == ["crm.get_deal"]
    # an unrestricted key records any tool
    assert client.post("/v1/tool-results", json=result("fx.rate"), headers=H).status_code == 202


def declared(**memory: Any) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "external",
        "scope": "user",
        "key": "crm.deal",
        "value": '{"stage": "closed"}',
        "content": "crm.get_deal -> closed",
    }
    body.update(memory)
    return {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": "user:C42",
        "payload": {"memory": body},
    }


@pytest.mark.parametrize(
    ("memory", "field"),
    [
        ({"provenance": {"source_id": "tool:crm.get_deal", "trust": 0.9}}, "provenance.source_id"),
        ({"tags": ["deal", "tool:crm.get_deal", "tool-result"]}, "tags[1]"),
        # any case, any white space around it
        ({"tags": ["TOOL:crm.get_deal"]}, "tags[0]"),
        ({"provenance": {"source_id": " tool:crm.get_deal"}}, "provenance.source_id"),
        ({"provenance": {"source_id": "Tool:crm.get_deal"}}, "provenance.source_id"),
    ],
)
def test_a_key_limited_to_some_tools_declares_no_memory_as_another_tools_result(
    client: TestClient, platform: Platform, memory: dict[str, Any], field: str
) -> None:
    """A key limited to one tool once declared a memory with another tool's provenance and
    tags: it read as that tool's result in contexts and superseded that tool's real result
    under its key, which its own ToolResultRecorded is refused for."""
    issued = client.post(
        "/v1/tenants/acme/keys",
        json={"name": "fx-bot", "scopes": ["memory:write"], "tools": ["fx.rate"]},
        headers=H,
    )
    assert issued.status_code == 201, issued.text
    limited = auth(issued.json()["key"])
    head = platform.log.head()
    refused = client.post("/v1/events", json=declared(**memory), headers=limited)
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "TOOL_NOT_ALLOWED"
    assert refused.json()["error"]["field"] == f"events[0].payload.memory.{field}"
    assert platform.log.head() == head  # nothing stored
    # its own tool, and memories that claim no tool, it still declares
    own = {"provenance": {"source_id": "tool:fx.rate"}, "tags": ["tool:fx.rate"]}
    assert client.post("/v1/events", json=declared(**own), headers=limited).status_code == 202
    plain = client.post("/v1/events", json=declared(tags=["deal"]), headers=limited)
    assert plain.status_code == 202
    # an unrestricted key records any tool, so it declares any as well
    assert client.post("/v1/events", json=declared(**memory), headers=H).status_code == 202


def test_a_key_limited_to_some_tools_does_not_supersede_another_tools_result(
    client: TestClient, platform: Platform
) -> None:
    """A plain declaration (no tool named) under the key a CRM result holds superseded that
    result, and the context showed the declared value in its place."""
    real = client.post("/v1/tool-results?wait=registered", json=result(key="crm.deal"), headers=H)
    assert real.status_code == 202, real.text
    issued = client.post(
        "/v1/tenants/acme/keys",
        json={"name": "fx-bot", "scopes": ["memory:write"], "tools": ["fx.rate"]},
        headers=H,
    )
    limited = auth(issued.json()["key"])
    head = platform.log.head()
    forged = declared(type="fact", tags=["deal"], value='{"stage": "lost"}')
    refused = client.post("/v1/events", json=forged, headers=limited)
    assert refused.status_code == 403, refused.text
    assert refused.json()["error"]["code"] == "TOOL_NOT_ALLOWED"
    assert refused.json()["error"]["field"] == "events[0].payload.memory.key"
    assert platform.log.head() == head
    history = client.get("/v1/subjects/user:C42/history/crm.deal", headers=H)
    assert history.status_code == 200, history.text
    assert [m["status"] for m in history.json()["memories"]] == ["active"]  # the result
    # nor through its own tool's result under that key, nor by forgetting the result first
    own_tool = client.post(
        "/v1/tool-results", json=result("fx.rate", key="crm.deal"), headers=limited
    )
    assert own_tool.status_code == 403, own_tool.text
    assert own_tool.json()["error"]["field"] == "key"
    [held] = history.json()["memories"]
    forget = {
        "type": "ForgetRequested",
        "schema_version": 1,
        "stream": "user:C42",
        "payload": {"memory_id": held["memory_id"]},
    }
    forgot = client.post("/v1/events", json=forget, headers=limited)
    assert forgot.status_code == 403, forgot.text
    assert forgot.json()["error"]["field"] == "events[0].payload.memory_id"
    assert platform.log.head() == head
    # another key it may take; an unrestricted key may still replace the result
    other = declared(key="deal.note", type="fact", tags=["deal"])
    assert client.post("/v1/events", json=other, headers=limited).status_code == 202
    assert client.post("/v1/events", json=forged, headers=H).status_code == 202


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (result(result={"blob": "x" * 6_000}), 413, "TOOL_RESULT_TOO_LARGE"),
        (result(arguments={"q": "y" * 3_000}), 413, "TOOL_RESULT_TOO_LARGE"),
        (result(tool="not a name"), 400, "INVALID_PAYLOAD"),
        (result(fetched_at="2026-11-30T12:00:00"), 422, "VALIDATION_ERROR"),
        (result(fetched_at="1700000000"), 422, "VALIDATION_ERROR"),  # read as 2023 once
        (result(fresh_for_seconds=0), 422, "VALIDATION_ERROR"),
        (result(key="bad key"), 400, "INVALID_PAYLOAD"),
    ],
)
def test_refused_results_store_nothing(
    client: TestClient, platform: Platform, body: dict[str, Any], status: int, code: str | None
) -> None:
    head = platform.log.head()
    answer = client.post("/v1/tool-results", json=body, headers=H)
    assert answer.status_code == status, answer.text
    assert answer.json()["error"]["code"] == code
    assert platform.log.head() == head


def test_a_body_with_a_non_json_number_is_refused(client: TestClient, platform: Platform) -> None:
    head = platform.log.head()
    text = (
        '{"stream": "user:C42", "tool": "fx.rate", "result": NaN, "source": "ecb", '
        '"fresh_for_seconds": 60}'
    )
    answer = client.post(
        "/v1/tool-results", content=text, headers={**H, "Content-Type": "application/json"}
    )
    assert answer.status_code == 400, answer.text
    assert platform.log.head() == head


def test_suggestions_route_answers_for_the_subject(client: TestClient) -> None:
    answer = client.get(
        "/v1/subjects/user:C42/suggestions",
        params={"as_of": "2026-12-01T09:00:00+08:00"},
        headers=H,
    )
    assert answer.status_code == 200, answer.text
    assert answer.json()["suggestions"] == []
    naive = client.get(
        "/v1/subjects/user:C42/suggestions", params={"as_of": "2026-12-01T09:00:00"}, headers=H
    )
    assert naive.status_code in (400, 422)
    for far in ("0001-01-01T00:00:00Z", "9999-12-31T00:00:00Z"):  # as /v1/context says
        out_of_range = client.get(
            "/v1/subjects/user:C42/suggestions", params={"as_of": far}, headers=H
        )
        assert out_of_range.status_code == 400
        assert out_of_range.json()["error"]["code"] == "INVALID_AS_OF"
