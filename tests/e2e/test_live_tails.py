"""Live tails over real HTTP (uvicorn on loopback): a waiting tail holds no worker thread,
so many of them leave /healthz and other tenants' requests answering; and each tenant and
each key hold at most a configured number of tails open (429 TOO_MANY_TAILS beyond it).

An outside probe found 300 idle tails of one key starving the whole server for ~10 s each
request: every tail waited for news on a worker thread, and Starlette has 40."""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import AsyncExitStack
from typing import Any

import anyio.to_thread
import httpx
import pytest
import uvicorn
from mnemo_gateway.app import create_app
from tests.support import auth, grant, headers_for, wait_healthy

from mnemo.bootstrap import Platform
from mnemo.settings import GatewaySettings

ACME = headers_for("acme", "device")
GLOBEX = headers_for("globex", "device")
LIVE = "/v1/subjects/session:LIVE1/events/live"
BUDGET = 60.0  # seconds any readiness wait may take before the test fails


class Served:
    def __init__(self, url: str, server: uvicorn.Server) -> None:
        self.url = url
        self.server = server

    def on_loop(self, fn: Any) -> Any:
        """Run `fn` on the server's event loop and return its result."""
        loop = self.server.servers[0].get_loop()

        async def call() -> Any:
            return fn()

        return asyncio.run_coroutine_threadsafe(call(), loop).result(BUDGET)


def serve(platform: Platform, gateway: GatewaySettings) -> Iterator[Served]:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    server = uvicorn.Server(
        uvicorn.Config(create_app(platform, gateway), log_level="warning", log_config=None)
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, thread.is_alive)
        yield Served(url, server)
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()


@pytest.fixture
def capped(platform: Platform) -> Iterator[Served]:
    yield from serve(platform, GatewaySettings(max_tails_per_tenant=3, max_tails_per_key=2))


@pytest.fixture
def roomy(platform: Platform) -> Iterator[Served]:
    # caps above the worker pool's 40 threads, so the tails alone could hold them all
    yield from serve(
        platform,
        GatewaySettings(wait_timeout=60, max_tails_per_tenant=80, max_tails_per_key=80),
    )


async def _open(
    stack: AsyncExitStack, client: httpx.AsyncClient, headers: dict[str, str]
) -> httpx.Response:
    """Open a tail (its headers received) and keep it open until `stack` closes."""
    return await stack.enter_async_context(
        client.stream("GET", LIVE, params={"max_seconds": BUDGET}, headers=headers)
    )


def test_a_tenant_and_a_key_hold_at_most_their_cap_of_tails(
    capped: Served, platform: Platform
) -> None:
    second = auth(grant(platform, "acme", ("memory:read",), name="second"))
    third = auth(grant(platform, "acme", ("memory:read",), name="third"))

    async def scene() -> None:
        async with (
            httpx.AsyncClient(base_url=capped.url, timeout=BUDGET) as client,
            AsyncExitStack() as stack,
        ):
            for _ in range(2):
                assert (await _open(stack, client, ACME)).status_code == 200
            # the key's third tail: refused, with the code, the limit and which one
            refused = await client.get(LIVE, params={"max_seconds": 1}, headers=ACME)
            assert refused.status_code == 429, refused.text
            error = refused.json()["error"]
            assert (error["code"], error["limit"], error["limited"]) == ("TOO_MANY_TAILS", 2, "key")
            assert refused.headers["Retry-After"] == "1"
            # another key of the tenant takes the tenant's third, and no more
            assert (await _open(stack, client, second)).status_code == 200
            refused = await client.get(LIVE, params={"max_seconds": 1}, headers=third)
            assert refused.status_code == 429, refused.text
            error = refused.json()["error"]
            assert (error["code"], error["limit"], error["limited"]) == (
                "TOO_MANY_TAILS",
                3,
                "tenant",
            )
            # another tenant is not counted with acme
            assert (await _open(stack, client, GLOBEX)).status_code == 200
        # closed tails give their slots back (the server sees the disconnects in turn)
        async with httpx.AsyncClient(base_url=capped.url, timeout=BUDGET) as client:
            deadline = time.monotonic() + BUDGET
            while True:
                async with client.stream(
                    "GET", LIVE, params={"max_seconds": 0.1}, headers=ACME
                ) as again:
                    if again.status_code == 200:
                        break
                    await again.aread()
                assert time.monotonic() < deadline, "the closed tails kept their slots"
                await asyncio.sleep(0.02)  # the polling interval

    asyncio.run(scene())


def test_many_waiting_tails_hold_no_worker_thread_and_others_still_answer(
    roomy: Served, platform: Platform
) -> None:
    tails = 70
    limits = httpx.Limits(max_connections=tails + 10, max_keepalive_connections=tails + 10)

    async def scene() -> None:
        async with (
            httpx.AsyncClient(base_url=roomy.url, timeout=BUDGET, limits=limits) as client,
            AsyncExitStack() as stack,
        ):
            opened = await asyncio.gather(*(_open(stack, client, ACME) for _ in range(tails)))
            assert [r.status_code for r in opened] == [200] * tails
            # every tail waits now; the worker pool is not theirs
            # (a tail just opened may still be reading its backlog on a thread: a waiting one
            # holds none, so the pool empties within the budget, which it never did before)
            limiter = roomy.on_loop(anyio.to_thread.current_default_thread_limiter)
            deadline = time.monotonic() + BUDGET / 2
            borrowed = roomy.on_loop(lambda: limiter.borrowed_tokens)
            while borrowed >= limiter.total_tokens // 2 and time.monotonic() < deadline:
                await asyncio.sleep(0.1)
                borrowed = roomy.on_loop(lambda: limiter.borrowed_tokens)
            assert borrowed < limiter.total_tokens // 2, (borrowed, limiter.total_tokens)
            # liveness and another tenant's requests answer while every tail is still open
            # (each tail lasts BUDGET seconds: an answer is bound to come before they end)
            health = await client.get("/healthz")
            assert health.status_code == 200
            listed = await client.get("/v1/subjects/user:G1/memories", headers=GLOBEX)
            assert listed.status_code == 200, listed.text
            assert not any(r.is_closed for r in opened)
            # and an append wakes the waiting tails: the event reaches one of them
            published = await client.post(
                "/v1/events",
                headers=ACME,
                json={
                    "type": "ObservationRecorded",
                    "schema_version": 2,
                    "stream": "session:LIVE1",
                    "payload": {"text": "hello from the probe"},
                },
            )
            assert published.status_code == 202, published.text
            lines = opened[0].aiter_lines()
            while not (await anext(lines)).startswith("id: 1"):
                pass

    asyncio.run(scene())
