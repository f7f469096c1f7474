"""Toolchains over HTTP and the SDK: a payment chain (create order -> payment link ->
confirm payment) that fails at step two, resumes without repeating step one (also after
SIGKILL of the embedded server), and expires at its TTL; bad input refused with a code and
nothing stored; every step audited and replayable; forgetting the subject removes it."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner, Result
from fastapi.testclient import TestClient
from mnemo_gateway.app import create_app
from tests.support import fixed_key, free_port, headers_for, install_keys, running_server

from mnemo.adapters.clocks import FixedClock
from mnemo.bootstrap import Platform
from mnemo.client import AsyncMnemoClient, MnemoAPIError, MnemoClient
from mnemo.domain.toolchain import MAX_OUTPUT_BYTES
from mnemo.entrypoints.admin import platform_checksum, rebuild_read_models
from mnemo.entrypoints.cli import cli
from mnemo.settings import GatewaySettings

H = headers_for("acme")
PLAN = ["create_order", "payment_link", "confirm_payment"]
STREAM = "user:U42"


def poll(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def client(platform: Platform) -> Iterator[TestClient]:
    with TestClient(create_app(platform, GatewaySettings(wait_timeout=60))) as c:
        yield c


def start(client: TestClient, toolchain_id: str = "pay-1", **extra: Any) -> httpx.Response:
    body = {"toolchain_id": toolchain_id, "subject": STREAM, "steps": PLAN, **extra}
    return client.post("/v1/toolchains", json=body, headers=H)


def step(
    client: TestClient, step_id: str, body: Any, toolchain_id: str = "pay-1"
) -> httpx.Response:
    return client.post(f"/v1/toolchains/{toolchain_id}/steps/{step_id}", json=body, headers=H)


def done(output: Any) -> dict[str, Any]:
    return {"status": "completed", "output": output}


FAILED = {
    "status": "failed",
    "error": {
        "type": "timeout",
        "field": "amount",
        "reason": "the PSP timed out",
        "retryable": True,
    },
}


def stream_types(platform: Platform) -> list[str]:
    return [e.envelope.type for e in platform.log.read_stream("acme", STREAM, 1, 1000)]


def test_a_payment_chain_fails_at_step_two_and_resumes_there(
    client: TestClient, platform: Platform
) -> None:
    r = start(client)
    assert r.status_code == 201, r.text
    assert r.json()["next_step"] == "create_order"
    assert r.json()["status"] == "running"
    r = step(client, "create_order", done({"order_id": "O-77", "amount": 42}))
    assert r.status_code == 201, r.text
    r = step(client, "payment_link", FAILED)
    assert r.status_code == 201, r.text

    # another device asks for the state: resume at the failed step, with step one's output
    state = client.get("/v1/toolchains/pay-1", headers=headers_for("acme", "phone")).json()
    assert state["status"] == "failed"
    assert state["next_step"] == "payment_link"
    assert state["done"][0]["step_id"] == "create_order"
    assert state["done"][0]["output"] == {"order_id": "O-77", "amount": 42}
    assert state["failed"]["step_id"] == "payment_link"
    assert state["failed"]["error"] == FAILED["error"]
    assert state["failed"]["attempts"] == 1

    # the agent retries step one out of caution: recorded once, not a second order
    head = platform.log.head()
    again = step(client, "create_order", done({"amount": 42, "order_id": "O-77"}))
    assert again.status_code == 200
    assert again.json()["duplicate"] is True
    assert platform.log.head() == head  # nothing appended

    step(client, "payment_link", done({"url": "https://psp.example/p/77"}))
    final = step(client, "confirm_payment", done({"paid": True})).json()
    assert final["status"] == "completed"
    assert final["next_step"] is None
    assert [d["step_id"] for d in final["done"]] == PLAN

    # every step is in the stream (replayable) and in the audit trail, once each
    types = stream_types(platform)
    assert types.count("ToolchainStepCompleted") == 3
    assert types.count("ToolchainStepFailed") == 1
    poll(
        lambda: len(platform.store.audit_trail("acme", STREAM, 0, 100)) == len(types),
        30,
        "the audit chain",
    )
    audited = [a.event_type for a in platform.store.audit_trail("acme", STREAM, 0, 100)]
    assert audited == types
    replayed = client.get(f"/v1/subjects/{STREAM}/events", headers=H).json()["events"]
    assert [e["type"] for e in replayed] == types


def test_bad_input_gets_a_code_and_stores_nothing(client: TestClient, platform: Platform) -> None:
    assert start(client).status_code == 201
    step(client, "create_order", done({"order_id": "O-1"}))
    before = client.get("/v1/toolchains/pay-1", headers=H).json()
    head = platform.log.head()
    cases: list[tuple[httpx.Response, int, str]] = [
        (step(client, "create_order", done({"order_id": "O-2"})), 409, "STEP_CONFLICT"),
        (step(client, "create_order", FAILED), 409, "STEP_CONFLICT"),
        (step(client, "refund", done(1)), 400, "STEP_NOT_IN_PLAN"),
        (step(client, "create_order", done(1), toolchain_id="nope"), 404, "TOOLCHAIN_NOT_FOUND"),
        (
            step(client, "payment_link", done({"blob": "x" * MAX_OUTPUT_BYTES})),
            413,
            "OUTPUT_TOO_LARGE",
        ),
        (
            client.post(
                "/v1/toolchains/pay-1/steps/payment_link",
                content=b"{not json",
                headers={**H, "content-type": "application/json"},
            ),
            400,
            "MALFORMED_JSON",
        ),
        (
            step(client, "payment_link", {"status": "completed", "error": FAILED["error"]}),
            400,
            "INVALID_STEP",
        ),
        (start(client, steps=["other"]), 409, "TOOLCHAIN_EXISTS"),
    ]
    for response, status, code in cases:
        assert (response.status_code, response.json()["error"]["code"]) == (status, code)
    # a field the edge refuses is named as the request names it
    twice = start(client, toolchain_id="pay-2", steps=["a", "a"])
    assert (twice.status_code, twice.json()["error"]["code"]) == (400, "DUPLICATE_STEP")
    assert twice.json()["error"]["field"] == "steps"
    assert platform.log.head() == head
    assert client.get("/v1/toolchains/pay-1", headers=H).json() == {
        **before,
        "as_of": client.get("/v1/toolchains/pay-1", headers=H).json()["as_of"],
    }
    # a non-JSON output published as an event is refused at the edge too
    raw = {
        "type": "ToolchainStepCompleted",
        "schema_version": 1,
        "stream": STREAM,
        "payload": {"toolchain_id": "pay-1", "step_id": "payment_link", "output": "{oops"},
    }
    r = client.post("/v1/events", json=raw, headers=H)
    assert (r.status_code, r.json()["error"]["code"]) == (400, "OUTPUT_NOT_JSON")
    assert platform.log.head() == head


def test_an_api_key_is_no_toolchain_id(client: TestClient, platform: Platform) -> None:
    """Toolchain ids are kept and served in clear, like stream names: a key pasted into one
    was stored in the log and the read models, then the chain could not even be read."""
    key = client.post(
        "/v1/tenants/acme/keys", json={"name": "leaky", "scopes": ["memory:read"]}, headers=H
    ).json()["key"]
    # mnemo_<16 hex>_<43 characters>; the secret itself may hold '_'
    secret = key[len("mnemo_") + 17 :]
    assert len(secret) == 43
    head = platform.log.head()
    for pasted in (key, key.replace("mnemo_", "MNEMO_"), "run:" + key):
        answer = start(client, toolchain_id=pasted)
        assert answer.status_code == 422, answer.text
        error = answer.json()["error"]
        assert (error["code"], error["field"]) == ("VALIDATION_ERROR", "toolchain_id")
        assert secret not in answer.text
    assert platform.log.head() == head


def test_a_conflicting_step_published_directly_is_refused_by_the_registrar(
    client: TestClient, platform: Platform
) -> None:
    """Two devices past the early check: the registrar decides, the later one stores nothing."""
    start(client)
    step(client, "create_order", done({"order_id": "O-1"}))
    raw = {
        "type": "ToolchainStepCompleted",
        "schema_version": 1,
        "stream": STREAM,
        "payload": {
            "toolchain_id": "pay-1",
            "step_id": "create_order",
            "output": '{"order_id":"O-9"}',
        },
    }
    r = client.post("/v1/events?wait=registered", json=raw, headers=H)
    assert r.status_code == 202
    [outcome] = r.json()["accepted"][0]["outcomes"]
    assert (outcome["outcome"], outcome["reason_code"]) == ("rejected", "STEP_CONFLICT")
    state = client.get("/v1/toolchains/pay-1", headers=H).json()
    assert state["done"][0]["output"] == {"order_id": "O-1"}


def test_the_chain_expires_at_its_ttl_decided_by_decay(
    client: TestClient, platform: Platform, clock: FixedClock
) -> None:
    started = start(client, ttl_seconds=600).json()
    expires = datetime.fromisoformat(started["expires_at"])
    step(client, "create_order", done({"order_id": "O-5"}))
    url = "/v1/toolchains/pay-1"
    just_before = (expires - timedelta(microseconds=1)).isoformat()
    assert client.get(url, params={"as_of": just_before}, headers=H).json()["status"] == "running"
    # the boundary instant, written in another zone
    at_edge = expires.astimezone(datetime.fromisoformat("2026-01-01T00:00:00+08:00").tzinfo)
    seen = client.get(url, params={"as_of": at_edge.isoformat()}, headers=H).json()
    assert seen["status"] == "expired"
    assert seen["next_step"] is None
    # the clock reaches the TTL: the decay consumer records the expiry in the log
    clock.set(expires)
    platform.runner.wake()
    poll(lambda: "ToolchainExpired" in stream_types(platform), 30, "the expiry decision")
    [expired] = [
        e.envelope
        for e in platform.log.read_stream("acme", STREAM, 1, 100)
        if e.envelope.type == "ToolchainExpired"
    ]
    assert expired.occurred_at == expires
    r = step(client, "payment_link", done({"url": "u"}))
    assert (r.status_code, r.json()["error"]["code"]) == (409, "TOOLCHAIN_EXPIRED")
    # a rebuild from the log gives the same read models (the expiry's timer gone too)
    platform.runner.drain()
    live = platform_checksum(platform)
    assert rebuild_read_models(platform) == live
    assert client.get(url, headers=H).json()["status"] == "expired"


def test_scopes_tenants_and_forgetting_the_subject(client: TestClient, platform: Platform) -> None:
    install_keys(platform, "acme", label="reader", scopes=("memory:read",))
    start(client)
    reader = headers_for("acme", label="reader")
    assert client.get("/v1/toolchains/pay-1", headers=reader).status_code == 200
    r = client.post("/v1/toolchains/pay-1/steps/create_order", json=done(1), headers=reader)
    assert (r.status_code, r.json()["error"]["code"]) == (403, "SCOPE_MISSING")
    # another tenant does not see it
    r = client.get("/v1/toolchains/pay-1", headers=headers_for("globex"))
    assert (r.status_code, r.json()["error"]["code"]) == (404, "TOOLCHAIN_NOT_FOUND")
    # forgetting the subject removes the toolchain's state
    forget = {"type": "ForgetRequested", "schema_version": 1, "stream": STREAM, "payload": {}}
    assert client.post("/v1/events?wait=registered", json=forget, headers=H).status_code == 202
    r = client.get("/v1/toolchains/pay-1", headers=H)
    assert (r.status_code, r.json()["error"]["code"]) == (404, "TOOLCHAIN_NOT_FOUND")


def test_a_key_without_memory_read_learns_no_output_from_a_write(
    client: TestClient, platform: Platform
) -> None:
    """GET /v1/toolchains/{id} needs memory:read, yet a key holding memory:write alone read
    every step's output (opened: a card number, a payment link) and the last failure from
    the state its POSTs answer: by starting the same toolchain again, or recording a step."""
    install_keys(platform, "acme", label="writer", scopes=("memory:write",))
    writer = headers_for("acme", label="writer")
    start(client)
    assert step(client, PLAN[0], done({"card": "4111 1111 1111 1111"})).status_code == 201
    assert step(client, PLAN[1], FAILED).status_code == 201
    assert client.get("/v1/toolchains/pay-1", headers=writer).status_code == 403
    body = {"toolchain_id": "pay-1", "subject": STREAM, "steps": PLAN}
    again = client.post("/v1/toolchains", json=body, headers=writer)
    recorded = client.post(f"/v1/toolchains/pay-1/steps/{PLAN[1]}", json=FAILED, headers=writer)
    for answer in (again, recorded):
        assert answer.status_code == 200, answer.text
        state = answer.json()
        assert state["duplicate"] is True
        assert [d["step_id"] for d in state["done"]] == [PLAN[0]]
        assert state["done"][0]["output"] is None
        assert state["failed"] is None
        assert (state["status"], state["next_step"]) == ("failed", PLAN[1])
        assert "4111" not in answer.text
        assert "PSP" not in answer.text
    # a key that may read gets the whole state from its writes
    full = start(client).json()
    assert full["done"][0]["output"] == {"card": "4111 1111 1111 1111"}
    assert full["failed"]["error"]["reason"] == "the PSP timed out"


def test_a_rebuild_after_forgetting_the_subject_gives_the_live_read_models(
    client: TestClient, platform: Platform
) -> None:
    """Forgetting the user shreds their key: a rebuild reads every step's output and every
    failure's reason as the redaction marker, and still decides each step as it was decided
    live (the outcomes are read models too)."""
    start(client)
    assert step(client, "create_order", done({"order_id": "O-9"})).status_code == 201
    assert step(client, "payment_link", FAILED).status_code == 201
    other = {**FAILED, "error": {**FAILED["error"], "reason": "the PSP said no"}}
    assert step(client, "payment_link", other).json()["failed"]["attempts"] == 2
    ids = [
        e.envelope.event_id
        for e in platform.log.read_stream("acme", STREAM, 1, 100)
        if e.envelope.type.startswith("ToolchainStep")
    ]
    assert len(ids) == 3
    forget = {"type": "ForgetRequested", "schema_version": 1, "stream": STREAM, "payload": {}}
    assert client.post("/v1/events?wait=registered", json=forget, headers=H).status_code == 202
    platform.runner.drain()
    live = {i: platform.store.outcome("acme", i) for i in ids}
    assert all([o.kind.value for o in v] == ["applied"] for v in live.values())
    checksum = platform_checksum(platform)
    head = platform.log.head()
    assert rebuild_read_models(platform) == checksum
    assert {i: platform.store.outcome("acme", i) for i in ids} == live
    assert platform.log.head() == head  # a rebuild appends nothing


# ---- SIGKILL of the embedded server ----------------------------------------------------

SERVER = """
import sys, uvicorn
from mnemo.bootstrap import build_embedded
from mnemo.settings import MnemoSettings
from mnemo_gateway.app import create_app
from tests.support import install_keys
platform = build_embedded(MnemoSettings())
install_keys(platform, "crash")
uvicorn.run(create_app(platform), host="127.0.0.1", port=int(sys.argv[1]), log_level="warning")
"""


def serve(data: Path, port: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "MNEMO_DATA_DIR": str(data), "MNEMO_EMBEDDER": "hashing"}
    root = str(Path(__file__).resolve().parents[2])  # so the server can import tests.support
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], env=env)

    def up() -> bool:
        assert proc.poll() is None, "the server exited"
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    poll(up, 90, "the server to answer")
    return proc


def test_a_chain_resumes_after_sigkill_of_the_server_without_repeating_a_step(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    orders: list[str] = []

    def create_order() -> dict[str, Any]:  # the tool with a side effect
        orders.append(f"O-{len(orders) + 1}")
        return {"order_id": orders[-1]}

    server = serve(data, port)
    try:
        with MnemoClient(url, api_key=fixed_key("crash")) as laptop:
            chain = laptop.start_toolchain("checkout-9", "user:U9", PLAN, ttl_seconds=3600)
            assert chain.next_step == "create_order"
            laptop.complete_step("checkout-9", "create_order", create_order())
            laptop.fail_step(
                "checkout-9", "payment_link", type="unavailable", reason="PSP down", retryable=True
            )
        server.send_signal(signal.SIGKILL)
        server.wait(10)
        server = serve(data, port)
        with MnemoClient(url, api_key=fixed_key("crash")) as phone:
            state = phone.toolchain("checkout-9")
            assert state.status == "failed"
            assert state.next_step == "payment_link"
            assert state.failed is not None
            assert state.failed.error.retryable is True
            # resume: run what is next, never a step done
            tools = {
                "create_order": create_order,
                "payment_link": lambda: {
                    "url": f"https://psp.example/{state.output('create_order')['order_id']}"
                },
                "confirm_payment": lambda: {"paid": True},
            }
            while state.next_step is not None:
                state = phone.complete_step("checkout-9", state.next_step, tools[state.next_step]())
            assert state.status == "completed"
            assert orders == ["O-1"]  # one order, created before the crash
            assert state.output("payment_link") == {"url": "https://psp.example/O-1"}
            # replayed after the crash, once each
            types = [e.type for e in phone.replay("user:U9").events]
            assert types.count("ToolchainStepCompleted") == 3
            # expiry at its TTL, judged at an instant
            expires = state.expires_at
            with pytest.raises(MnemoAPIError) as refused:
                phone.toolchain("missing")
            assert refused.value.code == "TOOLCHAIN_NOT_FOUND"
            assert phone.toolchain("checkout-9", as_of=expires).status == "completed"
            chain2 = phone.start_toolchain("checkout-10", "user:U9", PLAN, ttl_seconds=60)
            assert phone.toolchain("checkout-10", as_of=chain2.expires_at).status == "expired"
            assert (
                phone.toolchain(
                    "checkout-10", as_of=chain2.expires_at - timedelta(seconds=1)
                ).status
                == "running"
            )
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(30)


# ---- the CLI and the async SDK, against a real server -----------------------------------


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_server(tmp_path_factory.mktemp("server")) as (url, platform):
        install_keys(platform, "acme")
        yield url


def test_the_cli_starts_records_and_shows_a_toolchain(served: str) -> None:
    runner = CliRunner()

    def mnemo(*args: str, input: str | None = None) -> Result:
        return runner.invoke(
            cli, ["--url", served, "--api-key", fixed_key("acme"), *args], input=input
        )

    r = mnemo("toolchain", "start", "cli-1", "--subject", "user:C1", "--step", "a", "--step", "b")
    assert r.exit_code == 0, r.output
    assert "next step: a" in r.output
    r = mnemo("toolchain", "done", "cli-1", "a", "-", input='{"id": 7}')
    assert r.exit_code == 0, r.output
    r = mnemo(
        "toolchain",
        "failed",
        "cli-1",
        "b",
        "--type",
        "timeout",
        "--reason",
        "slow",
        "--not-retryable",
    )
    assert r.exit_code == 0, r.output
    r = mnemo("--json", "toolchain", "show", "cli-1")
    shown = json.loads(r.output)
    assert shown["next_step"] == "b"
    assert shown["done"] == [{"step_id": "a", "output": {"id": 7}, "at": shown["done"][0]["at"]}]
    assert shown["failed"]["error"]["retryable"] is False
    r = mnemo("toolchain", "show", "cli-1")
    assert "timeout: slow (not retryable, attempt 1)" in r.output
    # refused input: exit 2 with the code; a non-JSON output is a local error (exit 1)
    r = mnemo("toolchain", "done", "cli-1", "a", '{"id": 8}')
    assert r.exit_code == 2
    assert "STEP_CONFLICT" in r.output
    r = mnemo("toolchain", "done", "cli-1", "b", "{nope")
    assert r.exit_code == 1
    assert "not JSON" in r.output


def test_the_async_client_resumes_a_chain(served: str) -> None:
    async def run() -> list[str]:
        async with AsyncMnemoClient(served, api_key=fixed_key("acme")) as m:
            await m.start_toolchain("async-1", "user:A1", ["x", "y"], ttl_seconds=120)
            await m.complete_step("async-1", "x", [1, 2])
            again = await m.complete_step("async-1", "x", [1, 2])
            assert again.duplicate is True
            state = await m.toolchain("async-1")
            assert state.next_step == "y"
            done = await m.complete_step("async-1", "y", None)
            return [d.step_id for d in done.done]

    assert asyncio.run(run()) == ["x", "y"]
