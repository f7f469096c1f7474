"""What a hostile or careless publisher must not be able to do."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mnemo_gateway.app import create_app
from tests.conftest import T0
from tests.support import headers_for

from mnemo.bootstrap import Platform
from mnemo.domain.errors import ConflictError
from mnemo.domain.ids import derived_id, new_event_id
from mnemo.domain.projection import AuditRecord
from mnemo.entrypoints.admin import rebuild_read_models
from mnemo.handlers import audit
from mnemo.service.app import RequestContext
from mnemo.settings import GatewaySettings

H = headers_for("acme", "agent")
OTHER = headers_for("mallory", "eve")
BIG = 2**63


@pytest.fixture
def client(platform: Platform) -> Iterator[TestClient]:
    with TestClient(create_app(platform, GatewaySettings(admin_token="op-token-for-tests"))) as c:
        yield c


def declared(content: str, **extra: Any) -> dict[str, Any]:
    return {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": "user:U1",
        "payload": {"memory": {"type": "fact", "content": content}},
        **extra,
    }


@pytest.mark.parametrize(
    ("event", "code"),
    [
        (declared("x", actor={"kind": "system", "id": "registrar"}), "ACTOR_NOT_ALLOWED"),
        (declared("x", event_id=derived_id(T0, "registrar", "x")), "INVALID_EVENT_ID"),
        (declared("x", occurred_at="0001-01-01T00:00:00+01:00"), "INVALID_ENVELOPE"),
        (declared("x", schema_version=True), "UNSUPPORTED_SCHEMA_VERSION"),
        (
            {
                **declared("x"),
                "payload": {"memory": {"type": "fact", "content": "x", "ttl_seconds": 10**12}},
            },
            "INVALID_PAYLOAD",
        ),
        (
            {
                "type": "MemoryCited",
                "schema_version": 1,
                "stream": "user:U1",
                "payload": {"memory_id": "x" * 60_000},
            },
            "INVALID_PAYLOAD",
        ),
    ],
)
def test_forged_or_out_of_range_events_are_refused(
    client: TestClient, platform: Platform, event: dict[str, Any], code: str
) -> None:
    before = platform.log.head()
    r = client.post("/v1/events", json=event, headers=H)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == code
    assert platform.log.head() == before


@pytest.mark.parametrize(
    "path",
    [
        f"/v1/events?after_offset={BIG}",
        f"/v1/subjects/user:U1/events?from_seq={BIG}",
        f"/v1/templates/default?version={BIG}",
        f"/v1/subjects/user:U1/events/live?from_seq={BIG}",
    ],
)
def test_huge_integers_are_a_validation_error_not_a_crash(client: TestClient, path: str) -> None:
    r = client.get(path, headers=H)
    assert r.status_code == 422
    assert r.json()["error"]["code"] == "VALIDATION_ERROR"


def test_admin_operations_need_the_operator_token(client: TestClient, platform: Platform) -> None:
    status = client.get("/v1/admin/status", headers=OTHER).json()
    assert "counts" not in status  # platform-wide counts are not a tenant's business
    assert client.post("/v1/admin/rebuild", headers=OTHER).json()["error"]["code"] == "ADMIN_ONLY"
    wrong = client.post("/v1/admin/rebuild", headers={**OTHER, "X-Mnemo-Admin-Token": "guess"})
    assert wrong.status_code == 403
    ok = client.post(
        "/v1/admin/rebuild", headers={**OTHER, "X-Mnemo-Admin-Token": "op-token-for-tests"}
    )
    assert ok.status_code == 200
    assert (
        "counts"
        in client.get(
            "/v1/admin/status", headers={**H, "X-Mnemo-Admin-Token": "op-token-for-tests"}
        ).json()
    )
    # the operator token alone, with no key to look up, reads the status too; a wrong one
    # alone is no credential at all
    alone = client.get("/v1/admin/status", headers={"X-Mnemo-Admin-Token": "op-token-for-tests"})
    assert alone.status_code == 200, alone.text
    assert "counts" in alone.json()
    guess = client.get("/v1/admin/status", headers={"X-Mnemo-Admin-Token": "guess"})
    assert (guess.status_code, guess.json()["error"]["code"]) == (401, "UNAUTHENTICATED")


def test_without_a_configured_token_admin_rebuilds_are_off(platform: Platform) -> None:
    with TestClient(create_app(platform)) as c:
        r = c.post("/v1/admin/rebuild", headers=H)
    assert (r.status_code, r.json()["error"]["code"]) == (403, "ADMIN_DISABLED")


def test_a_second_rebuild_at_the_same_time_is_refused(platform: Platform) -> None:
    platform.app.publish(
        __import__("mnemo.service.app", fromlist=["RequestContext"]).RequestContext("acme", "a"),
        [declared("hello")],
    )
    started, release = threading.Event(), threading.Event()

    def slow_progress(done: int, total: int) -> None:
        started.set()
        release.wait(10)

    worker = threading.Thread(target=rebuild_read_models, args=(platform, slow_progress))
    worker.start()
    assert started.wait(10)
    with pytest.raises(ConflictError) as caught:
        rebuild_read_models(platform)
    assert caught.value.code == "REBUILD_RUNNING"
    release.set()
    worker.join(30)


def test_citing_an_unknown_memory_counts_nothing(client: TestClient, platform: Platform) -> None:
    ghost = new_event_id(T0)
    ctx = client.post("/v1/context", json={"subjects": ["user:U1"]}, headers=H).json()
    cited = {
        "type": "MemoryCited",
        "schema_version": 1,
        "stream": "user:U1",
        "payload": {"memory_id": ghost, "request_id": ctx["request_id"]},
    }
    before = platform.log.head()
    r = client.post("/v1/events?wait=registered", json=cited, headers=H)
    assert (r.status_code, r.json()["error"]["code"]) == (400, "CITATION_NOT_IN_CONTEXT")
    assert platform.log.head() == before
    assert platform.store.memory_stats("acme", [ghost]) == []


def test_the_audit_check_refuses_an_event_linked_twice(platform: Platform) -> None:
    platform.app.publish(RequestContext("acme", "a"), [declared("one"), declared("two")])
    platform.runner.drain()
    [stream] = [h.stream for h in platform.store.audit_heads("acme")]
    trail = platform.store.audit_trail("acme", stream, 0, 100)
    events = {e.envelope.event_id: e.envelope for e in platform.log.read(0, 100)}
    assert audit.verify(trail, events) is None
    last = trail[-1]
    # a well-formed link that chains correctly but repeats an event already linked
    again = AuditRecord(
        last.tenant,
        last.stream,
        last.n + 1,
        last.event_id,
        last.event_type,
        last.offset,
        last.hash,
        audit.link_hash(last.hash, audit.canonical(events[last.event_id])),
    )
    assert audit.verify([*trail, again], events) == last.n + 1


# ---- credentials and names where they do not belong ---------------------------------------

A_KEY = "mnemo_0123456789abcdef_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8S9t0U1v"


@pytest.mark.parametrize(
    "event",
    [
        {**declared("x"), "stream": f"user:{A_KEY}"},
        declared("x", correlation_id=A_KEY),
        declared("x", causation_id=f"from {A_KEY}"),
        {**declared("x"), "stream": "USER:V1"},  # another stream than user:V1, and no user's
    ],
)
def test_an_identifier_that_holds_a_key_or_miscases_a_user_is_refused(
    client: TestClient, platform: Platform, event: dict[str, Any]
) -> None:
    before = platform.log.head()
    r = client.post("/v1/events", json=event, headers=H)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "INVALID_ENVELOPE"
    assert A_KEY not in r.text
    assert platform.log.head() == before


def test_a_key_in_the_path_is_refused(client: TestClient) -> None:
    r = client.get(f"/v1/subjects/{A_KEY}/memories", headers=H)
    assert r.status_code == 400
    assert (r.json()["error"]["code"], r.json()["error"]["field"]) == ("CREDENTIAL_IN_URL", "path")


def test_the_principal_is_utf8_and_never_a_key(client: TestClient, platform: Platform) -> None:
    refused = client.post(
        "/v1/events", json=declared("x"), headers={**H, "X-Mnemo-Principal": A_KEY}
    )
    assert refused.status_code == 400
    assert refused.json()["error"]["code"] == "INVALID_PRINCIPAL"
    raw: dict[str, Any] = {**H, "X-Mnemo-Principal": "café".encode()}  # UTF-8 on the wire
    accepted = client.post("/v1/events", json=declared("y"), headers=raw)
    assert accepted.status_code == 202, accepted.text
    [logged] = [
        e
        for e in platform.log.read(-1, 1_000)
        if e.envelope.event_id == accepted.json()["accepted"][0]["event_id"]
    ]
    assert platform.sealer is not None  # the actor id is sealed in the log: open it
    opened = platform.sealer.open_json(logged.envelope.model_dump(mode="json"))
    assert opened["actor"]["id"] == "café"


def test_a_body_that_names_a_member_twice_is_refused(
    client: TestClient, platform: Platform
) -> None:
    before = platform.log.head()
    body = (
        b'{"type":"MemoryDeclared","schema_version":1,"stream":"user:FIRST","stream":"user:SECOND",'
        b'"payload":{"memory":{"type":"fact","content":"x"}}}'
    )
    r = client.post("/v1/events", content=body, headers={**H, "Content-Type": "application/json"})
    assert r.status_code == 400
    assert r.json()["error"]["code"] == "MALFORMED_JSON"
    assert platform.log.head() == before
    nested = (
        b'{"events":[{"type":"MemoryDeclared","schema_version":1,"stream":"user:A",'
        b'"payload":{"memory":{"type":"fact","content":"x","content":"y"}}}]}'
    )
    r = client.post("/v1/events", content=nested, headers={**H, "Content-Type": "application/json"})
    assert r.json()["error"]["code"] == "MALFORMED_JSON"
