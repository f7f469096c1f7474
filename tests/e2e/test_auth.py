"""API keys at the gateway: every endpoint refuses a missing, revoked, expired, wrong-scope
or other tenant's key; key management over HTTP; the operator's routes; rate limits."""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mnemo_gateway import scopes
from mnemo_gateway.app import create_app
from mnemo_gateway.ratelimit import RateLimited, RateLimiter
from tests.conftest import T0
from tests.support import ALL, auth, fixed_key, headers_for, install_keys

from mnemo.adapters.clocks import FixedClock
from mnemo.bootstrap import Platform, build_embedded
from mnemo.domain.access import Scope
from mnemo.settings import GatewaySettings, MnemoSettings

OPERATOR = "operator-token-for-auth-tests"
MARKER = "acme-private-marker"


@dataclass
class Seeded:
    memory_id: str
    event_id: str
    request_id: str


def _publish(client: TestClient, headers: dict[str, str], content: str) -> tuple[str, str]:
    r = client.post(
        "/v1/events?wait=registered",
        json={
            "type": "MemoryDeclared",
            "schema_version": 1,
            "stream": "user:U1",
            "payload": {"memory": {"type": "fact", "content": content, "tags": ["t1"]}},
        },
        headers=headers,
    )
    assert r.status_code == 202, r.text
    accepted = r.json()["accepted"][0]
    return accepted["outcomes"][0]["memory_id"], accepted["event_id"]


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[TestClient, Seeded]]:
    """acme and globex with keys of every kind (all scopes, each scope missing, revoked,
    expired), and acme's data: a memory, its event, a context and a template."""
    clock = FixedClock(T0)
    platform = build_embedded(
        MnemoSettings(
            data_dir=tmp_path_factory.mktemp("auth") / "data",
            embedder="hashing",
            sqlite_synchronous="NORMAL",
        ),
        clock=clock,
    )
    install_keys(platform, "acme", "globex")
    for scope in Scope:
        install_keys(
            platform, "acme", label=f"no-{scope.value}", scopes=tuple(s for s in ALL if s != scope)
        )
    install_keys(platform, "acme", label="revoked")
    platform.access.revoke("acme", _key_id(fixed_key("acme", "revoked")))
    install_keys(platform, "acme", label="expired", expires_at=clock.now() + timedelta(hours=1))
    app = create_app(platform, GatewaySettings(admin_token=OPERATOR))
    with TestClient(app) as client:
        acme = headers_for("acme")
        memory_id, event_id = _publish(client, acme, MARKER)
        ctx = client.post("/v1/context", json={"subjects": ["user:U1"]}, headers=acme)
        assert ctx.status_code == 200, ctx.text
        tpl = {
            "name": "acme-tpl",
            "version": 1,
            "sections": [
                {"name": "facts", "priority": 1, "types": ["fact", "constraint"], "budget": 200}
            ],
        }
        assert client.post("/v1/templates", json=tpl, headers=acme).status_code in (200, 201)
        chain = {"toolchain_id": "acme-chain", "subject": "user:U1", "steps": ["s1", "s2"]}
        assert client.post("/v1/toolchains", json=chain, headers=acme).status_code == 201
        clock.advance(timedelta(hours=2))  # the "expired" key is now past its expiry
        yield client, Seeded(memory_id, event_id, ctx.json()["request_id"])
    platform.close()


def _key_id(key: str) -> str:
    return key.split("_")[1]


# Every tenant route: (method, path template, body, the scope it needs, what another
# tenant's key gets: "404" (the resource is not theirs to see), "403" (the path names
# another tenant), or "empty" (an answer of their own tenant, without acme's data)).
ROUTES: list[tuple[str, str, Any, Scope | None, str]] = [
    ("GET", "/v1/whoami", None, None, "empty"),
    ("POST", "/v1/events", {"events": []}, Scope.MEMORY_WRITE, "empty"),
    ("GET", "/v1/events/{event_id}/outcome", None, Scope.MEMORY_READ, "empty"),
    ("GET", "/v1/events", None, Scope.MEMORY_READ, "empty"),
    ("GET", "/v1/subjects/{stream}/events", None, Scope.MEMORY_READ, "empty"),
    ("GET", "/v1/subjects/{stream}/events/live", None, Scope.MEMORY_READ, "empty"),
    ("GET", "/v1/subjects/{stream}/snapshot", None, Scope.MEMORY_READ, "empty"),
    ("GET", "/v1/subjects/{stream}/memories", None, Scope.MEMORY_READ, "empty"),
    ("GET", "/v1/subjects/{stream}/history/{key}", None, Scope.MEMORY_READ, "empty"),
    ("GET", "/v1/subjects/{stream}/due-verifications", None, Scope.MEMORY_READ, "empty"),
    ("GET", "/v1/subjects/{stream}/suggestions", None, Scope.MEMORY_READ, "empty"),
    ("POST", "/v1/tool-results", {"stream": "user:U1"}, Scope.MEMORY_WRITE, "empty"),
    ("POST", "/v1/documents", None, Scope.MEMORY_WRITE, "empty"),
    (
        "POST",
        "/v1/query",
        {"where": [{"field": "party_a", "op": "eq", "value": MARKER}]},
        Scope.MEMORY_READ,
        "empty",
    ),
    ("GET", "/v1/memories/{memory_id}", None, Scope.MEMORY_READ, "404"),
    ("POST", "/v1/search", {"query": MARKER}, Scope.MEMORY_READ, "empty"),
    ("POST", "/v1/context", {"subjects": ["user:U1"], "query": MARKER}, Scope.CONTEXT, "empty"),
    (
        "POST",
        "/v1/context/{request_id}/response",
        {"response": "ok"},
        Scope.CONTEXT,
        "404",
    ),
    ("POST", "/v1/templates", {}, Scope.ADMIN, "empty"),
    (
        "POST",
        "/v1/toolchains",
        {"toolchain_id": "auth-chain", "subject": "user:U1", "steps": ["s1"]},
        Scope.MEMORY_WRITE,
        "empty",
    ),
    ("GET", "/v1/toolchains/{toolchain_id}", None, Scope.MEMORY_READ, "404"),
    (
        "POST",
        "/v1/toolchains/{toolchain_id}/steps/{step_id}",
        {"status": "completed", "output": 1},
        Scope.MEMORY_WRITE,
        "404",
    ),
    ("GET", "/v1/templates", None, Scope.CONTEXT, "empty"),
    ("GET", "/v1/templates/{name}", None, Scope.CONTEXT, "404"),
    ("GET", "/v1/insights/heatmap", None, Scope.MEMORY_READ, "empty"),
    ("GET", "/v1/insights/memories/{memory_id}/life", None, Scope.MEMORY_READ, "404"),
    ("GET", "/v1/insights/contexts", None, Scope.MEMORY_READ, "empty"),
    ("GET", "/v1/insights/contexts/{request_id}", None, Scope.MEMORY_READ, "404"),
    ("GET", "/v1/insights/events", None, Scope.AUDIT_READ, "empty"),
    ("GET", "/v1/insights/rejections", None, Scope.AUDIT_READ, "empty"),
    ("GET", "/v1/insights/dead-letters", None, Scope.AUDIT_READ, "empty"),
    ("GET", "/v1/insights/audit", None, Scope.AUDIT_READ, "empty"),
    ("GET", "/v1/admin/status", None, Scope.ADMIN, "empty"),
    ("POST", "/v1/admin/keys/rotate", {}, Scope.ADMIN, "empty"),
    ("POST", "/v1/admin/keys/rewrap", {"stream": "user:U1"}, Scope.ADMIN, "empty"),
    ("POST", "/v1/tenants/{tenant}/keys", {"name": "x", "scopes": ["context"]}, Scope.ADMIN, "403"),
    ("GET", "/v1/tenants/{tenant}/keys", None, Scope.ADMIN, "403"),
    ("DELETE", "/v1/tenants/{tenant}/keys/{key_id}", None, Scope.ADMIN, "403"),
]
OPERATOR_ROUTES = {
    ("POST", "/v1/admin/rebuild"),
    ("POST", "/v1/admin/tenants"),
    ("GET", "/v1/admin/tenants"),
    ("POST", "/v1/admin/tenants/{tenant}/keys"),
}
PUBLIC_ROUTES = {("GET", "/healthz"), ("GET", "/readyz")}


def _path(template: str, seeded: Seeded) -> str:
    values = {
        "event_id": seeded.event_id,
        "stream": "user:U1",
        "key": "size",
        "memory_id": seeded.memory_id,
        "request_id": seeded.request_id,
        "name": "acme-tpl",
        "toolchain_id": "acme-chain",
        "step_id": "s1",
        "tenant": "acme",
        "key_id": _key_id(fixed_key("acme", f"no-{Scope.CONTEXT.value}")),
    }
    path = re.sub(r"\{(\w+)\}", lambda m: values[m.group(1)], template)
    return path + ("?max_seconds=0.2" if path.endswith("/live") else "")


def _call(
    client: TestClient, method: str, template: str, body: Any, seeded: Seeded, headers: Any
) -> Any:
    return client.request(
        method, _path(template, seeded), json=body, headers={**headers, "Accept": "*/*"}
    )


def test_the_table_covers_every_route(platform: Platform) -> None:
    paths = create_app(platform).openapi()["paths"]
    routes = {(method.upper(), path) for path, ops in paths.items() for method in ops}
    listed = {(m, p) for m, p, *_ in ROUTES} | OPERATOR_ROUTES | PUBLIC_ROUTES
    assert routes == listed


def test_the_scopes_tested_here_are_the_ones_the_routes_check(platform: Platform) -> None:
    """The table above, which the tests below hold every route to, is what the code
    requires (read from each route's dependencies)."""
    found = {(r.method, r.path): r.needs for r in scopes.requirements(create_app(platform))}
    expected = {(m, p): scopes.ANY_KEY if s is None else s.value for m, p, _, s, _ in ROUTES}
    expected |= dict.fromkeys(OPERATOR_ROUTES, scopes.OPERATOR)
    expected |= dict.fromkeys(PUBLIC_ROUTES, scopes.NOTHING)
    assert found == expected


def test_the_scope_table_in_docs_security_md_is_the_code(platform: Platform) -> None:
    """docs/security.md's table is generated from the routes; any drift fails here
    (rewrite it with `python -m mnemo_gateway.scopes docs/security.md`)."""
    doc = Path(__file__).resolve().parents[2] / "docs" / "security.md"
    text = doc.read_text()
    assert scopes.BEGIN in text
    assert scopes.rewrite(text, create_app(platform)) == text


@pytest.mark.parametrize(
    ("method", "template", "body", "scope", "other"),
    ROUTES,
    ids=[f"{m} {p}" for m, p, *_ in ROUTES],
)
def test_every_route_refuses_bad_keys(
    world: tuple[TestClient, Seeded],
    method: str,
    template: str,
    body: Any,
    scope: Scope | None,
    other: str,
) -> None:
    client, seeded = world

    def code(headers: dict[str, str]) -> tuple[int, str | None]:
        r = _call(client, method, template, body, seeded, headers)
        answer = r.json() if r.headers["content-type"].startswith("application/json") else None
        error = answer.get("error") if isinstance(answer, dict) else None
        return r.status_code, (error or {}).get("code")

    assert code({}) == (401, "UNAUTHENTICATED")
    assert code({"Authorization": "Bearer not-a-key"}) == (401, "UNAUTHENTICATED")
    assert code({"Authorization": "Basic YTpi"}) == (401, "UNAUTHENTICATED")
    forged = fixed_key("acme")[:-4] + "AAAA"
    assert code(auth(forged)) == (401, "UNAUTHENTICATED")
    assert code(headers_for("acme", label="revoked")) == (401, "KEY_REVOKED")
    assert code(headers_for("acme", label="expired")) == (401, "KEY_EXPIRED")
    # the same key is refused in the URL (where logs would keep it)
    path = _path(template, seeded)
    r = client.request(method, f"{path}{'&' if '?' in path else '?'}api_key={fixed_key('acme')}")
    assert r.status_code in (400, 401)
    assert r.status_code != 200
    if scope is not None:
        assert code(headers_for("acme", label=f"no-{scope.value}")) == (403, "SCOPE_MISSING")
    # the right key passes every check (the answer is the route's own business)
    assert code(headers_for("acme"))[0] not in (401, 403, 429)
    # the X-Mnemo-Tenant header cannot choose another tenant
    assert code({**headers_for("globex"), "X-Mnemo-Tenant": "acme"}) == (403, "TENANT_MISMATCH")
    # another tenant's key
    r = _call(client, method, template, body, seeded, headers_for("globex"))
    if other == "404":
        assert r.status_code == 404, r.text
    elif other == "403":
        assert (r.status_code, r.json()["error"]["code"]) == (403, "FORBIDDEN")
    else:
        assert r.status_code < 500
    text = r.text
    asked = _path(template, seeded)  # an error may echo what the caller sent
    for secret in (MARKER, seeded.memory_id, seeded.request_id, seeded.event_id, "acme-tpl"):
        if secret in asked:
            continue
        assert secret not in text, f"{method} {template} showed {secret} to globex"


def test_operator_routes_need_the_operator_token(world: tuple[TestClient, Seeded]) -> None:
    client, _ = world
    admin_key = headers_for("acme")  # every scope, admin included: still not an operator
    for method, path in OPERATOR_ROUTES:
        body = {"tenant": "newco"} if path.endswith("tenants") and method == "POST" else None
        for headers in ({}, admin_key, {"X-Mnemo-Admin-Token": "guess"}):
            r = client.request(method, path, json=body, headers=headers)
            assert (r.status_code, r.json()["error"]["code"]) == (403, "ADMIN_ONLY"), path
        in_url = client.request(method, f"{path}?admin_token={OPERATOR}", json=body)
        assert (in_url.status_code, in_url.json()["error"]["code"]) == (400, "CREDENTIAL_IN_URL")


def test_an_operator_token_sent_twice_with_different_values_is_refused(
    world: tuple[TestClient, Seeded],
) -> None:
    """The first of two X-Mnemo-Admin-Token headers spoke, where a proxy in front may check
    the last: a guess followed by the token was refused, the token followed by a guess let
    the request through. Either order is now refused, as two API keys are."""
    client, _ = world
    for method, path in sorted(OPERATOR_ROUTES):
        body = {"tenant": "twiceco"} if path.endswith("tenants") and method == "POST" else None
        for values in ([OPERATOR, "guess"], ["guess", OPERATOR]):
            headers = [("X-Mnemo-Admin-Token", v) for v in values]
            r = client.request(method, path, json=body, headers=headers)
            assert (r.status_code, r.json()["error"]["code"]) == (400, "CREDENTIALS_CONFLICT"), (
                path,
                r.text,
            )
            assert OPERATOR not in r.text
    # the operator's counts on the admin status: a key, and two different tokens
    both = [*headers_for("acme").items()]
    r = client.get(
        "/v1/admin/status",
        headers=[*both, ("X-Mnemo-Admin-Token", OPERATOR), ("X-Mnemo-Admin-Token", "guess")],
    )
    assert (r.status_code, r.json()["error"]["code"]) == (400, "CREDENTIALS_CONFLICT")
    same = [("X-Mnemo-Admin-Token", OPERATOR), ("X-Mnemo-Admin-Token", OPERATOR)]
    assert client.get("/v1/admin/tenants", headers=same).status_code == 200
    assert "counts" in client.get("/v1/admin/status", headers=[*both, *same]).json()
    listed = client.get("/v1/admin/tenants", headers={"X-Mnemo-Admin-Token": OPERATOR})
    assert "twiceco" not in [t["tenant"] for t in listed.json()["tenants"]]


def test_tenant_and_key_lifecycle_over_http(world: tuple[TestClient, Seeded]) -> None:
    client, _ = world
    op = {"X-Mnemo-Admin-Token": OPERATOR}
    made = client.post("/v1/admin/tenants", json={"tenant": "newco"}, headers=op)
    assert made.status_code == 201, made.text
    assert made.headers["cache-control"] == "no-store"
    admin = made.json()
    assert admin["tenant"] == "newco"
    assert sorted(admin["scopes"]) == sorted(ALL)
    again = client.post("/v1/admin/tenants", json={"tenant": "newco"}, headers=op)
    assert (again.status_code, again.json()["error"]["code"]) == (409, "TENANT_EXISTS")
    bad = client.post("/v1/admin/tenants", json={"tenant": "New Co'--"}, headers=op)
    assert bad.status_code == 422
    listed = client.get("/v1/admin/tenants", headers=op).json()["tenants"]
    assert "newco" in [t["tenant"] for t in listed]

    boss = auth(admin["key"])
    assert client.get("/v1/whoami", headers=boss).json()["tenant"] == "newco"
    reader = client.post(
        "/v1/tenants/newco/keys",
        json={"name": "reader", "scopes": ["memory:read"], "ttl_seconds": 3600},
        headers=boss,
    )
    assert reader.status_code == 201, reader.text
    reader_key = reader.json()["key"]
    assert reader.json()["expires_at"] is not None
    keys = client.get("/v1/tenants/newco/keys", headers=boss).json()["keys"]
    assert {k["name"] for k in keys} == {"admin", "reader"}
    assert reader_key not in str(keys)
    assert all("digest" not in k and "salt" not in k and "key" not in k for k in keys)

    r = client.get("/v1/subjects/user:U1/memories", headers=auth(reader_key))
    assert r.status_code == 200
    refused = client.post("/v1/events", json={}, headers=auth(reader_key))
    assert (refused.status_code, refused.json()["error"]["code"]) == (403, "SCOPE_MISSING")
    # a reader cannot make itself an admin key
    escalate = client.post(
        "/v1/tenants/newco/keys", json={"name": "x", "scopes": ["admin"]}, headers=auth(reader_key)
    )
    assert escalate.status_code == 403
    # acme's admin cannot touch newco's keys
    theirs = client.delete(
        f"/v1/tenants/newco/keys/{reader.json()['key_id']}", headers=headers_for("acme")
    )
    assert (theirs.status_code, theirs.json()["error"]["code"]) == (403, "FORBIDDEN")
    missing = client.delete("/v1/tenants/newco/keys/0000000000000000", headers=boss)
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "KEY_NOT_FOUND")
    revoked = client.delete(f"/v1/tenants/newco/keys/{reader.json()['key_id']}", headers=boss)
    assert revoked.status_code == 200
    assert revoked.json()["revoked_at"] is not None
    gone = client.get("/v1/subjects/user:U1/memories", headers=auth(reader_key))
    assert (gone.status_code, gone.json()["error"]["code"]) == (401, "KEY_REVOKED")
    # an admin key without memory:write cannot hand memory:write on
    limited = client.post(
        "/v1/tenants/newco/keys", json={"name": "ops", "scopes": ["admin"]}, headers=boss
    ).json()["key"]
    handed = client.post(
        "/v1/tenants/newco/keys",
        json={"name": "x", "scopes": ["admin", "memory:write"]},
        headers=auth(limited),
    )
    assert (handed.status_code, handed.json()["error"]["code"]) == (403, "SCOPE_MISSING")
    assert handed.json()["error"]["scope"] == "memory:write"
    same = client.post(
        "/v1/tenants/newco/keys", json={"name": "y", "scopes": ["admin"]}, headers=auth(limited)
    )
    assert same.status_code == 201
    unknown_scope = client.post(
        "/v1/tenants/newco/keys", json={"name": "x", "scopes": ["root"]}, headers=boss
    )
    assert unknown_scope.status_code == 422


def test_the_tenant_comes_from_the_key_not_the_payload(world: tuple[TestClient, Seeded]) -> None:
    client, _ = world
    event = {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": "user:U9",
        "tenant": "acme",
        "payload": {"memory": {"type": "fact", "content": "globex writing as acme"}},
    }
    r = client.post("/v1/events", json=event, headers=headers_for("globex"))
    assert (r.status_code, r.json()["error"]["code"]) == (403, "TENANT_MISMATCH")
    listed = client.get("/v1/subjects/user:U9/memories", headers=headers_for("acme")).json()
    assert listed["memories"] == []


# ---- rate limits -------------------------------------------------------------------------------


def test_token_buckets_refuse_then_refill() -> None:
    now = [0.0]
    limiter = RateLimiter(10.0, 3, 5.0, 2, clock=lambda: now[0])
    limiter.check("acme", "k1")
    limiter.check("acme", "k1")
    with pytest.raises(RateLimited) as caught:  # the key's bucket (2) is empty
        limiter.check("acme", "k1")
    assert caught.value.limited == "key"
    assert caught.value.retry_after == 1
    limiter.check("acme", "k2")  # the tenant's bucket still has one
    with pytest.raises(RateLimited) as tenant_caught:
        limiter.check("acme", "k3")
    assert tenant_caught.value.limited == "tenant"
    limiter.check("globex", "k9")  # another tenant has its own bucket
    now[0] += 0.2  # the key refills 1 token (5/s), the tenant 2 (10/s)
    limiter.check("acme", "k1")
    off = RateLimiter(0, 1, 0, 1, clock=lambda: now[0])
    for _ in range(100):
        off.check("acme", "k1")


def test_rate_limits_answer_429_with_retry_after(platform: Platform) -> None:
    install_keys(platform, "acme", "globex")
    install_keys(platform, "acme", label="second")
    settings = GatewaySettings(
        rate_tenant_per_second=0.01,
        rate_tenant_burst=4,
        rate_key_per_second=0.01,
        rate_key_burst=3,
    )
    with TestClient(create_app(platform, settings)) as client:
        one = headers_for("acme")
        statuses = [client.get("/v1/whoami", headers=one).status_code for _ in range(3)]
        assert statuses == [200, 200, 200]
        limited = client.get("/v1/whoami", headers=one)
        assert limited.status_code == 429
        assert limited.json()["error"]["code"] == "RATE_LIMITED"
        assert int(limited.headers["retry-after"]) >= 1
        second = headers_for("acme", label="second")
        assert client.get("/v1/whoami", headers=second).status_code == 200  # tenant: 4th token
        tenant_limited = client.get("/v1/whoami", headers=second)
        assert tenant_limited.status_code == 429
        assert "tenant" in tenant_limited.json()["error"]["message"]
        # another tenant is not slowed down by acme
        assert client.get("/v1/whoami", headers=headers_for("globex")).status_code == 200
        # unauthenticated requests never reach (or drain) a bucket
        assert client.get("/v1/whoami").status_code == 401


def test_two_different_keys_in_one_request_are_refused(world: tuple[TestClient, Seeded]) -> None:
    """Authorization carried globex's key and X-Mnemo-Key acme's: the request ran as
    globex. With two keys it is not clear who speaks, so neither does."""
    client, _ = world
    both = {**headers_for("globex"), "X-Mnemo-Key": fixed_key("acme")}
    r = client.get("/v1/whoami", headers=both)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["code"] == "CREDENTIALS_CONFLICT"
    same = {**headers_for("acme"), "X-Mnemo-Key": fixed_key("acme")}
    assert client.get("/v1/whoami", headers=same).json()["tenant"] == "acme"
    alone = {"X-Mnemo-Key": fixed_key("acme")}
    assert client.get("/v1/whoami", headers=alone).json()["tenant"] == "acme"


def test_a_key_that_expires_issues_none_that_outlives_it(
    world: tuple[TestClient, Seeded],
) -> None:
    """A key lent for an hour could issue an admin key that never expires, and so outlive
    its own end for good: a key now hands on no longer a life than its own."""
    client, _ = world
    lent = client.post(
        "/v1/tenants/acme/keys",
        json={"name": "lent", "scopes": ["admin", "memory:read"], "ttl_seconds": 3600},
        headers=headers_for("acme"),
    )
    assert lent.status_code == 201, lent.text
    end = lent.json()["expires_at"]
    lent_key = auth(lent.json()["key"])
    forever = client.post(
        "/v1/tenants/acme/keys", json={"name": "heir", "scopes": ["admin"]}, headers=lent_key
    )
    assert forever.status_code == 201, forever.text
    assert forever.json()["expires_at"] == end  # absent: the issuer's own end
    for longer in ({"ttl_seconds": 7200}, {"expires_at": "2999-01-01T00:00:00Z"}):
        refused = client.post(
            "/v1/tenants/acme/keys",
            json={"name": "heir2", "scopes": ["memory:read"], **longer},
            headers=lent_key,
        )
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["code"] == "INVALID_EXPIRY"
        assert refused.json()["error"]["field"] == next(iter(longer))
    # a key that never ends may issue one for at most ten years, however it is asked for
    far = client.post(
        "/v1/tenants/acme/keys",
        json={"name": "far", "scopes": ["memory:read"], "expires_at": "9999-12-31T00:00:00Z"},
        headers=headers_for("acme"),
    )
    assert far.status_code == 400, far.text
    assert far.json()["error"] == {
        "code": "INVALID_EXPIRY",
        "message": "a key is issued for at most 3650 days",
        "field": "expires_at",
    }
    shorter = client.post(
        "/v1/tenants/acme/keys",
        json={"name": "heir3", "scopes": ["memory:read"], "ttl_seconds": 600},
        headers=lent_key,
    )
    assert shorter.status_code == 201, shorter.text
    # a key without an end still issues keys without one
    free = client.post(
        "/v1/tenants/acme/keys",
        json={"name": "heir4", "scopes": ["memory:read"]},
        headers=headers_for("acme"),
    )
    assert free.status_code == 201
    assert free.json()["expires_at"] is None


def test_a_credential_header_sent_twice_with_different_values_is_refused(
    world: tuple[TestClient, Seeded],
) -> None:
    """The first of two Authorization headers spoke, where a proxy in front may check the
    last; two X-Mnemo-Tenant headers passed when only the first named the key's tenant."""
    client, _ = world
    acme, globex = fixed_key("acme"), fixed_key("globex")
    for name, values in (
        ("Authorization", [f"Bearer {acme}", f"Bearer {globex}"]),
        ("X-Mnemo-Key", [acme, globex]),
    ):
        r = client.get("/v1/whoami", headers=[(name, v) for v in values])
        assert r.status_code == 400, r.text
        assert r.json()["error"]["code"] == "CREDENTIALS_CONFLICT"
        assert acme not in r.text
        assert globex not in r.text
        mcp = client.post("/mcp", headers=[(name, v) for v in values], json={})
        assert mcp.status_code == 400, mcp.text
    twice = client.get(
        "/v1/whoami",
        headers=[("Authorization", f"Bearer {acme}"), ("Authorization", f"Bearer {acme}")],
    )
    assert twice.json()["tenant"] == "acme"  # the same key twice is one key
    tenants = [("Authorization", f"Bearer {acme}")]
    mixed = client.get(
        "/v1/whoami", headers=[*tenants, ("X-Mnemo-Tenant", "acme"), ("X-Mnemo-Tenant", "globex")]
    )
    assert (mixed.status_code, mixed.json()["error"]["code"]) == (403, "TENANT_MISMATCH")


def test_an_error_never_repeats_an_api_key(world: tuple[TestClient, Seeded]) -> None:
    """A key pasted into the wrong place came back in the error that refused it: as an
    event type, a payload member's name, a context's subject, a query's field, a template's
    name, or cut to a tool name's 48 characters (most of its secret still there); over MCP as
    an argument's or a tool's name. Errors now cut every key, whole or cut short, down to
    its public id."""
    client, _ = world
    acme = headers_for("acme")
    pasted = fixed_key("globex")
    key_id, secret = pasted.split("_")[1], pasted.split("_", 2)[2]
    event = {"type": "ObservationRecorded", "schema_version": 2, "stream": "user:U1"}
    refused = [
        client.post("/v1/events", json={**event, "type": pasted, "payload": {}}, headers=acme),
        client.post(
            "/v1/events", json={**event, "payload": {"text": "x", pasted: 1}}, headers=acme
        ),
        client.post("/v1/context", json={"subjects": [f"u {pasted}"]}, headers=acme),
        client.post(
            "/v1/query",
            json={"where": [{"field": pasted, "op": "eq", "value": 1}]},
            headers=acme,
        ),
        client.post(
            "/v1/tenants/acme/keys",
            json={"name": "n", "scopes": ["memory:read"], "tools": [f"{pasted} x"]},
            headers=acme,
        ),
    ]
    mcp_headers = {
        **acme,
        "Accept": "application/json, text/event-stream",
        "Host": "127.0.0.1:8080",
    }
    for name, arguments in (("recall", {"query": "x", pasted: 1}), (pasted, {})):
        call = {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "tools/call",
            "params": {"name": name, "arguments": arguments},
        }
        refused.append(client.post("/mcp", json=call, headers=mcp_headers))
    for r in refused:
        assert r.status_code in (200, 400, 404), r.text
        assert "error" in r.text.lower(), r.text
        assert secret[:8] not in r.text, r.text
        assert secret[-8:] not in r.text, r.text
        assert f"mnemo_{key_id}_[redacted]" in r.text, r.text
    # in a path, the key is refused before anything reads it, and never named
    in_path = client.get(f"/v1/templates/{pasted}", headers=acme)
    assert in_path.json()["error"]["code"] == "CREDENTIAL_IN_URL"
    assert key_id not in in_path.text
    assert secret[:8] not in in_path.text


def test_a_lesser_key_cannot_lock_the_tenant_out(platform: Platform) -> None:
    """A short-lived admin key with fewer scopes revoked the tenant's root admin key, then
    itself: the tenant had no admin key left and no way back (TENANT_EXISTS). Now a key
    revokes only itself or keys it could have issued, the last active admin key stays, and
    the operator can issue a new admin key of an existing tenant."""
    with TestClient(create_app(platform, GatewaySettings(admin_token=OPERATOR))) as client:
        op = {"X-Mnemo-Admin-Token": OPERATOR}
        root = client.post("/v1/admin/tenants", json={"tenant": "lockco"}, headers=op).json()
        boss = auth(root["key"])
        tmp = client.post(
            "/v1/tenants/lockco/keys",
            json={"name": "tmpadmin", "scopes": ["admin", "memory:read"], "ttl_seconds": 120},
            headers=boss,
        ).json()
        r = client.delete(f"/v1/tenants/lockco/keys/{root['key_id']}", headers=auth(tmp["key"]))
        assert (r.status_code, r.json()["error"]["code"]) == (403, "REVOKE_NOT_ALLOWED")
        assert client.get("/v1/whoami", headers=boss).status_code == 200
        # what it issued it may revoke; the answer names the keys those issued, still active
        child = client.post(
            "/v1/tenants/lockco/keys",
            json={"name": "child", "scopes": ["admin", "memory:read"], "ttl_seconds": 60},
            headers=auth(tmp["key"]),
        ).json()
        grandchild = client.post(
            "/v1/tenants/lockco/keys",
            json={"name": "grandchild", "scopes": ["memory:read"]},
            headers=auth(child["key"]),
        ).json()
        # a key with the same scopes but a longer life is beyond it as well
        longer = client.post(
            "/v1/tenants/lockco/keys",
            json={"name": "longer", "scopes": ["memory:read"]},
            headers=boss,
        ).json()
        r = client.delete(f"/v1/tenants/lockco/keys/{longer['key_id']}", headers=auth(tmp["key"]))
        assert (r.status_code, r.json()["error"]["code"]) == (403, "REVOKE_NOT_ALLOWED")
        r = client.delete(f"/v1/tenants/lockco/keys/{child['key_id']}", headers=auth(tmp["key"]))
        assert r.status_code == 200, r.text
        assert r.json()["issued_active"] == [grandchild["key_id"]]
        # and so does revoking the key that issued the issuer
        r = client.delete(f"/v1/tenants/lockco/keys/{tmp['key_id']}", headers=boss)
        assert r.status_code == 200, r.text
        assert r.json()["issued_active"] == [grandchild["key_id"]]
        assert client.get("/v1/whoami", headers=auth(grandchild["key"])).status_code == 200
        # the last active admin key is kept, even from itself
        r = client.delete(f"/v1/tenants/lockco/keys/{root['key_id']}", headers=boss)
        assert (r.status_code, r.json()["error"]["code"]) == (409, "LAST_ADMIN_KEY")
        assert client.get("/v1/whoami", headers=boss).status_code == 200
        # with a second admin key, the first may go
        second = client.post(
            "/v1/tenants/lockco/keys", json={"name": "admin2", "scopes": ALL}, headers=boss
        ).json()
        r = client.delete(f"/v1/tenants/lockco/keys/{root['key_id']}", headers=auth(second["key"]))
        assert r.status_code == 200, r.text
        # the operator's way back: a new admin key of an existing tenant
        for headers in ({}, auth(second["key"])):
            r = client.post("/v1/admin/tenants/lockco/keys", json={}, headers=headers)
            assert (r.status_code, r.json()["error"]["code"]) == (403, "ADMIN_ONLY")
        for body in ("null", "[]"):  # not an object: null once issued a full admin key
            r = client.post(
                "/v1/admin/tenants/lockco/keys",
                content=body,
                headers={**op, "content-type": "application/json"},
            )
            assert (r.status_code, r.json()["error"]["code"]) == (422, "VALIDATION_ERROR")
        missing = client.post("/v1/admin/tenants/nobody/keys", json={}, headers=op)
        assert (missing.status_code, missing.json()["error"]["code"]) == (404, "TENANT_NOT_FOUND")
        again = client.post(
            "/v1/admin/tenants/lockco/keys", json={"name": "rescue", "ttl_seconds": 600}, headers=op
        )
        assert again.status_code == 201, again.text
        assert again.headers["cache-control"] == "no-store"
        rescued = again.json()
        assert sorted(rescued["scopes"]) == sorted(ALL)
        assert (rescued["name"], rescued["created_by"]) == ("rescue", "operator")
        assert rescued["expires_at"] is not None
        assert client.get("/v1/whoami", headers=auth(rescued["key"])).json()["tenant"] == "lockco"
