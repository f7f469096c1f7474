"""What every benchmark section shares: the results record, progress on stderr, latency
statistics, memory readings and two embedders that wrap or replace the real one."""

from __future__ import annotations

import json
import math
import os
import resource
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from mnemo.ports import Embedder

__all__ = [
    "Aim",
    "LookupEmbedder",
    "Measurement",
    "Results",
    "TimedEmbedder",
    "latency_summary",
    "percentile",
    "progress",
    "ratio_summary",
    "report_text",
    "rss_now_kib",
    "rss_peak_kib",
]

_T0 = time.perf_counter()


def progress(section: str, message: str) -> None:
    """One progress line on stderr, stamped with the seconds since the run started."""
    print(f"[{time.perf_counter() - _T0:7.1f}s] {section}: {message}", file=sys.stderr, flush=True)


# ---- results ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Aim:
    """A target a measurement should meet: `value <op> target`."""

    op: str  # "<" or ">"
    target: float
    text: str

    def met(self, value: float) -> bool:
        return value < self.target if self.op == "<" else value > self.target

    def as_json(self, value: float) -> dict[str, Any]:
        return {"op": self.op, "target": self.target, "text": self.text, "met": self.met(value)}


@dataclass
class Measurement:
    name: str
    unit: str
    value: float
    params: dict[str, Any] = field(default_factory=dict)
    aim: Aim | None = None

    def as_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "unit": self.unit,
            "value": self.value,
            "params": self.params,
            "aim": self.aim.as_json(self.value) if self.aim else None,
        }


@dataclass
class Results:
    measurements: list[Measurement] = field(default_factory=list)
    sections: dict[str, dict[str, Any]] = field(default_factory=dict)

    def add(
        self,
        name: str,
        unit: str,
        value: float,
        params: Mapping[str, Any] | None = None,
        aim: Aim | None = None,
    ) -> Measurement:
        m = Measurement(name, unit, float(value), dict(params or {}), aim)
        self.measurements.append(m)
        return m

    def add_latencies(
        self,
        name: str,
        samples_s: Sequence[float],
        params: Mapping[str, Any] | None = None,
        p99_aim: Aim | None = None,
    ) -> dict[str, float]:
        """p50, p90, p99, mean and max in milliseconds, one measurement each."""
        summary = latency_summary(samples_s)
        for stat in ("p50", "p90", "p99", "mean", "max"):
            self.add(
                f"{name}.{stat}",
                "ms",
                summary[stat],
                {**(params or {}), "samples": len(samples_s)},
                p99_aim if stat == "p99" else None,
            )
        return summary


# ---- statistics ------------------------------------------------------------------------------


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The q-th percentile (0-100) by linear interpolation between closest ranks (numpy's
    default), over values already sorted ascending."""
    if not sorted_values:
        return math.nan
    pos = (len(sorted_values) - 1) * q / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def ratio_summary(numerators: Sequence[float], denominators: Sequence[float]) -> dict[str, Any]:
    """Per-round ratios a/b with their median, quartiles (p25, p75), min and max: one noisy
    round moves the median little, and the quartiles show the spread."""
    if len(numerators) != len(denominators) or not numerators:
        raise ValueError("need the same, non-zero number of values on both sides")
    per_round = [a / b for a, b in zip(numerators, denominators, strict=True)]
    ratios = sorted(per_round)
    return {
        "per_round": [round(r, 4) for r in per_round],
        "median": round(percentile(ratios, 50), 4),
        "p25": round(percentile(ratios, 25), 4),
        "p75": round(percentile(ratios, 75), 4),
        "min": round(ratios[0], 4),
        "max": round(ratios[-1], 4),
    }


def latency_summary(samples_s: Sequence[float]) -> dict[str, float]:
    ms = sorted(s * 1000.0 for s in samples_s)
    return {
        "p50": round(percentile(ms, 50), 3),
        "p90": round(percentile(ms, 90), 3),
        "p99": round(percentile(ms, 99), 3),
        "mean": round(sum(ms) / len(ms), 3) if ms else math.nan,
        "max": round(ms[-1], 3) if ms else math.nan,
    }


# ---- memory ------------------------------------------------------------------------------------


def rss_now_kib() -> int:
    """Current resident set size (VmRSS) in KiB, from /proc/self/status."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return -1


def rss_peak_kib() -> int:
    """Peak resident set size of this process so far (ru_maxrss, KiB on Linux)."""
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def report_text(report: dict[str, Any]) -> str:
    """A report as the JSON file holds it; a value JSON has no type for (an option that is a
    path, such as --context-baseline) is written as its text."""
    return json.dumps(report, indent=2, ensure_ascii=False, default=str) + "\n"


def load_average() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


# ---- embedders -----------------------------------------------------------------------------------


class TimedEmbedder(Embedder):
    """Delegates to a real embedder and keeps the time spent inside it and the batch sizes it
    was given (one perf_counter pair per call: negligible next to an embedding call)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self._lock = threading.Lock()
        self.reset()

    def reset(self) -> None:
        with self._lock:
            self.seconds = 0.0
            self.texts = 0
            self.calls = 0
            self.batch_sizes: dict[int, int] = {}

    def embed_passages(self, texts: Sequence[str]) -> list[list[float]]:
        t0 = time.perf_counter()
        out = self.inner.embed_passages(texts)
        dt = time.perf_counter() - t0
        with self._lock:
            self.seconds += dt
            self.texts += len(texts)
            self.calls += 1
            self.batch_sizes[len(texts)] = self.batch_sizes.get(len(texts), 0) + 1
        return out

    def embed_query(self, text: str) -> list[float]:
        return self.inner.embed_query(text)

    @contextmanager
    def window(self) -> Iterator[dict[str, Any]]:
        """Counts what was embedded inside the `with` block (into the yielded dict)."""
        before = (self.seconds, self.texts, self.calls)
        out: dict[str, Any] = {}
        yield out
        out["embed_seconds"] = self.seconds - before[0]
        out["embedded_texts"] = self.texts - before[1]
        out["embed_calls"] = self.calls - before[2]


class LookupEmbedder(Embedder):
    """Vectors computed in advance, looked up by text: costs ~nothing per call. Used where
    the benchmark must leave embedding time out (bulk loading, context latency)."""

    def __init__(
        self,
        vectors: Mapping[str, list[float]],
        dim: int,
        name: str = "lookup",
        fallback: Callable[[str], list[float] | None] | None = None,
    ) -> None:
        self.vectors = vectors
        self.dim = dim
        self.name = name
        self.fallback = fallback  # vectors known another way (a bulk memory's own text)

    def _get(self, text: str) -> list[float]:
        found = self.vectors.get(text)
        if found is None and self.fallback is not None:
            found = self.fallback(text)
        if found is None:
            raise KeyError(f"no precomputed vector for {text[:60]!r}")
        return found

    def embed_passages(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._get(t) for t in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._get(text)
