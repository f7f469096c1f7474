"""Tool results next to plain memory declarations, in one run on one embedded platform.

`python -m bench.tool_results --out DIR [--quick] [--count 10000]` writes
DIR/tool_results.json. Both sides take turns in rounds (the order alternating from round
to round, so drift in the machine's load spreads over both), on user streams (so both are
sealed whole, as agents' events are):

* tool_result: `Mnemo.record_tool_result` one call per result (a structured CRM-like
  result, fresh for an hour): the arguments and the result turned into JSON text,
  checked, sealed and appended;
* declared: `Mnemo.publish` of one `MemoryDeclared` per call, with a key and a value.

Each side's per-call latency (the call returns once the event is in the log) is reported
as p50/p90/p99, and its throughput as events per second from the round's first call until
the consumers (registration, indexing with the hashing embedder, decay, audit) have
handled the round (EmbeddedRunner.drain on the calling thread). The hashing embedder keeps
the comparison about what differs (registration and the freshness timer), not embedding.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import Results, latency_summary, load_average, progress
from mnemo.bootstrap import build_embedded
from mnemo.service.app import RequestContext
from mnemo.settings import MnemoSettings

__all__ = ["main", "run_tool_results"]

TENANT = "bench-tools"
CTX = RequestContext(TENANT, "bench")
STREAMS = 20


def _declared(i: int) -> dict[str, Any]:
    return {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": f"user:B{i % STREAMS:03d}",
        "payload": {
            "memory": {"type": "fact", "key": f"deal.{i}", "value": f"stage {i % 7} of deal {i}"}
        },
    }


def _result(i: int) -> dict[str, Any]:
    return {
        "stage": ("lead", "qualified", "proposal_sent", "negotiation", "won")[i % 5],
        "amount": 1_000 + i,
        "owner": f"rep-{i % 13}",
        "updated": "2026-11-30T10:00:00+00:00",
    }


def run_tool_results(results: Results, data: Path, count: int, round_size: int) -> dict[str, Any]:
    platform = build_embedded(
        MnemoSettings(data_dir=data, embedder="hashing", sqlite_synchronous="NORMAL")
    )
    latencies: dict[str, list[float]] = {"tool_result": [], "declared": []}
    busy: dict[str, float] = {"tool_result": 0.0, "declared": 0.0}
    done: dict[str, int] = {"tool_result": 0, "declared": 0}
    try:
        rounds = max(1, count // round_size)
        for r in range(rounds):
            order = ("tool_result", "declared") if r % 2 == 0 else ("declared", "tool_result")
            for side in order:
                first = r * round_size
                started = time.perf_counter()
                for i in range(first, first + round_size):
                    t0 = time.perf_counter()
                    if side == "tool_result":
                        platform.app.record_tool_result(
                            CTX,
                            f"user:B{i % STREAMS:03d}",
                            tool="crm.get_deal",
                            arguments={"deal": f"D{i}"},
                            result=_result(i),
                            source="crm",
                            fresh_for_seconds=3_600,
                        )
                    else:
                        platform.app.publish(CTX, [_declared(i)])
                    latencies[side].append(time.perf_counter() - t0)
                platform.runner.drain()
                busy[side] += time.perf_counter() - started
                done[side] += round_size
            if r % 4 == 3:
                progress("tool_results", f"round {r + 1}/{rounds}")
        for side in ("tool_result", "declared"):
            params = {"events": done[side], "round_size": round_size, "embedder": "hashing"}
            results.add_latencies(f"tool_results.{side}.call", latencies[side], params)
            results.add(
                f"tool_results.{side}.throughput", "events/s", done[side] / busy[side], params
            )
        # what registration made of them: every tool result a memory with its deadline
        expired_timers = platform.store.due_timers(datetime(2200, 1, 1, tzinfo=UTC), 1_000_000)
        facts = {
            "rounds": rounds,
            "expiry_timers": sum(1 for t in expired_timers if t.kind == "expire"),
            "summaries_ms": {k: latency_summary(v) for k, v in latencies.items()},
        }
    finally:
        platform.close()
    return facts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true", help="1,000 of each")
    parser.add_argument("--count", type=int, default=10_000, help="events of each side")
    parser.add_argument("--round-size", type=int, default=500)
    args = parser.parse_args(argv)
    count = 1_000 if args.quick else args.count
    args.out.mkdir(parents=True, exist_ok=True)
    results = Results()
    tmp = Path(tempfile.mkdtemp(prefix="mnemo-bench-tools-"))
    started = datetime.now(UTC)
    load_start = load_average()
    t0 = time.perf_counter()
    try:
        progress("tool_results", f"{count:,} tool results and {count:,} declarations")
        facts = run_tool_results(results, tmp / "data", count, min(args.round_size, count))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    report = {
        "suite": "tool_results",
        "format": 1,
        "started_at": started.isoformat(),
        "elapsed_seconds": round(time.perf_counter() - t0, 1),
        "command": " ".join(["python", "-m", "bench.tool_results", *(argv or sys.argv[1:])]),
        "load_average": {"start": load_start, "end": load_average()},
        "facts": facts,
        "measurements": [m.as_json() for m in results.measurements],
    }
    (args.out / "tool_results.json").write_text(json.dumps(report, indent=2) + "\n")
    for m in results.measurements:
        if m.name.endswith((".p50", ".p99", ".throughput")):
            print(f"{m.name}: {m.value:.3f} {m.unit}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
