"""Signed audit checkpoints in SQLite (`audit-checkpoints.sqlite3` in the data directory).

A file of its own, like the access store: `mnemo admin rebuild` drops and replays the read
models in store.sqlite3 and never touches this file, so a rebuilt chain is compared with
the checkpoints signed before. A checkpoint is inserted once per (tenant, stream, index)
and never replaced. Every statement binds its values."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from mnemo.adapters.sqlite_file import SqliteFile
from mnemo.domain.checkpoint import Checkpoint, Signature
from mnemo.ports import AuditCheckpoints

__all__ = ["SqliteAuditCheckpoints"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS audit_checkpoints (
    tenant TEXT NOT NULL, stream TEXT NOT NULL, idx INTEGER NOT NULL, n INTEGER NOT NULL,
    hash TEXT NOT NULL, prev TEXT NOT NULL, signed_at TEXT NOT NULL,
    key_version INTEGER NOT NULL, signature TEXT NOT NULL,
    PRIMARY KEY (tenant, stream, idx)
) WITHOUT ROWID;
"""
_COLS = "tenant, stream, idx, n, hash, prev, signed_at, key_version, signature"

Row = tuple[str, str, int, int, str, str, str, int, str]


def _checkpoint(row: Row) -> Checkpoint:
    tenant, stream, idx, n, link_hash, prev, signed_at, version, signature = row
    return Checkpoint(
        tenant,
        stream,
        int(idx),
        int(n),
        link_hash,
        prev,
        datetime.fromisoformat(signed_at),
        Signature(int(version), signature),
    )


class SqliteAuditCheckpoints(AuditCheckpoints):
    def __init__(self, path: Path, synchronous: str = "FULL") -> None:
        self._file = SqliteFile(
            path, _SCHEMA, what="the audit checkpoints", plural=True, synchronous=synchronous
        )

    def _fetch(self, sql: str, params: tuple[object, ...]) -> list[Row]:
        return self._file.fetch(sql, params)

    def add(self, checkpoint: Checkpoint) -> bool:
        c = checkpoint
        rows = self._fetch(
            f"INSERT INTO audit_checkpoints ({_COLS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?) "
            "ON CONFLICT DO NOTHING RETURNING idx",
            (
                c.tenant,
                c.stream,
                c.index,
                c.n,
                c.hash,
                c.prev,
                c.signed_at.isoformat(),
                c.signature.key_version,
                c.signature.value,
            ),
        )
        return bool(rows)

    def last(self, tenant: str, stream: str) -> Checkpoint | None:
        rows = self._fetch(
            f"SELECT {_COLS} FROM audit_checkpoints WHERE tenant = ? AND stream = ? "
            "ORDER BY idx DESC LIMIT 1",
            (tenant, stream),
        )
        return _checkpoint(rows[0]) if rows else None

    def of_tenant(self, tenant: str) -> list[Checkpoint]:
        rows = self._fetch(
            f"SELECT {_COLS} FROM audit_checkpoints WHERE tenant = ? ORDER BY stream, idx",
            (tenant,),
        )
        return [_checkpoint(r) for r in rows]

    def close(self) -> None:
        self._file.close()
