"""The read models on Apache Cassandra: the distributed twin of `sqlite_store`.

A package along the read-model ports: `schema` (migrations), `tables` (tables and
statements), `rows` and `transaction` (the writes a batch makes), `connection`, `commits`
(ProjectionStore), `reads` (the read ports), `operations` (StoreOperations).

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
    The documents' entity read model (tables `documents`, `documents_by_stream`,
    `document_entities`, `document_sections`, `entities_by_key`, `entities_by_field`) is
    `documents.py`'s: a filter reads one partition per field, and text values are keyed
    hashes there too.
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

from mnemo.adapters.cassandra_store.commits import _Commits
from mnemo.adapters.cassandra_store.common import MIGRATIONS_DIR
from mnemo.adapters.cassandra_store.documents import _Documents
from mnemo.adapters.cassandra_store.operations import _Operations
from mnemo.adapters.cassandra_store.reads import _Reads
from mnemo.adapters.cassandra_store.rows import write_batched
from mnemo.adapters.cassandra_store.schema import migrate, pending_migrations
from mnemo.ports import DocumentReads, MemoryStore

__all__ = [
    "MIGRATIONS_DIR",
    "CassandraMemoryStore",
    "migrate",
    "pending_migrations",
    "write_batched",
]


class CassandraMemoryStore(_Commits, _Reads, _Documents, _Operations, MemoryStore, DocumentReads):
    """The MemoryStore and DocumentReads ports over a Cassandra cluster (see the module
    docstring)."""
