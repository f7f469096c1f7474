"""Schemathesis fuzzes every operation of the gateway's OpenAPI schema against a real server,
with a valid API key: whatever it sends, the answer is never a 5xx. Bounded (derandomized,
a few examples per operation) so the run stays well under a minute.

The fuzzer gets past the doors, so that what lies behind them is fuzzed too: the operator
routes (tenants, rebuild) get the operator token, and a `{tenant}` in a path is the key's
own tenant (another tenant's is refused before anything else; test_auth checks that).
The console's pages are not in the schema; their one parameter is fuzzed on its own.
The published schema leaves an event's payload free (any JSON), so the fuzzer's events
stop at validation; a schema built from schemas/ (every event type with its payload's
own schema) sends events that get through to the consumers too."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tests.support import fixed_key, running_server

from mnemo.service.runner import CONSUMERS
from mnemo.settings import GatewaySettings

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"

EXAMPLES = 12
OPERATOR = "fuzz-operator-token"
# operations that refuse every request without the operator token or the key's own tenant
BEHIND_DOORS = {
    "GET /v1/admin/tenants",
    "POST /v1/admin/tenants",
    "POST /v1/admin/rebuild",
    "GET /v1/tenants/{tenant}/keys",
}


def test_no_input_makes_the_server_fail(tmp_path: Path) -> None:
    gateway = GatewaySettings(admin_token=OPERATOR, rate_tenant_per_second=0, rate_key_per_second=0)
    failures: list[str] = []
    answered: set[str] = set()  # operations that gave at least one 2xx: the key got through
    with running_server(tmp_path / "data", gateway) as (url, _):
        schema = schemathesis.openapi.from_url(f"{url}/openapi.json")
        # the live tail streams until its max_seconds: fuzzing it would hold a connection open
        schema = schema.exclude(path_regex=r".*/live$")
        operations = [result.ok() for result in schema.get_all_operations()]
        assert len(operations) >= 30

        for operation in operations:

            @given(case=operation.as_strategy())
            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                derandomize=True,
                database=None,
                suppress_health_check=list(HealthCheck),
            )
            def fuzz(case: Any) -> None:
                headers = {**(case.headers or {}), "Authorization": f"Bearer {fixed_key('acme')}"}
                headers.pop("X-Mnemo-Tenant", None)
                if case.path.startswith("/v1/admin/"):
                    headers = {
                        k: v for k, v in headers.items() if k.lower() != "x-mnemo-admin-token"
                    }
                    headers["X-Mnemo-Admin-Token"] = OPERATOR
                if case.path_parameters and "tenant" in case.path_parameters:
                    case.path_parameters["tenant"] = "acme"
                response = case.call(base_url=url, headers=headers, timeout=30)
                if response.status_code < 300:
                    answered.add(f"{case.method} {case.path}")
                if response.status_code >= 500:
                    failures.append(
                        f"{case.method} {case.formatted_path}: {response.status_code} "
                        f"{response.text[:300]}"
                    )

            fuzz()
    assert failures == []
    assert len(answered) >= 15, sorted(answered)
    assert answered >= BEHIND_DOORS, sorted(BEHIND_DOORS - answered)


PAGES = {
    "/console",
    *(f"/console/{n}" for n in ("index.html", "console.js", "console.css", "icon.svg")),
}


def test_no_console_page_name_makes_the_server_fail(tmp_path: Path) -> None:
    """/console/{name} is left out of the schema (static pages): fuzzed here on its own."""
    failures: list[str] = []
    with running_server(tmp_path / "data") as (url, _), httpx.Client(base_url=url) as http:

        @given(name=st.text(min_size=1, max_size=300))
        @settings(
            max_examples=60,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def fuzz(name: str) -> None:
            r = http.get(f"/console/{quote(name, safe='')}")
            if r.status_code >= 500:
                failures.append(f"{name!r}: {r.status_code} {r.text[:300]}")
            elif r.status_code == 200:
                # judged by the path sent: the client drops a dot segment (`.` asks for
                # /console itself, the console's page)
                sent = r.request.url.raw_path.decode("ascii")
                assert sent in PAGES, (name, sent)

        fuzz()
        for name in ("..%2F..%2Fpyproject.toml", "%2e%2e%2fapp.py", "index.html%00.js"):
            assert http.get(f"/console/{name}").status_code == 404, name
    assert failures == []


def _events_schema() -> dict[str, Any]:
    """An OpenAPI document whose one operation publishes one event of any type, its
    payload drawn from that type's generated schema (schemas/events)."""
    components: dict[str, Any] = {}
    choices = []
    for path in sorted((SCHEMAS / "events").glob("*.schema.json")):
        text = path.read_text(encoding="utf-8").replace('"#/$defs/', '"#/components/schemas/')
        payload = json.loads(text)
        components.update(payload.pop("$defs", {}))
        event_type, version = path.name.split(".")[:2]
        name = f"{event_type}_{version}"
        components[name] = payload
        choices.append(
            {
                "type": "object",
                "additionalProperties": False,
                "required": ["type", "schema_version", "stream", "payload"],
                "properties": {
                    "type": {"const": event_type},
                    "schema_version": {"const": int(version[1:])},
                    "stream": {"type": "string", "pattern": "^user:[A-Za-z0-9]{1,12}$"},
                    "payload": {"$ref": f"#/components/schemas/{name}"},
                },
            }
        )
    assert len(choices) >= 15
    return {
        "openapi": "3.1.0",
        "info": {"title": "Mnemo events", "version": "1"},
        "paths": {
            "/v1/events": {
                "post": {
                    "requestBody": {
                        "required": True,
                        "content": {"application/json": {"schema": {"oneOf": choices}}},
                    },
                    "responses": {"202": {"description": "accepted"}},
                }
            }
        },
        "components": {"schemas": components},
    }


def test_no_event_payload_makes_the_server_or_a_consumer_fail(tmp_path: Path) -> None:
    failures: list[str] = []
    statuses: dict[int, int] = {}
    with running_server(tmp_path / "data") as (url, platform):
        schema = schemathesis.openapi.from_dict(_events_schema())
        [operation] = [result.ok() for result in schema.get_all_operations()]

        @given(case=operation.as_strategy())
        @settings(
            max_examples=250,
            deadline=None,
            derandomize=True,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def fuzz(case: Any) -> None:
            headers = {"Authorization": f"Bearer {fixed_key('acme')}"}
            response = case.call(base_url=url, headers=headers, timeout=30)
            statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
            if response.status_code >= 500:
                failures.append(f"{json.dumps(case.body)[:300]}: {response.text[:300]}")

        fuzz()
        head = -1
        while head != platform.log.head():  # until what the consumers emitted is handled
            head = platform.log.head()
            for consumer in CONSUMERS:
                assert platform.runner.wait_for(consumer, head, 120), consumer
        errors = platform.runner.errors
    assert failures == []
    assert statuses.get(202, 0) >= 30, statuses  # events got through to the consumers
    assert errors == 0  # no handler raised on any of them
