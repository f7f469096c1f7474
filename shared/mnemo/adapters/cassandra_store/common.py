"""What every part of the Cassandra store shares: limits, the error translation, the
keyspace name rule."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from cassandra import OperationTimedOut, RequestExecutionException
from cassandra.cluster import NoHostAvailable
from cassandra.connection import ConnectionException

from mnemo.domain.errors import Unavailable

log = logging.getLogger("mnemo.adapters.cassandra_store")

MIGRATIONS_DIR = Path(__file__).resolve().parents[4] / "schemas" / "cql"
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
