"""Contract of the MemoryReads port of the read models: memories as the use cases read them,
tenant by tenant, and what registration made of each event. Every adapter runs these cases."""

from __future__ import annotations

from datetime import timedelta

from tests.contract.store_support import T0, StoreContract, mem

from mnemo.domain.memory import MemoryStatus, MemoryType
from mnemo.domain.projection import (
    SetStatus,
)
from mnemo.domain.sealed import EncryptionBlock
from mnemo.ports import MemoryQuery, MemoryStore


class TestMemoryReads(StoreContract):
    def test_put_get_and_tenant_scoping(self, store: MemoryStore) -> None:
        a = mem(1)
        self.put(store, a)
        assert store.get("acme", a.memory_id) == a
        assert store.get("other", a.memory_id) is None
        assert store.get_many("other", [a.memory_id]) == []
        assert store.get_many("acme", [a.memory_id, a.memory_id]) == [a]

    def test_query_filters(self, store: MemoryStore) -> None:
        memories = [
            mem(1, mtype=MemoryType.PREFERENCE, tags=("apparel",)),
            mem(2, mtype=MemoryType.CONSTRAINT),
            mem(3, stream="user:U2"),
            mem(4, valid_until=T0 + timedelta(hours=1), tags=("intent",)),
            mem(5, tenant="other"),
        ]
        self.put(store, *memories)
        ids = lambda q: [m.memory_id for m in store.query("acme", q)]  # noqa: E731
        assert ids(MemoryQuery(stream="user:U1")) == sorted(
            m.memory_id for m in [*memories[:2], memories[3]]
        )
        assert ids(MemoryQuery(types=(MemoryType.CONSTRAINT,))) == [memories[1].memory_id]
        assert ids(MemoryQuery(tags=("apparel", "intent"))) == sorted(
            [memories[0].memory_id, memories[3].memory_id]
        )
        assert memories[3].memory_id not in ids(MemoryQuery(live_at=T0 + timedelta(hours=1)))
        assert memories[3].memory_id in ids(MemoryQuery(live_at=T0 + timedelta(minutes=59)))
        page = store.query("acme", MemoryQuery(limit=2))
        rest = store.query("acme", MemoryQuery(limit=10, after=page[-1].memory_id))
        assert len(page) + len(rest) == 4

    def test_several_queries_at_once_answer_what_each_answers_alone(
        self, store: MemoryStore
    ) -> None:
        memories = [
            mem(1, tags=("episode:a",)),
            mem(2, tags=("episode:a",), mtype=MemoryType.CONSTRAINT),
            mem(3, tags=("episode:a",), stream="user:U2"),
            mem(4, tags=("episode:b",), valid_until=T0 + timedelta(minutes=5)),
            mem(5, tags=("episode:b", "episode:a")),
            mem(6, tags=("episode:a",), tenant="other"),
            mem(7, tags=("episode:c",)),
            mem(8, tags=("episode:c",)),
            mem(9, tags=("episode:c",)),
        ]
        self.put(store, *memories)
        queries = [
            MemoryQuery(stream="user:U1", tags=("episode:a",)),
            MemoryQuery(tags=("episode:a",), types=(MemoryType.FACT,)),
            MemoryQuery(stream="user:U1", tags=("episode:b",), live_at=T0 + timedelta(hours=1)),
            MemoryQuery(tags=("episode:c",), limit=2),  # more members than its limit
            MemoryQuery(tags=("episode:c",), after=memories[6].memory_id),
            MemoryQuery(tags=("episode:none",)),
            MemoryQuery(tags=("episode:a",), limit=0),
            MemoryQuery(stream="user:U2"),  # not by tag
        ]
        alone = [[m.memory_id for m in store.query("acme", q)] for q in queries]
        together = [[m.memory_id for m in found] for found in store.query_each("acme", queries)]
        assert together == alone
        # what each answers (so that agreeing on nothing cannot pass)
        ids = [m.memory_id for m in memories]
        assert alone[0] == sorted([ids[0], ids[1], ids[4]])
        assert alone[1] == sorted([ids[0], ids[2], ids[4]])
        assert alone[2] == [ids[4]]
        assert alone[3] == sorted(ids[6:9])[:2]
        assert alone[4] == sorted(ids[7:9])
        assert alone[5] == alone[6] == []
        assert alone[7] == [ids[2]]
        assert [[m.memory_id for m in f] for f in store.query_each("other", queries[:1])] == [
            [ids[5]]
        ]
        assert store.query_each("acme", []) == []

    def test_history_keeps_every_version(self, store: MemoryStore) -> None:
        v1, v2 = mem(1, key="size", value="L"), mem(2, key="size", value="XL", version=2)
        self.put(store, v1, v2)
        with store.transaction() as tx:
            tx.apply([SetStatus("acme", v1.memory_id, MemoryStatus.SUPERSEDED)])
        assert [m.value for m in store.history("acme", "user:U1", "size")] == ["L", "XL"]
        assert store.query("acme", MemoryQuery(key="size"))[0].value == "XL"

    def test_erasing_content(self, store: MemoryStore) -> None:
        a = mem(1, content="secret plans for tuesday")
        self.put(store, a)
        with store.transaction() as tx:
            tx.apply([SetStatus("acme", a.memory_id, MemoryStatus.FORGOTTEN, erase_content=True)])
        forgotten = store.get("acme", a.memory_id)
        assert forgotten is not None
        assert forgotten.content == ""
        assert forgotten.status is MemoryStatus.FORGOTTEN

    def test_erasing_drops_the_sealed_values(self, store: MemoryStore) -> None:
        block = EncryptionBlock(
            key_id="acme/user:U1", key_version=1, wrapped_key="d3JhcHBlZA==", values={"x:h1": "c"}
        )
        a = mem(1, content="card ⟦bank_card:h0123456789abcdef⟧").model_copy(
            update={"sealed": block}
        )
        self.put(store, a)
        stored = store.get("acme", a.memory_id)
        assert stored is not None
        assert stored.sealed == block
        with store.transaction() as tx:
            tx.apply([SetStatus("acme", a.memory_id, MemoryStatus.FORGOTTEN, erase_content=True)])
        erased = store.get("acme", a.memory_id)
        assert erased is not None
        assert erased.sealed is None
