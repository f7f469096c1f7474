"""Contract of the TimerReads and AuditReads ports of the read models: due timers across
tenants and the audit chains (with the outcomes and positions written in the same batch).
Every adapter runs these cases."""

from __future__ import annotations

from datetime import timedelta

from tests.contract.store_support import T0, StoreContract, mem

from mnemo.domain.projection import (
    AuditRecord,
    DropTimer,
    Outcome,
    OutcomeKind,
    PutAudit,
    PutOutcome,
    PutTimer,
    Timer,
)
from mnemo.ports import MemoryStore


class TestTimersAndAudit(StoreContract):
    def test_outcomes_timers_audit_and_positions(self, store: MemoryStore) -> None:
        o = Outcome("acme", "e1", 0, OutcomeKind.REJECTED, reason_code="X", detail="d")
        due = Timer("acme", mem(1).memory_id, T0 + timedelta(hours=1))
        later = Timer("acme", mem(2).memory_id, T0 + timedelta(hours=2))
        record = AuditRecord(
            "acme", "user:U1", 1, "e1", "ObservationRecorded", 1, "0" * 64, "f" * 64
        )
        second = AuditRecord("acme", "user:U1", 2, "e2", "MemoryRegistered", 2, "f" * 64, "e" * 64)
        other_stream = AuditRecord(
            "acme", "user:U2", 1, "e3", "ObservationRecorded", 3, "0" * 64, "d" * 64
        )
        with store.transaction() as tx:
            tx.apply(
                [PutOutcome(o), PutOutcome(o), PutTimer(due), PutTimer(later), PutAudit(record)]
            )
            tx.set_position("audit", 7)
        assert store.outcome("acme", "e1") == [o]
        assert store.outcome("other", "e1") == []
        assert store.due_timers(T0 + timedelta(hours=1), 10) == [due]
        assert store.due_timers(T0, 10) == []
        with store.transaction() as tx:
            tx.apply([DropTimer("acme", due.memory_id)])
            assert tx.last_audit("acme", "user:U1") == record
            assert tx.last_audit("acme", "user:U2") is None
            assert tx.last_audit("other", "user:U1") is None
            tx.apply([PutAudit(second), PutAudit(other_stream)])
            # the transaction sees the links it has just written
            assert tx.last_audit("acme", "user:U1") == second
        assert store.due_timers(T0 + timedelta(hours=3), 10) == [later]
        assert store.audit_trail("acme", "user:U1", 0, 10) == [record, second]
        assert store.audit_trail("acme", "user:U1", 1, 10) == [second]
        assert store.audit_trail("acme", "user:U1", 0, 1) == [record]
        assert store.audit_trail("acme", "user:U2", 0, 10) == [other_stream]
        assert store.audit_trail("other", "user:U1", 0, 10) == []
        assert store.audit_heads("acme") == [second, other_stream]
        assert store.audit_heads("other") == []
        assert store.position("audit") == 7
