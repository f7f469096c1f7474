"""Live tails in this gateway process: how many each tenant and each key hold open, and
the news that wakes them.

A waiting tail holds no worker thread: it awaits an asyncio event that `TailNews` sets when
the service says new events may have been appended (`Mnemo.listen`), so hundreds of idle
tails leave the thread pool to every other request. Each replica counts its own tails,
as it keeps its own rate buckets."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable

from mnemo.domain.errors import MnemoError

__all__ = ["TailLimiter", "TailNews", "TooManyTails"]


class TooManyTails(MnemoError):
    code = "TOO_MANY_TAILS"

    def __init__(self, kind: str, limit: int) -> None:
        super().__init__(
            f"this {kind} holds {limit} live tails open already, its limit; close one first",
            code="TOO_MANY_TAILS",
            extra={"limit": limit, "limited": kind, "retry_after": 1},
        )


class TailLimiter:
    """Open tails per tenant and per key. `acquire` takes a slot of both or neither (and
    raises TooManyTails); the function it returns gives them back, once however often it
    is called."""

    def __init__(self, per_tenant: int, per_key: int) -> None:
        self._limits = {"tenant": per_tenant, "key": per_key}
        self._open: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def acquire(self, tenant: str, key_id: str) -> Callable[[], None]:
        slots = (("tenant", tenant), ("key", f"{tenant}/{key_id}"))
        with self._lock:
            for slot in slots:
                if self._open.get(slot, 0) >= self._limits[slot[0]]:
                    raise TooManyTails(slot[0], self._limits[slot[0]])
            for slot in slots:
                self._open[slot] = self._open.get(slot, 0) + 1
        released = False

        def release() -> None:
            nonlocal released
            with self._lock:
                if released:
                    return
                released = True
                for slot in slots:
                    left = self._open.get(slot, 0) - 1
                    if left > 0:
                        self._open[slot] = left
                    else:
                        self._open.pop(slot, None)

        return release

    def open(self, kind: str, name: str) -> int:
        """How many tails a tenant (kind "tenant") or a key ("key", "<tenant>/<key id>")
        holds open now."""
        with self._lock:
            return self._open.get((kind, name), 0)


class TailNews:
    """Wakes the waiting tails of one event loop whenever the service reports news. The
    service calls `notify` from any thread; one wake-up is scheduled on the loop however
    many notifications arrive before it runs."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._waiting: set[asyncio.Event] = set()
        self._scheduled = False
        self._lock = threading.Lock()

    def subscribe(self) -> asyncio.Event:
        """An event set at the next news (call it inside the loop; `unsubscribe` after)."""
        loop = asyncio.get_running_loop()
        news = asyncio.Event()
        with self._lock:
            if self._loop is not loop:  # a new loop (a restarted server): the old is gone
                self._loop, self._waiting, self._scheduled = loop, set(), False
            self._waiting.add(news)
        return news

    def unsubscribe(self, news: asyncio.Event) -> None:
        with self._lock:
            self._waiting.discard(news)

    def notify(self) -> None:
        with self._lock:
            loop = self._loop
            if loop is None or self._scheduled or not self._waiting:
                return
            self._scheduled = True
        with contextlib.suppress(RuntimeError):  # the loop is closed: no one waits
            loop.call_soon_threadsafe(self._wake)

    def _wake(self) -> None:
        with self._lock:
            self._scheduled = False
            waiting = tuple(self._waiting)
        for news in waiting:
            news.set()
