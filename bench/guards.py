"""Guard patterns under attack: `python -m bench.guards --out DIR [--quick]`.

Issue 16, finding 1: a constraint's guard pattern that is pathological for a backtracking
engine (`(a|a)*c`, `((a+))+c`) and a long run of 'a's in a model's answer froze a server
for seconds, `/healthz` with it. Guards run on RE2 now, in time linear in the text.

`mnemo serve` runs in a process of its own (hashing embedder, rate limits off) with one
such constraint in a context. This process then reports answers to that context through
`POST /v1/context/{id}/response`, one after the other, while a thread of its own polls
`/healthz` the whole time; each input ("review": the review's 22 'a's; "long": 100,000)
is one phase. Side by side in each phase, the same answers go in turn to a second context
whose guard is a plain pattern (`b+c`): the ratio of the two medians is what the
pathological patterns cost. `/healthz` is also measured alone first, on the same server,
and the two patterns' match alone in this process (`guards.match_only.*`). Latencies are
client-side wall clock, p50 and p99.

Aims (issue 16): every report answered within 50 ms (p99) and `/healthz` under 100 ms
(p99) meanwhile. Writes DIR/guards.json with each measurement, its aim and whether it was
met, and a `passed` verdict per aim.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench.common import Aim, Results, load_average, progress
from bench.distributed import Server, embedded_server
from mnemo.domain.patterns import linear_pattern

__all__ = ["INPUTS", "PATTERNS", "main", "run_guards"]

PATTERNS = ("(a|a)*c", "((a+))+c")
PLAIN = ("b+c",)
INPUTS = {"review": "a" * 22, "long": "a" * 100_000}
REPORT_AIM = Aim("<", 50.0, "a report against pathological guard patterns within 50 ms (p99)")
HEALTH_AIM = Aim("<", 100.0, "/healthz under 100 ms while those reports run (p99)")
TENANT = "bench-guards"


def _guarded_context(server: Server, stream: str, patterns: tuple[str, ...]) -> str:
    """A constraint guarded by `patterns` in `stream`, and a context that shows it."""
    headers = server.headers(TENANT)
    declared = {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": stream,
        "payload": {
            "memory": {
                "type": "constraint",
                "content": "Never offer credit to minors.",
                "guard": {"rule_id": "no-credit", "patterns": list(patterns)},
            }
        },
    }
    r = server.http.post("/v1/events?wait=registered", json=declared, headers=headers)
    if r.status_code != 202 or r.json()["accepted"][0]["outcomes"][0]["outcome"] != "registered":
        raise RuntimeError(f"the guarded constraint was not registered: {r.text}")
    ctx = server.http.post("/v1/context", json={"subjects": [stream]}, headers=headers)
    if ctx.status_code != 200:
        raise RuntimeError(f"context answered {ctx.status_code}: {ctx.text}")
    return str(ctx.json()["request_id"])


class _HealthPoller:
    """Polls /healthz back to back on a connection of its own until stopped."""

    def __init__(self, url: str) -> None:
        self.samples: list[float] = []
        self.failures = 0
        self._url = url
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="healthz", daemon=True)

    def _run(self) -> None:
        with httpx.Client(base_url=self._url, timeout=30) as http:
            while not self._stop.is_set():
                started = time.perf_counter()
                try:
                    ok = http.get("/healthz").status_code == 200
                except httpx.HTTPError:
                    ok = False
                self.samples.append(time.perf_counter() - started)
                self.failures += not ok

    def __enter__(self) -> _HealthPoller:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join(60)


def run_guards(results: Results, root: Path, reports: int, idle_checks: int) -> dict[str, Any]:
    """Measure into `results`; returns the facts the JSON records besides them."""
    facts: dict[str, Any] = {"statuses": {}, "healthz_failures": {}}
    for name, text in INPUTS.items():
        compiled = [linear_pattern(p) for p in PATTERNS]
        alone: list[float] = []
        for _ in range(reports):
            started = time.perf_counter()
            for pattern in compiled:
                pattern.search(text)
            alone.append(time.perf_counter() - started)
        results.add_latencies(f"guards.match_only.{name}", alone, {"characters": len(text)})
    with embedded_server(root, "hashing") as server:
        request_id = _guarded_context(server, "user:U1", PATTERNS)
        plain_id = _guarded_context(server, "user:U2", PLAIN)
        headers = server.headers(TENANT)
        idle: list[float] = []
        for _ in range(idle_checks):
            started = time.perf_counter()
            server.http.get("/healthz")
            idle.append(time.perf_counter() - started)
        results.add_latencies("guards.healthz.idle", idle, {"phase": "idle"})
        for name, text in INPUTS.items():
            progress("guards", f"{reports} reports of {len(text):,} characters")
            took: dict[str, list[float]] = {request_id: [], plain_id: []}
            statuses: dict[int, int] = {}
            with _HealthPoller(server.url) as health:
                for i in range(reports):
                    # the two contexts in turn, each first every other time
                    for target in (request_id, plain_id)[:: 1 if i % 2 == 0 else -1]:
                        started = time.perf_counter()
                        r = server.http.post(
                            f"/v1/context/{target}/response",
                            json={"response": text},
                            headers=headers,
                        )
                        took[target].append(time.perf_counter() - started)
                        if target == request_id:
                            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            params = {"input": name, "characters": len(text), "patterns": list(PATTERNS)}
            hard = results.add_latencies(
                f"guards.report.{name}", took[request_id], params, REPORT_AIM
            )
            plain = results.add_latencies(
                f"guards.report_plain_guard.{name}",
                took[plain_id],
                {**params, "patterns": list(PLAIN)},
            )
            results.add(
                f"guards.report_ratio.{name}",
                "ratio",
                round(hard["p50"] / plain["p50"], 3),
                {**params, "of": "p50 pathological / p50 plain guard"},
            )
            results.add_latencies(
                f"guards.healthz.during_{name}", health.samples, params, HEALTH_AIM
            )
            facts["statuses"][name] = {str(k): v for k, v in sorted(statuses.items())}
            facts["healthz_failures"][name] = health.failures
        # the guard still holds: an answer that matches it is refused
        broken = server.http.post(
            f"/v1/context/{request_id}/response",
            json={"response": "a" * 1_000 + "c"},
            headers=headers,
        )
        facts["matching_answer"] = {
            "status": broken.status_code,
            "code": broken.json().get("error", {}).get("code"),
        }
    return facts


def _verdict(results: Results, facts: dict[str, Any]) -> dict[str, bool]:
    def met(prefix: str) -> bool:
        found = [m for m in results.measurements if m.name.startswith(prefix) and m.aim]
        return bool(found) and all(m.aim is not None and m.aim.met(m.value) for m in found)

    answered = all(set(s) == {"200"} for s in facts["statuses"].values())
    healthy = not any(facts["healthz_failures"].values())
    return {
        "report_within_50ms": met("guards.report.") and answered,
        "healthz_within_100ms": met("guards.healthz.during_") and healthy,
        "guard_still_refuses_a_match": facts["matching_answer"]["code"] == "CONSTRAINT_VIOLATION",
    }


def summary(results: Results, verdict: dict[str, bool]) -> str:
    lines = ["", "Guard patterns under attack (RE2)", "================================="]
    for m in results.measurements:
        if m.name.endswith((".p50", ".p99")) or m.unit == "ratio":
            aim = ""
            if m.aim is not None:
                aim = f"  aim < {m.aim.target:g} ms: {'met' if m.aim.met(m.value) else 'NOT MET'}"
            lines.append(f"  {m.name:<42} {m.value:>9.2f} {m.unit}{aim}")
    lines.extend(f"  {k}: {'pass' if v else 'FAIL'}" for k, v in verdict.items())
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.guards", description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("bench/results"), help="results directory")
    ap.add_argument("--quick", action="store_true", help="fewer requests: a check that it runs")
    ap.add_argument("--reports", type=int, help="reports per input (200; 30 with --quick)")
    args = ap.parse_args(argv)
    reports = args.reports or (30 if args.quick else 200)
    started = datetime.now(UTC)
    load_start = load_average()
    results = Results()
    with tempfile.TemporaryDirectory(prefix="mnemo-bench-guards-") as tmp:
        facts = run_guards(results, Path(tmp), reports, idle_checks=reports)
    verdict = _verdict(results, facts)
    report = {
        "suite": "guards",
        "format": 1,
        "issue": 16,
        "started_at": started.isoformat(),
        "finished_at": datetime.now(UTC).isoformat(),
        "command": " ".join([Path(sys.executable).name, "-m", "bench.guards", *sys.argv[1:]]),
        "options": {"quick": args.quick, "reports": reports, "patterns": list(PATTERNS)},
        "machine": {"load_average_start": load_start, "load_average_end": load_average()},
        "passed": verdict,
        **facts,
        "notes": [
            "Client-side wall clock over loopback from one process: the report requests run "
            "one after another while another thread polls /healthz back to back.",
            "guards.healthz.idle is the same server's /healthz with nothing else running, "
            "measured first, for comparison.",
            "The machine is shared and noisy: the load average at start and end is recorded.",
        ],
        "measurements": [m.as_json() for m in results.measurements],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / "guards.json"
    out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(summary(results, verdict))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
