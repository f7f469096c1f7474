"""A consumer opens (decrypts) only the events its handlers read, and only when they read a
sealed field: the decay consumer and the indexer leave a declaration sealed; the indexer
opens the registration it causes, and decay reads it sealed (it needs none of its sealed
fields)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mnemo.adapters.clocks import FixedClock
from mnemo.bootstrap import Platform, build_embedded
from mnemo.domain.events import Envelope, LoggedEvent
from mnemo.service.app import RequestContext
from mnemo.settings import MnemoSettings

CTX = RequestContext("acme", "tester")


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    settings = MnemoSettings(data_dir=tmp_path / "data", embedder="hashing")
    p = build_embedded(settings, clock=FixedClock(datetime(2026, 3, 1, tzinfo=UTC)))
    p.app.publish(
        CTX,
        [
            {
                "type": "MemoryDeclared",
                "schema_version": 1,
                "stream": "user:U1",
                "payload": {"memory": {"type": "fact", "scope": "user", "content": "likes tea"}},
            }
        ],
    )
    p.runner.drain()
    yield p
    p.close()


def _records(p: Platform) -> dict[str, LoggedEvent]:
    found = {r.envelope.type: r for r in p.runner.log.read(0, 100)}
    assert {"MemoryDeclared", "MemoryRegistered"} <= set(found)
    # both are sealed whole on a user stream: reading them means opening them
    assert all(r.envelope.encryption is not None for r in found.values())
    return found


def _counting(p: Platform) -> list[str]:
    opened: list[str] = []
    one, many = p.runner.opener, p.runner.open_many
    assert one is not None
    assert many is not None

    def open_one(e: Envelope) -> Envelope:
        opened.append(e.type)
        return one(e)

    def open_many(es: Sequence[Envelope]) -> list[Envelope]:
        opened.extend(e.type for e in es)
        return many(es)

    p.runner.opener, p.runner.open_many = open_one, open_many
    return opened


def test_the_decay_consumer_opens_only_what_it_reads(platform: Platform) -> None:
    records = _records(platform)
    opened = _counting(platform)
    with platform.store.transaction() as tx:
        declared = platform.runner.decide_decay(records["MemoryDeclared"], tx)
        registered = platform.runner.decide_decay(records["MemoryRegistered"], tx)
    # a registration is read for what it carries in clear (decay.READ_SEALED)
    assert opened == []
    assert not declared.writes
    assert not declared.events
    assert registered.writes  # the registration's weight (and timers) still written


def test_decay_decides_the_same_on_a_sealed_registration_as_on_the_opened_one(
    platform: Platform,
) -> None:
    """Every sealed field of the memory set (content, key, value, tags, timezone, its
    source): what decay writes for the registration left sealed equals what it writes for
    the same registration opened."""
    from mnemo.handlers import decay

    assert {"MemoryRegistered"} == decay.READ_SEALED
    platform.app.publish(
        CTX,
        [
            {
                "type": "MemoryDeclared",
                "schema_version": 1,
                "stream": "user:U2",
                "payload": {
                    "memory": {
                        "type": "preference",
                        "scope": "user",
                        "content": "budget is 300 euros",
                        "key": "budget",
                        "value": "300 euros",
                        "tags": ["money"],
                        "timezone": "Europe/Paris",
                        "valid_until": "2026-09-01T00:00:00+00:00",
                        "provenance": {"source_id": "crm", "source_location": "deal/42"},
                    }
                },
            }
        ],
    )
    platform.runner.drain()
    [sealed] = [
        r
        for r in platform.runner.log.read(0, 100)
        if r.envelope.type == "MemoryRegistered" and r.envelope.stream == "user:U2"
    ]
    assert sealed.envelope.encryption is not None
    opened = platform.runner.opened(sealed)
    assert opened.envelope.payload["memory"]["key"] == "budget"
    assert sealed.envelope.payload["memory"]["key"] != "budget"
    with platform.store.transaction() as tx:
        as_read = platform.runner.decide_decay(sealed, tx)
        from_opened = decay.handle(opened.envelope, tx, platform.runner.decay_policy)
    kinds = {type(w).__name__ for w in as_read.writes}
    assert kinds == {"PutWeight", "PutTimer"}
    assert as_read.writes == from_opened.writes
    assert as_read.events == from_opened.events


def test_the_indexer_opens_only_what_it_reads(platform: Platform) -> None:
    records = _records(platform)
    opened = _counting(platform)
    [memory_id] = platform.index.ids("acme")
    platform.index.delete("acme", [memory_id])
    platform.runner.index_events(
        [records["MemoryDeclared"].envelope, records["MemoryRegistered"].envelope]
    )
    assert opened == ["MemoryRegistered"]
    assert platform.index.ids("acme") == [memory_id]  # indexed again from what it opened


def test_what_decay_leaves_sealed_its_handlers_ignore(platform: Platform) -> None:
    """Every event type outside the decay consumer's table gives its handlers nothing to
    do, so leaving it unopened changes no decision."""
    from mnemo.domain.events import CATALOG
    from mnemo.handlers import decay, registry, toolchain

    reads = set(registry.consumer(decay.CONSUMER).handles())
    assert reads == set(decay.HANDLED | toolchain.TIMERS_HANDLED)
    declared = _records(platform)["MemoryDeclared"].envelope
    with platform.store.transaction() as tx:
        for event_type in sorted(set(CATALOG.current) - reads):
            event = declared.model_copy(update={"type": event_type})
            for decision in (decay.handle(event, tx), toolchain.timers(event, tx)):
                assert not decision.writes, event_type
                assert not decision.events, event_type


def test_the_decay_consumer_reads_the_memories_a_context_used_at_once(
    platform: Platform,
) -> None:
    from mnemo.domain.events import ContextAssembled
    from mnemo.ports import StoreTransaction
    from mnemo.service.app import ContextRequest

    platform.app.context(CTX, ContextRequest(subjects=("user:U1",), query="tea"))
    platform.runner.drain()
    record = next(
        r for r in platform.runner.log.read(0, 100) if r.envelope.type == ContextAssembled.TYPE
    )
    opened = platform.runner.opened(record).envelope
    used = ContextAssembled.model_validate(opened.payload).memory_ids
    assert used  # the context showed the memory

    calls: list[tuple[str, object]] = []

    class Recording:
        def __init__(self, inner: StoreTransaction) -> None:
            self.inner = inner

        def prefetch_memories(self, tenant: str, memory_ids: Sequence[str]) -> None:
            calls.append(("prefetch", (tenant, tuple(memory_ids))))
            self.inner.prefetch_memories(tenant, memory_ids)

        def get(self, tenant: str, memory_id: str) -> object:
            calls.append(("get", memory_id))
            return self.inner.get(tenant, memory_id)

        def __getattr__(self, name: str) -> object:
            return getattr(self.inner, name)

    with platform.store.transaction() as tx:
        decision = platform.runner.decide_decay(record, Recording(tx))  # type: ignore[arg-type]
    assert calls[0] == ("prefetch", ("acme", tuple(used)))
    assert all(kind == "get" for kind, _ in calls[1:])
    assert decision.writes  # the use moved the memory's archive timer


def test_the_memories_decay_reads_for_an_event_are_those_its_feedback_names(
    platform: Platform,
) -> None:
    from mnemo.handlers import decay

    declared = _records(platform)["MemoryDeclared"].envelope
    mid = "019c0000-0000-7000-8000-000000000001"

    def event(kind: str, payload: dict[str, object]) -> Envelope:
        return declared.model_copy(update={"type": kind, "schema_version": 1, "payload": payload})

    assert decay.memory_lookups(event("MemoryCited", {"memory_id": mid})) == (mid,)
    assert decay.memory_lookups(event("MemoryVerified", {"memory_id": mid})) == (mid,)
    relayed = {"feedback": "ContextAssembled", "memory_ids": [mid, mid[:-1] + "2"]}
    assert decay.memory_lookups(event("FeedbackRelayed", relayed)) == (mid, mid[:-1] + "2")
    assert decay.memory_lookups(declared) == ()  # not feedback: nothing to read
    assert decay.memory_lookups(event("MemoryCited", {"memory_id": 7})) == ()  # malformed
