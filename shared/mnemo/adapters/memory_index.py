"""An exact, in-process VectorIndex: brute-force cosine similarity over numpy matrices,
BM25 over keyword vectors with the engine's IDF, and weighted reciprocal-rank fusion,
computed the way Qdrant computes them (float32).

It has the semantics and the errors of the Qdrant adapters, so unit tests can use it as a
fast fake, and the congruence test holds the three to the same rankings. It also defines
the input checks every VectorIndex adapter shares.
"""

from __future__ import annotations

import math
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from mnemo.domain.errors import InvalidInput
from mnemo.domain.keywords import SparseVector
from mnemo.ports import Fusion, Vector, VectorFilter, VectorIndex, VectorPoint

__all__ = [
    "InMemoryVectorIndex",
    "check_keywords",
    "check_memory_id",
    "check_vector",
    "idf",
    "is_memory_id",
    "rrf",
]

_NO_FILTER = VectorFilter()
_FUSION = Fusion()

F32Matrix = npt.NDArray[np.float32]


# ---- checks shared by the VectorIndex adapters -------------------------------------------


def check_vector(vector: Sequence[float], dim: int) -> None:
    """Raise InvalidInput unless `vector` has `dim` finite components."""
    if len(vector) != dim:
        raise InvalidInput(
            f"vector has {len(vector)} dimensions, the index expects {dim}",
            code="BAD_VECTOR_DIM",
            field="vector",
        )
    # One pass in C: any NaN or infinity makes the sum non-finite.
    if not math.isfinite(sum(vector)):
        raise InvalidInput("vector has a non-finite component", code="BAD_VECTOR", field="vector")


def is_memory_id(value: str) -> bool:
    """Whether `value` is a canonical (lowercase, hyphenated) UUID string, as memory ids are."""
    try:
        return str(uuid.UUID(value)) == value
    except (ValueError, TypeError, AttributeError):
        return False


def check_memory_id(value: str) -> None:
    if not is_memory_id(value):
        raise InvalidInput(
            f"memory id {value!r} is not a canonical UUID",
            code="BAD_MEMORY_ID",
            field="memory_id",
        )


def check_keywords(keywords: SparseVector) -> None:
    """Raise InvalidInput unless the keyword vector has ascending, distinct u32 dimensions,
    one finite value each."""
    if len(keywords.indices) != len(keywords.values):
        raise InvalidInput(
            "keyword vector has not one value per dimension", code="BAD_VECTOR", field="keywords"
        )
    previous = -1
    for i in keywords.indices:
        if not previous < i < 2**32:
            raise InvalidInput(
                "keyword dimensions must be ascending, distinct and below 2^32",
                code="BAD_VECTOR",
                field="keywords",
            )
        previous = i
    if not math.isfinite(sum(keywords.values)):
        raise InvalidInput(
            "keyword vector has a non-finite value", code="BAD_VECTOR", field="keywords"
        )


def hybrid_wanted(vector: Vector | None, keywords: SparseVector, limit: int, dim: int) -> bool:
    """Check a hybrid query's vectors (InvalidInput when malformed) and say whether there is
    anything to search for: a positive limit and a dense vector or at least one term."""
    if vector is not None:
        check_vector(vector, dim)
    check_keywords(keywords)
    return limit > 0 and (vector is not None or bool(keywords))


def check_points(points: Sequence[VectorPoint], dim: int) -> None:
    """Check a whole batch before any of it is written."""
    for point in points:
        check_memory_id(point.memory_id)
        check_vector(point.vector, dim)
        check_keywords(point.keywords)


def idf(points: int, holding: int) -> float:
    """The engine's inverse document frequency of a dimension held by `holding` of
    `points` points (always positive)."""
    return math.log(1.0 + (points - holding + 0.5) / (holding + 0.5))


def rrf(ranked_lists: Sequence[Sequence[str]], fusion: Fusion) -> dict[str, float]:
    """Weighted reciprocal-rank fusion of ranked lists (dense first, then keyword), as the
    engine computes it: each reciprocal rank 1 / (k + rank) in float32, the weighted sum in
    float64 (the engine's formula precision), the result in float32."""
    weights = (fusion.dense_weight, fusion.keyword_weight)
    fused: dict[str, float] = {}
    k = np.float32(fusion.k)
    for ids, weight in zip(ranked_lists, weights, strict=False):
        for rank, memory_id in enumerate(ids, 1):
            part = float(np.float32(1.0) / (np.float32(rank) + k))
            fused[memory_id] = fused.get(memory_id, 0.0) + weight * part
    return {m: float(np.float32(v)) for m, v in fused.items()}


# ---- the index ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Row:
    unit: F32Matrix  # the normalized vector, shape (dim,)
    stream: str
    type: str
    scope: str
    tags: frozenset[str]
    keywords: dict[int, float]


@dataclass(slots=True)
class _Snapshot:
    """One tenant's rows laid out for search; rebuilt after the tenant changes."""

    ids: list[str]
    rows: list[_Row]
    matrix: F32Matrix  # shape (n, dim)


class InMemoryVectorIndex(VectorIndex):
    """Exact nearest-neighbour search; everything lives in memory and nothing is durable."""

    def __init__(self, dim: int) -> None:
        if dim <= 0:
            raise InvalidInput(f"dimension must be positive, got {dim}", code="BAD_VECTOR_DIM")
        self._dim = dim
        self._lock = threading.Lock()
        self._rows: dict[str, dict[str, _Row]] = {}  # tenant -> memory id -> row
        self._owner: dict[str, str] = {}  # memory id -> tenant (ids are global, like points)
        self._snapshots: dict[str, _Snapshot] = {}

    @property
    def dim(self) -> int:
        return self._dim

    def upsert(self, points: Sequence[VectorPoint]) -> None:
        check_points(points, self._dim)
        rows = [(p.memory_id, p.tenant, self._row(p)) for p in points]
        with self._lock:
            for memory_id, tenant, row in rows:
                previous = self._owner.get(memory_id)
                if previous is not None and previous != tenant:
                    self._drop(previous, memory_id)
                self._owner[memory_id] = tenant
                self._rows.setdefault(tenant, {})[memory_id] = row
                self._snapshots.pop(tenant, None)

    def delete(self, tenant: str, memory_ids: Sequence[str]) -> None:
        with self._lock:
            for memory_id in memory_ids:
                if self._owner.get(memory_id) == tenant:
                    self._drop(tenant, memory_id)

    def search(
        self, tenant: str, vector: Vector, limit: int, flt: VectorFilter = _NO_FILTER
    ) -> list[tuple[str, float]]:
        check_vector(vector, self._dim)
        if limit <= 0:
            return []
        query = self._unit(vector)
        with self._lock:
            snap = self._snapshot(tenant)
        if snap is None:
            return []
        scores = snap.matrix @ query
        if flt != _NO_FILTER:
            keep = np.fromiter(
                (_matches(row, flt) for row in snap.rows), dtype=np.bool_, count=len(snap.rows)
            )
            candidates = np.flatnonzero(keep)
        else:
            candidates = np.arange(len(snap.ids))
        if len(candidates) > limit:
            # Keep everything scoring at least the limit-th best, ties included, then sort.
            kept = scores[candidates]
            cutoff = np.partition(kept, len(kept) - limit)[len(kept) - limit]
            candidates = candidates[kept >= cutoff]
        ranked = sorted((-float(scores[i]), snap.ids[i]) for i in candidates.tolist())[:limit]
        return [(memory_id, -neg) for neg, memory_id in ranked]

    def keyword_search(
        self, tenant: str, keywords: SparseVector, limit: int, flt: VectorFilter = _NO_FILTER
    ) -> list[tuple[str, float]]:
        check_keywords(keywords)
        if limit <= 0 or not keywords:
            return []
        with self._lock:
            snap = self._snapshot(tenant)
        if snap is None:
            return []
        query = dict(zip(keywords.indices, keywords.values, strict=True))
        holding = dict.fromkeys(query, 0)
        corpus = 0  # points holding a keyword vector: the others are not in the IDF's N
        for row in snap.rows:
            corpus += bool(row.keywords)
            for dim in query.keys() & row.keywords.keys():
                holding[dim] += 1
        weights = {
            d: np.float32(idf(corpus, n)) * np.float32(query[d]) for d, n in holding.items() if n
        }
        scored = []
        for memory_id, row in zip(snap.ids, snap.rows, strict=True):
            shared = weights.keys() & row.keywords.keys()
            if not shared or (flt != _NO_FILTER and not _matches(row, flt)):
                continue
            score = np.float32(0.0)
            for d in sorted(shared):
                score += weights[d] * np.float32(row.keywords[d])
            scored.append((-float(score), memory_id))
        scored.sort()
        return [(memory_id, -neg) for neg, memory_id in scored[:limit]]

    def hybrid_search(
        self,
        tenant: str,
        vector: Vector | None,
        keywords: SparseVector,
        limit: int,
        flt: VectorFilter = _NO_FILTER,
        fusion: Fusion = _FUSION,
    ) -> list[tuple[str, float]]:
        if not hybrid_wanted(vector, keywords, limit, self._dim):
            return []
        lists: list[list[str]] = []
        if vector is not None:
            lists.append([m for m, _ in self.search(tenant, vector, fusion.depth, flt)])
        else:
            lists.append([])
        if keywords:
            lists.append([m for m, _ in self.keyword_search(tenant, keywords, fusion.depth, flt)])
        fused = rrf(lists, fusion)
        ranked = sorted((-score, memory_id) for memory_id, score in fused.items())
        return [(memory_id, -neg) for neg, memory_id in ranked[:limit]]

    def ids(self, tenant: str | None = None) -> list[str]:
        with self._lock:
            if tenant is None:
                return sorted(self._owner)
            return sorted(self._rows.get(tenant, ()))

    def flush(self) -> None:
        """Nothing to do: the index is not durable."""

    def optimize(self) -> None:
        """Nothing to do: search is always exact."""

    def clear(self) -> None:
        with self._lock:
            self._rows.clear()
            self._owner.clear()
            self._snapshots.clear()

    # ---- internals ------------------------------------------------------------------------

    def _unit(self, vector: Vector) -> F32Matrix:
        arr = np.asarray(vector, dtype=np.float32)
        norm = float(np.linalg.norm(arr))
        return arr / np.float32(norm) if norm > 0.0 else arr

    def _row(self, point: VectorPoint) -> _Row:
        return _Row(
            unit=self._unit(point.vector),
            stream=point.stream,
            type=point.type,
            scope=point.scope,
            tags=frozenset(point.tags),
            keywords=dict(zip(point.keywords.indices, point.keywords.values, strict=True)),
        )

    def _drop(self, tenant: str, memory_id: str) -> None:
        rows = self._rows.get(tenant)
        if rows is None or rows.pop(memory_id, None) is None:
            return
        del self._owner[memory_id]
        if not rows:
            del self._rows[tenant]
        self._snapshots.pop(tenant, None)

    def _snapshot(self, tenant: str) -> _Snapshot | None:
        snap = self._snapshots.get(tenant)
        if snap is not None:
            return snap
        rows = self._rows.get(tenant)
        if not rows:
            return None
        ids = list(rows)
        ordered = [rows[i] for i in ids]
        matrix = np.stack([r.unit for r in ordered]).astype(np.float32, copy=False)
        snap = _Snapshot(ids=ids, rows=ordered, matrix=matrix)
        self._snapshots[tenant] = snap
        return snap


def _matches(row: _Row, flt: VectorFilter) -> bool:
    return (
        (not flt.streams or row.stream in flt.streams)
        and (not flt.types or row.type in flt.types)
        and (not flt.scopes or row.scope in flt.scopes)
        and (not flt.tags or not row.tags.isdisjoint(flt.tags))
    )
