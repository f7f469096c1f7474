"""Fixtures shared by every test layer."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from tests.support import TEST_TENANTS, install_keys

from mnemo.adapters.clocks import FixedClock
from mnemo.bootstrap import Platform, build_embedded
from mnemo.settings import MnemoSettings

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(T0)


@pytest.fixture
def platform(tmp_path: Path, clock: FixedClock) -> Iterator[Platform]:
    """An embedded Mnemo on a fresh data dir, a fixed clock and the fast hashing embedder."""
    built = build_embedded(
        MnemoSettings(data_dir=tmp_path / "data", embedder="hashing", sqlite_synchronous="NORMAL"),
        clock=clock,
    )
    install_keys(built, *TEST_TENANTS)
    yield built
    built.close()
