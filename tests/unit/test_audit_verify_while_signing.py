"""`mnemo audit verify` while the audit consumer works: between two of the verifier's reads,
the consumer commits links, signs the heads and anchors the checkpoints. The verifier must
still answer intact: a checkpoint newer than the heads it read, or an anchor newer than the
checkpoints it read, is the consumer at work, not a missing tail or a rollback."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from mnemo.adapters.clocks import FixedClock
from mnemo.bootstrap import Platform, build_embedded
from mnemo.domain.checkpoint import Checkpoint
from mnemo.domain.errors import Unavailable
from mnemo.domain.ids import new_event_id
from mnemo.domain.projection import PutAudit
from mnemo.handlers import audit
from mnemo.ports import AuditCheckpoints, CheckpointAnchors
from mnemo.service.app import RequestContext
from mnemo.service.insights import Insights
from mnemo.settings import MnemoSettings

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
CTX = RequestContext("acme", "tester")


def observations(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "event_id": new_event_id(datetime.now(UTC)),
            "type": "ObservationRecorded",
            "schema_version": 2,
            "stream": "user:U1",
            "payload": {"text": f"note {i}"},
        }
        for i in range(start, start + n)
    ]


class Meanwhile(AuditCheckpoints):
    """The real checkpoints, read by the verifier; right after a read, `then` runs (the
    consumer at work before the verifier's next read)."""

    def __init__(self, inner: AuditCheckpoints, then: Callable[[], None]) -> None:
        self.inner = inner
        self.then: Callable[[], None] | None = then

    def add(self, checkpoint: Checkpoint) -> bool:
        return self.inner.add(checkpoint)

    def last(self, tenant: str, stream: str) -> Checkpoint | None:
        return self.inner.last(tenant, stream)

    def of_tenant(self, tenant: str) -> list[Checkpoint]:
        found = self.inner.of_tenant(tenant)
        then, self.then = self.then, None
        if then is not None:
            then()
        return found


class HeadsThen:
    """The real store; right after the verifier reads the chain heads, `then` runs."""

    def __init__(self, inner: Any, then: Callable[[], None]) -> None:
        self.inner = inner
        self.then: Callable[[], None] | None = then

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def audit_heads(self, tenant: str) -> Any:
        found = self.inner.audit_heads(tenant)
        then, self.then = self.then, None
        if then is not None:
            then()
        return found


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    settings = MnemoSettings(
        data_dir=tmp_path / "data",
        embedder="hashing",
        sqlite_synchronous="NORMAL",
        audit_checkpoint_every=1_000,
        audit_checkpoint_seconds=600,
    )
    p = build_embedded(settings, clock=FixedClock(T0))
    p.app.publish(CTX, observations(3))
    p.runner.drain()  # each committed batch signed and anchored
    yield p
    p.close()


def clock(p: Platform) -> FixedClock:
    assert isinstance(p.app.clock, FixedClock)
    return p.app.clock


def insights(p: Platform, checkpoints: AuditCheckpoints, store: Any = None) -> Insights:
    return Insights(
        p.app.log,
        store or p.app.store,
        p.app.clock,
        checkpoints=checkpoints,
        signer=p.signer,
        logged=p.log,
        anchors=p.anchors,
    )


@pytest.mark.parametrize("between", ["checkpoints and heads", "heads and links"])
def test_links_signed_and_anchored_between_the_verifiers_reads_verify(
    platform: Platform, between: str
) -> None:
    assert platform.checkpoints is not None
    assert isinstance(platform.anchors, CheckpointAnchors)
    before = platform.anchors.of_tenant("acme")
    assert before, "the first batches were anchored"
    platform.app.publish(CTX, observations(3, start=3))  # logged, not yet audited

    def consumer_at_work() -> None:
        clock(platform).advance(timedelta(seconds=5))  # past the bound of one signature per stream
        platform.runner.drain()  # links committed, heads signed, checkpoints anchored

    if between == "checkpoints and heads":
        verifier = insights(platform, Meanwhile(platform.checkpoints, consumer_at_work))
    else:
        verifier = insights(
            platform, platform.checkpoints, HeadsThen(platform.app.store, consumer_at_work)
        )
    status = verifier.audit(CTX)
    after = platform.anchors.of_tenant("acme")
    assert [a.index for a in after] != [a.index for a in before], "the consumer anchored"
    assert (status.status, status.code) == ("intact", None), status
    # and read again once the consumer is idle, everything it signed is covered
    again = insights(platform, platform.checkpoints).audit(CTX)
    assert (again.status, again.unsigned) == ("intact", 0), again


def test_a_checkpoint_is_stored_only_once_its_batch_is_committed(platform: Platform) -> None:
    """The consumer's side of the same promise: a link observed in a batch that fails is
    never signed, even when its stream is due."""
    runner = platform.runner
    checkpointer = runner.checkpointer
    assert checkpointer is not None
    assert platform.checkpoints is not None
    signed = len(platform.checkpoints.of_tenant("acme"))
    [head] = platform.store.audit_heads("acme")
    platform.app.publish(CTX, observations(1, start=3))  # logged, not yet audited
    [logged] = platform.log.read_stream("acme", head.stream, head.n + 1, 1)
    [link] = [
        w.record
        for w in audit.handle(logged.envelope, logged.offset, head).writes
        if isinstance(w, PutAudit)
    ]
    clock(platform).advance(timedelta(seconds=700))  # past every time limit: the head is due
    runner.audit_started()
    checkpointer.observe(link)
    assert checkpointer.tick() == 0
    runner.audit_started()  # the batch failed and is redone without it
    assert runner.audit_committed() == 0
    assert len(platform.checkpoints.of_tenant("acme")) == signed
    runner.audit_started()  # redone, with it, and committed: signed now
    checkpointer.observe(link)
    assert runner.audit_committed() == 1


def test_links_committed_by_a_batch_that_then_raised_are_signed_when_idle(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch can raise after its links are in the store (a commit a store finished
    later, or anything failing after the commit): those links are signed at the next
    idle tick all the same, not left to the stream's next event."""
    runner = platform.runner
    assert platform.checkpoints is not None
    platform.app.publish(CTX, observations(2, start=3))

    def lost() -> int:
        raise RuntimeError("the process failed right after the commit")

    monkeypatch.setattr(runner, "audit_committed", lost)
    runner.drain()  # the audit step raises after its commit (logged, retried: nothing left)
    monkeypatch.undo()
    [head] = platform.store.audit_heads("acme")
    assert max(cp.n for cp in platform.checkpoints.of_tenant("acme")) < head.n
    clock(platform).advance(timedelta(seconds=5))
    assert runner.checkpoint_tick() == 1
    assert max(cp.n for cp in platform.checkpoints.of_tenant("acme")) == head.n
    status = insights(platform, platform.checkpoints).audit(CTX)
    assert (status.status, status.unsigned) == ("intact", 0), status


def test_links_the_store_cannot_confirm_yet_stay_staged_until_it_can(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The store is away when the idle tick asks whether a raised batch's links were
    stored: the tick fails with the store's error, forgets nothing, and signs them once
    the store answers again."""
    runner = platform.runner
    assert platform.checkpoints is not None
    platform.app.publish(CTX, observations(2, start=3))

    def lost() -> int:
        raise RuntimeError("the process failed right after the commit")

    monkeypatch.setattr(runner, "audit_committed", lost)
    runner.drain()
    monkeypatch.undo()
    [head] = platform.store.audit_heads("acme")
    clock(platform).advance(timedelta(seconds=5))

    def away(*args: Any) -> Any:
        raise Unavailable("the memory store is unavailable", code="STORE_UNAVAILABLE")

    monkeypatch.setattr(platform.store, "audit_trail", away)
    for _ in range(2):
        with pytest.raises(Unavailable):
            runner.checkpoint_tick()
    monkeypatch.undo()
    assert max(cp.n for cp in platform.checkpoints.of_tenant("acme")) < head.n
    assert runner.checkpoint_tick() == 1
    assert max(cp.n for cp in platform.checkpoints.of_tenant("acme")) == head.n
