"""The read models on Apache Cassandra: the distributed twin of `sqlite_store`.

It passes the same MemoryStore contract as the embedded store. What differs, and why:

Schema (schemas/cql/, applied by `migrate`)
    Every tenant-scoped table has the tenant in its partition key; no query uses ALLOW
    FILTERING. `memories` is partitioned by tenant and clustered by memory id, so a point
    lookup, `get_many` (IN on the clustering key of one partition) and tenant-wide paging in
    id order each read one partition. Stream listings read `memories_by_stream` ((tenant,
    stream), memory_id), which holds only the filter columns; bodies then come from
    `memories` by id. Other lookups have their own tables: key versions (`memory_keys`),
    active content hashes (`memory_hashes`), tags (`memory_tags`), outcomes per event, timers
    by due hour (`timers_by_due` plus the `timer_buckets` list of hours), the audit chain of
    each stream in partitions of 10,000 links ((tenant, stream, n // 10000): links carry no
    time, so they cannot be cut by day) with each stream's last link in `audit_stream_heads`
    (tenant), templates, context records, usage counters (`memory_usage`: a row per memory
    and consumer partition, summed on read, so that partitions never share a row; ADR 0014),
    decay weights, and a timeline per memory. Filters a table cannot express (type, scope,
    status, validity, tags) are applied by the client while it pages through the one
    partition a query names.
    A memory's key, tags and content hash are stored as keyed hashes (the `Blinder` the
    store is given: HMAC under the tenant's search key in the vault) in every column and
    key that holds them (`memories`, `memories_by_stream`, `memory_keys`, `memory_key_heads`,
    `memory_tags`, `memory_hashes`); lookups and filters hash what they look for the same
    way, and only the body holds the words. So the tombstones a forget leaves, and the key
    heads that are never deleted, name no word. A store opened without a blinder (schema
    migrations) refuses to touch memories. Keyspaces written before keep clear values in
    those columns, which lookups no longer find: rebuild their read models once
    (`mnemo admin rebuild`).
    Trade-off: a tenant's `memories` (and `context_records`) partition grows with the
    tenant. That is fine up to a few hundred thousand memories per tenant; beyond that, cut
    the partition by the month encoded in the (UUIDv7) memory id.

Keyword search
    Not here: the vector index holds each memory's BM25 keyword vector next to its
    embedding and computes the statistics itself (docs/adr/0015). Keyspaces from before
    keep posting and term-statistics tables, which migration 7 drops.

Consistency levels
    Reads and writes use LOCAL_QUORUM: with a replication factor of 3, a read overlaps the
    write it follows within the data center (read-your-writes for the consumers and for the
    gateway's ?wait=). Which memory is current for a key (`memory_key_heads`) only moves by
    a lightweight transaction (UPDATE ... IF memory_id = <the one the batch saw>) with serial
    consistency SERIAL by default: a key has one current memory across data centers (pass
    LOCAL_SERIAL when there is one). Every other write is a plain write at the commit's
    timestamp; the heads table is never written without Paxos, so the two never mix.
    Schema changes wait for schema agreement (the driver's default); TRUNCATE (reset) needs
    every replica up.

Transactions: a sealed redo record, then idempotent writes, then the position
    Cassandra has no multi-row transactions. A transaction here is an overlay: `apply` only
    records the final state of each row it touches, and the lookups inside the transaction
    (`get`, `current_for_key`, `find_by_hash`, `stream_memories`, `last_audit`, `template`,
    `context_record`, `weight_of`) merge that overlay over the stored rows, so a consumer's
    batch sees what it has just decided. Nothing is written before commit; an exception
    inside the block discards the overlay. Commit:
      1. turns the overlay into row writes (upserts and deletes of index rows, diffed
         against the stored state; usage counters become absolute values computed from
         the stored row of the committing partition), all with ONE write timestamp (USING
         TIMESTAMP),
         strictly above every earlier commit of this process and of the consumer;
      2. moves the current memory of each key it changes, by compare-and-set (finding the
         target already there is this same batch repeated; finding another memory means a
         second writer, and ConflictError is raised before anything else is written);
      3. writes those row writes, compressed and chunked, into `commit_intents` under the
         consumer's name and seals it (a static-column write): the commit point. The
         pieces and the seal are rows of one partition, so a record up to 4 MiB is written
         with its seal in one unlogged batch, which Cassandra applies atomically; a larger
         one is sealed after its pieces;
      4. applies the writes (each one an idempotent upsert or delete at the fixed
         timestamp) in unlogged batches sent concurrently (`write_batched`), then the
         consumer's position together with the timer hours, then deletes the record.
    Applying is at-least-once and not atomic: other readers may see part of a batch for a
    moment. It is safe because (a) every write carries the commit's timestamp, so applying
    it twice, or late, lands the same cells and never overwrites a later commit, and
    (b) nobody decides on a half-applied batch: `position(consumer)` first finishes a sealed
    record it finds for that consumer (after letting a live writer finish: `settle_seconds`),
    so a restarted consumer re-reads the log only from a fully applied position. Without (b),
    a redelivered batch would run the handlers against its own partial writes (a memory
    already there looks like a duplicate, its supersede is skipped) and the read model would
    drift from a rebuild. With it, a crash anywhere either leaves no sealed record (the batch
    is redone from the log against untouched rows; the log's derived event ids drop the
    events it emits again) or a sealed one (it is rolled forward, never redone). Usage
    counters are why the stats are plain ints: a CQL counter incremented by a redone or
    rolled-forward batch would count twice; an absolute value written twice does not.
    Transactions without a position (the decay scan) are sealed under a one-off name; this
    process finishes its own failed ones before its next transaction, and `recover()` (run
    by the constructor) finishes any left older than `settle_seconds`.
    `position` reads the commit record and the position in one round trip; a commit looks
    for an unfinished record of its consumer again only when this process did not just see
    none there through `position`. `positions` (lag, `?wait=`) reads the position rows as
    they are: a position is written after its commit's rows, so it never runs ahead of what
    readers see, and such readers need not finish anyone's commit.
    Fenced commits (ADR 0014): a consumer's partition (`<consumer>/<partition>`) has one
    writer, enforced here. `claim(name)` raises the name's epoch by compare-and-set (a
    lightweight transaction on its `partition_commits` partition), and a commit made with
    `set_position(name, offset, epoch)` is sealed (step 3) by a conditional batch on that
    partition, IF epoch = the committer's: the record's chunks (clustered by the commit's
    timestamp), a deletion of earlier records' chunks, and the seal. Paxos orders every
    seal before or after every claim: a seal before the new owner's claim is finished by
    the `position()` it reads after claiming; a seal after it is refused (FencedOff) and
    nothing of the batch is written. A fenced record is never deleted: it is finished once
    the name's position carries its timestamp, which its own step 4 writes. Commits with a
    position and no epoch, and those without a position, keep `commit_intents`.
    This assumes clocks kept in sync (NTP), as Cassandra's last-write-wins itself does.

Timers
    A scan reads `timer_buckets` (the hours holding timers, up to now), then each hour's
    partition in order. A commit adds its hours to the list after its timer rows are
    written; a scan drops a past hour it found empty using a timestamp taken before it
    looked, so a timer written meanwhile keeps its hour listed.

Forgetting a tenant
    A PurgeTenant write deletes the tenant's rows of every purged read model (`_PURGED`):
    memories with their stream, key, hash and tag lookups, outcomes, timers (and their
    rows in the cross-tenant timer index), context records, usage counters, decay weights
    and timelines. Each is a delete by partition key through a prepared statement; the
    partitions are named from the stored
    rows (outcomes through `outcome_events`, the list of a tenant's event ids with
    outcomes). The deletes carry the commit's timestamp minus one: they shadow every
    earlier write, and what the same batch writes after the purge (the forget request's
    own outcome, a new memory) survives. A key's current memory moves to none by
    compare-and-set, like any other move. Templates and the audit chain stay. Deleted
    cells leave tombstones until compaction, after gc_grace_seconds (lowered to 3 hours on
    these tables by migration 0005; see docs/security.md).

Tenants and keyspaces
    One shared keyspace ("mnemo") by default. `keyspace_for(tenant)` may give a tenant a
    keyspace of its own (physical isolation): it is created (with the store's replication)
    and migrated on first use and listed in `keyspaces`. Cross-tenant state (positions,
    commit records, the timer scan index) stays in the home keyspace.

CQL is never built from values: statements are prepared once per keyspace, and only the
keyspace name (validated) and the replication map (validated) are formatted in.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import ssl
import threading
import time
import uuid
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from cassandra import ConsistencyLevel, OperationTimedOut, RequestExecutionException
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, NoHostAvailable
from cassandra.concurrent import execute_concurrent
from cassandra.connection import ConnectionException
from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy
from cassandra.protocol import ConfigurationException
from cassandra.query import BatchStatement, BatchType, PreparedStatement, tuple_factory

from mnemo.domain.context import ContextTemplate
from mnemo.domain.errors import ConflictError, FencedOff, InvalidInput, Unavailable
from mnemo.domain.memory import Memory, MemoryStatus, MemoryType
from mnemo.domain.projection import (
    AuditRecord,
    BumpStats,
    ContextRecord,
    DropTimer,
    DropToolchain,
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
    PutToolchain,
    PutWeight,
    SetStatus,
    TimelineEntry,
    Timer,
    Write,
)
from mnemo.domain.toolchain import ToolchainState
from mnemo.ports import Blinder, MemoryQuery, MemoryStore, StoreTransaction

__all__ = ["MIGRATIONS_DIR", "CassandraMemoryStore", "migrate", "write_batched"]

log = logging.getLogger(__name__)

MIGRATIONS_DIR = Path(__file__).resolve().parents[3] / "schemas" / "cql"
_MIGRATION_FILE = re.compile(r"^(\d{4})_[a-z0-9_]+\.cql$")
_KEYSPACE_RE = re.compile(r"^[a-z][a-z0-9_]{0,47}$")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_HOUR_US = 3_600_000_000
_AUDIT_CHUNK = 10_000
_IN_CHUNK = 100
_INTENT_CHUNK = 512 * 1024
_INTENT_ONE_BATCH = 4 * 1024 * 1024  # a commit record up to this size is sealed in one batch
_MAX_KEY_BYTES = 65_535
# Writes go in unlogged batches (see `write_batched`): all rows of one partition together,
# and, over several partitions with the same replicas, no more than Cassandra accepts
# without a warning (unlogged_batch_across_partitions_warn_threshold: 10 partitions,
# batch_size_warn_threshold: 5 KiB).
_BATCH_ROWS = 200
_BATCH_PARTITION_BYTES = 1_000_000
_BATCH_SPREAD = 10
_BATCH_SPREAD_BYTES = 4_000
_TRUNCATE_TIMEOUT = 120.0

# Driver errors that mean "the cluster cannot serve this now" (not a bug in the request).
_DRIVER_UNAVAILABLE: tuple[type[BaseException], ...] = (
    NoHostAvailable,
    OperationTimedOut,
    RequestExecutionException,  # Unavailable, ReadTimeout, WriteTimeout, Read/WriteFailure
    ConnectionException,
)

Row = tuple[Any, ...]
Mutation = list[Any]  # [keyspace, table, "put" | "del", [column values...]]


def _store_unavailable(exc: BaseException) -> Unavailable:
    return Unavailable(
        f"the memory store (Cassandra) is unavailable: {type(exc).__name__}",
        code="STORE_UNAVAILABLE",
    )


@contextmanager
def _translated() -> Iterator[None]:
    try:
        yield
    except _DRIVER_UNAVAILABLE as exc:
        raise _store_unavailable(exc) from exc


def _valid_keyspace(name: str) -> str:
    if not _KEYSPACE_RE.fullmatch(name):
        raise ValueError(f"{name!r} is not a keyspace name Mnemo uses ([a-z][a-z0-9_]{{0,47}})")
    return name


# ---- migrations ----------------------------------------------------------------------------


# Only identifiers are ever formatted into CQL: "{ks}" becomes a validated keyspace name.
_MIGRATIONS_READ = "SELECT version, checksum FROM {ks}.schema_migrations"
_MIGRATIONS_RECORD = (
    "INSERT INTO {ks}.schema_migrations (version, name, checksum, applied_at) VALUES (?, ?, ?, ?)"
)


def _statements(text: str) -> list[str]:
    lines = [line for line in text.splitlines() if not line.lstrip().startswith("--")]
    return [s.strip() for s in "\n".join(lines).split(";") if s.strip()]


_DDL_TIMEOUT = 120.0  # schema changes wait for agreement, slower than queries under load


def _relink_audit(session: Any, ks: str) -> None:
    """Version 4 keeps the audit chain per stream: the audit consumer reads the log again
    from its start (its positions dropped) and links every event into the new tables. The
    per-tenant tables of version 1 stay, unread, for comparison; drop them when done."""
    drop = session.prepare(f"DELETE FROM {ks}.positions WHERE consumer = ?")  # noqa: S608
    for row in session.execute(f"SELECT consumer FROM {ks}.positions"):  # noqa: S608
        consumer = str(row[0])
        if consumer == "audit" or consumer.startswith("audit/"):
            session.execute(drop, (consumer,))
    log.warning("%s: the audit consumer links the log again, one chain per stream", ks)


def _usage_per_partition(session: Any, ks: str) -> None:
    """Version 8 keeps usage counters per consumer partition: the counts so far move to
    the new table under the part '' (no partition), and every later count goes to the
    row of the partition that made it."""
    insert = session.prepare(
        f"INSERT INTO {ks}.memory_usage (tenant, memory_id, part, included, truncated, "  # noqa: S608
        "cited, corrected, last_used) VALUES (?, ?, '', ?, ?, ?, ?, ?)"
    )
    columns = "tenant, memory_id, included, truncated, cited, corrected, last_used"
    for row in session.execute(f"SELECT {columns} FROM {ks}.memory_stats"):  # noqa: S608
        session.execute(insert, tuple(row))


# steps beyond DDL that a version needs on a keyspace that already held data
_DATA_STEPS: dict[int, Callable[[Any, str], None]] = {
    4: _relink_audit,
    8: _usage_per_partition,
}


def migrate(session: Any, keyspace: str, directory: Path | None = None) -> list[int]:
    """Apply the versioned CQL files of `directory` (default schemas/cql) to a keyspace that
    exists, in version order, skipping the versions `schema_migrations` already records.

    Every statement is idempotent (IF NOT EXISTS), so a run interrupted between a statement
    and its version's record is simply repeated. Returns the versions applied by this call.
    Run it from one process at a time (a deploy step): concurrent schema changes can make a
    cluster disagree on its schema."""
    ks = _valid_keyspace(keyspace)
    folder = directory or MIGRATIONS_DIR
    files = sorted(
        (int(m.group(1)), path)
        for path in folder.glob("*.cql")
        if (m := _MIGRATION_FILE.fullmatch(path.name))
    )
    if not files:
        raise FileNotFoundError(f"no CQL migrations in {folder}")
    with _translated():
        session.execute(
            f"CREATE TABLE IF NOT EXISTS {ks}.schema_migrations (version int PRIMARY KEY, "
            "name text, checksum text, applied_at timestamp)",
            timeout=_DDL_TIMEOUT,
        )
        applied = {
            int(row[0]): str(row[1])
            for row in session.execute(session.prepare(_MIGRATIONS_READ.replace("{ks}", ks)))
        }
        record = session.prepare(_MIGRATIONS_RECORD.replace("{ks}", ks))
        done: list[int] = []
        for version, path in files:
            text = path.read_text(encoding="utf-8")
            digest = hashlib.sha256(text.encode()).hexdigest()
            if version in applied:
                if applied[version] != digest:
                    log.warning("migration %s changed after it was applied to %s", path.name, ks)
                continue
            for statement in _statements(text.replace("${keyspace}", ks)):
                session.execute(statement, timeout=_DDL_TIMEOUT)
            step = _DATA_STEPS.get(version)
            if step is not None and applied:  # a keyspace that already held data
                step(session, ks)
            session.execute(record, (version, path.name, digest, datetime.now(UTC)))
            done.append(version)
    return done


def _replication_cql(replication: Mapping[str, object]) -> str:
    """A keyspace replication map as CQL, from validated parts only."""
    strategy = str(replication.get("class", "SimpleStrategy")).rsplit(".", 1)[-1]
    if strategy not in ("SimpleStrategy", "NetworkTopologyStrategy"):
        raise ValueError(f"unsupported replication strategy {strategy!r}")
    parts = [f"'class': '{strategy}'"]
    for name, value in replication.items():
        if name == "class":
            continue
        if not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
            raise ValueError(f"invalid replication option {name!r}")
        factor = int(str(value))
        if not 0 < factor < 100:
            raise ValueError(f"invalid replication factor {value!r}")
        parts.append(f"'{name}': '{factor}'")
    return "{" + ", ".join(parts) + "}"


# ---- tables and statements ---------------------------------------------------------------------

# table -> (primary key columns, value columns). Row writes are generic over this.
_TABLES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "memories": (
        ("tenant", "memory_id"),
        (
            "stream",
            "mtype",
            "scope",
            "mkey",
            "status",
            "valid_until",
            "verify_due",
            "version",
            "chash",
            "tags",
            "body",
        ),
    ),
    "memories_by_stream": (
        ("tenant", "stream", "memory_id"),
        ("mtype", "scope", "mkey", "status", "valid_until", "verify_due", "tags"),
    ),
    "memory_keys": (("tenant", "stream", "mkey", "version", "memory_id"), ("status",)),
    "memory_hashes": (("tenant", "stream", "chash", "memory_id"), ()),
    "memory_tags": (("tenant", "tag", "memory_id"), ()),
    "outcomes": (
        ("tenant", "event_id", "idx"),
        ("kind", "memory_id", "version", "reason_code", "detail"),
    ),
    "timers": (("tenant", "memory_id", "kind"), ("due_us", "due_iso")),
    "audit_links": (
        ("tenant", "stream", "chunk", "n"),
        ("event_id", "event_type", "log_offset", "prev_hash", "hash"),
    ),
    "audit_stream_heads": (
        ("tenant", "stream"),
        ("n", "event_id", "event_type", "log_offset", "prev_hash", "hash"),
    ),
    "templates": (("tenant", "name", "version"), ("body",)),
    "context_records": (("tenant", "request_id"), ("body",)),
    # usage counters: one row per memory and consumer partition (`part`), summed on read
    "memory_usage": (
        ("tenant", "memory_id", "part"),
        ("included", "truncated", "cited", "corrected", "last_used"),
    ),
    "decay_weights": (("tenant", "memory_id"), ("weight", "trust", "base")),
    "timeline": (
        ("tenant", "memory_id", "log_offset", "what"),
        ("event_id", "event_type", "occurred_at", "detail"),
    ),
    "memory_key_heads": (("tenant", "stream", "mkey"), ("memory_id", "version")),
    # toolchain state (mnemo.domain.toolchain), and its ids by stream for a stream's forget
    "toolchains": (("tenant", "toolchain_id"), ("stream", "body")),
    "toolchains_by_stream": (("tenant", "stream", "toolchain_id"), ()),
    # cross-tenant, in the home keyspace only
    "timers_by_due": (("bucket", "due_us", "tenant", "memory_id", "kind"), ("due_iso",)),
    "timer_buckets": (("shard", "bucket"), ()),
    "positions": (("consumer",), ("log_offset", "ts")),
    "commit_intents": (("owner", "chunk"), ("txid", "data")),
    "partition_commits": (("owner", "ts", "chunk"), ("data",)),
    # the event ids of a tenant's outcomes, so that a purge can find their partitions
    "outcome_events": (("tenant", "event_id"), ()),
}
_HOME_TABLES = (
    "timers_by_due",
    "timer_buckets",
    "positions",
    "commit_intents",
    "partition_commits",
)
_TENANT_TABLES = tuple(t for t in _TABLES if t not in _HOME_TABLES)
# what a rebuild must reproduce: everything but bookkeeping (positions, commit records,
# key heads, the list of timer hours)
_BOOKKEEPING = (
    "positions",
    "commit_intents",
    "partition_commits",
    "memory_key_heads",
    "timer_buckets",
    "outcome_events",
)
# What a tenant purge deletes, and by how many leading key columns: the partition key (the
# whole partition goes in one tombstone), or the full key for the cross-tenant timer index
# (one row of a shared hour). Templates, the audit chain and key heads (moved to no memory
# by compare-and-set, never plainly written) are not purged.
_PURGED: dict[str, int] = {
    "memories": 1,
    "memories_by_stream": 2,
    "memory_keys": 3,
    "memory_hashes": 3,
    "memory_tags": 2,
    "outcomes": 2,
    "outcome_events": 1,
    "timers": 1,
    "timers_by_due": 5,
    "context_records": 1,
    "memory_usage": 1,
    "decay_weights": 1,
    "timeline": 2,
    "toolchains": 1,
    "toolchains_by_stream": 1,
}
_CONTENT_TABLES = tuple(t for t in _TABLES if t not in _BOOKKEEPING)
# the row counts SqliteMemoryStore.counts() reports, from the matching tables here
_COUNTED = {
    "memories": "memories",
    "memory_tags": "memory_tags",
    "outcomes": "outcomes",
    "timers": "timers",
    "audit_links": "audit_links",
    "positions": "positions",
    "templates": "templates",
    "context_records": "context_records",
    "memory_stats": "memory_usage",
    "decay_weights": "decay_weights",
    "timeline": "timeline",
    "toolchains": "toolchains",
}

_FILTER_COLS = "memory_id, stream, mtype, scope, mkey, status, valid_until, verify_due, tags"

_QUERIES: dict[str, str] = {
    "mem_get": "SELECT body FROM {ks}.memories WHERE tenant = ? AND memory_id = ?",
    "mem_bodies": "SELECT memory_id, body FROM {ks}.memories WHERE tenant = ? AND memory_id IN ?",
    "mem_filters": "SELECT {cols} FROM {ks}.memories WHERE tenant = ? AND memory_id IN ?",
    "mem_scan": "SELECT {cols} FROM {ks}.memories WHERE tenant = ? AND memory_id > ?",
    "stream_scan": "SELECT {cols} FROM {ks}.memories_by_stream "
    "WHERE tenant = ? AND stream = ? AND memory_id > ?",
    "stream_before": "SELECT {cols} FROM {ks}.memories_by_stream "
    "WHERE tenant = ? AND stream = ? AND memory_id < ? ORDER BY memory_id DESC",
    "key_rows": "SELECT version, memory_id, status FROM {ks}.memory_keys "
    "WHERE tenant = ? AND stream = ? AND mkey = ?",
    "hash_ids": "SELECT memory_id FROM {ks}.memory_hashes "
    "WHERE tenant = ? AND stream = ? AND chash = ?",
    "tag_ids": "SELECT memory_id FROM {ks}.memory_tags "
    "WHERE tenant = ? AND tag = ? AND memory_id > ?",
    "outcomes": "SELECT idx, kind, memory_id, version, reason_code, detail FROM {ks}.outcomes "
    "WHERE tenant = ? AND event_id = ?",
    "timers_of": "SELECT memory_id, kind, due_us, due_iso FROM {ks}.timers "
    "WHERE tenant = ? AND memory_id IN ?",
    "buckets": "SELECT bucket FROM {ks}.timer_buckets WHERE shard = 0 AND bucket <= ?",
    "due": "SELECT due_iso, tenant, memory_id, kind FROM {ks}.timers_by_due "
    "WHERE bucket = ? AND due_us <= ? LIMIT ?",
    "audit_from": "SELECT n, event_id, event_type, log_offset, prev_hash, hash "
    "FROM {ks}.audit_links WHERE tenant = ? AND stream = ? AND chunk = ? AND n > ? LIMIT ?",
    "audit_head": "SELECT n, event_id, event_type, log_offset, prev_hash, hash "
    "FROM {ks}.audit_stream_heads WHERE tenant = ? AND stream = ?",
    "audit_heads": "SELECT stream, n, event_id, event_type, log_offset, prev_hash, hash "
    "FROM {ks}.audit_stream_heads WHERE tenant = ?",
    "template": "SELECT body FROM {ks}.templates WHERE tenant = ? AND name = ? AND version = ?",
    "template_latest": "SELECT body FROM {ks}.templates WHERE tenant = ? AND name = ? "
    "ORDER BY name DESC, version DESC LIMIT 1",
    "templates": "SELECT body FROM {ks}.templates WHERE tenant = ?",
    "record": "SELECT body FROM {ks}.context_records WHERE tenant = ? AND request_id = ?",
    "records_before": "SELECT body FROM {ks}.context_records "
    "WHERE tenant = ? AND request_id < ? LIMIT ?",
    "stats_of": "SELECT memory_id, part, included, truncated, cited, corrected, last_used "
    "FROM {ks}.memory_usage WHERE tenant = ? AND memory_id IN ?",
    "weight": "SELECT weight, trust, base FROM {ks}.decay_weights "
    "WHERE tenant = ? AND memory_id = ?",
    "timeline": "SELECT log_offset, event_id, event_type, what, occurred_at, detail "
    "FROM {ks}.timeline WHERE tenant = ? AND memory_id = ? LIMIT ?",
    "position": "SELECT log_offset, ts FROM {ks}.positions WHERE consumer = ?",
    "toolchain": "SELECT body FROM {ks}.toolchains WHERE tenant = ? AND toolchain_id = ?",
    "toolchains_of_stream": "SELECT toolchain_id FROM {ks}.toolchains_by_stream "
    "WHERE tenant = ? AND stream = ?",
    "intent_seal": "UPDATE {ks}.commit_intents USING TIMESTAMP ? "
    "SET sealed = ?, ts = ?, chunks = ?, writer = ? WHERE owner = ?",
    "intent_head": "SELECT sealed, ts, chunks, writer FROM {ks}.commit_intents "
    "WHERE owner = ? LIMIT 1",
    "intent_chunks": "SELECT chunk, txid, data FROM {ks}.commit_intents WHERE owner = ?",
    "intent_drop": "DELETE FROM {ks}.commit_intents USING TIMESTAMP ? WHERE owner = ?",
    "intent_owners": "SELECT DISTINCT owner, sealed, ts FROM {ks}.commit_intents",
    # fenced commits (one writer per consumer partition): see `claim` and `_seal_fenced`
    "fence_head": "SELECT epoch, sealed, chunks, claimed_by FROM {ks}.partition_commits "
    "WHERE owner = ? LIMIT 1",
    "fence_claim": "UPDATE {ks}.partition_commits SET epoch = ?, claimed_by = ? "
    "WHERE owner = ? IF epoch = ?",
    "fence_seal": "UPDATE {ks}.partition_commits SET sealed = ?, chunks = ?, writer = ? "
    "WHERE owner = ? IF epoch = ?",
    "fence_chunk": "INSERT INTO {ks}.partition_commits (owner, ts, chunk, data) "
    "VALUES (?, ?, ?, ?)",
    "fence_prune": "DELETE FROM {ks}.partition_commits WHERE owner = ? AND ts < ?",
    "fence_chunks": "SELECT chunk, data FROM {ks}.partition_commits WHERE owner = ? AND ts = ?",
    "head_move": "UPDATE {ks}.memory_key_heads SET memory_id = ?, version = ? "
    "WHERE tenant = ? AND stream = ? AND mkey = ? IF memory_id = ?",
    "keyspace_add": "INSERT INTO {ks}.keyspaces (shard, name) VALUES (0, ?)",
    # what a tenant purge must find to name every partition it deletes
    "purge:memories": "SELECT memory_id, stream, mkey, chash, tags FROM {ks}.memories "
    "WHERE tenant = ?",
    "purge:timers": "SELECT memory_id, kind, due_us FROM {ks}.timers WHERE tenant = ?",
    "purge:events": "SELECT event_id FROM {ks}.outcome_events WHERE tenant = ?",
    "purge:stats": "SELECT memory_id FROM {ks}.memory_usage WHERE tenant = ?",
    "purge:weights": "SELECT memory_id FROM {ks}.decay_weights WHERE tenant = ?",
    "keyspace_list": "SELECT name FROM {ks}.keyspaces WHERE shard = 0",
}
for _name in ("mem_filters", "mem_scan", "stream_scan", "stream_before"):
    _QUERIES[_name] = _QUERIES[_name].replace("{cols}", _FILTER_COLS)
# the generic row statements of every table: the names come from _TABLES, values are bound
for _table, (_key, _values) in _TABLES.items():
    _cols = ", ".join((*_key, *_values))
    _marks = ", ".join("?" * (len(_key) + len(_values)))
    _where = " AND ".join(f"{c} = ?" for c in _key)
    _put = f"INSERT INTO {{ks}}.{_table} ({_cols}) VALUES ({_marks}) USING TIMESTAMP ?"  # noqa: S608
    _del = f"DELETE FROM {{ks}}.{_table} USING TIMESTAMP ? WHERE {_where}"  # noqa: S608
    _QUERIES[f"{_table}:put"] = _put
    _QUERIES[f"{_table}:del"] = _del
    _QUERIES[f"{_table}:scan"] = f"SELECT {_cols} FROM {{ks}}.{_table}"  # noqa: S608
    _QUERIES[f"{_table}:any"] = f"SELECT {_key[0]} FROM {{ks}}.{_table} LIMIT 1"  # noqa: S608
for _table, _width in _PURGED.items():
    _where = " AND ".join(f"{c} = ?" for c in _TABLES[_table][0][:_width])
    _QUERIES[f"{_table}:purge"] = f"DELETE FROM {{ks}}.{_table} USING TIMESTAMP ? WHERE {_where}"  # noqa: S608


# ---- row helpers ----------------------------------------------------------------------------


def _us(value: datetime) -> int:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    return (value - _EPOCH) // timedelta(microseconds=1)


def _us_or_none(value: datetime | None) -> int | None:
    return _us(value) if value is not None else None


RowSet = dict[tuple[str, str], dict[tuple[Any, ...], tuple[Any, ...]]]


def _memory_rows(memory: Memory, ks: str, blinder: Blinder) -> RowSet:
    """Every row a memory owns, by (keyspace, table): primary key -> values. The key, the
    tags and the content hash are stored as the blinder's keyed hashes in every column
    (lookups and filters hash what they look for the same way); only the body holds them
    in clear, and a forget overwrites the body."""
    t, mid = memory.tenant, memory.memory_id
    tags = sorted({blinder.blind(t, "tag", tag) for tag in memory.tags})
    mkey = blinder.blind(t, "key", memory.key) if memory.key is not None else None
    chash = blinder.blind(t, "hash", memory.content_hash)
    filters = (
        memory.type.value,
        memory.scope.value,
        mkey,
        memory.status.value,
        _us_or_none(memory.valid_until),
        _us_or_none(memory.verification_due_at),
    )
    rows: RowSet = {
        (ks, "memories"): {
            (t, mid): (
                memory.stream,
                *filters,
                memory.version,
                chash,
                tuple(tags),
                memory.model_dump_json(),
            )
        },
        (ks, "memories_by_stream"): {(t, memory.stream, mid): (*filters, tuple(tags))},
        (ks, "memory_tags"): {(t, tag, mid): () for tag in tags},
    }
    if mkey is not None:
        rows[(ks, "memory_keys")] = {
            (t, memory.stream, mkey, memory.version, mid): (memory.status.value,)
        }
    if memory.status is MemoryStatus.ACTIVE:
        rows[(ks, "memory_hashes")] = {(t, memory.stream, chash, mid): ()}
    return rows


def _timer_rows(timer: Timer, ks: str, home: str) -> RowSet:
    due = _us(timer.due_at)
    iso = timer.due_at.isoformat()
    return {
        (ks, "timers"): {(timer.tenant, timer.memory_id, timer.kind): (due, iso)},
        (home, "timers_by_due"): {
            (due // _HOUR_US, due, timer.tenant, timer.memory_id, timer.kind): (iso,)
        },
    }


def _diff(before: RowSet, after: RowSet, out: list[Mutation]) -> None:
    """Row writes that turn `before` into `after`: deletes of rows that went away, upserts
    of rows that are new or changed. Never both for one row (they share a timestamp, and a
    delete wins a tie)."""
    for place in sorted(set(before) | set(after)):
        old = before.get(place, {})
        new = after.get(place, {})
        ks, table = place
        for key in sorted(old.keys() - new.keys(), key=repr):
            out.append([ks, table, "del", list(key)])
        for key in sorted(new, key=repr):
            if old.get(key) != new[key]:
                out.append([ks, table, "put", [*key, *new[key]]])


def _context_record(body: str) -> ContextRecord:
    data = json.loads(body)
    for name in ("memory_ids", "truncated", "sections", "left_out"):
        data[name] = tuple(data.get(name, ()))
    data["credited"] = tuple((m, e) for m, e in data.get("credited", ()))
    return ContextRecord(**data)


def _audit(tenant: str, stream: str, row: Row) -> AuditRecord:
    n, event_id, event_type, offset, prev_hash, hash_ = row
    return AuditRecord(
        tenant,
        stream,
        int(n),
        str(event_id),
        str(event_type),
        int(offset),
        str(prev_hash),
        str(hash_),
    )


def _matches(query: MemoryQuery, row: Row) -> bool:
    """Whether a row of filter columns (_FILTER_COLS) passes the query's filters (a query
    whose key and tags were blinded like the rows', see `_blinded`)."""
    _, stream, mtype, scope, mkey, status, valid_until, verify_due, tags = row
    if query.stream is not None and stream != query.stream:
        return False
    if query.types and mtype not in {t.value for t in query.types}:
        return False
    if query.scopes and scope not in {s.value for s in query.scopes}:
        return False
    if query.key is not None and mkey != query.key:
        return False
    if query.statuses and status not in {s.value for s in query.statuses}:
        return False
    if query.live_at is not None and valid_until is not None and valid_until <= _us(query.live_at):
        return False
    if query.verification_due and verify_due is None:
        return False
    return not (query.tags and not set(query.tags) & set(tags or ()))


def _plain(value: Any) -> Any:
    """A column value with a stable repr (the driver returns sets as SortedSet)."""
    if value is None or isinstance(value, str | bytes | int | float | bool):
        return value
    return tuple(sorted(value))


def _chunks(items: Sequence[str], size: int = _IN_CHUNK) -> Iterator[list[str]]:
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


def _bound_size(bound: Any) -> int:
    return sum(len(v) for v in bound.values if isinstance(v, bytes | bytearray)) + 16


def _unlogged(statements: Sequence[Any], consistency: int) -> Any:
    if len(statements) == 1:
        return statements[0]
    batch = BatchStatement(BatchType.UNLOGGED, consistency_level=consistency)
    for statement in statements:
        batch.add(statement)
    return batch


def write_batched(session: Any, bound: Sequence[Any]) -> None:
    """Execute idempotent writes (bound statements) in few requests: unlogged batches.

    The rows of one partition (keyspace + partition key, whatever the table) go in one
    batch, which Cassandra applies as a single mutation. Writes to different partitions
    whose replicas are the same nodes share batches of up to `_BATCH_SPREAD` partitions
    and `_BATCH_SPREAD_BYTES`: the coordinator, a replica of them all, writes them as it
    would have written each alone. Nothing is atomic across the batches, which are sent
    concurrently; callers order their steps by calling this once per step."""
    if not bound:
        return
    partitions: dict[tuple[str, bytes], list[Any]] = {}
    unrouted: list[Any] = []
    for statement in bound:
        key = statement.routing_key
        if key is None:
            unrouted.append(statement)
        else:
            partitions.setdefault((statement.keyspace, key), []).append(statement)
    requests: list[Any] = [*unrouted]
    metadata = session.cluster.metadata
    spread: dict[tuple[Any, ...], list[list[Any]]] = {}
    for (keyspace, key), rows in partitions.items():
        if len(rows) > 1 or _bound_size(rows[0]) > _BATCH_SPREAD_BYTES:
            chunk: list[Any] = []
            size = 0
            for row in rows:
                row_size = _bound_size(row)
                full = len(chunk) >= _BATCH_ROWS or size + row_size > _BATCH_PARTITION_BYTES
                if chunk and full:
                    requests.append(_unlogged(chunk, ConsistencyLevel.LOCAL_QUORUM))
                    chunk, size = [], 0
                chunk.append(row)
                size += row_size
            requests.append(_unlogged(chunk, ConsistencyLevel.LOCAL_QUORUM))
            continue
        replicas = tuple(sorted(str(h.endpoint) for h in metadata.get_replicas(keyspace, key)))
        if not replicas:
            requests.append(rows[0])
            continue
        groups = spread.setdefault((keyspace, replicas), [[]])
        current = groups[-1]
        size = sum(_bound_size(r) for r in current)
        if current and (
            len(current) >= _BATCH_SPREAD or size + _bound_size(rows[0]) > _BATCH_SPREAD_BYTES
        ):
            current = []
            groups.append(current)
        current.append(rows[0])
    for groups in spread.values():
        requests.extend(_unlogged(g, ConsistencyLevel.LOCAL_QUORUM) for g in groups if g)
    with _translated():
        results = execute_concurrent(
            session, [(r, None) for r in requests], concurrency=32, raise_on_first_error=True
        )
        for ok, result in results:
            if not ok:
                raise result


class _NoBlinder(Blinder):
    """The blinder of a store opened without one (schema migrations, connectivity checks):
    it refuses, so that no memory row is ever written or looked up with a clear key."""

    def blind(self, tenant: str, kind: str, value: str) -> str:
        raise RuntimeError("this store was opened without a blinder: it cannot touch memories")


@dataclass(frozen=True, slots=True)
class HeadMove:
    """A key's active memory (the key blinded) changes from `old` (an id, None: none) to
    `new`."""

    tenant: str
    stream: str
    key: str
    old: str | None
    new: Memory | None


def _newest(memory: Memory) -> tuple[int, str]:
    return memory.version, memory.memory_id


def _current_holder(
    memories: Iterable[Memory | None], stream: str, has_key: Callable[[Memory], bool]
) -> Memory | None:
    """The memory current_for_key answers with: active, that key, the highest version."""
    live = [
        m
        for m in memories
        if m is not None and m.stream == stream and has_key(m) and m.status is MemoryStatus.ACTIVE
    ]
    return max(live, key=_newest) if live else None


class _Usage:
    """Usage counters being summed: over a memory's partitions, or a row plus a batch."""

    def __init__(self) -> None:
        self.counts = [0, 0, 0, 0]  # included, truncated, cited, corrected
        self.last = ""  # the latest use, ISO 8601 in UTC ('' for none)

    def add(self, values: Sequence[Any]) -> None:
        for i in range(4):
            self.counts[i] += int(values[i] or 0)
        self.last = max(self.last, str(values[4] or ""))

    @property
    def last_used(self) -> str | None:
        return self.last or None


class _WriteClock:
    """Write timestamps (microseconds) that only go up, within the process and past any
    commit timestamp this store has seen for a consumer."""

    def __init__(self) -> None:
        self._last = 0
        self._lock = threading.Lock()

    def next(self) -> int:
        with self._lock:
            self._last = max(time.time_ns() // 1000, self._last + 1)
            return self._last

    def observe(self, ts: int) -> None:
        with self._lock:
            self._last = max(self._last, ts)


# ---- the transaction overlay -------------------------------------------------------------------


class _Tx(StoreTransaction):
    def __init__(self, store: CassandraMemoryStore) -> None:
        self._store = store
        self.memories: dict[tuple[str, str], Memory] = {}
        self.stored: dict[tuple[str, str], Memory | None] = {}  # rows as they are in Cassandra
        self.outcomes: dict[tuple[str, str, int], Outcome] = {}
        self.timers: dict[tuple[str, str, str], Timer | None] = {}
        self.audit: dict[tuple[str, str, int], AuditRecord] = {}
        self.heads: dict[tuple[str, str], AuditRecord | None] = {}
        self.templates: dict[tuple[str, str, int], ContextTemplate] = {}
        self.records: dict[tuple[str, str], ContextRecord] = {}
        self.stats: dict[tuple[str, str], list[Any]] = {}
        self.weights: dict[tuple[str, str], tuple[float, float, float]] = {}
        self.timeline: dict[tuple[str, str, int, str], TimelineEntry] = {}
        # toolchain states written by this batch; None: dropped
        self.toolchains: dict[tuple[str, str], ToolchainState | None] = {}
        self.position: tuple[str, int] | None = None
        self.epoch: int | None = None  # the claim the commit must still hold (fenced)
        self.purged: set[str] = set()  # tenants purged by this batch: their stored rows go
        # memory ids of stored content-hash rows, read for the whole batch by prefetch_hashes:
        # a partition's streams have one writer (its fenced owner), so nobody else adds or
        # drops them while the batch runs, and the batch's own changes are in the overlay
        self.hash_rows: dict[tuple[str, str, str], list[str]] = {}

    # -- reads: the overlay over the stored rows

    def _load(self, tenant: str, memory_ids: Iterable[str]) -> None:
        missing = [m for m in dict.fromkeys(memory_ids) if (tenant, m) not in self.stored]
        if not missing:
            return
        found = {m.memory_id: m for m in self._store.get_many(tenant, missing)}
        for memory_id in missing:
            self.stored[(tenant, memory_id)] = found.get(memory_id)

    def _current(self, tenant: str, memory_ids: Iterable[str]) -> list[Memory]:
        ids = list(dict.fromkeys(memory_ids))
        self._load(tenant, [m for m in ids if (tenant, m) not in self.memories])
        out: list[Memory] = []
        for memory_id in ids:
            key = (tenant, memory_id)
            if key in self.memories:
                memory: Memory | None = self.memories[key]
            else:
                memory = None if tenant in self.purged else self.stored.get(key)
            if memory is not None:
                out.append(memory)
        return out

    def _pending(self, tenant: str) -> Iterator[Memory]:
        return (m for (t, _), m in self.memories.items() if t == tenant)

    def get(self, tenant: str, memory_id: str) -> Memory | None:
        found = self._current(tenant, [memory_id])
        return found[0] if found else None

    def current_for_key(self, tenant: str, stream: str, key: str) -> Memory | None:
        mkey = self._store._blind(tenant, "key", key)
        ids = [
            str(r[1])
            for r in self._store._rows(tenant, "key_rows", [tenant, stream, mkey])
            if r[2] == MemoryStatus.ACTIVE.value
        ]
        ids += [m.memory_id for m in self._pending(tenant) if m.stream == stream and m.key == key]
        return _current_holder(self._current(tenant, ids), stream, lambda m: m.key == key)

    def prefetch_hashes(self, keys: Sequence[tuple[str, str, str]]) -> None:
        missing = [k for k in dict.fromkeys(keys) if k not in self.hash_rows]
        if not missing:
            return
        blind = self._store._blind
        found = self._store._concurrently(
            [
                (self._store._keyspace(t), "hash_ids", [t, st, blind(t, "hash", h)])
                for t, st, h in missing
            ]
        )
        by_tenant: dict[str, list[str]] = {}
        for k, rows in zip(missing, found, strict=True):
            self.hash_rows[k] = [str(r[0]) for r in rows]
            by_tenant.setdefault(k[0], []).extend(self.hash_rows[k])
        for tenant, ids in by_tenant.items():
            self._load(tenant, ids)

    def find_by_hash(self, tenant: str, stream: str, content_hash: str) -> Memory | None:
        stored = self.hash_rows.get((tenant, stream, content_hash))
        ids = (
            list(stored)
            if stored is not None
            else [
                str(r[0])
                for r in self._store._rows(
                    tenant,
                    "hash_ids",
                    [tenant, stream, self._store._blind(tenant, "hash", content_hash)],
                )
            ]
        )
        ids += [
            m.memory_id
            for m in self._pending(tenant)
            if m.stream == stream and m.content_hash == content_hash
        ]
        live = [
            m
            for m in self._current(tenant, sorted(ids))
            if m.stream == stream
            and m.content_hash == content_hash
            and m.status is MemoryStatus.ACTIVE
        ]
        return live[0] if live else None

    def stream_memories(self, tenant: str, stream: str) -> list[Memory]:
        ids = [str(r[0]) for r in self._store._rows(tenant, "stream_scan", [tenant, stream, ""])]
        ids += [m.memory_id for m in self._pending(tenant) if m.stream == stream]
        found = [m for m in self._current(tenant, ids) if m.stream == stream]
        return sorted(found, key=lambda m: m.memory_id)

    def memory_before(
        self, tenant: str, stream: str, memory_id: str, type: MemoryType
    ) -> Memory | None:
        # the stream's rows newest first from just below `memory_id`, until one of the type
        ids = [
            m.memory_id
            for m in self._pending(tenant)
            if m.stream == stream and m.type is type and m.memory_id < memory_id
        ]
        ks = self._store._keyspace(tenant)
        for row in self._store._iterate(ks, "stream_before", [tenant, stream, memory_id], 50):
            if row[2] == type.value:
                ids.append(str(row[0]))
                break
        found = [
            m
            for m in self._current(tenant, ids)
            if m.stream == stream and m.type is type and m.memory_id < memory_id
        ]
        return max(found, key=lambda m: m.memory_id, default=None)

    def tenant_memories(self, tenant: str) -> list[Memory]:
        ids = (
            [] if tenant in self.purged else [m.memory_id for m in self._store.all_memories(tenant)]
        )
        ids += [m.memory_id for m in self._pending(tenant)]
        return sorted(self._current(tenant, ids), key=lambda m: m.memory_id)

    def _stored_head(self, tenant: str, stream: str) -> AuditRecord | None:
        if (tenant, stream) not in self.heads:
            row = self._store._one(tenant, "audit_head", [tenant, stream])
            head = _audit(tenant, stream, row) if row is not None else None
            self.heads[(tenant, stream)] = head
        return self.heads[(tenant, stream)]

    def last_audit(self, tenant: str, stream: str) -> AuditRecord | None:
        best = self._stored_head(tenant, stream)
        for (t, st, n), record in self.audit.items():
            if (t, st) == (tenant, stream) and (best is None or n >= best.n):
                best = record
        return best

    def template(self, tenant: str, name: str, version: int) -> ContextTemplate | None:
        pending = self.templates.get((tenant, name, version))
        return pending if pending is not None else self._store.template(tenant, name, version)

    def context_record(self, tenant: str, request_id: str) -> ContextRecord | None:
        pending = self.records.get((tenant, request_id))
        if pending is not None or tenant in self.purged:
            return pending
        return self._store.context_record(tenant, request_id)

    def weight_of(self, tenant: str, memory_id: str) -> tuple[float, float, float] | None:
        pending = self.weights.get((tenant, memory_id))
        if pending is not None or tenant in self.purged:
            return pending
        row = self._store._one(tenant, "weight", [tenant, memory_id])
        return (float(row[0]), float(row[1]), float(row[2])) if row is not None else None

    def _stored_toolchain(self, tenant: str, toolchain_id: str) -> ToolchainState | None:
        if tenant in self.purged:
            return None
        return self._store.toolchain(tenant, toolchain_id)

    def toolchain(self, tenant: str, toolchain_id: str) -> ToolchainState | None:
        if (tenant, toolchain_id) in self.toolchains:
            return self.toolchains[(tenant, toolchain_id)]
        return self._stored_toolchain(tenant, toolchain_id)

    def stream_toolchains(self, tenant: str, stream: str) -> list[str]:
        found: set[str] = set()
        if tenant not in self.purged:
            rows = self._store._rows(tenant, "toolchains_of_stream", [tenant, stream])
            found.update(str(r[0]) for r in rows)
        for (t, toolchain_id), pending in self.toolchains.items():
            if t != tenant:
                continue
            if pending is None:
                found.discard(toolchain_id)
            elif pending.stream == stream:
                found.add(toolchain_id)
        return sorted(found)

    # -- writes: recorded, applied at commit

    def apply(self, writes: Sequence[Write]) -> None:
        for write in writes:
            if isinstance(write, PutToolchain):
                self.toolchains[(write.state.tenant, write.state.toolchain_id)] = write.state
            elif isinstance(write, DropToolchain):
                self.toolchains[(write.tenant, write.toolchain_id)] = None
            elif isinstance(write, PutMemory):
                m = write.memory
                self.memories[(m.tenant, m.memory_id)] = m
            elif isinstance(write, SetStatus):
                current = self.get(write.tenant, write.memory_id)
                if current is None:
                    continue
                self.memories[(write.tenant, write.memory_id)] = write.applied_to(current)
            elif isinstance(write, PurgeTenant):
                # every read-model row of the tenant goes at commit (see _plan_purges); what
                # this batch recorded for it so far goes now, what it records next stays
                tenant = write.tenant
                self.purged.add(tenant)
                pending: tuple[dict[Any, Any], ...] = (
                    self.memories,
                    self.outcomes,
                    self.timers,
                    self.records,
                    self.stats,
                    self.weights,
                    self.timeline,
                    self.toolchains,
                )
                for table in pending:
                    for key in [k for k in table if k[0] == tenant]:
                        del table[key]
            elif isinstance(write, PutOutcome):
                o = write.outcome
                self.outcomes[(o.tenant, o.event_id, o.index)] = o
            elif isinstance(write, PutTimer):
                t = write.timer
                self.timers[(t.tenant, t.memory_id, t.kind)] = t
            elif isinstance(write, DropTimer):
                self.timers[(write.tenant, write.memory_id, write.kind)] = None
            elif isinstance(write, PutTemplate):
                tpl = write.template
                self.templates[(write.tenant, tpl.name, tpl.version)] = tpl
            elif isinstance(write, PutContextRecord):
                c = write.record
                self.records[(c.tenant, c.request_id)] = c
            elif isinstance(write, BumpStats):
                delta = self.stats.setdefault((write.tenant, write.memory_id), [0, 0, 0, 0, None])
                delta[0] += write.included
                delta[1] += write.truncated
                delta[2] += write.cited
                delta[3] += write.corrected
                at = write.at.astimezone(UTC).isoformat()
                delta[4] = max(delta[4] or "", at)
            elif isinstance(write, PutWeight):
                self.weights[(write.tenant, write.memory_id)] = (
                    write.weight,
                    write.trust,
                    write.base,
                )
            elif isinstance(write, PutTimeline):
                e = write.entry
                self.timeline[(e.tenant, e.memory_id, e.offset, e.what)] = e
            elif isinstance(write, PutAudit):
                r = write.record
                self.audit[(r.tenant, r.stream, r.n)] = r

    def set_position(self, consumer: str, offset: int, epoch: int | None = None) -> None:
        self.position = (consumer, offset)
        self.epoch = epoch

    # -- commit planning

    def plan(self) -> tuple[list[Mutation], list[Mutation], list[HeadMove]]:
        """(row writes at the commit timestamp, row writes after them at a fresh one,
        the moves of keys' active memory to make first)."""
        s = self._store
        muts: list[Mutation] = []
        post: list[Mutation] = []
        touched_keys: set[tuple[str, str, str]] = set()  # (tenant, stream, blinded key)
        for tenant in sorted(self.purged):
            self._plan_purge(tenant, muts, touched_keys)

        by_tenant: dict[str, list[str]] = {}
        for tenant, memory_id in self.memories:
            by_tenant.setdefault(tenant, []).append(memory_id)
        for tenant, ids in sorted(by_tenant.items()):
            ks = s._keyspace(tenant)
            self._load(tenant, ids)
            for memory_id in sorted(ids):
                after = self.memories[(tenant, memory_id)]
                before = None if tenant in self.purged else self.stored[(tenant, memory_id)]
                blinder = s._blinder
                _diff(
                    _memory_rows(before, ks, blinder) if before else {},
                    _memory_rows(after, ks, blinder),
                    muts,
                )
                for m in (before, after):
                    if m is not None and m.key is not None:
                        touched_keys.add((tenant, m.stream, s._blind(tenant, "key", m.key)))

        for o in (self.outcomes[k] for k in sorted(self.outcomes)):
            outcome = [o.tenant, o.event_id, o.index, o.kind.value, o.memory_id, o.version]
            outcome += [o.reason_code, o.detail]
            muts.append([s._keyspace(o.tenant), "outcomes", "put", outcome])
            muts.append([s._keyspace(o.tenant), "outcome_events", "put", [o.tenant, o.event_id]])

        self._plan_timers(muts, post)

        for tenant, stream, n in sorted(self.audit):
            r = self.audit[(tenant, stream, n)]
            link = [r.event_id, r.event_type, r.offset, r.prev_hash, r.hash]
            place = [tenant, stream, n // _AUDIT_CHUNK, n]
            muts.append([s._keyspace(tenant), "audit_links", "put", [*place, *link]])
        for tenant, stream in sorted({(t, st) for t, st, _ in self.audit}):
            top = self.last_audit(tenant, stream)
            if top is not None and top != self._stored_head(tenant, stream):
                head = [top.n, top.event_id, top.event_type, top.offset, top.prev_hash, top.hash]
                row = [tenant, stream, *head]
                muts.append([s._keyspace(tenant), "audit_stream_heads", "put", row])

        for (tenant, name, version), tpl in sorted(self.templates.items()):
            tpl_row = [tenant, name, version, tpl.model_dump_json()]
            muts.append([s._keyspace(tenant), "templates", "put", tpl_row])
        for (tenant, request_id), c in sorted(self.records.items()):
            body = json.dumps(asdict(c), sort_keys=True)
            muts.append([s._keyspace(tenant), "context_records", "put", [tenant, request_id, body]])

        self._plan_stats(muts)

        for (tenant, memory_id), (w, t, b) in sorted(self.weights.items()):
            muts.append([s._keyspace(tenant), "decay_weights", "put", [tenant, memory_id, w, t, b]])
        for key in sorted(self.timeline):
            e = self.timeline[key]
            entry = [e.tenant, e.memory_id, e.offset, e.what, e.event_id, e.event_type]
            muts.append(
                [s._keyspace(e.tenant), "timeline", "put", [*entry, e.occurred_at, e.detail]]
            )
        self._plan_toolchains(muts)
        return muts, post, self._head_moves(touched_keys)

    def _plan_purge(
        self, tenant: str, muts: list[Mutation], touched_keys: set[tuple[str, str, str]]
    ) -> None:
        """Deletes of every stored read-model row of a purged tenant, by partition key
        (op "purge": applied just below the commit's timestamp, so that what this batch
        writes after the purge survives it). The partitions are named from the stored rows:
        streams and the blinded keys, hashes and tags from the memories (no key is needed: a
        forgotten tenant's is destroyed before its purge), event ids from the outcome index,
        memory ids from every per-memory table. Keys with an active memory are moved to none
        by compare-and-set (see _head_moves)."""
        s = self._store
        ks = s._keyspace(tenant)

        def rows(name: str) -> list[Row]:
            return list(s._iterate(ks, name, [tenant], 5_000))

        streams: set[str] = set()
        partitions: set[tuple[str, tuple[Any, ...]]] = set()
        memory_ids: set[str] = set()
        for memory_id, stream, mkey, chash, tags in rows("purge:memories"):
            memory_ids.add(str(memory_id))
            streams.add(str(stream))
            if mkey is not None:
                partitions.add(("memory_keys", (tenant, stream, mkey)))
                touched_keys.add((tenant, str(stream), str(mkey)))
            if chash is not None:
                partitions.add(("memory_hashes", (tenant, stream, chash)))
            partitions.update(("memory_tags", (tenant, tag)) for tag in tags or ())
        for memory_id, kind, due_us in rows("purge:timers"):
            memory_ids.add(str(memory_id))
            timer = (int(due_us) // _HOUR_US, int(due_us), tenant, memory_id, kind)
            muts.append([s.home, "timers_by_due", "purge", list(timer)])
        for (event_id,) in rows("purge:events"):
            partitions.add(("outcomes", (tenant, event_id)))
        for name in ("purge:stats", "purge:weights"):
            memory_ids.update(str(r[0]) for r in rows(name))
        for stream in streams:
            partitions.add(("memories_by_stream", (tenant, stream)))
        partitions.update(("timeline", (tenant, memory_id)) for memory_id in memory_ids)
        for table, width in _PURGED.items():
            if width == 1:
                partitions.add((table, (tenant,)))
        for table, key in sorted(partitions, key=repr):
            muts.append([ks, table, "purge", list(key)])

    def _head_moves(self, keys: set[tuple[str, str, str]]) -> list[HeadMove]:
        """For each key the batch touched (blinded): its current memory (the active one of
        highest version, as current_for_key sees it) before the batch and after it. Stored
        memories hold the key when its rows say so (a purged tenant's key cannot hash them
        again); the batch's own are hashed."""
        moves: list[HeadMove] = []
        blind = self._store._blind

        def keyed(tenant: str, m: Memory, mkey: str) -> bool:
            return m.key is not None and blind(tenant, "key", m.key) == mkey

        for tenant, stream, mkey in sorted(keys):
            rows = self._store._rows(tenant, "key_rows", [tenant, stream, mkey])
            listed = {str(r[1]) for r in rows if r[2] == MemoryStatus.ACTIVE.value}
            ids = sorted(listed)
            ids += [
                mid
                for (t, mid), m in self.memories.items()
                if t == tenant and mid not in listed and keyed(tenant, m, mkey)
            ]
            self._load(tenant, ids)
            stored = [self.stored.get((tenant, mid)) for mid in ids]
            pending = [
                self.memories.get(
                    (tenant, mid), None if tenant in self.purged else self.stored.get((tenant, mid))
                )
                for mid in ids
            ]

            def was_keyed(m: Memory, held_ids: set[str] = listed) -> bool:
                return m.memory_id in held_ids

            def now_keyed(
                m: Memory, t: str = tenant, k: str = mkey, held_ids: set[str] = listed
            ) -> bool:
                if (t, m.memory_id) in self.memories:
                    return keyed(t, m, k)
                return m.memory_id in held_ids

            held = _current_holder(stored, stream, was_keyed)

            holder = _current_holder(pending, stream, now_keyed)
            held_id = held.memory_id if held is not None else None
            if held_id != (holder.memory_id if holder is not None else None):
                moves.append(HeadMove(tenant, stream, mkey, held_id, holder))
        return moves

    def _plan_timers(self, muts: list[Mutation], post: list[Mutation]) -> None:
        s = self._store
        by_tenant: dict[str, list[str]] = {}
        for tenant, memory_id, _ in self.timers:
            by_tenant.setdefault(tenant, []).append(memory_id)
        stored: dict[tuple[str, str, str], Timer] = {}
        for tenant, ids in by_tenant.items():
            if tenant in self.purged:
                continue  # its stored timers go with the purge
            for chunk in _chunks(sorted(set(ids))):
                for r in s._rows(tenant, "timers_of", [tenant, chunk]):
                    due = datetime.fromisoformat(str(r[3]))
                    stored[(tenant, str(r[0]), str(r[1]))] = Timer(
                        tenant, str(r[0]), due, str(r[1])
                    )
        buckets: set[int] = set()
        for key in sorted(self.timers):
            tenant = key[0]
            ks = s._keyspace(tenant)
            after = self.timers[key]
            before = stored.get(key)
            _diff(
                _timer_rows(before, ks, s.home) if before else {},
                _timer_rows(after, ks, s.home) if after else {},
                muts,
            )
            if after is not None:
                buckets.add(_us(after.due_at) // _HOUR_US)
        post.extend([s.home, "timer_buckets", "put", [0, b]] for b in sorted(buckets))

    def _plan_toolchains(self, muts: list[Mutation]) -> None:
        """A toolchain's row and its stream's index row; a dropped one loses both (its
        stream read from the stored row)."""
        s = self._store
        for (tenant, toolchain_id), state in sorted(self.toolchains.items()):
            ks = s._keyspace(tenant)
            if state is not None:
                row = [tenant, toolchain_id, state.stream, state.model_dump_json()]
                muts.append([ks, "toolchains", "put", row])
                index = [tenant, state.stream, toolchain_id]
                muts.append([ks, "toolchains_by_stream", "put", index])
                continue
            stored = self._stored_toolchain(tenant, toolchain_id)
            muts.append([ks, "toolchains", "del", [tenant, toolchain_id]])
            if stored is not None:
                index = [tenant, stored.stream, toolchain_id]
                muts.append([ks, "toolchains_by_stream", "del", index])

    def _plan_stats(self, muts: list[Mutation]) -> None:
        """Usage counters: this batch's additions go to the row of its own consumer
        partition (the position it commits), which no other process writes while the
        commit is fenced, so reading that row and writing back the sum loses nothing. A
        commit without a position counts under ''; such commits take the store's lock."""
        s = self._store
        part = self.position[0] if self.position is not None else ""
        by_tenant: dict[str, list[str]] = {}
        for tenant, memory_id in self.stats:
            by_tenant.setdefault(tenant, []).append(memory_id)
        for tenant, ids in sorted(by_tenant.items()):
            stored: dict[str, Row] = {}
            for chunk in _chunks(sorted(ids) if tenant not in self.purged else []):
                stored.update(
                    (str(r[0]), r[2:])
                    for r in s._rows(tenant, "stats_of", [tenant, chunk])
                    if r[1] == part
                )
            for memory_id in sorted(ids):
                delta = self.stats[(tenant, memory_id)]
                usage = _Usage()
                if memory_id in stored:
                    usage.add(stored[memory_id])
                usage.add((*delta[:4], delta[4]))
                row = [tenant, memory_id, part, *usage.counts, usage.last_used]
                muts.append([s._keyspace(tenant), "memory_usage", "put", row])


# ---- the store ---------------------------------------------------------------------------------


class CassandraMemoryStore(MemoryStore):
    """The MemoryStore port over a Cassandra cluster (see the module docstring)."""

    def __init__(
        self,
        session: Any,
        keyspace: str = "mnemo",
        *,
        keyspace_for: Callable[[str], str] | None = None,
        replication: Mapping[str, object] | None = None,
        create_keyspace: bool = False,
        migrate_schema: bool = True,
        serial_consistency: int = ConsistencyLevel.SERIAL,
        settle_seconds: float = 2.0,
        owns_cluster: bool = False,
        blinder: Blinder | None = None,
    ) -> None:
        self._session = session
        self._blinder: Blinder = blinder or _NoBlinder()
        self.home = _valid_keyspace(keyspace)
        self._keyspace_for = keyspace_for
        self._replication = dict(
            replication or {"class": "SimpleStrategy", "replication_factor": 1}
        )
        self._migrate = migrate_schema
        self._serial = serial_consistency
        self.settle_seconds = settle_seconds
        self._owns_cluster = owns_cluster
        self._writer = uuid.uuid4().hex
        self._clock = _WriteClock()
        self._lock = threading.RLock()  # commits that read-modify-write, recovery, reset
        self._meta = threading.Lock()
        self._prepared: dict[tuple[str, str], PreparedStatement] = {}
        self._ready: set[str] = set()
        self._inflight: set[str] = set()  # owners of commits this process is applying
        self._dirty: set[str] = set()  # owners of sealed commits this process failed to apply
        self._clean: set[str] = set()  # owners position() found without a commit record
        if create_keyspace:
            self._create_keyspace(self.home)
        if migrate_schema:
            migrate(session, self.home)
        self._ready.add(self.home)
        self.recover()

    @classmethod
    def connect(
        cls,
        hosts: Sequence[str] | str,
        port: int = 9042,
        keyspace: str = "mnemo",
        *,
        replication: Mapping[str, object] | None = None,
        username: str | None = None,
        password: str | None = None,
        local_dc: str | None = None,
        request_timeout: float = 10.0,
        keyspace_for: Callable[[str], str] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        **options: Any,
    ) -> CassandraMemoryStore:
        """Connect, create the keyspace if needed, apply the migrations, and finish any
        commit left half-applied. With `ssl_context`, every connection is TLS; when the
        context checks host names, each node's address must match its certificate."""
        contact = [h.strip() for h in hosts.split(",")] if isinstance(hosts, str) else list(hosts)
        profile = ExecutionProfile(
            load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=local_dc)),
            consistency_level=ConsistencyLevel.LOCAL_QUORUM,
            serial_consistency_level=options.get("serial_consistency", ConsistencyLevel.SERIAL),
            request_timeout=request_timeout,
            row_factory=tuple_factory,
        )
        auth = (
            PlainTextAuthProvider(username=username, password=password or "")
            if username is not None
            else None
        )
        cluster = Cluster(
            contact_points=contact,
            port=port,
            auth_provider=auth,
            execution_profiles={EXEC_PROFILE_DEFAULT: profile},
            ssl_context=ssl_context,
        )
        try:
            with _translated():
                session = cluster.connect()
            return cls(
                session,
                keyspace,
                keyspace_for=keyspace_for,
                replication=replication,
                create_keyspace=True,
                owns_cluster=True,
                **options,
            )
        except BaseException:
            cluster.shutdown()
            raise

    # -- plumbing

    def _create_keyspace(self, ks: str) -> None:
        cql = (
            f"CREATE KEYSPACE IF NOT EXISTS {_valid_keyspace(ks)} "
            f"WITH replication = {_replication_cql(self._replication)}"
        )
        try:
            with _translated():
                self._session.execute(cql, timeout=_DDL_TIMEOUT)
        except ConfigurationException as exc:
            # a replication map the cluster refuses (an unknown datacenter, a bad class):
            # a configuration error naming the setting, not a crash with the driver's trace
            raise InvalidInput(
                f"Cassandra refused the replication of keyspace {ks} "
                f"({_replication_cql(self._replication)}): {getattr(exc, 'message', '')}",
                code="CASSANDRA_REPLICATION_INVALID",
                field="cassandra_replication",
            ) from exc

    @property
    def session(self) -> Any:
        """The driver session (the event archive shares it)."""
        return self._session

    def keyspace_of(self, tenant: str) -> str:
        """The keyspace holding a tenant's rows, created and migrated on first use."""
        return self._keyspace(tenant)

    def _blind(self, tenant: str, kind: str, value: str) -> str:
        return self._blinder.blind(tenant, kind, value)

    def _blinded(self, tenant: str, query: MemoryQuery) -> MemoryQuery:
        """The query with its key and tags hashed as the stored filter columns are."""
        if query.key is None and not query.tags:
            return query
        return replace(
            query,
            key=self._blind(tenant, "key", query.key) if query.key is not None else None,
            tags=tuple(dict.fromkeys(self._blind(tenant, "tag", t) for t in query.tags)),
        )

    def _keyspace(self, tenant: str) -> str:
        if self._keyspace_for is None:
            return self.home
        ks = _valid_keyspace(self._keyspace_for(tenant))
        if ks not in self._ready:
            with self._meta:
                if ks not in self._ready:
                    self._create_keyspace(ks)
                    if self._migrate:
                        migrate(self._session, ks)
                    self._execute(self.home, "keyspace_add", [ks])
                    self._ready.add(ks)
        return ks

    def _keyspaces(self) -> list[str]:
        """The home keyspace, then every keyspace tenants have been given."""
        names = [str(r[0]) for r in self._execute(self.home, "keyspace_list", [])]
        return [self.home, *sorted(set(names) - {self.home})]

    def _prepare(self, ks: str, name: str) -> PreparedStatement:
        key = (ks, name)
        stmt = self._prepared.get(key)
        if stmt is None:
            with _translated():
                stmt = self._session.prepare(_QUERIES[name].replace("{ks}", ks))
            stmt.consistency_level = ConsistencyLevel.LOCAL_QUORUM
            if name in ("head_move", "fence_claim", "fence_seal"):
                stmt.serial_consistency_level = self._serial
            self._prepared[key] = stmt
        return stmt

    def _execute(
        self, ks: str, name: str, params: Sequence[Any], fetch_size: int | None = None
    ) -> Any:
        bound = self._prepare(ks, name).bind(list(params))
        if fetch_size is not None:
            bound.fetch_size = fetch_size
        with _translated():
            return self._session.execute(bound)

    def _rows(self, tenant: str, name: str, params: Sequence[Any]) -> list[Row]:
        with _translated():
            return [tuple(r) for r in self._execute(self._keyspace(tenant), name, params)]

    def _one(self, tenant: str, name: str, params: Sequence[Any]) -> Row | None:
        rows = self._rows(tenant, name, params)
        return rows[0] if rows else None

    def _iterate(
        self, ks: str, name: str, params: Sequence[Any], fetch_size: int = 1000
    ) -> Iterator[Row]:
        """Rows of a query, fetching further pages as the caller goes on."""
        with _translated():
            for row in self._execute(ks, name, params, fetch_size):
                yield tuple(row)

    def _concurrently(self, items: Sequence[tuple[str, str, Sequence[Any]]]) -> list[list[Row]]:
        statements = [(self._prepare(ks, name), list(params)) for ks, name, params in items]
        with _translated():
            results = execute_concurrent(self._session, statements, concurrency=64)
            return [[tuple(r) for r in result] for _, result in results]

    def _bind_all(self, mutations: Sequence[Mutation], ts: int) -> list[Any]:
        bound = []
        with _translated():
            for ks, table, op, values in mutations:
                if op == "put":
                    params = [*values, ts]
                elif op == "purge":  # just below the commit: its own later writes survive
                    params = [ts - 1, *values]
                else:
                    params = [ts, *values]
                bound.append(self._prepare(ks, f"{table}:{op}").bind(params))
        return bound

    def _write_all(self, mutations: Sequence[Mutation], ts: int) -> None:
        write_batched(self._session, self._bind_all(mutations, ts))

    # -- commit: seal, apply, position

    @contextmanager
    def transaction(self) -> Iterator[StoreTransaction]:
        with self._lock:
            for owner in sorted(self._dirty):
                self._roll_forward(owner)
        tx = _Tx(self)
        yield tx
        # Transactions of different consumers (the registrar's partitions) run and commit
        # side by side: each writes its own rows, moves keys by compare-and-set and seals
        # under its own owner, and adds usage to its own partition's counter rows. Usage
        # counted outside a fenced partition is read-modify-write on a row others share,
        # and a purge names partitions from stored rows: those commits take the lock, one
        # at a time.
        shared_rows = bool(tx.stats) and tx.epoch is None
        with self._lock if (shared_rows or tx.purged) else nullcontext():
            self._commit(tx)

    def _commit(self, tx: _Tx) -> None:
        mutations, post, moves = tx.plan()
        fenced = tx.position is not None and tx.epoch is not None
        if not mutations and not post and not fenced:
            if tx.position is not None:
                ts = self._clock.next()
                self._write_all([[self.home, "positions", "put", [*tx.position, ts]]], ts)
            return
        if (
            tx.position is not None
            and not self._take_clean(tx.position[0])
            and self._unfinished(tx.position[0])
        ):
            # this batch was read from a position whose commit was not finished: finish that
            # one, and let the consumer read its batch again from the position it reaches
            self._roll_forward(tx.position[0])
            raise Unavailable(
                f"an earlier commit of {tx.position[0]} was unfinished; it is now complete, "
                "read the batch again from position()",
                code="STORE_UNAVAILABLE",
            )
        for move in moves:
            self._move_head(move)
        owner = (
            tx.position[0] if tx.position is not None else f"tx:{self._writer}:{uuid.uuid4().hex}"
        )
        ts = self._clock.next()
        record: dict[str, Any] = {
            "ts": ts,
            "mutations": mutations,
            "post": post,
            "position": tx.position,
        }
        if fenced:
            assert tx.epoch is not None
            record["fenced"] = True
        self._inflight.add(owner)
        try:
            if fenced:
                assert tx.epoch is not None
                self._seal_fenced(owner, ts, record, tx.epoch)
            else:
                self._seal(owner, ts, record)
            self._apply(owner, record)
        except FencedOff:
            raise  # nothing was sealed: nothing to finish
        except BaseException:
            self._dirty.add(owner)  # a sealed record may exist: finish it before going on
            raise
        finally:
            self._inflight.discard(owner)
        self._dirty.discard(owner)

    def _move_head(self, move: HeadMove) -> None:
        """Compare-and-set which memory is active for a key (a lightweight transaction):
        from the one this batch saw to the one it decided on. Finding the target already
        there is a repeat of this same batch; finding any other memory means another writer
        decided meanwhile, and nothing of this batch is written."""
        new_id = move.new.memory_id if move.new is not None else None
        version = move.new.version if move.new is not None else None
        params = [new_id, version, move.tenant, move.stream, move.key, move.old]
        row = next(iter(self._execute(self._keyspace(move.tenant), "head_move", params)))
        if row[0] or row[-1] == new_id:
            return
        raise ConflictError(
            f"key {move.key} of {move.stream} is held by {row[-1]}, not {move.old}, as this "
            "batch assumed: is another writer running this consumer?",
            code="KEY_HELD_ELSEWHERE",
        )

    def _seal(self, owner: str, ts: int, record: dict[str, Any]) -> None:
        data = zlib.compress(json.dumps(record, separators=(",", ":")).encode(), 6)
        txid = uuid.uuid4().hex
        pieces = [data[i : i + _INTENT_CHUNK] for i in range(0, len(data), _INTENT_CHUNK)]
        chunks = [
            (self.home, "commit_intents:put", [owner, n, txid, piece, ts])
            for n, piece in enumerate(pieces)
        ]
        seal = [ts, txid, ts, len(pieces), self._writer, owner]
        if len(data) <= _INTENT_ONE_BATCH:
            # the pieces and the seal are rows of one partition (the owner): one unlogged
            # batch writes them atomically, the commit point in a single round trip
            batch = BatchStatement(
                BatchType.UNLOGGED, consistency_level=ConsistencyLevel.LOCAL_QUORUM
            )
            for ks, name, params in chunks:
                batch.add(self._prepare(ks, name).bind(params))
            batch.add(self._prepare(self.home, "intent_seal").bind(seal))
            with _translated():
                self._session.execute(batch)
            return
        self._concurrently(chunks)
        # the commit point: from here on the batch is rolled forward, never redone
        self._execute(self.home, "intent_seal", seal)

    def claim(self, consumer: str) -> int:
        """Raise the epoch of `consumer` by one, by compare-and-set (a lightweight
        transaction on its `partition_commits` partition), and return it. A seal is itself
        a lightweight transaction on that partition conditioned on the epoch, so Paxos
        orders every seal before or after this claim: one sealed before it is finished by
        the `position()` that follows, one after it is refused."""
        head = next(iter(self._execute(self.home, "fence_head", [consumer])), None)
        seen = int(head[0]) if head is not None and head[0] is not None else None
        for _ in range(32):
            epoch = (seen or 0) + 1
            row = next(
                iter(self._execute(self.home, "fence_claim", [epoch, self._writer, consumer, seen]))
            )
            if row[0]:
                log.info("claimed %s under epoch %d", consumer, epoch)
                return epoch
            seen = int(row[1]) if len(row) > 1 and row[1] is not None else None
        raise Unavailable(
            f"could not claim {consumer}: its epoch kept moving", code="STORE_UNAVAILABLE"
        )

    def _seal_fenced(self, owner: str, ts: int, record: dict[str, Any], epoch: int) -> None:
        """The commit point of a fenced commit: a conditional batch on the owner's
        partition writes the record's chunks (clustered by `ts`), drops the chunks of
        earlier records and seals this one, only if `epoch` is still the owner's latest
        claim. Records over 4 MiB write their chunks first, then the conditional seal."""
        data = zlib.compress(json.dumps(record, separators=(",", ":")).encode(), 6)
        pieces = [data[i : i + _INTENT_CHUNK] for i in range(0, len(data), _INTENT_CHUNK)]
        chunks = [
            (self.home, "fence_chunk", [owner, ts, n, piece]) for n, piece in enumerate(pieces)
        ]
        batch = BatchStatement(
            BatchType.UNLOGGED,
            consistency_level=ConsistencyLevel.LOCAL_QUORUM,
            serial_consistency_level=self._serial,
        )
        if len(data) <= _INTENT_ONE_BATCH:
            for ks, name, params in chunks:
                batch.add(self._prepare(ks, name).bind(params))
        else:
            self._concurrently(chunks)
        batch.add(self._prepare(self.home, "fence_prune").bind([owner, ts]))
        batch.add(
            self._prepare(self.home, "fence_seal").bind(
                [ts, len(pieces), self._writer, owner, epoch]
            )
        )
        with _translated():
            row = next(iter(self._session.execute(batch)))
        if not row[0]:
            held = next((v for v in row[1:] if isinstance(v, int)), None)
            log.warning(
                "commit of %s refused: it holds epoch %d, the partition was claimed under %s",
                owner,
                epoch,
                held,
            )
            raise FencedOff(
                f"{owner} was claimed by another process (epoch {held}); this commit holds "
                f"epoch {epoch} and is not written",
                extra={"consumer": owner, "epoch": epoch, "held": held},
            )

    def _fenced_unfinished(self, owner: str, head: Row | None, pos: Row | None) -> int | None:
        """The timestamp of a fenced record sealed but not yet finished (its position not
        written), from the rows `fence_head` and `position` read."""
        if head is None or head[1] is None:
            return None
        sealed = int(head[1])
        self._clock.observe(sealed)
        done = int(pos[1]) if pos is not None and pos[1] is not None else 0
        return sealed if done < sealed else None

    def _unfinished(self, owner: str) -> bool:
        """Whether `owner` has a sealed commit record, plain or fenced, not yet applied."""
        plain, head, pos = self._concurrently(
            [
                (self.home, "intent_head", [owner]),
                (self.home, "fence_head", [owner]),
                (self.home, "position", [owner]),
            ]
        )
        if plain and plain[0][0] is not None:
            return True
        return (
            self._fenced_unfinished(owner, head[0] if head else None, pos[0] if pos else None)
            is not None
        )

    def _roll_forward_fenced(self, owner: str) -> None:
        head, pos = self._concurrently(
            [(self.home, "fence_head", [owner]), (self.home, "position", [owner])]
        )
        sealed = self._fenced_unfinished(owner, head[0] if head else None, pos[0] if pos else None)
        if sealed is None:
            return
        count = int(head[0][2])
        pieces = {
            int(r[0]): bytes(r[1])
            for r in self._execute(self.home, "fence_chunks", [owner, sealed])
        }
        if any(n not in pieces for n in range(count)):
            raise Unavailable(
                f"the sealed commit record of {owner} is incomplete", code="STORE_UNAVAILABLE"
            )
        record = json.loads(zlib.decompress(b"".join(pieces[n] for n in range(count))))
        log.info("rolling forward the sealed commit of %s (ts %d)", owner, sealed)
        self._apply(owner, record)

    def _apply(self, owner: str, record: dict[str, Any]) -> None:
        ts = int(record["ts"])
        self._write_all(record["mutations"], ts)
        # after the rows: the timer hours that point at them, with a timestamp taken now
        # (see Timers), and the position; neither needs the other first
        after = self._bind_all(record["post"], self._clock.next()) if record["post"] else []
        if record["position"] is not None:
            consumer, offset = record["position"]
            after += self._bind_all([[self.home, "positions", "put", [consumer, offset, ts]]], ts)
        write_batched(self._session, after)
        if not record.get("fenced"):
            self._execute(self.home, "intent_drop", [ts, owner])
        # a fenced record stays: it is finished once the position carries its timestamp

    def _sealed(self, owner: str) -> tuple[str, int, int] | None:
        row = next(iter(self._execute(self.home, "intent_head", [owner])), None)
        if row is None or row[0] is None:
            return None
        return str(row[0]), int(row[1]), int(row[2])

    def _roll_forward(self, owner: str) -> None:
        """Apply a sealed commit record again (its writes are idempotent) and drop it."""
        head = self._sealed(owner)
        if head is None:
            self._roll_forward_fenced(owner)
            self._dirty.discard(owner)
            return
        txid, ts, count = head
        pieces = {
            int(r[0]): bytes(r[2])
            for r in self._execute(self.home, "intent_chunks", [owner])
            if r[1] == txid and r[0] is not None and int(r[0]) < count
        }
        if len(pieces) != count:
            raise Unavailable(
                f"the commit record of {owner} is incomplete: a second writer under that "
                "consumer name, or a reset while it committed?",
                code="STORE_UNAVAILABLE",
            )
        record = json.loads(zlib.decompress(b"".join(pieces[n] for n in range(count))))
        self._clock.observe(ts)
        log.info("rolling forward the sealed commit of %s (ts %d)", owner, ts)
        self._apply(owner, record)
        self._dirty.discard(owner)

    def _finish_pending(self, owner: str) -> None:
        """Before a consumer's position is trusted: finish its sealed commit, if any, after
        giving a live writer `settle_seconds` to finish it itself."""
        if owner in self._inflight:
            return
        if not self._unfinished(owner):
            self._dirty.discard(owner)
            return
        if owner not in self._dirty:
            deadline = time.monotonic() + self.settle_seconds
            while time.monotonic() < deadline:
                time.sleep(0.05)
                if not self._unfinished(owner):
                    return
        self._roll_forward(owner)

    def recover(self) -> int:
        """Finish every sealed commit older than `settle_seconds` (left by a crash). Returns
        how many were finished."""
        cutoff = (time.time() - self.settle_seconds) * 1_000_000
        done = 0
        with self._lock:
            for owner, sealed, ts in list(self._iterate(self.home, "intent_owners", [])):
                if sealed is not None and ts is not None and int(ts) <= cutoff:
                    self._roll_forward(str(owner))
                    done += 1
        return done

    def position(self, consumer: str) -> int:
        if consumer in self._inflight:
            rows = [tuple(r) for r in self._execute(self.home, "position", [consumer])]
        else:
            # the commit records and the position in one round trip; a sealed record is
            # finished first, and the position read again
            sealed, fence, rows = self._concurrently(
                [
                    (self.home, "intent_head", [consumer]),
                    (self.home, "fence_head", [consumer]),
                    (self.home, "position", [consumer]),
                ]
            )
            unfinished = self._fenced_unfinished(
                consumer, fence[0] if fence else None, rows[0] if rows else None
            )
            if (sealed and sealed[0][0] is not None) or unfinished is not None:
                self._finish_pending(consumer)
                rows = [tuple(r) for r in self._execute(self.home, "position", [consumer])]
            else:
                self._dirty.discard(consumer)
                self._clean.add(consumer)
        return self._position_of(rows[0] if rows else None)

    def _take_clean(self, owner: str) -> bool:
        """Whether `position(owner)` found no commit record since this process last
        committed under that name (a consumer's next commit then need not look again)."""
        if owner in self._clean:
            self._clean.discard(owner)
            return True
        return False

    def _position_of(self, row: Row | None) -> int:
        if row is None or row[0] is None:
            return 0
        if row[1] is not None:
            self._clock.observe(int(row[1]))
        return int(row[0])

    def positions(self, consumers: Sequence[str]) -> dict[str, int]:
        """The positions rows as they are: a position is written after the rows of its
        commit, so it never runs ahead of what readers can see."""
        names = list(dict.fromkeys(consumers))
        results = self._concurrently([(self.home, "position", [c]) for c in names])
        return {
            c: int(rows[0][0]) if rows and rows[0][0] is not None else 0
            for c, rows in zip(names, results, strict=True)
        }

    # -- memories

    def get(self, tenant: str, memory_id: str) -> Memory | None:
        row = self._one(tenant, "mem_get", [tenant, memory_id])
        return Memory.model_validate_json(row[0]) if row is not None else None

    def get_many(self, tenant: str, memory_ids: Sequence[str]) -> list[Memory]:
        ids = list(dict.fromkeys(memory_ids))
        if not ids:
            return []
        ks = self._keyspace(tenant)
        found: dict[str, Memory] = {}
        results = self._concurrently(
            [(ks, "mem_bodies", [tenant, chunk]) for chunk in _chunks(ids)]
        )
        for rows in results:
            for memory_id, body in rows:
                found[memory_id] = Memory.model_validate_json(body)
        return [found[i] for i in ids if i in found]

    def _filtered(
        self, tenant: str, ids: Sequence[str], query: MemoryQuery, limit: int
    ) -> list[str]:
        """The ids (kept in the given order) whose memories pass the query, up to limit."""
        out: list[str] = []
        for chunk in _chunks(ids):
            rows = {str(r[0]): r for r in self._rows(tenant, "mem_filters", [tenant, chunk])}
            for memory_id in chunk:
                row = rows.get(memory_id)
                if row is not None and _matches(query, row):
                    out.append(memory_id)
                    if len(out) >= limit:
                        return out
        return out

    def all_memories(self, tenant: str) -> list[Memory]:
        """Every memory of a tenant whatever its status (for forgetting the tenant)."""
        found: list[Memory] = []
        after: str | None = None
        while True:
            page = self.query(
                tenant, MemoryQuery(statuses=tuple(MemoryStatus), limit=1_000, after=after)
            )
            found += page
            if len(page) < 1_000:
                return found
            after = page[-1].memory_id

    def query(self, tenant: str, query: MemoryQuery) -> list[Memory]:
        if query.limit <= 0:
            return []
        after = query.after or ""
        ks = self._keyspace(tenant)
        query = self._blinded(tenant, query)
        if query.tags:
            results = self._concurrently(
                [(ks, "tag_ids", [tenant, tag, after]) for tag in dict.fromkeys(query.tags)]
            )
            ids = sorted({str(r[0]) for rows in results for r in rows})
            matched = self._filtered(tenant, ids, query, query.limit)
        elif query.stream is not None and query.key is not None:
            rows = self._rows(tenant, "key_rows", [tenant, query.stream, query.key])
            ids = sorted(str(r[1]) for r in rows if str(r[1]) > after)
            matched = self._filtered(tenant, ids, query, query.limit)
        else:
            if query.stream is not None:
                name, params = "stream_scan", [tenant, query.stream, after]
            else:
                name, params = "mem_scan", [tenant, after]
            matched = []
            page = min(max(query.limit * 2, 100), 5_000)
            for row in self._iterate(ks, name, params, page):
                if _matches(query, row):
                    matched.append(str(row[0]))
                    if len(matched) >= query.limit:
                        break
        return self.get_many(tenant, matched)

    def history(self, tenant: str, stream: str, key: str) -> list[Memory]:
        rows = self._rows(tenant, "key_rows", [tenant, stream, self._blind(tenant, "key", key)])
        return self.get_many(tenant, [str(r[1]) for r in rows])

    def outcome(self, tenant: str, event_id: str) -> list[Outcome]:
        rows = self._rows(tenant, "outcomes", [tenant, event_id])
        return [
            Outcome(tenant, event_id, int(r[0]), OutcomeKind(r[1]), r[2], r[3], r[4], r[5])
            for r in rows
        ]

    def due_timers(self, now: datetime, limit: int) -> list[Timer]:
        if limit <= 0:
            return []
        now_us = _us(now)
        current = now_us // _HOUR_US
        looked_at = self._clock.next()  # a past hour seen empty is dropped as of this instant
        out: list[Timer] = []
        for (bucket,) in list(self._iterate(self.home, "buckets", [current])):
            rows = list(self._iterate(self.home, "due", [bucket, now_us, limit - len(out)]))
            if not rows and int(bucket) < current:
                self._execute(self.home, "timer_buckets:del", [looked_at, 0, bucket])
            out.extend(
                Timer(str(r[1]), str(r[2]), datetime.fromisoformat(str(r[0])), str(r[3]))
                for r in rows
            )
            if len(out) >= limit:
                break
        return out[:limit]

    def audit_trail(self, tenant: str, stream: str, after_n: int, limit: int) -> list[AuditRecord]:
        head = self._one(tenant, "audit_head", [tenant, stream])
        if head is None or limit <= 0:
            return []
        last = int(head[0])
        out: list[AuditRecord] = []
        chunk = max(after_n + 1, 0) // _AUDIT_CHUNK
        while len(out) < limit and chunk <= last // _AUDIT_CHUNK:
            params = [tenant, stream, chunk, after_n, limit - len(out)]
            out.extend(_audit(tenant, stream, r) for r in self._rows(tenant, "audit_from", params))
            chunk += 1
        return out

    def audit_heads(self, tenant: str) -> list[AuditRecord]:
        rows = self._rows(tenant, "audit_heads", [tenant])
        return [_audit(tenant, str(r[0]), r[1:]) for r in rows]

    def template(
        self, tenant: str, name: str, version: int | None = None
    ) -> ContextTemplate | None:
        if version is None:
            row = self._one(tenant, "template_latest", [tenant, name])
        else:
            row = self._one(tenant, "template", [tenant, name, version])
        return ContextTemplate.model_validate_json(row[0]) if row is not None else None

    def templates(self, tenant: str) -> list[ContextTemplate]:
        return [
            ContextTemplate.model_validate_json(r[0])
            for r in self._rows(tenant, "templates", [tenant])
        ]

    def context_record(self, tenant: str, request_id: str) -> ContextRecord | None:
        row = self._one(tenant, "record", [tenant, request_id])
        return _context_record(row[0]) if row is not None else None

    def memory_stats(self, tenant: str, memory_ids: Sequence[str]) -> list[MemoryStats]:
        ids = sorted(set(memory_ids))
        totals: dict[str, _Usage] = {}
        for chunk in _chunks(ids):
            for r in self._rows(tenant, "stats_of", [tenant, chunk]):
                totals.setdefault(str(r[0]), _Usage()).add(r[2:])
        return [
            MemoryStats(
                tenant,
                memory_id,
                included=usage.counts[0],
                truncated=usage.counts[1],
                cited=usage.counts[2],
                corrected=usage.counts[3],
                last_used=datetime.fromisoformat(usage.last) if usage.last else None,
            )
            for memory_id, usage in sorted(totals.items())
        ]

    def context_records(
        self, tenant: str, limit: int, before: str | None = None
    ) -> list[ContextRecord]:
        if limit <= 0:
            return []
        rows = self._rows(tenant, "records_before", [tenant, before or "~", limit])
        return [_context_record(r[0]) for r in rows]

    def timeline(self, tenant: str, memory_id: str, limit: int = 500) -> list[TimelineEntry]:
        if limit <= 0:
            return []
        rows = self._rows(tenant, "timeline", [tenant, memory_id, limit])
        return [
            TimelineEntry(tenant, memory_id, int(r[0]), r[1], r[2], r[3], r[4], r[5]) for r in rows
        ]

    # -- whole-store operations (admin, rebuild, tests): full scans

    def toolchain(self, tenant: str, toolchain_id: str) -> ToolchainState | None:
        row = self._one(tenant, "toolchain", [tenant, toolchain_id])
        return ToolchainState.model_validate_json(str(row[0])) if row is not None else None

    def _tables(self) -> Iterator[tuple[str, str]]:
        for ks in self._keyspaces():
            for table in _TABLES if ks == self.home else _TENANT_TABLES:
                yield ks, table

    def counts(self) -> dict[str, int]:
        result = dict.fromkeys(_COUNTED, 0)
        named = {table: name for name, table in _COUNTED.items()}
        statuses = Counter[str]()
        used: set[tuple[str, str]] = set()  # memories with usage rows (one per partition)
        for ks, table in self._tables():
            if table not in named:
                continue
            for row in self._iterate(ks, f"{table}:scan", [], 5_000):
                if table == "positions" and row[1] is None:
                    continue
                if table == "memory_usage":
                    used.add((str(row[0]), str(row[1])))
                    continue
                result[named[table]] += 1
                if table == "memories":
                    statuses[str(row[6])] += 1
        result["memory_stats"] = len(used)
        for status in MemoryStatus:
            result[f"memories_{status.value}"] = statuses[status.value]
        return result

    def checksum(self) -> str:
        """SHA-256 over every read model's rows (not positions, commit records, version
        claims or the list of timer hours). Row digests are summed modulo 2**256 per table,
        so the result does not depend on the order a scan returns rows in, nor on how
        tenants are spread over keyspaces."""
        sums = dict.fromkeys(_CONTENT_TABLES, 0)
        rows = dict.fromkeys(_CONTENT_TABLES, 0)
        for ks, table in self._tables():
            if table not in sums:
                continue
            acc = 0
            for row in self._iterate(ks, f"{table}:scan", [], 5_000):
                values = tuple(_plain(v) for v in row)
                row_digest = hashlib.sha256(repr((table, values)).encode()).digest()
                acc += int.from_bytes(row_digest, "big")
                rows[table] += 1
            sums[table] = (sums[table] + acc) % (1 << 256)
        digest = hashlib.sha256()
        for table in _CONTENT_TABLES:
            digest.update(f"{table}:{rows[table]}:{sums[table]:064x}|".encode())
        return digest.hexdigest()

    def reset(self) -> None:
        """Empty every Mnemo table of every keyspace (schema_migrations and the keyspace
        list stay). Tables that hold nothing are skipped: TRUNCATE is slow."""
        with self._lock:
            tables = list(self._tables())
            probes = self._concurrently([(ks, f"{table}:any", []) for ks, table in tables])
            with _translated():
                pending = [
                    self._session.execute_async(
                        f"TRUNCATE {_valid_keyspace(ks)}.{table}", timeout=_TRUNCATE_TIMEOUT
                    )
                    for (ks, table), rows in zip(tables, probes, strict=True)
                    if rows
                ]
                for future in pending:
                    future.result()
            self._dirty.clear()

    def close(self) -> None:
        if self._owns_cluster:
            self._session.cluster.shutdown()
