"""VectorIndex over an embedded Qdrant Edge shard (the `qdrant-edge-py` package).

One shard directory holds every tenant; each point carries its tenant in the payload, and
`tenant` has a keyword index declared with is_tenant=True, so Qdrant lays segments out per
tenant and builds per-tenant HNSW graphs (m=0 globally, payload_m=16) -- every search is
tenant-filtered, so a global graph would never be used. The memory id (a canonical UUID) is
the point id.

Each point has two named vectors: `dense` (the embedding, cosine) and `keywords` (BM25 term
weights, a sparse vector with the IDF modifier). Keyword queries set the IDF corpus to the
tenant's points (SearchParams.idf), so inverse document frequencies are the tenant's own.
A hybrid search is one query: a dense and a keyword prefetch, each turned into reciprocal
ranks by the engine's RRF, summed with their weights by a formula (see ports.Fusion).

A shard made before keyword vectors (one unnamed dense vector), or whose keyword vectors
were made with another format (keywords.KEYWORD_FORMAT, recorded in `mnemo_index.json` in
the shard when it is created), cannot serve with this release's weights: it is moved aside
to `<dir>.pre-keywords` and an empty shard is created; `recreated` tells the caller, which
re-indexes from the log (see bootstrap).

The shard holds a lock on its write-ahead log: one QdrantEdgeIndex per directory per process.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Callable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, cast

from qdrant_edge import (
    CountRequest,
    Distance,
    EdgeConfig,
    EdgeShard,
    EdgeSparseVectorParams,
    EdgeVectorParams,
    Expression,
    FacetRequest,
    FieldCondition,
    Filter,
    Formula,
    Fusion,
    HasIdCondition,
    HasVectorCondition,
    HnswIndexConfig,
    IdfParams,
    KeywordIndexParams,
    MatchAny,
    MatchValue,
    Modifier,
    Point,
    Prefetch,
    Query,
    QueryRequest,
    ScrollRequest,
    SearchParams,
    SparseVector,
    UpdateOperation,
)

from mnemo.adapters.memory_index import (
    check_keywords,
    check_points,
    check_vector,
    hybrid_wanted,
    is_memory_id,
)
from mnemo.domain import keywords as kw
from mnemo.domain.errors import InvalidInput, MnemoError, Unavailable
from mnemo.ports import Fusion as FusionSpec
from mnemo.ports import Vector, VectorFilter, VectorIndex, VectorPoint

if TYPE_CHECKING:
    from qdrant_edge import ConditionType, PointId

__all__ = ["QdrantEdgeIndex"]

_NO_FILTER = VectorFilter()
_FUSION = FusionSpec()
_CONFIG_FILE = "edge_config.json"
_SCROLL_PAGE = 1024
_TENANT = "tenant"
_FILTER_FIELDS = ("stream", "type", "scope", "tags")
DENSE = "dense"
KEYWORDS = "keywords"
LEGACY_SUFFIX = ".pre-keywords"
FORMAT_FILE = "mnemo_index.json"  # the keyword format the shard's vectors were made with

log = logging.getLogger(__name__)


@lru_cache(maxsize=4096)
def _tenant_condition(tenant: str) -> FieldCondition:
    return FieldCondition(_TENANT, match=MatchValue(tenant))


@lru_cache(maxsize=4096)
def _tenant_filter(tenant: str) -> Filter:
    return Filter(must=[_tenant_condition(tenant)])


@lru_cache(maxsize=4096)
def _tenant_idf(tenant: str) -> SearchParams:
    """Inverse document frequencies over the tenant's points that hold keywords only (as a
    server counts them: a point without a keyword vector is not in the corpus)."""
    corpus = Filter(must=[_tenant_condition(tenant), HasVectorCondition(KEYWORDS)])
    return SearchParams(idf=IdfParams(corpus=corpus))


def _vectors(point: VectorPoint) -> dict[str, list[float] | SparseVector | list[list[float]]]:
    """A point's named vectors; no keyword vector at all when it has no terms."""
    vectors: dict[str, list[float] | SparseVector | list[list[float]]] = {DENSE: list(point.vector)}
    if point.keywords:
        vectors[KEYWORDS] = _sparse(point.keywords)
    return vectors


def _sparse(keywords: kw.SparseVector) -> SparseVector:
    return SparseVector(list(keywords.indices), list(keywords.values))


def is_legacy_shard(path: Path) -> bool:
    """Whether a shard directory was made by an older Mnemo: before keyword vectors (no
    `keywords` vector), or with keyword vectors of another format (keywords.KEYWORD_FORMAT,
    recorded in FORMAT_FILE when the shard is created)."""
    config = path / _CONFIG_FILE
    if not config.exists():
        return False
    found = json.loads(config.read_text(encoding="utf-8"))
    if KEYWORDS not in (found.get("sparse_vectors") or {}):
        return True
    return keyword_format_of(path) != kw.KEYWORD_FORMAT


def keyword_format_of(path: Path) -> str | None:
    """The keyword format a shard records (None: a shard from before formats were kept)."""
    try:
        found = json.loads((path / FORMAT_FILE).read_text(encoding="utf-8"))
    except (FileNotFoundError, ValueError):
        return None
    value = found.get("keyword_format") if isinstance(found, dict) else None
    return value if isinstance(value, str) else None


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
            vectors={DENSE: EdgeVectorParams(size=dim, distance=Distance.Cosine)},
            sparse_vectors={KEYWORDS: EdgeSparseVectorParams(modifier=Modifier.Idf)},
            hnsw_config=HnswIndexConfig(
                m=0, ef_construct=100, full_scan_threshold=10_000, payload_m=16
            ),
        )
        self.recreated = False  # a shard without keyword vectors was moved aside on open
        self._shard: EdgeShard | None = self._open()
        # every tenant that may hold points (a superset: deletes do not shrink it)
        self._tenants: set[str] = self._stored_tenants(self._shard)

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
                    _vectors(p),
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
            self._tenants.update(p.tenant for p in points)  # before: a superset at all times
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
            self._tenants.clear()

    # ---- reads ----------------------------------------------------------------------------

    def search(
        self, tenant: str, vector: Vector, limit: int, flt: VectorFilter = _NO_FILTER
    ) -> list[tuple[str, float]]:
        check_vector(vector, self._dim)
        if limit <= 0:
            return []
        where = self._where(tenant, flt)
        query = Query.Nearest(list(vector), using=DENSE)
        return self._query(
            lambda fetch: QueryRequest(limit=fetch, query=query, filter=where, with_payload=False),
            limit,
            "search",
        )

    def keyword_search(
        self, tenant: str, keywords: kw.SparseVector, limit: int, flt: VectorFilter = _NO_FILTER
    ) -> list[tuple[str, float]]:
        check_keywords(keywords)
        if limit <= 0 or not keywords:
            return []
        where = self._where(tenant, flt)
        query = Query.Nearest(_sparse(keywords), using=KEYWORDS)
        params = self._idf(tenant)
        return self._query(
            lambda fetch: QueryRequest(
                limit=fetch, query=query, filter=where, params=params, with_payload=False
            ),
            limit,
            "keyword search",
        )

    def hybrid_search(
        self,
        tenant: str,
        vector: Vector | None,
        keywords: kw.SparseVector,
        limit: int,
        flt: VectorFilter = _NO_FILTER,
        fusion: FusionSpec = _FUSION,
    ) -> list[tuple[str, float]]:
        if not hybrid_wanted(vector, keywords, limit, self._dim):
            return []
        where = self._where(tenant, flt)
        lists: list[Prefetch] = []
        weights: list[float] = []
        if vector is not None:
            dense = Query.Nearest(list(vector), using=DENSE)
            lists.append(Prefetch(limit=fusion.depth, query=dense, filter=where))
            weights.append(fusion.dense_weight)
        if keywords:
            sparse = Query.Nearest(_sparse(keywords), using=KEYWORDS)
            lists.append(
                Prefetch(limit=fusion.depth, query=sparse, filter=where, params=self._idf(tenant))
            )
            weights.append(fusion.keyword_weight)
        # each list's ranks become 1 / (k + rank) (the engine's RRF over that list alone), and
        # a formula adds them up, weighted; a point missing from a list gets 0 from it
        ranks = cast("Fusion", Fusion.Rrf(k=fusion.k + 1))  # the stub misses Rrf
        prefetches = [Prefetch(limit=fusion.depth, prefetches=[p], query=ranks) for p in lists]
        total = Expression.Sum(
            [
                Expression.Mult([Expression.Constant(w), Expression.Variable(f"$score[{i}]")])
                for i, w in enumerate(weights)
            ]
        )
        formula = Formula(total, defaults={f"$score[{i}]": 0.0 for i in range(len(weights))})
        return self._query(
            lambda fetch: QueryRequest(
                limit=fetch, prefetches=prefetches, query=formula, filter=where, with_payload=False
            ),
            limit,
            "hybrid search",
        )

    def _query(
        self, request: Callable[[int], QueryRequest], limit: int, action: str
    ) -> list[tuple[str, float]]:
        # Fetch one more than asked: when it ties with the last one asked for, fetch until the
        # tie is whole, so ties are broken by id and not by the shard's internal order.
        fetch = limit + 1
        with self._lock:
            shard = self._live()
            try:
                while True:
                    found = shard.query(request(fetch))
                    if len(found) < fetch or found[-1].score != found[limit - 1].score:
                        break
                    fetch *= 2
            except Exception as e:
                raise _translate(e, action) from e
        ranked = sorted((-hit.score, str(hit.id)) for hit in found)
        return [(memory_id, -neg) for neg, memory_id in ranked[:limit]]

    def _idf(self, tenant: str) -> SearchParams | None:
        """The tenant's IDF corpus, or None (the shard's own statistics) when the shard
        holds no other tenant: then the two are the same, and the shard's are precomputed
        while a corpus filter is counted per query term (tens of milliseconds at 30,000
        points)."""
        if self._tenants <= {tenant}:
            return None
        return _tenant_idf(tenant)

    @staticmethod
    def _stored_tenants(shard: EdgeShard) -> set[str]:
        found: set[str] = set()
        limit = 1_000
        while True:
            hits = shard.facet(FacetRequest(_TENANT, limit=limit, exact=True)).hits
            if len(hits) < limit:
                return found | {str(h.value) for h in hits}
            limit *= 10

    def _where(self, tenant: str, flt: VectorFilter) -> Filter:
        return _tenant_filter(tenant) if flt == _NO_FILTER else self._filter(tenant, flt)

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
            if is_legacy_shard(self._path):
                self._move_aside()
            if (self._path / _CONFIG_FILE).exists():
                # Passing the config checks it against the stored segments (e.g. the dim).
                shard = EdgeShard.load(str(self._path), self._config)
            else:
                shard = EdgeShard.create(str(self._path), self._config)
                (self._path / FORMAT_FILE).write_text(
                    json.dumps({"keyword_format": kw.KEYWORD_FORMAT}), encoding="utf-8"
                )
        except Exception as e:
            raise _translate(e, f"open {self._path}") from e
        try:
            self._ensure_field_indexes(shard)
        except Exception as e:
            shard.close()
            raise _translate(e, "create payload indexes") from e
        return shard

    def _move_aside(self) -> None:
        """Keep a shard without keyword vectors, or with vectors of another keyword format,
        next to the new one; the caller re-indexes."""
        target = self._path.with_name(self._path.name + LEGACY_SUFFIX)
        n = 1
        while target.exists():
            n += 1
            target = self._path.with_name(f"{self._path.name}{LEGACY_SUFFIX}-{n}")
        self._path.rename(target)
        self.recreated = True
        log.warning(
            "the vector index at %s was made by an older Mnemo (keyword vectors missing or "
            "of format %s, this one writes %s); it was moved to %s and an empty one created: "
            "the indexer re-indexes every memory from the log, and keyword matches are "
            "incomplete until it has caught up",
            self._path,
            keyword_format_of(self._path),
            kw.KEYWORD_FORMAT,
            target,
        )

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
