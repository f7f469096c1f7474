"""The VectorIndex adapters agree: the same writes and searches give the same ranked ids,
for dense, keyword (BM25 with the engine's IDF) and hybrid (fused) searches, on the
in-memory index, qdrant-edge, qdrant-client's local mode and a real Qdrant server.

Dense searches:

Every vector is exactly representable and its cosine with every query is exact in float32:
pool vectors have four components of +-0.5 (norm 1) scaled by a power of two, queries are
unit vectors of the same kind. So every engine computes bit-identical scores, and the ranks
-- including the many ties, broken by id -- must match exactly. (With arbitrary floats,
identical vectors may score an ulp apart in one engine and not in another, e.g. numpy's
matrix-vector product rounds some rows differently, and tie order would then be noise.)
"""

from __future__ import annotations

import itertools
import random
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from qdrant_client import QdrantClient
from tests.support import qdrant_server_url

from mnemo.adapters.memory_index import InMemoryVectorIndex
from mnemo.adapters.qdrant_edge_index import QdrantEdgeIndex
from mnemo.adapters.qdrant_server_index import QdrantServerIndex
from mnemo.domain.ids import uuid7_at
from mnemo.domain.keywords import SparseVector
from mnemo.ports import Fusion, VectorFilter, VectorIndex, VectorPoint

DIM = 6
TENANTS = ("acme", "globex")


def mid(n: int) -> str:
    return str(uuid7_at(1_700_000_000_000 + n, n.to_bytes(10, "big")))


def half_vector(rng: random.Random, scale: float = 1.0) -> list[float]:
    """Four components of +-0.5 (a unit vector), times `scale`."""
    vec = [0.0] * DIM
    for axis in rng.sample(range(DIM), 4):
        vec[axis] = rng.choice((0.5, -0.5)) * scale
    return vec


RNG = random.Random(20261130)
POOL_VECTORS = [half_vector(RNG, RNG.choice((1.0, 2.0, 0.25))) for _ in range(12)]
QUERIES = [half_vector(RNG) for _ in range(6)]
FILTERS = [
    VectorFilter(),
    VectorFilter(streams=("s1",)),
    VectorFilter(types=("episode",), tags=("b",)),
    VectorFilter(tags=("a", "c")),
    VectorFilter(scopes=("private",), streams=("s1", "s2")),
]
LIMITS = (1, 3, 7, 100)


def make_point(n: int, rng: random.Random, *, tenant: str | None = None) -> VectorPoint:
    tags = tuple(t for t in ("a", "b", "c") if rng.random() < 0.4)
    return VectorPoint(
        memory_id=mid(n),
        tenant=tenant or rng.choice(TENANTS),
        stream=rng.choice(("s1", "s2", "s3")),
        type=rng.choice(("fact", "episode")),
        scope=rng.choice(("shared", "private")),
        tags=tags,
        vector=POOL_VECTORS[rng.randrange(len(POOL_VECTORS))],
    )


@pytest.fixture
def indexes(tmp_path: Path) -> Iterator[dict[str, VectorIndex]]:
    built: dict[str, VectorIndex] = {
        "memory": InMemoryVectorIndex(DIM),
        "edge": QdrantEdgeIndex(tmp_path / "edge", DIM),
        "local-mode": QdrantServerIndex(QdrantClient(":memory:"), DIM),
        "server": QdrantServerIndex(
            QdrantClient(url=qdrant_server_url(), check_compatibility=False),
            DIM,
            f"mnemo_c{uuid.uuid4().hex[:12]}",
        ),
    }
    yield built
    built["server"].clear()
    for index in built.values():
        index.close()


@pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")
def test_adapters_rank_alike(indexes: dict[str, VectorIndex]) -> None:
    rng = random.Random(7)
    first = [make_point(n, rng) for n in range(1, 41)]
    replaced = [make_point(n, rng, tenant=first[n - 1].tenant) for n in range(5, 40, 6)]
    later = [make_point(n, rng) for n in range(41, 51)]
    acme_ids = [p.memory_id for p in first if p.tenant == "acme"]
    globex_ids = [p.memory_id for p in first if p.tenant == "globex"]

    for index in indexes.values():
        index.upsert(first[:25])
        index.upsert(first[25:])
        index.upsert(replaced)
        index.delete("acme", acme_ids[::4])
        index.delete("acme", globex_ids[:3])  # another tenant's ids: nothing happens
        index.upsert(later)
        index.delete("globex", [*globex_ids[1::5], mid(999)])

    def observe(index: VectorIndex) -> list[object]:
        seen: list[object] = [index.ids(), *(index.ids(t) for t in TENANTS)]
        for tenant, query, flt, limit in itertools.product(TENANTS, QUERIES, FILTERS, LIMITS):
            seen.append(index.search(tenant, query, limit, flt))
        return seen

    def compare(reference: list[object], name: str, got: list[object]) -> None:
        assert len(got) == len(reference)
        for want, have in zip(reference, got, strict=True):
            if want and isinstance(want, list) and isinstance(want[0], tuple):
                assert isinstance(have, list)
                assert [m for m, _ in have] == [m for m, _ in want], name
                assert [s for _, s in have] == pytest.approx([s for _, s in want], abs=1e-6)
            else:
                assert have == want, name

    reference = observe(indexes["memory"])
    assert any(isinstance(r, list) and len(r) > 5 for r in reference)  # searches found things
    for name, index in indexes.items():
        compare(reference, name, observe(index))
    for name, index in indexes.items():
        index.flush()
        index.optimize()
        compare(reference, f"{name} after optimize", observe(index))


# ---- hybrid: keyword statistics and fusion -------------------------------------------------
#
# Dense vectors and keyword values are random floats, so no two points tie inside a list
# (the order of ties inside a prefetch is each engine's own, and would move fused ranks).
# Only inserts: a Qdrant server keeps counting deleted points in its IDF until it vacuums
# a segment (the contract suite covers deletes by ranking).

WORDS = 30


def keyword_point(n: int, rng: random.Random, tenant: str) -> VectorPoint:
    terms = sorted(rng.sample(range(1, WORDS + 1), rng.randint(0, 5)))  # some have none
    return VectorPoint(
        memory_id=mid(n),
        tenant=tenant,
        stream=rng.choice(("s1", "s2")),
        type=rng.choice(("fact", "history")),
        scope="shared",
        tags=tuple(t for t in ("a", "b") if rng.random() < 0.4),
        vector=[rng.gauss(0.0, 1.0) for _ in range(DIM)],
        keywords=SparseVector(tuple(terms), tuple(round(rng.uniform(0.1, 1.5), 4) for _ in terms)),
    )


@pytest.mark.filterwarnings("ignore:Payload indexes have no effect:UserWarning")
def test_adapters_rank_keywords_and_hybrid_alike(indexes: dict[str, VectorIndex]) -> None:
    rng = random.Random(20261202)
    acme = [keyword_point(n, rng, "acme") for n in range(1, 61)]
    globex = [keyword_point(n, rng, "globex") for n in range(100, 190)]
    for index in indexes.values():
        index.upsert(acme[:30])
        index.upsert(globex)
        index.upsert(acme[30:])
    queries = []
    for _ in range(8):
        terms = sorted(rng.sample(range(1, WORDS + 1), rng.randint(1, 4)))
        keywords = SparseVector(tuple(terms), tuple(1.0 for _ in terms))
        queries.append(([rng.gauss(0.0, 1.0) for _ in range(DIM)], keywords))
    fusions = [Fusion(), Fusion(k=2, dense_weight=1.5, keyword_weight=0.75, depth=8)]
    filters = [VectorFilter(), VectorFilter(streams=("s1",)), VectorFilter(tags=("a",))]

    def observe(index: VectorIndex) -> list[list[tuple[str, float]]]:
        seen = []
        for tenant, (vector, keywords), flt in itertools.product(TENANTS, queries, filters):
            seen.append(index.keyword_search(tenant, keywords, 10, flt))
            for fusion in fusions:
                seen.append(index.hybrid_search(tenant, vector, keywords, 10, flt, fusion))
                seen.append(index.hybrid_search(tenant, None, keywords, 10, flt, fusion))
        return seen

    reference = observe(indexes["memory"])
    assert sum(len(r) > 5 for r in reference) > len(reference) // 2  # searches found things
    for name, index in indexes.items():
        for want, have in zip(reference, observe(index), strict=True):
            assert [m for m, _ in have] == [m for m, _ in want], name
            assert [s for _, s in have] == pytest.approx([s for _, s in want], abs=1e-4), name
