"""The toolchain read model in SQLite (mnemo.domain.toolchain): one row per toolchain, its
state as JSON, found by tenant and id, or by stream when the stream is forgotten. The
memory store owns the connection and the transaction; these are its statements."""

from __future__ import annotations

import sqlite3

from mnemo.domain.projection import DropToolchain, PutToolchain
from mnemo.domain.toolchain import ToolchainState

__all__ = ["SCHEMA", "TABLE", "apply", "get", "of_stream"]

TABLE = "toolchains"

SCHEMA = """
CREATE TABLE IF NOT EXISTS toolchains (
    tenant TEXT NOT NULL, toolchain_id TEXT NOT NULL, stream TEXT NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (tenant, toolchain_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS toolchains_by_stream ON toolchains (tenant, stream, toolchain_id);
"""

CHECKSUM = "SELECT tenant, toolchain_id, stream, body FROM toolchains ORDER BY tenant, toolchain_id"


def get(
    cur: sqlite3.Cursor | sqlite3.Connection, tenant: str, toolchain_id: str
) -> ToolchainState | None:
    row = cur.execute(
        "SELECT body FROM toolchains WHERE tenant = ? AND toolchain_id = ?", (tenant, toolchain_id)
    ).fetchone()
    return ToolchainState.model_validate_json(row[0]) if row else None


def of_stream(cur: sqlite3.Cursor, tenant: str, stream: str) -> list[str]:
    rows = cur.execute(
        "SELECT toolchain_id FROM toolchains WHERE tenant = ? AND stream = ? ORDER BY toolchain_id",
        (tenant, stream),
    )
    return [str(r[0]) for r in rows]


def apply(cur: sqlite3.Cursor, write: PutToolchain | DropToolchain) -> None:
    if isinstance(write, PutToolchain):
        s = write.state
        cur.execute(
            "INSERT OR REPLACE INTO toolchains VALUES (?, ?, ?, ?)",
            (s.tenant, s.toolchain_id, s.stream, s.model_dump_json()),
        )
    else:
        cur.execute(
            "DELETE FROM toolchains WHERE tenant = ? AND toolchain_id = ?",
            (write.tenant, write.toolchain_id),
        )
