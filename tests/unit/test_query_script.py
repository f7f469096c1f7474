"""A query mostly in Chinese, Japanese or Korean weighs its keyword list less."""

from __future__ import annotations

from typing import Any

from mnemo.adapters.memory_index import InMemoryVectorIndex
from mnemo.bootstrap import Platform
from mnemo.domain.memory import MemoryStatus
from mnemo.domain.text import mostly_cjk
from mnemo.ports import MemoryQuery
from mnemo.service.retrieval import RANKING, rank


def test_a_query_mostly_in_cjk_is_told_apart() -> None:
    assert mostly_cjk("哪些食物不能推荐给他")
    assert not mostly_cjk("他对 peanut 过敏吗")  # five CJK characters against six letters
    assert not mostly_cjk("is he allergic to 花生")
    assert not mostly_cjk("When did Caroline go to the support group?")


def test_a_cjk_query_weighs_its_keyword_list_less(platform: Platform) -> None:
    seen: list[float] = []

    class Recording(InMemoryVectorIndex):
        def hybrid_search(self, *args: Any, **kwargs: Any) -> list[tuple[str, float]]:
            seen.append(args[5].keyword_weight)
            return super().hybrid_search(*args, **kwargs)

    index = Recording(4)
    base = MemoryQuery(statuses=(MemoryStatus.ACTIVE,), limit=10)
    for text in ("哪些食物不能推荐", "which food must not be offered"):
        rank(platform.store, index, "acme", text, [1.0, 0.0, 0.0, 0.0], base, ["user:U1"], 10)
    assert seen == [RANKING.w_keyword_cjk, RANKING.w_keyword]
    assert RANKING.w_keyword_cjk < RANKING.w_keyword
