"""The tables the store writes and the statements it prepares (per keyspace)."""

from __future__ import annotations

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
    # the documents' entity read model (schemas/cql/0010_documents.cql, `documents.py`)
    "documents": (
        ("tenant", "document_id"),
        (
            "stream",
            "event_id",
            "sha256",
            "media_type",
            "pages",
            "sections",
            "language",
            "ingested_at",
        ),
    ),
    "documents_by_stream": (("tenant", "stream", "document_id"), ()),
    "document_entities": (
        ("tenant", "document_id", "section", "ordinal"),
        (
            "stream",
            "memory_id",
            "field",
            "kind",
            "ekey",
            "low",
            "high",
            "span_start",
            "span_end",
            "document_level",
        ),
    ),
    "document_sections": (("tenant", "memory_id", "document_id"), ()),
    "entities_by_key": (
        ("tenant", "field", "ekey", "document_id", "section", "ordinal"),
        ("stream", "memory_id", "kind", "low", "high", "span_start", "span_end", "document_level"),
    ),
    "entities_by_field": (
        ("tenant", "field", "unit", "low", "document_id", "section", "ordinal"),
        ("stream", "memory_id", "kind", "ekey", "high", "span_start", "span_end", "document_level"),
    ),
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
    "documents": 1,
    "documents_by_stream": 2,
    "document_entities": 2,
    "document_sections": 2,
    "entities_by_key": 3,
    "entities_by_field": 3,
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
    "documents": "documents",
    "entities": "document_entities",
}

_FILTER_COLS = "memory_id, stream, mtype, scope, mkey, status, valid_until, verify_due, tags"

_QUERIES: dict[str, str] = {
    "mem_get": "SELECT body FROM {ks}.memories WHERE tenant = ? AND memory_id = ?",
    "mem_bodies": "SELECT memory_id, body FROM {ks}.memories WHERE tenant = ? AND memory_id IN ?",
    "mem_filters": "SELECT {cols} FROM {ks}.memories WHERE tenant = ? AND memory_id IN ?",
    "mem_scan": "SELECT {cols} FROM {ks}.memories WHERE tenant = ? AND memory_id > ?",
    "stream_scan": "SELECT {cols} FROM {ks}.memories_by_stream "
    "WHERE tenant = ? AND stream = ? AND memory_id > ?",
    # by the storage-attached index on the type (schemas/cql/0011_stream_type_index.cql)
    "stream_type_scan": "SELECT {cols} FROM {ks}.memories_by_stream "
    "WHERE tenant = ? AND stream = ? AND mtype = ? AND memory_id > ?",
    "stream_before": "SELECT {cols} FROM {ks}.memories_by_stream "
    "WHERE tenant = ? AND stream = ? AND memory_id < ? ORDER BY memory_id DESC",
    # the first page of the above, for a batch's lookups side by side (_BEFORE_PAGE rows)
    "stream_before_page": "SELECT {cols} FROM {ks}.memories_by_stream "
    "WHERE tenant = ? AND stream = ? AND memory_id < ? ORDER BY memory_id DESC LIMIT 50",
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
    # the latest claims of many owners in one request (the status's holders)
    "fence_claims": "SELECT owner, epoch, claimed_by FROM {ks}.partition_commits "
    "WHERE owner IN ? PER PARTITION LIMIT 1",
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
    # the documents' entity read model (see `documents.py`)
    "doc_get": "SELECT document_id, stream, event_id, sha256, media_type, pages, sections, "
    "language, ingested_at FROM {ks}.documents WHERE tenant = ? AND document_id = ?",
    "docs_get": "SELECT document_id, stream, event_id, sha256, media_type, pages, sections, "
    "language, ingested_at FROM {ks}.documents WHERE tenant = ? AND document_id IN ?",
    "doc_ids_of_stream": "SELECT document_id FROM {ks}.documents_by_stream "
    "WHERE tenant = ? AND stream = ?",
    "doc_ids_of_section": "SELECT document_id FROM {ks}.document_sections "
    "WHERE tenant = ? AND memory_id = ?",
    "doc_entities": "SELECT section, ordinal, stream, memory_id, field, kind, ekey, low, high, "
    "span_start, span_end, document_level FROM {ks}.document_entities "
    "WHERE tenant = ? AND document_id = ?",
    "ent_key": "SELECT document_id, section, ordinal, stream, memory_id, kind, low, high, "
    "span_start, span_end, document_level FROM {ks}.entities_by_key "
    "WHERE tenant = ? AND field = ? AND ekey = ?",
    "ent_range": "SELECT low, document_id, section, ordinal, stream, memory_id, kind, ekey, "
    "high, span_start, span_end, document_level FROM {ks}.entities_by_field "
    "WHERE tenant = ? AND field = ? AND unit = ? AND low >= ? AND low <= ?",
    "purge:documents": "SELECT document_id, stream FROM {ks}.documents WHERE tenant = ?",
}
_BEFORE_PAGE = 50
for _name in (
    "mem_filters",
    "mem_scan",
    "stream_scan",
    "stream_type_scan",
    "stream_before",
    "stream_before_page",
):
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
