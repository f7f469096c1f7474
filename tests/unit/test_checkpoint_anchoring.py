"""The audit consumer anchors each stored checkpoint outside the store: an anchor it could
not write is written at a later tick, the checkpoints in between first; a store rolled
back and signed again does not move the anchor, and the consumer says so."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.unit.test_audit import chain, events

from mnemo.adapters.clocks import FixedClock
from mnemo.adapters.local_signer import LocalFileSigner
from mnemo.adapters.sqlite_anchors import SqliteCheckpointAnchors
from mnemo.adapters.sqlite_checkpoints import SqliteAuditCheckpoints
from mnemo.domain.checkpoint import Checkpoint, Signature, checkpoint_digest
from mnemo.domain.errors import Unavailable
from mnemo.domain.projection import AuditRecord
from mnemo.ports import CheckpointAnchors
from mnemo.service import checkpoints as checkpointing
from mnemo.service.checkpoints import AuditCheckpointer

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


class SwitchableAnchors(CheckpointAnchors):
    """Real anchors that can be switched off."""

    def __init__(self, inner: CheckpointAnchors) -> None:
        self.inner = inner
        self.name = inner.name
        self.down = False

    def advance(self, checkpoint: Checkpoint) -> bool:
        if self.down:
            raise Unavailable("vault down", code="VAULT_UNAVAILABLE")
        return self.inner.advance(checkpoint)

    def of_tenant(self, tenant: str) -> list[Checkpoint]:
        return self.inner.of_tenant(tenant)


@pytest.fixture(autouse=True)
def _no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpointing, "RETRY_SECONDS", 0.0)


def checkpointer(
    tmp_path: Path,
    anchors: CheckpointAnchors | None,
    *,
    signer: LocalFileSigner | None = None,
    clock: FixedClock | None = None,
    **limits: Any,
) -> AuditCheckpointer:
    """A checkpointer over files in `tmp_path`: every 2 links or 600 s, batches not signed
    at their end, unless `limits` say otherwise."""
    chosen: dict[str, Any] = {"every": 2, "seconds": 600, "each_batch": False, **limits}
    return AuditCheckpointer(
        signer or LocalFileSigner(tmp_path / "keys" / "audit-signing.json"),
        SqliteAuditCheckpoints(tmp_path / "checkpoints.sqlite3", "NORMAL"),
        clock or FixedClock(T0),
        anchors=anchors,
        **chosen,
    )


def commit(c: AuditCheckpointer, record: AuditRecord) -> None:
    """One link written and its batch committed: only then is a checkpoint due."""
    c.observe(record)
    c.batch_committed()


def stored(c: AuditCheckpointer) -> list[Checkpoint]:
    return c.checkpoints.of_tenant("acme")


def test_a_missed_anchor_is_written_later_through_the_checkpoints_between(
    tmp_path: Path,
) -> None:
    anchors = SwitchableAnchors(SqliteCheckpointAnchors(tmp_path / "anchors.sqlite3", "NORMAL"))
    c = checkpointer(tmp_path, anchors)
    records = chain(events(6))
    for r in records[:2]:
        commit(c, r)
    assert anchors.of_tenant("acme") == stored(c)  # checkpoint 1, anchored at once
    anchors.down = True
    for r in records[2:]:
        commit(c, r)
    assert [cp.index for cp in stored(c)] == [1, 2, 3]  # signed and stored all the same
    assert anchors.of_tenant("acme") == stored(c)[:1]
    anchors.down = False
    c.tick()
    assert anchors.of_tenant("acme") == stored(c)[2:]
    assert c.anchored == 3  # 1, then 2 and 3 in order


def test_a_store_rolled_back_and_signed_again_does_not_move_the_anchor(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    anchors = SqliteCheckpointAnchors(tmp_path / "anchors.sqlite3", "NORMAL")
    first = checkpointer(tmp_path, anchors)
    evs = events(8)
    for r in chain(evs[:6]):
        commit(first, r)
    [anchor] = anchors.of_tenant("acme")
    assert anchor.index == 3
    # the store taken back to checkpoint 1 (link 2), then other events after it
    first.checkpoints._fetch("DELETE FROM audit_checkpoints WHERE idx > 1", ())  # type: ignore[attr-defined]
    forked = evs[:2] + [e.model_copy(update={"payload": {"text": "other"}}) for e in evs[2:]]
    again = checkpointer(tmp_path, anchors)  # a fresh audit consumer
    with caplog.at_level(logging.ERROR, "mnemo.audit"):
        for r in chain(forked):
            commit(again, r)
        again.tick()
    assert [cp.index for cp in stored(again)] == [1, 2, 3, 4]
    assert stored(again)[2] != anchor
    assert anchors.of_tenant("acme") == [anchor]
    assert "AUDIT_CHECKPOINT_ROLLBACK" in caplog.text


@pytest.mark.parametrize("each_batch", [True, False])
def test_a_committed_batch_signs_the_heads_it_left_unsigned(
    tmp_path: Path, each_batch: bool
) -> None:
    """Neither limit is reached (every 1,000 links, 600 s): only the end of the batch signs,
    and only when each batch is to be signed."""
    anchors = SqliteCheckpointAnchors(tmp_path / "anchors.sqlite3", "NORMAL")
    c = checkpointer(tmp_path, anchors, every=1_000, each_batch=each_batch)
    records = chain(events(5))
    for r in records[:3]:
        c.observe(r)
    assert stored(c) == []
    assert c.batch_committed() == (1 if each_batch else 0)
    assert [(cp.index, cp.n, cp.hash) for cp in stored(c)] == (
        [(1, records[2].n, records[2].hash)] if each_batch else []
    )
    assert c.batch_committed() == 0  # nothing new since
    for r in records[3:]:
        c.observe(r)
    c.batch_committed()
    heads = [(cp.n, cp.hash) for cp in stored(c)][-1:]
    assert heads == ([(records[-1].n, records[-1].hash)] if each_batch else [])
    assert anchors.of_tenant("acme") == stored(c)[-1:]


def test_a_busy_stream_is_signed_at_most_once_per_batch_seconds(tmp_path: Path) -> None:
    """The bound on what signing every batch costs: a batch within `batch_seconds` of the
    stream's last checkpoint leaves its head pending; a later batch, or the idle tick, signs
    it once that checkpoint is old enough."""
    clock = FixedClock(T0)
    c = checkpointer(tmp_path, None, clock=clock, every=1_000, each_batch=True, batch_seconds=1.0)
    records = chain(events(4))
    c.observe(records[0])
    assert c.batch_committed() == 1  # the stream's first checkpoint: at once
    c.observe(records[1])
    assert c.batch_committed() == 0  # its last checkpoint is not a second old
    assert c.tick() == 0
    clock.advance(timedelta(seconds=1))
    assert c.tick() == 1  # idle: signed once old enough
    assert [cp.n for cp in stored(c)] == [records[0].n, records[1].n]
    c.observe(records[2])
    c.observe(records[3])
    clock.advance(timedelta(seconds=1))
    assert c.batch_committed() == 1
    assert [cp.n for cp in stored(c)][-1] == records[3].n


class CountingSigner(LocalFileSigner):
    """The development signer, counting its requests; `down` makes them fail."""

    def __init__(self, path: Path) -> None:
        super().__init__(path)
        self.requests: list[int] = []  # messages per request
        self.down = False

    def sign_many(self, messages: Sequence[tuple[str, bytes]]) -> list[Signature]:
        self.requests.append(len(messages))
        if self.down:
            raise Unavailable("vault down", code="VAULT_UNAVAILABLE")
        return super().sign_many(messages)


def test_the_heads_a_batch_extended_are_signed_in_one_request(tmp_path: Path) -> None:
    signer = CountingSigner(tmp_path / "keys" / "audit-signing.json")
    anchors = SqliteCheckpointAnchors(tmp_path / "anchors.sqlite3", "NORMAL")
    c = checkpointer(tmp_path, anchors, signer=signer, every=1_000, each_batch=True)
    streams = [f"user:U{i}" for i in range(5)]
    trails = {s: chain(events(3, s)) for s in streams}
    signer.down = True
    for s in streams:
        for r in trails[s][:2]:
            c.observe(r)
    assert c.batch_committed() == 0
    assert signer.requests == [5]  # one request for the five heads, refused whole
    assert stored(c) == []
    signer.down = False
    assert c.tick() == 5  # all five still pending: signed at the next look, in one request
    assert signer.requests == [5, 5]
    for s in streams:
        c.observe(trails[s][2])
    c.clock.advance(timedelta(seconds=5))  # type: ignore[attr-defined]
    assert c.batch_committed() == 5
    assert signer.requests == [5, 5, 5]
    heads = {(cp.stream, cp.index): cp for cp in stored(c)}
    assert sorted(heads) == sorted((s, i) for s in streams for i in (1, 2))
    for s in streams:
        first, second = heads[(s, 1)], heads[(s, 2)]
        assert (first.n, second.n) == (2, 3)
        assert signer.verify("acme", second.message(), second.signature)
        assert second.prev == checkpoint_digest(first)
    assert sorted(anchors.of_tenant("acme"), key=lambda cp: cp.stream) == sorted(
        (heads[(s, 2)] for s in streams), key=lambda cp: cp.stream
    )


class FailingCheckpoints(SqliteAuditCheckpoints):
    """Real checkpoints whose `add` fails for the streams in `failing`."""

    failing: frozenset[str] = frozenset()

    def add(self, checkpoint: Checkpoint) -> bool:
        if checkpoint.stream in self.failing:
            raise Unavailable("store down", code="STORE_UNAVAILABLE")
        return super().add(checkpoint)


def test_heads_left_by_a_store_failure_mid_batch_are_signed_at_the_next_look(
    tmp_path: Path,
) -> None:
    signer = CountingSigner(tmp_path / "keys" / "audit-signing.json")
    store = FailingCheckpoints(tmp_path / "checkpoints.sqlite3", "NORMAL")
    c = AuditCheckpointer(signer, store, FixedClock(T0), every=1_000, seconds=600)
    streams = [f"user:U{i}" for i in range(4)]
    trails = {s: chain(events(2, s)) for s in streams}
    for s in streams:
        c.observe(trails[s][0])
    c.batch_committed()  # checkpoint 1 of each stream
    store.failing = frozenset({"user:U1"})
    for s in streams:
        c.observe(trails[s][1])
    signed = c.batch_committed()
    # signed in one request; stored in turn until the store failed: the rest wait
    assert signer.requests[-1] == 4
    assert signed < 4
    assert all(cp.n == 1 for cp in stored(c) if cp.stream == "user:U1")
    store.failing = frozenset()
    assert c.tick() == 4 - signed
    heads = {cp.stream: cp for cp in stored(c) if cp.index == 2}
    assert sorted(heads) == streams
    for s in streams:
        first = next(cp for cp in stored(c) if cp.stream == s and cp.index == 1)
        assert heads[s].n == 2
        assert heads[s].prev == checkpoint_digest(first)
        assert signer.verify("acme", heads[s].message(), heads[s].signature)


def test_a_signer_that_raises_something_unexpected_leaves_the_heads_pending(
    tmp_path: Path,
) -> None:
    class Broken(CountingSigner):
        def sign_many(self, messages: Sequence[tuple[str, bytes]]) -> list[Signature]:
            self.requests.append(len(messages))
            if self.down:
                raise RuntimeError("unexpected")
            return LocalFileSigner.sign_many(self, messages)

    signer = Broken(tmp_path / "keys" / "audit-signing.json")
    c = AuditCheckpointer(
        signer,
        SqliteAuditCheckpoints(tmp_path / "checkpoints.sqlite3", "NORMAL"),
        FixedClock(T0),
        every=1_000,
        seconds=600,
    )
    signer.down = True
    for s in ("user:U1", "user:U2"):
        c.observe(chain(events(1, s))[0])
    assert c.batch_committed() == 0  # no exception reaches the consumer
    assert c.failures == 1
    signer.down = False
    assert c.tick() == 2
