"""VectorIndex over an embedded Qdrant Edge shard (the `qdrant-edge-py` package).

One shard directory holds every tenant; each point carries its tenant in the payload, and
`tenant` has a keyword index declared with is_tenant=True, so Qdrant lays segments out per
tenant and builds per-tenant HNSW graphs (m=0 globally, payload_m=16) -- every search is
tenant-filtered, so a global graph would never be used. The memory id (a canonical UUID) is
the point id.

The shard holds a lock on its write-ahead log: one QdrantEdgeIndex per directory per process.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

from qdrant_edge import (
    CountRequest,
    Distance,
    EdgeConfig,
    EdgeShard,
    EdgeVectorParams,
    FieldCondition,
    Filter,
    HasIdCondition,
    HnswIndexConfig,
    KeywordIndexParams,
    MatchAny,
    MatchValue,
    Point,
    Query,
    QueryRequest,
    ScrollRequest,
    UpdateOperation,
)

from mnemo.adapters.memory_index import check_points, check_vector, is_memory_id
from mnemo.domain.errors import InvalidInput, MnemoError, Unavailable
from mnemo.ports import Vector, VectorFilter, VectorIndex, VectorPoint

if TYPE_CHECKING:
    from qdrant_edge import ConditionType, PointId

__all__ = ["QdrantEdgeIndex"]

_NO_FILTER = VectorFilter()
_CONFIG_FILE = "edge_config.json"
_SCROLL_PAGE = 1024
_TENANT = "tenant"
_FILTER_FIELDS = ("stream", "type", "scope", "tags")


@lru_cache(maxsize=4096)
def _tenant_condition(tenant: str) -> FieldCondition:
    return FieldCondition(_TENANT, match=MatchValue(tenant))


@lru_cache(maxsize=4096)
def _tenant_filter(tenant: str) -> Filter:
    return Filter(must=[_tenant_condition(tenant)])


def _translate(exc: Exception, action: str) -> MnemoError:
    """A driver exception as a Mnemo error (qdrant_edge raises bare Exception/ValueError)."""
    message = str(exc)
    if "dimension" in message.lower() or "expected vector size" in message:
        return InvalidInput(f"{action}: {message}", code="BAD_VECTOR_DIM", field="vector")
    if isinstance(exc, ValueError | TypeError):
        return InvalidInput(f"{action}: {message}")
    return Unavailable(f"vector index {action} failed: {message}")


class QdrantEdgeIndex(VectorIndex):
    """Approximate (HNSW, once optimized) cosine search; durable in a shard directory."""

    def __init__(self, path: Path, dim: int) -> None:
        if dim <= 0:
            raise InvalidInput(f"dimension must be positive, got {dim}", code="BAD_VECTOR_DIM")
        self._path = Path(path)
        self._dim = dim
        self._lock = threading.Lock()
        self._config = EdgeConfig(
            vectors=EdgeVectorParams(size=dim, distance=Distance.Cosine),
            hnsw_config=HnswIndexConfig(
                m=0, ef_construct=100, full_scan_threshold=10_000, payload_m=16
            ),
        )
        self._shard: EdgeShard | None = self._open()

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def path(self) -> Path:
        return self._path

    # ---- writes ---------------------------------------------------------------------------

    def upsert(self, points: Sequence[VectorPoint]) -> None:
        if not points:
            return
        check_points(points, self._dim)
        operation = UpdateOperation.upsert_points(
            [
                Point(
                    p.memory_id,
                    p.vector,
                    {
                        "tenant": p.tenant,
                        "stream": p.stream,
                        "type": p.type,
                        "scope": p.scope,
                        "tags": list(p.tags),
                        "memory_id": p.memory_id,
                    },
                )
                for p in points
            ]
        )
        with self._lock:
            shard = self._live()
            try:
                shard.update(operation)
            except Exception as e:
                raise _translate(e, "upsert") from e

    def delete(self, tenant: str, memory_ids: Sequence[str]) -> None:
        # Ids that are not memory ids cannot be stored, so they are unknown: ignore them.
        wanted: set[PointId] = {m for m in memory_ids if is_memory_id(m)}
        if not wanted:
            return
        # By filter, not by id: a tenant can only ever delete its own points.
        operation = UpdateOperation.delete_points_by_filter(
            Filter(must=[_tenant_condition(tenant), HasIdCondition(wanted)])
        )
        with self._lock:
            shard = self._live()
            try:
                shard.update(operation)
            except Exception as e:
                raise _translate(e, "delete") from e

    def clear(self) -> None:
        with self._lock:
            shard = self._live()
            try:
                shard.update(UpdateOperation.delete_points_by_filter(Filter()))
                shard.flush()
            except Exception as e:
                raise _translate(e, "clear") from e

    # ---- reads ----------------------------------------------------------------------------

    def search(
        self, tenant: str, vector: Vector, limit: int, flt: VectorFilter = _NO_FILTER
    ) -> list[tuple[str, float]]:
        check_vector(vector, self._dim)
        if limit <= 0:
            return []
        query = Query.Nearest(vector)
        where = _tenant_filter(tenant) if flt == _NO_FILTER else self._filter(tenant, flt)
        # Fetch one more than asked: when it ties with the last one asked for, fetch until the
        # tie is whole, so ties are broken by id and not by the shard's internal order.
        fetch = limit + 1
        with self._lock:
            shard = self._live()
            try:
                while True:
                    found = shard.query(
                        QueryRequest(limit=fetch, query=query, filter=where, with_payload=False)
                    )
                    if len(found) < fetch or found[-1].score != found[limit - 1].score:
                        break
                    fetch *= 2
            except Exception as e:
                raise _translate(e, "search") from e
        ranked = sorted((-hit.score, str(hit.id)) for hit in found)
        return [(memory_id, -neg) for neg, memory_id in ranked[:limit]]

    def ids(self, tenant: str | None = None) -> list[str]:
        where = None if tenant is None else _tenant_filter(tenant)
        out: list[str] = []
        offset: PointId | None = None
        with self._lock:
            shard = self._live()
            try:
                while True:
                    records, offset = shard.scroll(
                        ScrollRequest(
                            offset=offset,
                            limit=_SCROLL_PAGE,
                            filter=where,
                            with_payload=False,
                            with_vector=False,
                        )
                    )
                    out.extend(str(r.id) for r in records)
                    if offset is None:
                        break
            except Exception as e:
                raise _translate(e, "scroll") from e
        out.sort()
        return out

    def count(self, tenant: str | None = None) -> int:
        """How many points the index holds, for one tenant or all."""
        where = None if tenant is None else _tenant_filter(tenant)
        with self._lock:
            shard = self._live()
            try:
                return shard.count(CountRequest(exact=True, filter=where))
            except Exception as e:
                raise _translate(e, "count") from e

    # ---- maintenance ----------------------------------------------------------------------

    def flush(self) -> None:
        with self._lock:
            shard = self._live()
            try:
                shard.flush()
            except Exception as e:
                raise _translate(e, "flush") from e

    def optimize(self) -> None:
        with self._lock:
            shard = self._live()
            try:
                shard.optimize()
            except Exception as e:
                raise _translate(e, "optimize") from e

    def close(self) -> None:
        with self._lock:
            shard, self._shard = self._shard, None
            if shard is None:
                return
            try:
                shard.flush()
                shard.close()
            except Exception as e:
                raise _translate(e, "close") from e

    # ---- internals ------------------------------------------------------------------------

    def _open(self) -> EdgeShard:
        try:
            if (self._path / _CONFIG_FILE).exists():
                # Passing the config checks it against the stored segments (e.g. the dim).
                shard = EdgeShard.load(str(self._path), self._config)
            else:
                shard = EdgeShard.create(str(self._path), self._config)
        except Exception as e:
            raise _translate(e, f"open {self._path}") from e
        try:
            self._ensure_field_indexes(shard)
        except Exception as e:
            shard.close()
            raise _translate(e, "create payload indexes") from e
        return shard

    @staticmethod
    def _ensure_field_indexes(shard: EdgeShard) -> None:
        present = shard.info().payload_schema
        if _TENANT not in present:
            shard.update(
                UpdateOperation.create_field_index(_TENANT, KeywordIndexParams(is_tenant=True))
            )
        for field in _FILTER_FIELDS:
            if field not in present:
                # No extra HNSW links per value: these only narrow a tenant's search.
                shard.update(
                    UpdateOperation.create_field_index(field, KeywordIndexParams(enable_hnsw=False))
                )
        shard.flush()

    def _live(self) -> EdgeShard:
        if self._shard is None:
            raise Unavailable("vector index is closed")
        return self._shard

    @staticmethod
    def _filter(tenant: str, flt: VectorFilter) -> Filter:
        must: list[ConditionType] = [_tenant_condition(tenant)]
        for field, values in (
            ("stream", flt.streams),
            ("type", flt.types),
            ("scope", flt.scopes),
            ("tags", flt.tags),
        ):
            if values:
                must.append(FieldCondition(field, match=MatchAny(list(values))))
        return Filter(must=must)

    def __repr__(self) -> str:
        return f"QdrantEdgeIndex(path={str(self._path)!r}, dim={self._dim})"
