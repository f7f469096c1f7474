"""Hybrid retrieval, shared by search and context assembly.

1. One query to the vector engine within the tenant: a dense prefetch (the query embedding
   against the memories') and a keyword prefetch (the query's terms against each memory's
   BM25 keyword vector, with the tenant's own IDF; see mnemo.domain.keywords), `depth`
   deep each, fused by weighted reciprocal rank, weight / (K + rank), K = 5, weights 1.0
   (dense) and 1.25 (keyword), computed by the engine (ports.Fusion): a small K lets the
   top of each list count for more. The best `depth` of the fused list are the pool.
   A query mostly in Chinese, Japanese or Korean weighs its keyword list 0.25: its terms
   are single characters and character bigrams, and sharing one is far weaker evidence
   than sharing an English word stem (chosen on half of tests/data/zh_retrieval, the
   other half held out; docs/adr/0015); unless it names a day (11月19日, 昨天, 上周),
   whose date terms are strong evidence in any script.
2. Episodes: memories tagged `episode:<id>` (by the client, or by registration from the
   pauses between a subject's turns) are turns of one conversation or task. A turn
   gains 0.6 x the best fused score among the turns near it (an answer often sits next
   to the turn that matches the question): the turns right before and after count in
   full, the turns two away half; then 0.5 x the best score in its episode; turns of the
   candidates' episodes join the pool. A memory outside any episode is an episode of its
   own (it gains 0.5 x its own score, as an episode's best turn does), so that being in
   an episode never lifts a memory above an equally relevant one that is in none (the
   Chinese set's declared facts and constraints beside imported history).
   The query's keyword terms include the dates its relative time expressions name,
   counted from the query's as_of (see mnemo.domain.keywords).
3. Named sources: when every word of a memory's source (provenance.source_id, e.g. the
   person who said it, or else the speaker registration derived for a turn) appears in
   the query, its score is multiplied by 1.5.
Relevance is the result divided by the best in the pool, so the top memory has 1.0. The
weights were chosen on LoCoMo conversations 0-4 as a plain client stores them (see
bench/locomo.py) and reported on the held-out 5-9; the bench's ablations measure what
each step is worth.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from mnemo.domain.derivation import episode_of, speaker_name
from mnemo.domain.errors import InvalidInput
from mnemo.domain.keywords import query_vector
from mnemo.domain.memory import Memory, MemoryStatus
from mnemo.domain.text import keyword_terms, mostly_cjk
from mnemo.domain.timeexpr import Zone, query_zone, resolve, written_dates
from mnemo.ports import Fusion, MemoryQuery, MemoryReads, VectorFilter, VectorIndex

__all__ = ["RANKING", "Ranked", "Ranking", "rank", "request_zone"]


@dataclass(frozen=True, slots=True)
class Ranking:
    rrf_k: int = 5
    w_vector: float = 1.0
    w_keyword: float = 1.25
    w_keyword_cjk: float = 0.25  # for a query mostly in Chinese, Japanese or Korean
    neighbour: float = 0.6
    neighbour_reach: int = 2  # turns either side that pass on their score
    neighbour_decay: float = 0.5  # each turn further away passes on this much less
    episode: float = 0.5
    source: float = 0.5
    episode_size: int = 500  # turns of one episode read to find neighbours


RANKING = Ranking()


@dataclass(frozen=True, slots=True)
class Ranked:
    """A memory and its relevance. The engine fuses the dense and keyword lists in one
    query, so their separate ranks are not known: `fused_rank` is the memory's rank in the
    fused list (None for a memory that joined the pool through its episode)."""

    memory: Memory
    relevance: float
    fused_rank: int | None


def _admitted(memory: Memory, base: MemoryQuery) -> bool:
    """Whether a memory passes the query's status and validity filters."""
    if memory.status not in base.statuses:
        return False
    return base.live_at is None or memory.valid_until is None or base.live_at < memory.valid_until


def _episode(memory: Memory) -> str | None:
    return episode_of(memory.tags)


def rank(
    store: MemoryReads,
    index: VectorIndex,
    tenant: str,
    text: str,
    vector: list[float] | None,
    base: MemoryQuery,
    streams: Sequence[str],
    depth: int,
    ranking: Ranking = RANKING,
    as_of: datetime | None = None,
    timezone: Zone = None,
) -> list[Ranked]:
    """Memories matching `base` in the given streams (all of the tenant's when none), best
    first, with their ranks in each list. Only memories whose status `base` allows. The
    query's relative time expressions ("yesterday", "上周") are resolved against `as_of`
    (else `base.live_at`) in `timezone` (UTC when none); without either, not at all."""
    flt = VectorFilter(
        streams=tuple(streams),
        types=tuple(t.value for t in base.types),
        scopes=tuple(s.value for s in base.scopes),
        tags=base.tags,
    )
    when = as_of or base.live_at
    # a query that names a day (11月19日, 昨天) keeps the full keyword weight whatever its
    # script: a date's terms are as strong evidence in Chinese as in English
    dated = bool(written_dates(text)) or (when is not None and bool(resolve(text, when, timezone)))
    fusion = Fusion(
        k=ranking.rrf_k,
        dense_weight=ranking.w_vector,
        keyword_weight=(
            ranking.w_keyword_cjk if mostly_cjk(text) and not dated else ranking.w_keyword
        ),
        depth=depth,
    )
    # the best `depth` of the fused union (up to `depth` from each list) is the pool to
    # boost from: the whole union (2 x depth) ranked no better on LoCoMo or the Chinese
    # set (ADR 0018) and doubled the memories each search reads
    keywords = query_vector(text, when, timezone)
    hits = index.hybrid_search(tenant, vector, keywords, depth, flt, fusion)
    fused_rank = {mid: r for r, (mid, _) in enumerate(hits, 1)}
    pool = {
        m.memory_id: m for m in store.get_many(tenant, sorted(fused_rank)) if _admitted(m, base)
    }
    fused = {mid: score for mid, score in hits if mid in pool}
    score = dict(fused)
    if (ranking.neighbour or ranking.episode) and not base.tags:
        _episodes(store, tenant, base, pool, fused, score, ranking)
    if ranking.source:
        named = set(keyword_terms(text))
        for mid, memory in pool.items():
            source = memory.provenance.source_id or speaker_name(memory.tags)
            if source and (words := set(keyword_terms(source))) and words <= named:
                score[mid] *= 1.0 + ranking.source
    best = max(score.values(), default=0.0) or 1.0
    ordered = sorted(pool, key=lambda mid: (-score[mid], mid))
    return [Ranked(pool[mid], round(score[mid] / best, 6), fused_rank.get(mid)) for mid in ordered]


def _episodes(
    store: MemoryReads,
    tenant: str,
    base: MemoryQuery,
    pool: dict[str, Memory],
    fused: dict[str, float],
    score: dict[str, float],
    ranking: Ranking,
) -> None:
    """Spread scores along episodes: adjacent turns, then the episode's best."""
    episodes = sorted({(m.stream, e) for m in pool.values() if (e := _episode(m)) is not None})
    members: dict[tuple[str, str], list[str]] = {}
    asked = [
        replace(base, stream=stream, tags=(episode,), limit=ranking.episode_size, after=None)
        for stream, episode in episodes
    ]
    for at, turns in zip(episodes, store.query_each(tenant, asked), strict=True):
        members[at] = [t.memory_id for t in turns]
        for t in turns:
            if t.memory_id not in pool and _admitted(t, base):
                pool[t.memory_id] = t
                fused.setdefault(t.memory_id, 0.0)
                score.setdefault(t.memory_id, 0.0)
    for ids in members.values():
        for i, mid in enumerate(ids):
            around = [
                ranking.neighbour_decay ** (d - 1) * fused.get(ids[j], 0.0)
                for d in range(1, ranking.neighbour_reach + 1)
                for j in (i - d, i + d)
                if 0 <= j < len(ids)
            ]
            if around:
                score[mid] += ranking.neighbour * max(around)
    for ids in members.values():
        top = max((score[mid] for mid in ids), default=0.0)
        for mid in ids:
            score[mid] += ranking.episode * top
    # a memory outside any episode is an episode of its own: it gains its own score, as
    # the best turn of an episode does, so belonging to an episode never lifts a memory
    # above an equally relevant one that belongs to none
    for mid, memory in pool.items():
        if _episode(memory) is None:
            score[mid] += ranking.episode * score[mid]


def request_zone(timezone: str | None, as_of: datetime | None = None) -> Zone:
    """The zone a search or context request's time expressions are read in: its
    `timezone` (an IANA name), else the UTC offset of its `as_of`, else UTC (None). An
    unknown name is the caller's error (INVALID_TIMEZONE)."""
    try:
        return query_zone(timezone, as_of)
    except ValueError:
        raise InvalidInput(
            f"unknown time zone {timezone!r}: give an IANA name such as Asia/Shanghai",
            code="INVALID_TIMEZONE",
            field="timezone",
        ) from None


def live_statuses(include_archived: bool) -> tuple[MemoryStatus, ...]:
    return (
        (MemoryStatus.ACTIVE, MemoryStatus.ARCHIVED) if include_archived else (MemoryStatus.ACTIVE,)
    )
