"""The audit chain detects any change, removal or reordering, and is the same on every
replay of the log, whatever the order in which streams interleave."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from mnemo.domain.checkpoint import (
    FIRST,
    Checkpoint,
    Signature,
    anchor_moves,
    checkpoint_digest,
    checkpoint_from_record,
    checkpoint_message,
    checkpoint_record,
)
from mnemo.domain.errors import ConflictError
from mnemo.domain.events import Actor, ActorKind, Envelope
from mnemo.domain.ids import new_event_id
from mnemo.domain.projection import AuditRecord, PutAudit
from mnemo.handlers import audit

T0 = datetime(2026, 11, 30, tzinfo=UTC)


def events(n: int, stream: str = "user:U1") -> list[Envelope]:
    return [
        Envelope(
            event_id=new_event_id(T0 + timedelta(seconds=i)),
            type="ObservationRecorded",
            schema_version=2,
            tenant="acme",
            stream=stream,
            seq=i + 1,
            occurred_at=T0 + timedelta(seconds=i),
            actor=Actor(kind=ActorKind.USER, id="U1"),
            payload={"text": f"utterance {i}"},
        )
        for i in range(n)
    ]


def chain(evs: list[Envelope]) -> list[AuditRecord]:
    records: list[AuditRecord] = []
    for offset, e in enumerate(evs, 1):
        [write] = audit.handle(e, offset, records[-1] if records else None).writes
        assert isinstance(write, PutAudit)
        records.append(write.record)
    return records


def test_an_untouched_chain_verifies() -> None:
    evs = events(5)
    records = chain(evs)
    assert [r.n for r in records] == [1, 2, 3, 4, 5]
    assert records[0].prev_hash == audit.GENESIS
    assert audit.verify(records, {e.event_id: e for e in evs}) is None


def test_a_changed_event_breaks_its_link() -> None:
    evs = events(5)
    records = chain(evs)
    tampered = {e.event_id: e for e in evs}
    tampered[evs[2].event_id] = evs[2].model_copy(update={"payload": {"text": "forged"}})
    assert audit.verify(records, tampered) == 3


def test_a_removed_record_breaks_the_next_link() -> None:
    evs = events(5)
    records = chain(evs)
    assert audit.verify(records[:1] + records[2:], {e.event_id: e for e in evs}) == 3


def test_reordered_records_break_the_chain() -> None:
    evs = events(4)
    records = chain(evs)
    swapped = [records[0], records[2], records[1], records[3]]
    assert audit.verify(swapped, {e.event_id: e for e in evs}) == 3


def chain_log(log: list[Envelope]) -> dict[str, list[AuditRecord]]:
    """Audit a log the way the consumer does: each event linked to its stream's last link."""
    trails: dict[str, list[AuditRecord]] = {}
    for offset, e in enumerate(log, 1):
        trail = trails.setdefault(e.stream, [])
        [write] = audit.handle(e, offset, trail[-1] if trail else None).writes
        assert isinstance(write, PutAudit)
        trail.append(write.record)
    return trails


def test_chains_do_not_depend_on_how_streams_interleave() -> None:
    a, b = events(4, "user:U1"), events(3, "user:U2")
    one = chain_log([a[0], b[0], a[1], a[2], b[1], b[2], a[3]])
    other = chain_log([b[0], b[1], a[0], b[2], a[1], a[2], a[3]])

    def links(trails: dict[str, list[AuditRecord]]) -> dict[str, list[tuple[int, str, str]]]:
        return {s: [(r.n, r.event_id, r.hash) for r in t] for s, t in trails.items()}

    # the log offsets differ with the interleaving; the links themselves do not
    assert links(one) == links(other)
    assert audit.heads_digest([t[-1] for t in one.values()]) == audit.heads_digest(
        [t[-1] for t in other.values()]
    )
    assert [r.n for r in one["user:U2"]] == [1, 2, 3]


def test_the_heads_digest_follows_every_stream_head() -> None:
    trails = chain_log(events(3, "user:U1") + events(2, "user:U2"))
    heads = [t[-1] for t in trails.values()]
    digest = audit.heads_digest(heads)
    assert audit.heads_digest(list(reversed(heads))) == digest
    assert audit.heads_digest(heads[:1]) != digest
    assert audit.heads_digest([heads[0], trails["user:U2"][0]]) != digest


def test_a_chain_that_skips_an_event_is_broken_where_the_gap_is() -> None:
    evs = events(4)
    [first] = chain(evs[:1])
    # the consumer never linked event 2: event 3 chains to link 1
    [write] = audit.handle(evs[2], 3, first).writes
    assert isinstance(write, PutAudit)
    assert write.record.n == 3
    assert write.record.prev_hash == first.hash
    assert audit.verify([first, write.record], {e.event_id: e for e in evs}) == 3


def test_a_link_holds_its_streams_event_of_the_same_number() -> None:
    evs = events(3)
    records = chain(evs)
    # a well-formed chain over the same events that claims other numbers
    shifted = [
        AuditRecord(r.tenant, r.stream, r.n + 1, r.event_id, r.event_type, r.offset, r.prev_hash,
                    r.hash)
        for r in records
    ]  # fmt: skip
    assert audit.verify(shifted, {e.event_id: e for e in evs}, start_n=1) == 2
    # and a link whose event belongs to another stream
    foreign = events(1, "user:U9")[0].model_copy(update={"seq": 1})
    other = AuditRecord(
        "acme", "user:U1", 1, foreign.event_id, foreign.type, 1, audit.GENESIS,
        audit.link_hash(audit.GENESIS, audit.canonical(foreign)),
    )  # fmt: skip
    assert audit.verify([other], {foreign.event_id: foreign}) == 1


def test_linking_an_event_again_changes_nothing() -> None:
    evs = events(3)
    records = chain(evs)
    # a redelivered event, or a second consumer a step behind: its link exists already
    assert audit.handle(evs[1], 2, records[-1]).writes == []
    assert audit.handle(evs[2], 3, records[-1]).writes == []
    # written twice from the same chain, a link is the same row
    again = audit.handle(evs[2], 3, records[1]).writes
    assert again == [PutAudit(records[2])]


def test_only_sequenced_events_are_linked() -> None:
    unsequenced = events(1)[0].model_copy(update={"seq": None})
    with pytest.raises(ValueError, match="sequenced"):
        audit.handle(unsequenced, 1, None)


# ---- signed checkpoints -------------------------------------------------------------------


def signed_chain(records: list[AuditRecord], at: list[int]) -> list[Checkpoint]:
    """Checkpoints of `records` at the given link numbers, chained; the 'signature' is a
    label the test's validity check recognises."""
    out: list[Checkpoint] = []
    for index, n in enumerate(at, 1):
        prev = checkpoint_digest(out[-1]) if out else FIRST
        out.append(
            Checkpoint(
                "acme", "user:U1", index, n, records[n - 1].hash, prev, T0, Signature(1, "ok")
            )
        )
    return out


def genuine(cp: Checkpoint) -> bool:
    return cp.signature.value == "ok"


def test_checkpoints_of_an_untouched_chain_hold() -> None:
    records = chain(events(6))
    cps = signed_chain(records, [2, 5])
    hashes = {r.n: r.hash for r in records}
    assert audit.check_checkpoints("user:U1", cps, 6, hashes, genuine) is None


def test_a_recomputed_chain_disagrees_with_its_checkpoints() -> None:
    evs = events(6)
    cps = signed_chain(chain(evs), [2, 5])
    evs[3] = evs[3].model_copy(update={"payload": {"text": "forged"}})
    relinked = chain(evs)  # every link recomputed: the chain verifies on its own
    assert audit.verify(relinked, {e.event_id: e for e in evs}) is None
    problem = audit.check_checkpoints("user:U1", cps, 6, {r.n: r.hash for r in relinked}, genuine)
    assert problem is not None
    assert (problem.code, problem.n, problem.index) == ("AUDIT_CHECKPOINT_MISMATCH", 5, 2)


def test_a_chain_shorter_than_a_checkpoint_lost_its_tail() -> None:
    records = chain(events(6))
    cps = signed_chain(records, [3, 6])
    problem = audit.check_checkpoints(
        "user:U1", cps, 5, {r.n: r.hash for r in records[:5]}, genuine
    )
    assert problem is not None
    assert (problem.code, problem.n) == ("AUDIT_TAIL_MISSING", 6)


def test_a_bad_signature_or_a_missing_checkpoint_is_named() -> None:
    records = chain(events(6))
    hashes = {r.n: r.hash for r in records}
    cps = signed_chain(records, [2, 4, 6])
    forged = [cps[0], replace(cps[1], signature=Signature(1, "theirs")), cps[2]]
    problem = audit.check_checkpoints("user:U1", forged, 6, hashes, genuine)
    assert problem is not None
    assert (problem.code, problem.index) == ("AUDIT_SIGNATURE_INVALID", 2)
    problem = audit.check_checkpoints("user:U1", [cps[0], cps[2]], 6, hashes, genuine)
    assert problem is not None
    assert (problem.code, problem.index) == ("AUDIT_CHECKPOINT_MISSING", 3)
    other_stream = [replace(cps[0], stream="user:U2")]
    problem = audit.check_checkpoints("user:U1", other_stream, 6, hashes, genuine)
    assert problem is not None
    assert problem.code == "AUDIT_SIGNATURE_INVALID"


def test_a_checkpoint_is_due_after_n_links_or_t_seconds() -> None:
    now = T0 + timedelta(seconds=100)
    assert audit.checkpoint_due(0, 4, now, now, every=4, seconds=60)
    assert not audit.checkpoint_due(0, 3, now, now, every=4, seconds=60)
    assert audit.checkpoint_due(4, 5, now - timedelta(seconds=60), now, every=4, seconds=60)
    assert not audit.checkpoint_due(4, 5, now - timedelta(seconds=59), now, every=4, seconds=60)
    assert not audit.checkpoint_due(5, 5, T0, now, every=1, seconds=1)


def test_the_signed_message_tells_every_field_apart() -> None:
    base = ("acme", "user:U1", 1, 7, "a" * 64, FIRST, T0)
    messages = {
        checkpoint_message(*base),
        checkpoint_message("acme\tuser:U1", "", 1, 7, "a" * 64, FIRST, T0),
        checkpoint_message("acme", "user:U1", 1, 8, "a" * 64, FIRST, T0),
        checkpoint_message("acme", "user:U1", 2, 7, "a" * 64, FIRST, T0),
        checkpoint_message(
            "acme", "user:U1", 1, 7, "a" * 64, FIRST, T0 + timedelta(microseconds=1)
        ),
    }
    assert len(messages) == 5


# ---- anchors: each stream's newest checkpoint, kept outside the store --------------------


def test_checkpoints_that_reach_their_anchor_hold() -> None:
    cps = signed_chain(chain(events(6)), [2, 4, 6])
    assert audit.check_anchor("user:U1", cps[2], cps, genuine) is None
    # the store may be ahead of its anchor (anchoring follows storing)
    assert audit.check_anchor("user:U1", cps[1], cps, genuine) is None


def test_a_store_behind_its_anchor_was_rolled_back() -> None:
    cps = signed_chain(chain(events(6)), [2, 4, 6])
    # the newest two checkpoints removed with the events after link 2: the rest agrees
    problem = audit.check_anchor("user:U1", cps[2], cps[:1], genuine)
    assert problem is not None
    assert (problem.code, problem.n, problem.index) == ("AUDIT_CHECKPOINT_ROLLBACK", 6, 3)
    problem = audit.check_anchor("user:U1", cps[2], [], genuine)  # the whole stream gone
    assert problem is not None
    assert problem.code == "AUDIT_CHECKPOINT_ROLLBACK"


def test_a_store_signed_again_after_a_rollback_is_rolled_back() -> None:
    evs = events(6)
    cps = signed_chain(chain(evs), [2, 4])
    evs[2] = evs[2].model_copy(update={"payload": {"text": "other"}})
    again = signed_chain(chain(evs), [2, 4])  # back to checkpoint 1, then signed again
    assert again[0] == cps[0]
    assert again[1] != cps[1]
    problem = audit.check_anchor("user:U1", cps[1], again, genuine)
    assert problem is not None
    assert (problem.code, problem.index) == ("AUDIT_CHECKPOINT_ROLLBACK", 2)


def test_an_anchor_that_was_never_signed_is_named() -> None:
    cps = signed_chain(chain(events(6)), [2, 4])
    planted = replace(cps[1], index=3, n=6, signature=Signature(1, "theirs"))
    problem = audit.check_anchor("user:U1", planted, cps, genuine)
    assert problem is not None
    assert problem.code == "AUDIT_SIGNATURE_INVALID"


def test_an_anchor_moves_to_the_next_checkpoint_of_its_chain_only() -> None:
    evs = events(6)
    cps = signed_chain(chain(evs), [2, 4, 6])
    assert anchor_moves(None, cps[1])  # a stream's first anchor
    assert anchor_moves(cps[0], cps[1])
    assert not anchor_moves(cps[1], cps[0])
    assert not anchor_moves(cps[1], cps[1])
    with pytest.raises(ConflictError) as gap:
        anchor_moves(cps[0], cps[2])
    assert gap.value.code == "AUDIT_ANCHOR_GAP"
    evs[2] = evs[2].model_copy(update={"payload": {"text": "other"}})
    forked = signed_chain(chain(evs), [2, 4, 6])
    with pytest.raises(ConflictError) as fork:
        anchor_moves(cps[1], forked[2])
    assert fork.value.code == "AUDIT_CHECKPOINT_ROLLBACK"


def test_a_checkpoint_record_reads_back_and_nothing_else_does() -> None:
    [cp] = signed_chain(chain(events(2)), [2])
    assert checkpoint_from_record(checkpoint_record(cp)) == cp
    for broken in (
        None,
        [],
        {**checkpoint_record(cp), "format": 2},
        {**checkpoint_record(cp), "index": "1"},
        {**checkpoint_record(cp), "index": -1},
        {**checkpoint_record(cp), "signed_at": "2026-12-02T09:00:00"},
        {k: v for k, v in checkpoint_record(cp).items() if k != "hash"},
    ):
        with pytest.raises(ValueError, match="checkpoint record"):
            checkpoint_from_record(broken)
