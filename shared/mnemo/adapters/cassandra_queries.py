"""Named CQL statements of one keyspace, prepared on first use, shared by the small
Cassandra adapters (access, blobs, audit checkpoints)."""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from cassandra import ConsistencyLevel
from cassandra.query import PreparedStatement

from mnemo.adapters.cassandra_store.common import _DRIVER_UNAVAILABLE, _valid_keyspace
from mnemo.domain.errors import Unavailable


class CassandraQueries:
    """Holds a session, a keyspace and a table of named statements (`{ks}` stands for the
    keyspace). Statements run at LOCAL_QUORUM; the `conditional` ones (lightweight
    transactions) also carry the serial consistency. A driver error that means the cluster
    cannot serve now becomes `STORE_UNAVAILABLE`, naming `what`."""

    def _init_queries(
        self,
        session: Any,
        keyspace: str,
        queries: Mapping[str, str],
        what: str,
        *,
        serial: int = ConsistencyLevel.SERIAL,
        conditional: Collection[str] = (),
    ) -> None:
        self._session = session
        self._ks = _valid_keyspace(keyspace)
        self._queries = queries
        self._what = what
        self._serial = serial
        self._conditional = frozenset(conditional)
        self._prepared: dict[str, PreparedStatement] = {}
        self._lock = threading.Lock()

    def _create(self, tables: Sequence[str]) -> None:
        with self._translated():
            for ddl in tables:
                self._session.execute(ddl.replace("{ks}", self._ks), timeout=120)

    @contextmanager
    def _translated(self) -> Iterator[None]:
        try:
            yield
        except _DRIVER_UNAVAILABLE as exc:
            raise Unavailable(
                f"the {self._what} (Cassandra) is unavailable: {type(exc).__name__}",
                code="STORE_UNAVAILABLE",
            ) from exc

    def _statement(self, name: str) -> PreparedStatement:
        stmt = self._prepared.get(name)
        if stmt is None:
            with self._lock, self._translated():
                stmt = self._session.prepare(self._queries[name].replace("{ks}", self._ks))
            stmt.consistency_level = ConsistencyLevel.LOCAL_QUORUM
            if name in self._conditional:
                stmt.serial_consistency_level = self._serial
            self._prepared[name] = stmt
        return stmt

    def _run(self, name: str, params: Sequence[Any]) -> Any:
        with self._translated():
            return self._session.execute(self._statement(name), list(params))
