"""Signed audit checkpoints in the distributed mode: Kafka, Cassandra and OpenBao's transit
and KV engines, all real. The attacks a hash chain alone lets through (issue 16, finding 7)
are reported with their code: an archived event edited with every link after it
recomputed, a rebuild from a log with an edited record, the last event of a stream deleted
with its link, a checkpoint altered to match an edit, checkpoints signed by another transit
key, and a stream rolled back to an older checkpoint (its newer checkpoints and events
removed), which only the anchor kept in the vault reveals; and with the vault out of
reach, verification says it could not verify instead of passing."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.distributed_support import (
    Pump,
    create_topics,
    distributed_settings,
    drop_keyspace,
    require_services,
)
from tests.support import missing
from tests.vault_support import vault_settings

from mnemo.adapters.clocks import FixedClock
from mnemo.bootstrap import Platform, build_distributed
from mnemo.domain.checkpoint import FIRST, Checkpoint, checkpoint_digest
from mnemo.domain.errors import Unavailable
from mnemo.domain.projection import AuditRecord, PutAudit
from mnemo.handlers import audit
from mnemo.service.app import RequestContext
from mnemo.service.insights import AuditStatus, Insights
from mnemo.settings import MnemoSettings

CTX = RequestContext("acme", "tester")
T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


def signed_settings(data: Path, **extra: Any) -> MnemoSettings:
    url, token = vault_settings()
    if token is None:
        missing("OpenBao", "no MNEMO_VAULT_TOKEN and no var/run/services.env")
    values: dict[str, Any] = {
        "partitions": 2,
        "vault_addr": url,
        "vault_token": token,
        "vault_key_prefix": f"dist{uuid.uuid4().hex[:10]}",
        "audit_signing_key": f"audit-{uuid.uuid4().hex[:12]}",
        "audit_checkpoint_every": 3,
        "audit_checkpoint_seconds": 600,
    }
    values.update(extra)
    return distributed_settings(data, **values)


@contextmanager
def running(settings: MnemoSettings, clock: FixedClock) -> Iterator[Platform]:
    require_services()
    create_topics(settings)
    platform = build_distributed(settings, "test", clock=clock)
    try:
        try:
            platform.signer.sign("probe", b"probe")  # type: ignore[union-attr]
        except Unavailable as exc:
            if exc.code == "VAULT_UNAVAILABLE":
                missing("OpenBao", exc.message)
            raise
        yield platform
    finally:
        drop_keyspace(platform)
        platform.close()


def observation(text: str, stream: str) -> dict[str, Any]:
    return {
        "type": "ObservationRecorded",
        "schema_version": 2,
        "stream": stream,
        "payload": {"text": text},
    }


def fill(platform: Platform, clock: FixedClock) -> None:
    """Seven events in user:U1 and two in user:U2, linked, every head signed at last."""
    platform.app.publish(
        CTX,
        [observation(f"note {i}", "user:U1") for i in range(7)]
        + [observation(f"other {i}", "user:U2") for i in range(2)],
    )
    Pump(platform).drain()
    clock.advance(timedelta(seconds=601))
    platform.runner.checkpoint_tick()


def verify(platform: Platform, **replace: Any) -> AuditStatus:
    parts: dict[str, Any] = {
        "checkpoints": platform.checkpoints,
        "signer": platform.signer,
        "anchors": platform.anchors,
    }
    parts.update(replace)
    return Insights(platform.log, platform.store, platform.runner.clock, **parts).audit(CTX)


def ks(platform: Platform) -> str:
    return platform.settings.cassandra_keyspace


def session(platform: Platform) -> Any:
    return platform.store.session  # type: ignore[attr-defined]


# the archive writes its rows with timestamps that keep the earliest placement (ADR 0014):
# an attacker with access to the tables writes above them
ABOVE = 2**53 + 1


def an_hour_later(stamp: str) -> str:
    return (datetime.fromisoformat(stamp) + timedelta(hours=1)).isoformat()


def edit_archived(platform: Platform, stream: str, seq: int) -> None:
    [row] = list(
        session(platform).execute(
            f"SELECT body FROM {ks(platform)}.events_by_stream "
            "WHERE tenant = %s AND stream = %s AND seq = %s",
            ("acme", stream, seq),
        )
    )
    body = json.loads(row[0])
    # the user's words are sealed (a stand-in is replaced on opening): move its time
    body["occurred_at"] = an_hour_later(body["occurred_at"])
    session(platform).execute(
        f"UPDATE {ks(platform)}.events_by_stream USING TIMESTAMP {ABOVE} SET body = %s "
        "WHERE tenant = %s AND stream = %s AND seq = %s",
        (json.dumps(body), "acme", stream, seq),
    )


def write_link(platform: Platform, r: AuditRecord, head: bool) -> None:
    values = (r.tenant, r.stream, r.n, r.event_id, r.event_type, r.offset, r.prev_hash, r.hash)
    session(platform).execute(
        f"INSERT INTO {ks(platform)}.audit_links (tenant, stream, chunk, n, event_id, "
        "event_type, log_offset, prev_hash, hash) VALUES (%s, %s, 0, %s, %s, %s, %s, %s, %s)",
        values,
    )
    if head:
        session(platform).execute(
            f"INSERT INTO {ks(platform)}.audit_stream_heads (tenant, stream, n, event_id, "
            "event_type, log_offset, prev_hash, hash) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
            values,
        )


def recompute_links(platform: Platform, stream: str) -> dict[int, str]:
    """Relink a stream from the archive as it is now; the new hashes by link."""
    old = {r.n: r for r in platform.store.audit_trail("acme", stream, 0, 1_000)}
    events = [e.envelope for e in platform.log.read_stream("acme", stream, 1, 1_000)]
    last: AuditRecord | None = None
    for event in events:
        [write] = audit.handle(event, old[event.seq or 0].offset, last).writes
        assert isinstance(write, PutAudit)
        last = write.record
        write_link(platform, last, head=event is events[-1])
    return {r.n: r.hash for r in platform.store.audit_trail("acme", stream, 0, 1_000)}


@pytest.fixture
def clock() -> FixedClock:
    return FixedClock(T0)


@pytest.fixture
def platform(tmp_path: Path, clock: FixedClock) -> Iterator[Platform]:
    with running(signed_settings(tmp_path / "data"), clock) as built:
        fill(built, clock)
        yield built


def test_heads_are_signed_by_the_transit_key_and_verify(platform: Platform) -> None:
    status = verify(platform)
    assert (status.status, status.code, status.unsigned) == ("intact", None, 0)
    assert status.anchored == 2  # each stream's newest checkpoint is anchored in the vault
    assert status.signed == status.links == 9
    signed = platform.checkpoints.of_tenant("acme")  # type: ignore[union-attr]
    assert {(c.stream, c.n) for c in signed} == {
        ("user:U1", 3),
        ("user:U1", 6),
        ("user:U1", 7),
        ("user:U2", 2),
    }
    assert all(c.signature.value.startswith("vault:v1:") for c in signed)
    assert status.checkpoints == len(signed)


def test_an_archived_event_edited_with_its_links_recomputed_is_reported(
    platform: Platform,
) -> None:
    edit_archived(platform, "user:U1", 2)
    recompute_links(platform, "user:U1")
    status = verify(platform)
    assert (status.status, status.code, status.stream, status.first_broken) == (
        "broken",
        "AUDIT_CHECKPOINT_MISMATCH",
        "user:U1",
        3,
    )


def test_a_rebuild_from_an_edited_log_is_reported(
    platform: Platform, tmp_path: Path, clock: FixedClock
) -> None:
    """The log copied into a new topic with one record changed, and the consumers run as
    fresh groups into a fresh keyspace over it, their checkpoints on the live keyspace."""
    live = platform
    assert live.distributed is not None
    signed_before = live.checkpoints.of_tenant("acme")  # type: ignore[union-attr]
    rebuild = live.settings.model_copy(
        update={
            "kafka_topic": live.settings.kafka_topic + ".edited",
            "cassandra_keyspace": ks(live) + "_r",
            "audit_checkpoint_keyspace": ks(live),
            "data_dir": tmp_path / "rebuild",
        }
    )
    with running(rebuild, clock) as rebuilt:
        assert rebuilt.distributed is not None
        copied = []
        notes = 0  # user:U1's observations in log order: the fifth is "note 4"
        for partition in live.distributed.topic.partitions():
            for r in live.distributed.topic.fetch(partition, 0, 10_000):
                assert r.key is not None
                assert r.value is not None
                value = json.loads(r.value)
                if value["stream"] == "user:U1" and value["type"] == "ObservationRecorded":
                    if notes == 4:  # its words are sealed: move its time instead
                        value["occurred_at"] = an_hour_later(value["occurred_at"])
                    notes += 1
                copied.append((r.key, json.dumps(value).encode(), r.headers))
        rebuilt.distributed.topic.produce(copied)
        Pump(rebuilt).drain()
        clock.advance(timedelta(seconds=601))
        rebuilt.runner.checkpoint_tick()
        # nothing was signed over the edited chain, nothing signed before was rewritten
        assert rebuilt.checkpoints.of_tenant("acme") == signed_before  # type: ignore[union-attr]
        status = verify(rebuilt)
        assert (status.status, status.code, status.stream, status.first_broken) == (
            "broken",
            "AUDIT_CHECKPOINT_MISMATCH",
            "user:U1",
            6,
        )


def test_a_deleted_tail_event_with_its_link_is_reported(platform: Platform) -> None:
    trail = platform.store.audit_trail("acme", "user:U2", 0, 100)
    last = trail[-1]
    s, k = session(platform), ks(platform)
    s.execute(
        f"DELETE FROM {k}.events_by_stream USING TIMESTAMP {ABOVE} "
        "WHERE tenant = %s AND stream = %s AND seq = %s",
        ("acme", "user:U2", last.n),
    )
    s.execute(
        f"DELETE FROM {k}.events_by_id USING TIMESTAMP {ABOVE} WHERE tenant = %s AND event_id = %s",
        ("acme", last.event_id),
    )
    s.execute(
        f"DELETE FROM {k}.audit_links WHERE tenant = %s AND stream = %s AND chunk = 0 AND n = %s",
        ("acme", "user:U2", last.n),
    )
    write_link(platform, trail[-2], head=True)
    status = verify(platform)
    assert (status.status, status.code, status.stream, status.first_broken) == (
        "broken",
        "AUDIT_TAIL_MISSING",
        "user:U2",
        last.n,
    )


def test_a_checkpoint_altered_to_match_an_edit_is_reported(platform: Platform) -> None:
    edit_archived(platform, "user:U2", 1)
    hashes = recompute_links(platform, "user:U2")
    session(platform).execute(
        f"UPDATE {ks(platform)}.audit_checkpoints SET hash = %s "
        "WHERE tenant = %s AND stream = %s AND idx = 1",
        (hashes[2], "acme", "user:U2"),
    )
    status = verify(platform)
    assert (status.status, status.code, status.stream) == (
        "broken",
        "AUDIT_SIGNATURE_INVALID",
        "user:U2",
    )


def test_checkpoints_signed_by_another_transit_key_are_reported(platform: Platform) -> None:
    from mnemo.adapters.vault_signer import VaultTransitSigner

    url, token = vault_settings()
    assert token is not None
    theirs = VaultTransitSigner(url, token, f"attacker-{uuid.uuid4().hex[:10]}")
    edit_archived(platform, "user:U1", 1)
    hashes = recompute_links(platform, "user:U1")
    prev = FIRST
    for old in [c for c in platform.checkpoints.of_tenant("acme") if c.stream == "user:U1"]:  # type: ignore[union-attr]
        fields = (old.tenant, old.stream, old.index, old.n, hashes[old.n], prev, old.signed_at)
        draft = Checkpoint(*fields, signature=old.signature)
        cp = Checkpoint(*fields, signature=theirs.sign("acme", draft.message()))
        session(platform).execute(
            f"UPDATE {ks(platform)}.audit_checkpoints SET hash = %s, prev = %s, "
            "key_version = %s, signature = %s WHERE tenant = %s AND stream = %s AND idx = %s",
            (
                cp.hash,
                cp.prev,
                cp.signature.key_version,
                cp.signature.value,
                "acme",
                cp.stream,
                cp.index,
            ),
        )
        prev = checkpoint_digest(cp)
    status = verify(platform)
    assert (status.status, status.code, status.stream, status.first_broken) == (
        "broken",
        "AUDIT_SIGNATURE_INVALID",
        "user:U1",
        3,
    )


def test_without_the_vault_the_trail_is_unverified_not_intact(platform: Platform) -> None:
    from mnemo.adapters.vault_signer import VaultTransitSigner

    away = VaultTransitSigner("http://127.0.0.1:9", "s.unused", "mnemo-audit", timeout=0.5)
    status = verify(platform, signer=away)
    assert (status.status, status.code) == ("unverified", "AUDIT_SIGNER_UNAVAILABLE")
    status = verify(platform, signer=None)
    assert (status.status, status.code) == ("unverified", "AUDIT_SIGNER_UNAVAILABLE")


def roll_back(platform: Platform, stream: str, to_index: int) -> Checkpoint:
    """What someone who can write Cassandra (not the vault) does to take a stream back to
    its checkpoint `to_index`: the events after it, their links and the newer checkpoints
    removed, the chain's head moved back. The checkpoint kept is returned."""
    signed = [c for c in platform.checkpoints.of_tenant("acme") if c.stream == stream]  # type: ignore[union-attr]
    kept = signed[to_index - 1]
    trail = platform.store.audit_trail("acme", stream, 0, 1_000)
    s, k = session(platform), ks(platform)
    for r in trail[kept.n :]:
        s.execute(
            f"DELETE FROM {k}.events_by_stream USING TIMESTAMP {ABOVE} "
            "WHERE tenant = %s AND stream = %s AND seq = %s",
            ("acme", stream, r.n),
        )
        s.execute(
            f"DELETE FROM {k}.events_by_id USING TIMESTAMP {ABOVE} "
            "WHERE tenant = %s AND event_id = %s",
            ("acme", r.event_id),
        )
        s.execute(
            f"DELETE FROM {k}.audit_links WHERE tenant = %s AND stream = %s AND chunk = 0 "
            "AND n = %s",
            ("acme", stream, r.n),
        )
    write_link(platform, trail[kept.n - 1], head=True)
    s.execute(
        f"DELETE FROM {k}.audit_checkpoints WHERE tenant = %s AND stream = %s AND idx > %s",
        ("acme", stream, to_index),
    )
    return kept


def test_a_stream_rolled_back_to_an_older_checkpoint_is_reported(platform: Platform) -> None:
    assert platform.anchors is not None
    [anchor] = [a for a in platform.anchors.of_tenant("acme") if a.stream == "user:U1"]
    assert anchor.index == 3  # checkpoints at links 3, 6 and 7
    kept = roll_back(platform, "user:U1", 1)
    # everything the store holds agrees with itself: without the anchor it verifies
    unanchored = verify(platform, anchors=None)
    assert (unanchored.status, unanchored.code) == ("intact", None)
    assert unanchored.links == 9 - (7 - kept.n)
    status = verify(platform)
    assert (status.status, status.code, status.stream, status.first_broken) == (
        "broken",
        "AUDIT_CHECKPOINT_ROLLBACK",
        "user:U1",
        anchor.n,
    )
    # the anchor only moves forward: the older checkpoint does not take it back
    assert not platform.anchors.advance(kept)
    assert [a for a in platform.anchors.of_tenant("acme") if a.stream == "user:U1"] == [anchor]


def test_a_stream_removed_with_all_its_checkpoints_is_reported(platform: Platform) -> None:
    roll_back(platform, "user:U2", 1)
    s, k = session(platform), ks(platform)
    for table, where in (
        ("events_by_stream", ""),
        ("audit_links", " AND chunk = 0"),
        ("audit_stream_heads", ""),
    ):
        s.execute(
            f"DELETE FROM {k}.{table} USING TIMESTAMP {ABOVE} "
            f"WHERE tenant = %s AND stream = %s{where}",
            ("acme", "user:U2"),
        )
    s.execute(
        f"DELETE FROM {k}.audit_checkpoints WHERE tenant = %s AND stream = %s",
        ("acme", "user:U2"),
    )
    assert verify(platform, anchors=None).status == "intact"
    status = verify(platform)
    assert (status.status, status.code, status.stream) == (
        "broken",
        "AUDIT_CHECKPOINT_ROLLBACK",
        "user:U2",
    )


def test_anchors_out_of_reach_leave_the_trail_unverified(platform: Platform) -> None:
    from mnemo.adapters.vault_anchors import VaultKvAnchors
    from mnemo.adapters.vault_signer import VaultTransitSigner

    anchors = VaultKvAnchors("http://127.0.0.1:9", "s.unused", prefix="gone", timeout=0.5)
    status = verify(platform, anchors=anchors)
    assert (status.status, status.code) == ("unverified", "AUDIT_SIGNER_UNAVAILABLE")
    signer = VaultTransitSigner("http://127.0.0.1:9", "s.unused", "mnemo-audit", timeout=0.5)
    status = verify(platform, anchors=anchors, signer=signer)
    assert (status.status, status.code) == ("unverified", "AUDIT_SIGNER_UNAVAILABLE")


def test_a_tail_deleted_after_the_last_batch_is_reported(tmp_path: Path, clock: FixedClock) -> None:
    """With the default limits (a head signed every 1,000 links or after 60 s, neither
    reached), the end of each batch the audit consumer commits signs its streams' heads:
    the newest event deleted from the archive with its link is reported, where it was once
    covered by the chain alone and verified."""
    settings = signed_settings(
        tmp_path / "data",
        audit_checkpoint_every=1_000,
        audit_checkpoint_seconds=60,
        audit_checkpoint_batch_seconds=0,  # the test's clock stands still
    )
    with running(settings, clock) as platform:
        platform.app.publish(CTX, [observation(f"other {i}", "user:U2") for i in range(3)])
        Pump(platform).drain()
        trail = platform.store.audit_trail("acme", "user:U2", 0, 100)
        signed = [c for c in platform.checkpoints.of_tenant("acme") if c.stream == "user:U2"]
        assert [(c.n, c.hash) for c in signed[-1:]] == [(trail[-1].n, trail[-1].hash)]
        assert verify(platform).status == "intact"
        last = trail[-1]
        s, k = session(platform), ks(platform)
        s.execute(
            f"DELETE FROM {k}.events_by_stream USING TIMESTAMP {ABOVE} "
            "WHERE tenant = %s AND stream = %s AND seq = %s",
            ("acme", "user:U2", last.n),
        )
        s.execute(
            f"DELETE FROM {k}.events_by_id USING TIMESTAMP {ABOVE} "
            "WHERE tenant = %s AND event_id = %s",
            ("acme", last.event_id),
        )
        s.execute(
            f"DELETE FROM {k}.audit_links WHERE tenant = %s AND stream = %s AND chunk = 0 "
            "AND n = %s",
            ("acme", "user:U2", last.n),
        )
        write_link(platform, trail[-2], head=True)
        status = verify(platform)
        assert (status.status, status.code, status.stream, status.first_broken) == (
            "broken",
            "AUDIT_TAIL_MISSING",
            "user:U2",
            last.n,
        )


def test_the_audit_workers_signing_round_outlives_a_store_outage(tmp_path: Path) -> None:
    """Cassandra goes away while links a raised batch committed wait to be confirmed: the
    worker's checkpoint round is skipped with the store's code and counted (a round that
    raised out of its timer would stop the worker's agent for good), and once the store
    answers again the next round signs those links."""
    import asyncio

    from mnemo.entrypoints.workers import Worker

    clock = FixedClock(T0)
    with running(signed_settings(tmp_path / "data"), clock) as platform:
        runner = platform.runner
        assert platform.checkpoints is not None
        platform.app.publish(CTX, [observation(f"note {i}", "user:U1") for i in range(2)])

        def lost() -> int:
            raise RuntimeError("the process failed right after the commit")

        Pump(platform, ("registrar", "indexer", "decay")).drain()
        runner.audit_committed = lost  # type: ignore[method-assign]
        with pytest.raises(RuntimeError):
            Pump(platform, ("audit",)).drain()  # the batch committed, then raised
        del runner.audit_committed
        Pump(platform).drain()
        [head] = platform.store.audit_heads("acme")
        clock.advance(timedelta(seconds=601))

        worker = Worker("audit", platform.settings, platform)
        store = platform.store
        real = store.audit_trail

        def away(*args: Any) -> Any:
            raise Unavailable("the memory store is away", code="STORE_UNAVAILABLE")

        def broken() -> int:
            raise KeyError("a bug in the round")

        try:
            store.audit_trail = away  # type: ignore[method-assign]
            assert not asyncio.run(worker.periodically("signing", runner.checkpoint_tick))
            assert not asyncio.run(worker.periodically("signing", broken))
            assert worker.periodic_failures == 2
            assert (
                'mnemo_consumer_periodic_failures_total{consumer="audit"} 2'
                in worker.metrics_text()
            )
            assert max((cp.n for cp in platform.checkpoints.of_tenant("acme")), default=0) < head.n
            store.audit_trail = real  # type: ignore[method-assign]
            assert asyncio.run(worker.periodically("signing", runner.checkpoint_tick))
            assert max(cp.n for cp in platform.checkpoints.of_tenant("acme")) == head.n
        finally:
            worker.executor.shutdown(wait=True)
            worker._unwatch()
