"""Contract of the StoreOperations port of the read models: forgetting a tenant (every read
model's rows), the checksum a rebuild is compared by, and the reset before it. Every adapter
runs these cases."""

from __future__ import annotations

from datetime import timedelta

from tests.contract.store_support import T0, StoreContract, mem

from mnemo.domain.context import ContextTemplate
from mnemo.domain.memory import MemoryStatus
from mnemo.domain.projection import (
    BumpStats,
    ContextRecord,
    Outcome,
    OutcomeKind,
    PurgeTenant,
    PutContextRecord,
    PutMemory,
    PutOutcome,
    PutTemplate,
    PutTimeline,
    PutTimer,
    PutWeight,
    SetStatus,
    TimelineEntry,
    Timer,
)
from mnemo.ports import MemoryQuery, MemoryStore


class TestOperations(StoreContract):
    def test_tenant_memories_and_purging_a_tenant(self, store: MemoryStore) -> None:
        a = mem(1, content="alpha plans", stream="user:U1", key="size", value="M", tags=("t",))
        b = mem(2, content="beta plans", stream="user:U2")
        other = mem(3, tenant="globex", content="gamma plans", key="size", tags=("t",))
        self.put(store, a, b, other)
        with store.transaction() as tx:
            assert [m.memory_id for m in tx.tenant_memories("acme")] == sorted(
                [a.memory_id, b.memory_id]
            )
            tx.apply([PurgeTenant("acme")])
        assert store.query("acme", MemoryQuery(statuses=tuple(MemoryStatus))) == []
        assert [m.memory_id for m in store.query("globex", MemoryQuery())] == [other.memory_id]

    def test_purging_a_tenant_deletes_every_read_model_row(self, store: MemoryStore) -> None:
        """A purged tenant's rows are gone, not merely marked: memories, keys, tags, terms,
        outcomes, timers, context records, usage counters, weights and timelines. Its
        templates stay, another tenant keeps everything, and what the same
        batch writes after the purge (the forget request's own outcome) stays too."""
        kept: dict[str, dict[str, object]] = {}
        memories = {}
        for tenant in ("acme", "globex"):
            m = mem(1 if tenant == "acme" else 2, tenant=tenant, content="alpha plans",
                    key="size", value="M", tags=("shoes",))  # fmt: skip
            memories[tenant] = m
            outcome = Outcome(tenant, "e1", 0, OutcomeKind.REGISTERED, memory_id=m.memory_id)
            timer = Timer(tenant, m.memory_id, T0 + timedelta(hours=1))
            record = ContextRecord(tenant, "r1", "user:U1", "e2", "default@1", (m.memory_id,),
                                   (), 12)  # fmt: skip
            entry = TimelineEntry(tenant, m.memory_id, 5, "e1", "MemoryRegistered",
                                  "registered", T0.isoformat())  # fmt: skip
            template = ContextTemplate.model_validate(
                {
                    "name": "brief",
                    "version": 1,
                    "sections": [{"name": "facts", "priority": 1, "budget": 100}],
                }
            )
            with store.transaction() as tx:
                tx.apply(
                    [
                        PutMemory(m),
                        PutOutcome(outcome),
                        PutTimer(timer),
                        PutContextRecord(record),
                        BumpStats(tenant, m.memory_id, T0, included=1),
                        PutWeight(tenant, m.memory_id, 0.8, 0.5, 0.8),
                        PutTimeline(entry),
                        PutTemplate(tenant, template),
                    ]
                )
            kept[tenant] = {"outcome": outcome, "timer": timer, "record": record,
                            "entry": entry, "template": template}  # fmt: skip
        a, g = memories["acme"], memories["globex"]
        after = Outcome("acme", "forget", 0, OutcomeKind.APPLIED)
        with store.transaction() as tx:
            tx.apply([SetStatus("acme", a.memory_id, MemoryStatus.FORGOTTEN, erase_content=True)])
            tx.apply([PurgeTenant("acme"), PutOutcome(after)])
            assert tx.get("acme", a.memory_id) is None
            assert tx.current_for_key("acme", a.stream, "size") is None
            assert tx.weight_of("acme", a.memory_id) is None
            assert tx.context_record("acme", "r1") is None

        assert store.get("acme", a.memory_id) is None
        assert store.get_many("acme", [a.memory_id]) == []
        assert store.query("acme", MemoryQuery(statuses=tuple(MemoryStatus))) == []
        assert store.query("acme", MemoryQuery(stream=a.stream, statuses=tuple(MemoryStatus))) == []
        assert store.query("acme", MemoryQuery(tags=("shoes",), statuses=tuple(MemoryStatus))) == []
        assert store.history("acme", a.stream, "size") == []
        assert store.outcome("acme", "e1") == []
        assert store.outcome("acme", "forget") == [after]
        assert store.context_record("acme", "r1") is None
        assert store.context_records("acme", 10) == []
        assert store.memory_stats("acme", [a.memory_id]) == []
        assert store.timeline("acme", a.memory_id) == []
        due = T0 + timedelta(hours=2)
        assert store.due_timers(due, 10) == [kept["globex"]["timer"]]
        assert store.template("acme", "brief", 1) == kept["acme"]["template"]
        with store.transaction() as tx:
            assert tx.tenant_memories("acme") == []
            assert tx.weight_of("acme", a.memory_id) is None
            assert tx.current_for_key("acme", a.stream, "size") is None

        assert store.get("globex", g.memory_id) == g
        assert store.history("globex", g.stream, "size") == [g]
        assert store.query("globex", MemoryQuery(tags=("shoes",))) == [g]
        assert store.outcome("globex", "e1") == [kept["globex"]["outcome"]]
        assert store.context_record("globex", "r1") == kept["globex"]["record"]
        assert [s.included for s in store.memory_stats("globex", [g.memory_id])] == [1]
        assert store.timeline("globex", g.memory_id) == [kept["globex"]["entry"]]
        with store.transaction() as tx:
            assert tx.weight_of("globex", g.memory_id) == (0.8, 0.5, 0.8)
            assert tx.current_for_key("globex", g.stream, "size") == g

        # the purged tenant starts afresh: the same key is its own again
        fresh = mem(9, content="alpha again", key="size", value="L")
        self.put(store, fresh)
        with store.transaction() as tx:
            assert tx.current_for_key("acme", fresh.stream, "size") == fresh
        assert store.history("acme", fresh.stream, "size") == [fresh]

    def test_checksum_follows_content_and_reset_clears_everything(self, store: MemoryStore) -> None:
        empty = store.checksum()
        self.put(store, mem(1))
        one = store.checksum()
        assert one != empty
        self.put(store, mem(1))  # idempotent
        assert store.checksum() == one
        with store.transaction() as tx:
            tx.set_position("registrar", 3)
        assert store.checksum() == one  # positions are not content
        store.reset()
        assert store.checksum() == empty
        assert store.position("registrar") == 0
