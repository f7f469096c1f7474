"""VectorIndex over a Qdrant server, through `qdrant_client.QdrantClient`.

The index is handed a ready client: production passes
`QdrantClient(url=..., api_key=...)`; tests pass one for a real server, or qdrant-client's
local mode (`QdrantClient(path=...)` or `QdrantClient(":memory:")`), which answers the same
client calls. The index owns the client from then on: `close()` closes it.

Layout: one collection per tenant, f"{collection}_{tenant}". Each point has two named
vectors: `dense` (the embedding, cosine) and `keywords` (BM25 term weights, a sparse vector
with the IDF modifier). The server computes IDF over a whole collection (Qdrant 1.18 ignores
a query's `params.idf` corpus filter), so a collection per tenant is what keeps each
tenant's keyword statistics its own (docs/adr/0015). Queries still filter by tenant there,
as a second line of defence. A hybrid search is one Query API request: a dense and a
keyword prefetch, each turned into reciprocal ranks by the server's RRF and summed with
their weights by a formula (see ports.Fusion). The memory id (a canonical UUID) is
the point id.

Collections are created on first use (create if missing; a concurrent creator is tolerated),
with keyword payload indexes on tenant, stream, type, scope and tags. Reads of a collection
that does not exist yet find nothing and create nothing. A collection of another shape (one
made before keyword vectors, or one whose metadata records another keyword format than
keywords.KEYWORD_FORMAT) is refused with 503 INDEX_NEEDS_REBUILD: `legacy_collections()`
names them, and a rebuild of the index from the log replaces them.

Durability. Every write is sent with wait=True, so it has been applied (and written to the
server's WAL) when the call returns -- before the consumer commits its position. `flush()`
therefore has nothing left to do, and `optimize()` is a no-op too: the server builds its
indexes in the background.

Threads. `QdrantClient` over HTTP or gRPC may be shared by threads (httpx and grpc
clients are thread-safe), so client calls run concurrently; this class guards only its own
state (which collections are known to be ready) with a lock. qdrant-client's local mode
(`path=` or ":memory:") is a pure-Python engine that is not thread-safe -- a search racing an
upsert can index past the end of its arrays -- so with a local client every call is
serialized.

Filters are always built from `qdrant_client.models` objects, never from strings.
"""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Final, ParamSpec, TypeVar

from qdrant_client import QdrantClient, models
from qdrant_client.http.exceptions import ResponseHandlingException, UnexpectedResponse

from mnemo.adapters.memory_index import (
    check_keywords,
    check_points,
    check_vector,
    hybrid_wanted,
    is_memory_id,
)
from mnemo.domain.errors import InvalidInput, MnemoError, Unavailable
from mnemo.domain.keywords import KEYWORD_FORMAT, SparseVector
from mnemo.ports import Fusion, Vector, VectorFilter, VectorIndex, VectorPoint

if TYPE_CHECKING:
    from qdrant_client.conversions.common_types import PointId

__all__ = ["DEFAULT_COLLECTION", "QdrantServerIndex"]

DEFAULT_COLLECTION: Final = "mnemo_memories"

_NO_FILTER = VectorFilter()
_FUSION = Fusion()
DENSE: Final = "dense"
KEYWORDS: Final = "keywords"
_TENANT = "tenant"
_FORMAT_KEY = "mnemo_keyword_format"  # collection metadata: keywords.KEYWORD_FORMAT
_FILTER_FIELDS = ("stream", "type", "scope", "tags")
_NAME = re.compile(r"[a-z0-9_-]{1,128}")
_SCROLL_PAGE = 1024
# Points per upsert request: 256 x 384-d floats is ~1 MB of JSON, far below the server's
# default 32 MB request limit even for much larger vectors.
_UPSERT_CHUNK = 256
_DELETE_CHUNK = 1024

_T = TypeVar("_T")
_R = TypeVar("_R")
_P = ParamSpec("_P")


def _is_local(client: QdrantClient) -> bool:
    """Whether the client runs qdrant-client's in-process engine rather than a server."""
    options = client.init_options  # holds the api key too: never log it
    return options.get("path") is not None or options.get("location") == ":memory:"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, ResponseHandlingException):
        return f"{type(exc.source).__name__}: {exc.source}"
    return str(exc) or type(exc).__name__


def _is_missing_collection(exc: BaseException) -> bool:
    """Whether a client error says the collection does not exist (dropped by someone else)."""
    if isinstance(exc, UnexpectedResponse):
        return exc.status_code == 404
    message = str(exc).lower()
    # local mode: ValueError("Collection x not found"); gRPC: "Not found: Collection `x` ..."
    return "collection" in message and ("not found" in message or "doesn't exist" in message)


def _translate(exc: Exception, action: str) -> MnemoError:
    """A qdrant-client exception as a Mnemo error."""
    if isinstance(exc, MnemoError):
        return exc
    message = _describe(exc)
    lowered = message.lower()
    if "dimension" in lowered or "expected dim" in lowered or "vector size" in lowered:
        return InvalidInput(f"{action}: {message}", code="BAD_VECTOR_DIM", field="vector")
    if isinstance(exc, UnexpectedResponse) and exc.status_code in (400, 422):
        return InvalidInput(f"{action}: {message}")
    if isinstance(exc, ValueError | TypeError) and not isinstance(exc, UnicodeError):
        # local mode checks its input with ValueError, as the server answers 400
        return InvalidInput(f"{action}: {message}")
    # UnexpectedResponse (401/403/404/5xx...), ResponseHandlingException (connection refused,
    # timeouts), gRPC errors, ResourceExhaustedResponse, OSError, a closed client...
    return Unavailable(f"vector index {action} failed: {message}")


def _match(field: str, value: str) -> models.FieldCondition:
    return models.FieldCondition(key=field, match=models.MatchValue(value=value))


def _tenant_filter(tenant: str) -> models.Filter:
    return models.Filter(must=[_match(_TENANT, tenant)])


def _search_filter(tenant: str, flt: VectorFilter) -> models.Filter:
    must: list[models.Condition] = [_match(_TENANT, tenant)]
    for field, values in (
        ("stream", flt.streams),
        ("type", flt.types),
        ("scope", flt.scopes),
        ("tags", flt.tags),  # a list in the payload: matches when any element matches
    ):
        if values:
            must.append(models.FieldCondition(key=field, match=models.MatchAny(any=list(values))))
    return models.Filter(must=must)


def _sparse(keywords: SparseVector) -> models.SparseVector:
    return models.SparseVector(indices=list(keywords.indices), values=list(keywords.values))


def _vectors(point: VectorPoint) -> dict[str, list[float] | models.SparseVector]:
    """A point's named vectors; no keyword vector at all when it has no terms (the server
    leaves such points out of its IDF statistics, and so do the other adapters)."""
    vectors: dict[str, list[float] | models.SparseVector] = {DENSE: list(point.vector)}
    if point.keywords:
        vectors[KEYWORDS] = _sparse(point.keywords)
    return vectors


def _payload(point: VectorPoint) -> dict[str, object]:
    return {
        "tenant": point.tenant,
        "stream": point.stream,
        "type": point.type,
        "scope": point.scope,
        "tags": list(point.tags),
        "memory_id": point.memory_id,
    }


def _chunks(items: Sequence[_T], size: int) -> Iterator[Sequence[_T]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


class QdrantServerIndex(VectorIndex):
    """Cosine search on a Qdrant server; durable once each call returns."""

    def __init__(
        self,
        client: QdrantClient,
        dim: int,
        collection: str = DEFAULT_COLLECTION,
    ) -> None:
        if dim <= 0:
            raise InvalidInput(f"dimension must be positive, got {dim}", code="BAD_VECTOR_DIM")
        if not _NAME.fullmatch(collection):
            raise InvalidInput(
                f"collection name {collection!r} must match [a-z0-9_-]+", field="collection"
            )
        self._client = client
        self._dim = dim
        self._collection = collection
        self._lock = threading.Lock()
        self._ready: set[str] = set()  # collections created and checked by this process
        self._serial: AbstractContextManager[object] = (
            threading.Lock() if _is_local(client) else nullcontext()
        )
        self._closed = False

    @property
    def dim(self) -> int:
        return self._dim

    @property
    def collection(self) -> str:
        """The prefix of the per-tenant collections."""
        return self._collection

    def collection_for(self, tenant: str) -> str:
        """The collection that holds a tenant's points."""
        if not _NAME.fullmatch(tenant):
            raise InvalidInput(f"tenant id {tenant!r} is malformed", field="tenant")
        return f"{self._collection}_{tenant}"

    # ---- writes ---------------------------------------------------------------------------

    def upsert(self, points: Sequence[VectorPoint]) -> None:
        if not points:
            return
        check_points(points, self._dim)
        by_collection: dict[str, list[models.PointStruct]] = {}
        for p in points:
            by_collection.setdefault(self.collection_for(p.tenant), []).append(
                models.PointStruct(
                    id=p.memory_id,
                    vector=_vectors(p),
                    payload=_payload(p),
                )
            )
        self._check_open()
        # Not atomic across requests, but replaying the same points changes nothing, so a
        # consumer that retries after a failure converges.
        for name, structs in by_collection.items():
            for chunk in _chunks(structs, _UPSERT_CHUNK):
                self._upsert(name, list(chunk))

    def delete(self, tenant: str, memory_ids: Sequence[str]) -> None:
        # Ids that are not memory ids cannot be stored, so they are unknown: ignore them.
        wanted: list[models.ExtendedPointId] = sorted({m for m in memory_ids if is_memory_id(m)})
        if not wanted:
            return
        name = self.collection_for(tenant)
        self._check_open()
        if not self._ensure(name, create=False):
            return
        for chunk in _chunks(wanted, _DELETE_CHUNK):
            # By filter, not by id: a tenant can only ever delete its own points.
            selector = models.FilterSelector(
                filter=models.Filter(
                    must=[_match(_TENANT, tenant), models.HasIdCondition(has_id=list(chunk))]
                )
            )
            try:
                self._call(self._client.delete, name, points_selector=selector, wait=True)
            except Exception as e:
                if _is_missing_collection(e):
                    self._forget(name)
                    return  # dropped meanwhile: nothing left to delete
                raise _translate(e, "delete") from e

    def clear(self) -> None:
        """Drop every Mnemo collection; they are created again on the next write."""
        self._check_open()
        with self._lock:
            try:
                for name in self._collections():
                    self._call(self._client.delete_collection, name)
            except Exception as e:
                raise _translate(e, "clear") from e
            finally:
                self._ready.clear()

    # ---- reads ----------------------------------------------------------------------------

    def search(
        self, tenant: str, vector: Vector, limit: int, flt: VectorFilter = _NO_FILTER
    ) -> list[tuple[str, float]]:
        check_vector(vector, self._dim)
        if limit <= 0:
            return []
        return self._query(
            tenant,
            limit,
            "search",
            query=list(vector),
            using=DENSE,
            query_filter=_search_filter(tenant, flt),
        )

    def keyword_search(
        self, tenant: str, keywords: SparseVector, limit: int, flt: VectorFilter = _NO_FILTER
    ) -> list[tuple[str, float]]:
        check_keywords(keywords)
        if limit <= 0 or not keywords:
            return []
        return self._query(
            tenant,
            limit,
            "keyword search",
            query=_sparse(keywords),
            using=KEYWORDS,
            query_filter=_search_filter(tenant, flt),
        )

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
        where = _search_filter(tenant, flt)
        lists: list[models.Prefetch] = []
        weights: list[float] = []
        if vector is not None:
            lists.append(
                models.Prefetch(query=list(vector), using=DENSE, filter=where, limit=fusion.depth)
            )
            weights.append(fusion.dense_weight)
        if keywords:
            lists.append(
                models.Prefetch(
                    query=_sparse(keywords), using=KEYWORDS, filter=where, limit=fusion.depth
                )
            )
            weights.append(fusion.keyword_weight)
        # each list's ranks become 1 / (k + rank) (the server's RRF over that list alone), and
        # a formula adds them up, weighted; a point missing from a list gets 0 from it
        ranks = models.RrfQuery(rrf=models.Rrf(k=fusion.k + 1))
        prefetch = [models.Prefetch(prefetch=[p], query=ranks, limit=fusion.depth) for p in lists]
        formula = models.FormulaQuery(
            formula=models.SumExpression(
                sum=[models.MultExpression(mult=[w, f"$score[{i}]"]) for i, w in enumerate(weights)]
            ),
            defaults={f"$score[{i}]": 0.0 for i in range(len(weights))},
        )
        return self._query(
            tenant,
            limit,
            "hybrid search",
            prefetch=prefetch,
            query=formula,
            query_filter=where,
        )

    def _query(
        self, tenant: str, limit: int, action: str, **request: object
    ) -> list[tuple[str, float]]:
        """One Query API request, ties at the limit made whole and broken by id."""
        name = self.collection_for(tenant)
        self._check_open()
        if not self._ensure(name, create=False):
            return []
        # Fetch one more than asked: when it ties with the last one asked for, fetch until the
        # tie is whole, so ties are broken by id and not by the server's internal order.
        fetch = limit + 1
        try:
            while True:
                found = self._call(
                    self._client.query_points,
                    name,
                    limit=fetch,
                    with_payload=False,
                    with_vectors=False,
                    **request,  # type: ignore[arg-type]
                ).points
                if len(found) < fetch or found[-1].score != found[limit - 1].score:
                    break
                fetch *= 2
        except Exception as e:
            if _is_missing_collection(e):
                self._forget(name)
                return []
            raise _translate(e, action) from e
        ranked = sorted((-hit.score, str(hit.id)) for hit in found)
        return [(memory_id, -neg) for neg, memory_id in ranked[:limit]]

    def ids(self, tenant: str | None = None) -> list[str]:
        self._check_open()
        if tenant is not None:
            names = [self.collection_for(tenant)]
        else:
            try:
                names = self._collections()
            except Exception as e:
                raise _translate(e, "list collections") from e
        where = None if tenant is None else _tenant_filter(tenant)
        out: list[str] = []
        for name in names:
            if self._ensure(name, create=False):
                out.extend(self._scroll(name, where))
        out.sort()
        return out

    def count(self, tenant: str | None = None) -> int:
        """How many points the index holds, for one tenant or all."""
        self._check_open()
        if tenant is not None:
            names = [self.collection_for(tenant)]
        else:
            try:
                names = self._collections()
            except Exception as e:
                raise _translate(e, "list collections") from e
        where = None if tenant is None else _tenant_filter(tenant)
        total = 0
        for name in names:
            if not self._ensure(name, create=False):
                continue
            try:
                total += self._call(self._client.count, name, count_filter=where, exact=True).count
            except Exception as e:
                if not _is_missing_collection(e):
                    raise _translate(e, "count") from e
        return total

    # ---- maintenance ----------------------------------------------------------------------

    def flush(self) -> None:
        """Nothing to do: every write was sent with wait=True and is applied on return."""
        self._check_open()

    def optimize(self) -> None:
        """Nothing to do: the server's optimizers build the HNSW graphs in the background."""
        self._check_open()

    def close(self) -> None:
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._ready.clear()
        try:
            self._call(self._client.close)
        except Exception as e:
            raise _translate(e, "close") from e

    # ---- internals ------------------------------------------------------------------------

    def _call(self, fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs) -> _R:
        """A client call; serialized when the client is local mode, concurrent otherwise."""
        with self._serial:
            return fn(*args, **kwargs)

    def _check_open(self) -> None:
        if self._closed:
            raise Unavailable("vector index is closed")

    def _forget(self, name: str) -> None:
        with self._lock:
            self._ready.discard(name)

    def legacy_collections(self) -> list[str]:
        """Collections an older Mnemo made that this one cannot use: the shared collection
        (`collection` itself) and per-tenant ones without keyword vectors or with keyword
        vectors of another format (keywords.KEYWORD_FORMAT). Rebuild the
        index from the log to replace them (docs/adr/0015)."""
        self._check_open()
        try:
            names = [c.name for c in self._call(self._client.get_collections).collections]
            old = [n for n in names if n == self._collection]
            for name in self._collections():
                info = self._call(self._client.get_collection, name)
                if not self._has_keywords(info) or self._format_of(info) != KEYWORD_FORMAT:
                    old.append(name)
        except Exception as e:
            raise _translate(e, "list collections") from e
        return sorted(old)

    def _collections(self) -> list[str]:
        """Every collection this index may have written, that exists now."""
        prefix = f"{self._collection}_"
        return sorted(
            c.name
            for c in self._call(self._client.get_collections).collections
            if c.name.startswith(prefix) and _NAME.fullmatch(c.name[len(prefix) :])
        )

    def _upsert(self, name: str, points: list[models.PointStruct]) -> None:
        """Write points, creating the collection first; once more if it vanished meanwhile."""
        for attempt in (1, 2):
            self._ensure(name, create=True)
            try:
                self._call(self._client.upsert, name, points=points, wait=True)
                return
            except Exception as e:
                if attempt == 1 and _is_missing_collection(e):
                    self._forget(name)  # dropped by a clear() elsewhere: create it again
                    continue
                raise _translate(e, "upsert") from e

    def _scroll(self, name: str, where: models.Filter | None) -> list[str]:
        out: list[str] = []
        offset: PointId | None = None
        try:
            while True:
                records, offset = self._call(
                    self._client.scroll,
                    name,
                    scroll_filter=where,
                    limit=_SCROLL_PAGE,
                    offset=offset,
                    with_payload=False,
                    with_vectors=False,
                )
                out.extend(str(r.id) for r in records)
                if offset is None:
                    return out
        except Exception as e:
            if _is_missing_collection(e):
                self._forget(name)
                return []
            raise _translate(e, "scroll") from e

    def _ensure(self, name: str, *, create: bool) -> bool:
        """Whether the collection exists (creating it when asked); checked once per process."""
        if name in self._ready:
            return True
        with self._lock:
            if name in self._ready:
                return True
            try:
                if not self._call(self._client.collection_exists, name):
                    if not create:
                        return False
                    self._create(name)
                self._check_collection(name)
            except MnemoError:
                raise
            except Exception as e:
                raise _translate(e, f"prepare collection {name}") from e
            self._ready.add(name)
            return True

    def _create(self, name: str) -> None:
        try:
            self._call(
                self._client.create_collection,
                name,
                vectors_config={
                    DENSE: models.VectorParams(size=self._dim, distance=models.Distance.COSINE)
                },
                sparse_vectors_config={
                    KEYWORDS: models.SparseVectorParams(modifier=models.Modifier.IDF)
                },
                metadata={_FORMAT_KEY: KEYWORD_FORMAT},
            )
        except Exception:
            # Another process (or replica) may have created it between our check and create;
            # the server answers 409 and local mode a ValueError, so ask again.
            if not self._call(self._client.collection_exists, name):
                raise

    def _check_collection(self, name: str) -> None:
        """Refuse a collection of another shape; add any missing payload index."""
        info = self._call(self._client.get_collection, name)
        vectors = info.config.params.vectors
        params = vectors.get(DENSE) if isinstance(vectors, dict) else None
        if params is None or not self._has_keywords(info):
            # the server's state, not the request's: 503, until the index is rebuilt
            raise Unavailable(
                f"collection {name} was made by an older Mnemo (no `{DENSE}` and `{KEYWORDS}` "
                "vectors): rebuild the vector index from the log (mnemo admin rebuild)",
                code="INDEX_NEEDS_REBUILD",
            )
        if self._format_of(info) != KEYWORD_FORMAT:
            raise Unavailable(
                f"collection {name} holds keyword vectors of format {self._format_of(info)}, "
                f"this Mnemo writes {KEYWORD_FORMAT}: rebuild the vector index from the log "
                "(mnemo admin rebuild)",
                code="INDEX_NEEDS_REBUILD",
            )
        if params.size != self._dim:
            raise InvalidInput(
                f"collection {name} holds {params.size}-d vectors, the index expects {self._dim}",
                code="BAD_VECTOR_DIM",
            )
        if params.distance != models.Distance.COSINE:
            raise InvalidInput(f"collection {name} uses {params.distance} distance, not cosine")
        present = info.payload_schema or {}  # always empty in local mode (no payload indexes)
        wanted: list[tuple[str, models.KeywordIndexParams]] = [
            (
                _TENANT,
                models.KeywordIndexParams(type=models.KeywordIndexType.KEYWORD, is_tenant=True),
            ),
            *(
                (
                    field,
                    # No extra HNSW links per value: these only narrow a tenant's search.
                    models.KeywordIndexParams(
                        type=models.KeywordIndexType.KEYWORD, enable_hnsw=False
                    ),
                )
                for field in _FILTER_FIELDS
            ),
        ]
        for field, schema in wanted:
            if field not in present:
                # Idempotent on the server: creating an index that exists changes nothing.
                self._call(
                    self._client.create_payload_index, name, field, field_schema=schema, wait=True
                )

    @staticmethod
    def _format_of(info: models.CollectionInfo) -> str | None:
        found = (info.config.metadata or {}).get(_FORMAT_KEY)
        return found if isinstance(found, str) else None

    @staticmethod
    def _has_keywords(info: models.CollectionInfo) -> bool:
        sparse = info.config.params.sparse_vectors or {}
        params = sparse.get(KEYWORDS)
        return params is not None and params.modifier == models.Modifier.IDF

    def __repr__(self) -> str:
        return f"QdrantServerIndex(collection={self._collection!r}, dim={self._dim})"
