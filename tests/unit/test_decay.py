"""Decay: expiry at the exact instant, in the user's time zone, and weight over time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from mnemo.bootstrap import load_rules
from mnemo.domain.events import Actor, ActorKind, Envelope
from mnemo.domain.ids import new_event_id
from mnemo.domain.memory import Memory, MemoryStatus, MemoryType
from mnemo.domain.projection import DropTimer, PutTimer, Timer
from mnemo.domain.rules import end_of_local_day
from mnemo.handlers import decay, registration
from mnemo.handlers.decay import decayed_weight

RULES = load_rules()


def observation(text: str, at: datetime, zone: str | None) -> Envelope:
    payload: dict[str, object] = {"text": text}
    if zone is not None:
        payload["timezone"] = zone
    return Envelope(
        event_id=new_event_id(at),
        type="ObservationRecorded",
        schema_version=2,
        tenant="acme",
        stream="user:U1",
        occurred_at=at,
        actor=Actor(kind=ActorKind.USER, id="U1"),
        payload=payload,
    )


class NoMemories:
    def get(self, tenant: str, memory_id: str) -> Memory | None:
        return None

    def current_for_key(self, tenant: str, stream: str, key: str) -> Memory | None:
        return None

    def find_by_hash(self, tenant: str, stream: str, content_hash: str) -> Memory | None:
        return None

    def stream_memories(self, tenant: str, stream: str) -> list[Memory]:
        return []


def registered_memory(text: str, at: datetime, zone: str | None) -> tuple[Envelope, Memory]:
    decision = registration.handle(observation(text, at, zone), NoMemories(), RULES)
    env = next(e for e in decision.events if e.type == "MemoryRegistered")
    return env, Memory.model_validate(env.payload["memory"])


class Weights:
    def __init__(self) -> None:
        self.values: dict[str, tuple[float, float]] = {}

    def get(self, tenant: str, memory_id: str) -> Memory | None:
        return None

    def weight_of(self, tenant: str, memory_id: str) -> tuple[float, float] | None:
        return self.values.get(memory_id)


# the same instant: 23:00 in Tokyo, 09:00 in New York, 14:00 UTC
INSTANT = datetime(2026, 11, 30, 14, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    ("zone", "expected_utc"),
    [
        ("Asia/Tokyo", datetime(2026, 11, 30, 15, 0, tzinfo=UTC)),  # midnight JST, 1 h later
        ("America/New_York", datetime(2026, 12, 1, 5, 0, tzinfo=UTC)),  # midnight EST
        ("+05:30", datetime(2026, 11, 30, 18, 30, tzinfo=UTC)),  # a fixed offset
        (None, datetime(2026, 12, 1, 0, 0, tzinfo=UTC)),  # the event's own offset (UTC)
    ],
)
def test_tonight_ends_at_the_users_midnight(zone: str | None, expected_utc: datetime) -> None:
    _, memory = registered_memory("tonight I want sushi", INSTANT, zone)
    assert memory.valid_until == expected_utc


def test_the_event_offset_is_used_when_no_zone_is_named() -> None:
    shanghai_evening = datetime(2026, 11, 30, 22, 0, tzinfo=ZoneInfo("Asia/Shanghai"))
    _, memory = registered_memory("tonight I want hotpot", shanghai_evening, None)
    assert memory.valid_until == datetime(2026, 12, 1, 0, 0, tzinfo=ZoneInfo("Asia/Shanghai"))


def test_end_of_day_honours_a_daylight_saving_change() -> None:
    # 2026-03-08 is the US spring-forward day: that local day has 23 hours
    morning = datetime(2026, 3, 8, 6, 0, tzinfo=UTC)  # 01:00 EST
    assert end_of_local_day(morning, "America/New_York") == datetime(2026, 3, 9, 4, 0, tzinfo=UTC)


def test_a_timer_is_set_at_registration_and_fires_at_the_exact_instant() -> None:
    env, memory = registered_memory("I want to buy coffee today", INSTANT, None)
    _, put = decay.handle(env, Weights()).writes
    assert isinstance(put, PutTimer)
    assert put.timer.due_at == INSTANT + timedelta(hours=24)

    class One(Weights):
        def get(self, tenant: str, memory_id: str) -> Memory | None:
            return memory if memory_id == memory.memory_id else None

    timer = Timer(memory.tenant, memory.memory_id, put.timer.due_at)
    decision = decay.scan([timer], One())
    [expired] = decision.events
    assert expired.type == "MemoryExpired"
    # event time is the due instant, whenever the scan happened to run
    assert expired.occurred_at == INSTANT + timedelta(hours=24)
    assert expired.payload["expired_at"] == (INSTANT + timedelta(hours=24)).isoformat().replace(
        "+00:00", "Z"
    )
    assert isinstance(decision.writes[0], DropTimer)
    # scanning again derives the same id, so the log drops the copy
    assert decay.scan([timer], One()).events[0].event_id == expired.event_id


def test_scan_skips_memories_no_longer_active() -> None:
    _, memory = registered_memory("I want to buy coffee today", INSTANT, None)
    gone = memory.model_copy(update={"status": MemoryStatus.SUPERSEDED})

    class Gone(Weights):
        def get(self, tenant: str, memory_id: str) -> Memory | None:
            return gone

    decision = decay.scan([Timer(memory.tenant, memory.memory_id, INSTANT)], Gone())
    assert decision.events == []
    assert len(decision.writes) == 1


def test_permanent_memories_set_no_timer() -> None:
    env, _ = registered_memory("记住我的尺码是L", INSTANT, None)
    assert [type(w).__name__ for w in decay.handle(env, Weights()).writes] == ["PutWeight"]


def test_weight_halves_per_half_life_and_stops_at_the_floor() -> None:
    _, memory = registered_memory("记住我的尺码是L", INSTANT, None)
    assert memory.type is MemoryType.PREFERENCE
    assert memory.semantic_weight == 0.72
    assert decayed_weight(memory, INSTANT) == 0.72
    assert decayed_weight(memory, INSTANT + timedelta(days=180)) == pytest.approx(0.36)
    assert decayed_weight(memory, INSTANT + timedelta(days=5000)) == 0.1
    constraint = memory.model_copy(update={"type": MemoryType.CONSTRAINT})
    assert decayed_weight(constraint, INSTANT + timedelta(days=5000)) == 0.72


def feedback(event_type: str, payload: dict[str, object]) -> Envelope:
    return Envelope(
        event_id=new_event_id(INSTANT),
        type=event_type,
        schema_version=1,
        tenant="acme",
        stream="user:U1",
        occurred_at=INSTANT,
        actor=Actor(kind=ActorKind.AGENT, id="a"),
        payload=payload,
    )


def test_citations_raise_weight_and_early_citations_raise_trust() -> None:
    state = Weights()
    state.values["m1"] = (0.5, 0.6)
    early = decay.handle(
        feedback("MemoryCited", {"memory_id": "m1", "position": "beginning"}), state
    )
    [event] = early.events
    assert event.type == "MemoryDecayed"
    assert (event.payload["semantic_weight"], event.payload["trust"]) == (0.55, 0.62)
    late = decay.handle(feedback("MemoryCited", {"memory_id": "m1", "position": "end"}), state)
    assert (late.events[0].payload["semantic_weight"], late.events[0].payload["trust"]) == (
        0.52,
        0.6,
    )
    state.values["m1"] = (0.98, 1.0)
    capped = decay.handle(
        feedback("MemoryCited", {"memory_id": "m1", "position": "beginning"}), state
    )
    assert (capped.events[0].payload["semantic_weight"], capped.events[0].payload["trust"]) == (
        0.99,
        1.0,
    )


def test_a_correction_lowers_weight_and_trust_of_each_memory_used() -> None:
    state = Weights()
    state.values.update({"m1": (0.8, 0.5), "m2": (0.4, 0.05)})
    decision = decay.handle(
        feedback(
            "MemoryCorrected", {"memory_ids": ["m1", "m2", "unknown"], "reason": "wrong size"}
        ),
        state,
    )
    moved = {
        e.payload["memory_id"]: (e.payload["semantic_weight"], e.payload["trust"])
        for e in decision.events
    }
    assert moved == {"m1": (0.56, 0.4), "m2": (0.28, 0.0)}
    assert all(e.payload["reason"] == "corrected:wrong size" for e in decision.events)
