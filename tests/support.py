"""Test support: a real Mnemo server (embedded platform, gateway, uvicorn) on a free
loopback port, in a thread, for tests that talk to it over real HTTP."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import uvicorn
from mnemo_gateway.app import create_app

from mnemo.bootstrap import Platform, build_embedded
from mnemo.settings import GatewaySettings, MnemoSettings

__all__ = ["running_server", "wait_healthy"]


def wait_healthy(url: str, alive: Callable[[], bool], timeout: float = 60.0) -> None:
    """Poll /healthz until it answers 200; fail early when the server stopped."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert alive(), "the server stopped before it answered"
        try:
            if httpx.get(f"{url}/healthz", timeout=1.0).status_code == 200:
                return
        except httpx.TransportError:
            pass
        threading.Event().wait(0.02)  # the polling interval
    raise AssertionError(f"{url} did not become healthy within {timeout} s")


@contextmanager
def running_server(
    data: Path, gateway: GatewaySettings | None = None
) -> Iterator[tuple[str, Platform]]:
    """A server on its own data directory; yields (base URL, platform) and stops it after."""
    platform = build_embedded(
        MnemoSettings(data_dir=data, embedder="hashing", sqlite_synchronous="NORMAL")
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = int(sock.getsockname()[1])
    config = uvicorn.Config(
        create_app(platform, gateway or GatewaySettings()),
        host="127.0.0.1",
        port=port,
        log_level="warning",
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url, thread.is_alive)
        yield url, platform
    finally:
        server.should_exit = True
        thread.join(timeout=30)
        sock.close()
        platform.close()
