"""Contract: a Clock returns timezone-aware UTC datetimes; FixedClock moves only when told."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from mnemo.adapters.clocks import FixedClock, SystemClock
from mnemo.ports import Clock


class ClockContract:
    @pytest.fixture
    def clock(self) -> Clock:
        raise NotImplementedError

    def test_now_is_aware_utc(self, clock: Clock) -> None:
        now = clock.now()
        assert now.tzinfo is not None
        assert now.utcoffset() == timedelta(0)

    def test_never_goes_backwards_on_its_own(self, clock: Clock) -> None:
        first = clock.now()
        assert clock.now() >= first


class TestSystemClock(ClockContract):
    @pytest.fixture
    def clock(self) -> Clock:
        return SystemClock()

    def test_close_to_wall_clock(self) -> None:
        delta = abs(SystemClock().now() - datetime.now(UTC))
        assert delta < timedelta(seconds=5)


class TestFixedClock(ClockContract):
    START = datetime(2025, 6, 1, 12, 0, tzinfo=UTC)

    @pytest.fixture
    def clock(self) -> Clock:
        return FixedClock(self.START)

    def test_stands_still(self) -> None:
        clock = FixedClock(self.START)
        assert clock.now() == self.START
        assert clock.now() == self.START

    def test_default_start_is_aware(self) -> None:
        assert FixedClock().now().tzinfo is not None

    def test_advance(self) -> None:
        clock = FixedClock(self.START)
        assert clock.advance(timedelta(hours=1, seconds=30)) == self.START + timedelta(
            hours=1, seconds=30
        )
        clock.advance(timedelta(days=2))
        assert clock.now() == self.START + timedelta(days=2, hours=1, seconds=30)

    def test_advance_rejects_negative(self) -> None:
        clock = FixedClock(self.START)
        with pytest.raises(ValueError, match="non-negative"):
            clock.advance(timedelta(seconds=-1))
        assert clock.now() == self.START

    def test_set(self) -> None:
        clock = FixedClock(self.START)
        earlier = self.START - timedelta(days=30)
        clock.set(earlier)
        assert clock.now() == earlier

    def test_other_offsets_become_utc(self) -> None:
        tokyo = datetime(2025, 6, 1, 21, 0, tzinfo=timezone(timedelta(hours=9)))
        clock = FixedClock(tokyo)
        assert clock.now() == self.START
        assert clock.now().tzinfo == UTC

    def test_rejects_naive(self) -> None:
        with pytest.raises(ValueError, match="naive"):
            FixedClock(datetime(2025, 1, 1))
        clock = FixedClock(self.START)
        with pytest.raises(ValueError, match="naive"):
            clock.set(datetime(2025, 1, 1))
        assert clock.now() == self.START
