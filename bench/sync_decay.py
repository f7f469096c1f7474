"""Sync and decay: how fast a device replica catches up, how soon a live tail sees a new
event, and what a decay scan costs with a million timers waiting.

* catch-up: a stream of published MemoryDeclared events plus what the registrar made of
  them; a SyncClient replica (SQLite) pulls it in pages over the in-process HTTP API, and,
  side by side, the same events folded straight from the log (no HTTP, no SQLite).
* live tail: a real server on loopback; a Server-Sent Events reader; events published one
  by one; latency from the publish call's return to the event's arrival.
* decay scan: 1,000,000 memories with timers in the store (written in bulk through the
  store's transaction), of which a known share is due; the time to find nothing due, and
  the rate at which due expiries are turned into events and projected.
"""

from __future__ import annotations

import socket
import tempfile
import threading
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import httpx
import orjson
import uvicorn
from fastapi.testclient import TestClient
from mnemo_gateway.app import create_app

from bench.common import Aim, Results, progress
from mnemo.adapters.clocks import FixedClock
from mnemo.bootstrap import Platform, build_embedded
from mnemo.client import MnemoClient
from mnemo.domain import replica
from mnemo.domain.ids import derived_id
from mnemo.domain.memory import Memory, MemoryType, Scope
from mnemo.domain.projection import PutMemory, PutTimer, Timer
from mnemo.service.app import RequestContext
from mnemo.settings import GatewaySettings, MnemoSettings
from mnemo.sync import SyncClient

__all__ = ["run_sync_decay"]

TENANT = "bench-sync"
# the benchmarks measure Mnemo, not the rate limiter
UNLIMITED = GatewaySettings(rate_tenant_per_second=0, rate_key_per_second=0)
CATCH_UP_AIM = Aim(">", 20_000.0, "a replica catches up faster than 20,000 events/s")
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _headers(platform: Platform) -> dict[str, str]:
    """A fresh API key of the benchmark tenant (made on first use)."""
    if platform.access.store.tenant(TENANT) is None:
        platform.access.create_tenant(TENANT, by="bench")
    issued = platform.access.issue_key(TENANT, "bench", ["memory:read", "memory:write"], by="bench")
    return {"Authorization": f"Bearer {issued.key}", "X-Mnemo-Principal": "bench"}


def _settings(root: Path, name: str) -> MnemoSettings:
    return MnemoSettings(data_dir=root / name, embedder="hashing", sqlite_synchronous="NORMAL")


def _catch_up(results: Results, root: Path, declared: int) -> None:
    platform = build_embedded(
        _settings(root, "catchup"), clock=FixedClock(T0), consumers=("registrar",)
    )
    ctx = RequestContext("bench-sync", "bench")
    stream = "user:catchup"
    progress("catch-up", f"writing {declared} declarations and registering them")
    for first in range(0, declared, 1_000):
        batch = [
            {
                "type": "MemoryDeclared",
                "schema_version": 1,
                "stream": stream,
                "payload": {
                    "memory": {"type": "preference", "key": f"k{i % 500}", "value": f"v{i}"}
                },
            }
            for i in range(first, min(declared, first + 1_000))
        ]
        platform.app.publish(ctx, batch)
        platform.runner.drain()
    head = platform.log.stream_head("bench-sync", stream)
    app = create_app(platform, UNLIMITED, run_consumers=False)
    with TestClient(app, headers=_headers(platform)) as client:
        for page in (1_000, 5_000):
            sdk = MnemoClient(str(client.base_url), http_client=client)
            device = SyncClient(root / f"device-{page}.sqlite3", sdk, stream, "bench")
            t0 = time.perf_counter()
            device.pull(page_size=page)
            took = time.perf_counter() - t0
            assert device.seq == head
            results.add(
                "sync.catch_up_rate",
                "events/s",
                round(head / took),
                {"events": head, "page": page, "path": "HTTP replay + SQLite replica"},
                CATCH_UP_AIM,
            )
            progress("catch-up", f"page {page}: {head / took:,.0f} events/s")
            checksum = device.checksum()
            device.close()
    t0 = time.perf_counter()
    raw = platform.log.read_stream_json("bench-sync", stream, 1, head)
    state = replica.fold(orjson.loads(body) for body in raw)
    fold_s = time.perf_counter() - t0
    results.add(
        "sync.fold_rate",
        "events/s",
        round(head / fold_s),
        {"events": head, "path": "log JSON -> fold, no HTTP"},
    )
    assert replica.checksum(state) == checksum
    platform.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _live_tail(results: Results, root: Path, events: int) -> None:
    platform = build_embedded(_settings(root, "live"))
    port = _free_port()
    server = uvicorn.Server(
        uvicorn.Config(
            create_app(platform, UNLIMITED), host="127.0.0.1", port=port, log_level="warning"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{port}"
    headers = _headers(platform)
    while True:
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                break
        except httpx.TransportError:
            time.sleep(0.05)
    stream = "user:live"
    arrived: dict[int, float] = {}
    ready = threading.Event()

    def read() -> None:
        with (
            httpx.Client(base_url=url, headers=headers, timeout=60) as c,
            c.stream("GET", f"/v1/subjects/{stream}/events/live", params={"max_seconds": 120}) as r,
        ):
            ready.set()
            for line in r.iter_lines():
                if line.startswith("id: "):
                    arrived[int(line[4:])] = time.perf_counter()
                if len(arrived) >= events:
                    return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    ready.wait(10)
    sent: dict[int, float] = {}
    with httpx.Client(base_url=url, headers=headers, timeout=30) as c:
        for i in range(events):
            body = {
                "type": "ObservationRecorded",
                "schema_version": 2,
                "stream": stream,
                "payload": {"text": f"hi {i}"},
            }
            r = c.post("/v1/events", json=body)
            sent[r.json()["accepted"][0]["seq"]] = time.perf_counter()
            time.sleep(0.01)
    reader.join(60)
    samples = [max(0.0, arrived[s] - t) for s, t in sent.items() if s in arrived]
    results.add_latencies(
        "sync.live_tail_latency", samples, {"events": events, "published": "one by one over HTTP"}
    )
    progress("live tail", f"{len(samples)} events seen")
    server.should_exit = True
    thread.join(10)
    platform.close()


def _decay_scan(results: Results, root: Path, total: int, due: int) -> None:
    clock = FixedClock(T0)
    platform = build_embedded(_settings(root, "decay"), clock=clock, consumers=("decay",))
    progress("decay", f"loading {total:,} memories with timers ({due:,} of them due)")
    t0 = time.perf_counter()
    batch: list[PutMemory | PutTimer] = []

    def flush() -> None:
        with platform.store.transaction() as tx:
            tx.apply(batch)
        batch.clear()

    for i in range(total):
        memory_id = derived_id(T0, "bench-decay", str(i))
        created = T0 - timedelta(days=1)
        valid_until = T0 + timedelta(minutes=1) if i < due else T0 + timedelta(days=30 + i % 300)
        memory = Memory(
            memory_id=memory_id,
            tenant="bench-decay",
            stream=f"user:U{i % 1_000}",
            type=MemoryType.CONTEXT,
            scope=Scope.USER,
            content=f"context {i}",
            created_at=created,
            valid_until=valid_until,
            source_event_id=memory_id,
            content_hash=f"h{i}",
        )
        batch.append(PutMemory(memory))
        batch.append(PutTimer(Timer("bench-decay", memory_id, valid_until, "expire")))
        if len(batch) >= 20_000:
            flush()
            if i % 200_000 < 10_000:
                progress("decay", f"{i + 1:,} loaded")
    flush()
    results.add("decay.load_seconds", "s", round(time.perf_counter() - t0, 1), {"memories": total})
    idle = []
    for _ in range(50):
        t1 = time.perf_counter()
        assert platform.runner.decay_scan() == 0
        idle.append(time.perf_counter() - t1)
    results.add_latencies("decay.idle_scan", idle, {"memories": total, "timers": total, "due": 0})
    clock.advance(timedelta(minutes=2))
    t1 = time.perf_counter()
    expired = 0
    while (n := platform.runner.decay_scan()) > 0:
        expired += n
    took = time.perf_counter() - t1
    assert expired == due
    results.add("decay.expiry_rate", "timers/s", round(due / took), {"memories": total, "due": due})
    progress(
        "decay", f"{due:,} expiries in {took:.1f} s; idle scan p50 {sorted(idle)[25] * 1000:.2f} ms"
    )
    platform.close()


def run_sync_decay(results: Results, *, quick: bool = False) -> None:
    with tempfile.TemporaryDirectory(prefix="mnemo-bench-sync-") as tmp:
        root = Path(tmp)
        _catch_up(results, root, 5_000 if quick else 25_000)
        _live_tail(results, root, 50 if quick else 300)
        _decay_scan(results, root, 50_000 if quick else 1_000_000, 1_000 if quick else 10_000)


if __name__ == "__main__":
    import json
    import sys

    out = Results()
    run_sync_decay(out, quick="--quick" in sys.argv)
    print(json.dumps([m.as_json() for m in out.measurements], indent=1))
