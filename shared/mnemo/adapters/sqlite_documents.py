"""The entity read model of documents in SQLite (mnemo.domain.document_index): a row per
document and a row per entity. Filters are served by the indexes: (tenant, field, key) for
text and currencies, (tenant, field, low) for numbers, amounts, days and periods' starts.
The embedded store keeps values in clear, like its other lookup columns (docs/security.md:
the file is the user's, `secure_delete` is on). The memory store owns the connection and
the transaction; these are its statements."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from mnemo.domain.document_index import DocumentRecord, EntityFilter, EntityRow
from mnemo.domain.projection import DropDocuments, PutDocument

__all__ = ["CHECKSUM", "SCHEMA", "TABLES", "apply", "document", "documents", "rows"]

TABLES = ("documents", "entities")

SCHEMA = """
CREATE TABLE IF NOT EXISTS documents (
    tenant TEXT NOT NULL, document_id TEXT NOT NULL, stream TEXT NOT NULL,
    event_id TEXT NOT NULL, sha256 TEXT NOT NULL, media_type TEXT NOT NULL,
    pages INTEGER NOT NULL, sections INTEGER NOT NULL, language TEXT NOT NULL,
    ingested_at TEXT NOT NULL,
    PRIMARY KEY (tenant, document_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS documents_by_stream ON documents (tenant, stream, document_id);
CREATE TABLE IF NOT EXISTS entities (
    tenant TEXT NOT NULL, document_id TEXT NOT NULL, stream TEXT NOT NULL,
    memory_id TEXT NOT NULL, section INTEGER NOT NULL, ordinal INTEGER NOT NULL,
    field TEXT NOT NULL, kind TEXT NOT NULL, key TEXT, low REAL, high REAL,
    start INTEGER NOT NULL, "end" INTEGER NOT NULL, document_level INTEGER NOT NULL,
    PRIMARY KEY (tenant, document_id, section, ordinal)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS entities_by_key ON entities (tenant, field, key);
CREATE INDEX IF NOT EXISTS entities_by_low ON entities (tenant, field, low);
CREATE INDEX IF NOT EXISTS entities_by_memory ON entities (tenant, memory_id);
"""

CHECKSUM = (
    "SELECT * FROM documents ORDER BY tenant, document_id",
    "SELECT * FROM entities ORDER BY tenant, document_id, section, ordinal",
)

_COLUMNS = (
    "tenant, document_id, stream, memory_id, section, ordinal, field, kind, key, low, high, "
    'start, "end", document_level'
)


def apply(cur: sqlite3.Cursor, write: PutDocument | DropDocuments) -> None:
    if isinstance(write, PutDocument):
        r = write.record
        cur.execute(
            "INSERT OR REPLACE INTO documents VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                r.tenant,
                r.document_id,
                r.stream,
                r.event_id,
                r.sha256,
                r.media_type,
                r.pages,
                r.sections,
                r.language,
                r.ingested_at,
            ),
        )
        cur.execute(
            "DELETE FROM entities WHERE tenant = ? AND document_id = ?", (r.tenant, r.document_id)
        )
        cur.executemany(
            f"INSERT INTO entities ({_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [
                (
                    e.tenant,
                    e.document_id,
                    e.stream,
                    e.memory_id,
                    e.section,
                    e.ordinal,
                    e.field,
                    e.kind,
                    e.key,
                    e.low,
                    e.high,
                    e.start,
                    e.end,
                    int(e.document_level),
                )
                for e in write.rows
            ],
        )
    elif write.memory_id is not None:
        cur.execute(
            "DELETE FROM entities WHERE tenant = ? AND memory_id = ? AND stream = ?",
            (write.tenant, write.memory_id, write.stream),
        )
    else:
        for table in TABLES:
            cur.execute(
                f"DELETE FROM {table} WHERE tenant = ? AND stream = ?",
                (write.tenant, write.stream),
            )


def purge(cur: sqlite3.Cursor, tenant: str) -> None:
    for table in TABLES:
        cur.execute(f"DELETE FROM {table} WHERE tenant = ?", (tenant,))


def _record(row: Sequence[Any]) -> DocumentRecord:
    return DocumentRecord(*row)


def document(
    cur: sqlite3.Cursor | sqlite3.Connection, tenant: str, document_id: str
) -> DocumentRecord | None:
    row = cur.execute(
        "SELECT * FROM documents WHERE tenant = ? AND document_id = ?", (tenant, document_id)
    ).fetchone()
    return _record(row) if row else None


def documents(
    cur: sqlite3.Cursor | sqlite3.Connection, tenant: str, stream: str
) -> list[DocumentRecord]:
    found = cur.execute(
        "SELECT * FROM documents WHERE tenant = ? AND stream = ? ORDER BY document_id",
        (tenant, stream),
    )
    return [_record(r) for r in found]


def rows(
    cur: sqlite3.Cursor | sqlite3.Connection, tenant: str, wanted: EntityFilter
) -> list[EntityRow]:
    """The rows of one filter, served by an index (never a scan of the tenant's rows)."""
    marks = ", ".join("?" for _ in wanted.fields)
    sql = f"SELECT {_COLUMNS} FROM entities WHERE tenant = ? AND field IN ({marks})"
    params: list[Any] = [tenant, *wanted.fields]
    if wanted.keys is not None:
        sql += f" AND key IN ({', '.join('?' for _ in wanted.keys)})"
        params += list(wanted.keys)
    if wanted.low_min is not None:
        sql += " AND low >= ?"
        params.append(wanted.low_min)
    if wanted.low_max is not None:
        sql += " AND low <= ?"
        params.append(wanted.low_max)
    if wanted.high_max is not None:
        sql += " AND high <= ?"
        params.append(wanted.high_max)
    if wanted.streams:
        sql += f" AND stream IN ({', '.join('?' for _ in wanted.streams)})"
        params += list(wanted.streams)
    found = cur.execute(sql + " ORDER BY document_id, section, ordinal", params)
    return [_row(r) for r in found]


def _row(r: Sequence[Any]) -> EntityRow:
    return EntityRow(
        str(r[0]),
        str(r[1]),
        str(r[2]),
        str(r[3]),
        int(r[4]),
        int(r[5]),
        str(r[6]),
        str(r[7]),
        r[8],
        r[9],
        r[10],
        int(r[11]),
        int(r[12]),
        bool(r[13]),
    )
