"""The embedded consumers let tenants take turns (issue 16): a step shares its batch between
the tenants with waiting events, each tenant's events in log order, and what a step handled
ahead of the consumer's position is handled once, across a restart and a rewind too."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.support import TEST_TENANTS, audit_trails, install_keys, verify_trails

from mnemo.adapters.clocks import FixedClock
from mnemo.bootstrap import Platform, build_embedded, make_embedder, make_runner
from mnemo.domain.projection import OutcomeKind
from mnemo.service.app import RequestContext
from mnemo.service.runner import rewind
from mnemo.settings import MnemoSettings

BIG = RequestContext("acme", "tester")
SMALL = ("globex", "mallory", "crash", "default")


def declare(stream: str, n: int) -> dict[str, Any]:
    return {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": stream,
        "payload": {"memory": {"type": "fact", "content": f"fact number {n}"}},
    }


@pytest.fixture
def small_batches(tmp_path: Path, clock: FixedClock) -> Iterator[Platform]:
    """An embedded Mnemo whose consumers take 8 events a step; its runner is not started."""
    settings = MnemoSettings(
        data_dir=tmp_path / "data", embedder="hashing", sqlite_synchronous="NORMAL", batch_size=8
    )
    built = build_embedded(settings, clock=clock)
    install_keys(built, *TEST_TENANTS)
    yield built
    built.close()


def _publish(platform: Platform) -> dict[str, list[str]]:
    """40 events of acme's in two streams, then one event of each small tenant."""
    ids = {
        "acme": [
            a.event_id
            for a in platform.app.publish(
                BIG, [declare(f"user:A{n % 2}", n) for n in range(40)]
            ).accepted
        ]
    }
    for tenant in SMALL:
        [one] = platform.app.publish(
            RequestContext(tenant, "tester"), [declare("user:B", 0)]
        ).accepted
        ids[tenant] = [one.event_id]
    return ids


def _registered(platform: Platform, tenant: str, event_ids: list[str]) -> int:
    return sum(
        1
        for e in event_ids
        if any(o.kind is OutcomeKind.REGISTERED for o in platform.store.outcome(tenant, e))
    )


def _chains_hold(platform: Platform, tenant: str) -> None:
    """Every stream of the tenant has one link per event, in stream order."""
    trails = audit_trails(platform.store, tenant)
    events = {e.envelope.event_id: e.envelope for e in platform.log.read_tenant(tenant, 0, 10_000)}
    assert verify_trails(trails, events) == {}
    for stream, trail in trails.items():
        assert [link.n for link in trail] == list(
            range(1, platform.log.stream_head(tenant, stream) + 1)
        )


def test_every_tenant_gets_a_turn_and_a_restart_handles_nothing_twice(
    small_batches: Platform,
) -> None:
    platform = small_batches
    ids = _publish(platform)
    # 5 tenants, 8 events a step: each gets one (acme the room left), in turns
    platform.runner.run_once()
    served = {t: _registered(platform, t, ids[t]) for t in SMALL}
    assert _registered(platform, "acme", ids["acme"]) <= 8 - sum(served.values())
    assert sum(served.values()) == 4  # every small tenant at once: 4 of the 8 places
    # a new runner over the same store (a restart) goes on from the recorded positions
    again = make_runner(
        platform.settings,
        platform.log,
        platform.store,
        platform.index,
        make_embedder(platform.settings),
        platform.app.clock,
    )
    again.drain()
    for tenant, event_ids in ids.items():
        assert _registered(platform, tenant, event_ids) == len(event_ids), tenant
        _chains_hold(platform, tenant)
    assert platform.store.position("registrar") == platform.log.head()


def test_one_tenant_per_place_when_there_are_more_tenants_than_places(
    tmp_path: Path, clock: FixedClock
) -> None:
    settings = MnemoSettings(
        data_dir=tmp_path / "data", embedder="hashing", sqlite_synchronous="NORMAL", batch_size=2
    )
    platform = build_embedded(settings, clock=clock)
    try:
        install_keys(platform, *TEST_TENANTS)
        ids = _publish(platform)
        platform.runner.run_once()
        platform.runner.run_once()
        platform.runner.run_once()
        # one place each, the tenants in name order, each step starting after the tenant
        # served last: three steps of two places reach all five, whatever acme's backlog
        assert all(_registered(platform, t, ids[t]) == 1 for t in SMALL)
        assert _registered(platform, "acme", ids["acme"]) <= 2
    finally:
        platform.close()


def test_a_rewound_indexer_indexes_again_what_it_had_indexed_ahead(
    small_batches: Platform,
) -> None:
    platform = small_batches
    ids = _publish(platform)
    for _ in range(10):
        platform.runner.run_once()
        if platform.index.ids("globex"):
            break
    [outcome] = platform.store.outcome("globex", ids["globex"][0])
    assert platform.index.ids("globex") == [outcome.memory_id]
    assert len(platform.index.ids("acme")) < 40  # globex's was indexed ahead of acme's
    platform.index.clear()
    with platform.store.transaction() as tx:
        rewind(tx, platform.log, "indexer")
    platform.runner.drain()
    assert platform.index.ids("globex") == [outcome.memory_id]
    assert len(platform.index.ids("acme")) == 40
