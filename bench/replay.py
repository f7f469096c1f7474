"""Replay: reading one long stream back in pages of 1,000.

The stream is written straight into the SqliteEventLog (MemoryDeclared envelopes, batches
of 1,000; no consumers run). Then three read paths take turns, several passes each:

* Mnemo.replay: the use case (parses every stored event into an Envelope);
* SqliteEventLog.read_raw_stream: the stored JSON as bytes, what an HTTP replay could send
  without parsing;
* gateway body: Mnemo.replay plus what the gateway's replay endpoint does with the page
  (model_dump(mode="json") per event, then orjson.dumps), without HTTP itself.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

import orjson

from bench.common import Aim, Results, progress
from bench.corpus import memory_texts
from mnemo.adapters.sqlite_log import SqliteEventLog
from mnemo.bootstrap import build_embedded
from mnemo.domain.events import validate_envelope
from mnemo.domain.ids import uuid7_at
from mnemo.service.app import RequestContext
from mnemo.settings import MnemoSettings

__all__ = ["run_replay"]

TENANT = "bench-replay"
STREAM = "user:replay"
PAGE = 1_000
APPEND_BATCH = 1_000
RATE_AIM = Aim(">", 20_000.0, "replay faster than 20,000 events/s")


def _append(log: SqliteEventLog, n: int) -> tuple[float, float]:
    texts = memory_texts(500, seed=99)
    start = datetime(2025, 1, 1, tzinfo=UTC)
    build_s = append_s = 0.0
    last = time.perf_counter()
    for first in range(0, n, APPEND_BATCH):
        t0 = time.perf_counter()
        batch = []
        for i in range(first, min(n, first + APPEND_BATCH)):
            at = start + timedelta(seconds=i)
            batch.append(
                validate_envelope(
                    {
                        "event_id": str(
                            uuid7_at(int(at.timestamp() * 1000), i.to_bytes(10, "big"))
                        ),
                        "type": "MemoryDeclared",
                        "schema_version": 1,
                        "tenant": TENANT,
                        "stream": STREAM,
                        "occurred_at": at.isoformat(),
                        "actor": {"kind": "agent", "id": "bench"},
                        "payload": {
                            "memory": {
                                "type": "episode",
                                "content": f"{texts[i % len(texts)]} [{i}]",
                                "tags": ["replay"],
                            }
                        },
                    }
                )
            )
        t1 = time.perf_counter()
        log.append(batch)
        t2 = time.perf_counter()
        build_s += t1 - t0
        append_s += t2 - t1
        if time.perf_counter() - last > 10:
            progress("replay", f"appended {first + len(batch):,}/{n:,}")
            last = time.perf_counter()
    return build_s, append_s


def run_replay(results: Results, *, events: int, passes: int, data_dir: Path) -> None:
    path = data_dir / "replay"
    # the hashing embedder: nothing here embeds, and it loads no model
    platform = build_embedded(MnemoSettings(data_dir=path, embedder="hashing"))
    log = platform.log
    assert isinstance(log, SqliteEventLog)
    app = platform.app
    ctx = RequestContext(tenant=TENANT, principal="bench")
    try:
        build_s, append_s = _append(log, events)
        results.add(
            "log.append_rate",
            "events/s",
            round(events / append_s, 1),
            {
                "events": events,
                "batch": APPEND_BATCH,
                "call": "SqliteEventLog.append (envelopes already validated)",
                "sqlite_synchronous": platform.settings.sqlite_synchronous,
                "validate_seconds": round(build_s, 3),
            },
        )
        progress("replay", f"{events:,} events appended in {append_s:.1f}s; reading back")

        def via_replay() -> int:
            seen, seq = 0, 1
            while page := app.replay(ctx, STREAM, seq, PAGE):
                seen += len(page)
                seq = (page[-1].envelope.seq or 0) + 1
            return seen

        def via_raw() -> int:
            seen, seq = 0, 1
            while page := log.read_raw_stream(TENANT, STREAM, seq, PAGE):
                seen += len(page)
                seq += len(page)  # sequences are gapless
            return seen

        def via_gateway_body() -> int:
            seen, seq = 0, 1
            while page := app.replay(ctx, STREAM, seq, PAGE):
                body = {
                    "events": [e.envelope.model_dump(mode="json") for e in page],
                    "next": (page[-1].envelope.seq or 0) + 1,
                }
                orjson.dumps(body)
                seen += len(page)
                seq = body["next"]
            return seen

        paths: dict[str, Callable[[], int]] = {
            "mnemo_replay": via_replay,
            "raw_stream": via_raw,
            "gateway_body": via_gateway_body,
        }
        via_raw()  # warm the page cache once, untimed
        rates: dict[str, list[float]] = {name: [] for name in paths}
        names = list(paths)
        for p in range(passes):
            for name in names[p % 3 :] + names[: p % 3]:
                t0 = time.perf_counter()
                seen = paths[name]()
                dt = time.perf_counter() - t0
                if seen != events:
                    raise RuntimeError(f"replay {name} saw {seen} events, expected {events}")
                rates[name].append(round(events / dt, 1))
            progress(
                "replay",
                f"pass {p + 1}/{passes}: " + ", ".join(f"{n} {rates[n][-1]:,.0f}/s" for n in names),
            )
        calls = {
            "mnemo_replay": "Mnemo.replay (parses each event into an Envelope)",
            "raw_stream": "SqliteEventLog.read_raw_stream (stored JSON bytes, no parsing)",
            "gateway_body": "Mnemo.replay + model_dump(mode='json') + orjson.dumps per page",
        }
        for name in names:
            results.add(
                f"replay.rate.{name}",
                "events/s",
                statistics.median(rates[name]),
                {
                    "events": events,
                    "page": PAGE,
                    "passes": passes,
                    "per_pass": rates[name],
                    "statistic": "median of passes",
                    "call": calls[name],
                },
                RATE_AIM if name != "gateway_body" else None,
            )
    finally:
        platform.close()
