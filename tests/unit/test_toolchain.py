"""Toolchains: the registrar's pure projection of their events, and the decay consumer's
expiry timers and decisions (mnemo.handlers.toolchain)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mnemo.domain.errors import InvalidInput
from mnemo.domain.events import Actor, ActorKind, Envelope, validate_envelope
from mnemo.domain.ids import new_event_id
from mnemo.domain.projection import (
    DropTimer,
    DropToolchain,
    OutcomeKind,
    PutOutcome,
    PutTimer,
    PutToolchain,
    Write,
)
from mnemo.domain.toolchain import MAX_OUTPUT_BYTES, ToolchainState, ToolchainStatus
from mnemo.handlers import Decision, decay, toolchain

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
PLAN = ["create_order", "payment_link", "confirm_payment"]


def event(
    event_type: str, payload: dict[str, Any], at: datetime = T0, stream: str = "user:U1"
) -> Envelope:
    return Envelope(
        event_id=new_event_id(at),
        type=event_type,
        schema_version=1,
        tenant="acme",
        stream=stream,
        occurred_at=at,
        actor=Actor(kind=ActorKind.AGENT, id="agent"),
        payload=payload,
    )


def started(ttl: int = 3600, at: datetime = T0, steps: list[str] = PLAN) -> Envelope:
    return event(
        "ToolchainStarted", {"toolchain_id": "pay-1", "steps": steps, "ttl_seconds": ttl}, at
    )


def completed(step: str, output: Any, at: datetime = T0, stream: str = "user:U1") -> Envelope:
    payload = {"toolchain_id": "pay-1", "step_id": step, "output": json.dumps(output)}
    return event("ToolchainStepCompleted", payload, at, stream)


def failed(step: str, reason: str = "card declined", at: datetime = T0) -> Envelope:
    error = {"type": "payment", "field": "card", "reason": reason, "retryable": True}
    return event(
        "ToolchainStepFailed", {"toolchain_id": "pay-1", "step_id": step, "error": error}, at
    )


class Store:
    """An in-memory toolchain read model applying the handler's writes."""

    def __init__(self) -> None:
        self.rows: dict[tuple[str, str], ToolchainState] = {}
        self.outcomes: dict[str, PutOutcome] = {}

    def toolchain(self, tenant: str, toolchain_id: str) -> ToolchainState | None:
        return self.rows.get((tenant, toolchain_id))

    def stream_toolchains(self, tenant: str, stream: str) -> list[str]:
        return sorted(t for (tn, t), s in self.rows.items() if tn == tenant and s.stream == stream)

    def apply(self, writes: list[Write]) -> None:
        for w in writes:
            if isinstance(w, PutToolchain):
                self.rows[(w.state.tenant, w.state.toolchain_id)] = w.state
            elif isinstance(w, DropToolchain):
                self.rows.pop((w.tenant, w.toolchain_id), None)
            elif isinstance(w, PutOutcome):
                self.outcomes[w.outcome.event_id] = w

    def run(self, env: Envelope) -> Decision:
        decision = toolchain.handle(env, self)
        self.apply(decision.writes)
        return decision

    def outcome(self, env: Envelope) -> tuple[OutcomeKind, str | None]:
        o = self.outcomes[env.event_id].outcome
        return o.kind, o.reason_code


def test_a_start_makes_the_state_and_next_is_the_first_step() -> None:
    store = Store()
    store.run(started())
    state = store.toolchain("acme", "pay-1")
    assert state is not None
    assert state.next_step() == "create_order"
    assert state.expires_at == T0 + timedelta(hours=1)
    assert state.status(T0) is ToolchainStatus.RUNNING


def test_the_default_ttl_is_a_day() -> None:
    env = validate_envelope(
        {
            "event_id": new_event_id(T0),
            "type": "ToolchainStarted",
            "schema_version": 1,
            "tenant": "acme",
            "stream": "user:U1",
            "occurred_at": T0.isoformat(),
            "actor": {"kind": "agent", "id": "a"},
            "payload": {"toolchain_id": "pay-1", "steps": PLAN},
        }
    )
    store = Store()
    store.run(env)
    state = store.toolchain("acme", "pay-1")
    assert state is not None
    assert state.expires_at == T0 + timedelta(hours=24)


def test_a_failed_step_two_resumes_there_and_never_reruns_step_one() -> None:
    store = Store()
    store.run(started())
    store.run(completed("create_order", {"order": "O-1"}, T0 + timedelta(seconds=1)))
    store.run(failed("payment_link", at=T0 + timedelta(seconds=2)))
    state = store.toolchain("acme", "pay-1")
    assert state is not None
    assert state.status(T0 + timedelta(seconds=3)) is ToolchainStatus.FAILED
    assert state.next_step() == "payment_link"
    fail = state.failure("payment_link")
    assert fail is not None
    assert fail.error.reason == "card declined"
    assert fail.attempts == 1
    # the retried step succeeds: the failure is gone, the chain moves on
    store.run(completed("payment_link", {"url": "https://pay/1"}, T0 + timedelta(seconds=4)))
    state = store.toolchain("acme", "pay-1")
    assert state is not None
    assert state.next_step() == "confirm_payment"
    assert state.failures == ()
    assert [d.step_id for d in state.done] == ["create_order", "payment_link"]
    store.run(completed("confirm_payment", {"paid": True}, T0 + timedelta(seconds=5)))
    state = store.toolchain("acme", "pay-1")
    assert state is not None
    assert state.next_step() is None
    # finished before its TTL: completed, even when read after it
    assert state.status(T0 + timedelta(days=2)) is ToolchainStatus.COMPLETED


def test_the_same_step_twice_is_recorded_once_and_other_content_is_refused() -> None:
    store = Store()
    store.run(started())
    first = completed("create_order", {"order": "O-1", "amount": 10})
    store.run(first)
    before = store.toolchain("acme", "pay-1")
    # the same content, keys in another order: a duplicate, nothing written
    again = event(
        "ToolchainStepCompleted",
        {
            "toolchain_id": "pay-1",
            "step_id": "create_order",
            "output": '{"amount": 10,"order":"O-1"}',
        },
    )
    decided = store.run(again)
    assert not any(isinstance(w, PutToolchain) for w in decided.writes)
    assert store.outcome(again) == (OutcomeKind.DUPLICATE, None)
    # another order for the same step: refused, nothing written
    other = completed("create_order", {"order": "O-2", "amount": 10})
    decided = store.run(other)
    assert not any(isinstance(w, PutToolchain) for w in decided.writes)
    assert store.outcome(other) == (OutcomeKind.REJECTED, "STEP_CONFLICT")
    # a completed step does not fail afterwards either
    late = failed("create_order")
    store.run(late)
    assert store.outcome(late) == (OutcomeKind.REJECTED, "STEP_CONFLICT")
    assert store.toolchain("acme", "pay-1") == before


def test_a_repeated_failure_counts_once_a_new_one_counts_again() -> None:
    store = Store()
    store.run(started())
    store.run(failed("create_order", "timeout"))
    store.run(failed("create_order", "timeout"))
    state = store.toolchain("acme", "pay-1")
    assert state is not None
    assert state.failures[0].attempts == 1
    store.run(failed("create_order", "rate limited"))
    state = store.toolchain("acme", "pay-1")
    assert state is not None
    assert state.failures[0].attempts == 2
    assert state.failures[0].error.reason == "rate limited"


@pytest.mark.parametrize(
    ("env", "code"),
    [
        (completed("create_order", 1), "TOOLCHAIN_NOT_FOUND"),
        (completed("refund", 1), "STEP_NOT_IN_PLAN"),
        (completed("create_order", 1, stream="user:U2"), "TOOLCHAIN_NOT_FOUND"),
        (completed("create_order", 1, T0 + timedelta(hours=1)), "TOOLCHAIN_EXPIRED"),
    ],
    ids=["unknown", "not-in-plan", "other-stream", "at-expiry"],
)
def test_bad_step_records_are_refused_with_a_code_and_store_nothing(
    env: Envelope, code: str
) -> None:
    store = Store()
    if code != "TOOLCHAIN_NOT_FOUND" or env.stream != "user:U1":
        store.run(started())
    before = dict(store.rows)
    decided = store.run(env)
    assert store.outcome(env) == (OutcomeKind.REJECTED, code)
    assert not any(isinstance(w, PutToolchain) for w in decided.writes)
    assert store.rows == before


def test_a_second_start_with_another_plan_is_refused() -> None:
    store = Store()
    store.run(started())
    again = started()
    store.run(again)
    assert store.outcome(again) == (OutcomeKind.DUPLICATE, None)
    other = started(steps=["a", "b"])
    store.run(other)
    assert store.outcome(other) == (OutcomeKind.REJECTED, "TOOLCHAIN_EXISTS")
    state = store.toolchain("acme", "pay-1")
    assert state is not None
    assert list(state.steps) == PLAN


def test_forgetting_the_stream_drops_its_toolchains_only() -> None:
    store = Store()
    store.run(started())
    store.run(
        event("ToolchainStarted", {"toolchain_id": "other", "steps": ["x"]}, stream="user:U2")
    )
    decided = store.run(event("ForgetRequested", {}))
    assert decided.writes == [DropToolchain("acme", "pay-1")]
    assert store.toolchain("acme", "pay-1") is None
    assert store.toolchain("acme", "other") is not None
    # forgetting one memory touches no toolchain
    one = event(
        "ForgetRequested", {"memory_id": "0190a6a0-0000-7000-8000-000000000001"}, stream="user:U2"
    )
    assert store.run(one).writes == []


def test_the_expiry_timer_fires_at_the_ttl_for_an_unfinished_chain_only() -> None:
    store = Store()
    start = started(ttl=600)
    store.run(start)
    [put] = toolchain.timers(start).writes
    assert isinstance(put, PutTimer)
    assert put.timer.due_at == T0 + timedelta(minutes=10)
    # the decay scan: ToolchainExpired at the due instant, on the toolchain's stream
    decided = decay.scan([put.timer], store)
    [expired] = decided.events
    assert expired.type == "ToolchainExpired"
    assert expired.stream == "user:U1"
    assert expired.occurred_at == T0 + timedelta(minutes=10)
    assert DropTimer(put.timer.tenant, put.timer.memory_id, put.timer.kind) in decided.writes
    # replayed (a rebuild), the expiry drops the timer the start set again
    assert toolchain.timers(expired).writes == [
        DropTimer(put.timer.tenant, put.timer.memory_id, put.timer.kind)
    ]
    # the same decision twice has the same id (the log keeps one)
    assert decay.scan([put.timer], store).events[0].event_id == expired.event_id
    store.run(expired)
    state = store.toolchain("acme", "pay-1")
    assert state is not None
    assert state.expired_at == T0 + timedelta(minutes=10)
    assert state.status(T0 + timedelta(minutes=10)) is ToolchainStatus.EXPIRED
    late = completed("create_order", 1, T0 + timedelta(minutes=11))
    store.run(late)
    assert store.outcome(late) == (OutcomeKind.REJECTED, "TOOLCHAIN_EXPIRED")
    # a chain finished in time does not expire
    done = Store()
    done.run(started(steps=["only"], ttl=600))
    done.run(
        event("ToolchainStepCompleted", {"toolchain_id": "pay-1", "step_id": "only", "output": "1"})
    )
    assert decay.scan([put.timer], done).events == []


def test_a_timer_due_before_the_start_is_decided_is_kept_until_it_is() -> None:
    store = Store()
    start = started(ttl=600)
    [put] = toolchain.timers(start).writes
    assert isinstance(put, PutTimer)

    def decided(tenant: str, event_id: str) -> bool:
        return tenant == "acme" and event_id in store.outcomes

    # the decay consumer reaches the due timer before the registrar records the start:
    # nothing is appended and the timer is neither dropped nor moved
    early = decay.scan([put.timer], store, decided=decided)
    assert early.events == []
    assert early.writes == []
    # once the start is recorded, the next scan expires the chain and drops the timer
    store.run(start)
    later = decay.scan([put.timer], store, decided=decided)
    [expired] = later.events
    assert expired.type == "ToolchainExpired"
    assert expired.occurred_at == T0 + timedelta(minutes=10)
    assert DropTimer(put.timer.tenant, put.timer.memory_id, put.timer.kind) in later.writes
    # a start that was decided but left no toolchain (refused, or forgotten since) drops it
    refused = Store()
    refused.outcomes[start.event_id] = store.outcomes[start.event_id]
    gone = decay.scan([put.timer], refused, decided=lambda t, e: e in refused.outcomes)
    assert gone.events == []
    assert gone.writes == [DropTimer(put.timer.tenant, put.timer.memory_id, put.timer.kind)]


def test_status_turns_expired_at_the_boundary_instant() -> None:
    store = Store()
    store.run(started(ttl=60))
    state = store.toolchain("acme", "pay-1")
    assert state is not None
    edge = T0 + timedelta(seconds=60)
    assert state.status(edge - timedelta(microseconds=1)) is ToolchainStatus.RUNNING
    assert state.status(edge) is ToolchainStatus.EXPIRED
    # an instant in another zone compares as the same instant
    from zoneinfo import ZoneInfo

    assert state.status(edge.astimezone(ZoneInfo("Asia/Shanghai"))) is ToolchainStatus.EXPIRED


@pytest.mark.parametrize(
    ("output", "code"),
    [
        ("not json", "OUTPUT_NOT_JSON"),
        ("NaN", "OUTPUT_NOT_JSON"),
        (json.dumps({"blob": "x" * MAX_OUTPUT_BYTES}), "OUTPUT_TOO_LARGE"),
    ],
)
def test_outputs_that_are_not_json_or_too_large_are_refused_at_the_edge(
    output: str, code: str
) -> None:
    raw = completed("create_order", None).model_dump(mode="json")
    raw["payload"]["output"] = output
    with pytest.raises(InvalidInput) as caught:
        validate_envelope(raw)
    assert caught.value.code == code


def test_a_plan_naming_a_step_twice_is_refused() -> None:
    raw = started(steps=["a", "a"]).model_dump(mode="json")
    with pytest.raises(InvalidInput) as caught:
        validate_envelope(raw)
    assert caught.value.code == "DUPLICATE_STEP"


def test_an_output_opened_from_a_sealed_record_is_checked_again() -> None:
    """A topic record of a user stream carries its output sealed (the edge lets the stand-in
    through); once opened, an output that is not JSON is refused and stores nothing."""
    store = Store()
    store.run(started())
    raw = completed("create_order", None).model_dump(mode="json")
    raw["payload"]["output"] = "⟦sealed⟧"
    validate_envelope(raw)  # the stand-in passes the edge
    opened = event(
        "ToolchainStepCompleted",
        {"toolchain_id": "pay-1", "step_id": "create_order", "output": "{not json"},
    )
    decided = store.run(opened)
    assert store.outcome(opened) == (OutcomeKind.REJECTED, "OUTPUT_NOT_JSON")
    assert not any(isinstance(w, PutToolchain) for w in decided.writes)
