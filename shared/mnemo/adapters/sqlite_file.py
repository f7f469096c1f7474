"""A small SQLite file of its own (the access store, the audit checkpoints, the development
audit anchors): opened with its schema, one statement at a time under a lock, and every
SQLite error answered as Unavailable (STORE_UNAVAILABLE) naming what the file holds, never
a value of it."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from mnemo.adapters.sqlite_log import connect
from mnemo.domain.errors import Unavailable

__all__ = ["SqliteFile"]


class SqliteFile:
    """`what` names the contents in errors ("the access store"); `plural` says them as
    several ("the audit anchors are unavailable")."""

    def __init__(
        self,
        path: Path,
        schema: str,
        *,
        what: str,
        plural: bool = False,
        synchronous: str = "FULL",
        private_folder: bool = False,
    ) -> None:
        self.what = what
        self._is = "are" if plural else "is"
        try:
            if private_folder:
                path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._conn = connect(path, synchronous)
            self._conn.executescript(schema)
        except (OSError, sqlite3.Error) as exc:
            if isinstance(exc, OSError) and not private_folder:
                raise
            raise Unavailable(
                f"{what} cannot be opened: {type(exc).__name__}", code="STORE_UNAVAILABLE"
            ) from exc
        self._lock = threading.Lock()

    def fetch(self, sql: str, params: tuple[object, ...]) -> list[Any]:
        """The rows of one statement (its values bound, never formatted in)."""
        with self._unavailable(), self._lock:
            return list(self._conn.execute(sql, params).fetchall())

    @contextmanager
    def immediate(self) -> Iterator[sqlite3.Connection]:
        """One transaction that reads and writes as one, across processes (BEGIN
        IMMEDIATE): committed when the block ends, rolled back when it raises."""
        with self._unavailable(), self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                yield self._conn
            except BaseException:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")

    def close(self) -> None:
        with self._lock:
            self._conn.close()

    @contextmanager
    def _unavailable(self) -> Iterator[None]:
        try:
            yield
        except sqlite3.Error as exc:
            raise Unavailable(
                f"{self.what} {self._is} unavailable: {type(exc).__name__}",
                code="STORE_UNAVAILABLE",
            ) from exc
