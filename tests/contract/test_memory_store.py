"""Contract of the MemoryStore port; every adapter runs these cases."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.support import BLINDER, missing

from mnemo.adapters.sqlite_store import SqliteMemoryStore
from mnemo.domain.context import ContextTemplate
from mnemo.domain.errors import FencedOff
from mnemo.domain.ids import derived_id
from mnemo.domain.memory import Memory, MemoryStatus, MemoryType, Scope
from mnemo.domain.projection import (
    AuditRecord,
    BumpStats,
    ContextRecord,
    DropTimer,
    MemoryStats,
    Outcome,
    OutcomeKind,
    PurgeTenant,
    PutAudit,
    PutContextRecord,
    PutMemory,
    PutOutcome,
    PutTemplate,
    PutTimeline,
    PutTimer,
    PutWeight,
    SetStatus,
    TimelineEntry,
    Timer,
)
from mnemo.domain.sealed import EncryptionBlock
from mnemo.ports import MemoryQuery, MemoryStore

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


class MemoryStoreContract:
    def make_store(self, path: Path) -> MemoryStore:
        raise NotImplementedError

    @pytest.fixture
    def store(self, tmp_path: Path) -> MemoryStore:
        return self.make_store(tmp_path)

    def put(self, store: MemoryStore, *memories: Memory) -> None:
        with store.transaction() as tx:
            tx.apply([PutMemory(m) for m in memories])

    def test_put_get_and_tenant_scoping(self, store: MemoryStore) -> None:
        a = mem(1)
        self.put(store, a)
        assert store.get("acme", a.memory_id) == a
        assert store.get("other", a.memory_id) is None
        assert store.get_many("other", [a.memory_id]) == []
        assert store.get_many("acme", [a.memory_id, a.memory_id]) == [a]

    def test_lookups_inside_a_transaction_see_its_own_writes(self, store: MemoryStore) -> None:
        a = mem(1, key="size", value="L")
        with store.transaction() as tx:
            tx.apply([PutMemory(a)])
            assert tx.current_for_key("acme", "user:U1", "size") == a
            assert tx.find_by_hash("acme", "user:U1", "hash1") == a
            tx.apply([SetStatus("acme", a.memory_id, MemoryStatus.SUPERSEDED)])
            assert tx.current_for_key("acme", "user:U1", "size") is None
            assert tx.find_by_hash("acme", "user:U1", "hash1") is None

    def test_hash_lookups_read_ahead_answer_as_one_at_a_time(self, store: MemoryStore) -> None:
        stored = mem(1)  # content hash "hash1"
        retired = mem(2)
        other_stream = mem(3, stream="user:U2")
        other_tenant = mem(4, tenant="other")
        self.put(store, stored, retired, other_stream, other_tenant)
        with store.transaction() as tx:
            tx.apply([SetStatus("acme", retired.memory_id, MemoryStatus.SUPERSEDED)])
        keys = [
            ("acme", "user:U1", stored.content_hash),
            ("acme", "user:U1", retired.content_hash),
            ("acme", "user:U1", other_stream.content_hash),
            ("acme", "user:U1", "nothing"),
            ("other", "user:U1", other_tenant.content_hash),
        ]
        with store.transaction() as tx:
            one_at_a_time = [tx.find_by_hash(*k) for k in keys]
        assert one_at_a_time == [stored, None, None, None, other_tenant]
        fresh = mem(5)
        with store.transaction() as tx:
            tx.prefetch_hashes([*keys, ("acme", "user:U1", fresh.content_hash)])
            assert [tx.find_by_hash(*k) for k in keys] == one_at_a_time
            # the batch's own writes still count after the read-ahead
            tx.apply(
                [PutMemory(fresh), SetStatus("acme", stored.memory_id, MemoryStatus.FORGOTTEN)]
            )
            assert tx.find_by_hash("acme", "user:U1", fresh.content_hash) == fresh
            assert tx.find_by_hash("acme", "user:U1", stored.content_hash) is None

    def test_the_memory_before_is_the_latest_earlier_one_of_its_type(
        self, store: MemoryStore
    ) -> None:
        turns = [mem(n, mtype=MemoryType.HISTORY) for n in (1, 3, 6)]
        fact = mem(4)
        elsewhere = mem(5, mtype=MemoryType.HISTORY, stream="user:U2")
        other_tenant = mem(5, mtype=MemoryType.HISTORY, tenant="other")
        self.put(store, turns[0], turns[1], fact, elsewhere, other_tenant)
        history = MemoryType.HISTORY
        with store.transaction() as tx:
            tx.apply(
                [PutMemory(turns[2]), SetStatus("acme", turns[1].memory_id, MemoryStatus.FORGOTTEN)]
            )
            before = [tx.memory_before("acme", "user:U1", m.memory_id, history) for m in turns]
            assert before == [
                None,
                turns[0],
                turns[1].model_copy(update={"status": MemoryStatus.FORGOTTEN}),
            ]
            last = derived_id(T0 + timedelta(seconds=7), "acme", "7")
            assert tx.memory_before("acme", "user:U1", last, history) == turns[2]
            assert tx.memory_before("acme", "user:U1", last, MemoryType.FACT) == fact
            assert tx.memory_before("acme", "user:U3", last, history) is None

    def test_a_failed_transaction_leaves_nothing_behind(self, store: MemoryStore) -> None:
        class Boom(Exception):
            pass

        def fail_midway() -> None:
            with store.transaction() as tx:
                tx.apply([PutMemory(mem(1))])
                tx.set_position("registrar", 10)
                raise Boom

        with pytest.raises(Boom):
            fail_midway()
        assert store.position("registrar") == 0
        assert store.counts()["memories"] == 0

    def test_query_filters(self, store: MemoryStore) -> None:
        memories = [
            mem(1, mtype=MemoryType.PREFERENCE, tags=("apparel",)),
            mem(2, mtype=MemoryType.CONSTRAINT),
            mem(3, stream="user:U2"),
            mem(4, valid_until=T0 + timedelta(hours=1), tags=("intent",)),
            mem(5, tenant="other"),
        ]
        self.put(store, *memories)
        ids = lambda q: [m.memory_id for m in store.query("acme", q)]  # noqa: E731
        assert ids(MemoryQuery(stream="user:U1")) == sorted(
            m.memory_id for m in [*memories[:2], memories[3]]
        )
        assert ids(MemoryQuery(types=(MemoryType.CONSTRAINT,))) == [memories[1].memory_id]
        assert ids(MemoryQuery(tags=("apparel", "intent"))) == sorted(
            [memories[0].memory_id, memories[3].memory_id]
        )
        assert memories[3].memory_id not in ids(MemoryQuery(live_at=T0 + timedelta(hours=1)))
        assert memories[3].memory_id in ids(MemoryQuery(live_at=T0 + timedelta(minutes=59)))
        page = store.query("acme", MemoryQuery(limit=2))
        rest = store.query("acme", MemoryQuery(limit=10, after=page[-1].memory_id))
        assert len(page) + len(rest) == 4

    def test_history_keeps_every_version(self, store: MemoryStore) -> None:
        v1, v2 = mem(1, key="size", value="L"), mem(2, key="size", value="XL", version=2)
        self.put(store, v1, v2)
        with store.transaction() as tx:
            tx.apply([SetStatus("acme", v1.memory_id, MemoryStatus.SUPERSEDED)])
        assert [m.value for m in store.history("acme", "user:U1", "size")] == ["L", "XL"]
        assert store.query("acme", MemoryQuery(key="size"))[0].value == "XL"

    def test_erasing_content(self, store: MemoryStore) -> None:
        a = mem(1, content="secret plans for tuesday")
        self.put(store, a)
        with store.transaction() as tx:
            tx.apply([SetStatus("acme", a.memory_id, MemoryStatus.FORGOTTEN, erase_content=True)])
        forgotten = store.get("acme", a.memory_id)
        assert forgotten is not None
        assert forgotten.content == ""
        assert forgotten.status is MemoryStatus.FORGOTTEN

    def test_erasing_drops_the_sealed_values(self, store: MemoryStore) -> None:
        block = EncryptionBlock(
            key_id="acme/user:U1", key_version=1, wrapped_key="d3JhcHBlZA==", values={"x:h1": "c"}
        )
        a = mem(1, content="card ⟦bank_card:h0123456789abcdef⟧").model_copy(
            update={"sealed": block}
        )
        self.put(store, a)
        stored = store.get("acme", a.memory_id)
        assert stored is not None
        assert stored.sealed == block
        with store.transaction() as tx:
            tx.apply([SetStatus("acme", a.memory_id, MemoryStatus.FORGOTTEN, erase_content=True)])
        erased = store.get("acme", a.memory_id)
        assert erased is not None
        assert erased.sealed is None

    def test_tenant_memories_and_purging_a_tenant(self, store: MemoryStore) -> None:
        a = mem(1, content="alpha plans", stream="user:U1", key="size", value="M", tags=("t",))
        b = mem(2, content="beta plans", stream="user:U2")
        other = mem(3, tenant="globex", content="gamma plans", key="size", tags=("t",))
        self.put(store, a, b, other)
        with store.transaction() as tx:
            assert [m.memory_id for m in tx.tenant_memories("acme")] == sorted(
                [a.memory_id, b.memory_id]
            )
            tx.apply([PurgeTenant("acme")])
        assert store.query("acme", MemoryQuery(statuses=tuple(MemoryStatus))) == []
        assert [m.memory_id for m in store.query("globex", MemoryQuery())] == [other.memory_id]

    def test_purging_a_tenant_deletes_every_read_model_row(self, store: MemoryStore) -> None:
        """A purged tenant's rows are gone, not merely marked: memories, keys, tags, terms,
        outcomes, timers, context records, usage counters, weights and timelines. Its
        templates stay, another tenant keeps everything, and what the same
        batch writes after the purge (the forget request's own outcome) stays too."""
        kept: dict[str, dict[str, object]] = {}
        memories = {}
        for tenant in ("acme", "globex"):
            m = mem(1 if tenant == "acme" else 2, tenant=tenant, content="alpha plans",
                    key="size", value="M", tags=("shoes",))  # fmt: skip
            memories[tenant] = m
            outcome = Outcome(tenant, "e1", 0, OutcomeKind.REGISTERED, memory_id=m.memory_id)
            timer = Timer(tenant, m.memory_id, T0 + timedelta(hours=1))
            record = ContextRecord(tenant, "r1", "user:U1", "e2", "default@1", (m.memory_id,),
                                   (), 12)  # fmt: skip
            entry = TimelineEntry(tenant, m.memory_id, 5, "e1", "MemoryRegistered",
                                  "registered", T0.isoformat())  # fmt: skip
            template = ContextTemplate.model_validate(
                {
                    "name": "brief",
                    "version": 1,
                    "sections": [{"name": "facts", "priority": 1, "budget": 100}],
                }
            )
            with store.transaction() as tx:
                tx.apply(
                    [
                        PutMemory(m),
                        PutOutcome(outcome),
                        PutTimer(timer),
                        PutContextRecord(record),
                        BumpStats(tenant, m.memory_id, T0, included=1),
                        PutWeight(tenant, m.memory_id, 0.8, 0.5, 0.8),
                        PutTimeline(entry),
                        PutTemplate(tenant, template),
                    ]
                )
            kept[tenant] = {"outcome": outcome, "timer": timer, "record": record,
                            "entry": entry, "template": template}  # fmt: skip
        a, g = memories["acme"], memories["globex"]
        after = Outcome("acme", "forget", 0, OutcomeKind.APPLIED)
        with store.transaction() as tx:
            tx.apply([SetStatus("acme", a.memory_id, MemoryStatus.FORGOTTEN, erase_content=True)])
            tx.apply([PurgeTenant("acme"), PutOutcome(after)])
            assert tx.get("acme", a.memory_id) is None
            assert tx.current_for_key("acme", a.stream, "size") is None
            assert tx.weight_of("acme", a.memory_id) is None
            assert tx.context_record("acme", "r1") is None

        assert store.get("acme", a.memory_id) is None
        assert store.get_many("acme", [a.memory_id]) == []
        assert store.query("acme", MemoryQuery(statuses=tuple(MemoryStatus))) == []
        assert store.query("acme", MemoryQuery(stream=a.stream, statuses=tuple(MemoryStatus))) == []
        assert store.query("acme", MemoryQuery(tags=("shoes",), statuses=tuple(MemoryStatus))) == []
        assert store.history("acme", a.stream, "size") == []
        assert store.outcome("acme", "e1") == []
        assert store.outcome("acme", "forget") == [after]
        assert store.context_record("acme", "r1") is None
        assert store.context_records("acme", 10) == []
        assert store.memory_stats("acme", [a.memory_id]) == []
        assert store.timeline("acme", a.memory_id) == []
        due = T0 + timedelta(hours=2)
        assert store.due_timers(due, 10) == [kept["globex"]["timer"]]
        assert store.template("acme", "brief", 1) == kept["acme"]["template"]
        with store.transaction() as tx:
            assert tx.tenant_memories("acme") == []
            assert tx.weight_of("acme", a.memory_id) is None
            assert tx.current_for_key("acme", a.stream, "size") is None

        assert store.get("globex", g.memory_id) == g
        assert store.history("globex", g.stream, "size") == [g]
        assert store.query("globex", MemoryQuery(tags=("shoes",))) == [g]
        assert store.outcome("globex", "e1") == [kept["globex"]["outcome"]]
        assert store.context_record("globex", "r1") == kept["globex"]["record"]
        assert [s.included for s in store.memory_stats("globex", [g.memory_id])] == [1]
        assert store.timeline("globex", g.memory_id) == [kept["globex"]["entry"]]
        with store.transaction() as tx:
            assert tx.weight_of("globex", g.memory_id) == (0.8, 0.5, 0.8)
            assert tx.current_for_key("globex", g.stream, "size") == g

        # the purged tenant starts afresh: the same key is its own again
        fresh = mem(9, content="alpha again", key="size", value="L")
        self.put(store, fresh)
        with store.transaction() as tx:
            assert tx.current_for_key("acme", fresh.stream, "size") == fresh
        assert store.history("acme", fresh.stream, "size") == [fresh]

    def test_outcomes_timers_audit_and_positions(self, store: MemoryStore) -> None:
        o = Outcome("acme", "e1", 0, OutcomeKind.REJECTED, reason_code="X", detail="d")
        due = Timer("acme", mem(1).memory_id, T0 + timedelta(hours=1))
        later = Timer("acme", mem(2).memory_id, T0 + timedelta(hours=2))
        record = AuditRecord(
            "acme", "user:U1", 1, "e1", "ObservationRecorded", 1, "0" * 64, "f" * 64
        )
        second = AuditRecord("acme", "user:U1", 2, "e2", "MemoryRegistered", 2, "f" * 64, "e" * 64)
        other_stream = AuditRecord(
            "acme", "user:U2", 1, "e3", "ObservationRecorded", 3, "0" * 64, "d" * 64
        )
        with store.transaction() as tx:
            tx.apply(
                [PutOutcome(o), PutOutcome(o), PutTimer(due), PutTimer(later), PutAudit(record)]
            )
            tx.set_position("audit", 7)
        assert store.outcome("acme", "e1") == [o]
        assert store.outcome("other", "e1") == []
        assert store.due_timers(T0 + timedelta(hours=1), 10) == [due]
        assert store.due_timers(T0, 10) == []
        with store.transaction() as tx:
            tx.apply([DropTimer("acme", due.memory_id)])
            assert tx.last_audit("acme", "user:U1") == record
            assert tx.last_audit("acme", "user:U2") is None
            assert tx.last_audit("other", "user:U1") is None
            tx.apply([PutAudit(second), PutAudit(other_stream)])
            # the transaction sees the links it has just written
            assert tx.last_audit("acme", "user:U1") == second
        assert store.due_timers(T0 + timedelta(hours=3), 10) == [later]
        assert store.audit_trail("acme", "user:U1", 0, 10) == [record, second]
        assert store.audit_trail("acme", "user:U1", 1, 10) == [second]
        assert store.audit_trail("acme", "user:U1", 0, 1) == [record]
        assert store.audit_trail("acme", "user:U2", 0, 10) == [other_stream]
        assert store.audit_trail("other", "user:U1", 0, 10) == []
        assert store.audit_heads("acme") == [second, other_stream]
        assert store.audit_heads("other") == []
        assert store.position("audit") == 7

    def test_each_claim_raises_the_epoch_and_fences_the_older_holder(
        self, store: MemoryStore
    ) -> None:
        first = store.claim("registrar/3")
        with store.transaction() as tx:
            tx.apply([PutMemory(mem(1))])
            tx.set_position("registrar/3", 5, epoch=first)
        second = store.claim("registrar/3")
        assert second > first
        assert store.claim("indexer/3") >= 1  # every name has epochs of its own

        def zombie() -> None:
            with store.transaction() as tx:
                tx.apply([PutMemory(mem(2))])
                tx.apply([PutOutcome(Outcome("acme", "e-zombie", 0, OutcomeKind.DUPLICATE))])
                tx.set_position("registrar/3", 9, epoch=first)

        with pytest.raises(FencedOff) as refused:
            zombie()
        assert refused.value.code == "PARTITION_FENCED"
        # nothing of the refused commit is there
        assert store.position("registrar/3") == 5
        assert store.get("acme", mem(2).memory_id) is None
        assert store.outcome("acme", "e-zombie") == []
        # the new holder commits; a position-only commit is fenced too
        with store.transaction() as tx:
            tx.apply([PutMemory(mem(3))])
            tx.set_position("registrar/3", 7, epoch=second)
        assert store.position("registrar/3") == 7
        with pytest.raises(FencedOff), store.transaction() as tx:
            tx.set_position("registrar/3", 12, epoch=first)
        assert store.position("registrar/3") == 7
        with store.transaction() as tx:
            tx.set_position("registrar/3", 8, epoch=second)
        assert store.position("registrar/3") == 8
        assert store.positions(["registrar/3"]) == {"registrar/3": 8}
        assert store.get("acme", mem(3).memory_id) == mem(3)

    def test_usage_counted_by_several_partitions_adds_up_and_a_fenced_owner_counts_nothing(
        self, store: MemoryStore
    ) -> None:
        m = mem(1, stream="user:U2")
        self.put(store, m)
        early, late = T0 + timedelta(minutes=1), T0 + timedelta(minutes=5)
        one, two = store.claim("registrar/1"), store.claim("registrar/2")

        def bump(name: str | None, epoch: int | None, at: datetime, **counts: int) -> None:
            with store.transaction() as tx:
                tx.apply([BumpStats("acme", m.memory_id, at, **counts)])
                tx.apply([BumpStats("acme", m.memory_id, at, included=1)])
                if name is not None:
                    tx.set_position(name, 3, epoch=epoch)

        bump("registrar/1", one, late, cited=1)
        bump("registrar/2", two, early, cited=2, corrected=1)
        bump(None, None, early, truncated=1)  # a commit outside any partition counts too
        expected = MemoryStats("acme", m.memory_id, 3, 1, 3, 1, late)
        assert store.memory_stats("acme", [m.memory_id]) == [expected]
        # partition 1 changes hands: its former owner's usage is refused with its commit
        store.claim("registrar/1")
        with pytest.raises(FencedOff):
            bump("registrar/1", one, late + timedelta(days=1), cited=5)
        assert store.memory_stats("acme", [m.memory_id]) == [expected]
        assert store.memory_stats("acme", [mem(2).memory_id]) == []
        assert store.counts()["memory_stats"] == 1

    def test_checksum_follows_content_and_reset_clears_everything(self, store: MemoryStore) -> None:
        empty = store.checksum()
        self.put(store, mem(1))
        one = store.checksum()
        assert one != empty
        self.put(store, mem(1))  # idempotent
        assert store.checksum() == one
        with store.transaction() as tx:
            tx.set_position("registrar", 3)
        assert store.checksum() == one  # positions are not content
        store.reset()
        assert store.checksum() == empty
        assert store.position("registrar") == 0


class TestSqliteMemoryStore(MemoryStoreContract):
    def make_store(self, path: Path) -> MemoryStore:
        return SqliteMemoryStore(path / "store.sqlite3", "NORMAL")


# ---- Cassandra: the same contract against a real node ------------------------------------


@pytest.fixture(scope="module")
def cassandra_keyspace() -> Iterator[tuple[Any, str]]:
    """One session and one fresh keyspace (migrated once) for the whole class; every test
    then starts from store.reset(), which truncates only the tables that hold something."""
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


class TestCassandraMemoryStore(MemoryStoreContract):
    @pytest.fixture(autouse=True)
    def _cassandra(self, cassandra_keyspace: tuple[Any, str]) -> None:
        self.session, self.keyspace = cassandra_keyspace

    def make_store(self, path: Path) -> MemoryStore:
        from mnemo.adapters.cassandra_store import CassandraMemoryStore

        store = CassandraMemoryStore(
            self.session, self.keyspace, migrate_schema=False, blinder=BLINDER
        )
        store.reset()
        return store
