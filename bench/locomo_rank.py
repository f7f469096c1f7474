"""The tuned retrieval prototyped for Mnemo on LoCoMo (see bench/locomo.py).

It is built from Mnemo's own ports and from what a memory carries, nothing that knows
LoCoMo's questions or ids:

* candidates: the vector index (VectorIndex.search) and a BM25 keyword list, over the
  stream, `depth` deep each;
* keyword list: the vector index's keyword search as shipped (BM25 keyword vectors with
  the engine's per-tenant IDF), or (stemmed=True) a prototype: the same keyword terms
  under FTS5's porter stemmer, one index per stream (StemmedKeywords, an in-memory SQLite
  FTS5 table);
* fusion: weighted reciprocal rank, w / (rrf_k + rank), with a small rrf_k;
* neighbours: a memory gains `neighbour` x the best fused score of the memories right
  before and after it in its episode (memories sharing an `episode:` tag, in id order);
* episode: a memory gains `episode` x the best score (after neighbours) in its episode;
* source: a memory whose provenance.source_id is named in the query (all of the source's
  keyword terms are query terms) has its score multiplied by (1 + source).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from typing import Any

from mnemo.domain.keywords import query_vector
from mnemo.domain.memory import Memory
from mnemo.domain.text import keyword_terms, query_terms
from mnemo.ports import MemoryQuery, MemoryStore, VectorFilter, VectorIndex

__all__ = ["RankConfig", "StemmedKeywords", "TunedRetriever", "ablation_ladder"]


@dataclass(frozen=True)
class RankConfig:
    rrf_k: float = 5.0
    w_vector: float = 1.0
    w_keyword: float = 1.25
    depth: int = 200  # candidates taken from each list
    stemmed: bool = True
    neighbour: float = 0.4
    episode: float = 0.75
    source: float = 0.5

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def ablation_ladder() -> list[tuple[str, RankConfig]]:
    """From Mnemo.search's fusion to the tuned configuration, one change at a time."""
    off = RankConfig(rrf_k=60, w_keyword=1.0, stemmed=False, neighbour=0.0, episode=0.0, source=0.0)
    steps = [("RRF k=60, equal weights, depth 200 (as Mnemo.search)", off)]
    cfg = replace(off, rrf_k=5.0, w_keyword=1.25)
    steps.append(("+ RRF k=5, keyword weight 1.25", cfg))
    cfg = replace(cfg, stemmed=True)
    steps.append(("+ stemmed keyword index (porter)", cfg))
    cfg = replace(cfg, neighbour=0.4)
    steps.append(("+ neighbours in the episode (0.4)", cfg))
    cfg = replace(cfg, episode=0.75)
    steps.append(("+ episode boost (0.75)", cfg))
    cfg = replace(cfg, source=0.5)
    steps.append(("+ named-source boost (x1.5) = tuned", cfg))
    steps.append(("tuned, shipped keyword vectors (no porter)", replace(cfg, stemmed=False)))
    steps.append(("tuned without neighbours", replace(cfg, neighbour=0.0)))
    steps.append(("tuned without episode boost", replace(cfg, episode=0.0)))
    steps.append(("tuned, whole stream as candidates", replace(cfg, depth=0)))
    return steps


class StemmedKeywords:
    """Prototype of Mnemo's keyword index with stemming: per stream, an FTS5 table over the
    memories' keyword terms with tokenize='porter unicode61'; BM25 as the store ranks."""

    def __init__(self) -> None:
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._tables: dict[str, tuple[str, list[str]]] = {}

    def add_stream(self, stream: str, memories: Sequence[Memory]) -> None:
        table = f"s{len(self._tables)}"
        self._db.execute(
            f"CREATE VIRTUAL TABLE {table} USING fts5(terms, tokenize='porter unicode61')"
        )
        self._db.executemany(
            f"INSERT INTO {table} (rowid, terms) VALUES (?, ?)",
            [
                (i, " ".join(keyword_terms(f"{m.key or ''} {m.value or ''} {m.content}")))
                for i, m in enumerate(memories, 1)
            ],
        )
        self._tables[stream] = (table, [m.memory_id for m in memories])

    def search(self, stream: str, terms: Sequence[str], limit: int) -> list[tuple[str, float]]:
        if not terms:
            return []
        table, ids = self._tables[stream]
        match = " OR ".join('"' + t.replace('"', '""') + '"' for t in terms)
        rows = self._db.execute(
            f"SELECT rowid, bm25({table}) AS score FROM {table} WHERE {table} MATCH ? "
            "ORDER BY score, rowid LIMIT ?",
            (match, limit),
        )
        return [(ids[r - 1], -float(s)) for r, s in rows]


@dataclass
class _Stream:
    memory_ids: list[str]  # every live memory of the stream, in id (time) order
    episode_of: dict[str, str]
    prev: dict[str, str]  # the memory right before, in the same episode
    next: dict[str, str]
    source_terms: dict[str, frozenset[str]]  # memory id -> its source's keyword terms


class TunedRetriever:
    def __init__(
        self, store: MemoryStore, index: VectorIndex, tenant: str, config: RankConfig
    ) -> None:
        self.store = store
        self.index = index
        self.tenant = tenant
        self.config = config
        self._streams: dict[str, _Stream] = {}
        self._stemmed = StemmedKeywords()

    def _stream(self, stream: str) -> _Stream:
        found = self._streams.get(stream)
        if found is not None:
            return found
        memories: list[Memory] = []
        after = None
        while True:
            page = self.store.query(
                self.tenant, MemoryQuery(stream=stream, limit=1_000, after=after)
            )
            memories.extend(page)
            if len(page) < 1_000:
                break
            after = page[-1].memory_id
        episode_of: dict[str, str] = {}
        last_in: dict[str, str] = {}
        prev: dict[str, str] = {}
        nxt: dict[str, str] = {}
        sources: dict[str, frozenset[str]] = {}
        for m in memories:  # id order is time order
            episode = next((t for t in m.tags if t.startswith("episode:")), None)
            if episode is not None:
                episode_of[m.memory_id] = episode
                before = last_in.get(episode)
                if before is not None:
                    prev[m.memory_id] = before
                    nxt[before] = m.memory_id
                last_in[episode] = m.memory_id
            if m.provenance.source_id:
                sources[m.memory_id] = frozenset(keyword_terms(m.provenance.source_id))
        self._stemmed.add_stream(stream, memories)
        found = _Stream([m.memory_id for m in memories], episode_of, prev, nxt, sources)
        self._streams[stream] = found
        return found

    def rank(self, stream: str, text: str, vector: list[float]) -> list[str]:
        """Every memory of the stream, best first."""
        cfg = self.config
        s = self._stream(stream)
        depth = cfg.depth or len(s.memory_ids)
        terms = query_terms(text)
        vec = self.index.search(self.tenant, vector, depth, VectorFilter(streams=(stream,)))
        if cfg.stemmed:
            kw = self._stemmed.search(stream, terms, depth)
        else:
            kw = self.index.keyword_search(
                self.tenant, query_vector(text), depth, VectorFilter(streams=(stream,))
            )
        fused: dict[str, float] = dict.fromkeys(s.memory_ids, 0.0)
        for weight, hits in ((cfg.w_vector, vec), (cfg.w_keyword, kw)):
            for rank, (mid, _) in enumerate(hits, 1):
                if mid in fused:
                    fused[mid] += weight / (cfg.rrf_k + rank)
        score = dict(fused)
        if cfg.neighbour:
            for mid in s.memory_ids:
                around = [fused[n] for n in (s.prev.get(mid), s.next.get(mid)) if n is not None]
                if around:
                    score[mid] += cfg.neighbour * max(around)
        if cfg.episode:
            best: dict[str, float] = {}
            for mid, value in score.items():
                episode = s.episode_of.get(mid)
                if episode is not None and value > best.get(episode, 0.0):
                    best[episode] = value
            for mid in s.memory_ids:
                episode = s.episode_of.get(mid)
                if episode is not None:
                    score[mid] += cfg.episode * best.get(episode, 0.0)
        if cfg.source:
            named = set(terms)
            for mid, source in s.source_terms.items():
                if source and source <= named:
                    score[mid] *= 1.0 + cfg.source
        return sorted(s.memory_ids, key=lambda m: (-score[m], m))
