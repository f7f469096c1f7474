"""Contract of the toolchain read model (MemoryStore.toolchain and the transaction's
toolchain lookups); every adapter runs these cases."""

from __future__ import annotations

from datetime import timedelta

import pytest
from tests.contract.store_support import T0, StoreContract

from mnemo.domain.projection import DropToolchain, PurgeTenant, PutToolchain
from mnemo.domain.toolchain import StepDone, StepError, StepFailure, ToolchainState
from mnemo.ports import MemoryStore


def chain(toolchain_id: str, *, tenant: str = "acme", stream: str = "user:U1") -> ToolchainState:
    return ToolchainState(
        tenant=tenant,
        toolchain_id=toolchain_id,
        stream=stream,
        steps=("create_order", "payment_link"),
        ttl_seconds=3600,
        started_at=T0,
        expires_at=T0 + timedelta(hours=1),
        started_event_id="0190a6a0-0000-7000-8000-000000000001",
        plan_digest="p",
        updated_at=T0,
    )


def progressed(state: ToolchainState) -> ToolchainState:
    done = StepDone(
        step_id="create_order",
        output='{"order_id":"O-1","note":"是"}',
        digest="d1",
        at=T0 + timedelta(seconds=1),
        event_id="0190a6a0-0000-7000-8000-000000000002",
    )
    failure = StepFailure(
        step_id="payment_link",
        error=StepError(type="timeout", field="amount", reason="slow", retryable=True),
        digest="d2",
        attempts=2,
        at=T0 + timedelta(seconds=2),
        event_id="0190a6a0-0000-7000-8000-000000000003",
    )
    return state.with_done(done).with_failure(failure)


class TestToolchainStore(StoreContract):
    def test_a_state_reads_back_whole_and_only_in_its_tenant(self, store: MemoryStore) -> None:
        state = progressed(chain("pay-1"))
        with store.transaction() as tx:
            tx.apply([PutToolchain(state)])
        assert store.toolchain("acme", "pay-1") == state
        assert store.toolchain("other", "pay-1") is None
        assert store.toolchain("acme", "pay-2") is None
        found = store.toolchain("acme", "pay-1")
        assert found is not None
        assert found.next_step() == "payment_link"

    def test_a_transaction_sees_its_own_writes_and_drops(self, store: MemoryStore) -> None:
        first = chain("pay-1")
        with store.transaction() as tx:
            tx.apply([PutToolchain(first), PutToolchain(chain("pay-2", stream="user:U2"))])
            assert tx.toolchain("acme", "pay-1") == first
            assert tx.stream_toolchains("acme", "user:U1") == ["pay-1"]
        later = progressed(first)
        with store.transaction() as tx:
            assert tx.stream_toolchains("acme", "user:U1") == ["pay-1"]
            tx.apply([PutToolchain(later)])
            assert tx.toolchain("acme", "pay-1") == later
            tx.apply([DropToolchain("acme", "pay-1")])
            assert tx.toolchain("acme", "pay-1") is None
            assert tx.stream_toolchains("acme", "user:U1") == []
        assert store.toolchain("acme", "pay-1") is None
        assert store.toolchain("acme", "pay-2") is not None
        with store.transaction() as tx:
            assert tx.stream_toolchains("acme", "user:U1") == []
            assert tx.stream_toolchains("acme", "user:U2") == ["pay-2"]

    def test_drops_are_idempotent_and_a_rolled_back_batch_writes_nothing(
        self, store: MemoryStore
    ) -> None:
        with store.transaction() as tx:
            tx.apply([DropToolchain("acme", "never")])

        def crashing_batch() -> None:
            with store.transaction() as tx:
                tx.apply([PutToolchain(chain("pay-1"))])
                raise RuntimeError("crash mid-batch")

        with pytest.raises(RuntimeError):
            crashing_batch()
        assert store.toolchain("acme", "pay-1") is None

    def test_a_tenant_purge_drops_its_toolchains_only(self, store: MemoryStore) -> None:
        with store.transaction() as tx:
            tx.apply([PutToolchain(chain("pay-1")), PutToolchain(chain("pay-1", tenant="globex"))])
        with store.transaction() as tx:
            tx.apply([PurgeTenant("acme")])
            assert tx.toolchain("acme", "pay-1") is None
            assert tx.stream_toolchains("acme", "user:U1") == []
        assert store.toolchain("acme", "pay-1") is None
        assert store.toolchain("globex", "pay-1") is not None

    def test_counts_checksum_and_reset_include_toolchains(self, store: MemoryStore) -> None:
        empty = store.checksum()
        with store.transaction() as tx:
            tx.apply([PutToolchain(chain("pay-1"))])
        assert store.counts()["toolchains"] == 1
        one = store.checksum()
        assert one != empty
        with store.transaction() as tx:
            tx.apply([PutToolchain(chain("pay-1"))])
        assert store.checksum() == one
        store.reset()
        assert store.toolchain("acme", "pay-1") is None
        assert store.checksum() == empty
