"""Tool results next to plain memory declarations, in one run on one embedded platform.

`python -m bench.tool_results --out DIR [--quick] [--count 10000] [--reads 1000]` writes
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

Then, on `mnemo serve` of its own (embedded, hashing embedder, rate limits off), reading
toolchain states over HTTP next to reading plain memories, in alternating rounds too:

* toolchain_get: `GET /v1/toolchains/{id}` of toolchains started through
  `POST /v1/toolchains`, each with its first step completed and every other one's second
  step failed (so a read folds a start, a completion and sometimes a failure);
* memory_get: `GET /v1/memories/{id}` of memories declared on the same subjects.

Each read is checked (status 200, the state or memory expected); per-read p50/p90/p99 and
reads per second are reported.
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
from bench.distributed import Server, embedded_server
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


STEPS = ["create_order", "payment_link", "confirm_payment"]


def _prepare_reads(server: Server, chains: int) -> tuple[list[str], list[str]]:
    """`chains` toolchains with recorded steps and as many declared memories, by id."""
    headers = server.headers(TENANT)
    chain_ids: list[str] = []
    for i in range(chains):
        chain_id = f"checkout-{i}"
        subject = f"user:T{i % STREAMS:03d}"
        r = server.http.post(
            "/v1/toolchains",
            json={"toolchain_id": chain_id, "subject": subject, "steps": STEPS},
            headers=headers,
        )
        if r.status_code != 201:
            raise RuntimeError(f"starting {chain_id} answered {r.status_code}: {r.text}")
        r = server.http.post(
            f"/v1/toolchains/{chain_id}/steps/create_order",
            json={"status": "completed", "output": {"order_id": f"O-{i}", "amount": 1_000 + i}},
            headers=headers,
        )
        if r.status_code != 201:
            raise RuntimeError(f"completing {chain_id} answered {r.status_code}: {r.text}")
        if i % 2:
            r = server.http.post(
                f"/v1/toolchains/{chain_id}/steps/payment_link",
                json={
                    "status": "failed",
                    "error": {"type": "unavailable", "reason": "PSP down", "retryable": True},
                },
                headers=headers,
            )
            if r.status_code != 201:
                raise RuntimeError(f"failing {chain_id} answered {r.status_code}: {r.text}")
        chain_ids.append(chain_id)
        declared = _declared(i)
        declared["stream"] = subject
        r = server.http.post(
            "/v1/events?wait=registered", json={"events": [declared]}, headers=headers
        )
        if r.status_code != 202:
            raise RuntimeError(f"declaring answered {r.status_code}: {r.text}")
    memory_ids: list[str] = []
    for n in range(min(chains, STREAMS)):
        r = server.http.get(
            f"/v1/subjects/user:T{n:03d}/memories", params={"limit": 1000}, headers=headers
        )
        if r.status_code != 200:
            raise RuntimeError(f"listing memories answered {r.status_code}: {r.text}")
        memory_ids.extend(str(m["memory_id"]) for m in r.json()["memories"])
    if len(memory_ids) != chains:
        raise RuntimeError(f"{chains} memories declared, {len(memory_ids)} listed")
    return chain_ids, memory_ids


def run_toolchain_reads(
    results: Results, root: Path, reads: int, chains: int, round_size: int
) -> dict[str, Any]:
    """`reads` toolchain-state reads next to as many memory reads, over HTTP."""
    latencies: dict[str, list[float]] = {"toolchain_get": [], "memory_get": []}
    busy: dict[str, float] = {"toolchain_get": 0.0, "memory_get": 0.0}
    with embedded_server(root, "hashing") as server:
        t0 = time.perf_counter()
        chain_ids, memory_ids = _prepare_reads(server, chains)
        prepare_seconds = time.perf_counter() - t0
        headers = server.headers(TENANT)
        rounds = max(1, reads // round_size)
        for r in range(rounds):
            order = (
                ("toolchain_get", "memory_get") if r % 2 == 0 else ("memory_get", "toolchain_get")
            )
            for side in order:
                started = time.perf_counter()
                for i in range(r * round_size, (r + 1) * round_size):
                    if side == "toolchain_get":
                        n = i % len(chain_ids)
                        t = time.perf_counter()
                        answer = server.http.get(f"/v1/toolchains/{chain_ids[n]}", headers=headers)
                        latencies[side].append(time.perf_counter() - t)
                        state = answer.json() if answer.status_code == 200 else {}
                        expected = ("failed" if n % 2 else "running", "payment_link")
                        if (state.get("status"), state.get("next_step")) != expected:
                            raise RuntimeError(
                                f"{chain_ids[n]}: {answer.status_code} {answer.text}"
                            )
                    else:
                        memory_id = memory_ids[i % len(memory_ids)]
                        t = time.perf_counter()
                        answer = server.http.get(f"/v1/memories/{memory_id}", headers=headers)
                        latencies[side].append(time.perf_counter() - t)
                        if answer.status_code != 200 or answer.json()["memory_id"] != memory_id:
                            raise RuntimeError(f"{memory_id}: {answer.status_code} {answer.text}")
                busy[side] += time.perf_counter() - started
            if r % 4 == 3:
                progress("tool_results", f"read round {r + 1}/{rounds}")
    for side in ("toolchain_get", "memory_get"):
        params = {"reads": len(latencies[side]), "round_size": round_size, "chains": chains}
        results.add_latencies(f"tool_results.{side}.call", latencies[side], params)
        results.add(
            f"tool_results.{side}.throughput", "reads/s", len(latencies[side]) / busy[side], params
        )
    return {
        "read_rounds": rounds,
        "toolchains": len(chain_ids),
        "memories_read": len(memory_ids),
        "prepare_seconds": round(prepare_seconds, 1),
        "read_summaries_ms": {k: latency_summary(v) for k, v in latencies.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--quick", action="store_true", help="1,000 results, 200 reads of each")
    parser.add_argument("--count", type=int, default=10_000, help="events of each side")
    parser.add_argument("--round-size", type=int, default=500)
    parser.add_argument("--reads", type=int, default=1_000, help="reads of each side")
    parser.add_argument("--chains", type=int, default=100, help="toolchains read in turn")
    args = parser.parse_args(argv)
    count = 1_000 if args.quick else args.count
    reads = 200 if args.quick else args.reads
    chains = min(args.chains, 40) if args.quick else args.chains
    args.out.mkdir(parents=True, exist_ok=True)
    results = Results()
    tmp = Path(tempfile.mkdtemp(prefix="mnemo-bench-tools-"))
    started = datetime.now(UTC)
    load_start = load_average()
    t0 = time.perf_counter()
    try:
        progress("tool_results", f"{count:,} tool results and {count:,} declarations")
        facts = run_tool_results(results, tmp / "data", count, min(args.round_size, count))
        progress("tool_results", f"{reads:,} toolchain reads and {reads:,} memory reads")
        facts.update(run_toolchain_reads(results, tmp / "serve", reads, chains, min(100, reads)))
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
