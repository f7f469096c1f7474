"""Audit anchors in a local SQLite file: DEVELOPMENT ONLY.

Used by the embedded mode when no OpenBao/Vault is configured, beside the development
signing key (`local_signer`), in `keys/audit-anchors.sqlite3` under the data directory.
Whoever can write the data directory can usually write this file too, so it catches
accidents (a store restored from an old copy) but no attacker; production keeps its
anchors in the vault (`vault_anchors`), out of the store writers' reach.

One row per (tenant, stream); an anchor moves only forward along one chain (the rule of
`CheckpointAnchors.advance`), read and written in one immediate transaction, so several
processes on the data directory never move it back."""

from __future__ import annotations

import json
import logging
import sqlite3
import threading
from pathlib import Path

from mnemo.adapters.sqlite_log import connect
from mnemo.domain.checkpoint import (
    Checkpoint,
    anchor_moves,
    checkpoint_from_record,
    checkpoint_record,
)
from mnemo.domain.errors import Unavailable
from mnemo.ports import CheckpointAnchors

__all__ = ["SqliteCheckpointAnchors"]

log = logging.getLogger("mnemo.audit")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS audit_anchors (
    tenant TEXT NOT NULL, stream TEXT NOT NULL, idx INTEGER NOT NULL, record TEXT NOT NULL,
    PRIMARY KEY (tenant, stream)
) WITHOUT ROWID;
"""


class SqliteCheckpointAnchors(CheckpointAnchors):
    def __init__(self, path: Path, synchronous: str = "FULL") -> None:
        self.name = "local development anchor file"
        log.warning(
            "development only: audit anchors are kept in a local file (%s); set "
            "MNEMO_VAULT_ADDR to keep them in OpenBao/Vault",
            path,
        )
        try:
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._conn = connect(path, synchronous)
            self._conn.executescript(_SCHEMA)
        except (OSError, sqlite3.Error) as exc:
            raise Unavailable(
                f"the audit anchors cannot be opened: {type(exc).__name__}",
                code="STORE_UNAVAILABLE",
            ) from exc
        self._lock = threading.Lock()

    def _run(self, sql: str, params: tuple[object, ...]) -> list[tuple[object, ...]]:
        try:
            with self._lock:
                return list(self._conn.execute(sql, params).fetchall())
        except sqlite3.Error as exc:
            raise Unavailable(
                f"the audit anchors are unavailable: {type(exc).__name__}",
                code="STORE_UNAVAILABLE",
            ) from exc

    def advance(self, checkpoint: Checkpoint) -> bool:
        c = checkpoint
        try:
            with self._lock:
                self._conn.execute("BEGIN IMMEDIATE")  # read and write as one, across processes
                try:
                    row = self._conn.execute(
                        "SELECT record FROM audit_anchors WHERE tenant = ? AND stream = ?",
                        (c.tenant, c.stream),
                    ).fetchone()
                    current = self._parse(c.tenant, c.stream, row[0]) if row else None
                    if not anchor_moves(current, c):
                        self._conn.execute("COMMIT")
                        return False
                    self._conn.execute(
                        "INSERT INTO audit_anchors (tenant, stream, idx, record) "
                        "VALUES (?, ?, ?, ?) ON CONFLICT (tenant, stream) DO UPDATE SET "
                        "idx = excluded.idx, record = excluded.record",
                        (c.tenant, c.stream, c.index, json.dumps(checkpoint_record(c))),
                    )
                    self._conn.execute("COMMIT")
                    return True
                except BaseException:
                    self._conn.execute("ROLLBACK")
                    raise
        except sqlite3.Error as exc:
            raise Unavailable(
                f"the audit anchors are unavailable: {type(exc).__name__}",
                code="STORE_UNAVAILABLE",
            ) from exc

    @staticmethod
    def _parse(tenant: str, stream: str, record: object) -> Checkpoint:
        try:
            anchor = checkpoint_from_record(json.loads(str(record)))
        except ValueError:
            anchor = None
        if anchor is None or (anchor.tenant, anchor.stream) != (tenant, stream):
            raise Unavailable(
                f"the audit anchor of {stream} is not a checkpoint record",
                code="AUDIT_ANCHOR_UNREADABLE",
            )
        return anchor

    def of_tenant(self, tenant: str) -> list[Checkpoint]:
        rows = self._run(
            "SELECT stream, record FROM audit_anchors WHERE tenant = ? ORDER BY stream",
            (tenant,),
        )
        return [self._parse(tenant, str(stream), record) for stream, record in rows]

    def close(self) -> None:
        with self._lock:
            self._conn.close()
