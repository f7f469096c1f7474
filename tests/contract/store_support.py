"""What the contract suites of the read-model ports share: a memory maker, and the one list
of adapters every case of every suite runs on (STORE_ADAPTERS). The `store` fixture of
tests/contract/conftest.py builds a fresh, empty store from each entry in turn, so a new
adapter joins all six suites by being added to this list."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
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
    """The base of every suite: `store` (a fixture of conftest.py) is a fresh, empty store
    of one adapter of STORE_ADAPTERS; it implements every port and each suite uses the one
    it checks."""

    def put(self, store: MemoryStore, *memories: Memory) -> None:
        with store.transaction() as tx:
            tx.apply([PutMemory(m) for m in memories])


@dataclass(frozen=True, slots=True)
class StoreAdapter:
    """One adapter of the read-model ports under contract: its name (the test id) and how
    to build a fresh, empty store of it in a test's temporary directory (`request` gives
    the fixtures it needs, asked for only when this adapter runs)."""

    name: str
    build: Callable[[pytest.FixtureRequest, Path], MemoryStore]


def _sqlite(request: pytest.FixtureRequest, path: Path) -> MemoryStore:
    return SqliteMemoryStore(path / "store.sqlite3", "NORMAL")


def _cassandra(request: pytest.FixtureRequest, path: Path) -> MemoryStore:
    """A real node, in one keyspace migrated once per session (conftest.store_keyspace);
    reset() empties only the tables that hold something."""
    from mnemo.adapters.cassandra_store import CassandraMemoryStore

    keyspace: tuple[Any, str] = request.getfixturevalue("store_keyspace")
    session, name = keyspace
    store = CassandraMemoryStore(session, name, migrate_schema=False, blinder=BLINDER)
    store.reset()
    return store


STORE_ADAPTERS: tuple[StoreAdapter, ...] = (
    StoreAdapter("sqlite", _sqlite),
    StoreAdapter("cassandra", _cassandra),
)
