"""Contract of the ProjectionStore port of the read models: the consumers' batches (the
registrar's transaction: its lookups see its own writes, read-ahead answers as one at a
time, a failed batch leaves nothing), positions and the claims that fence an older holder.
Every adapter runs these cases."""

from __future__ import annotations

import os
import socket
from datetime import datetime, timedelta

import pytest
from tests.contract.store_support import T0, StoreContract, mem

from mnemo.domain.errors import FencedOff
from mnemo.domain.ids import derived_id
from mnemo.domain.memory import Memory, MemoryStatus, MemoryType
from mnemo.domain.projection import (
    BumpStats,
    MemoryStats,
    Outcome,
    OutcomeKind,
    PutMemory,
    PutOutcome,
    SetStatus,
)
from mnemo.ports import MemoryStore


class TestProjection(StoreContract):
    def test_lookups_inside_a_transaction_see_its_own_writes(self, store: MemoryStore) -> None:
        a = mem(1, key="size", value="L")
        with store.transaction() as tx:
            tx.apply([PutMemory(a)])
            assert tx.current_for_key("acme", "user:U1", "size") == a
            assert tx.find_by_hash("acme", "user:U1", "hash1") == a
            tx.apply([SetStatus("acme", a.memory_id, MemoryStatus.SUPERSEDED)])
            assert tx.current_for_key("acme", "user:U1", "size") is None
            assert tx.find_by_hash("acme", "user:U1", "hash1") is None

    def test_hash_lookups_read_ahead_answer_as_one_at_a_time(self, store: MemoryStore) -> None:
        stored = mem(1)  # content hash "hash1"
        retired = mem(2)
        other_stream = mem(3, stream="user:U2")
        other_tenant = mem(4, tenant="other")
        self.put(store, stored, retired, other_stream, other_tenant)
        with store.transaction() as tx:
            tx.apply([SetStatus("acme", retired.memory_id, MemoryStatus.SUPERSEDED)])
        keys = [
            ("acme", "user:U1", stored.content_hash),
            ("acme", "user:U1", retired.content_hash),
            ("acme", "user:U1", other_stream.content_hash),
            ("acme", "user:U1", "nothing"),
            ("other", "user:U1", other_tenant.content_hash),
        ]
        with store.transaction() as tx:
            one_at_a_time = [tx.find_by_hash(*k) for k in keys]
        assert one_at_a_time == [stored, None, None, None, other_tenant]
        fresh = mem(5)
        with store.transaction() as tx:
            tx.prefetch_hashes([*keys, ("acme", "user:U1", fresh.content_hash)])
            assert [tx.find_by_hash(*k) for k in keys] == one_at_a_time
            # the batch's own writes still count after the read-ahead
            tx.apply(
                [PutMemory(fresh), SetStatus("acme", stored.memory_id, MemoryStatus.FORGOTTEN)]
            )
            assert tx.find_by_hash("acme", "user:U1", fresh.content_hash) == fresh
            assert tx.find_by_hash("acme", "user:U1", stored.content_hash) is None

    def test_the_memory_before_is_the_latest_earlier_one_of_its_type(
        self, store: MemoryStore
    ) -> None:
        turns = [mem(n, mtype=MemoryType.HISTORY) for n in (1, 3, 6)]
        fact = mem(4)
        elsewhere = mem(5, mtype=MemoryType.HISTORY, stream="user:U2")
        other_tenant = mem(5, mtype=MemoryType.HISTORY, tenant="other")
        self.put(store, turns[0], turns[1], fact, elsewhere, other_tenant)
        history = MemoryType.HISTORY
        with store.transaction() as tx:
            tx.apply(
                [PutMemory(turns[2]), SetStatus("acme", turns[1].memory_id, MemoryStatus.FORGOTTEN)]
            )
            before = [tx.memory_before("acme", "user:U1", m.memory_id, history) for m in turns]
            assert before == [
                None,
                turns[0],
                turns[1].model_copy(update={"status": MemoryStatus.FORGOTTEN}),
            ]
            last = derived_id(T0 + timedelta(seconds=7), "acme", "7")
            assert tx.memory_before("acme", "user:U1", last, history) == turns[2]
            assert tx.memory_before("acme", "user:U1", last, MemoryType.FACT) == fact
            assert tx.memory_before("acme", "user:U3", last, history) is None

    def test_turn_lookups_read_ahead_answer_as_one_at_a_time(self, store: MemoryStore) -> None:
        """The turn before each of a batch's new turns, read for the whole batch, is the one
        memory_before finds alone: with the batch's own writes, another stream's and
        tenant's turns, no turn at all, and a turn further back than the first page of the
        stream (more than 50 memories of other types after it)."""
        history = MemoryType.HISTORY
        old_turn = mem(1, mtype=history)
        facts = [mem(n) for n in range(2, 62)]  # 60 facts after it, then two turns
        turns = [mem(n, mtype=history) for n in (62, 64)]
        elsewhere = mem(63, mtype=history, stream="user:U2")
        other_tenant = mem(63, mtype=history, tenant="other")
        self.put(store, old_turn, *facts, turns[0], elsewhere, other_tenant)
        new = [mem(n, mtype=history) for n in (65, 66)]
        deep = derived_id(T0 + timedelta(seconds=40), "acme", "40")  # among the facts
        keys = [
            ("acme", "user:U1", turns[1].memory_id, history),
            ("acme", "user:U1", new[0].memory_id, history),
            ("acme", "user:U1", new[1].memory_id, history),
            ("acme", "user:U1", deep, history),
            ("acme", "user:U1", deep, MemoryType.FACT),
            ("acme", "user:U2", new[0].memory_id, history),
            ("acme", "user:U3", new[0].memory_id, history),
            ("other", "user:U1", new[0].memory_id, history),
            ("acme", "user:U1", old_turn.memory_id, history),
            ("acme", "user:U1", turns[0].memory_id, history),  # 60 facts back
        ]

        def answers(read_ahead: bool) -> list[Memory | None]:
            with store.transaction() as tx:
                if read_ahead:  # with a content-hash lookup in the same wave
                    tx.prefetch_lookups([("acme", "user:U1", "hash12")], keys)
                tx.apply(
                    [
                        PutMemory(turns[1]),
                        PutMemory(new[0]),
                        SetStatus("acme", turns[0].memory_id, MemoryStatus.FORGOTTEN),
                    ]
                )
                found = [tx.memory_before(*k) for k in keys]
                return [*found, tx.find_by_hash("acme", "user:U1", "hash12")]

        one_at_a_time = answers(False)
        assert one_at_a_time == [
            turns[0].model_copy(update={"status": MemoryStatus.FORGOTTEN}),
            turns[1],
            new[0],
            old_turn,
            facts[37],
            elsewhere,
            None,
            other_tenant,
            None,
            old_turn,
            facts[10],
        ]
        assert answers(True) == one_at_a_time

    def test_a_failed_transaction_leaves_nothing_behind(self, store: MemoryStore) -> None:
        class Boom(Exception):
            pass

        def fail_midway() -> None:
            with store.transaction() as tx:
                tx.apply([PutMemory(mem(1))])
                tx.set_position("registrar", 10)
                raise Boom

        with pytest.raises(Boom):
            fail_midway()
        assert store.position("registrar") == 0
        assert store.counts()["memories"] == 0

    def test_claims_name_their_epoch_and_the_process_that_made_them(
        self, store: MemoryStore
    ) -> None:
        assert store.claims(["registrar/0", "registrar/1"]) == {}
        first = store.claim("registrar/0")
        again = store.claim("registrar/0")
        other = store.claim("indexer/0")
        claims = store.claims(["registrar/0", "indexer/0", "registrar/1", "registrar/0"])
        assert set(claims) == {"registrar/0", "indexer/0"}
        assert (claims["registrar/0"].epoch, claims["indexer/0"].epoch) == (again, other)
        assert again > first
        holder = claims["registrar/0"].holder
        host, pid, _ = holder.split("/")
        assert (host, int(pid)) == (socket.gethostname(), os.getpid())
        assert claims["indexer/0"].holder == holder  # one store, one holder

    def test_each_claim_raises_the_epoch_and_fences_the_older_holder(
        self, store: MemoryStore
    ) -> None:
        first = store.claim("registrar/3")
        with store.transaction() as tx:
            tx.apply([PutMemory(mem(1))])
            tx.set_position("registrar/3", 5, epoch=first)
        second = store.claim("registrar/3")
        assert second > first
        assert store.claim("indexer/3") >= 1  # every name has epochs of its own

        def zombie() -> None:
            with store.transaction() as tx:
                tx.apply([PutMemory(mem(2))])
                tx.apply([PutOutcome(Outcome("acme", "e-zombie", 0, OutcomeKind.DUPLICATE))])
                tx.set_position("registrar/3", 9, epoch=first)

        with pytest.raises(FencedOff) as refused:
            zombie()
        assert refused.value.code == "PARTITION_FENCED"
        # nothing of the refused commit is there
        assert store.position("registrar/3") == 5
        assert store.get("acme", mem(2).memory_id) is None
        assert store.outcome("acme", "e-zombie") == []
        # the new holder commits; a position-only commit is fenced too
        with store.transaction() as tx:
            tx.apply([PutMemory(mem(3))])
            tx.set_position("registrar/3", 7, epoch=second)
        assert store.position("registrar/3") == 7
        with pytest.raises(FencedOff), store.transaction() as tx:
            tx.set_position("registrar/3", 12, epoch=first)
        assert store.position("registrar/3") == 7
        with store.transaction() as tx:
            tx.set_position("registrar/3", 8, epoch=second)
        assert store.position("registrar/3") == 8
        assert store.positions(["registrar/3"]) == {"registrar/3": 8}
        assert store.get("acme", mem(3).memory_id) == mem(3)

    def test_usage_counted_by_several_partitions_adds_up_and_a_fenced_owner_counts_nothing(
        self, store: MemoryStore
    ) -> None:
        m = mem(1, stream="user:U2")
        self.put(store, m)
        early, late = T0 + timedelta(minutes=1), T0 + timedelta(minutes=5)
        one, two = store.claim("registrar/1"), store.claim("registrar/2")

        def bump(name: str | None, epoch: int | None, at: datetime, **counts: int) -> None:
            with store.transaction() as tx:
                tx.apply([BumpStats("acme", m.memory_id, at, **counts)])
                tx.apply([BumpStats("acme", m.memory_id, at, included=1)])
                if name is not None:
                    tx.set_position(name, 3, epoch=epoch)

        bump("registrar/1", one, late, cited=1)
        bump("registrar/2", two, early, cited=2, corrected=1)
        bump(None, None, early, truncated=1)  # a commit outside any partition counts too
        expected = MemoryStats("acme", m.memory_id, 3, 1, 3, 1, late)
        assert store.memory_stats("acme", [m.memory_id]) == [expected]
        # partition 1 changes hands: its former owner's usage is refused with its commit
        store.claim("registrar/1")
        with pytest.raises(FencedOff):
            bump("registrar/1", one, late + timedelta(days=1), cited=5)
        assert store.memory_stats("acme", [m.memory_id]) == [expected]
        assert store.memory_stats("acme", [mem(2).memory_id]) == []
        assert store.counts()["memory_stats"] == 1
