"""The audit chain detects any change, removal or reordering."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from mnemo.domain.events import Actor, ActorKind, Envelope
from mnemo.domain.ids import new_event_id
from mnemo.domain.projection import AuditRecord, PutAudit
from mnemo.handlers import audit

T0 = datetime(2026, 11, 30, tzinfo=UTC)


def events(n: int) -> list[Envelope]:
    return [
        Envelope(
            event_id=new_event_id(T0 + timedelta(seconds=i)),
            type="ObservationRecorded",
            schema_version=2,
            tenant="acme",
            stream="user:U1",
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
