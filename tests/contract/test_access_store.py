"""Contract of the AccessStore port (tenants and API keys); every adapter runs these cases,
and the Access use cases run on top of each adapter."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.support import missing

from mnemo.adapters.clocks import FixedClock
from mnemo.adapters.sqlite_access import SqliteAccessStore
from mnemo.domain.access import (
    ApiKey,
    Scope,
    Tenant,
    Unauthenticated,
    key_digest,
    parse_key,
)
from mnemo.domain.errors import ConflictError, InvalidInput, NotFound
from mnemo.ports import AccessStore
from mnemo.service.access import Access

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
PEPPER = b"contract-pepper-0123456789"
SALT = "a" * 32
SECRET = "S" * 43
HOSTILE = ["acme' OR '1'='1", "acme; DROP TABLE api_keys", "x\x00y", "%' --", "ünï", ""]


def key(n: int, tenant: str = "acme", **extra: Any) -> ApiKey:
    return ApiKey(
        key_id=f"{n:016x}",
        tenant=tenant,
        name=f"agent-{n}",
        scopes=(Scope.MEMORY_READ, Scope.CONTEXT),
        salt=SALT,
        digest=key_digest(PEPPER, SALT, SECRET),
        created_at=T0,
        created_by="test",
        **extra,
    )


def tenant(name: str) -> Tenant:
    return Tenant(tenant=name, created_at=T0, created_by="test")


class AccessStoreContract:
    def make_store(self, path: Path) -> AccessStore:
        raise NotImplementedError

    @pytest.fixture
    def store(self, tmp_path: Path) -> AccessStore:
        return self.make_store(tmp_path)

    @pytest.fixture
    def access(self, store: AccessStore) -> Access:
        return Access(store, FixedClock(T0), PEPPER)

    # -- the port

    def test_tenants_are_created_once(self, store: AccessStore) -> None:
        assert store.create_tenant(tenant("acme"))
        assert not store.create_tenant(Tenant(tenant="acme", created_at=T0, created_by="other"))
        assert store.tenant("acme") == tenant("acme")
        assert store.tenant("globex") is None
        assert store.create_tenant(tenant("globex"))
        assert [t.tenant for t in store.tenants()] == ["acme", "globex"]
        assert len(store.tenants(limit=1)) == 1

    def test_a_key_is_found_by_id_and_listed_by_its_tenant_only(self, store: AccessStore) -> None:
        store.add_key(key(1))
        store.add_key(key(2))
        store.add_key(key(3, tenant="globex"))
        assert store.key(f"{1:016x}") == key(1)
        assert store.key(f"{9:016x}") is None
        assert [k.key_id for k in store.keys("acme")] == [f"{1:016x}", f"{2:016x}"]
        assert [k.key_id for k in store.keys("globex")] == [f"{3:016x}"]
        assert store.keys("initech") == []

    def test_a_key_id_is_never_overwritten(self, store: AccessStore) -> None:
        store.add_key(key(1))
        with pytest.raises(ConflictError) as caught:
            store.add_key(key(1, tenant="globex"))
        assert caught.value.code == "KEY_EXISTS"
        assert store.key(f"{1:016x}") == key(1)

    def test_only_the_keys_own_tenant_revokes_it(self, store: AccessStore) -> None:
        store.add_key(key(1))
        assert store.revoke_key("globex", f"{1:016x}", T0) is None
        assert store.key(f"{1:016x}") == key(1)
        later = T0 + timedelta(hours=1)
        revoked = store.revoke_key("acme", f"{1:016x}", later)
        assert revoked is not None
        assert revoked.revoked_at == later
        assert store.key(f"{1:016x}") == revoked
        # a second revocation keeps the first instant
        again = store.revoke_key("acme", f"{1:016x}", later + timedelta(hours=1))
        assert again is not None
        assert again.revoked_at == later
        assert store.revoke_key("acme", f"{7:016x}", T0) is None

    def test_the_vault_identity_first_recorded_stays(self, store: AccessStore) -> None:
        first, second = bytes(range(32)), bytes(range(1, 33))
        assert store.vault_identity() is None
        assert store.record_vault_identity(first) == first
        assert store.vault_identity() == first
        # another process's (or another vault's) identity never replaces it
        assert store.record_vault_identity(second) == first
        assert store.vault_identity() == first

    def test_hostile_ids_are_plain_values(self, store: AccessStore) -> None:
        store.create_tenant(tenant("acme"))
        store.add_key(key(1))
        for text in HOSTILE:
            assert store.tenant(text) is None
            assert store.key(text) is None
            assert store.keys(text) == []
            assert store.revoke_key(text, f"{1:016x}", T0) is None
            assert store.revoke_key("acme", text, T0) is None
        assert [t.tenant for t in store.tenants()] == ["acme"]
        assert store.key(f"{1:016x}") == key(1)

    # -- the use cases on top of the adapter

    def test_an_issued_key_authenticates_until_revoked(self, access: Access) -> None:
        access.create_tenant("acme", by="op")
        issued = access.issue_key("acme", "planner", ["memory:read", "context"], by="op")
        stored = access.store.key(issued.record.key_id)
        assert stored is not None
        parsed = parse_key(issued.key)
        assert parsed is not None
        assert parsed[1] not in stored.model_dump_json()  # only a digest
        caller = access.authenticate(issued.key)
        assert (caller.tenant, caller.name) == ("acme", "planner")
        assert caller.scopes == {Scope.MEMORY_READ, Scope.CONTEXT}
        with pytest.raises(Unauthenticated) as wrong:
            access.authenticate(issued.key[:-1] + ("A" if issued.key[-1] != "A" else "B"))
        assert wrong.value.code == "UNAUTHENTICATED"
        with pytest.raises(NotFound):
            access.revoke("globex", issued.record.key_id)
        access.revoke("acme", issued.record.key_id)
        with pytest.raises(Unauthenticated) as revoked:
            access.authenticate(issued.key)
        assert revoked.value.code == "KEY_REVOKED"

    def test_keys_expire(self, store: AccessStore) -> None:
        clock = FixedClock(T0)
        access = Access(store, clock, PEPPER)
        access.create_tenant("acme", by="op")
        issued = access.issue_key(
            "acme", "short", ["memory:read"], by="op", expires_at=T0 + timedelta(minutes=5)
        )
        assert access.authenticate(issued.key).key_id == issued.record.key_id
        clock.advance(timedelta(minutes=5))
        with pytest.raises(Unauthenticated) as expired:
            access.authenticate(issued.key)
        assert expired.value.code == "KEY_EXPIRED"

    def test_another_pepper_proves_nothing(self, store: AccessStore) -> None:
        access = Access(store, FixedClock(T0), PEPPER)
        access.create_tenant("acme", by="op")
        issued = access.issue_key("acme", "a", ["admin"], by="op")
        with pytest.raises(Unauthenticated):
            Access(store, FixedClock(T0), b"another-pepper-0123456789").authenticate(issued.key)

    def test_bad_requests_are_refused(self, access: Access) -> None:
        with pytest.raises(InvalidInput) as bad_tenant:
            access.create_tenant("Acme!", by="op")
        assert bad_tenant.value.code == "INVALID_TENANT"
        access.create_tenant("acme", by="op")
        with pytest.raises(ConflictError):
            access.create_tenant("acme", by="op")
        with pytest.raises(NotFound):
            access.issue_key("globex", "a", ["admin"], by="op")
        with pytest.raises(InvalidInput) as scope:
            access.issue_key("acme", "a", ["root"], by="op")
        assert scope.value.code == "INVALID_SCOPE"
        with pytest.raises(InvalidInput):
            access.issue_key("acme", "a", [], by="op")
        with pytest.raises(InvalidInput) as past:
            access.issue_key("acme", "a", ["admin"], by="op", expires_at=T0)
        assert past.value.code == "INVALID_EXPIRY"
        for text in ["", "mnemo_", "Bearer x", "mnemo_0123456789abcdef_short", *HOSTILE]:
            with pytest.raises(Unauthenticated):
                access.authenticate(text)

    def test_first_start_makes_one_admin_key_once(self, access: Access) -> None:
        issued = access.first_start()
        assert issued is not None
        caller = access.authenticate(issued.key)
        assert caller.tenant == "default"
        assert caller.scopes == set(Scope)
        assert access.first_start() is None
        assert len(access.keys("default")) == 1


class TestSqliteAccessStore(AccessStoreContract):
    def make_store(self, path: Path) -> AccessStore:
        return SqliteAccessStore(path / "access.sqlite3", "NORMAL")


# ---- Cassandra: the same contract against a real node --------------------------------------


@pytest.fixture(scope="module")
def access_keyspace() -> Iterator[tuple[Any, str]]:
    """One session and one fresh keyspace (migrated once) for the class; each test empties
    the access tables first."""
    import os

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
    keyspace = f"mnemo_access_{uuid.uuid4().hex[:12]}"
    session.execute(
        f"CREATE KEYSPACE {keyspace} WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 1}"
    )
    try:
        migrate(session, keyspace)
        yield session, keyspace
    finally:
        session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=120)
        cluster.shutdown()


class TestCassandraAccessStore(AccessStoreContract):
    @pytest.fixture(autouse=True)
    def _cassandra(self, access_keyspace: tuple[Any, str]) -> None:
        self.session, self.keyspace = access_keyspace

    def make_store(self, path: Path) -> AccessStore:
        from mnemo.adapters.cassandra_access import CassandraAccessStore

        for table in ("tenants", "api_keys", "api_keys_by_tenant", "vault_identity"):
            self.session.execute(f"TRUNCATE {self.keyspace}.{table}", timeout=120)
        return CassandraAccessStore(self.session, self.keyspace, migrate_schema=False)
