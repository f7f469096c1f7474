"""Tenant isolation over every read path, with many tenants and subjects drawn at random,
and hostile input: injection attempts in tenant ids, tags and filters, oversized and deeply
nested JSON, invalid UTF-8."""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mnemo_gateway.app import create_app
from tests.support import headers_for, install_keys

from mnemo.bootstrap import Platform
from mnemo.settings import GatewaySettings

SEED = 20261130
INJECTIONS = [
    "' OR '1'='1",
    "acme'; DROP TABLE memories; --",
    '" OR 1=1 --',
    "*",
    "%",
    "\\' ALLOW FILTERING",
    "tenant = 'acme'",
    '{"$ne": null}',
    "user:U1' OR tenant != '",
    "../acme",
]


@dataclass
class World:
    client: TestClient
    tenants: list[str]
    owned: dict[str, set[str]] = field(default_factory=dict)  # tenant -> its markers
    memory_ids: dict[str, set[str]] = field(default_factory=dict)
    event_ids: dict[str, set[str]] = field(default_factory=dict)
    request_ids: dict[str, set[str]] = field(default_factory=dict)
    subjects: list[str] = field(default_factory=list)


@pytest.fixture
def world(platform: Platform) -> Iterator[World]:
    rng = random.Random(SEED)
    tenants = [f"t{n:02d}" for n in range(8)]
    install_keys(platform, *tenants)
    subjects = [f"user:U{n}" for n in range(4)] + ["session:S1", "agent:planner"]
    settings = GatewaySettings(rate_tenant_per_second=0, rate_key_per_second=0)
    with TestClient(create_app(platform, settings)) as client:
        w = World(client, tenants, subjects=subjects)
        for tenant in tenants:
            w.owned[tenant], w.memory_ids[tenant], w.event_ids[tenant] = set(), set(), set()
            w.request_ids[tenant] = set()
            events = []
            for i in range(rng.randint(3, 6)):
                marker = f"mk{tenant}x{i}"  # shares the words every tenant's memories use
                w.owned[tenant].add(marker)
                events.append(
                    {
                        "type": "MemoryDeclared",
                        "schema_version": 1,
                        "stream": rng.choice(subjects),
                        "payload": {
                            "memory": {
                                "type": rng.choice(["fact", "preference", "constraint"]),
                                "content": f"shared words about sizes and coffee {marker}",
                                "key": f"k{i}",
                                "value": marker,
                                "tags": ["common", marker],
                            }
                        },
                    }
                )
            r = client.post(
                "/v1/events?wait=indexed", json={"events": events}, headers=headers_for(tenant)
            )
            assert r.status_code == 202, r.text
            for accepted in r.json()["accepted"]:
                w.event_ids[tenant].add(accepted["event_id"])
                w.memory_ids[tenant] |= {o["memory_id"] for o in accepted["outcomes"]}
            ctx = client.post(
                "/v1/context",
                json={"subjects": subjects, "query": "sizes coffee", "budget": 4000},
                headers=headers_for(tenant),
            )
            assert ctx.status_code == 200, ctx.text
            w.request_ids[tenant].add(ctx.json()["request_id"])
        yield w


def _foreign(w: World, tenant: str) -> set[str]:
    """Every marker and id that belongs to another tenant."""
    found: set[str] = set()
    for other in w.tenants:
        if other != tenant:
            found |= w.owned[other] | w.memory_ids[other] | w.event_ids[other]
            found |= w.request_ids[other]
    return found


def test_no_read_path_returns_another_tenants_data(world: World) -> None:
    rng = random.Random(SEED + 1)
    client = world.client
    for _ in range(60):
        tenant = rng.choice(world.tenants)
        h = headers_for(tenant)
        subject = rng.choice(world.subjects)
        other = rng.choice([t for t in world.tenants if t != tenant])
        their_memory = rng.choice(sorted(world.memory_ids[other]))
        their_event = rng.choice(sorted(world.event_ids[other]))
        their_request = rng.choice(sorted(world.request_ids[other]))
        answers = [
            client.get(f"/v1/memories/{their_memory}", headers=h),
            client.get(f"/v1/insights/memories/{their_memory}/life", headers=h),
            client.get(f"/v1/events/{their_event}/outcome", headers=h),
            client.get(f"/v1/insights/contexts/{their_request}", headers=h),
            client.post(f"/v1/context/{their_request}/response", json={"response": "x"}, headers=h),
        ]
        for r in answers:  # someone else's id is an unknown id: no hint that it exists
            assert r.status_code == 404, r.text
        reads = [
            client.get(f"/v1/subjects/{subject}/memories", headers=h),
            client.get(
                f"/v1/subjects/{subject}/memories",
                params={"include_superseded": True, "include_expired": True, "tag": "common"},
                headers=h,
            ),
            client.get(f"/v1/subjects/{subject}/history/k0", headers=h),
            client.get(f"/v1/subjects/{subject}/events", headers=h),
            client.get(f"/v1/subjects/{subject}/snapshot", headers=h),
            client.get("/v1/events", params={"limit": 1000}, headers=h),
            client.post(
                "/v1/search",
                json={"query": f"sizes coffee {rng.choice(sorted(world.owned[other]))}"},
                headers=h,
            ),
            client.post(
                "/v1/search",
                json={"query": "coffee", "tags": ["common"], "subjects": world.subjects},
                headers=h,
            ),
            client.post(
                "/v1/context",
                json={"subjects": world.subjects, "query": "sizes coffee", "budget": 4000},
                headers=h,
            ),
            client.get("/v1/insights/heatmap", headers=h),
            client.get("/v1/insights/events", params={"limit": 1000}, headers=h),
            client.get("/v1/insights/contexts", headers=h),
            client.get("/v1/insights/audit", headers=h),
        ]
        foreign = _foreign(world, tenant)
        for r in reads:
            assert r.status_code == 200, r.text
            leaked = [x for x in foreign if x in r.text]
            assert leaked == [], f"{r.request.url} showed {tenant} another tenant's {leaked[:3]}"
    # and each tenant does see its own
    for tenant in world.tenants:
        listed = client.get(
            "/v1/insights/heatmap", params={"limit": 2000}, headers=headers_for(tenant)
        )
        assert {c["memory_id"] for c in listed.json()["cells"]} == world.memory_ids[tenant]


@pytest.mark.parametrize("text", INJECTIONS)
def test_injection_in_tags_filters_and_ids_is_just_text(world: World, text: str) -> None:
    client = world.client
    tenant = world.tenants[0]
    h = headers_for(tenant)
    answers = [
        client.get("/v1/subjects/user:U1/memories", params={"tag": text, "key": text}, headers=h),
        client.post("/v1/search", json={"query": text, "tags": [text]}, headers=h),
        client.post("/v1/search", json={"query": "coffee", "subjects": [text]}, headers=h),
        client.get(f"/v1/memories/{text}", headers=h),
        client.get("/v1/insights/events", params={"stream": text, "actor": text}, headers=h),
        client.get("/v1/insights/heatmap", params={"subject": text}, headers=h),
        client.get(f"/v1/tenants/{text}/keys", headers=h),
        client.get("/v1/whoami", headers={**h, "X-Mnemo-Tenant": text}),
    ]
    foreign = _foreign(world, tenant)
    for r in answers:
        assert r.status_code < 500, r.text
        assert not [x for x in foreign if x in r.text]
    # a tag filter matches nothing but that tag: no injected text widens a query
    tagged = answers[0]
    if tagged.status_code == 200:
        assert tagged.json()["memories"] == []
    searched = answers[1]
    if searched.status_code == 200:
        assert searched.json()["hits"] == []
    # a tenant id with an injection cannot be created, and cannot be claimed
    assert answers[-1].status_code == 403
    made = client.post(
        "/v1/events",
        json={
            "type": "ObservationRecorded",
            "schema_version": 2,
            "stream": "user:U1",
            "tenant": text,
            "payload": {"text": "hi"},
        },
        headers=h,
    )
    assert made.status_code in (400, 403)


def test_oversized_deep_and_broken_bodies_are_refused_with_codes(platform: Platform) -> None:
    install_keys(platform, "acme")
    h = {**headers_for("acme"), "Content-Type": "application/json"}
    settings = GatewaySettings(max_body_bytes=64 * 1024, max_json_depth=16)
    with TestClient(create_app(platform, settings)) as client:
        for path in ("/v1/events", "/v1/search", "/v1/context", "/v1/templates"):
            big = client.post(path, content=b'{"query": "' + b"x" * 70_000 + b'"}', headers=h)
            assert (big.status_code, big.json()["error"]["code"]) == (413, "PAYLOAD_TOO_LARGE")
            deep: Any = 1
            for _ in range(40):
                deep = {"a": deep}
            nested = client.post(path, json={"query": "x", "n": deep}, headers=h)
            assert (nested.status_code, nested.json()["error"]["code"]) == (400, "JSON_TOO_DEEP")
            very_deep = b'{"a":' * 5_000 + b"1" + b"}" * 5_000
            crushed = client.post(path, content=very_deep, headers=h)
            assert crushed.status_code == 400
            utf = client.post(path, content=b'{"query": "\xff\xfe\xc3"}', headers=h)
            assert (utf.status_code, utf.json()["error"]["code"]) == (400, "MALFORMED_JSON")
        # invalid UTF-8 percent-encoded in a path and a query parameter
        odd = client.get("/v1/subjects/user%FFx/memories", headers=h)
        assert odd.status_code < 500
        odd_query = client.get("/v1/subjects/user:U1/memories?tag=%FF%FE", headers=h)
        assert odd_query.status_code < 500
        # nothing of it was stored
        assert platform.log.head() == 0


def test_the_mcp_endpoint_takes_no_larger_body_than_the_api(platform: Platform) -> None:
    """/mcp once took 4 MiB bodies (the MCP library's own limit) whatever
    MNEMO_GATEWAY_MAX_BODY_BYTES said, and refused larger ones in plain text."""
    install_keys(platform, "acme")
    h = {
        **headers_for("acme"),
        "Content-Type": "application/json",
        "Accept": "application/json, text/event-stream",
        "Host": "127.0.0.1:8080",
    }
    ping = b'{"jsonrpc": "2.0", "id": 1, "method": "ping", "params": {"pad": "%s"}}'
    with TestClient(create_app(platform, GatewaySettings(max_body_bytes=64 * 1024))) as client:
        big = ping % (b"x" * 70_000)
        for body in (big, iter([big[:40_000], big[40_000:]])):  # declared, and chunked
            refused = client.post("/mcp", content=body, headers=h)
            assert refused.status_code == 413, refused.text
            assert refused.json()["error"]["code"] == "PAYLOAD_TOO_LARGE"
        small = client.post("/mcp", content=ping % (b"x" * 60_000), headers=h)
        assert small.status_code == 200, small.text
        assert small.json()["result"] == {}
