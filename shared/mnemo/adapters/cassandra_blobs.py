"""Blobs on Apache Cassandra (distributed mode), in chunked rows.

`blob_chunks` holds a blob's bytes in chunks of `chunk_bytes` (one partition per blob,
clustered by chunk number), and `blob_index` lists a tenant's blobs by stream with their
size and chunk count. The index row is written after every chunk, so it is the commit
mark: a blob whose index row is missing does not exist, whatever chunks a failed put left
(a later put of the same digest writes them again). Deletes read the index (one partition
per tenant) to name the chunk partitions; nothing scans the table. LOCAL_QUORUM reads and
writes; every statement is prepared once, only the validated keyspace name is formatted in.
"""

from __future__ import annotations

from typing import Any

from mnemo.adapters.cassandra_queries import CassandraQueries
from mnemo.adapters.local_blobs import check_blob
from mnemo.domain.errors import InvalidInput, Unavailable
from mnemo.domain.ids import valid_tenant
from mnemo.ports import BlobStore

__all__ = ["CassandraBlobStore"]

CHUNK_BYTES = 512 * 1024

_TABLES = (
    "CREATE TABLE IF NOT EXISTS {ks}.blob_chunks (tenant text, stream text, digest text, "
    "chunk int, data blob, PRIMARY KEY ((tenant, stream, digest), chunk))",
    "CREATE TABLE IF NOT EXISTS {ks}.blob_index (tenant text, stream text, digest text, "
    "size bigint, chunks int, PRIMARY KEY ((tenant), stream, digest))",
)
_QUERIES = {
    "chunk": "INSERT INTO {ks}.blob_chunks (tenant, stream, digest, chunk, data) "
    "VALUES (?, ?, ?, ?, ?)",
    "index": "INSERT INTO {ks}.blob_index (tenant, stream, digest, size, chunks) "
    "VALUES (?, ?, ?, ?, ?)",
    "find": "SELECT size, chunks FROM {ks}.blob_index WHERE tenant = ? AND stream = ? "
    "AND digest = ?",
    "chunks": "SELECT chunk, data FROM {ks}.blob_chunks WHERE tenant = ? AND stream = ? "
    "AND digest = ?",
    "of_stream": "SELECT digest FROM {ks}.blob_index WHERE tenant = ? AND stream = ?",
    "of_tenant": "SELECT stream, digest FROM {ks}.blob_index WHERE tenant = ?",
    "drop_chunks": "DELETE FROM {ks}.blob_chunks WHERE tenant = ? AND stream = ? AND digest = ?",
    "drop_stream": "DELETE FROM {ks}.blob_index WHERE tenant = ? AND stream = ?",
    "drop_tenant": "DELETE FROM {ks}.blob_index WHERE tenant = ?",
}


class CassandraBlobStore(CassandraQueries, BlobStore):
    def __init__(
        self, session: Any, keyspace: str, max_bytes: int, *, chunk_bytes: int = CHUNK_BYTES
    ) -> None:
        self._init_queries(session, keyspace, _QUERIES, "blob store")
        self.max_bytes = max_bytes
        self.chunk_bytes = chunk_bytes
        self._create(_TABLES)

    def put(self, tenant: str, stream: str, digest: str, data: bytes) -> None:
        check_blob(tenant, stream, digest, len(data), self.max_bytes)
        if list(self._run("find", [tenant, stream, digest])):
            return
        size = self.chunk_bytes
        chunks = [data[i : i + size] for i in range(0, len(data), size)] or [b""]
        for number, chunk in enumerate(chunks):
            self._run("chunk", [tenant, stream, digest, number, chunk])
        self._run("index", [tenant, stream, digest, len(data), len(chunks)])

    def get(self, tenant: str, stream: str, digest: str) -> bytes | None:
        check_blob(tenant, stream, digest, None, self.max_bytes)
        found = list(self._run("find", [tenant, stream, digest]))
        if not found:
            return None
        size, count = int(found[0][0]), int(found[0][1])
        rows = sorted(self._run("chunks", [tenant, stream, digest]), key=lambda r: int(r[0]))
        data = b"".join(bytes(r[1] or b"") for r in rows)
        if len(rows) != count or len(data) != size:
            # its index row is written last, so this is no put in flight but rows lost (or
            # two puts of one document that raced): asking again will not mend it
            raise Unavailable(
                "the blob store (Cassandra) holds an incomplete blob", code="BLOB_UNREADABLE"
            )
        return data

    def digests(self, tenant: str, stream: str) -> list[str]:
        check_blob(tenant, stream, "0" * 64, None, self.max_bytes)
        return sorted(str(r[0]) for r in self._run("of_stream", [tenant, stream]))

    def delete_stream(self, tenant: str, stream: str) -> int:
        found = self.digests(tenant, stream)
        for digest in found:
            self._run("drop_chunks", [tenant, stream, digest])
        self._run("drop_stream", [tenant, stream])
        return len(found)

    def delete_tenant(self, tenant: str) -> int:
        if not valid_tenant(tenant):
            raise InvalidInput("invalid tenant", code="INVALID_TENANT", field="tenant")
        found = [(str(r[0]), str(r[1])) for r in self._run("of_tenant", [tenant])]
        for stream, digest in found:
            self._run("drop_chunks", [tenant, stream, digest])
        self._run("drop_tenant", [tenant])
        return len(found)

    def count(self, tenant: str) -> int:
        if not valid_tenant(tenant):
            raise InvalidInput("invalid tenant", code="INVALID_TENANT", field="tenant")
        return len(list(self._run("of_tenant", [tenant])))
