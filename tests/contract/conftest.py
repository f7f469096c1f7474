"""Fixtures of the contract suites."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.contract.store_support import STORE_ADAPTERS, StoreAdapter
from tests.support import missing

from mnemo.ports import MemoryStore


@pytest.fixture(scope="session")
def store_keyspace() -> Iterator[tuple[Any, str]]:
    """One session and one fresh keyspace (migrated once) for every suite of the read-model
    ports; every test then starts from store.reset(), which truncates only the tables that
    hold something."""
    try:
        from cassandra.cluster import (
            EXEC_PROFILE_DEFAULT,
            Cluster,
            ExecutionProfile,
            NoHostAvailable,
        )
        from cassandra.policies import RoundRobinPolicy

        from mnemo.adapters.cassandra_store import migrate
    except ImportError as exc:
        missing("Cassandra", f"cassandra-driver is not installed: {exc}")
    hosts = os.environ.get("MNEMO_CASSANDRA_HOSTS", "127.0.0.1").split(",")
    port = int(os.environ.get("MNEMO_CASSANDRA_PORT", "9042"))
    cluster = Cluster(
        hosts,
        port=port,
        connect_timeout=3,
        execution_profiles={EXEC_PROFILE_DEFAULT: ExecutionProfile(RoundRobinPolicy())},
    )
    try:
        session = cluster.connect()
    except NoHostAvailable as exc:
        cluster.shutdown()
        missing("Cassandra", f"{hosts}:{port}: {exc}")
    keyspace = f"mnemo_contract_{uuid.uuid4().hex[:12]}"
    session.execute(
        f"CREATE KEYSPACE {keyspace} WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 1}",
        timeout=120,  # schema changes wait for agreement, slow on a busy node
    )
    try:
        migrate(session, keyspace)
        yield session, keyspace
    finally:
        session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=120)
        cluster.shutdown()


@pytest.fixture(params=STORE_ADAPTERS, ids=lambda adapter: adapter.name)
def store(request: pytest.FixtureRequest, tmp_path: Path) -> MemoryStore:
    """A fresh, empty store of each adapter in STORE_ADAPTERS in turn: every case of the
    read-model suites runs once per adapter."""
    adapter: StoreAdapter = request.param
    return adapter.build(request, tmp_path)
