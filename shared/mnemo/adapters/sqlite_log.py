"""The embedded event log: an append-only table in SQLite (WAL mode).

Offsets are the table's rowids, so they only grow. Each stream's head sequence sits in
its own table and moves in the same transaction as the append, which keeps stream
sequences gapless. A unique index on the event id makes appends idempotent.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

import orjson

from mnemo import telemetry
from mnemo.domain.acceptance import refuse_reused_id
from mnemo.domain.errors import ConflictError, Unavailable
from mnemo.domain.events import Envelope, LoggedEvent
from mnemo.ports import Appended, EventLog

__all__ = ["SqliteEventLog", "connect"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    offset      INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id    TEXT NOT NULL,
    tenant      TEXT NOT NULL,
    stream      TEXT NOT NULL,
    seq         INTEGER NOT NULL,
    type        TEXT NOT NULL,
    causation   TEXT,
    body        BLOB NOT NULL,
    UNIQUE (tenant, stream, seq),
    UNIQUE (tenant, event_id)
);
CREATE INDEX IF NOT EXISTS events_by_tenant ON events (tenant, offset);
CREATE INDEX IF NOT EXISTS events_by_cause ON events (causation) WHERE causation IS NOT NULL;
CREATE TABLE IF NOT EXISTS streams (
    tenant TEXT NOT NULL,
    stream TEXT NOT NULL,
    head   INTEGER NOT NULL,
    PRIMARY KEY (tenant, stream)
) WITHOUT ROWID;
"""


def connect(path: Path, synchronous: str = "FULL") -> sqlite3.Connection:
    """A connection in WAL mode with secure_delete on; autocommit, transactions are
    explicit."""
    if synchronous not in {"OFF", "NORMAL", "FULL", "EXTRA"}:
        raise ValueError(f"unknown synchronous mode {synchronous!r}")
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("PRAGMA busy_timeout=30000")
    # deleted rows are overwritten, not left in free pages (forgetting must really forget)
    conn.execute("PRAGMA secure_delete=ON")
    return conn


def _row(row: tuple[int, bytes]) -> LoggedEvent:
    return LoggedEvent(offset=row[0], envelope=Envelope.model_validate_json(row[1]))


class SqliteEventLog(EventLog):
    def __init__(self, path: Path, synchronous: str = "FULL") -> None:
        self._path = path
        self._synchronous = synchronous
        self._write = connect(path, synchronous)
        self._write.executescript(_SCHEMA)
        self._lock = threading.Lock()
        self._local = threading.local()

    def _reader(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = connect(self._path, self._synchronous)
            self._local.conn = conn
        return conn

    def append(self, events: Sequence[Envelope]) -> list[Appended]:
        return self._append(events, None)

    def append_guarded(
        self, events: Sequence[Envelope], before: Callable[[list[Envelope]], None]
    ) -> list[Appended]:
        """`before` runs inside the append's transaction, after every event has passed the
        checks: the events it is given are those the commit records."""
        return self._append(events, before)

    def _append(
        self, events: Sequence[Envelope], before: Callable[[list[Envelope]], None] | None
    ) -> list[Appended]:
        if not events:
            if before is not None:
                before([])
            return []
        with (
            telemetry.sending(
                events, system="sqlite", destination=telemetry.EMBEDDED_LOG
            ) as stamped,
            self._lock,
        ):
            cur = self._write.cursor()
            try:
                cur.execute("BEGIN IMMEDIATE")
                result = [self._append_one(cur, event) for event in stamped]
                if before is not None:
                    before([e for e, a in zip(events, result, strict=True) if not a.duplicate])
                cur.execute("COMMIT")
            except ConflictError:
                cur.execute("ROLLBACK")
                raise
            except sqlite3.Error as exc:
                if self._write.in_transaction:
                    cur.execute("ROLLBACK")
                raise Unavailable(
                    "the event log could not be written", code="LOG_UNAVAILABLE"
                ) from exc
            except BaseException:
                if self._write.in_transaction:  # what `before` raised: nothing is recorded
                    cur.execute("ROLLBACK")
                raise
            return result

    @staticmethod
    def _append_one(cur: sqlite3.Cursor, event: Envelope) -> Appended:
        found = cur.execute(
            "SELECT offset, seq, body FROM events WHERE tenant = ? AND event_id = ?",
            (event.tenant, event.event_id),
        ).fetchone()
        if found is not None:
            refuse_reused_id(event, orjson.loads(found[2]).get("digest"))
            return Appended(event.event_id, found[0], found[1], duplicate=True)
        row = cur.execute(
            "SELECT head FROM streams WHERE tenant = ? AND stream = ?", (event.tenant, event.stream)
        ).fetchone()
        head = row[0] if row else 0
        if event.expected_seq is not None and event.expected_seq != head:
            raise ConflictError(
                f"stream {event.stream} is at sequence {head}, not {event.expected_seq}",
                code="STALE_SEQUENCE",
                field="expected_seq",
            )
        seq = head + 1
        stored = event.model_copy(update={"seq": seq})
        body = orjson.dumps(stored.model_dump(mode="json"))
        cur.execute(
            "INSERT INTO events (event_id, tenant, stream, seq, type, causation, body) "
            "VALUES (?, ?, ?, ?, ?, ?, ?)",
            (event.event_id, event.tenant, event.stream, seq, event.type, event.causation_id, body),
        )
        offset = cur.lastrowid
        assert offset is not None
        cur.execute(
            "INSERT INTO streams (tenant, stream, head) VALUES (?, ?, ?) "
            "ON CONFLICT (tenant, stream) DO UPDATE SET head = excluded.head",
            (event.tenant, event.stream, seq),
        )
        return Appended(event.event_id, offset, seq, duplicate=False)

    def read(self, after_offset: int, limit: int) -> list[LoggedEvent]:
        rows = self._reader().execute(
            "SELECT offset, body FROM events WHERE offset > ? ORDER BY offset LIMIT ?",
            (after_offset, limit),
        )
        return [_row(r) for r in rows]

    def read_raw_stream(
        self, tenant: str, stream: str, from_seq: int, limit: int
    ) -> list[tuple[int, bytes]]:
        """A stream's events as stored JSON, for fast replay over HTTP."""
        rows = self._reader().execute(
            "SELECT offset, body FROM events WHERE tenant = ? AND stream = ? AND seq >= ? "
            "ORDER BY seq LIMIT ?",
            (tenant, stream, from_seq, limit),
        )
        return [(r[0], r[1]) for r in rows]

    def read_stream_json(self, tenant: str, stream: str, from_seq: int, limit: int) -> list[bytes]:
        return [bytes(body) for _, body in self.read_raw_stream(tenant, stream, from_seq, limit)]

    def read_stream(self, tenant: str, stream: str, from_seq: int, limit: int) -> list[LoggedEvent]:
        return [_row(r) for r in self.read_raw_stream(tenant, stream, from_seq, limit)]

    def read_tenant(self, tenant: str, after_offset: int, limit: int) -> list[LoggedEvent]:
        rows = self._reader().execute(
            "SELECT offset, body FROM events WHERE tenant = ? AND offset > ? "
            "ORDER BY offset LIMIT ?",
            (tenant, after_offset, limit),
        )
        return [_row(r) for r in rows]

    def read_tenant_back(
        self, tenant: str, before_offset: int | None, limit: int
    ) -> list[LoggedEvent]:
        below = (1 << 63) - 1 if before_offset is None else before_offset
        rows = self._reader().execute(
            "SELECT offset, body FROM events WHERE tenant = ? AND offset < ? "
            "ORDER BY offset DESC LIMIT ?",
            (tenant, below, limit),
        )
        return [_row(r) for r in rows]

    def tenants_between(self, after_offset: int, upto_offset: int) -> dict[str, int]:
        # a skip scan of the (tenant, offset) index: one seek for each tenant in the log and
        # one for its first offset in the range, no event bodies read
        rows = self._reader().execute(
            "WITH RECURSIVE t(name) AS ("
            " SELECT (SELECT MIN(tenant) FROM events)"
            " UNION ALL"
            " SELECT (SELECT MIN(tenant) FROM events WHERE tenant > t.name) FROM t"
            " WHERE t.name IS NOT NULL)"
            " SELECT name, (SELECT MIN(offset) FROM events"
            " WHERE tenant = t.name AND offset > ? AND offset <= ?) FROM t"
            " WHERE name IS NOT NULL",
            (after_offset, upto_offset),
        )
        return {str(name): int(first) for name, first in rows if first is not None}

    def head(self) -> int:
        row = self._reader().execute("SELECT COALESCE(MAX(offset), 0) FROM events").fetchone()
        return int(row[0])

    def stream_head(self, tenant: str, stream: str) -> int:
        row = (
            self._reader()
            .execute("SELECT head FROM streams WHERE tenant = ? AND stream = ?", (tenant, stream))
            .fetchone()
        )
        return int(row[0]) if row else 0

    def get(self, tenant: str, event_id: str) -> LoggedEvent | None:
        row = (
            self._reader()
            .execute(
                "SELECT offset, body FROM events WHERE tenant = ? AND event_id = ?",
                (tenant, event_id),
            )
            .fetchone()
        )
        return _row(row) if row else None

    def caused_by(self, tenant: str, event_id: str) -> list[LoggedEvent]:
        rows = self._reader().execute(
            "SELECT offset, body FROM events WHERE causation = ? AND tenant = ? ORDER BY offset",
            (event_id, tenant),
        )
        return [_row(r) for r in rows]

    def close(self) -> None:
        with self._lock:
            self._write.close()
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
            self._local.conn = None
