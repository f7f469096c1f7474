"""The Cassandra store beyond the shared contract: migrations, commits interrupted
half-way, timer hours, tenant keyspaces, error translation.

Needs a Cassandra node (infra/services.py up cassandra): skipped without one, failed under
CI (CI=true)."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.support import BLINDER, missing

from mnemo.domain.document_index import DocumentRecord, EntityFilter, entity_rows
from mnemo.domain.documents import Entity
from mnemo.domain.errors import ConflictError, FencedOff, InvalidInput, Unavailable
from mnemo.domain.ids import derived_id
from mnemo.domain.memory import Memory, MemoryStatus, MemoryType, Scope
from mnemo.domain.projection import (
    BumpStats,
    DropTimer,
    Outcome,
    OutcomeKind,
    PutDocument,
    PutMemory,
    PutOutcome,
    PutTimer,
    SetStatus,
    Timer,
    Write,
)
from mnemo.ports import MemoryQuery, MemoryStore

HOSTS = os.environ.get("MNEMO_CASSANDRA_HOSTS", "127.0.0.1").split(",")
PORT = int(os.environ.get("MNEMO_CASSANDRA_PORT", "9042"))
T0 = datetime(2026, 11, 30, tzinfo=UTC)


try:
    from mnemo.adapters import cassandra_store
    from mnemo.adapters.cassandra_store import CassandraMemoryStore
except ImportError as exc:  # pragma: no cover - the driver is not installed
    missing("Cassandra", module_level=True, reason=f"cassandra-driver is not installed: {exc}")


def mem(
    n: int,
    *,
    tenant: str = "acme",
    content: str = "",
    key: str | None = None,
    value: str | None = None,
    version: int = 1,
    stream: str = "user:U1",
) -> Memory:
    return Memory(
        memory_id=derived_id(T0 + timedelta(seconds=n), tenant, str(n)),
        tenant=tenant,
        stream=stream,
        type=MemoryType.FACT,
        scope=Scope.USER,
        content=content or f"memory number {n}",
        key=key,
        value=value,
        created_at=T0,
        version=version,
        source_event_id=derived_id(T0, "source", str(n)),
        content_hash=f"hash{n}",
    )


def _create(session: Any, keyspace: str) -> None:
    session.execute(
        f"CREATE KEYSPACE {keyspace} WITH replication = "
        "{'class': 'SimpleStrategy', 'replication_factor': 1}"
    )


@pytest.fixture(scope="module")
def cassandra() -> Iterator[tuple[Any, str, list[int]]]:
    from cassandra.cluster import (
        EXEC_PROFILE_DEFAULT,
        Cluster,
        ExecutionProfile,
        NoHostAvailable,
    )
    from cassandra.policies import RoundRobinPolicy

    cluster = Cluster(
        HOSTS,
        port=PORT,
        connect_timeout=3,
        execution_profiles={EXEC_PROFILE_DEFAULT: ExecutionProfile(RoundRobinPolicy())},
    )
    try:
        session = cluster.connect()
    except NoHostAvailable as exc:
        cluster.shutdown()
        missing("Cassandra", f"{HOSTS}:{PORT}: {exc}")
    keyspace = f"mnemo_it_{uuid.uuid4().hex[:12]}"
    _create(session, keyspace)
    created: list[str] = [keyspace]
    try:
        first = cassandra_store.migrate(session, keyspace)
        yield session, keyspace, first
    finally:
        rows = session.execute(
            "SELECT keyspace_name FROM system_schema.keyspaces"
        )  # tenant keyspaces made by the tests
        created += [r[0] for r in rows if str(r[0]).startswith(f"{keyspace}_")]
        for name in created:
            session.execute(f"DROP KEYSPACE IF EXISTS {name}", timeout=120)
        cluster.shutdown()


@pytest.fixture
def store(cassandra: tuple[Any, str, list[int]]) -> CassandraMemoryStore:
    session, keyspace, _ = cassandra
    built = CassandraMemoryStore(
        session, keyspace, migrate_schema=False, settle_seconds=0, blinder=BLINDER
    )
    built.reset()
    return built


class Crash(BaseException):
    """A process dying: not an Exception, so nothing on the way catches it."""


def crash_after(store: CassandraMemoryStore, applied: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """Make the next commit die once `applied` row writes of its batch have landed."""
    real = store._write_all

    def partial(mutations: Sequence[list[Any]], ts: int) -> None:
        real(mutations[:applied], ts)
        raise Crash

    monkeypatch.setattr(store, "_write_all", partial)


def commit(store: MemoryStore, writes: Sequence[Write], position: int | None = None) -> None:
    """One registrar batch: the writes, then the position (when given)."""
    with store.transaction() as tx:
        tx.apply(writes)
        if position is not None:
            tx.set_position("registrar", position)


def restart(store: CassandraMemoryStore) -> CassandraMemoryStore:
    return CassandraMemoryStore(
        store._session, store.home, migrate_schema=False, settle_seconds=0, blinder=BLINDER
    )


# ---- migrations ----------------------------------------------------------------------------


def test_migrations_are_recorded_and_a_second_run_is_a_no_op(
    cassandra: tuple[Any, str, list[int]], tmp_path: Path
) -> None:
    session, keyspace, first = cassandra
    shipped = {int(p.name[:4]): p.name for p in cassandra_store.MIGRATIONS_DIR.glob("*.cql")}
    assert first == sorted(shipped)
    assert {1: "0001_initial.cql", 2: "0002_access.cql"}.items() <= shipped.items()
    assert cassandra_store.migrate(session, keyspace) == []
    folder = tmp_path / "cql"
    shutil.copytree(cassandra_store.MIGRATIONS_DIR, folder)
    (folder / "0999_probe.cql").write_text(
        "-- a later version\nCREATE TABLE IF NOT EXISTS ${keyspace}.probe (id int PRIMARY KEY);\n"
    )
    assert cassandra_store.migrate(session, keyspace, folder) == [999]
    assert cassandra_store.migrate(session, keyspace, folder) == []
    rows = session.execute(f"SELECT version, name, checksum FROM {keyspace}.schema_migrations")
    recorded = {r[0]: r[1] for r in rows}
    assert recorded == {**shipped, 999: "0999_probe.cql"}


def test_the_per_stream_audit_version_relinks_a_keyspace_that_held_data(
    cassandra: tuple[Any, str, list[int]], tmp_path: Path
) -> None:
    session, home, _ = cassandra
    keyspace = f"{home}_v3"
    _create(session, keyspace)
    older = tmp_path / "cql"
    older.mkdir()
    for path in cassandra_store.MIGRATIONS_DIR.glob("000[123]_*.cql"):
        shutil.copy(path, older / path.name)
    assert cassandra_store.migrate(session, keyspace, older) == [1, 2, 3]
    put = session.prepare(f"INSERT INTO {keyspace}.positions (consumer, log_offset) VALUES (?, ?)")
    for consumer in ("audit/0", "audit/5", "registrar/0", "indexer/5"):
        session.execute(put, (consumer, 42))
    later = sorted(
        int(p.name[:4]) for p in cassandra_store.MIGRATIONS_DIR.glob("*.cql") if int(p.name[:4]) > 3
    )
    assert later[:2] == [4, 5]
    assert cassandra_store.migrate(session, keyspace) == later
    left = {str(r[0]) for r in session.execute(f"SELECT consumer FROM {keyspace}.positions")}
    assert left == {"registrar/0", "indexer/5"}  # the audit consumer starts again at 0
    tables = {
        str(r[0])
        for r in session.execute(
            "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", (keyspace,)
        )
    }
    assert {"audit_links", "audit_stream_heads", "audit", "audit_heads"} <= tables
    # version 7 retires the keyword index: keyword search is the vector index's
    retired = {"memory_terms", "term_postings", "term_stats", "stream_postings"}
    assert not (retired | {"stream_term_stats"}) & tables


def test_the_development_node_keeps_its_memtables_off_the_heap(
    cassandra: tuple[Any, str, list[int]],
) -> None:
    # infra/services.py's node: memtables on the heap made each young collection pause every
    # request for 80 to 180 ms on two cores (docs/distributed.md, eighth round)
    session, _, _ = cassandra
    rows = session.execute(
        "SELECT value FROM system_views.settings WHERE name = 'memtable_allocation_type'"
    )
    assert [r[0] for r in rows] == ["offheap_objects"]


def test_keyspace_names_are_validated(cassandra: tuple[Any, str, list[int]]) -> None:
    session, _, _ = cassandra
    with pytest.raises(ValueError, match="keyspace"):
        cassandra_store.migrate(session, "mnemo; DROP KEYSPACE system")


def put(store: MemoryStore, *memories: Any) -> None:
    with store.transaction() as tx:
        tx.apply([PutMemory(m) for m in memories])


# ---- concurrent transactions -----------------------------------------------------------------


def test_partitions_commit_side_by_side(store: CassandraMemoryStore) -> None:
    """One registrar partition's transaction does not wait for another's: with no corpus
    statistics to read and rewrite, a transaction held open does not block the next."""
    opened, release = threading.Event(), threading.Event()
    errors: list[BaseException] = []

    def slow() -> None:
        try:
            with store.transaction() as tx:
                tx.apply([PutMemory(mem(1, stream="user:U1", content="first partition"))])
                tx.set_position("registrar/0", 1)
                opened.set()
                if not release.wait(timeout=120):
                    raise TimeoutError("the other partition never committed")
        except BaseException as e:
            errors.append(e)
            opened.set()

    first = threading.Thread(target=slow)
    first.start()
    assert opened.wait(timeout=120)
    try:
        with store.transaction() as tx:  # blocked until `first` commits, if they serialize
            tx.apply([PutMemory(mem(2, stream="user:U2", content="second partition"))])
            tx.set_position("registrar/1", 1)
        assert store.get("acme", mem(2).memory_id) is not None
        assert store.get("acme", mem(1).memory_id) is None  # still open
    finally:
        release.set()
        first.join(timeout=120)
    assert errors == []
    assert store.get("acme", mem(1).memory_id) is not None
    assert store.positions(["registrar/0", "registrar/1"]) == {"registrar/0": 1, "registrar/1": 1}


def test_two_processes_counting_one_memorys_usage_from_their_partitions_lose_nothing(
    store: CassandraMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Process A plans its commit (reads what it adds to) before process B commits, and
    writes after it: each partition has a row of its own, so neither addition is lost.
    Then partition 0 changes hands, and A, its former owner, moves no counter."""
    other = restart(store)  # a second process on the same keyspace
    a = mem(1, stream="user:U9")
    put(store, a)
    epoch_a, epoch_b = store.claim("registrar/0"), other.claim("registrar/1")
    b_done = threading.Event()
    real_seal = store._seal_fenced

    def seal_after_b(*args: Any) -> None:
        b_done.wait(timeout=60)
        real_seal(*args)

    monkeypatch.setattr(store, "_seal_fenced", seal_after_b)
    errors: list[BaseException] = []

    def count_in_a() -> None:
        try:
            with store.transaction() as tx:
                tx.apply([BumpStats("acme", a.memory_id, T0, cited=1, included=2)])
                tx.set_position("registrar/0", 5, epoch=epoch_a)
        except BaseException as e:
            errors.append(e)

    first = threading.Thread(target=count_in_a)
    first.start()
    with other.transaction() as tx:
        tx.apply([BumpStats("acme", a.memory_id, T0 + timedelta(hours=1), cited=3)])
        tx.set_position("registrar/1", 7, epoch=epoch_b)
    b_done.set()
    first.join(timeout=120)
    assert errors == []
    [stats] = store.memory_stats("acme", [a.memory_id])
    assert (stats.included, stats.cited, stats.last_used) == (2, 4, T0 + timedelta(hours=1))
    # repeated batches of both partitions side by side still add up exactly
    monkeypatch.undo()

    def many(s: CassandraMemoryStore, name: str, epoch: int, start: int) -> None:
        try:
            for n in range(10):
                with s.transaction() as tx:
                    tx.apply([BumpStats("acme", a.memory_id, T0, cited=1)])
                    tx.set_position(name, start + n, epoch=epoch)
        except BaseException as e:
            errors.append(e)

    threads = [
        threading.Thread(target=many, args=(store, "registrar/0", epoch_a, 10)),
        threading.Thread(target=many, args=(other, "registrar/1", epoch_b, 10)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert errors == []
    assert [s.cited for s in other.memory_stats("acme", [a.memory_id])] == [24]
    # partition 0 moves to the other process: A's late usage is refused with its commit
    other.claim("registrar/0")

    def late() -> None:
        with store.transaction() as tx:
            tx.apply([BumpStats("acme", a.memory_id, T0 + timedelta(days=1), cited=100)])
            tx.set_position("registrar/0", 99, epoch=epoch_a)

    with pytest.raises(FencedOff):
        late()
    [stats] = other.memory_stats("acme", [a.memory_id])
    assert (stats.cited, stats.last_used) == (24, T0 + timedelta(hours=1))


def test_a_holder_knows_its_own_position_until_another_process_claims_the_name(
    store: CassandraMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a fenced commit it finished, a process answers `position()` for that name
    without a round trip; a position another process moved since is never committed on:
    the holder's next commit is refused, and a claim or a refusal reads the store again."""
    other = restart(store)
    name = "indexer/4"
    mine = store.claim(name)
    with store.transaction() as tx:
        tx.set_position(name, 5, epoch=mine)
    reads: list[Any] = []
    for method in ("_execute", "_concurrently"):
        real = getattr(store, method)

        def counted(*args: Any, _real: Any = real, **kw: Any) -> Any:
            reads.append(args)
            return _real(*args, **kw)

        monkeypatch.setattr(store, method, counted)
    assert store.position(name) == 5
    assert reads == []
    # another process takes the name over and moves it on
    theirs = other.claim(name)
    with other.transaction() as tx:
        tx.set_position(name, 9, epoch=theirs)
    assert store.positions([name]) == {name: 9}  # what lag and `?wait=` read is the store's
    with pytest.raises(FencedOff), store.transaction() as tx:
        tx.set_position(name, 6, epoch=mine)
    assert store.position(name) == 9
    # the name comes back to this process: its claim reads what the other one left
    with other.transaction() as tx:
        tx.set_position(name, 11, epoch=theirs)
    again = store.claim(name)
    assert store.position(name) == 11
    with store.transaction() as tx:
        tx.set_position(name, 14, epoch=again)
    with pytest.raises(FencedOff), other.transaction() as tx:
        tx.set_position(name, 12, epoch=theirs)
    assert other.position(name) == 14
    assert store.position(name) == 14


def test_usage_counted_before_the_per_partition_rows_is_kept(
    cassandra: tuple[Any, str, list[int]], tmp_path: Path
) -> None:
    """Migration 8 moves a keyspace's usage counters into the per-partition table."""
    session, home, _ = cassandra
    keyspace = f"{home}_v7"
    _create(session, keyspace)
    older = tmp_path / "cql"
    older.mkdir()
    for path in cassandra_store.MIGRATIONS_DIR.glob("000[1-7]_*.cql"):
        shutil.copy(path, older / path.name)
    assert cassandra_store.migrate(session, keyspace, older) == [1, 2, 3, 4, 5, 6, 7]
    a = mem(1)
    session.execute(
        f"INSERT INTO {keyspace}.memory_stats (tenant, memory_id, included, truncated, cited, "
        "corrected, last_used) VALUES (%s, %s, 4, 1, 2, 0, %s)",
        ("acme", a.memory_id, T0.isoformat()),
    )
    assert 8 in cassandra_store.migrate(session, keyspace)
    store = CassandraMemoryStore(
        session, keyspace, migrate_schema=False, settle_seconds=0, blinder=BLINDER
    )
    epoch = store.claim("registrar/2")
    with store.transaction() as tx:
        tx.apply([BumpStats("acme", a.memory_id, T0 + timedelta(hours=2), cited=1)])
        tx.set_position("registrar/2", 1, epoch=epoch)
    [stats] = store.memory_stats("acme", [a.memory_id])
    assert (stats.included, stats.truncated, stats.cited) == (4, 1, 3)
    assert stats.last_used == T0 + timedelta(hours=2)


# ---- interrupted commits -------------------------------------------------------------------


def supersede_batch(store: MemoryStore) -> tuple[Any, Any]:
    v1 = mem(1, key="size", value="L")
    with store.transaction() as tx:
        tx.apply([PutMemory(v1)])
        tx.set_position("registrar", 1)
    v2 = mem(2, key="size", value="XL", version=2)
    return v1, v2


def test_a_commit_that_dies_after_its_seal_is_rolled_forward_not_redone(
    store: CassandraMemoryStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the state a clean run reaches, as a reference
    v1, v2 = supersede_batch(store)
    with store.transaction() as tx:
        tx.apply([PutMemory(v2), SetStatus("acme", v1.memory_id, MemoryStatus.SUPERSEDED)])
        tx.set_position("registrar", 2)
    clean = store.checksum()
    store.reset()

    v1, v2 = supersede_batch(store)
    crash_after(store, 1, monkeypatch)
    with pytest.raises(Crash):
        commit(store, [PutMemory(v2), SetStatus("acme", v1.memory_id, MemoryStatus.SUPERSEDED)], 2)
    monkeypatch.undo()
    # half of the batch is visible; a redelivery would now see v2 as a duplicate and never
    # supersede v1, so the restarted consumer must not redo the batch
    assert store.checksum() != clean
    again = restart(store)
    assert again.position("registrar") == 2
    assert again.checksum() == clean
    assert [m.value for m in again.query("acme", MemoryQuery(key="size"))] == ["XL"]


def test_the_same_process_finishes_its_own_failed_commit_first(
    store: CassandraMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = store._write_all

    def timeout_once(mutations: Sequence[list[Any]], ts: int) -> None:
        monkeypatch.setattr(store, "_write_all", real)
        raise Unavailable("write timed out", code="STORE_UNAVAILABLE")

    monkeypatch.setattr(store, "_write_all", timeout_once)
    with pytest.raises(Unavailable):
        commit(store, [PutMemory(mem(1))], 5)
    assert store.get("acme", mem(1).memory_id) is None
    assert store.position("registrar") == 5  # rolled forward before answering
    assert store.get("acme", mem(1).memory_id) == mem(1)


def test_a_batch_read_past_an_unfinished_commit_is_refused(
    store: CassandraMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    crash_after(store, 0, monkeypatch)
    with pytest.raises(Crash):
        commit(store, [PutMemory(mem(1))], 3)
    monkeypatch.undo()
    # a second process, too soon for recover() to call the record abandoned, which skips
    # position(): its batch rests on a partial state
    # (settle_seconds long enough that a slow machine cannot make it too late)
    again = CassandraMemoryStore(
        store._session, store.home, migrate_schema=False, settle_seconds=60, blinder=BLINDER
    )
    with pytest.raises(Unavailable, match="unfinished"):
        commit(again, [PutMemory(mem(2))], 6)
    assert again.get("acme", mem(2).memory_id) is None
    assert again.get("acme", mem(1).memory_id) == mem(1)
    assert again.position("registrar") == 3


def test_a_commit_that_dies_before_its_seal_leaves_nothing(
    store: CassandraMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_seal(*args: Any) -> None:
        raise Crash

    monkeypatch.setattr(store, "_seal", no_seal)
    with pytest.raises(Crash):
        commit(store, [PutMemory(mem(1))], 3)
    monkeypatch.undo()
    again = restart(store)
    assert again.position("registrar") == 0
    assert again.counts()["memories"] == 0


def test_a_commit_record_too_large_for_one_batch_is_sealed_after_its_pieces(
    store: CassandraMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mnemo.adapters.cassandra_store import commits  # where commit records are sealed

    monkeypatch.setattr(commits, "_INTENT_ONE_BATCH", 0)
    monkeypatch.setattr(commits, "_INTENT_CHUNK", 64)  # many pieces
    crash_after(store, 0, monkeypatch)
    with pytest.raises(Crash):
        commit(store, [PutMemory(mem(1)), PutMemory(mem(2))], 3)
    monkeypatch.undo()
    again = restart(store)
    assert again.position("registrar") == 3
    assert again.get_many("acme", [mem(1).memory_id, mem(2).memory_id]) == [mem(1), mem(2)]


def test_other_readers_see_a_position_once_its_commit_is_applied(
    store: CassandraMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    commit(store, [PutMemory(mem(1))], 4)
    crash_after(store, 0, monkeypatch)
    with pytest.raises(Crash):
        commit(store, [PutMemory(mem(2))], 8)
    monkeypatch.undo()
    # sealed, not applied: lag and waits still see the last applied position
    assert store.positions(["registrar", "indexer"]) == {"registrar": 4, "indexer": 0}
    assert store.get("acme", mem(2).memory_id) is None
    # the consumer itself finishes the commit before it reads on
    assert store.position("registrar") == 8
    assert store.positions(["registrar"]) == {"registrar": 8}
    assert store.get("acme", mem(2).memory_id) == mem(2)


def test_every_row_of_a_large_commit_lands_whatever_batch_carries_it(
    store: CassandraMemoryStore,
) -> None:
    memories = [
        mem(n, stream=f"user:U{n % 7}", content=f"memory number {n} about topic{n % 13}")
        for n in range(450)
    ]
    commit(store, [PutMemory(m) for m in memories], 9)
    assert store.position("registrar") == 9
    found = store.query("acme", MemoryQuery(limit=1_000))
    assert sorted(m.memory_id for m in found) == sorted(m.memory_id for m in memories)
    for s in range(7):
        listed = store.query("acme", MemoryQuery(stream=f"user:U{s}", limit=1_000))
        assert len(listed) == len([m for m in memories if m.stream == f"user:U{s}"])
    tagged = store.query("acme", MemoryQuery(stream="user:U5", limit=1_000))
    assert {m.content for m in tagged} == {m.content for m in memories if m.stream == "user:U5"}
    assert store.counts()["memory_tags"] == 0


def test_usage_counts_survive_a_roll_forward_without_counting_twice(
    store: CassandraMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    a = mem(1)
    put(store, a)
    crash_after(store, 10, monkeypatch)  # every row lands, the record is never dropped
    with pytest.raises(Crash):
        commit(store, [BumpStats("acme", a.memory_id, T0, included=1, cited=1)], 4)
    monkeypatch.undo()
    again = restart(store)
    assert again.position("registrar") == 4
    assert again.position("registrar") == 4
    [stats] = again.memory_stats("acme", [a.memory_id])
    assert (stats.included, stats.cited, stats.last_used) == (1, 1, T0)


def test_anonymous_commits_left_behind_are_finished_on_start(
    store: CassandraMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    crash_after(store, 0, monkeypatch)
    with pytest.raises(Crash):
        commit(store, [PutOutcome(_outcome())])  # like the decay scan: no position
    monkeypatch.undo()
    assert store.outcome("acme", "e1") == []
    assert restart(store).outcome("acme", "e1") == [_outcome()]


def _outcome() -> Outcome:
    return Outcome("acme", "e1", 0, OutcomeKind.APPLIED)


def test_a_key_made_current_by_another_writer_is_a_conflict(store: CassandraMemoryStore) -> None:
    v1 = mem(1, key="size", value="L")
    put(store, v1)
    heads = store._session.prepare(
        f"UPDATE {store.home}.memory_key_heads SET memory_id = ? "
        "WHERE tenant = 'acme' AND stream = 'user:U1' AND mkey = ?"
    )
    v2 = mem(2, key="size", value="XL", version=2)
    batch = [PutMemory(v2), SetStatus("acme", v1.memory_id, MemoryStatus.SUPERSEDED)]
    size = store._blind("acme", "key", "size")  # the key as the heads table holds it
    store._session.execute(heads, ["decided-elsewhere", size])  # a second writer got there first
    with pytest.raises(ConflictError):
        commit(store, batch)
    assert store.get("acme", v2.memory_id) is None
    store._session.execute(heads, [v2.memory_id, size])  # this very batch, redone after a crash
    commit(store, batch)
    assert [m.value for m in store.query("acme", MemoryQuery(key="size"))] == ["XL"]
    # once the key has no current memory, version 1 may be registered again
    commit(store, [SetStatus("acme", v2.memory_id, MemoryStatus.FORGOTTEN, erase_content=True)])
    again = mem(3, key="size", value="M")
    put(store, again)
    # the forgotten version keeps nothing of what it said, its key included
    assert [m.version for m in store.history("acme", "user:U1", "size")] == [1, 1]


# ---- timers --------------------------------------------------------------------------------


def test_due_timers_walk_the_hours_in_order_and_forget_empty_past_ones(
    store: CassandraMemoryStore,
) -> None:
    timers = [
        Timer("acme", mem(i).memory_id, T0 + timedelta(minutes=50 * i), "expire")
        for i in range(1, 6)
    ]
    with store.transaction() as tx:
        tx.apply([PutTimer(t) for t in reversed(timers)])
    end = T0 + timedelta(hours=5)
    assert store.due_timers(end, 10) == timers
    assert store.due_timers(end, 2) == timers[:2]
    assert store.due_timers(T0 + timedelta(minutes=120), 10) == timers[:2]
    moved = Timer("acme", timers[0].memory_id, T0 + timedelta(hours=9), "expire")
    with store.transaction() as tx:
        tx.apply([PutTimer(moved), *[DropTimer("acme", t.memory_id) for t in timers[1:]]])
    assert store.due_timers(end, 10) == []
    hours = store._session.execute(f"SELECT bucket FROM {store.home}.timer_buckets")
    assert [r[0] for r in hours] == [int(moved.due_at.timestamp()) // 3600]
    assert store.due_timers(T0 + timedelta(hours=10), 10) == [moved]


# ---- tenants with keyspaces of their own ---------------------------------------------------


def test_a_tenant_can_have_a_keyspace_of_its_own(store: CassandraMemoryStore) -> None:
    own = f"{store.home}_vip"
    isolated = CassandraMemoryStore(
        store._session,
        store.home,
        migrate_schema=True,
        keyspace_for=lambda tenant: own if tenant == "vip" else store.home,
        blinder=BLINDER,
    )
    shared, vip = mem(1), mem(2, tenant="vip", content="private words")
    put(isolated, shared, vip)
    assert isolated.get("vip", vip.memory_id) == vip
    assert store.get("vip", vip.memory_id) is None  # not in the shared keyspace
    rows = store._session.execute(f"SELECT memory_id FROM {own}.memories WHERE tenant = 'vip'")
    assert [r[0] for r in rows] == [vip.memory_id]
    assert [m.memory_id for m in isolated.query("vip", MemoryQuery())] == [vip.memory_id]
    assert isolated.counts()["memories"] == 2
    before = isolated.checksum()
    isolated.reset()
    assert isolated.counts()["memories"] == 0
    put(isolated, shared, vip)
    assert isolated.checksum() == before


# ---- listings by type ------------------------------------------------------------------------


def typed(n: int, mtype: MemoryType, stream: str = "user:U1") -> Memory:
    return mem(n, stream=stream).model_copy(update={"type": mtype})


def statements_run(store: CassandraMemoryStore, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    names: list[str] = []
    real = store._execute

    def recording(ks: str, name: str, params: Sequence[Any], fetch_size: int | None = None) -> Any:
        names.append(name)
        return real(ks, name, params, fetch_size)

    concurrent = store._concurrently

    def recording_all(items: Sequence[tuple[str, str, Sequence[Any]]]) -> Any:
        names.extend(name for _, name, _ in items)
        return concurrent(items)

    monkeypatch.setattr(store, "_execute", recording)
    monkeypatch.setattr(store, "_concurrently", recording_all)
    return names


def test_a_streams_memories_of_a_type_are_read_by_the_type_not_through_the_stream(
    store: CassandraMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    facts = [typed(n, MemoryType.FACT) for n in range(1, 301)]
    rules = [typed(n, MemoryType.CONSTRAINT) for n in (400, 401, 402, 403)]
    notes = [typed(n, MemoryType.CONTEXT) for n in (500, 501)]
    elsewhere = typed(600, MemoryType.CONSTRAINT, stream="user:U2")
    put(store, *facts, *rules, *notes, elsewhere)
    with store.transaction() as tx:
        tx.apply([SetStatus("acme", rules[3].memory_id, MemoryStatus.ARCHIVED, 2)])
    query = MemoryQuery(stream="user:U1", types=(MemoryType.CONSTRAINT,))
    # the index is built by the migration: wait (with a budget) until it answers
    deadline = time.monotonic() + 60
    while store._typed(store.home, "acme", query, "") is None:
        assert time.monotonic() < deadline, "the type index never became queryable"
        time.sleep(0.2)
    names = statements_run(store, monkeypatch)
    found = store.query("acme", query)
    assert [m.memory_id for m in found] == [r.memory_id for r in rules[:3]]
    assert "stream_type_scan" in names
    assert "stream_scan" not in names  # not one page of the stream's 306 rows
    both = MemoryQuery(stream="user:U1", types=(MemoryType.CONTEXT, MemoryType.CONSTRAINT), limit=4)
    expected = sorted(m.memory_id for m in (*rules[:3], *notes))
    assert [m.memory_id for m in store.query("acme", both)] == expected[:4]
    after = replace(both, after=expected[1])
    assert [m.memory_id for m in store.query("acme", after)] == expected[2:]


def test_without_a_type_index_a_listing_by_type_pages_through_the_stream(
    store: CassandraMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    rules = [typed(n, MemoryType.CONSTRAINT) for n in (1, 2)]
    put(store, *[typed(n, MemoryType.FACT) for n in range(10, 40)], *rules)
    session = store._session
    session.execute(f"DROP INDEX IF EXISTS {store.home}.memories_by_stream_mtype", timeout=120)
    try:
        fresh = restart(store)
        names = statements_run(fresh, monkeypatch)
        query = MemoryQuery(stream="user:U1", types=(MemoryType.CONSTRAINT,))
        assert [m.memory_id for m in fresh.query("acme", query)] == [r.memory_id for r in rules]
        assert "stream_scan" in names
    finally:
        session.execute(
            f"CREATE CUSTOM INDEX IF NOT EXISTS memories_by_stream_mtype ON "
            f"{store.home}.memories_by_stream (mtype) USING 'StorageAttachedIndex'",
            timeout=120,
        )


def test_a_batchs_turn_lookups_are_read_at_once_not_one_round_trip_each(
    store: CassandraMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The registrar derives each new turn's episode from the turn before it: read ahead
    for the batch, the lookups are one wave of first pages and one of bodies, and
    memory_before then reads nothing; a lookup whose first page holds no turn reads on."""
    history = MemoryType.HISTORY
    put(store, typed(1, history), *(typed(n, MemoryType.FACT) for n in range(2, 60)))
    put(store, typed(60, history))
    new = [typed(n, history) for n in (61, 62, 63)]
    keys = [("acme", "user:U1", m.memory_id, history) for m in new]
    far = ("acme", "user:U1", typed(60, history).memory_id, history)  # 58 facts back
    names = statements_run(store, monkeypatch)
    with store.transaction() as tx:
        tx.prefetch_before([*keys, far])
        assert names.count("stream_before_page") == 4
        names.clear()
        found = [tx.memory_before(*k) for k in keys]
        assert [m.memory_id if m else None for m in found] == [typed(60, history).memory_id] * 3
        assert names == []
        assert tx.memory_before(*far) == typed(1, history)
        assert "stream_before" in names


def test_a_tag_within_the_limit_is_read_with_its_bodies_and_filtered_the_same(
    store: CassandraMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    tagged = [
        typed(n, MemoryType.HISTORY).model_copy(update={"tags": ("episode:e1",)})
        for n in range(1, 8)
    ]
    tagged[1] = tagged[1].model_copy(update={"type": MemoryType.FACT})
    tagged[2] = tagged[2].model_copy(update={"valid_until": T0 + timedelta(hours=1)})
    tagged[3] = tagged[3].model_copy(update={"stream": "user:U2"})
    put(store, *tagged)
    with store.transaction() as tx:
        tx.apply([SetStatus("acme", tagged[4].memory_id, MemoryStatus.ARCHIVED, 2)])
    query = MemoryQuery(
        stream="user:U1",
        types=(MemoryType.HISTORY,),
        tags=("episode:e1",),
        live_at=T0 + timedelta(hours=2),
        limit=50,
    )
    names = statements_run(store, monkeypatch)
    expected = [tagged[i].memory_id for i in (0, 5, 6)]
    assert [m.memory_id for m in store.query("acme", query)] == expected
    assert "mem_filters" not in names  # the filter columns were not read on their own
    # past the limit, the filter columns are read first, and the answer is the same
    names.clear()
    assert [m.memory_id for m in store.query("acme", replace(query, limit=2))] == expected[:2]
    assert "mem_filters" in names


# ---- errors --------------------------------------------------------------------------------


def test_an_unreachable_cluster_is_store_unavailable() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(Unavailable) as caught:
        CassandraMemoryStore.connect(["127.0.0.1"], port, request_timeout=2)
    assert caught.value.code == "STORE_UNAVAILABLE"
    assert type(caught.value.__cause__).__name__ == "NoHostAvailable"


def test_a_replication_the_cluster_refuses_is_a_configuration_error_naming_the_setting(
    cassandra: tuple[Any, str, list[int]],
) -> None:
    """The chart's production replication names its datacenter (dc1); a node of another
    datacenter refuses it, and the start stops naming MNEMO_CASSANDRA_REPLICATION."""
    keyspace = f"mnemo_repl_{uuid.uuid4().hex[:10]}"
    with pytest.raises(InvalidInput) as refused:
        CassandraMemoryStore.connect(
            HOSTS,
            PORT,
            keyspace,
            replication={"class": "NetworkTopologyStrategy", "no_such_dc": 1},
        )
    assert refused.value.code == "CASSANDRA_REPLICATION_INVALID"
    assert refused.value.field == "cassandra_replication"
    assert "no_such_dc" in refused.value.message


def test_connect_creates_migrates_and_serves(cassandra: tuple[Any, str, list[int]]) -> None:
    _, keyspace, _ = cassandra
    store = CassandraMemoryStore.connect(
        HOSTS, PORT, keyspace, local_dc="datacenter1", blinder=BLINDER
    )
    try:
        put(store, mem(7))
        assert store.get("acme", mem(7).memory_id) == mem(7)
        store.reset()
    finally:
        store.close()


def test_every_connection_sends_a_request_at_once_not_piece_by_piece(
    cassandra: tuple[Any, str, list[int]],
) -> None:
    """The driver writes a request of more than 4 KiB in pieces; with Nagle's algorithm
    each piece waits for the node's delayed acknowledgement of the one before (about 40
    ms: an IN of 100 ids took 44 ms, one of 99 took 3). Every connection the store opens,
    the control connection and each host's pool, has TCP_NODELAY set, and a read of more
    than 4 KiB of ids still answers."""
    _, keyspace, _ = cassandra
    store = CassandraMemoryStore.connect(HOSTS, PORT, keyspace, blinder=BLINDER)
    try:
        session = store._session
        sockets = [session.cluster.control_connection._connection._socket]
        for pool in session.get_pools():
            held = getattr(pool, "_connections", None)
            conns = (
                list(held.values()) if isinstance(held, dict) else list(held or [pool._connection])
            )
            sockets += [c._socket for c in conns]
        assert len(sockets) >= 2
        assert all(s.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) for s in sockets)
        many = [mem(i) for i in range(1, 121)]
        put(store, *many)
        ids = [m.memory_id for m in many]
        assert len(",".join(ids).encode()) > 4096
        assert [m.memory_id for m in store.get_many("acme", ids)] == ids
        store.reset()
    finally:
        store.close()


def test_lookup_columns_hold_keyed_hashes_never_a_key_or_a_tag(
    store: CassandraMemoryStore,
) -> None:
    """A memory's key, tags and content hash reach every lookup table (and so the
    tombstones a forget leaves there) only as keyed hashes; lookups still find them."""
    words = mem(1, key="shoe size", value="44").model_copy(
        update={"tags": ("marathon-runner",), "content_hash": "f00dcafe"}
    )
    put(store, words)
    assert store.query("acme", MemoryQuery(key="shoe size")) == [words]
    assert store.query("acme", MemoryQuery(tags=("marathon-runner",))) == [words]
    assert store.history("acme", "user:U1", "shoe size") == [words]
    with store.transaction() as tx:
        assert tx.current_for_key("acme", "user:U1", "shoe size") == words
        assert tx.find_by_hash("acme", "user:U1", "f00dcafe") == words
    seen: list[str] = []
    for table in ("memory_keys", "memory_key_heads", "memory_tags", "memory_hashes"):
        seen += [repr(row) for row in store._session.execute(f"SELECT * FROM {store.home}.{table}")]
    columns = "mkey, tags, chash"
    seen += [
        repr(row) for row in store._session.execute(f"SELECT {columns} FROM {store.home}.memories")
    ]
    seen += [
        repr(row)
        for row in store._session.execute(f"SELECT mkey, tags FROM {store.home}.memories_by_stream")
    ]
    assert len(seen) == 6  # a row in each
    for clear in ("shoe size", "marathon", "f00dcafe"):
        assert not [row for row in seen if clear in row], clear
    # the hashes are keyed: another tenant's key makes others
    assert store._blind("acme", "key", "shoe size") != store._blind("globex", "key", "shoe size")


def test_entity_tables_hold_text_values_as_keyed_hashes(store: CassandraMemoryStore) -> None:
    """A document's text entities (a party's name, a contract number) reach the entity
    tables only as keyed hashes; a lookup by value still finds them and returns the value,
    and numbers stay in clear for ranges."""
    record = DocumentRecord(
        "acme", "d1", "user:U1", "e1", "sha", "text/plain", 1, 1, "en", "2026-11-30T00:00:00"
    )
    found = (
        Entity("party_a", "text", "zebracorp", "Zebracorp Ltd.", 0, 14),
        Entity("contract_no", "text", "HT-77-QUOKKA", "HT-77-QUOKKA", 20, 32),
        Entity("penalty_rate", "percent", 0.07, "7%", 40, 42),
    )
    rows = entity_rows("acme", "d1", "user:U1", "m1", 0, found)
    with store.transaction() as tx:
        tx.apply([PutDocument(record, tuple(rows))])
    party = EntityFilter(("party_a",), ("zebracorp",), kind="text")
    assert [r.key for r in store.entity_rows("acme", party)] == ["zebracorp"]
    rate = EntityFilter(("penalty_rate",), None, 0.06, kind="percent")
    assert [r.low for r in store.entity_rows("acme", rate)] == [0.07]
    seen = [
        repr(row)
        for table in ("entities_by_key", "entities_by_field", "document_entities", "documents")
        for row in store._session.execute(f"SELECT * FROM {store.home}.{table}")
    ]
    assert len(seen) == 2 + 3 + 3 + 1
    for clear in ("zebracorp", "QUOKKA", "quokka"):
        assert not [row for row in seen if clear in row], clear
    assert [row for row in seen if "0.07" in row]  # the number, for ranges


def test_a_store_without_a_blinder_refuses_memories(store: CassandraMemoryStore) -> None:
    bare = CassandraMemoryStore(store._session, store.home, migrate_schema=False)
    with pytest.raises(RuntimeError, match="without a blinder"):
        put(bare, mem(1, key="size"))
    assert store.get("acme", mem(1).memory_id) is None


def test_timeouts_are_store_unavailable(
    store: CassandraMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cassandra import ReadTimeout

    def slow(*args: Any, **kwargs: Any) -> Any:
        raise ReadTimeout("replicas did not answer in time")

    monkeypatch.setattr(store._session, "execute", slow)
    with pytest.raises(Unavailable) as caught:
        store.get("acme", mem(1).memory_id)
    assert caught.value.code == "STORE_UNAVAILABLE"
    assert isinstance(caught.value.__cause__, ReadTimeout)


def test_memories_a_transaction_is_told_of_are_read_in_one_wave(
    store: CassandraMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    memories = [mem(n) for n in range(1, 41)]
    put(store, *memories)
    ids = [m.memory_id for m in memories]
    waves: list[int] = []
    real = store.get_many

    def counted(tenant: str, memory_ids: Sequence[str]) -> list[Memory]:
        waves.append(len(memory_ids))
        return real(tenant, memory_ids)

    monkeypatch.setattr(store, "get_many", counted)
    with store.transaction() as tx:
        tx.prefetch_memories("acme", [*ids, "no-such-memory"])
        assert waves == [41]
        found = [tx.get("acme", i) for i in ids]
        assert tx.get("acme", "no-such-memory") is None
        assert tx.get("globex", ids[0]) is None  # another tenant's read is its own
    assert waves == [41, 1]
    assert found == memories
    # without the hint, one read per memory (what the decay consumer paid per citation)
    waves.clear()
    with store.transaction() as tx:
        assert [tx.get("acme", i) for i in ids[:5]] == memories[:5]
    assert waves == [1, 1, 1, 1, 1]


def test_the_members_of_several_episodes_are_read_in_two_round_trips(
    store: CassandraMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`query_each` reads every episode's tag at once and all their turns' bodies at once,
    where one `query` per episode takes two round trips each."""
    turns = [mem(n).model_copy(update={"tags": (f"episode:e{n % 6}",)}) for n in range(1, 61)]
    put(store, *turns)
    queries = [MemoryQuery(stream="user:U1", tags=(f"episode:e{e}",), limit=500) for e in range(6)]
    waves: list[int] = []
    for method in ("_execute", "_concurrently"):
        real = getattr(store, method)

        def counted(*args: Any, _real: Any = real, **kw: Any) -> Any:
            waves.append(1)
            return _real(*args, **kw)

        monkeypatch.setattr(store, method, counted)
    together = store.query_each("acme", queries)
    assert len(waves) == 2
    assert [len(found) for found in together] == [10] * 6
    waves.clear()
    assert [store.query("acme", q) for q in queries] == together
    assert len(waves) == 12


def test_a_query_past_its_limit_among_several_reads_its_tag_once(
    store: CassandraMemoryStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    turns = [mem(n).model_copy(update={"tags": (f"episode:e{n % 2}",)}) for n in range(1, 21)]
    put(store, *turns)
    queries = [
        MemoryQuery(stream="user:U1", tags=("episode:e0",), limit=3),  # 10 members
        MemoryQuery(stream="user:U1", tags=("episode:e1",), limit=500),
    ]
    alone = [store.query("acme", q) for q in queries]
    names = statements_run(store, monkeypatch)
    assert store.query_each("acme", queries) == alone
    assert [len(found) for found in alone] == [3, 10]
    assert names.count("tag_ids") == 2


def test_admin_migrate_reports_the_versions_it_applied_to_a_fresh_keyspace(
    cassandra: tuple[Any, str, list[int]],
) -> None:
    """`mnemo admin migrate` on a keyspace that did not exist said `up to date`: the
    connection it opened had applied every version already, unreported."""
    import json

    from click.testing import CliRunner

    from mnemo.entrypoints.cli import cli

    session, _, shipped = cassandra
    keyspace = f"mnemo_migrate_{uuid.uuid4().hex[:10]}"
    env = {
        "MNEMO_MODE": "distributed",
        "MNEMO_CASSANDRA_HOSTS": ",".join(HOSTS),
        "MNEMO_CASSANDRA_PORT": str(PORT),
        "MNEMO_CASSANDRA_KEYSPACE": keyspace,
    }
    try:
        first = CliRunner(env=env).invoke(cli, ["--json", "admin", "migrate"])
        assert first.exit_code == 0, first.output
        assert json.loads(first.stdout) == {"keyspaces": {keyspace: shipped}}
        again = CliRunner(env=env).invoke(cli, ["admin", "migrate"])
        assert again.exit_code == 0, again.output
        assert again.stdout.strip() == f"{keyspace}: up to date"
    finally:
        session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=120)
