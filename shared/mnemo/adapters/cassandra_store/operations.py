"""StoreOperations: whole-store counts, checksum and reset (admin, rebuild, tests)."""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterator

from mnemo.adapters.cassandra_store.common import _TRUNCATE_TIMEOUT, _translated, _valid_keyspace
from mnemo.adapters.cassandra_store.connection import _Connection
from mnemo.adapters.cassandra_store.rows import _plain
from mnemo.adapters.cassandra_store.tables import _CONTENT_TABLES, _COUNTED, _TABLES, _TENANT_TABLES
from mnemo.domain.memory import MemoryStatus


class _Operations(_Connection):
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
            self._committed.clear()
