"""The Chinese retrieval set (tests/data/zh_retrieval) and the benchmark's scoring."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from bench.zh_data import (
    DATA,
    MAX_MEAN_OVERLAP,
    MAX_QUERY_OVERLAP,
    bigrams,
    load,
    overlap,
    overlap_stats,
    score,
    verdict,
)


def test_the_set_has_at_least_200_queries_over_both_domains_and_kinds() -> None:
    data = load()
    assert len(data.queries) >= 200
    assert len(data.memories) >= 100
    kinds = Counter(q.kind for q in data.queries)
    assert kinds["inference"] >= 60
    assert kinds["paraphrase"] >= 60
    domains = Counter(q.domain(data.memories) for q in data.queries)
    assert domains["cs"] >= 60
    assert domains["co"] >= 60
    assert len({q.text for q in data.queries}) == len(data.queries)


def test_every_query_names_memories_that_exist() -> None:
    data = load()
    for q in data.queries:
        assert q.relevant
        assert all(r in data.memories for r in q.relevant), q
        assert len(set(q.relevant)) == len(q.relevant), q


def test_queries_are_paraphrased_below_the_readme_bounds() -> None:
    stats = overlap_stats(load())
    assert stats["bigram"]["mean"] <= MAX_MEAN_OVERLAP
    assert stats["bigram"]["max"] <= MAX_QUERY_OVERLAP
    readme = (DATA / "README.md").read_text(encoding="utf-8")
    assert f"**{MAX_MEAN_OVERLAP:.2f}**" in readme
    assert f"**{MAX_QUERY_OVERLAP:.2f}**" in readme


def test_the_allergy_query_needs_a_step_of_meaning() -> None:
    data = load()
    allergy = [m for m in data.memories.values() if "花生" in m.content and "过敏" in m.content]
    assert len(allergy) == 1
    asked = [q for q in data.queries if allergy[0].id in q.relevant and q.kind == "inference"]
    assert asked
    assert all("花生" not in q.text and "过敏" not in q.text for q in asked)


def test_overlap_counts_shared_bigrams_and_latin_words() -> None:
    assert bigrams("对花生过敏 W-9") == {"对花", "花生", "生过", "过敏", "w", "9"}
    assert overlap("花生过敏吗", ["客户对花生严重过敏"]) == pytest.approx(2 / 4)
    assert overlap("坚果不能选", ["客户对花生严重过敏"]) == 0.0
    assert overlap("", ["客户"]) == 0.0


def _write(folder: Path, memories: str, queries: str) -> None:
    (folder / "memories.txt").write_text(memories, encoding="utf-8")
    (folder / "queries.txt").write_text(queries, encoding="utf-8")


MEMS = "cs001|cs|user:a|fact|user|甲\ncs002|cs|user:a|fact|user|乙\nco001|co|p|fact|tenant|丙\n"


def test_a_query_naming_an_unknown_memory_is_refused(tmp_path: Path) -> None:
    _write(tmp_path, MEMS, "paraphrase|问一|cs001,cs009\n")
    with pytest.raises(ValueError, match="unknown memory ids"):
        load(tmp_path)
    _write(tmp_path, MEMS, "guess|问一|cs001\n")
    with pytest.raises(ValueError, match="bad kind"):
        load(tmp_path)
    _write(tmp_path, MEMS + "cs001|cs|user:a|fact|user|丁\n", "paraphrase|问一|cs001\n")
    with pytest.raises(ValueError, match="duplicate id"):
        load(tmp_path)


def test_recall_and_mrr_per_kind_and_domain(tmp_path: Path) -> None:
    _write(
        tmp_path,
        MEMS,
        "paraphrase|问一|cs001\ninference|问二|cs001,cs002\nparaphrase|问三|co001\n",
    )
    data = load(tmp_path)
    result = score(
        [
            ["cs001", "cs002", "co001"],  # first: R@1 1, MRR 1
            ["co001", "cs002", "cs001"],  # R@1 0, R@3 1 (both by 3), MRR 1/2
            ["cs001", "cs002"],  # missing entirely: 0 everywhere
        ],
        data,
    )
    overall = result["overall"]
    assert overall["queries"] == 3
    assert overall["R@1"] == pytest.approx(1 / 3, abs=1e-4)
    assert overall["R@3"] == pytest.approx(2 / 3, abs=1e-4)
    assert overall["MRR"] == pytest.approx((1 + 0.5 + 0) / 3, abs=1e-4)
    assert result["kind:inference"]["R@1"] == 0.0
    assert result["kind:inference"]["MRR"] == 0.5
    assert result["domain:co"] == {"queries": 1, "R@1": 0.0, "R@3": 0.0, "R@10": 0.0, "MRR": 0.0}
    assert result["domain:cs"]["R@3"] == 1.0


def _hybrid(r3: float, mrr: float) -> dict[str, object]:
    return {"retrievers": {"hybrid": {"metrics": {"overall": {"R@3": r3, "MRR": mrr}}}}}


def test_another_embedder_is_adopted_only_when_clearly_better_and_fast_enough() -> None:
    quality = {
        "base": _hybrid(0.60, 0.50),
        "better": _hybrid(0.64, 0.54),
        "slow": _hybrid(0.70, 0.60),
        "close": _hybrid(0.62, 0.56),  # R@3 only 0.02 above
        "worse": _hybrid(0.50, 0.40),
    }
    speed = {
        "better@1": {"queries_per_s": 25.0},
        "slow@1": {"queries_per_s": 5.0},
        "close@1": {"queries_per_s": 90.0},
        "worse@1": {"queries_per_s": 90.0},
    }
    result = verdict(quality, speed, "base")
    assert result["adopt"] == ["better"]
    assert result["others"]["slow"]["hybrid_r3_minus_default"] == pytest.approx(0.10)
    assert not result["others"]["close"]["clearly_better"]
    assert verdict({"x": _hybrid(0.9, 0.9)}, {}, "base") == {"default": "base", "compared": False}
