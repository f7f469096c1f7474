"""The ranked pool of a search (mnemo.service.retrieval.rank): the best `depth` of the
engine's fused list, each read from the store once, not the whole fused union."""

from __future__ import annotations

from mnemo.bootstrap import Platform
from mnemo.domain.keywords import query_vector
from mnemo.domain.memory import MemoryStatus
from mnemo.ports import Fusion, MemoryQuery, VectorFilter
from mnemo.service.retrieval import RANKING, rank

from .test_request_reads import CTX, Counting, S, publish


def test_a_search_reads_the_best_depth_of_the_fused_list_and_no_more(
    platform: Platform,
) -> None:
    # 60 memories that all share the query's words: both lists could give 60 each
    publish(
        platform,
        [{"type": "fact", "content": f"parcel number {i} went to the depot"} for i in range(60)],
    )
    store = Counting(platform.store)
    depth = 12
    base = MemoryQuery(statuses=(MemoryStatus.ACTIVE,), limit=depth)
    text = "which parcel went to the depot"
    vector = platform.app.query_embedder.embed_query(text)
    ranked = rank(store, platform.searched, CTX.tenant, text, vector, base, [S], depth)

    assert len(store.fetched) == depth  # was 2 x depth, the whole fused union
    fused = platform.searched.hybrid_search(
        CTX.tenant,
        vector,
        query_vector(text),
        depth,
        VectorFilter(streams=(S,)),
        Fusion(
            k=RANKING.rrf_k,
            dense_weight=RANKING.w_vector,
            keyword_weight=RANKING.w_keyword,
            depth=depth,
        ),
    )
    # the pool is exactly the engine's best `depth`, and each of them is ranked
    assert sorted(store.fetched) == sorted(mid for mid, _ in fused)
    assert {r.memory.memory_id for r in ranked} == {mid for mid, _ in fused}
    assert ranked[0].relevance == 1.0
