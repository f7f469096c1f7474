"""What the contract suites of the read-model ports share: a memory maker, the store under
test built fresh for every case, and the two adapters that run every case (SQLite, and
Cassandra against a real node, in one keyspace migrated once per session)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.support import BLINDER

from mnemo.adapters.sqlite_store import SqliteMemoryStore
from mnemo.domain.ids import derived_id
from mnemo.domain.memory import Memory, MemoryType, Scope
from mnemo.domain.projection import PutMemory
from mnemo.ports import MemoryStore

T0 = datetime(2026, 11, 30, tzinfo=UTC)


def mem(
    n: int,
    *,
    tenant: str = "acme",
    stream: str = "user:U1",
    content: str = "",
    key: str | None = None,
    value: str | None = None,
    mtype: MemoryType = MemoryType.FACT,
    tags: tuple[str, ...] = (),
    valid_until: datetime | None = None,
    version: int = 1,
) -> Memory:
    return Memory(
        memory_id=derived_id(T0 + timedelta(seconds=n), tenant, str(n)),
        tenant=tenant,
        stream=stream,
        type=mtype,
        scope=Scope.USER,
        content=content or f"memory number {n}",
        key=key,
        value=value,
        tags=tags,
        created_at=T0,
        valid_until=valid_until,
        version=version,
        source_event_id=derived_id(T0, "source", str(n)),
        content_hash=f"hash{n}",
    )


class StoreContract:
    """The base of every suite: `store` is a fresh, empty adapter (it implements every
    port; each suite uses the one it checks)."""

    def make_store(self, path: Path) -> MemoryStore:
        raise NotImplementedError

    @pytest.fixture
    def store(self, tmp_path: Path) -> MemoryStore:
        return self.make_store(tmp_path)

    def put(self, store: MemoryStore, *memories: Memory) -> None:
        with store.transaction() as tx:
            tx.apply([PutMemory(m) for m in memories])


class OnSqlite:
    def make_store(self, path: Path) -> MemoryStore:
        return SqliteMemoryStore(path / "store.sqlite3", "NORMAL")


class OnCassandra:
    @pytest.fixture(autouse=True)
    def _cassandra(self, store_keyspace: tuple[Any, str]) -> None:
        self.session, self.keyspace = store_keyspace

    def make_store(self, path: Path) -> MemoryStore:
        from mnemo.adapters.cassandra_store import CassandraMemoryStore

        store = CassandraMemoryStore(
            self.session, self.keyspace, migrate_schema=False, blinder=BLINDER
        )
        store.reset()
        return store
