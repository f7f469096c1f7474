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
from pathlib import Path

from mnemo.adapters.sqlite_file import SqliteFile
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
        self._file = SqliteFile(
            path,
            _SCHEMA,
            what="the audit anchors",
            plural=True,
            synchronous=synchronous,
            private_folder=True,
        )

    def advance(self, checkpoint: Checkpoint) -> bool:
        c = checkpoint
        with self._file.immediate() as conn:  # read and write as one, across processes
            row = conn.execute(
                "SELECT record FROM audit_anchors WHERE tenant = ? AND stream = ?",
                (c.tenant, c.stream),
            ).fetchone()
            current = self._parse(c.tenant, c.stream, row[0]) if row else None
            if not anchor_moves(current, c):
                return False
            conn.execute(
                "INSERT INTO audit_anchors (tenant, stream, idx, record) "
                "VALUES (?, ?, ?, ?) ON CONFLICT (tenant, stream) DO UPDATE SET "
                "idx = excluded.idx, record = excluded.record",
                (c.tenant, c.stream, c.index, json.dumps(checkpoint_record(c))),
            )
            return True

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
        rows = self._file.fetch(
            "SELECT stream, record FROM audit_anchors WHERE tenant = ? ORDER BY stream",
            (tenant,),
        )
        return [self._parse(tenant, str(stream), record) for stream, record in rows]

    def close(self) -> None:
        self._file.close()
