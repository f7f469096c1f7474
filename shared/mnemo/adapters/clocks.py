"""Clocks: the wall clock for running systems, a settable one for tests and replays."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

from mnemo.ports import Clock

__all__ = ["FixedClock", "SystemClock"]


class SystemClock(Clock):
    """The system's wall clock, in UTC."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class FixedClock(Clock):
    """A clock that only moves when told to. Always returns aware UTC datetimes."""

    DEFAULT_START = datetime(2025, 1, 1, tzinfo=UTC)

    def __init__(self, start: datetime | None = None) -> None:
        self._lock = threading.Lock()
        self._now = _utc(self.DEFAULT_START if start is None else start)

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def set(self, dt: datetime) -> None:
        """Jump to an instant (backwards too). Naive datetimes raise ValueError."""
        instant = _utc(dt)
        with self._lock:
            self._now = instant

    def advance(self, delta: timedelta) -> datetime:
        """Move forward by `delta` (never backwards: use `set`); returns the new time."""
        if delta < timedelta(0):
            raise ValueError("FixedClock.advance needs a non-negative timedelta; use set()")
        with self._lock:
            self._now = self._now + delta
            return self._now

    def __repr__(self) -> str:
        return f"FixedClock({self._now.isoformat()})"


def _utc(dt: datetime) -> datetime:
    if dt.tzinfo is None or dt.tzinfo.utcoffset(dt) is None:
        raise ValueError(f"naive datetime {dt.isoformat()}: give a timezone-aware one")
    return dt.astimezone(UTC)
