"""An exact, in-process VectorIndex: brute-force cosine similarity over numpy matrices.

It has the semantics and the errors of the Qdrant Edge adapter, so unit tests can use it as
a fast fake. It also defines the input checks every VectorIndex adapter shares.
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
from mnemo.ports import Vector, VectorFilter, VectorIndex, VectorPoint

__all__ = ["InMemoryVectorIndex", "check_memory_id", "check_vector", "is_memory_id"]

_NO_FILTER = VectorFilter()

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


def check_points(points: Sequence[VectorPoint], dim: int) -> None:
    """Check a whole batch before any of it is written."""
    for point in points:
        check_memory_id(point.memory_id)
        check_vector(point.vector, dim)


# ---- the index ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Row:
    unit: F32Matrix  # the normalized vector, shape (dim,)
    stream: str
    type: str
    scope: str
    tags: frozenset[str]


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
