"""Migrations: the schema files applied in order, each once, recorded with its checksum."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mnemo.adapters.cassandra_store.common import (
    _MIGRATION_FILE,
    MIGRATIONS_DIR,
    _translated,
    _valid_keyspace,
    log,
)

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


def pending_migrations(session: Any, keyspace: str, directory: Path | None = None) -> list[int]:
    """The versions of `directory`'s migrations (default schemas/cql) that `keyspace` has
    not recorded: all of them for a keyspace that does not exist or was never migrated.
    Reads only."""
    ks = _valid_keyspace(keyspace)
    folder = directory or MIGRATIONS_DIR
    versions = sorted(
        int(m.group(1))
        for path in folder.glob("*.cql")
        if (m := _MIGRATION_FILE.fullmatch(path.name))
    )
    if ks not in session.cluster.metadata.keyspaces:
        return versions
    tables = session.cluster.metadata.keyspaces[ks].tables
    if "schema_migrations" not in tables:
        return versions
    with _translated():
        applied = {
            int(row[0])
            for row in session.execute(session.prepare(_MIGRATIONS_READ.replace("{ks}", ks)))
        }
    return [v for v in versions if v not in applied]


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
