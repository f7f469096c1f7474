"""Signed audit checkpoints on Apache Cassandra: the distributed twin of
`sqlite_checkpoints`.

The tables live in a keyspace of their own choosing (by default the store's home keyspace;
`MNEMO_AUDIT_CHECKPOINT_KEYSPACE` names another): a rebuild runs the consumers into a fresh
keyspace, and pointing it at the live checkpoints makes the rebuilt chains answer to them.
They are created here (IF NOT EXISTS) rather than by the read models' migrations, because
they are not a read model. A checkpoint is inserted with a lightweight transaction (INSERT
... IF NOT EXISTS), so two writers of one stream cannot both take an index and nothing is
ever overwritten; `audit_checkpoint_streams` lists a tenant's streams. Times are kept as
microseconds since the epoch (Cassandra's timestamp has milliseconds only, and the signed
message has microseconds). LOCAL_QUORUM reads and writes; every statement is prepared once,
only the validated keyspace name is formatted in."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

from cassandra import ConsistencyLevel

from mnemo.adapters.cassandra_queries import CassandraQueries
from mnemo.domain.checkpoint import Checkpoint, Signature
from mnemo.ports import AuditCheckpoints

__all__ = ["CassandraAuditCheckpoints"]

_TABLES = (
    "CREATE TABLE IF NOT EXISTS {ks}.audit_checkpoints (tenant text, stream text, idx int, "
    "n bigint, hash text, prev text, signed_at_us bigint, key_version int, signature text, "
    "PRIMARY KEY ((tenant, stream), idx))",
    "CREATE TABLE IF NOT EXISTS {ks}.audit_checkpoint_streams (tenant text, stream text, "
    "PRIMARY KEY ((tenant), stream))",
)
_QUERIES = {
    "add": "INSERT INTO {ks}.audit_checkpoints (tenant, stream, idx, n, hash, prev, "
    "signed_at_us, key_version, signature) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) IF NOT EXISTS",
    "add_stream": "INSERT INTO {ks}.audit_checkpoint_streams (tenant, stream) VALUES (?, ?)",
    "last": "SELECT idx, n, hash, prev, signed_at_us, key_version, signature "
    "FROM {ks}.audit_checkpoints WHERE tenant = ? AND stream = ? ORDER BY idx DESC LIMIT 1",
    "all": "SELECT idx, n, hash, prev, signed_at_us, key_version, signature "
    "FROM {ks}.audit_checkpoints WHERE tenant = ? AND stream = ?",
    "streams": "SELECT stream FROM {ks}.audit_checkpoint_streams WHERE tenant = ?",
}
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def _micros(at: datetime) -> int:
    return (at - _EPOCH) // timedelta(microseconds=1)


def _checkpoint(tenant: str, stream: str, row: Sequence[Any]) -> Checkpoint:
    idx, n, link_hash, prev, at_us, version, signature = row
    return Checkpoint(
        tenant,
        stream,
        int(idx),
        int(n),
        str(link_hash),
        str(prev),
        _EPOCH + timedelta(microseconds=int(at_us)),
        Signature(int(version), str(signature)),
    )


class CassandraAuditCheckpoints(CassandraQueries, AuditCheckpoints):
    def __init__(
        self,
        session: Any,
        keyspace: str,
        *,
        serial_consistency: int = ConsistencyLevel.SERIAL,
    ) -> None:
        self._init_queries(
            session,
            keyspace,
            _QUERIES,
            "audit checkpoints",
            serial=serial_consistency,
            conditional={"add"},
        )
        self._create(_TABLES)

    def add(self, checkpoint: Checkpoint) -> bool:
        c = checkpoint
        self._run("add_stream", [c.tenant, c.stream])
        applied = self._run(
            "add",
            [
                c.tenant,
                c.stream,
                c.index,
                c.n,
                c.hash,
                c.prev,
                _micros(c.signed_at),
                c.signature.key_version,
                c.signature.value,
            ],
        ).was_applied
        return bool(applied)

    def last(self, tenant: str, stream: str) -> Checkpoint | None:
        rows = list(self._run("last", [tenant, stream]))
        return _checkpoint(tenant, stream, rows[0]) if rows else None

    def of_tenant(self, tenant: str) -> list[Checkpoint]:
        out: list[Checkpoint] = []
        streams = sorted(str(r[0]) for r in self._run("streams", [tenant]))
        for stream in streams:
            rows = sorted(self._run("all", [tenant, stream]), key=lambda r: int(r[0]))
            out.extend(_checkpoint(tenant, stream, r) for r in rows)
        return out
