"""The VectorIndex contract: every adapter of the port must pass these tests."""

from __future__ import annotations

import math
import socket
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse
from tests.support import qdrant_server_url

from mnemo.adapters.memory_index import InMemoryVectorIndex
from mnemo.adapters.qdrant_edge_index import QdrantEdgeIndex
from mnemo.adapters.qdrant_server_index import QdrantServerIndex
from mnemo.bootstrap import make_index
from mnemo.domain.errors import InvalidInput, Unavailable
from mnemo.domain.ids import uuid7_at
from mnemo.domain.keywords import SparseVector, passage_vector, query_vector
from mnemo.ports import Fusion, VectorFilter, VectorIndex, VectorPoint
from mnemo.settings import MnemoSettings

DIM = 8


def mid(n: int) -> str:
    """A deterministic memory id; ids sort in the order of n."""
    return str(uuid7_at(1_700_000_000_000 + n, n.to_bytes(10, "big")))


def basis(i: int, *, plus: dict[int, float] | None = None) -> list[float]:
    """The unit vector on axis i, plus optional extra components."""
    vec = [0.0] * DIM
    vec[i] = 1.0
    for axis, value in (plus or {}).items():
        vec[axis] += value
    return vec


def point(
    n: int,
    vector: list[float],
    *,
    tenant: str = "acme",
    stream: str = "s1",
    type_: str = "fact",
    scope: str = "shared",
    tags: tuple[str, ...] = (),
    keywords: dict[int, float] | None = None,
) -> VectorPoint:
    return VectorPoint(
        memory_id=mid(n),
        tenant=tenant,
        stream=stream,
        type=type_,
        scope=scope,
        tags=tags,
        vector=vector,
        keywords=sparse(keywords or {}),
    )


def sparse(weights: dict[int, float]) -> SparseVector:
    ordered = sorted(weights.items())
    return SparseVector(tuple(i for i, _ in ordered), tuple(v for _, v in ordered))


def _weights(text: str) -> dict[int, float]:
    keywords = passage_vector(text)
    return dict(zip(keywords.indices, keywords.values, strict=True))


def idf(points: int, holding: int) -> float:
    """Inverse document frequency as the engine defines it (always positive)."""
    return math.log(1 + (points - holding + 0.5) / (holding + 0.5))


def fused(ranks: list[tuple[int | None, float]], k: int) -> float:
    """Weighted RRF of (rank from 1 or None, weight) pairs: weight / (k + rank)."""
    return sum(weight / (k + rank) for rank, weight in ranks if rank is not None)


def ranked_ids(hits: list[tuple[str, float]]) -> list[str]:
    return [memory_id for memory_id, _ in hits]


def assert_same_hits(got: list[tuple[str, float]], want: list[tuple[str, float]]) -> None:
    assert ranked_ids(got) == ranked_ids(want)
    assert [s for _, s in got] == pytest.approx([s for _, s in want], abs=1e-5)


class VectorIndexContract:
    """Subclasses provide `make_index`; pytest collects only the Test* subclasses."""

    def make_index(self, tmp_path: Path) -> VectorIndex:
        raise NotImplementedError

    @pytest.fixture
    def index(self, tmp_path: Path) -> Iterator[VectorIndex]:
        idx = self.make_index(tmp_path)
        yield idx
        idx.close()

    # ---- search ---------------------------------------------------------------------------

    def test_nearest_first_with_cosine_scores(self, index: VectorIndex) -> None:
        index.upsert(
            [
                point(1, basis(1)),  # orthogonal to the query
                point(2, basis(0, plus={1: 1.0})),  # 45 degrees
                point(3, basis(0, plus={1: 0.25})),  # close
                point(4, [5.0 * x for x in basis(0)]),  # same direction, other length
            ]
        )
        hits = index.search("acme", basis(0), 10)
        assert ranked_ids(hits) == [mid(4), mid(3), mid(2), mid(1)]
        scores = [s for _, s in hits]
        assert scores[0] == pytest.approx(1.0, abs=1e-5)
        assert scores[1] == pytest.approx(1 / math.sqrt(1 + 0.25**2), abs=1e-5)
        assert scores[2] == pytest.approx(1 / math.sqrt(2), abs=1e-5)
        assert scores[3] == pytest.approx(0.0, abs=1e-5)

    def test_limit_keeps_the_best(self, index: VectorIndex) -> None:
        index.upsert([point(n, basis(0, plus={1: n * 0.1})) for n in range(1, 7)])
        assert ranked_ids(index.search("acme", basis(0), 3)) == [mid(1), mid(2), mid(3)]
        assert index.search("acme", basis(0), 0) == []

    def test_ties_are_broken_by_id_even_at_the_limit(self, index: VectorIndex) -> None:
        # Inserted in reverse id order, so insertion order cannot explain the result.
        index.upsert([point(n, basis(2)) for n in range(9, 0, -1)])
        index.upsert([point(20, basis(3))])
        hits = index.search("acme", basis(2), 3)
        assert ranked_ids(hits) == [mid(1), mid(2), mid(3)]
        all_hits = index.search("acme", basis(2), 20)
        assert ranked_ids(all_hits) == [mid(n) for n in range(1, 10)] + [mid(20)]

    def test_empty_tenant_returns_nothing(self, index: VectorIndex) -> None:
        assert index.search("acme", basis(0), 5) == []
        index.upsert([point(1, basis(0), tenant="other")])
        assert index.search("acme", basis(0), 5) == []

    def test_tenants_are_isolated(self, index: VectorIndex) -> None:
        index.upsert(
            [
                point(1, basis(0), tenant="acme"),
                point(2, basis(0), tenant="globex"),  # identical vector, other tenant
                point(3, basis(1), tenant="acme"),
            ]
        )
        assert ranked_ids(index.search("acme", basis(0), 10)) == [mid(1), mid(3)]
        assert ranked_ids(index.search("globex", basis(0), 10)) == [mid(2)]
        filtered = index.search("acme", basis(0), 10, VectorFilter(streams=("s1",)))
        assert mid(2) not in ranked_ids(filtered)

    def test_filters_narrow_the_search(self, index: VectorIndex) -> None:
        index.upsert(
            [
                point(1, basis(0), stream="s1", type_="fact", scope="shared", tags=("a", "b")),
                point(2, basis(0), stream="s2", type_="fact", scope="private", tags=("b",)),
                point(3, basis(0), stream="s1", type_="episode", scope="shared", tags=("c",)),
                point(4, basis(0), stream="s3", type_="preference", scope="shared", tags=()),
            ]
        )

        def found(flt: VectorFilter) -> set[str]:
            return set(ranked_ids(index.search("acme", basis(0), 10, flt)))

        assert found(VectorFilter()) == {mid(1), mid(2), mid(3), mid(4)}
        assert found(VectorFilter(streams=("s1",))) == {mid(1), mid(3)}
        assert found(VectorFilter(streams=("s2", "s3"))) == {mid(2), mid(4)}
        assert found(VectorFilter(types=("fact",))) == {mid(1), mid(2)}
        assert found(VectorFilter(types=("episode", "preference"))) == {mid(3), mid(4)}
        assert found(VectorFilter(scopes=("private",))) == {mid(2)}
        assert found(VectorFilter(tags=("b",))) == {mid(1), mid(2)}
        assert found(VectorFilter(tags=("a", "c"))) == {mid(1), mid(3)}  # any of
        assert found(VectorFilter(tags=("zzz",))) == set()
        assert found(VectorFilter(streams=("s1",), types=("fact",), tags=("b", "c"))) == {mid(1)}
        assert found(VectorFilter(streams=("s2",), scopes=("shared",))) == set()

    def test_filtered_search_keeps_the_order(self, index: VectorIndex) -> None:
        index.upsert(
            [
                point(1, basis(0, plus={1: 0.5}), tags=("x",)),
                point(2, basis(0), tags=("y",)),
                point(3, basis(0, plus={1: 0.1}), tags=("x",)),
            ]
        )
        hits = index.search("acme", basis(0), 10, VectorFilter(tags=("x",)))
        assert ranked_ids(hits) == [mid(3), mid(1)]

    # ---- keyword search (BM25 with the engine's IDF) and hybrid search ------------------------

    def keyword_corpus(self, index: VectorIndex) -> None:
        """acme: four points, one without keywords (not in the IDF's N, in any engine)."""
        index.upsert(
            [
                point(1, basis(0), keywords={10: 1.0, 20: 1.0, 30: 0.8}),
                point(2, basis(1), keywords={10: 1.0}, stream="s2"),
                point(3, basis(2), keywords={20: 0.5}, tags=("x",)),
                point(4, basis(3)),
            ]
        )

    def test_keyword_scores_are_bm25_with_the_engines_idf(self, index: VectorIndex) -> None:
        self.keyword_corpus(index)
        hits = index.keyword_search("acme", sparse({10: 1.0, 20: 1.0, 30: 1.0}), 10)
        common, rare = idf(3, 2), idf(3, 1)
        assert ranked_ids(hits) == [mid(1), mid(2), mid(3)]  # point 4 shares no term
        assert [s for _, s in hits] == pytest.approx(
            [common + common + 0.8 * rare, common, 0.5 * common], abs=1e-5
        )
        # query values multiply: a term asked twice as strongly counts twice
        weighted = index.keyword_search("acme", sparse({20: 2.0}), 10)
        assert weighted == [
            (mid(1), pytest.approx(2 * common, abs=1e-5)),
            (mid(3), pytest.approx(common, abs=1e-5)),
        ]
        assert index.keyword_search("acme", sparse({99: 1.0}), 10) == []
        assert index.keyword_search("acme", SparseVector(), 10) == []
        assert index.keyword_search("acme", sparse({10: 1.0}), 0) == []

    def test_keyword_search_filters_and_limits(self, index: VectorIndex) -> None:
        self.keyword_corpus(index)
        query = sparse({10: 1.0, 20: 1.0})
        assert ranked_ids(index.keyword_search("acme", query, 1)) == [mid(1)]
        only_s2 = index.keyword_search("acme", query, 10, VectorFilter(streams=("s2",)))
        assert ranked_ids(only_s2) == [mid(2)]
        tagged = index.keyword_search("acme", query, 10, VectorFilter(tags=("x",)))
        assert ranked_ids(tagged) == [mid(3)]
        assert index.keyword_search("globex", query, 10) == []

    def test_keyword_statistics_are_the_tenants_own(self, index: VectorIndex) -> None:
        self.keyword_corpus(index)
        query = sparse({10: 1.0, 20: 1.0, 30: 1.0})
        before = index.keyword_search("acme", query, 10)
        hybrid_before = index.hybrid_search("acme", basis(0), query, 10)
        # another tenant with many points, some holding acme's rare term, one holding all
        index.upsert(
            [
                point(100 + n, basis(n % DIM), tenant="globex", keywords={30: 1.0, 10 + n: 1.0})
                for n in range(40)
            ]
        )
        index.upsert([point(200, basis(0), tenant="globex", keywords={10: 1.0, 20: 1.0})])
        after = index.keyword_search("acme", query, 10)
        assert ranked_ids(after) == ranked_ids(before)
        assert [s for _, s in after] == pytest.approx([s for _, s in before], abs=1e-6)
        assert_same_hits(index.hybrid_search("acme", basis(0), query, 10), hybrid_before)
        # and acme's own data does move acme's statistics
        index.upsert([point(5, basis(4), keywords={30: 1.0})])
        moved = dict(index.keyword_search("acme", query, 10))
        assert abs(moved[mid(1)] - dict(before)[mid(1)]) > 1e-3

    def test_hybrid_search_fuses_both_lists_by_weighted_rrf(self, index: VectorIndex) -> None:
        index.upsert(
            [
                point(1, basis(0), keywords={7: 0.2}),  # dense 1st, keyword 3rd
                point(2, basis(0, plus={1: 0.5}), keywords={7: 1.0}),  # dense 2nd, keyword 1st
                point(3, basis(0, plus={1: 2.0})),  # dense 3rd, no keywords
                point(4, basis(1), keywords={7: 0.5}),  # dense 4th, keyword 2nd
            ]
        )
        fusion = Fusion(k=6, dense_weight=1.0, keyword_weight=1.25, depth=10)
        hits = index.hybrid_search("acme", basis(0), sparse({7: 1.0}), 10, fusion=fusion)
        want = {
            mid(1): fused([(1, 1.0), (3, 1.25)], 6),
            mid(2): fused([(2, 1.0), (1, 1.25)], 6),
            mid(3): fused([(3, 1.0), (None, 1.25)], 6),
            mid(4): fused([(4, 1.0), (2, 1.25)], 6),
        }
        assert ranked_ids(hits) == sorted(want, key=lambda m: -want[m])
        assert dict(hits) == {m: pytest.approx(v, abs=1e-5) for m, v in want.items()}
        # depth cuts each list before fusion
        shallow = index.hybrid_search(
            "acme", basis(0), sparse({7: 1.0}), 10, fusion=Fusion(k=6, depth=1)
        )
        assert dict(shallow) == {
            mid(1): pytest.approx(fused([(1, 1.0)], 6), abs=1e-5),
            mid(2): pytest.approx(fused([(1, 1.25)], 6), abs=1e-5),
        }
        assert ranked_ids(index.hybrid_search("acme", basis(0), sparse({7: 1.0}), 2)) == [
            mid(2),
            mid(1),
        ]

    def test_hybrid_search_with_one_list(self, index: VectorIndex) -> None:
        self.keyword_corpus(index)
        fusion = Fusion(k=6, depth=10)
        keyword_only = index.hybrid_search("acme", None, sparse({20: 1.0}), 10, fusion=fusion)
        assert dict(keyword_only) == {
            mid(1): pytest.approx(fused([(1, 1.25)], 6), abs=1e-5),
            mid(3): pytest.approx(fused([(2, 1.25)], 6), abs=1e-5),
        }
        dense_only = index.hybrid_search(
            "acme", basis(2, plus={0: 0.5}), SparseVector(), 2, fusion=fusion
        )
        assert ranked_ids(dense_only) == [mid(3), mid(1)]
        assert dense_only[0][1] == pytest.approx(fused([(1, 1.0)], 6), abs=1e-5)
        assert index.hybrid_search("acme", None, SparseVector(), 10) == []

    def test_hybrid_search_filters_both_lists_and_stays_in_the_tenant(
        self, index: VectorIndex
    ) -> None:
        self.keyword_corpus(index)
        index.upsert([point(9, basis(0), tenant="globex", keywords={10: 5.0})])
        query = sparse({10: 1.0, 20: 1.0})
        everything = index.hybrid_search("acme", basis(0), query, 10)
        assert set(ranked_ids(everything)) == {mid(1), mid(2), mid(3), mid(4)}
        in_s1 = index.hybrid_search("acme", basis(1), query, 10, VectorFilter(streams=("s1",)))
        assert mid(2) not in ranked_ids(in_s1)
        assert set(ranked_ids(in_s1)) == {mid(1), mid(3), mid(4)}
        assert ranked_ids(index.hybrid_search("globex", basis(0), query, 10)) == [mid(9)]

    # Whether the IDF forgets a deleted point at once: the in-memory index does; Qdrant's
    # own statistics (a server's collection, a qdrant-edge shard holding one tenant) keep
    # counting deleted and replaced points until the optimizer vacuums their segment
    # (docs/adr/0015-keyword-search-in-the-vector-engine.md).
    exact_idf_after_delete = True

    def test_deleted_points_leave_keyword_search(self, index: VectorIndex) -> None:
        self.keyword_corpus(index)
        index.delete("acme", [mid(1)])
        hits = index.keyword_search("acme", sparse({10: 1.0, 20: 1.0}), 10)
        assert ranked_ids(hits) == [mid(2), mid(3)]
        if self.exact_idf_after_delete:
            assert [s for _, s in hits] == pytest.approx([idf(2, 1), 0.5 * idf(2, 1)], abs=1e-5)

    def test_keywords_match_chinese_and_english_within_a_tenant(self, index: VectorIndex) -> None:
        texts = {
            1: "我的尺码是L",
            2: "我喜欢喝咖啡",
            3: "The user prefers aisle seats",
            4: "Café au lait, every morning",
        }
        index.upsert([point(n, basis(n), keywords=_weights(t)) for n, t in texts.items()])
        index.upsert([point(9, basis(0), tenant="other", keywords=_weights("我的尺码是M"))])

        def found(query: str) -> list[str]:
            return ranked_ids(index.keyword_search("acme", query_vector(query), 10))

        assert found("尺码") == [mid(1)]
        assert found("Aisle seat") == [mid(3)]  # stemmed: seats -> seat
        assert found("cafe") == [mid(4)]  # diacritics folded
        assert found("nothing matches") == []
        assert found('"; DROP TABLE memories; --') == []

    def test_malformed_keyword_vector_is_invalid_input(self, index: VectorIndex) -> None:
        for bad in (
            SparseVector((3, 1), (1.0, 1.0)),  # not ascending
            SparseVector((1,), (1.0, 2.0)),  # not one value per dimension
            SparseVector((1,), (math.nan,)),
            SparseVector((2**32,), (1.0,)),
        ):
            with pytest.raises(InvalidInput) as raised:
                index.upsert(
                    [VectorPoint(mid(1), "acme", "s1", "fact", "shared", (), basis(0), bad)]
                )
            assert raised.value.code == "BAD_VECTOR"
            with pytest.raises(InvalidInput):
                index.keyword_search("acme", bad, 5)
        assert index.ids() == []

    # ---- writes ---------------------------------------------------------------------------

    def test_upsert_same_id_replaces_vector_and_payload(self, index: VectorIndex) -> None:
        index.upsert([point(1, basis(0), stream="old", tags=("t1",)), point(2, basis(1))])
        index.upsert([point(1, basis(1, plus={0: 0.1}), stream="new", tags=("t2",))])
        assert index.ids("acme") == [mid(1), mid(2)]
        # New vector: the replaced point is now second for axis 1 and alone for axis 0.
        assert ranked_ids(index.search("acme", basis(1), 10)) == [mid(2), mid(1)]
        assert index.search("acme", basis(0), 1)[0][0] == mid(1)
        assert index.search("acme", basis(0), 1)[0][1] < 0.5
        # New payload.
        assert index.search("acme", basis(0), 10, VectorFilter(streams=("old",))) == []
        assert index.search("acme", basis(0), 10, VectorFilter(tags=("t1",))) == []
        new = index.search("acme", basis(0), 10, VectorFilter(streams=("new",), tags=("t2",)))
        assert ranked_ids(new) == [mid(1)]

    def test_replaying_the_same_points_changes_nothing(self, index: VectorIndex) -> None:
        batch = [point(n, basis(n % DIM, plus={(n + 1) % DIM: 0.3})) for n in range(1, 6)]
        index.upsert(batch)
        before = index.search("acme", basis(1), 10)
        index.upsert(batch)
        index.upsert(list(reversed(batch)))
        assert index.ids("acme") == [mid(n) for n in range(1, 6)]
        assert ranked_ids(index.search("acme", basis(1), 10)) == ranked_ids(before)

    def test_delete_removes_and_ignores_unknown_ids(self, index: VectorIndex) -> None:
        index.upsert([point(1, basis(0)), point(2, basis(0)), point(3, basis(0))])
        index.delete("acme", [mid(2), mid(99), "not-a-uuid"])
        assert index.ids("acme") == [mid(1), mid(3)]
        assert ranked_ids(index.search("acme", basis(0), 10)) == [mid(1), mid(3)]
        index.delete("acme", [mid(2)])  # again: already gone
        index.delete("acme", [])
        assert index.ids("acme") == [mid(1), mid(3)]

    def test_delete_only_touches_the_named_tenant(self, index: VectorIndex) -> None:
        index.upsert([point(1, basis(0), tenant="acme"), point(2, basis(0), tenant="globex")])
        index.delete("acme", [mid(2)])
        assert index.ids("globex") == [mid(2)]
        index.delete("globex", [mid(2)])
        assert index.ids("globex") == []
        assert index.ids("acme") == [mid(1)]

    def test_ids_are_sorted_and_per_tenant(self, index: VectorIndex) -> None:
        index.upsert(
            [
                point(5, basis(0), tenant="acme"),
                point(2, basis(1), tenant="globex"),
                point(3, basis(2), tenant="acme"),
                point(1, basis(3), tenant="acme"),
                point(4, basis(4), tenant="globex"),
            ]
        )
        assert index.ids("acme") == [mid(1), mid(3), mid(5)]
        assert index.ids("globex") == [mid(2), mid(4)]
        assert index.ids("nobody") == []
        assert index.ids() == [mid(n) for n in range(1, 6)]

    def test_ids_page_through_many_points(self, index: VectorIndex) -> None:
        n_points = 2500  # more than one scroll page
        index.upsert([point(n, basis(n % DIM, plus={0: 0.5})) for n in range(n_points, 0, -1)])
        assert index.ids("acme") == sorted(mid(n) for n in range(1, n_points + 1))

    def test_clear_removes_everything(self, index: VectorIndex) -> None:
        index.upsert([point(1, basis(0), tenant="acme"), point(2, basis(0), tenant="globex")])
        index.clear()
        assert index.ids() == []
        assert index.search("acme", basis(0), 10) == []
        assert index.search("globex", basis(0), 10) == []
        index.upsert([point(3, basis(0))])
        assert ranked_ids(index.search("acme", basis(0), 10)) == [mid(3)]

    def test_flush_and_optimize_keep_results(self, index: VectorIndex) -> None:
        index.upsert([point(n, basis(n % DIM, plus={0: n / 50})) for n in range(1, 60)])
        index.delete("acme", [mid(n) for n in range(1, 60, 3)])
        before = index.search("acme", basis(0), 15)
        index.flush()
        index.optimize()
        assert_same_hits(index.search("acme", basis(0), 15), before)
        assert index.ids("acme") == sorted(mid(n) for n in range(1, 60) if n % 3 != 1)

    # ---- errors ---------------------------------------------------------------------------

    def test_wrong_dimension_is_invalid_input(self, index: VectorIndex) -> None:
        with pytest.raises(InvalidInput) as upserting:
            index.upsert([point(1, basis(0)), point(2, [1.0] * (DIM + 1))])
        assert upserting.value.code == "BAD_VECTOR_DIM"
        assert index.ids() == []  # the batch was rejected as a whole
        with pytest.raises(InvalidInput) as searching:
            index.search("acme", [1.0] * (DIM - 1), 5)
        assert searching.value.code == "BAD_VECTOR_DIM"

    def test_non_finite_vector_is_invalid_input(self, index: VectorIndex) -> None:
        with pytest.raises(InvalidInput) as upserting:
            index.upsert([point(1, [math.nan] + [0.0] * (DIM - 1))])
        assert upserting.value.code == "BAD_VECTOR"
        with pytest.raises(InvalidInput) as searching:
            index.search("acme", [math.inf] + [0.0] * (DIM - 1), 5)
        assert searching.value.code == "BAD_VECTOR"
        assert index.ids() == []

    def test_memory_id_must_be_a_uuid(self, index: VectorIndex) -> None:
        bad = VectorPoint("m-1", "acme", "s1", "fact", "shared", (), basis(0))
        with pytest.raises(InvalidInput) as raised:
            index.upsert([bad])
        assert raised.value.code == "BAD_MEMORY_ID"
        assert index.ids() == []

    # ---- concurrency ----------------------------------------------------------------------

    def test_concurrent_upserts_and_searches(self, index: VectorIndex) -> None:
        errors: list[BaseException] = []

        def write() -> None:
            try:
                for n in range(1, 201):
                    index.upsert([point(n, basis(n % DIM, plus={0: 0.1}))])
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        def read() -> None:
            try:
                for _ in range(200):
                    hits = index.search("acme", basis(0), 5)
                    assert len(hits) <= 5
            except BaseException as e:  # pragma: no cover - reported below
                errors.append(e)

        threads = [threading.Thread(target=write), threading.Thread(target=read)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert len(index.ids("acme")) == 200


class TestInMemoryVectorIndex(VectorIndexContract):
    def make_index(self, tmp_path: Path) -> VectorIndex:
        return InMemoryVectorIndex(DIM)


class TestQdrantEdgeIndex(VectorIndexContract):
    exact_idf_after_delete = False

    def make_index(self, tmp_path: Path) -> VectorIndex:
        return QdrantEdgeIndex(tmp_path / "vectors", DIM)

    def test_reopen_keeps_points_and_payload(self, tmp_path: Path) -> None:
        path = tmp_path / "vectors"
        first = QdrantEdgeIndex(path, DIM)
        first.upsert(
            [
                point(1, basis(0), tags=("a",)),
                point(2, basis(0, plus={1: 0.5}), stream="s2"),
                point(3, basis(0), tenant="globex"),
            ]
        )
        first.delete("acme", [mid(2)])
        first.upsert([point(4, basis(1))])
        expected = first.search("acme", basis(0), 10)
        first.flush()
        first.close()

        second = QdrantEdgeIndex(path, DIM)
        try:
            assert second.ids("acme") == [mid(1), mid(4)]
            assert second.ids("globex") == [mid(3)]
            assert_same_hits(second.search("acme", basis(0), 10), expected)
            tagged = second.search("acme", basis(0), 10, VectorFilter(tags=("a",)))
            assert ranked_ids(tagged) == [mid(1)]
        finally:
            second.close()

    def test_reopen_without_flush_keeps_points(self, tmp_path: Path) -> None:
        path = tmp_path / "vectors"
        first = QdrantEdgeIndex(path, DIM)
        first.upsert([point(1, basis(0)), point(2, basis(1))])
        first.close()  # close alone must not lose writes
        second = QdrantEdgeIndex(path, DIM)
        try:
            assert second.ids() == [mid(1), mid(2)]
        finally:
            second.close()

    def test_optimize_then_reopen_keeps_results(self, tmp_path: Path) -> None:
        path = tmp_path / "vectors"
        first = QdrantEdgeIndex(path, DIM)
        first.upsert(
            [point(n, basis(n % DIM, plus={(n + 3) % DIM: n / 300})) for n in range(1, 300)]
        )
        flt = VectorFilter(streams=("s1",))
        before = first.search("acme", basis(2), 10, flt)
        first.optimize()
        after = first.search("acme", basis(2), 10, flt)
        first.close()
        second = QdrantEdgeIndex(path, DIM)
        try:
            assert_same_hits(after, before)
            assert_same_hits(second.search("acme", basis(2), 10, flt), before)
        finally:
            second.close()

    def test_tenant_field_has_a_tenant_index(self, tmp_path: Path) -> None:
        from qdrant_edge import EdgeShard, KeywordIndexParams

        path = tmp_path / "vectors"
        QdrantEdgeIndex(path, DIM).close()
        shard = EdgeShard.load(str(path))
        try:
            schema = shard.info().payload_schema
            assert {"tenant", "stream", "type", "scope", "tags"} <= set(schema)
            params = schema["tenant"].params
            assert isinstance(params, KeywordIndexParams)
            assert params.is_tenant is True
        finally:
            shard.close()

    def test_second_opener_of_a_directory_is_refused(self, tmp_path: Path) -> None:
        path = tmp_path / "vectors"
        first = QdrantEdgeIndex(path, DIM)
        try:
            with pytest.raises(Unavailable):
                QdrantEdgeIndex(path, DIM)
        finally:
            first.close()

    def test_reopen_with_another_dimension_is_invalid_input(self, tmp_path: Path) -> None:
        path = tmp_path / "vectors"
        QdrantEdgeIndex(path, DIM).close()
        with pytest.raises(InvalidInput) as raised:
            QdrantEdgeIndex(path, DIM * 2)
        assert raised.value.code == "BAD_VECTOR_DIM"

    def test_use_after_close_is_unavailable(self, tmp_path: Path) -> None:
        index = QdrantEdgeIndex(tmp_path / "vectors", DIM)
        index.close()
        index.close()  # closing twice is harmless
        with pytest.raises(Unavailable):
            index.search("acme", basis(0), 5)
        with pytest.raises(Unavailable):
            index.upsert([point(1, basis(0))])


# ---- Qdrant server, through qdrant-client's local mode -------------------------------------
#
# No Qdrant server can run here; qdrant-client's local mode answers the same client calls a
# server receives (collections, payload indexes, upsert/query/scroll/delete with filters), so
# the adapter's whole request surface is exercised. Local mode ignores payload indexes (and
# warns about them), so index creation is checked by recording the calls instead.

_LOCAL_MODE_WARNING = "ignore:Payload indexes have no effect:UserWarning"


class RecordingClient(QdrantClient):
    """A local-mode client that records some calls and can be told to fail."""

    def __init__(self, path: str) -> None:
        super().__init__(path=path)
        self.payload_indexes: list[tuple[str, str, object]] = []
        self.query_filters: list[models.Filter | None] = []
        self.created: list[str] = []
        self.hide_existing_once = False  # answer "no" once, as if another creator raced us
        self.fail_with: Exception | None = None

    def collection_exists(self, collection_name: str, **kwargs: object) -> bool:
        if self.hide_existing_once:
            self.hide_existing_once = False
            return False
        return super().collection_exists(collection_name)

    def create_collection(self, collection_name: str, *args: object, **kwargs: object) -> bool:
        self.created.append(collection_name)
        return super().create_collection(collection_name, *args, **kwargs)  # type: ignore[arg-type]

    def create_payload_index(
        self, collection_name: str, field_name: str, *args: object, **kwargs: object
    ) -> models.UpdateResult:
        self.payload_indexes.append((collection_name, field_name, kwargs.get("field_schema")))
        return super().create_payload_index(collection_name, field_name, *args, **kwargs)  # type: ignore[arg-type]

    def query_points(
        self, collection_name: str, *args: object, **kwargs: object
    ) -> models.QueryResponse:  # type: ignore[override]
        if self.fail_with is not None:
            raise self.fail_with
        self.query_filters.append(kwargs.get("query_filter"))  # type: ignore[arg-type]
        return super().query_points(collection_name, *args, **kwargs)  # type: ignore[arg-type]


@pytest.mark.filterwarnings(_LOCAL_MODE_WARNING)
class TestQdrantServerIndexLocalMode(VectorIndexContract):
    """The contract plus the server adapter's own behaviour, on qdrant-client's local mode
    (the client calls a server receives; the real server runs the suite below)."""

    def server_index(self, client: QdrantClient, dim: int = DIM) -> QdrantServerIndex:
        return QdrantServerIndex(client, dim, "mnemo_test")

    def make_index(self, tmp_path: Path) -> VectorIndex:
        # ":memory:" runs the same engine and client calls as path=...; on disk, local mode
        # commits every point in its own SQLite transaction, which made the 2,500-point
        # paging test alone take ~40 s. The reopen test below runs on disk.
        return self.server_index(QdrantClient(":memory:"))

    def disk_index(self, tmp_path: Path) -> QdrantServerIndex:
        return self.server_index(QdrantClient(path=str(tmp_path / "q")))

    @pytest.fixture
    def recorded(self, tmp_path: Path) -> Iterator[tuple[QdrantServerIndex, RecordingClient]]:
        client = RecordingClient(str(tmp_path / "q"))
        index = self.server_index(client)
        yield index, client
        index.close()

    def test_collections_get_the_payload_indexes(
        self, recorded: tuple[QdrantServerIndex, RecordingClient]
    ) -> None:
        index, client = recorded
        index.upsert([point(1, basis(0))])
        name = index.collection_for("acme")
        assert client.created == [name]
        fields = {field: schema for coll, field, schema in client.payload_indexes if coll == name}
        assert set(fields) == {"tenant", "stream", "type", "scope", "tags"}
        tenant = fields["tenant"]
        assert isinstance(tenant, models.KeywordIndexParams)
        assert tenant.is_tenant is True
        info = client.get_collection(name)
        vectors = info.config.params.vectors
        assert isinstance(vectors, dict)
        assert (vectors["dense"].size, vectors["dense"].distance) == (DIM, models.Distance.COSINE)
        keywords = (info.config.params.sparse_vectors or {})["keywords"]
        assert keywords.modifier == models.Modifier.IDF
        index.upsert([point(2, basis(0))])  # created and checked once per process
        assert client.created == [name]

    def test_every_search_filters_by_tenant(
        self, recorded: tuple[QdrantServerIndex, RecordingClient]
    ) -> None:
        index, client = recorded
        index.upsert([point(1, basis(0), tags=("a",))])
        index.search("acme", basis(0), 5)
        index.search("acme", basis(0), 5, VectorFilter(tags=("a",), streams=("s1",)))
        assert len(client.query_filters) == 2
        for flt in client.query_filters:
            assert flt is not None
            assert flt.must is not None
            assert isinstance(flt.must, list)
            tenant = models.FieldCondition(key="tenant", match=models.MatchValue(value="acme"))
            assert tenant in flt.must

    def test_a_concurrent_creator_is_tolerated(
        self, recorded: tuple[QdrantServerIndex, RecordingClient]
    ) -> None:
        index, client = recorded
        name = index.collection_for("acme")
        other = self.server_index(client)  # another process that got there first
        other.upsert([point(1, basis(0))])
        client.hide_existing_once = True  # so our check misses it and our create fails
        index.upsert([point(2, basis(0))])
        assert index.ids("acme") == [mid(1), mid(2)]
        assert client.created == [name, name]

    def test_a_collection_dropped_elsewhere_is_created_again(
        self, recorded: tuple[QdrantServerIndex, RecordingClient]
    ) -> None:
        index, client = recorded
        index.upsert([point(1, basis(0))])
        client.delete_collection(index.collection_for("acme"))  # e.g. a rebuild elsewhere
        assert index.search("acme", basis(0), 5) == []
        assert index.ids("acme") == []
        index.delete("acme", [mid(1)])
        index.upsert([point(2, basis(0))])
        assert index.ids("acme") == [mid(2)]

    def test_reads_create_no_collection(
        self, recorded: tuple[QdrantServerIndex, RecordingClient]
    ) -> None:
        index, client = recorded
        assert index.search("acme", basis(0), 5) == []
        assert index.ids("acme") == []
        assert index.ids() == []
        index.delete("acme", [mid(1)])
        assert client.created == []
        assert client.get_collections().collections == []

    def test_existing_collection_of_another_dimension_is_invalid_input(
        self, tmp_path: Path
    ) -> None:
        client = QdrantClient(path=str(tmp_path / "q"))
        self.server_index(client, DIM * 2).upsert([point(1, [1.0] * (DIM * 2))])
        index = self.server_index(client)
        try:
            with pytest.raises(InvalidInput) as raised:
                index.upsert([point(2, basis(0))])
            assert raised.value.code == "BAD_VECTOR_DIM"
            with pytest.raises(InvalidInput):
                index.search("acme", basis(0), 5)
        finally:
            index.close()

    def test_client_errors_are_translated(
        self, recorded: tuple[QdrantServerIndex, RecordingClient]
    ) -> None:
        index, client = recorded
        index.upsert([point(1, basis(0))])
        down = ResponseHandlingException(httpx.ConnectError("connection refused"))
        client.fail_with = down
        with pytest.raises(Unavailable) as unavailable:
            index.search("acme", basis(0), 5)
        assert unavailable.value.__cause__ is down
        client.fail_with = UnexpectedResponse(
            500, "Internal Server Error", b'{"status":{"error":"boom"}}', httpx.Headers()
        )
        with pytest.raises(Unavailable):
            index.search("acme", basis(0), 5)
        client.fail_with = UnexpectedResponse(
            400,
            "Bad Request",
            b'{"status":{"error":"Wrong input: Vector dimension error: expected dim: 8, got 4"}}',
            httpx.Headers(),
        )
        with pytest.raises(InvalidInput) as bad_dim:
            index.search("acme", basis(0), 5)
        assert bad_dim.value.code == "BAD_VECTOR_DIM"

    def test_reopen_keeps_points_and_payload(self, tmp_path: Path) -> None:
        first = self.disk_index(tmp_path)
        first.upsert(
            [
                point(1, basis(0), tags=("a",)),
                point(2, basis(0, plus={1: 0.5}), stream="s2"),
                point(3, basis(0), tenant="globex"),
            ]
        )
        first.delete("acme", [mid(2)])
        expected = first.search("acme", basis(0), 10)
        first.close()  # closes the client too, releasing local mode's directory lock
        second = self.disk_index(tmp_path)
        try:
            assert second.ids() == [mid(1), mid(3)]
            assert_same_hits(second.search("acme", basis(0), 10), expected)
            tagged = second.search("acme", basis(0), 10, VectorFilter(tags=("a",)))
            assert ranked_ids(tagged) == [mid(1)]
        finally:
            second.close()

    def test_use_after_close_is_unavailable(self, tmp_path: Path) -> None:
        index = self.make_index(tmp_path)
        index.close()
        index.close()  # closing twice is harmless
        with pytest.raises(Unavailable):
            index.search("acme", basis(0), 5)
        with pytest.raises(Unavailable):
            index.upsert([point(1, basis(0))])

    def test_one_collection_per_tenant(
        self, recorded: tuple[QdrantServerIndex, RecordingClient]
    ) -> None:
        index, client = recorded
        client.create_collection(  # not Mnemo's: clear() leaves it alone
            "unrelated", vectors_config=models.VectorParams(size=2, distance=models.Distance.DOT)
        )
        index.upsert([point(1, basis(0), tenant="acme"), point(2, basis(0), tenant="globex")])
        names = sorted(c.name for c in client.get_collections().collections)
        assert names == ["mnemo_test_acme", "mnemo_test_globex", "unrelated"]
        assert index.count() == 2
        assert index.count("acme") == 1
        index.clear()
        assert [c.name for c in client.get_collections().collections] == ["unrelated"]

    def test_malformed_tenant_is_invalid_input(
        self, recorded: tuple[QdrantServerIndex, RecordingClient]
    ) -> None:
        index, _ = recorded
        with pytest.raises(InvalidInput):
            index.upsert([point(1, basis(0), tenant="../acme")])
        with pytest.raises(InvalidInput):
            index.search("Acme/x", basis(0), 5)

    def test_a_collection_of_an_older_mnemo_needs_a_rebuild(self, tmp_path: Path) -> None:
        client = QdrantClient(path=str(tmp_path / "q"))
        unnamed = models.VectorParams(size=DIM, distance=models.Distance.COSINE)
        client.create_collection("mnemo_test", vectors_config=unnamed)  # the old shared one
        client.create_collection("mnemo_test_acme", vectors_config=unnamed)
        index = self.server_index(client)
        try:
            assert index.legacy_collections() == ["mnemo_test", "mnemo_test_acme"]
            with pytest.raises(Unavailable) as raised:
                index.upsert([point(1, basis(0))])
            assert raised.value.code == "INDEX_NEEDS_REBUILD"
            with pytest.raises(Unavailable):
                index.hybrid_search("acme", basis(0), sparse({1: 1.0}), 5)
            index.clear()  # what a rebuild does first
            index.upsert([point(1, basis(0))])
            assert index.legacy_collections() == ["mnemo_test"]  # not one of its collections
        finally:
            index.close()

    def test_a_collection_of_another_keyword_format_needs_a_rebuild(self, tmp_path: Path) -> None:
        """Keyword weights made with other BM25 constants or terms would rank beside new
        ones as if they were comparable: the collection records its format and is refused
        (503 INDEX_NEEDS_REBUILD) under another one."""
        client = QdrantClient(path=str(tmp_path / "q"))
        index = self.server_index(client)
        try:
            index.upsert([point(1, basis(0))])
            assert index.legacy_collections() == []
            client.update_collection(
                "mnemo_test_acme", metadata={"mnemo_keyword_format": "terms-v0;bm25;ref=24.0"}
            )
        finally:
            index.close()
        client = QdrantClient(path=str(tmp_path / "q"))
        reopened = self.server_index(client)
        try:
            assert reopened.legacy_collections() == ["mnemo_test_acme"]
            with pytest.raises(Unavailable) as raised:
                reopened.search("acme", basis(0), 5)
            assert raised.value.code == "INDEX_NEEDS_REBUILD"
            reopened.clear()  # what a rebuild does first
            reopened.upsert([point(1, basis(0))])
            assert reopened.legacy_collections() == []
            assert [hit[0] for hit in reopened.search("acme", basis(0), 5)] == [mid(1)]
        finally:
            reopened.close()


class TestQdrantServerIndexOnServer(VectorIndexContract):
    """The contract on a real Qdrant server, each test in collections of its own."""

    exact_idf_after_delete = False

    def make_index(self, tmp_path: Path) -> VectorIndex:
        client = QdrantClient(url=qdrant_server_url(), check_compatibility=False)
        return QdrantServerIndex(client, DIM, f"mnemo_t{uuid.uuid4().hex[:12]}")

    @pytest.fixture
    def index(self, tmp_path: Path) -> Iterator[VectorIndex]:
        idx = self.make_index(tmp_path)
        yield idx
        idx.clear()
        idx.close()

    def test_the_configured_index_keeps_its_connection_between_requests(
        self, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The index a deployment builds from its settings reuses its connections, also to
        a server on 127.0.0.1 (where qdrant-client would otherwise open one per request)."""
        url = qdrant_server_url()
        port = httpx.URL(url).port
        assert port is not None, url
        opened: list[object] = []
        connect = socket.create_connection

        def counted(address: tuple[str, int], *args: object, **kwargs: object) -> socket.socket:
            if address[1] == port:
                opened.append(address)
            return connect(address, *args, **kwargs)  # type: ignore[arg-type]

        monkeypatch.setattr(socket, "create_connection", counted)
        settings = MnemoSettings(  # type: ignore[call-arg]
            qdrant_url=url, qdrant_collection=f"mnemo_t{uuid.uuid4().hex[:12]}"
        )
        index = make_index(settings, DIM)
        try:
            index.upsert([point(n, basis(n % DIM), keywords={n: 1.0}) for n in range(1, 6)])
            opened.clear()
            for n in range(20):
                hits = index.hybrid_search("acme", basis(n % DIM), sparse({n % 5 + 1: 1.0}), 3)
                assert hits
            # one per search without keep-alive; a pause of over two seconds on a loaded
            # machine may drop an idle one
            assert len(opened) <= 3, f"{len(opened)} connections for 20 sequential searches"
        finally:
            index.clear()
            index.close()

    def test_hybrid_search_is_one_query_request(self, tmp_path: Path) -> None:
        calls: list[str] = []

        class Counting(QdrantClient):
            def query_points(self, *args: object, **kwargs: object) -> models.QueryResponse:  # type: ignore[override]
                calls.append("query_points")
                return super().query_points(*args, **kwargs)  # type: ignore[arg-type]

        client = Counting(url=qdrant_server_url(), check_compatibility=False)
        index = QdrantServerIndex(client, DIM, f"mnemo_t{uuid.uuid4().hex[:12]}")
        try:
            index.upsert([point(n, basis(n % DIM), keywords={n: 1.0}) for n in range(1, 6)])
            calls.clear()
            hits = index.hybrid_search("acme", basis(1), sparse({2: 1.0, 3: 1.0}), 3)
            assert len(hits) == 3
            assert calls == ["query_points"]
        finally:
            index.clear()
            index.close()
