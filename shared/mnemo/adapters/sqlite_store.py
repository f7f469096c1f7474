"""The embedded read models in SQLite: memories, registration outcomes, decay timers, the
audit chain, and consumer positions. Keyword search is the vector index's (BM25 keyword
vectors next to the embeddings); data directories from before keep an FTS5 table of terms,
which is dropped on open (`_retire_keyword_table`).

Positions live in the same database as the projections and commit in the same
transaction, so a consumer that crashes either did a whole batch or none of it.
"""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path

from mnemo.adapters import sqlite_documents, sqlite_toolchains
from mnemo.adapters.holder import holder_name
from mnemo.adapters.sqlite_log import connect
from mnemo.domain.context import ContextTemplate
from mnemo.domain.document_index import DocumentRecord, EntityFilter, EntityRow
from mnemo.domain.errors import FencedOff, Unavailable
from mnemo.domain.memory import Memory, MemoryStatus, MemoryType
from mnemo.domain.projection import (
    AuditRecord,
    BumpStats,
    ContextRecord,
    DropDocuments,
    DropTimer,
    DropToolchain,
    DropWeight,
    MemoryStats,
    Outcome,
    OutcomeKind,
    PurgeTenant,
    PutAudit,
    PutContextRecord,
    PutDocument,
    PutMemory,
    PutOutcome,
    PutTemplate,
    PutTimeline,
    PutTimer,
    PutToolchain,
    PutWeight,
    SetStatus,
    TimelineEntry,
    Timer,
    Write,
)
from mnemo.domain.toolchain import ToolchainState
from mnemo.ports import Claim, DocumentReads, MemoryQuery, MemoryStore, StoreTransaction

__all__ = ["SqliteMemoryStore"]

_SCHEMA = (
    """
CREATE TABLE IF NOT EXISTS memories (
    tenant      TEXT NOT NULL,
    memory_id   TEXT NOT NULL,
    stream      TEXT NOT NULL,
    type        TEXT NOT NULL,
    scope       TEXT NOT NULL,
    key         TEXT,
    status      TEXT NOT NULL,
    valid_until REAL,
    verify_due  REAL,
    version     INTEGER NOT NULL,
    hash        TEXT NOT NULL,
    body        TEXT NOT NULL,
    UNIQUE (tenant, memory_id)
);
CREATE INDEX IF NOT EXISTS memories_by_stream ON memories (tenant, stream, status, memory_id);
CREATE INDEX IF NOT EXISTS memories_by_key ON memories (tenant, stream, key, status);
CREATE INDEX IF NOT EXISTS memories_by_hash ON memories (tenant, stream, hash, status);
CREATE INDEX IF NOT EXISTS memories_by_tenant ON memories (tenant, status, memory_id);
CREATE TABLE IF NOT EXISTS memory_tags (
    tenant TEXT NOT NULL, tag TEXT NOT NULL, memory_id TEXT NOT NULL,
    PRIMARY KEY (tenant, tag, memory_id)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS memory_tags_by_memory ON memory_tags (tenant, memory_id);
CREATE TABLE IF NOT EXISTS outcomes (
    tenant TEXT NOT NULL, event_id TEXT NOT NULL, idx INTEGER NOT NULL,
    kind TEXT NOT NULL, memory_id TEXT, version INTEGER, reason_code TEXT, detail TEXT,
    PRIMARY KEY (tenant, event_id, idx)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS timers (
    tenant TEXT NOT NULL, memory_id TEXT NOT NULL, kind TEXT NOT NULL,
    due REAL NOT NULL, due_iso TEXT NOT NULL,
    PRIMARY KEY (tenant, memory_id, kind)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS timers_due ON timers (due);
CREATE TABLE IF NOT EXISTS audit_links (
    tenant TEXT NOT NULL, stream TEXT NOT NULL, n INTEGER NOT NULL, event_id TEXT NOT NULL,
    event_type TEXT NOT NULL, offset INTEGER NOT NULL, prev_hash TEXT NOT NULL,
    hash TEXT NOT NULL,
    PRIMARY KEY (tenant, stream, n)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS positions (consumer TEXT PRIMARY KEY, offset INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS position_claims (consumer TEXT PRIMARY KEY, epoch INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS position_holders (consumer TEXT PRIMARY KEY, holder TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS templates (
    tenant TEXT NOT NULL, name TEXT NOT NULL, version INTEGER NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (tenant, name, version)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS context_records (
    tenant TEXT NOT NULL, request_id TEXT NOT NULL, body TEXT NOT NULL,
    PRIMARY KEY (tenant, request_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS decay_weights (
    tenant TEXT NOT NULL, memory_id TEXT NOT NULL, weight REAL NOT NULL, trust REAL NOT NULL,
    base REAL NOT NULL,
    PRIMARY KEY (tenant, memory_id)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS timeline (
    tenant TEXT NOT NULL, memory_id TEXT NOT NULL, offset INTEGER NOT NULL, what TEXT NOT NULL,
    event_id TEXT NOT NULL, event_type TEXT NOT NULL, occurred_at TEXT NOT NULL,
    detail TEXT NOT NULL,
    PRIMARY KEY (tenant, memory_id, offset, what)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS memory_stats (
    tenant TEXT NOT NULL, memory_id TEXT NOT NULL,
    included INTEGER NOT NULL DEFAULT 0, truncated INTEGER NOT NULL DEFAULT 0,
    cited INTEGER NOT NULL DEFAULT 0, corrected INTEGER NOT NULL DEFAULT 0,
    last_used TEXT,
    PRIMARY KEY (tenant, memory_id)
) WITHOUT ROWID;
"""
    + sqlite_toolchains.SCHEMA
    + sqlite_documents.SCHEMA
)

_TABLES = (
    "memories",
    "memory_tags",
    "outcomes",
    "timers",
    "audit_links",
    "positions",
    "templates",
    "context_records",
    "memory_stats",
    "decay_weights",
    "timeline",
    sqlite_toolchains.TABLE,
    *sqlite_documents.TABLES,
)


def _ts(value: datetime | None) -> float | None:
    return value.timestamp() if value is not None else None


def _memory(row: tuple[str]) -> Memory:
    return Memory.model_validate_json(row[0])


def _context_record(body: str) -> ContextRecord:
    data = json.loads(body)
    for name in ("memory_ids", "truncated", "sections", "left_out"):
        data[name] = tuple(data.get(name, ()))
    data["credited"] = tuple((m, e) for m, e in data.get("credited", ()))
    return ContextRecord(**data)


class _Tx(StoreTransaction):
    def __init__(self, cur: sqlite3.Cursor) -> None:
        self._cur = cur
        self.erased = False  # whether a write forgot something (see `transaction`)

    def get(self, tenant: str, memory_id: str) -> Memory | None:
        row = self._cur.execute(
            "SELECT body FROM memories WHERE tenant = ? AND memory_id = ?", (tenant, memory_id)
        ).fetchone()
        return _memory(row) if row else None

    def current_for_key(self, tenant: str, stream: str, key: str) -> Memory | None:
        row = self._cur.execute(
            "SELECT body FROM memories WHERE tenant = ? AND stream = ? AND key = ? "
            "AND status = 'active' ORDER BY version DESC LIMIT 1",
            (tenant, stream, key),
        ).fetchone()
        return _memory(row) if row else None

    def find_by_hash(self, tenant: str, stream: str, content_hash: str) -> Memory | None:
        row = self._cur.execute(
            "SELECT body FROM memories WHERE tenant = ? AND stream = ? AND hash = ? "
            "AND status = 'active' LIMIT 1",
            (tenant, stream, content_hash),
        ).fetchone()
        return _memory(row) if row else None

    def stream_memories(self, tenant: str, stream: str) -> list[Memory]:
        rows = self._cur.execute(
            "SELECT body FROM memories WHERE tenant = ? AND stream = ? ORDER BY memory_id",
            (tenant, stream),
        )
        return [_memory(r) for r in rows]

    def memory_before(
        self, tenant: str, stream: str, memory_id: str, type: MemoryType
    ) -> Memory | None:
        row = self._cur.execute(
            "SELECT body FROM memories WHERE tenant = ? AND stream = ? AND type = ? "
            "AND memory_id < ? ORDER BY memory_id DESC LIMIT 1",
            (tenant, stream, type.value, memory_id),
        ).fetchone()
        return _memory(row) if row else None

    def tenant_memories(self, tenant: str) -> list[Memory]:
        rows = self._cur.execute(
            "SELECT body FROM memories WHERE tenant = ? ORDER BY memory_id", (tenant,)
        )
        return [_memory(r) for r in rows]

    def last_audit(self, tenant: str, stream: str) -> AuditRecord | None:
        row = self._cur.execute(
            f"SELECT {_AUDIT_COLS} FROM audit_links "
            "WHERE tenant = ? AND stream = ? ORDER BY n DESC LIMIT 1",
            (tenant, stream),
        ).fetchone()
        return AuditRecord(*row) if row else None

    def template(self, tenant: str, name: str, version: int) -> ContextTemplate | None:
        row = self._cur.execute(
            "SELECT body FROM templates WHERE tenant = ? AND name = ? AND version = ?",
            (tenant, name, version),
        ).fetchone()
        return ContextTemplate.model_validate_json(row[0]) if row else None

    def context_record(self, tenant: str, request_id: str) -> ContextRecord | None:
        row = self._cur.execute(
            "SELECT body FROM context_records WHERE tenant = ? AND request_id = ?",
            (tenant, request_id),
        ).fetchone()
        return _context_record(row[0]) if row else None

    def weight_of(self, tenant: str, memory_id: str) -> tuple[float, float, float] | None:
        row = self._cur.execute(
            "SELECT weight, trust, base FROM decay_weights WHERE tenant = ? AND memory_id = ?",
            (tenant, memory_id),
        ).fetchone()
        return (float(row[0]), float(row[1]), float(row[2])) if row else None

    def toolchain(self, tenant: str, toolchain_id: str) -> ToolchainState | None:
        return sqlite_toolchains.get(self._cur, tenant, toolchain_id)

    def stream_toolchains(self, tenant: str, stream: str) -> list[str]:
        return sqlite_toolchains.of_stream(self._cur, tenant, stream)

    def apply(self, writes: Sequence[Write]) -> None:
        for write in writes:
            if isinstance(write, PutToolchain | DropToolchain):
                sqlite_toolchains.apply(self._cur, write)
            elif isinstance(write, PutDocument | DropDocuments):
                self.erased = self.erased or isinstance(write, DropDocuments)
                sqlite_documents.apply(self._cur, write)
            elif isinstance(write, PutMemory):
                self._put_memory(write.memory)
            elif isinstance(write, SetStatus):
                current = self.get(write.tenant, write.memory_id)
                if current is None:
                    continue
                self.erased = self.erased or write.erase_content
                self._put_memory(write.applied_to(current))
            elif isinstance(write, PurgeTenant):
                self.erased = True
                self._purge_tenant(write.tenant)
            elif isinstance(write, PutOutcome):
                o = write.outcome
                self._cur.execute(
                    "INSERT OR REPLACE INTO outcomes VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        o.tenant,
                        o.event_id,
                        o.index,
                        o.kind.value,
                        o.memory_id,
                        o.version,
                        o.reason_code,
                        o.detail,
                    ),
                )
            elif isinstance(write, PutTimer):
                t = write.timer
                self._cur.execute(
                    "INSERT OR REPLACE INTO timers VALUES (?, ?, ?, ?, ?)",
                    (t.tenant, t.memory_id, t.kind, t.due_at.timestamp(), t.due_at.isoformat()),
                )
            elif isinstance(write, DropTimer):
                self._cur.execute(
                    "DELETE FROM timers WHERE tenant = ? AND memory_id = ? AND kind = ?",
                    (write.tenant, write.memory_id, write.kind),
                )
            elif isinstance(write, PutTemplate):
                tpl = write.template
                self._cur.execute(
                    "INSERT OR REPLACE INTO templates VALUES (?, ?, ?, ?)",
                    (write.tenant, tpl.name, tpl.version, tpl.model_dump_json()),
                )
            elif isinstance(write, PutContextRecord):
                c = write.record
                self._cur.execute(
                    "INSERT OR REPLACE INTO context_records VALUES (?, ?, ?)",
                    (c.tenant, c.request_id, json.dumps(asdict(c), sort_keys=True)),
                )
            elif isinstance(write, BumpStats):
                b = write
                self._cur.execute(
                    "INSERT INTO memory_stats VALUES (?, ?, ?, ?, ?, ?, ?) "
                    "ON CONFLICT (tenant, memory_id) DO UPDATE SET "
                    "included = included + excluded.included, "
                    "truncated = truncated + excluded.truncated, "
                    "cited = cited + excluded.cited, corrected = corrected + excluded.corrected, "
                    "last_used = MAX(COALESCE(last_used, ''), excluded.last_used)",
                    (
                        b.tenant,
                        b.memory_id,
                        b.included,
                        b.truncated,
                        b.cited,
                        b.corrected,
                        b.at.astimezone(UTC).isoformat(),
                    ),
                )
            elif isinstance(write, DropWeight):
                self._cur.execute(
                    "DELETE FROM decay_weights WHERE tenant = ? AND memory_id = ?",
                    (write.tenant, write.memory_id),
                )
            elif isinstance(write, PutWeight):
                self._cur.execute(
                    "INSERT OR REPLACE INTO decay_weights VALUES (?, ?, ?, ?, ?)",
                    (write.tenant, write.memory_id, write.weight, write.trust, write.base),
                )
            elif isinstance(write, PutTimeline):
                e = write.entry
                self._cur.execute(
                    "INSERT OR REPLACE INTO timeline VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        e.tenant,
                        e.memory_id,
                        e.offset,
                        e.what,
                        e.event_id,
                        e.event_type,
                        e.occurred_at,
                        e.detail,
                    ),
                )
            elif isinstance(write, PutAudit):
                r = write.record
                self._cur.execute(
                    "INSERT OR REPLACE INTO audit_links VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (
                        r.tenant,
                        r.stream,
                        r.n,
                        r.event_id,
                        r.event_type,
                        r.offset,
                        r.prev_hash,
                        r.hash,
                    ),
                )

    def _purge_tenant(self, tenant: str) -> None:
        cur = self._cur
        for table in (
            "memories",
            "memory_tags",
            "outcomes",
            "timers",
            "context_records",
            "decay_weights",
            "timeline",
            "memory_stats",
            sqlite_toolchains.TABLE,
        ):
            cur.execute(f"DELETE FROM {table} WHERE tenant = ?", (tenant,))
        sqlite_documents.purge(cur, tenant)

    def _put_memory(self, memory: Memory) -> None:
        cur = self._cur
        body = memory.model_dump_json()
        row = cur.execute(
            "SELECT rowid FROM memories WHERE tenant = ? AND memory_id = ?",
            (memory.tenant, memory.memory_id),
        ).fetchone()
        params = (
            memory.stream,
            memory.type.value,
            memory.scope.value,
            memory.key,
            memory.status.value,
            _ts(memory.valid_until),
            _ts(memory.verification_due_at),
            memory.version,
            memory.content_hash,
            body,
        )
        if row is None:
            cur.execute(
                "INSERT INTO memories (tenant, memory_id, stream, type, scope, key, status, "
                "valid_until, verify_due, version, hash, body) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (memory.tenant, memory.memory_id, *params),
            )
        else:
            cur.execute(
                "UPDATE memories SET stream = ?, type = ?, scope = ?, key = ?, status = ?, "
                "valid_until = ?, verify_due = ?, version = ?, hash = ?, body = ? WHERE rowid = ?",
                (*params, row[0]),
            )
        cur.execute(
            "DELETE FROM memory_tags WHERE tenant = ? AND memory_id = ?",
            (memory.tenant, memory.memory_id),
        )
        cur.executemany(
            "INSERT INTO memory_tags VALUES (?, ?, ?)",
            [(memory.tenant, tag, memory.memory_id) for tag in memory.tags],
        )

    def set_position(self, consumer: str, offset: int, epoch: int | None = None) -> None:
        if epoch is not None:
            # the write lock is held (BEGIN IMMEDIATE): no claim can come in between
            row = self._cur.execute(
                "SELECT epoch FROM position_claims WHERE consumer = ?", (consumer,)
            ).fetchone()
            held = int(row[0]) if row else 0
            if held != epoch:
                raise FencedOff(
                    f"{consumer} was claimed under epoch {held}; this commit holds {epoch}",
                    extra={"consumer": consumer, "epoch": epoch, "held": held},
                )
        self._cur.execute(
            "INSERT INTO positions VALUES (?, ?) ON CONFLICT (consumer) DO UPDATE SET "
            "offset = excluded.offset",
            (consumer, offset),
        )


log = logging.getLogger(__name__)

_AUDIT_COLS = "tenant, stream, n, event_id, event_type, offset, prev_hash, hash"


def _retire_tenant_audit_chain(conn: sqlite3.Connection) -> None:
    """Data directories from before the per-stream audit chain kept one chain per tenant
    (table `audit`). The chain is a read model: keep the old one aside, as
    `audit_per_tenant_legacy`, for whoever wants to compare it, and move the audit
    consumer back to the start of the log, which links every event again, per stream.
    One transaction; a second process opening the directory finds it done."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        old = conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'audit'")
        if old.fetchone() is not None:
            conn.execute("DROP TABLE IF EXISTS audit_links")
            conn.execute("ALTER TABLE audit RENAME TO audit_per_tenant_legacy")
            has_positions = conn.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'positions'"
            ).fetchone()
            if has_positions is not None:
                conn.execute("DELETE FROM positions WHERE consumer = ?", ("audit",))
            log.warning(
                "the audit chain is now kept per stream: the audit consumer links the log "
                "again from its start; the per-tenant chain is kept as "
                "audit_per_tenant_legacy"
            )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def _retire_keyword_table(conn: sqlite3.Connection) -> None:
    """Data directories from before keyword vectors kept BM25 terms in an FTS5 table
    (`memory_terms`, with statistics over every tenant). The vector index holds keyword
    vectors now (its shard is re-made and re-indexed from the log on open, see
    QdrantEdgeIndex): drop the table, in one transaction."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        old = conn.execute(
            "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'memory_terms'"
        ).fetchone()
        if old is not None:
            conn.execute("DROP TABLE memory_terms")
            log.warning("dropped the FTS5 keyword table: keyword search is the vector index's")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


class SqliteMemoryStore(MemoryStore, DocumentReads):
    def __init__(self, path: Path, synchronous: str = "FULL") -> None:
        self._path = path
        self._synchronous = synchronous
        self._write = connect(path, synchronous)
        self._holder = holder_name()
        _retire_tenant_audit_chain(self._write)
        _retire_keyword_table(self._write)
        self._write.executescript(_SCHEMA)
        self._lock = threading.RLock()
        self._local = threading.local()

    def _reader(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self._path, self._synchronous)
            self._local.conn = conn
        return conn

    @contextmanager
    def transaction(self) -> Iterator[StoreTransaction]:
        with self._lock:
            cur = self._write.cursor()
            try:
                cur.execute("BEGIN IMMEDIATE")
                tx = _Tx(cur)
                yield tx
                cur.execute("COMMIT")
                if tx.erased:
                    # the write-ahead log still holds the pages as they were before the
                    # forget: copy it back into the (securely deleted) file and truncate it
                    cur.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
            except BaseException as exc:
                if self._write.in_transaction:
                    cur.execute("ROLLBACK")
                if isinstance(exc, sqlite3.Error):
                    raise Unavailable(
                        "the memory store could not be written", code="STORE_UNAVAILABLE"
                    ) from exc
                raise

    def claim(self, consumer: str) -> int:
        with self.transaction() as tx:
            assert isinstance(tx, _Tx)
            row = tx._cur.execute(
                "INSERT INTO position_claims VALUES (?, 1) ON CONFLICT (consumer) DO UPDATE "
                "SET epoch = epoch + 1 RETURNING epoch",
                (consumer,),
            ).fetchone()
            tx._cur.execute(
                "INSERT OR REPLACE INTO position_holders VALUES (?, ?)", (consumer, self._holder)
            )
        return int(row[0])

    def claims(self, consumers: Sequence[str]) -> dict[str, Claim]:
        out: dict[str, Claim] = {}
        for name in dict.fromkeys(consumers):
            row = (
                self._reader()
                .execute(
                    "SELECT c.epoch, h.holder FROM position_claims c LEFT JOIN position_holders "
                    "h ON h.consumer = c.consumer WHERE c.consumer = ?",
                    (name,),
                )
                .fetchone()
            )
            if row is not None:
                out[name] = Claim(int(row[0]), str(row[1] or ""))
        return out

    def position(self, consumer: str) -> int:
        row = (
            self._reader()
            .execute("SELECT offset FROM positions WHERE consumer = ?", (consumer,))
            .fetchone()
        )
        return int(row[0]) if row else 0

    def get(self, tenant: str, memory_id: str) -> Memory | None:
        row = (
            self._reader()
            .execute(
                "SELECT body FROM memories WHERE tenant = ? AND memory_id = ?", (tenant, memory_id)
            )
            .fetchone()
        )
        return _memory(row) if row else None

    def get_many(self, tenant: str, memory_ids: Sequence[str]) -> list[Memory]:
        if not memory_ids:
            return []
        found: dict[str, Memory] = {}
        ids = list(dict.fromkeys(memory_ids))
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            for row in self._reader().execute(
                f"SELECT body FROM memories WHERE tenant = ? AND memory_id IN ({marks})",
                (tenant, *chunk),
            ):
                memory = _memory(row)
                found[memory.memory_id] = memory
        return [found[i] for i in ids if i in found]

    def _filters(
        self, tenant: str, query: MemoryQuery, alias: str = ""
    ) -> tuple[str, list[object]]:
        p = f"{alias}." if alias else ""
        clauses = [f"{p}tenant = ?"]
        params: list[object] = [tenant]
        if query.stream is not None:
            clauses.append(f"{p}stream = ?")
            params.append(query.stream)
        if query.types:
            clauses.append(f"{p}type IN ({','.join('?' * len(query.types))})")
            params.extend(t.value for t in query.types)
        if query.scopes:
            clauses.append(f"{p}scope IN ({','.join('?' * len(query.scopes))})")
            params.extend(s.value for s in query.scopes)
        if query.key is not None:
            clauses.append(f"{p}key = ?")
            params.append(query.key)
        if query.statuses:
            clauses.append(f"{p}status IN ({','.join('?' * len(query.statuses))})")
            params.extend(s.value for s in query.statuses)
        if query.live_at is not None:
            clauses.append(f"({p}valid_until IS NULL OR {p}valid_until > ?)")
            params.append(query.live_at.timestamp())
        if query.verification_due:
            clauses.append(f"{p}verify_due IS NOT NULL")
        if query.tags:
            clauses.append(
                f"{p}memory_id IN (SELECT memory_id FROM memory_tags WHERE tenant = ? "
                f"AND tag IN ({','.join('?' * len(query.tags))}))"
            )
            params.extend([tenant, *query.tags])
        return " AND ".join(clauses), params

    def query(self, tenant: str, query: MemoryQuery) -> list[Memory]:
        where, params = self._filters(tenant, query)
        if query.after is not None:
            where += " AND memory_id > ?"
            params.append(query.after)
        rows = self._reader().execute(
            f"SELECT body FROM memories WHERE {where} ORDER BY memory_id LIMIT ?",
            (*params, query.limit),
        )
        return [_memory(r) for r in rows]

    def history(self, tenant: str, stream: str, key: str) -> list[Memory]:
        rows = self._reader().execute(
            "SELECT body FROM memories WHERE tenant = ? AND stream = ? AND key = ? "
            "ORDER BY version, memory_id",
            (tenant, stream, key),
        )
        return [_memory(r) for r in rows]

    def outcome(self, tenant: str, event_id: str) -> list[Outcome]:
        rows = self._reader().execute(
            "SELECT tenant, event_id, idx, kind, memory_id, version, reason_code, detail "
            "FROM outcomes WHERE tenant = ? AND event_id = ? ORDER BY idx",
            (tenant, event_id),
        )
        return [Outcome(r[0], r[1], r[2], OutcomeKind(r[3]), r[4], r[5], r[6], r[7]) for r in rows]

    def due_timers(self, now: datetime, limit: int) -> list[Timer]:
        rows = self._reader().execute(
            "SELECT tenant, memory_id, due_iso, kind FROM timers WHERE due <= ? "
            "ORDER BY due, tenant, memory_id LIMIT ?",
            (now.timestamp(), limit),
        )
        return [Timer(r[0], r[1], datetime.fromisoformat(r[2]), r[3]) for r in rows]

    def audit_trail(self, tenant: str, stream: str, after_n: int, limit: int) -> list[AuditRecord]:
        rows = self._reader().execute(
            f"SELECT {_AUDIT_COLS} FROM audit_links "
            "WHERE tenant = ? AND stream = ? AND n > ? ORDER BY n LIMIT ?",
            (tenant, stream, after_n, limit),
        )
        return [AuditRecord(*r) for r in rows]

    def audit_heads(self, tenant: str) -> list[AuditRecord]:
        rows = self._reader().execute(
            f"SELECT {_AUDIT_COLS} FROM audit_links WHERE tenant = ? AND (stream, n) IN "
            "(SELECT stream, MAX(n) FROM audit_links WHERE tenant = ? GROUP BY stream) "
            "ORDER BY stream",
            (tenant, tenant),
        )
        return [AuditRecord(*r) for r in rows]

    def template(
        self, tenant: str, name: str, version: int | None = None
    ) -> ContextTemplate | None:
        if version is None:
            row = (
                self._reader()
                .execute(
                    "SELECT body FROM templates WHERE tenant = ? AND name = ? "
                    "ORDER BY version DESC LIMIT 1",
                    (tenant, name),
                )
                .fetchone()
            )
        else:
            row = (
                self._reader()
                .execute(
                    "SELECT body FROM templates WHERE tenant = ? AND name = ? AND version = ?",
                    (tenant, name, version),
                )
                .fetchone()
            )
        return ContextTemplate.model_validate_json(row[0]) if row else None

    def templates(self, tenant: str) -> list[ContextTemplate]:
        rows = self._reader().execute(
            "SELECT body FROM templates WHERE tenant = ? ORDER BY name, version", (tenant,)
        )
        return [ContextTemplate.model_validate_json(r[0]) for r in rows]

    def context_record(self, tenant: str, request_id: str) -> ContextRecord | None:
        row = (
            self._reader()
            .execute(
                "SELECT body FROM context_records WHERE tenant = ? AND request_id = ?",
                (tenant, request_id),
            )
            .fetchone()
        )
        return _context_record(row[0]) if row else None

    def memory_stats(self, tenant: str, memory_ids: Sequence[str]) -> list[MemoryStats]:
        found: list[MemoryStats] = []
        ids = list(dict.fromkeys(memory_ids))
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows = self._reader().execute(
                "SELECT tenant, memory_id, included, truncated, cited, corrected, last_used "
                f"FROM memory_stats WHERE tenant = ? AND memory_id IN ({marks}) ORDER BY memory_id",
                (tenant, *chunk),
            )
            for r in rows:
                last = datetime.fromisoformat(r[6]) if r[6] else None
                found.append(MemoryStats(r[0], r[1], r[2], r[3], r[4], r[5], last))
        return found

    def context_records(
        self, tenant: str, limit: int, before: str | None = None
    ) -> list[ContextRecord]:
        rows = self._reader().execute(
            "SELECT body FROM context_records WHERE tenant = ? AND request_id < ? "
            "ORDER BY request_id DESC LIMIT ?",
            (tenant, before or "~", limit),
        )
        return [_context_record(r[0]) for r in rows]

    def timeline(self, tenant: str, memory_id: str, limit: int = 500) -> list[TimelineEntry]:
        rows = self._reader().execute(
            "SELECT tenant, memory_id, offset, event_id, event_type, what, occurred_at, detail "
            "FROM timeline WHERE tenant = ? AND memory_id = ? ORDER BY offset, what LIMIT ?",
            (tenant, memory_id, limit),
        )
        return [TimelineEntry(*r) for r in rows]

    def toolchain(self, tenant: str, toolchain_id: str) -> ToolchainState | None:
        return sqlite_toolchains.get(self._reader(), tenant, toolchain_id)

    def document(self, tenant: str, document_id: str) -> DocumentRecord | None:
        return sqlite_documents.document(self._reader(), tenant, document_id)

    def stream_documents(self, tenant: str, stream: str) -> list[DocumentRecord]:
        return sqlite_documents.documents(self._reader(), tenant, stream)

    def entity_rows(self, tenant: str, wanted: EntityFilter) -> list[EntityRow]:
        return sqlite_documents.rows(self._reader(), tenant, wanted)

    def counts(self) -> dict[str, int]:
        conn = self._reader()
        result = {t: int(conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]) for t in _TABLES}
        for status in MemoryStatus:
            row = conn.execute(
                "SELECT COUNT(*) FROM memories WHERE status = ?", (status.value,)
            ).fetchone()
            result[f"memories_{status.value}"] = int(row[0])
        return result

    def checksum(self) -> str:
        digest = hashlib.sha256()
        conn = self._reader()
        queries = (
            "SELECT tenant, memory_id, body FROM memories ORDER BY tenant, memory_id",
            "SELECT tenant, tag, memory_id FROM memory_tags ORDER BY tenant, tag, memory_id",
            "SELECT * FROM outcomes ORDER BY tenant, event_id, idx",
            "SELECT tenant, memory_id, kind, due_iso FROM timers ORDER BY tenant, memory_id, kind",
            "SELECT * FROM audit_links ORDER BY tenant, stream, n",
            "SELECT * FROM templates ORDER BY tenant, name, version",
            "SELECT * FROM context_records ORDER BY tenant, request_id",
            "SELECT * FROM memory_stats ORDER BY tenant, memory_id",
            "SELECT * FROM decay_weights ORDER BY tenant, memory_id",
            "SELECT * FROM timeline ORDER BY tenant, memory_id, offset, what",
            sqlite_toolchains.CHECKSUM,
            *sqlite_documents.CHECKSUM,
        )
        for sql in queries:
            for row in conn.execute(sql):
                digest.update(repr(tuple(row)).encode())
            digest.update(b"|")
        return digest.hexdigest()

    def reset(self) -> None:
        with self._lock:
            cur = self._write.cursor()
            cur.execute("BEGIN IMMEDIATE")
            for table in _TABLES:
                cur.execute(f"DELETE FROM {table}")
            cur.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._write.close()
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
