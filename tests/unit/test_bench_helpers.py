"""The benchmarks' pure helpers: percentiles, pacing, ratios, lag recovery, the guard
benchmark's verdict."""

from __future__ import annotations

import math
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from bench.common import Results, latency_summary, percentile, ratio_summary
from bench.distributed import Options, pace, recovery, subject_batches, summary


def test_percentile_interpolates_between_closest_ranks() -> None:
    values = [1.0, 2.0, 3.0, 4.0]
    assert percentile(values, 0) == 1.0
    assert percentile(values, 50) == 2.5
    assert percentile(values, 100) == 4.0
    assert percentile([7.0], 99) == 7.0
    assert math.isnan(percentile([], 50))


def test_latency_summary_reports_milliseconds() -> None:
    summary = latency_summary([0.001 * i for i in range(1, 101)])
    assert summary["p50"] == pytest.approx(50.5)
    assert summary["p99"] == pytest.approx(99.01)
    assert summary["max"] == pytest.approx(100.0)


@pytest.mark.parametrize("rate", [0.5, 3.0, 47.0, 850.0, 12_345.0])
def test_pace_keeps_the_rate_exactly(rate: float) -> None:
    batch, interval = pace(rate)
    assert batch >= 1
    assert batch / interval == pytest.approx(rate)
    assert interval >= 0.05 or batch > 1


def test_pace_refuses_a_rate_of_zero() -> None:
    with pytest.raises(ValueError, match="positive"):
        pace(0)


def test_ratio_summary_gives_the_median_of_per_round_ratios() -> None:
    out = ratio_summary([10.0, 30.0, 20.0], [20.0, 30.0, 10.0])
    assert out["per_round"] == [0.5, 1.0, 2.0]
    assert out["median"] == 1.0
    assert (out["min"], out["max"]) == (0.5, 2.0)
    assert (out["p25"], out["p75"]) == (0.75, 1.5)
    noisy = ratio_summary([10.0, 10.0, 10.0, 10.0, 1.0], [10.0, 10.0, 10.0, 10.0, 10.0])
    assert noisy["median"] == 1.0  # one slow round does not move it
    assert noisy["p25"] == 1.0
    with pytest.raises(ValueError, match="same"):
        ratio_summary([1.0], [])


def test_recovery_counts_from_the_restart_to_the_first_low_sample() -> None:
    series = [(0.0, 0), (1.0, 40), (2.0, 90), (3.0, 60), (4.0, 3), (5.0, 0), (6.0, 2)]
    assert recovery(series, since=2.0) == 3.0
    assert recovery(series, since=2.0, threshold=5) == 2.0
    # a sample before the restart does not count, however low
    assert recovery(series, since=0.5) == 4.5
    assert recovery(series[:4], since=2.0) is None


def _guard_results(report_p99_ms: float, health_p99_ms: float) -> Results:
    from bench.guards import HEALTH_AIM, REPORT_AIM

    results = Results()
    results.add("guards.report.long.p99", "ms", report_p99_ms, aim=REPORT_AIM)
    results.add("guards.healthz.during_long.p99", "ms", health_p99_ms, aim=HEALTH_AIM)
    return results


def _guard_facts(status: str = "200", failures: int = 0) -> dict[str, Any]:
    return {
        "statuses": {"long": {status: 30}},
        "healthz_failures": {"long": failures},
        "matching_answer": {"status": 422, "code": "CONSTRAINT_VIOLATION"},
    }


def test_the_guard_benchmark_passes_only_within_both_aims_and_with_every_answer() -> None:
    from bench.guards import _verdict

    assert _verdict(_guard_results(20.0, 40.0), _guard_facts()) == {
        "report_within_50ms": True,
        "healthz_within_100ms": True,
        "guard_still_refuses_a_match": True,
    }
    assert not _verdict(_guard_results(50.0, 40.0), _guard_facts())["report_within_50ms"]
    assert not _verdict(_guard_results(20.0, 100.0), _guard_facts())["healthz_within_100ms"]
    # a fast answer that is an error, or a /healthz that failed, is no pass
    assert not _verdict(_guard_results(20.0, 40.0), _guard_facts("500"))["report_within_50ms"]
    failed = _verdict(_guard_results(20.0, 40.0), _guard_facts(failures=1))
    assert not failed["healthz_within_100ms"]


def test_subject_batches_keep_each_request_under_the_subject_limit_and_streams_in_order() -> None:
    events = [{"stream": f"user:S{i % 50:02d}", "n": i} for i in range(200)]
    parts = subject_batches(events, limit=32)
    assert [len({e["stream"] for e in p}) for p in parts] == [32, 18]
    assert sorted(e["n"] for p in parts for e in p) == list(range(200))
    for stream in {e["stream"] for e in events}:
        sent = [e["n"] for p in parts for e in p if e["stream"] == stream]
        assert sent == sorted(sent)  # a stream's events keep their order
    assert subject_batches([], limit=32) == []


def _options(parts: list[str], embedded: int | None) -> Options:
    return Options(
        events=10,
        rounds=1,
        freshness_seconds=1.0,
        outage_seconds=1.0,
        context_size=100_000,
        context_queries=10,
        context_load_limit=1.0,
        embedder="hashing",
        partitions=1,
        parts=parts,
        context_embedded_size=embedded,
    )


def test_context_sizes_default_to_the_same_size_in_both_modes() -> None:
    opts = _options(["context"], None)
    assert opts.context_sizes() == {"embedded": 100_000, "distributed": 100_000}
    assert opts.needs_embedded()


def test_a_context_part_without_embedded_side_starts_no_embedded_server() -> None:
    alone = _options(["context"], 0)
    assert alone.context_sizes() == {"embedded": 0, "distributed": 100_000}
    assert not alone.needs_embedded()
    smaller = _options(["context"], 5_000)
    assert smaller.context_sizes()["embedded"] == 5_000
    assert smaller.needs_embedded()
    # the ingest and freshness parts compare the modes: the embedded server is still needed
    assert _options(["ingest", "context"], 0).needs_embedded()


def test_the_summary_shows_the_sizes_on_the_way_and_the_baseline_side_by_side() -> None:
    results = Results()
    for prefix, ms in (("distributed.context.at_20000", 0.05), ("distributed.context", 0.1)):
        results.add_latencies(f"{prefix}.latency.distributed", [ms] * 10, {"size": 1})
        results.add_latencies(f"{prefix}.latency.distributed-baseline", [2 * ms] * 10, {"size": 1})
        results.add(f"{prefix}.latency.ratio_to_baseline.p99", "x", 0.5)
    text = summary(results, _options(["context"], 0))
    lines = {ln.split("  ")[1].strip(): ln for ln in text.splitlines() if ln.startswith("  ")}
    assert "100.00 ms" in lines["context p99, distributed at 1"]
    assert "200.00 ms" in lines["context p99, distributed-baseline at 1"]
    assert "0.50 x" in lines["context p99, distributed / baseline"]
    assert "50.00 ms" in lines["context p99, distributed at 20,000"]
    assert "100.00 ms" in lines["context p99, distributed-baseline at 20,000"]


def test_a_report_with_a_path_option_is_written() -> None:
    """`bench.run --context-baseline CHECKOUT` keeps a path among the options: the report
    is still written (it raised TypeError after the measurements, losing the run)."""
    import json
    from pathlib import Path

    from bench.common import report_text

    text = report_text({"options": {"context_baseline": Path("/srv/main"), "quick": True}})
    assert text.endswith("\n")
    assert json.loads(text)["options"] == {"context_baseline": "/srv/main", "quick": True}


class _RecordingServer:
    """A stand-in for a deployment in the ingest rounds: it records what it is asked."""

    def __init__(self, mode: str, calls: list[tuple[str, str, tuple[str, ...]]]) -> None:
        self.mode = mode
        self.calls = calls

    def publish(self, tenant: str, events: list[dict[str, Any]]) -> None:
        self.calls.append((self.mode, "publish", ()))

    def wait_caught_up(
        self, consumers: tuple[str, ...] = ("registrar", "indexer"), timeout: float = 600.0
    ) -> None:
        self.calls.append((self.mode, "wait", tuple(consumers)))


def test_an_ingest_round_lets_every_consumer_finish_before_the_other_mode_starts() -> None:
    from bench.distributed import Texts, _ingest_rounds

    calls: list[tuple[str, str, tuple[str, ...]]] = []
    servers = {m: _RecordingServer(m, calls) for m in ("embedded", "distributed")}
    opts = Options(
        events=40, rounds=2, freshness_seconds=1, outage_seconds=1, context_size=0,
        context_queries=0, context_load_limit=1, embedder="hashing", partitions=1,
        parts=["ingest"],
    )  # fmt: skip
    results = Results()
    _ingest_rounds(results, servers, opts, Texts(50), (0, "", 1, "hashing"))  # type: ignore[arg-type]
    # each mode's turn: publish, the timed wait (registrar and indexer), then an untimed
    # wait for all four consumers, before the other mode publishes
    turns = [calls[i : i + 3] for i in range(0, len(calls), 3)]
    assert [t[0][0] for t in turns] == ["embedded", "distributed", "distributed", "embedded"]
    for turn in turns:
        mode = turn[0][0]
        assert [c[:2] for c in turn] == [(mode, "publish"), (mode, "wait"), (mode, "wait")]
        assert set(turn[1][2]) == {"registrar", "indexer"}
        assert set(turn[2][2]) == {"registrar", "indexer", "decay", "audit"}
    rate = next(m for m in results.measurements if m.name == "distributed.ingest.rate.embedded")
    assert len(rate.params["settle_seconds_per_round"]) == 2


def test_a_baseline_checkout_is_what_its_process_imports(tmp_path: Path) -> None:
    import os
    import sys

    from bench.distributed import check_checkout_imports, checkout_env

    other = tmp_path / "other"
    for folder in (other / "shared" / "mnemo", other / "services" / "gateway" / "mnemo_gateway"):
        folder.mkdir(parents=True)
        (folder / "__init__.py").write_text("")
    env = {**os.environ, **checkout_env(other, "mnemo_gateway")}
    check_checkout_imports(other, "mnemo_gateway", env, tmp_path)
    found = subprocess.run(
        [sys.executable, "-c", "import mnemo; print(mnemo.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(found).resolve() == (other / "shared" / "mnemo" / "__init__.py").resolve()
    # without its folders on the path, a process imports this checkout: refused
    with pytest.raises(RuntimeError, match="not what a process would import"):
        check_checkout_imports(other, "mnemo_gateway", dict(os.environ), tmp_path)
    # a checkout without the service's sources: refused too
    (other / "services" / "gateway" / "mnemo_gateway" / "__init__.py").unlink()
    (other / "services" / "gateway" / "mnemo_gateway").rmdir()
    with pytest.raises(RuntimeError, match="not what a process would import"):
        check_checkout_imports(other, "mnemo_gateway", env, tmp_path)


def test_the_freshness_probes_of_samples_taken_together_all_search_at_once() -> None:
    # a probe that waited for a free thread would add its wait to the freshness it reports:
    # twelve samples taken together search side by side (the barrier needs all twelve)
    from bench.distributed import Prober

    together = threading.Barrier(12, timeout=10)

    class _Answer:
        status_code = 200

        def __init__(self, word: str) -> None:
            self.word = word

        def json(self) -> dict[str, Any]:
            return {"hits": [{"memory": {"content": f"found {self.word}"}}]}

    class _Http:
        def post(self, path: str, json: dict[str, Any], headers: dict[str, str]) -> _Answer:
            together.wait()
            return _Answer(json["query"])

    class _Server:
        http = _Http()

        def headers(self, tenant: str) -> dict[str, str]:
            return {}

    prober = Prober(_Server(), "t", poll=0.01)  # type: ignore[arg-type]
    now = time.monotonic()
    for n in range(12):
        prober.sample("user:U1", f"w{n}", now)
    prober.finish()
    assert len(prober.latencies) == 12
    assert prober.missed == 0
    assert len(prober.start_delays) == 12
    assert max(prober.start_delays) < max(prober.latencies)


def test_a_freshness_probe_searches_less_often_the_longer_it_has_waited() -> None:
    # a probe's pause grows with the time since the publish, so the reading is at most that
    # share late and a platform that falls behind is not searched fifty times a second per
    # probe in flight
    from bench.distributed import Prober

    prober = Prober(object(), "t", poll=0.02, backoff=0.1)  # type: ignore[arg-type]
    assert prober.pause(0.05) == pytest.approx(0.02)
    assert prober.pause(1.0) == pytest.approx(0.1)
    assert prober.pause(5.0) == pytest.approx(0.5)
    fixed = Prober(object(), "t", poll=0.02, backoff=0.0)  # type: ignore[arg-type]
    assert fixed.pause(5.0) == pytest.approx(0.02)
    with pytest.raises(ValueError, match="backoff not negative"):
        Prober(object(), "t", poll=0.02, backoff=-0.1)  # type: ignore[arg-type]


def test_a_freshness_run_lets_every_consumer_finish_before_the_other_mode_starts() -> None:
    from bench.distributed import Texts, _freshness

    calls: list[tuple[str, str, tuple[str, ...]]] = []

    class _Found:
        status_code = 200

        def __init__(self, word: str) -> None:
            self.word = word

        def json(self) -> dict[str, Any]:
            return {"hits": [{"memory": {"content": self.word}}]}

    class _Searching(_RecordingServer):
        def __init__(self, mode: str) -> None:
            super().__init__(mode, calls)
            self.http = self

        def post(self, path: str, json: dict[str, Any], headers: dict[str, str]) -> _Found:
            return _Found(json["query"])

        def headers(self, tenant: str) -> dict[str, str]:
            return {}

    servers = {m: _Searching(m) for m in ("embedded", "distributed")}
    opts = Options(
        events=40, rounds=1, freshness_seconds=0.3, outage_seconds=1, context_size=0,
        context_queries=0, context_load_limit=1, embedder="hashing", partitions=1,
        parts=["freshness"], samples_per_second=20.0,
    )  # fmt: skip
    results = Results()
    _freshness(results, servers, opts, Texts(50), {"embedded": 100.0, "distributed": 50.0})  # type: ignore[arg-type]
    modes = [c[0] for c in calls]
    first_distributed = modes.index("distributed")
    assert set(modes[:first_distributed]) == {"embedded"}
    assert calls[first_distributed - 1] == (
        "embedded",
        "wait",
        ("registrar", "indexer", "decay", "audit"),
    )
    assert calls[-1][1:] == ("wait", ("registrar", "indexer", "decay", "audit"))
