"""Tenants, API keys and the vault's identity on Apache Cassandra: the distributed twin of
`sqlite_access`.

Tables come from schemas/cql/0002_access.cql and 0012_vault_identity.cql (applied by
`cassandra_store.migrate`). A new tenant, a new key and the vault's identity are inserted
with lightweight transactions (INSERT ... IF NOT EXISTS), so two writers cannot take the
same id, and the identity first recorded stays; a revocation is a conditional update on the key's
tenant, so a key is only ever revoked by its own tenant. Reads and writes use LOCAL_QUORUM.
Every statement is prepared once; only the validated keyspace name is formatted in, never
a value."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import Any

from cassandra import ConsistencyLevel

from mnemo.adapters.cassandra_queries import CassandraQueries
from mnemo.adapters.cassandra_store.schema import migrate
from mnemo.domain.access import ApiKey, Tenant
from mnemo.domain.errors import ConflictError, Unavailable
from mnemo.ports import AccessStore

__all__ = ["CassandraAccessStore"]

_QUERIES = {
    "tenant_add": "INSERT INTO {ks}.tenants (shard, tenant, body) VALUES (0, ?, ?) IF NOT EXISTS",
    "tenant_get": "SELECT body FROM {ks}.tenants WHERE shard = 0 AND tenant = ?",
    "tenant_list": "SELECT body FROM {ks}.tenants WHERE shard = 0 LIMIT ?",
    "key_add": "INSERT INTO {ks}.api_keys (key_id, tenant, body) VALUES (?, ?, ?) IF NOT EXISTS",
    "key_index": "INSERT INTO {ks}.api_keys_by_tenant (tenant, key_id) VALUES (?, ?)",
    "key_get": "SELECT tenant, body FROM {ks}.api_keys WHERE key_id = ?",
    "key_ids": "SELECT key_id FROM {ks}.api_keys_by_tenant WHERE tenant = ?",
    "key_revoke": "UPDATE {ks}.api_keys SET body = ? WHERE key_id = ? IF tenant = ?",
    "identity_add": "INSERT INTO {ks}.vault_identity (shard, identity) VALUES (0, ?) IF NOT EXISTS",
    "identity_get": "SELECT identity FROM {ks}.vault_identity WHERE shard = 0",
}
_CONDITIONAL = {"tenant_add", "key_add", "key_revoke", "identity_add"}
_MAX_KEY_BYTES = 65_535


def _usable(*values: str) -> bool:
    """Whether values can be partition keys: Cassandra refuses empty or oversized ones, and
    no stored tenant or key has such an id."""
    return all(v and len(v.encode("utf-8", "surrogatepass")) <= _MAX_KEY_BYTES for v in values)


class CassandraAccessStore(CassandraQueries, AccessStore):
    def __init__(
        self,
        session: Any,
        keyspace: str = "mnemo",
        *,
        migrate_schema: bool = True,
        serial_consistency: int = ConsistencyLevel.SERIAL,
    ) -> None:
        self._init_queries(
            session,
            keyspace,
            _QUERIES,
            "access store",
            serial=serial_consistency,
            conditional=_CONDITIONAL,
        )
        if migrate_schema:
            migrate(session, self._ks)

    def _rows(self, name: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        with self._translated():
            return [tuple(r) for r in self._run(name, params)]

    def create_tenant(self, tenant: Tenant) -> bool:
        return bool(self._run("tenant_add", [tenant.tenant, tenant.model_dump_json()]).was_applied)

    def tenant(self, tenant: str) -> Tenant | None:
        if not _usable(tenant):
            return None
        rows = self._rows("tenant_get", [tenant])
        return Tenant.model_validate_json(rows[0][0]) if rows else None

    def tenants(self, limit: int = 1_000) -> list[Tenant]:
        rows = self._rows("tenant_list", [max(1, limit)])
        return [Tenant.model_validate_json(r[0]) for r in rows]

    def add_key(self, key: ApiKey) -> None:
        # the index row first: a listing may show an id whose key is not there yet (skipped),
        # but never miss a key that authenticates
        self._run("key_index", [key.tenant, key.key_id])
        applied = self._run("key_add", [key.key_id, key.tenant, key.model_dump_json()]).was_applied
        if not applied:
            raise ConflictError("that key id is taken", code="KEY_EXISTS", field="key_id")

    def key(self, key_id: str) -> ApiKey | None:
        if not _usable(key_id):
            return None
        rows = self._rows("key_get", [key_id])
        return ApiKey.model_validate_json(rows[0][1]) if rows else None

    def keys(self, tenant: str) -> list[ApiKey]:
        if not _usable(tenant):
            return []
        found = []
        for (key_id,) in self._rows("key_ids", [tenant]):
            key = self.key(str(key_id))
            if key is not None and key.tenant == tenant:
                found.append(key)
        return sorted(found, key=lambda k: k.key_id)

    def revoke_key(self, tenant: str, key_id: str, at: datetime) -> ApiKey | None:
        key = self.key(key_id)
        if key is None or key.tenant != tenant or not _usable(tenant):
            return None
        if key.revoked_at is not None and key.revoked_at <= at:
            return key
        revoked = key.model_copy(update={"revoked_at": at})
        if not self._run("key_revoke", [revoked.model_dump_json(), key_id, tenant]).was_applied:
            return None
        return revoked

    def vault_identity(self) -> bytes | None:
        rows = self._rows("identity_get", [])
        return bytes(rows[0][0]) if rows and rows[0][0] is not None else None

    def record_vault_identity(self, identity: bytes) -> bytes:
        if self._run("identity_add", [identity]).was_applied:
            return identity
        kept = self.vault_identity()  # the transaction that wrote it is committed
        if kept is None:
            raise Unavailable(
                "the access store neither took the vault identity nor holds one",
                code="STORE_UNAVAILABLE",
            )
        return kept
