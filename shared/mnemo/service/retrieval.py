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
2. The named speaker's own list: when the query names the speaker of any of the pool's
   memories (every word of a `speaker:<name>` tag among the query's terms, the rule of
   step 4), one more query to the engine, within that speaker's memories only, with the
   name's terms left out of the keyword vector and, given the query embedder, the query's
   text embedded again without the name (the name is in every one of their turns, and in
   the dense vector it leans towards the other speakers' turns that address them). A
   memory scores the better of its fused score and 1.25 x its fused score there; the best
   `depth` of both are the pool. On LoCoMo as a plain client (ADR 0018) it found the
   turns a question about one person gathers across sessions ("What activities does
   Melanie partake in?") that the dense list ranked below the other speaker's replies to
   her: R@10 0.773 -> 0.804 and R@20 0.832 -> 0.863 over all ten conversations (R@20
   0-4 0.848 -> 0.867, held-out 5-9 0.815 -> 0.859). Not when the caller filters by tag
   (its tags are kept as they are).
3. Episodes: memories tagged `episode:<id>` (by the client, or by registration from the
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
4. Named sources: when every word of a memory's source (provenance.source_id, e.g. the
   person who said it, or else the speaker registration derived for a turn) appears in
   the query, its score is multiplied by 1.5.
Relevance is the result divided by the best in the pool, so the top memory has 1.0. The
weights were chosen on LoCoMo conversations 0-4 as a plain client stores them (see
bench/locomo.py) and reported on the held-out 5-9; the bench's ablations measure what
each step is worth.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from datetime import datetime

from mnemo.domain.derivation import SPEAKER_PREFIX, episode_of, speaker_name
from mnemo.domain.errors import InvalidInput
from mnemo.domain.keywords import SparseVector, fold_term, query_vector, term_id
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
    speaker: float = 1.25  # the named speaker's own list (0: no second query)
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
    embed: Callable[[str], list[float]] | None = None,
) -> list[Ranked]:
    """Memories matching `base` in the given streams (all of the tenant's when none), best
    first, with their ranks in each list. Only memories whose status `base` allows. The
    query's relative time expressions ("yesterday", "上周") are resolved against `as_of`
    (else `base.live_at`) in `timezone` (UTC when none); without either, not at all.
    `embed` is the query embedder that made `vector`: given, the named speaker's list
    (step 2) searches with the query's text embedded without the speaker's name; else
    with `vector` as it is."""
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
    read = {m.memory_id: m for m in store.get_many(tenant, sorted(mid for mid, _ in hits))}
    if ranking.speaker and not base.tags and (speakers := _named_speakers(text, read.values())):
        hits = _with_speakers(
            index,
            tenant,
            text,
            vector,
            keywords,
            speakers,
            depth,
            flt,
            fusion,
            ranking,
            embed,
            hits,
        )
        if missing := sorted(mid for mid, _ in hits if mid not in read):
            read.update((m.memory_id, m) for m in store.get_many(tenant, missing))
    fused_rank = {mid: r for r, (mid, _) in enumerate(hits, 1)}
    pool = {mid: m for mid in fused_rank if (m := read.get(mid)) is not None and _admitted(m, base)}
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


def _named_speakers(text: str, memories: Iterable[Memory]) -> dict[str, str]:
    """The speaker tags of `memories` whose every word is among the query's terms, each
    with its name as words ("speaker:melanie" -> "melanie")."""
    named = set(keyword_terms(text))
    found: dict[str, str] = {}
    for memory in memories:
        for tag in memory.tags:
            if tag.startswith(SPEAKER_PREFIX) and tag not in found:
                name = speaker_name((tag,))
                if name and (words := set(keyword_terms(name))) and words <= named:
                    found[tag] = name
    return found


def _without_names(text: str, names: Iterable[str]) -> str:
    """The query's text with the named speakers' words (and an English possessive after
    one) taken out, so that what is left says what is asked about them."""
    for name in names:
        for word in name.split():
            if mostly_cjk(word):
                text = text.replace(word, " ")
            else:
                text = re.sub(rf"\b{re.escape(word)}(?:['’]s)?\b", " ", text, flags=re.IGNORECASE)
    return " ".join(text.split())


def _with_speakers(
    index: VectorIndex,
    tenant: str,
    text: str,
    vector: list[float] | None,
    keywords: SparseVector,
    named: dict[str, str],
    depth: int,
    flt: VectorFilter,
    fusion: Fusion,
    ranking: Ranking,
    embed: Callable[[str], list[float]] | None,
    hits: list[tuple[str, float]],
) -> list[tuple[str, float]]:
    """The fused hits joined by a second query within the named speakers' own turns,
    without their names (the name is in all of them, and in the dense vector it leans
    towards the turns that address the speaker): a memory scores the better of its fused
    score and `ranking.speaker` x its score there; the best `depth` are kept."""
    dropped = {term_id(fold_term(t)) for name in named.values() for t in keyword_terms(name)}
    kept = [
        (i, v) for i, v in zip(keywords.indices, keywords.values, strict=True) if i not in dropped
    ]
    rest = SparseVector(tuple(i for i, _ in kept), tuple(v for _, v in kept))
    if vector is not None and embed is not None:
        left = _without_names(text, named.values())
        vector = embed(left) if left.strip() else vector
    theirs = replace(flt, tags=tuple(sorted(named)))
    merged = dict(hits)
    for mid, score in index.hybrid_search(tenant, vector, rest, depth, theirs, fusion):
        merged[mid] = max(merged.get(mid, 0.0), ranking.speaker * score)
    return sorted(merged.items(), key=lambda kv: (-kv[1], kv[0]))[:depth]


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
