"""Contract of the AuditCheckpoints port: a checkpoint is stored once per (tenant, stream,
index) and never overwritten, read back exactly (the signed time to the microsecond), and
kept apart per tenant. SQLite and a real Cassandra node run the same cases."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.support import missing

from mnemo.adapters.sqlite_checkpoints import SqliteAuditCheckpoints
from mnemo.domain.checkpoint import FIRST, Checkpoint, Signature, checkpoint_digest
from mnemo.ports import AuditCheckpoints

T0 = datetime(2026, 12, 2, 12, 0, 0, 123456, tzinfo=UTC)


def cp(index: int, n: int, tenant: str = "acme", stream: str = "user:U1", **kw: Any) -> Checkpoint:
    values: dict[str, Any] = {
        "tenant": tenant,
        "stream": stream,
        "index": index,
        "n": n,
        "hash": f"{n:064x}",
        "prev": FIRST if index == 1 else f"{index - 1:064x}",
        "signed_at": T0 + timedelta(seconds=index, microseconds=index),
        "signature": Signature(1, f"vault:v1:sig{index}"),
    }
    values.update(kw)
    return Checkpoint(**values)


class AuditCheckpointsContract:
    def make(self, path: Path) -> AuditCheckpoints:
        raise NotImplementedError

    @pytest.fixture
    def store(self, tmp_path: Path) -> AuditCheckpoints:
        return self.make(tmp_path)

    def test_added_checkpoints_read_back_exactly(self, store: AuditCheckpoints) -> None:
        assert store.last("acme", "user:U1") is None
        first, second = cp(1, 10), cp(2, 25)
        assert store.add(first)
        assert store.add(second)
        assert store.last("acme", "user:U1") == second
        assert store.of_tenant("acme") == [first, second]
        assert store.of_tenant("acme")[1].signed_at == second.signed_at
        assert checkpoint_digest(store.of_tenant("acme")[0]) == checkpoint_digest(first)

    def test_an_index_is_taken_once_and_never_overwritten(self, store: AuditCheckpoints) -> None:
        original = cp(1, 10)
        assert store.add(original)
        assert not store.add(cp(1, 12, hash="f" * 64, signature=Signature(1, "vault:v1:forged")))
        assert store.of_tenant("acme") == [original]

    def test_tenants_and_streams_are_apart(self, store: AuditCheckpoints) -> None:
        mine = [cp(1, 3, stream="user:U2"), cp(1, 5), cp(2, 9)]
        for c in reversed(mine):
            assert store.add(c)
        assert store.add(cp(1, 4, tenant="globex"))
        assert store.of_tenant("acme") == [mine[1], mine[2], mine[0]]
        assert [c.tenant for c in store.of_tenant("globex")] == ["globex"]
        assert store.of_tenant("nobody") == []
        assert store.last("acme", "user:U2") == mine[0]
        assert store.last("globex", "user:U2") is None

    def test_hostile_names_are_only_data(self, store: AuditCheckpoints) -> None:
        odd = cp(1, 1, tenant="acme'; DROP TABLE audit_checkpoints; --", stream="user:ü\t%")
        assert store.add(odd)
        assert store.of_tenant(odd.tenant) == [odd]
        assert store.of_tenant("acme") == []


class TestSqliteAuditCheckpoints(AuditCheckpointsContract):
    def make(self, path: Path) -> AuditCheckpoints:
        return SqliteAuditCheckpoints(path / "audit-checkpoints.sqlite3", "NORMAL")

    def test_checkpoints_survive_a_reopen(self, tmp_path: Path) -> None:
        store = self.make(tmp_path)
        assert store.add(cp(1, 7))
        store.close()
        assert self.make(tmp_path).of_tenant("acme") == [cp(1, 7)]


@pytest.fixture(scope="module")
def cassandra_keyspace() -> Iterator[tuple[Any, str]]:
    import os

    try:
        from cassandra.cluster import (
            EXEC_PROFILE_DEFAULT,
            Cluster,
            ExecutionProfile,
            NoHostAvailable,
        )
        from cassandra.policies import RoundRobinPolicy
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
    keyspace = f"mnemo_cp_{uuid.uuid4().hex[:12]}"
    session.execute(
        f"CREATE KEYSPACE {keyspace} WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 1}"
    )
    try:
        yield session, keyspace
    finally:
        session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=120)
        cluster.shutdown()


class TestCassandraAuditCheckpoints(AuditCheckpointsContract):
    @pytest.fixture(autouse=True)
    def _cassandra(self, cassandra_keyspace: tuple[Any, str]) -> None:
        self.session, self.keyspace = cassandra_keyspace

    def make(self, path: Path) -> AuditCheckpoints:
        from mnemo.adapters.cassandra_checkpoints import CassandraAuditCheckpoints

        store = CassandraAuditCheckpoints(self.session, self.keyspace)
        for table in ("audit_checkpoints", "audit_checkpoint_streams"):
            self.session.execute(f"TRUNCATE {self.keyspace}.{table}", timeout=120)
        return store
