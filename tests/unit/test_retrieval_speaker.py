"""The named speaker's own list (mnemo.service.retrieval.rank, step 2): a query that names
a speaker asks the engine once more, within that speaker's turns and without the name, so
that a turn of theirs the name alone does not lift is still a candidate."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from mnemo.bootstrap import Platform
from mnemo.domain.keywords import SparseVector, term_id
from mnemo.domain.memory import MemoryStatus
from mnemo.ports import Fusion, MemoryQuery, VectorFilter
from mnemo.service.retrieval import RANKING, rank

from .test_request_reads import CTX, S, publish

ANY = VectorFilter()
FUSED = Fusion()


class Recording:
    """The vector index, with every hybrid search it answers written down."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.asked: list[tuple[SparseVector, VectorFilter]] = []

    def hybrid_search(
        self,
        tenant: str,
        vector: Sequence[float] | None,
        keywords: SparseVector,
        limit: int,
        flt: VectorFilter = ANY,
        fusion: Fusion = FUSED,
    ) -> list[tuple[str, float]]:
        self.asked.append((keywords, flt))
        return list(self.inner.hybrid_search(tenant, vector, keywords, limit, flt, fusion))


# Ben's short turns say the name and the verb over and over; one of Ana's says them too
# (so she is among the first hits), the other says the verb once in a long sentence, so
# both lists rank it below all of Ben's
BEN = [f"Ana, bake? Ana bake {i}" for i in range(6)]
SHORT = "Ana bake? Ana bake!"
ANA = "on Sundays I bake sourdough loaves in the old oven and then freeze most of them"


def _publish(platform: Platform) -> None:
    publish(
        platform,
        [{"type": "fact", "content": c, "tags": ["speaker:ben"]} for c in BEN]
        + [{"type": "fact", "content": c, "tags": ["speaker:ana"]} for c in (SHORT, ANA)],
    )


def _rank(platform: Platform, index: Any, text: str, depth: int, **kw: Any) -> list[Any]:
    base = MemoryQuery(statuses=(MemoryStatus.ACTIVE,), limit=depth)
    vector = platform.app.query_embedder.embed_query(text)
    return rank(platform.store, index, CTX.tenant, text, vector, base, [S], depth, **kw)


def test_a_query_naming_a_speaker_searches_their_turns_again_without_the_name(
    platform: Platform,
) -> None:
    _publish(platform)
    index = Recording(platform.searched)
    embedded: list[str] = []

    def embed(text: str) -> list[float]:
        embedded.append(text)
        return platform.app.query_embedder.embed_query(text)

    _rank(platform, index, "What does Ana bake?", 3, embed=embed)

    assert len(index.asked) == 2  # was one query
    keywords, flt = index.asked[1]
    assert flt.tags == ("speaker:ana",)
    assert flt.streams == (S,)
    assert term_id("ana") not in keywords.indices
    assert term_id("bake") in keywords.indices
    assert embedded == ["What does bake?"]


def test_the_named_speakers_turn_joins_the_pool_from_beyond_the_first_depth(
    platform: Platform,
) -> None:
    _publish(platform)
    first = [
        mid
        for mid, _ in platform.searched.hybrid_search(
            CTX.tenant,
            platform.app.query_embedder.embed_query("What does Ana bake?"),
            SparseVector(tuple(sorted({term_id("ana"), term_id("bake")})), (1.0, 1.0)),
            3,
            VectorFilter(streams=(S,)),
            Fusion(depth=3),
        )
    ]
    ana = next(
        m
        for m in platform.store.query(CTX.tenant, MemoryQuery(stream=S, limit=10))
        if m.content == ANA
    )
    assert ana.memory_id not in first  # the first query alone does not find it

    ranked = _rank(platform, platform.searched, "What does Ana bake?", 3)

    assert ana.memory_id in {r.memory.memory_id for r in ranked}
    # without the step, it is not a candidate at all
    off = _rank(
        platform, platform.searched, "What does Ana bake?", 3, ranking=replace(RANKING, speaker=0.0)
    )
    assert ana.memory_id not in {r.memory.memory_id for r in off}


def test_no_second_query_when_no_speaker_is_named_or_the_caller_filters_by_tag(
    platform: Platform,
) -> None:
    _publish(platform)
    index = Recording(platform.searched)
    _rank(platform, index, "What does anyone bake?", 3)
    assert len(index.asked) == 1
    base = MemoryQuery(statuses=(MemoryStatus.ACTIVE,), tags=("speaker:ben",), limit=3)
    text = "What does Ana bake?"
    vector = platform.app.query_embedder.embed_query(text)
    rank(platform.store, index, CTX.tenant, text, vector, base, [S], 3)
    assert len(index.asked) == 2  # one more, not two: the caller's tags are kept
    assert index.asked[1][1].tags == ("speaker:ben",)
