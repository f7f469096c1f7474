"""Operations on a whole platform: rebuild every read model from the log, checksums."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable

from mnemo.bootstrap import Platform
from mnemo.domain.errors import ConflictError

__all__ = ["platform_checksum", "rebuild_read_models"]

_REBUILDING = threading.Lock()


def platform_checksum(platform: Platform) -> str:
    """One digest over the memory store's read models and the vector index's contents."""
    digest = hashlib.sha256(platform.store.checksum().encode())
    for memory_id in platform.index.ids():
        digest.update(memory_id.encode())
    return digest.hexdigest()


def rebuild_read_models(
    platform: Platform, progress: Callable[[int, int], None] | None = None
) -> str:
    """Drop every read model and replay the whole log into empty ones; returns the new
    checksum. Consumers are paused meanwhile; the log is not touched. One rebuild at a
    time in a process: a second one while the first runs is refused."""
    if not _REBUILDING.acquire(blocking=False):
        raise ConflictError("a rebuild is already running", code="REBUILD_RUNNING")
    try:
        runner = platform.runner
        was_running = runner.running
        runner.stop()
        try:
            platform.store.reset()
            platform.index.clear()
            head = platform.log.head()
            while runner.run_once():
                if progress is not None:
                    progress(min(platform.store.position("indexer"), head), head)
            return platform_checksum(platform)
        finally:
            if was_running:
                runner.start()
    finally:
        _REBUILDING.release()
