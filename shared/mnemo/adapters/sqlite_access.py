"""Tenants, API keys and the vault's identity in SQLite (`access.sqlite3` in the data
directory).

A file of its own: a rebuild of the read models never touches it, and it can be opened by
`mnemo admin` while a server runs (WAL mode). Every statement binds its values."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from mnemo.adapters.sqlite_file import SqliteFile
from mnemo.domain.access import ApiKey, Tenant
from mnemo.domain.errors import ConflictError
from mnemo.ports import AccessStore

__all__ = ["SqliteAccessStore"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tenants (tenant TEXT PRIMARY KEY, body TEXT NOT NULL) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS api_keys (
    key_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, body TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS api_keys_tenant ON api_keys (tenant, key_id);
CREATE TABLE IF NOT EXISTS vault_identity (
    shard INTEGER PRIMARY KEY CHECK (shard = 0), identity BLOB NOT NULL
);
"""


class SqliteAccessStore(AccessStore):
    def __init__(self, path: Path, synchronous: str = "FULL") -> None:
        self._file = SqliteFile(path, _SCHEMA, what="the access store", synchronous=synchronous)
        self._fetch = self._file.fetch

    def create_tenant(self, tenant: Tenant) -> bool:
        rows = self._fetch(
            "INSERT INTO tenants (tenant, body) VALUES (?, ?) ON CONFLICT DO NOTHING "
            "RETURNING tenant",
            (tenant.tenant, tenant.model_dump_json()),
        )
        return bool(rows)

    def tenant(self, tenant: str) -> Tenant | None:
        rows = self._fetch("SELECT body FROM tenants WHERE tenant = ?", (tenant,))
        return Tenant.model_validate_json(rows[0][0]) if rows else None

    def tenants(self, limit: int = 1_000) -> list[Tenant]:
        rows = self._fetch("SELECT body FROM tenants ORDER BY tenant LIMIT ?", (limit,))
        return [Tenant.model_validate_json(r[0]) for r in rows]

    def add_key(self, key: ApiKey) -> None:
        rows = self._fetch(
            "INSERT INTO api_keys (key_id, tenant, body) VALUES (?, ?, ?) ON CONFLICT DO NOTHING "
            "RETURNING key_id",
            (key.key_id, key.tenant, key.model_dump_json()),
        )
        if not rows:
            raise ConflictError("that key id is taken", code="KEY_EXISTS", field="key_id")

    def key(self, key_id: str) -> ApiKey | None:
        rows = self._fetch("SELECT body FROM api_keys WHERE key_id = ?", (key_id,))
        return ApiKey.model_validate_json(rows[0][0]) if rows else None

    def keys(self, tenant: str) -> list[ApiKey]:
        rows = self._fetch("SELECT body FROM api_keys WHERE tenant = ? ORDER BY key_id", (tenant,))
        return [ApiKey.model_validate_json(r[0]) for r in rows]

    def revoke_key(self, tenant: str, key_id: str, at: datetime) -> ApiKey | None:
        with self._file.immediate() as conn:
            row = conn.execute(
                "SELECT body FROM api_keys WHERE key_id = ? AND tenant = ?", (key_id, tenant)
            ).fetchone()
            if row is None:
                return None
            key = ApiKey.model_validate_json(row[0])
            if key.revoked_at is None or key.revoked_at > at:
                key = key.model_copy(update={"revoked_at": at})
                conn.execute(
                    "UPDATE api_keys SET body = ? WHERE key_id = ? AND tenant = ?",
                    (key.model_dump_json(), key_id, tenant),
                )
            return key

    def vault_identity(self) -> bytes | None:
        rows = self._fetch("SELECT identity FROM vault_identity WHERE shard = 0", ())
        return bytes(rows[0][0]) if rows else None

    def record_vault_identity(self, identity: bytes) -> bytes:
        with self._file.immediate() as conn:
            conn.execute(
                "INSERT INTO vault_identity (shard, identity) VALUES (0, ?) ON CONFLICT DO NOTHING",
                (identity,),
            )
            row = conn.execute("SELECT identity FROM vault_identity WHERE shard = 0").fetchone()
        return bytes(row[0])

    def close(self) -> None:
        self._file.close()
