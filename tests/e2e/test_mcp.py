"""Mnemo's MCP server through the official MCP client, over both transports: stdio (a real
`mnemo mcp` process) and streamable HTTP (the gateway's /mcp endpoint), both against a
real Mnemo server running in this process."""

from __future__ import annotations

import asyncio
import json
import shutil
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx2
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import CallToolResult, TextContent, TextResourceContents
from tests.support import fixed_key, install_keys, running_server

from mnemo.client import MnemoClient
from mnemo.domain.memory import MemoryType
from mnemo.entrypoints.mcp_server import PAGE_BYTES, PAGE_MEMORIES
from mnemo.service.triggers import load_triggers

TENANT = "mcp-test"
TRANSPORTS = ["stdio", "http"]
TOOLS = {
    "remember",
    "record_turn",
    "recall",
    "get_context",
    "forget",
    "feedback",
    "due_verifications",
    "start_toolchain",
    "record_step",
    "toolchain_state",
    "record_tool_result",
    "suggested_tool_calls",
    "ingest_document",
    "structured_query",
}
TRIGGERS = """
tools:
  - name: crm.get_deal
triggers:
  - id: stale-proposal
    when: {key: stage, value: proposal_sent, older_than: 1d}
    suggest: {tool: crm.get_deal, arguments: {client: "{stream}"}}
"""
UNKNOWN_ID = "01a22b07-8623-7c5d-b658-fa7a79aa796b"

pytestmark = pytest.mark.asyncio


# ---- the server and the clients -----------------------------------------------------------


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real server (embedded platform, gateway, uvicorn) on a free port, in a thread."""
    with running_server(tmp_path_factory.mktemp("server")) as (url, platform):
        install_keys(platform, TENANT, "someone-else", "tenant-a", "tenant-b")
        install_keys(platform, TENANT, label="reader", scopes=("memory:read",))
        triggers = tmp_path_factory.mktemp("triggers") / "triggers.yaml"
        triggers.write_text(TRIGGERS)
        platform.app.triggers = load_triggers(triggers)
        yield url


@pytest.fixture
def sdk(server_url: str) -> Iterator[MnemoClient]:
    with MnemoClient(
        server_url, tenant=TENANT, principal="sdk", api_key=fixed_key(TENANT)
    ) as client:
        yield client


def mnemo_command() -> list[str]:
    """The installed `mnemo` console script, else the module."""
    script = Path(sys.executable).with_name("mnemo")
    found = script if script.exists() else shutil.which("mnemo")
    return [str(found)] if found else [sys.executable, "-m", "mnemo"]


@asynccontextmanager
async def connect(
    server_url: str,
    transport: str,
    *,
    tenant: str | None = TENANT,
    principal: str = "agent",
    mode: str = "auto",
    errlog: Path | None = None,
    label: str = "all",
    log_level: str = "WARNING",
) -> AsyncIterator[Client]:
    """An MCP client session: over stdio to a `mnemo mcp` process (identity from its
    environment), or over HTTP to /mcp (identity in each request's headers)."""
    if transport == "http":
        headers = {"X-Mnemo-Principal": principal}
        if tenant is not None:
            headers["X-Mnemo-Tenant"] = tenant
            headers["Authorization"] = f"Bearer {fixed_key(tenant, label)}"
        async with (
            httpx2.AsyncClient(headers=headers, timeout=60.0) as http,
            Client(streamable_http_client(f"{server_url}/mcp", http_client=http), mode=mode) as c,
        ):
            yield c
        return
    command, *args = mnemo_command()
    env = {"MNEMO_PRINCIPAL": principal, "MNEMO_LOG_LEVEL": log_level}
    if tenant is not None:
        env["MNEMO_TENANT"] = tenant
        env["MNEMO_API_KEY"] = fixed_key(tenant, label)
    params = StdioServerParameters(
        command=command, args=[*args, "--url", server_url, "mcp"], env=env
    )
    log_path = errlog or Path("/dev/null")
    with log_path.open("a", encoding="utf-8") as log:
        async with Client(stdio_client(params, errlog=log), mode=mode) as c:
            yield c


def data(result: CallToolResult) -> dict[str, Any]:
    assert not result.is_error, result.content
    assert result.structured_content is not None
    return result.structured_content


def error(result: CallToolResult) -> dict[str, Any]:
    assert result.is_error, result.structured_content
    assert result.structured_content is not None
    err = result.structured_content
    assert set(err) >= {"code", "field", "reason"}
    # the same error, readable as text by clients that only show text
    text = result.content[0]
    assert isinstance(text, TextContent)
    assert json.loads(text.text)["error"]["code"] == err["code"]
    return err


async def read_json(client: Client, uri: str) -> dict[str, Any]:
    result = await client.read_resource(uri)
    (content,) = result.contents
    assert isinstance(content, TextResourceContents)
    assert content.mime_type == "application/json"
    body: dict[str, Any] = json.loads(content.text)
    return body


# ---- tools ------------------------------------------------------------------------------------


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_lists_tools_with_precise_schemas(server_url: str, transport: str) -> None:
    async with connect(server_url, transport) as client:
        tools = {t.name: t for t in (await client.list_tools()).tools}
        templates = (await client.list_resource_templates()).resource_templates
    assert set(tools) == TOOLS
    for tool in tools.values():
        assert tool.description
        assert tool.input_schema["type"] == "object"
        assert tool.output_schema is not None
        assert "ctx" not in tool.input_schema["properties"]

    remember = tools["remember"].input_schema
    assert sorted(remember["required"]) == ["subject", "type"]
    props = remember["properties"]
    assert set(props["type"]["enum"]) == {t.value for t in MemoryType}
    assert props["scope"]["enum"] == ["session", "user", "agent", "tenant"]
    assert props["subject"]["pattern"].startswith("^[A-Za-z0-9]")
    assert props["content"]["maxLength"] == 8_000
    assert props["tags"]["maxItems"] == 32
    assert {"key", "value", "ttl_seconds", "semantic_weight", "wait"} <= set(props)

    recall = tools["recall"].input_schema
    assert recall["required"] == ["query"]
    assert recall["properties"]["limit"]["maximum"] == 100
    assert {"subjects", "types", "tags", "timezone"} <= set(recall["properties"])

    context = tools["get_context"].input_schema
    assert context["required"] == ["subjects"]
    assert context["properties"]["budget"]["minimum"] == 16
    assert {"template", "query", "tokenizer", "timezone", "where"} <= set(context["properties"])
    assert context["properties"]["history"]["enum"] == ["facts", "facts_only", "raw"]

    assert sorted(tools["forget"].input_schema["required"]) == ["memory_id", "subject"]
    feedback = tools["feedback"].input_schema["properties"]
    assert {"request_id", "response", "correction", "cite", "correct", "verify"} <= set(feedback)
    assert tools["due_verifications"].input_schema["required"] == ["subject"]

    assert tools["recall"].annotations is not None
    assert tools["recall"].annotations.read_only_hint is True
    assert tools["forget"].annotations is not None
    assert tools["forget"].annotations.destructive_hint is True
    assert {t.uri_template for t in templates} == {
        "mnemo://subjects/{subject}/memories{?cursor}",
        "mnemo://memories/{memory_id}",
        "mnemo://templates{?name}",
    }


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_every_tool(server_url: str, transport: str, sdk: MnemoClient) -> None:
    subject = f"user:tools-{transport}"
    async with connect(server_url, transport) as client:
        tea = data(
            await client.call_tool(
                "remember",
                {
                    "subject": subject,
                    "type": "preference",
                    "content": "Prefers green tea without sugar",
                    "tags": ["drinks"],
                    "wait": "indexed",
                },
            )
        )
        assert tea["outcome"] == "registered"
        size = data(
            await client.call_tool(
                "remember",
                {"subject": subject, "type": "preference", "key": "size", "value": "M"},
            )
        )
        bigger = data(
            await client.call_tool(
                "remember",
                {"subject": subject, "type": "preference", "key": "size", "value": "L"},
            )
        )
        assert (bigger["outcome"], bigger["version"]) == ("superseded", 2)
        assert sdk.get(size["memory_id"]).status == "superseded"

        hits = data(
            await client.call_tool(
                "recall", {"query": "green tea", "subjects": [subject], "tags": ["drinks"]}
            )
        )["hits"]
        assert hits[0]["memory_id"] == tea["memory_id"]
        assert hits[0]["subject"] == subject

        ctx = data(
            await client.call_tool(
                "get_context", {"subjects": [subject], "query": "what to drink", "budget": 300}
            )
        )
        used = {i["memory_id"] for i in ctx["included"]}
        assert tea["memory_id"] in used
        assert ctx["tokens"] <= 300
        assert ctx["context"].startswith("[MNEMO-CONTEXT")

        answer = f'Green tea, no sugar <memory_ref id="{tea["memory_id"]}"/>'
        reported = data(
            await client.call_tool(
                "feedback",
                {
                    "request_id": ctx["request_id"],
                    "response": answer,
                    "correction": "the size is L now",
                    "corrected_memory_ids": [bigger["memory_id"]],
                },
            )
        )
        assert reported["cited"] == [tea["memory_id"]]
        assert reported["corrected"] == [bigger["memory_id"]]

        direct = data(
            await client.call_tool(
                "feedback",
                {
                    "request_id": ctx["request_id"],
                    "cite": [tea["memory_id"]],
                    "verify": [bigger["memory_id"]],
                },
            )
        )
        # a citation names the context that included the memory
        bare = await client.call_tool("feedback", {"cite": [tea["memory_id"]]})
        assert bare.is_error
        assert (error(bare)["code"], error(bare)["field"]) == (
            "CITATION_WITHOUT_CONTEXT",
            "request_id",
        )
        assert direct["verified"] == [bigger["memory_id"]]
        assert len(direct["event_ids"]) == 2
        types = {e.type for e in sdk.replay(subject).events}
        assert {"MemoryCited", "MemoryCorrected", "MemoryVerified"} <= types

        due = await client.call_tool("due_verifications", {"subject": subject})
        if due.is_error:  # an older server without the endpoint
            assert error(due)["code"] == "ROUTE_NOT_FOUND"
        else:
            assert isinstance(data(due)["items"], list)

        gone = data(
            await client.call_tool(
                "forget", {"subject": subject, "memory_id": tea["memory_id"], "reason": "asked"}
            )
        )
        assert gone["forgotten"] is True
        hits = data(await client.call_tool("recall", {"query": "green tea", "subjects": [subject]}))
        assert tea["memory_id"] not in {h["memory_id"] for h in hits["hits"]}


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_an_argument_a_tool_does_not_take_is_refused(server_url: str, transport: str) -> None:
    """Unknown arguments were dropped without a word: `recall` given `subject` (for
    `subjects`) searched every subject of the tenant, and `remember` given `sensitive`
    stored the content as if nothing had been said."""
    subject = f"user:unknown-arg-{transport}"
    other = f"user:unknown-arg-other-{transport}"
    async with connect(server_url, transport) as client:
        kept = await client.call_tool(
            "remember", {"subject": other, "type": "fact", "content": "other user's teapot"}
        )
        assert not kept.is_error, kept.content
        narrow = error(await client.call_tool("recall", {"query": "teapot", "subject": subject}))
        assert (narrow["code"], narrow["field"]) == ("INVALID_ARGUMENTS", "subject")
        assert "teapot" not in json.dumps(narrow)
        sealed = error(
            await client.call_tool(
                "remember",
                {"subject": subject, "type": "fact", "content": "code 1234", "sensitive": True},
            )
        )
        assert (sealed["code"], sealed["field"]) == ("INVALID_ARGUMENTS", "sensitive")
    assert sdk_free_of(server_url, subject)


def raw_headers() -> dict[str, str]:
    """The headers of a JSON-RPC request written by hand (bodies the MCP client never sends)."""
    return {
        "Authorization": f"Bearer {fixed_key(TENANT)}",
        "X-Mnemo-Tenant": TENANT,
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
    }


def sdk_free_of(server_url: str, subject: str) -> bool:
    """Nothing was stored for the subject."""
    with MnemoClient(
        server_url, tenant=TENANT, principal="sdk", api_key=fixed_key(TENANT)
    ) as client:
        return not client.replay(subject).events


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_bad_arguments_are_structured_errors(server_url: str, transport: str) -> None:
    subject = f"user:bad-{transport}"
    async with connect(server_url, transport) as client:
        # the input schema, checked by the MCP server
        bad_type = error(await client.call_tool("remember", {"subject": subject, "type": "x"}))
        assert (bad_type["code"], bad_type["field"]) == ("INVALID_ARGUMENTS", "type")
        missing = error(await client.call_tool("remember", {"type": "fact", "content": "x"}))
        assert (missing["code"], missing["field"]) == ("INVALID_ARGUMENTS", "subject")
        bad_tag = error(
            await client.call_tool(
                "remember",
                {"subject": subject, "type": "fact", "content": "x", "tags": ["ok", " "]},
            )
        )
        assert (bad_tag["code"], bad_tag["field"]) == ("INVALID_ARGUMENTS", "tags[1]")
        bad_subject = error(await client.call_tool("recall", {"query": "x", "subjects": ["a b"]}))
        assert bad_subject["field"] == "subjects[0]"
        # JSON types as the schema gives them: these were taken as 5, 5 and 1
        for limit in ("5", 5.0, True):
            loose = error(await client.call_tool("recall", {"query": "x", "limit": limit}))
            assert (loose["code"], loose["field"]) == ("INVALID_ARGUMENTS", "limit"), limit
        # a list sent as its JSON text, as some clients send it, is still a list
        as_text = await client.call_tool("recall", {"query": "x", "subjects": '["user:a"]'})
        assert not as_text.is_error, as_text.structured_content
        nameless = error(await client.call_tool("no_such_tool", {}))
        assert (nameless["code"], nameless["field"]) == ("UNKNOWN_TOOL", "name")

        # Mnemo's own answers: codes and fields from the API's error body
        unknown = error(
            await client.call_tool("forget", {"subject": subject, "memory_id": UNKNOWN_ID})
        )
        assert (unknown["code"], unknown["field"]) == ("MEMORY_NOT_FOUND", "memory_id")
        no_memory = error(await client.call_tool("feedback", {"verify": [UNKNOWN_ID]}))
        assert (no_memory["code"], no_memory["field"]) == ("MEMORY_NOT_FOUND", "memory_id")
        no_context = error(
            await client.call_tool("feedback", {"request_id": UNKNOWN_ID, "response": "hi"})
        )
        assert (no_context["code"], no_context["field"]) == ("CONTEXT_NOT_FOUND", "request_id")
        no_template = error(
            await client.call_tool("get_context", {"subjects": [subject], "template": "nope"})
        )
        assert no_template["code"] == "TEMPLATE_NOT_FOUND"
        empty = error(await client.call_tool("remember", {"subject": subject, "type": "fact"}))
        assert empty["code"] == "EMPTY_CONTENT"
        # the tool's own argument, not the API's path to it (events[0].payload.memory)
        assert empty["field"] == "content"
        malformed = error(
            await client.call_tool("forget", {"subject": subject, "memory_id": "nope"})
        )
        assert malformed["field"] == "memory_id"  # was events[0].payload.memory_id
        nothing = error(await client.call_tool("feedback", {}))
        assert nothing["code"] == "NOTHING_TO_REPORT"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_concurrent_calls(server_url: str, transport: str, sdk: MnemoClient) -> None:
    subject = f"user:busy-{transport}"
    async with connect(server_url, transport) as client:
        results = await asyncio.gather(
            *[
                client.call_tool(
                    "remember", {"subject": subject, "type": "fact", "content": f"fact #{i}"}
                )
                for i in range(20)
            ]
        )
    ids = {data(r)["memory_id"] for r in results}
    assert len(ids) == 20
    stored = {m.memory_id for m in sdk.iter_memories(subject)}
    assert stored == ids
    assert {m.content for m in sdk.list(subject).memories} == {f"fact #{i}" for i in range(20)}


# ---- resources ----------------------------------------------------------------------------


def declare_many(sdk: MnemoClient, subject: str, contents: list[str]) -> set[str]:
    events = [
        {
            "type": "MemoryDeclared",
            "schema_version": 1,
            "stream": subject,
            "payload": {"memory": {"type": "fact", "content": text}},
        }
        for text in contents
    ]
    return set(sdk.publish(events, wait="registered").memory_ids)


async def read_all_pages(client: Client, subject: str) -> list[dict[str, Any]]:
    pages = []
    uri: str | None = f"mnemo://subjects/{subject}/memories"
    while uri is not None:
        page = await read_json(client, uri)
        pages.append(page)
        uri = page["next_uri"]
        assert len(pages) < 50, "pagination does not end"
    return pages


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_paginated_memories_resource(
    server_url: str, transport: str, sdk: MnemoClient
) -> None:
    many = f"user:many-{transport}"
    ids = declare_many(sdk, many, [f"note number {i}" for i in range(120)])
    large = f"user:large-{transport}"
    large_ids = declare_many(sdk, large, [f"{i:02d} " + "x" * 7_000 for i in range(12)])
    async with connect(server_url, transport) as client:
        pages = await read_all_pages(client, many)
        big_pages = await read_all_pages(client, large)
        one = await read_json(client, f"mnemo://memories/{min(ids)}")
        templates = await read_json(client, "mnemo://templates")
        default = await read_json(client, "mnemo://templates?name=default")
        with pytest.raises(MCPError, match="MEMORY_NOT_FOUND"):
            await client.read_resource(f"mnemo://memories/{UNKNOWN_ID}")

    assert [len(p["memories"]) for p in pages] == [PAGE_MEMORIES, PAGE_MEMORIES, 20]
    seen = [m["memory_id"] for p in pages for m in p["memories"]]
    assert len(seen) == len(set(seen)) == 120
    assert set(seen) == ids
    assert pages[-1]["next_cursor"] is None
    assert pages[0]["next_uri"] == f"mnemo://subjects/{many}/memories?cursor={seen[49]}"

    # the byte cap splits pages of large memories long before 50
    assert len(big_pages) > 1
    for page in big_pages:
        assert 1 <= len(page["memories"]) < 12
        assert len(json.dumps(page["memories"]).encode()) <= PAGE_BYTES
    assert {m["memory_id"] for p in big_pages for m in p["memories"]} == large_ids

    assert one["memory_id"] == min(ids)
    assert "default" in {t["template"]["name"] for t in templates["templates"]}
    assert [t["template"]["name"] for t in default["templates"]] == ["default"]


# ---- identity ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["auto", "legacy"])
@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_each_caller_acts_as_itself(
    server_url: str, transport: str, mode: str, sdk: MnemoClient, tmp_path: Path
) -> None:
    subject = f"user:who-{transport}-{mode}"
    principal = f"{transport}-agent"
    async with connect(
        server_url, transport, principal=principal, mode=mode, errlog=tmp_path / "stderr"
    ) as client:
        made = data(
            await client.call_tool(
                "remember", {"subject": subject, "type": "fact", "content": "likes chess"}
            )
        )
    (declared,) = [e for e in sdk.replay(subject).events if e.type == "MemoryDeclared"]
    assert declared.actor.id == principal
    assert declared.tenant == TENANT

    if mode != "auto":
        return  # isolation does not depend on the protocol version; checked once
    async with connect(server_url, transport, tenant="someone-else") as other:
        hits = data(
            await other.call_tool("recall", {"query": "likes chess", "subjects": [subject]})
        )
        assert hits["hits"] == []
        hidden = error(
            await other.call_tool("forget", {"subject": subject, "memory_id": made["memory_id"]})
        )
        assert hidden["code"] == "MEMORY_NOT_FOUND"
    assert sdk.get(made["memory_id"]).content == "likes chess"


async def test_http_without_a_valid_key_is_refused_before_mcp(server_url: str) -> None:
    hello = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "0"},
        },
    }
    accept = {"Accept": "application/json, text/event-stream"}
    async with httpx2.AsyncClient(timeout=30.0) as http:
        bare = await http.post(f"{server_url}/mcp", json=hello, headers=accept)
        forged = await http.post(
            f"{server_url}/mcp",
            json=hello,
            headers={**accept, "Authorization": "Bearer mnemo_0123456789abcdef_" + "x" * 43},
        )
        mismatched = await http.post(
            f"{server_url}/mcp",
            json=hello,
            headers={
                **accept,
                "Authorization": f"Bearer {fixed_key(TENANT)}",
                "X-Mnemo-Tenant": "tenant-a",
            },
        )
        admitted = await http.post(
            f"{server_url}/mcp",
            json=hello,
            headers={**accept, "Authorization": f"Bearer {fixed_key(TENANT)}"},
        )
    assert (bare.status_code, bare.json()["error"]["code"]) == (401, "UNAUTHENTICATED")
    assert (forged.status_code, forged.json()["error"]["code"]) == (401, "UNAUTHENTICATED")
    assert (mismatched.status_code, mismatched.json()["error"]["code"]) == (403, "TENANT_MISMATCH")
    assert admitted.status_code == 200


async def test_a_foreign_host_origin_or_content_type_is_refused_with_a_code(
    server_url: str,
) -> None:
    # on loopback the endpoint answers only its own host and pages of its own origin (DNS
    # rebinding); each refusal is a coded JSON error like any other of the API's
    hello = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    own = {
        "Accept": "application/json, text/event-stream",
        "Authorization": f"Bearer {fixed_key(TENANT)}",
    }
    async with httpx2.AsyncClient(timeout=30.0) as http:
        host = await http.post(
            f"{server_url}/mcp", json=hello, headers={**own, "Host": "mnemo.attacker.example"}
        )
        origin = await http.post(
            f"{server_url}/mcp", json=hello, headers={**own, "Origin": "https://attacker.example"}
        )
        text = await http.post(
            f"{server_url}/mcp",
            content=b'{"jsonrpc": "2.0", "id": 1, "method": "ping"}',
            headers={**own, "Content-Type": "text/plain"},
        )
        fine = await http.post(f"{server_url}/mcp", json=hello, headers=own)
    assert (host.status_code, host.json()["error"]["code"]) == (421, "MISDIRECTED_HOST")
    assert (origin.status_code, origin.json()["error"]["code"]) == (403, "ORIGIN_NOT_ALLOWED")
    assert (text.status_code, text.json()["error"]["code"]) == (400, "INVALID_CONTENT_TYPE")
    assert fine.status_code == 200


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_record_turn_keeps_history_and_reports_what_the_rules_made_of_it(
    server_url: str, transport: str, sdk: MnemoClient
) -> None:
    subject = f"user:turns-{transport}"
    async with connect(server_url, transport) as client:
        said = "2026-03-02T10:15:00+08:00"
        first = data(
            await client.call_tool(
                "record_turn",
                {
                    "subject": subject,
                    "text": "记住我的尺码是L",
                    "speaker": "客户",
                    "occurred_at": said,
                },
            )
        )
        assert first["outcome"] == "registered"
        [size] = first["extracted"]
        assert (size["index"], size["outcome"]) == (1, "registered")
        history = sdk.get(first["memory_id"])
        assert (history.type, history.content) == (MemoryType.HISTORY, "客户: 记住我的尺码是L")
        assert history.created_at.isoformat().startswith("2026-03-02T")
        thanks = data(
            await client.call_tool("record_turn", {"subject": subject, "text": "Thanks!"})
        )
        assert (thanks["outcome"], thanks["extracted"]) == ("registered", [])


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_get_context_shows_history_as_facts_facts_only_or_raw(
    server_url: str, transport: str
) -> None:
    subject = f"user:history-mode-{transport}"
    late = "订单20240511-3到现在还没到，已经晚了三天了！"
    async with connect(server_url, transport) as client:
        for text in (late, "今天天气不错"):
            # a context with a query finds the turns through the index: wait until it holds them
            said = data(
                await client.call_tool(
                    "record_turn",
                    {"subject": subject, "text": text, "speaker": "客户", "wait": "indexed"},
                )
            )
            assert said["outcome"] == "registered"
        shown: dict[str, str] = {}
        for mode in ("facts", "facts_only", "raw"):
            got = data(
                await client.call_tool(
                    "get_context",
                    {"subjects": [subject], "query": "订单20240511-3", "history": mode},
                )
            )
            shown[mode] = got["context"]
        refused = error(
            await client.call_tool("get_context", {"subjects": [subject], "history": "summary"})
        )
    fact = "[Complaint] order=20240511-3 issue=delay delay=3d"
    assert fact in shown["facts"]
    assert late not in shown["facts"]
    assert fact in shown["facts_only"]
    assert "天气" not in shown["facts_only"]
    assert fact not in shown["raw"]
    assert late in shown["raw"]
    assert (refused["code"], refused["field"]) == ("INVALID_ARGUMENTS", "history")


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_a_tool_needs_its_scope(server_url: str, transport: str) -> None:
    async with connect(server_url, transport, label="reader") as reader:
        refused = error(
            await reader.call_tool(
                "remember", {"subject": "user:scoped", "type": "fact", "content": "no"}
            )
        )
        found = data(await reader.call_tool("recall", {"query": "anything"}))
    assert refused["code"] == "SCOPE_MISSING"
    assert isinstance(found["hits"], list)  # data() checked that reading was allowed


async def test_one_http_session_cannot_borrow_another_identity(server_url: str) -> None:
    """Identity is read from every request, not fixed by whoever opened the session."""
    async with connect(server_url, "http", tenant="tenant-a", principal="a") as a:
        data(
            await a.call_tool(
                "remember", {"subject": "user:iso", "type": "fact", "content": "a's secret"}
            )
        )
    async with connect(server_url, "http", tenant="tenant-b", principal="b") as b:
        found = data(await b.call_tool("recall", {"query": "secret", "subjects": ["user:iso"]}))
    assert found["hits"] == []


async def test_the_stdio_server_logs_no_file_name_and_no_key(
    server_url: str, tmp_path: Path
) -> None:
    """`mnemo mcp` calls the API through httpx, whose logger prints each URL (at INFO): a
    document's file name (sealed in the log) and a key pasted as a memory id stood there in
    clear on the stdio server's stderr, which MCP hosts keep in their log files."""
    filename = "Li-Si-settlement-4417.md"
    pasted = fixed_key("someone-else")
    stderr = tmp_path / "stderr"
    async with connect(server_url, "stdio", errlog=stderr, log_level="INFO") as client:
        done = data(
            await client.call_tool(
                "ingest_document",
                {"filename": filename, "text": "a short note", "subject": "user:mcp-log"},
            )
        )
        assert done["document_id"]
        await client.call_tool("forget", {"subject": "user:mcp-log", "memory_id": pasted})
    logged = stderr.read_text(encoding="utf-8")
    assert "/v1/documents" in logged, "httpx's request lines were not logged"
    assert filename not in logged
    assert pasted not in logged
    assert pasted.split("_", 2)[2][:12] not in logged


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_document_ingested_then_asked_exactly(server_url: str, transport: str) -> None:
    text = "甲方：XX科技有限公司\n\n第八条 违约金为合同金额的8%。\n\n签订日期：2023年8月15日"
    subject = f"user:mcp-doc-{transport}"
    async with connect(server_url, transport) as client:
        done = data(
            await client.call_tool(
                "ingest_document", {"filename": "c.txt", "text": text, "subject": subject}
            )
        )
        assert done["status"] == "registered"
        where = [
            {"field": "party_a", "op": "eq", "value": "XX科技"},
            {"field": "penalty_rate", "op": "gt", "value": "5%"},
        ]
        found = data(
            await client.call_tool("structured_query", {"where": where, "subjects": [subject]})
        )
        assert found["total"] == 1
        assert found["documents"][0]["filename"] == "c.txt"
        bad = [{"field": "penalty_rate", "op": "within", "value": "2023"}]
        refused = error(await client.call_tool("structured_query", {"where": bad}))
        assert refused["code"] == "QUERY_INVALID"
        assert refused["field"] == "where[0].op"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_toolchain_tools_resume_a_chain_at_its_failed_step(
    server_url: str, transport: str
) -> None:
    chain = f"mcp-pay-{transport}"
    plan = ["create_order", "payment_link", "confirm_payment"]
    async with connect(server_url, transport) as client:
        started = data(
            await client.call_tool(
                "start_toolchain",
                {"toolchain_id": chain, "subject": "user:mcp-pay", "steps": plan},
            )
        )
        assert started["next_step"] == "create_order"
        step = {"toolchain_id": chain, "step_id": "create_order", "status": "completed"}
        # a completed step with a failure's reason was recorded completed, output null
        mixed = error(await client.call_tool("record_step", {**step, "reason": "x"}))
        assert (mixed["code"], mixed["field"]) == ("INVALID_STEP", "reason")
        data(await client.call_tool("record_step", {**step, "output": {"order_id": "O-1"}}))
        failed = {
            "toolchain_id": chain,
            "step_id": "payment_link",
            "status": "failed",
            "error_type": "timeout",
            "reason": "the PSP did not answer",
        }
        data(await client.call_tool("record_step", failed))
    # another session (another device) reads where to resume
    async with connect(server_url, transport, principal="phone") as client:
        state = data(await client.call_tool("toolchain_state", {"toolchain_id": chain}))
        assert state["status"] == "failed"
        assert state["next_step"] == "payment_link"
        assert state["done"][0]["output"] == {"order_id": "O-1"}
        assert state["failed"]["error"]["reason"] == "the PSP did not answer"
        conflict = error(
            await client.call_tool("record_step", {**step, "output": {"order_id": "O-2"}})
        )
        assert conflict["code"] == "STEP_CONFLICT"
        unknown = error(await client.call_tool("toolchain_state", {"toolchain_id": "nope"}))
        assert unknown["code"] == "TOOLCHAIN_NOT_FOUND"


@pytest.mark.parametrize("transport", TRANSPORTS)
async def test_a_suggested_call_is_offered_then_closed_by_its_recorded_result(
    server_url: str, transport: str, sdk: MnemoClient
) -> None:
    subject = f"user:deal-{transport}"
    sent = datetime.now(UTC) - timedelta(days=2)
    declared = {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": subject,
        "occurred_at": sent.isoformat(),
        "payload": {"memory": {"type": "fact", "key": "stage", "value": "proposal_sent"}},
    }
    [stage] = [o.memory_id for o in sdk.publish(declared, wait="registered").outcomes]
    async with connect(server_url, transport) as client:
        offered = data(await client.call_tool("suggested_tool_calls", {"subject": subject}))
        [suggestion] = offered["suggestions"]
        assert (suggestion["tool"], suggestion["memory_id"]) == ("crm.get_deal", stage)
        assert suggestion["arguments"] == {"client": subject}
        context = data(await client.call_tool("get_context", {"subjects": [subject]}))
        assert [s["memory_id"] for s in context["suggestions"]] == [stage]
        recorded = data(
            await client.call_tool(
                "record_tool_result",
                {
                    "subject": subject,
                    "tool": "crm.get_deal",
                    "arguments": suggestion["arguments"],
                    "result": {"stage": "negotiation"},
                    "source": "crm",
                    "fresh_for_seconds": 3600,
                    "trigger": suggestion["trigger"],
                },
            )
        )
        assert recorded["outcome"] == "registered"
        assert sdk.get(recorded["memory_id"]).provenance.source_id == "tool:crm.get_deal"
        after = data(await client.call_tool("suggested_tool_calls", {"subject": subject}))
        assert after["suggestions"] == []
        bad = error(
            await client.call_tool(
                "record_tool_result",
                {
                    "subject": subject,
                    "tool": "crm.get_deal",
                    "result": {"blob": "x" * 6_000},
                    "source": "crm",
                    "fresh_for_seconds": 60,
                },
            )
        )
        assert bad["code"] == "TOOL_RESULT_TOO_LARGE"


async def test_a_principal_in_utf_8_reaches_the_api_from_the_sdk_and_over_mcp(
    server_url: str,
) -> None:
    """The API takes a principal of printable UTF-8 (张三); the SDK failed in the header
    encoder and the MCP endpoint answered "Error executing tool" with a trace in its log."""
    sdk = MnemoClient(server_url, api_key=fixed_key(TENANT), principal="张三")
    try:
        answer = sdk.publish(
            [
                {
                    "type": "MemoryDeclared",
                    "schema_version": 1,
                    "stream": "user:utf8",
                    "payload": {"memory": {"type": "fact", "content": "likes oolong"}},
                }
            ],
            wait="registered",
        )
        assert len(answer.memory_ids) == 1
    finally:
        sdk.close()
    call = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "recall", "arguments": {"subjects": ["user:utf8"], "query": "oolong"}},
    }
    headers = [
        (b"Authorization", f"Bearer {fixed_key(TENANT)}".encode()),
        (b"X-Mnemo-Principal", "josé".encode()),
        (b"Content-Type", b"application/json"),
        (b"Accept", b"application/json, text/event-stream"),
        (b"MCP-Protocol-Version", b"2025-06-18"),
    ]
    remember = {
        "jsonrpc": "2.0",
        "id": 2,
        "method": "tools/call",
        "params": {
            "name": "remember",
            "arguments": {"subject": "user:utf8", "type": "fact", "content": "likes puer"},
        },
    }
    async with httpx2.AsyncClient(timeout=30.0) as http:
        recalled = await http.post(f"{server_url}/mcp", content=json.dumps(call), headers=headers)
        remembered = await http.post(
            f"{server_url}/mcp", content=json.dumps(remember), headers=headers
        )
    assert remembered.json()["result"]["isError"] is False, remembered.text
    # the actor is josé as sent, not josÃ© (the header's bytes read as Latin-1, sent on)
    with MnemoClient(server_url, api_key=fixed_key(TENANT)) as reader:
        events = reader.replay("user:utf8").events
    actors = [e.actor.id for e in events if e.type == "MemoryDeclared"]
    assert actors == ["张三", "josé"]
    assert recalled.status_code == 200, recalled.text
    result = recalled.json()["result"]
    assert result["isError"] is False, result
    assert [h["content"] for h in result["structuredContent"]["hits"]] == ["likes oolong"]


async def test_a_body_that_is_no_json_rpc_message_is_an_invalid_request(server_url: str) -> None:
    """These were answered -32602 (invalid params) with the validator's dump and its links;
    an id of null or an object was taken for a notification (202, no answer)."""
    headers = raw_headers()
    bodies = [
        {"id": 1, "method": "ping"},
        {"jsonrpc": "1.0", "id": 1, "method": "ping"},
        {"jsonrpc": "2.0", "id": 1},
        {"jsonrpc": "2.0", "id": 1, "method": 5},
        {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": "x"},
        {"jsonrpc": "2.0", "id": 1, "method": "ping", "params": []},
        {"jsonrpc": "2.0", "id": None, "method": "ping"},
        {"jsonrpc": "2.0", "id": {"a": 1}, "method": "ping"},
        [{"jsonrpc": "2.0", "id": 1, "method": "ping"}],
        [],
        42,
        None,
    ]
    async with httpx2.AsyncClient(headers=headers, timeout=30.0) as http:
        for body in bodies:
            answer = await http.post(f"{server_url}/mcp", content=json.dumps(body))
            assert answer.status_code == 400, (body, answer.text)
            error = answer.json()["error"]
            assert error["code"] == -32600, (body, error)
            assert "pydantic" not in error["message"], error
        fine = await http.post(
            f"{server_url}/mcp", content=json.dumps({"jsonrpc": "2.0", "id": 7, "method": "ping"})
        )
        null_params = {"jsonrpc": "2.0", "id": 8, "method": "tools/list", "params": None}
        listed = await http.post(f"{server_url}/mcp", content=json.dumps(null_params))
    assert fine.status_code == 200, fine.text
    assert listed.status_code == 200, listed.text  # params may be null


async def test_a_get_holds_no_stream_and_a_member_named_twice_is_refused(
    server_url: str, sdk: MnemoClient
) -> None:
    """A GET was answered with an event stream kept open for good, as many as a key liked;
    and {"name": "toolchain_state", "name": "forget"} ran the last one, so a proxy that
    read the first saw another call than the one made."""
    headers = raw_headers()
    [memory_id] = declare_many(sdk, "user:twice", ["kept through a forged call"])
    call = (
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": '
        f'"toolchain_state", "name": "forget", "arguments": {{"memory_id": "{memory_id}", '
        '"subject": "user:twice"}}}'
    )
    async with httpx2.AsyncClient(headers=headers, timeout=30.0) as http:
        streamed = await http.get(f"{server_url}/mcp")
        twice = await http.post(f"{server_url}/mcp", content=call)
    assert streamed.status_code == 405, streamed.text
    assert streamed.headers["allow"] == "POST"
    assert streamed.json()["error"]["code"] == "METHOD_NOT_ALLOWED"
    assert twice.status_code == 400, twice.text
    assert twice.json()["error"]["code"] == -32600
    assert sdk.get(memory_id).status == "active"


@pytest.mark.parametrize(
    ("arguments", "field"),
    [('"result": NaN', "result"), ('"result": 1, "arguments": {"x": -Infinity}', "arguments")],
)
async def test_a_tool_result_that_is_not_json_is_its_documented_error(
    server_url: str, arguments: str, field: str
) -> None:
    """NaN and infinities parse in a JSON-RPC request, but are no JSON a tool result may
    hold (docs/tool-results.md): the agent reads TOOL_RESULT_NOT_JSON naming the field,
    not an unexpected error, and nothing is stored. (The Python MCP client turns NaN into
    null before sending, so the request is written by hand.)"""
    subject = f"user:nan-{field}"
    call = (
        '{"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": '
        f'"record_tool_result", "arguments": {{"subject": "{subject}", "tool": "fx.rate", '
        f'"source": "fx", "fresh_for_seconds": 60, {arguments}}}}}}}'
    )
    headers = raw_headers()
    async with httpx2.AsyncClient(headers=headers, timeout=60.0) as http:
        answered = await http.post(f"{server_url}/mcp", content=call)
    assert answered.status_code == 200, answered.text
    text = answered.text
    body = json.loads(text[text.index("{") :]) if not text.startswith("{") else answered.json()
    result = body["result"]
    assert result["isError"] is True, result
    assert result["structuredContent"]["code"] == "TOOL_RESULT_NOT_JSON", result
    assert result["structuredContent"]["field"] == field
    assert sdk_free_of(server_url, subject)


@pytest.mark.parametrize("transport", ["http", "stdio"])
async def test_get_context_says_which_of_two_contradicting_constraints_it_kept(
    server_url: str, transport: str, sdk: MnemoClient
) -> None:
    subject = f"user:conflict-{transport}"

    def constraint(text: str, trust: float) -> dict[str, Any]:
        return {"type": "MemoryDeclared", "schema_version": 1, "stream": subject,
                "payload": {"memory": {"type": "constraint", "content": text,
                                       "provenance": {"trust": trust}}}}  # fmt: skip

    strict, loose = sdk.publish(
        [constraint("单笔转账不得超过5万元", 0.9), constraint("单笔转账上限为2万元", 0.6)],
        wait="registered",
    ).memory_ids
    async with connect(server_url, transport) as client:
        got = data(await client.call_tool("get_context", {"subjects": [subject], "query": "转账"}))
    [conflict] = got["conflicts"]
    assert (conflict["kept"], conflict["dropped"], conflict["decided_by"]) == (
        strict,
        loose,
        "trust",
    )
    assert conflict["kept_text"] == "单笔转账不得超过5万元"
    assert "money" in conflict["why"]
    assert {"memory_id": loose, "section": "constraints", "reason": "conflict"} in got["left_out"]
