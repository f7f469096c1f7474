"""Decay: expiry at the exact instant, in the user's time zone, and weight over time."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest

from mnemo.bootstrap import load_rules
from mnemo.domain.events import Actor, ActorKind, Envelope
from mnemo.domain.ids import new_event_id
from mnemo.domain.memory import Memory, MemoryStatus, MemoryType, Scope
from mnemo.domain.projection import (
    BumpStats,
    ContextRecord,
    DropTimer,
    DropWeight,
    PutContextRecord,
    PutMemory,
    PutTimer,
    PutWeight,
    Timer,
)
from mnemo.domain.rules import end_of_local_day
from mnemo.handlers import Decision, decay, registration
from mnemo.handlers.decay import DecayPolicy, decayed_weight

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

    def memory_before(
        self, tenant: str, stream: str, memory_id: str, type: MemoryType
    ) -> Memory | None:
        return None

    def tenant_memories(self, tenant: str) -> list[Memory]:
        return []


def registered_memory(text: str, at: datetime, zone: str | None) -> tuple[Envelope, Memory]:
    decision = registration.handle(observation(text, at, zone), NoMemories(), RULES)
    env = next(e for e in decision.events if e.type == "MemoryRegistered")
    return env, Memory.model_validate(env.payload["memory"])


class Weights:
    """Decay's weights, and an active fact for each memory that has one (in user:U1 unless
    `streams` names another stream)."""

    def __init__(self) -> None:
        self.values: dict[str, tuple[float, float, float]] = {}
        self.streams: dict[str, str] = {}
        self.hidden: set[str] = set()
        self.contexts = {R1}
        self.records: dict[str, ContextRecord] = {}  # as the registrar filed them

    def get(self, tenant: str, memory_id: str) -> Memory | None:
        if memory_id not in self.values:
            return None
        return Memory(
            memory_id=memory_id,
            tenant=tenant,
            stream=self.streams.get(memory_id, "user:U1"),
            type=MemoryType.FACT,
            scope=Scope.USER,
            content="a fact",
            created_at=INSTANT - timedelta(days=1),
            source_event_id=memory_id,
            content_hash=f"hash-{memory_id}",
        )

    def weight_of(self, tenant: str, memory_id: str) -> tuple[float, float, float] | None:
        return self.values.get(memory_id)

    def context_record(self, tenant: str, request_id: str) -> ContextRecord | None:
        """One assembled context, R1 in user:U1, that included every memory known here
        (the memories a test leaves out of `shown` excepted)."""
        if request_id in self.records:
            return self.records[request_id]
        if request_id not in self.contexts:
            return None
        shown = tuple(m for m in self.values if m not in self.hidden)
        return ContextRecord(tenant, request_id, "user:U1", "e1", "default@1", shown, (), 10)


def registrar_reads(event: Envelope, state: Weights) -> Envelope:
    """The registrar handles `event` (as it does before the decay consumer reads it): the
    context records it files are kept in `state`."""
    for w in registration.handle(event, state, RULES).writes:
        if isinstance(w, PutContextRecord):
            state.records[w.record.request_id] = w.record
    return event


def bumps(decision: Decision) -> list[BumpStats]:
    return [w for w in decision.writes if isinstance(w, BumpStats)]


def cite(state: Weights, payload: dict[str, object], at: datetime | None = None) -> Decision:
    """A citation, as the decay consumer handles it after the registrar."""
    event = feedback("MemoryCited", payload, at or INSTANT)
    return decay.handle(registrar_reads(event, state), state)


R1 = "019ad4f0-8000-7000-8000-0000000000c1"
R2 = "019ad4f0-8000-7000-8000-0000000000c2"
R3 = "019ad4f0-8000-7000-8000-0000000000c3"
M1 = "019ad4f0-8000-7000-8000-000000000001"
M2 = "019ad4f0-8000-7000-8000-000000000002"
M3 = "019ad4f0-8000-7000-8000-000000000003"

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


class Known(Weights):
    """A state that knows one memory and its weights."""

    def __init__(self, memory: Memory) -> None:
        super().__init__()
        self.memory = memory
        self.values[memory.memory_id] = (
            memory.semantic_weight,
            memory.provenance.trust,
            memory.semantic_weight,
        )

    def get(self, tenant: str, memory_id: str) -> Memory | None:
        return self.memory if memory_id == self.memory.memory_id else None


def timers_of(decision_writes: list[object]) -> dict[str, datetime]:
    return {w.timer.kind: w.timer.due_at for w in decision_writes if isinstance(w, PutTimer)}


def test_registration_sets_the_timers_its_type_calls_for() -> None:
    env, _ = registered_memory("I want to buy coffee today", INSTANT, None)  # until midnight
    assert timers_of(decay.handle(env, Weights()).writes) == {
        "expire": datetime(2026, 12, 1, tzinfo=UTC),
        "archive": INSTANT + timedelta(days=30),
    }
    env, _ = registered_memory("记住我的尺码是L", INSTANT, None)  # a permanent preference
    assert timers_of(decay.handle(env, Weights()).writes) == {
        "verify": INSTANT + timedelta(days=90),
        "archive": INSTANT + timedelta(days=365),
    }
    policy = DecayPolicy(verify_after_days={}, archive_after_days={})
    assert timers_of(decay.handle(env, Weights(), policy).writes) == {}


def test_expiry_fires_at_the_exact_instant_and_only_once() -> None:
    _, memory = registered_memory("I want to buy coffee today", INSTANT, None)
    timer = Timer(memory.tenant, memory.memory_id, datetime(2026, 12, 1, tzinfo=UTC), "expire")
    decision = decay.scan([timer], Known(memory))
    [expired] = decision.events
    assert expired.type == "MemoryExpired"
    # event time is the due instant, whenever the scan happened to run
    assert expired.occurred_at == datetime(2026, 12, 1, tzinfo=UTC)
    assert isinstance(decision.writes[0], DropTimer)
    # scanning again derives the same id, so the log drops the copy
    assert decay.scan([timer], Known(memory)).events[0].event_id == expired.event_id


def test_an_expired_memory_is_never_archived_after_it() -> None:
    _, memory = registered_memory("I want to buy coffee today", INSTANT, None)  # 24 h, archive 30 d
    t, m = memory.tenant, memory.memory_id
    expire = Timer(t, m, INSTANT + timedelta(hours=24), "expire")
    archive = Timer(t, m, INSTANT + timedelta(days=30), "archive")
    # a scan that runs a month late finds both due, in whatever order the store lists them
    for due in ([expire, archive], [archive, expire]):
        decision = decay.scan(due, Known(memory))
        assert [e.type for e in decision.events] == ["MemoryExpired"]
    # and expiring drops every timer of the memory, so none is left to fire later
    decision = decay.scan([expire], Known(memory))
    dropped = {w.kind for w in decision.writes if isinstance(w, DropTimer)}
    assert dropped == set(decay.TIMER_KINDS)


def test_scan_skips_memories_no_longer_active() -> None:
    _, memory = registered_memory("I want to buy coffee today", INSTANT, None)
    gone = Known(memory.model_copy(update={"status": MemoryStatus.SUPERSEDED}))
    for kind in ("expire", "verify", "verify_deadline", "archive"):
        decision = decay.scan([Timer(memory.tenant, memory.memory_id, INSTANT, kind)], gone)
        assert decision.events == []
        assert [type(w) for w in decision.writes] == [DropTimer]


def test_verification_comes_due_then_an_unanswered_one_drops_to_the_floor() -> None:
    _, memory = registered_memory("记住我的尺码是L", INSTANT, None)
    state = Known(memory)
    due_at = INSTANT + timedelta(days=90)
    asked = decay.scan([Timer(memory.tenant, memory.memory_id, due_at, "verify")], state)
    [due] = asked.events
    assert due.type == "VerificationDue"
    assert due.payload["deadline"].startswith("2027-03-07")  # 90 + 7 days
    deadline = timers_of(asked.writes)["verify_deadline"]
    assert deadline == due_at + timedelta(days=7)
    lapsed = decay.scan(
        [Timer(memory.tenant, memory.memory_id, deadline, "verify_deadline")], state
    )
    [dropped] = lapsed.events
    assert dropped.type == "MemoryDecayed"
    assert (dropped.payload["semantic_weight"], dropped.payload["reason"]) == (0.1, "unverified")


def test_verifying_renews_the_schedule_and_restores_the_weight() -> None:
    _, memory = registered_memory("记住我的尺码是L", INSTANT, None)
    state = Known(memory)
    state.values[memory.memory_id] = (0.1, 0.5, 0.72)  # fell for want of an answer
    at = INSTANT + timedelta(days=100)
    decision = decay.handle(feedback("MemoryVerified", {"memory_id": memory.memory_id}, at), state)
    assert timers_of(decision.writes) == {
        "verify": at + timedelta(days=90),
        "archive": at + timedelta(days=365),
    }
    assert DropTimer(memory.tenant, memory.memory_id, "verify_deadline") in decision.writes
    [restored] = decision.events
    assert (restored.payload["semantic_weight"], restored.payload["reason"]) == (0.72, "verified")


def test_unused_memories_are_archived_and_use_pushes_the_archive_back() -> None:
    _, memory = registered_memory("I want to buy coffee today", INSTANT, None)
    state = Known(memory)
    used_at = INSTANT + timedelta(days=10)
    used = cite(
        state, {"request_id": R1, "memory_id": memory.memory_id, "position": "middle"}, used_at
    )
    assert timers_of(used.writes) == {"archive": used_at + timedelta(days=30)}
    archive_at = used_at + timedelta(days=30)
    [archived] = decay.scan(
        [Timer(memory.tenant, memory.memory_id, archive_at, "archive")], state
    ).events
    assert archived.type == "MemoryArchived"
    assert archived.payload["unused_since"].startswith(used_at.date().isoformat())


def test_uses_within_an_hour_leave_the_archive_timer_where_the_first_put_it() -> None:
    _, memory = registered_memory("I want to buy coffee today", INSTANT, None)
    state = Known(memory)

    def used(minutes: int) -> datetime:
        # a verification is a use of the memory
        at = INSTANT + timedelta(days=3, minutes=minutes)
        verified = feedback("MemoryVerified", {"memory_id": memory.memory_id}, at)
        due = timers_of(decay.handle(verified, state).writes)["archive"]
        # never before the period has passed unused, and at most an hour after
        assert at + timedelta(days=30) <= due < at + timedelta(days=30, hours=1)
        return due

    assert [used(m) for m in (10, 25, 59)] == [INSTANT + timedelta(days=33, hours=1)] * 3
    assert used(61) == INSTANT + timedelta(days=33, hours=2)


def test_contradicting_behaviour_lowers_weight_instead_of_deleting() -> None:
    _, memory = registered_memory("I don't like cilantro", INSTANT, None)
    decision = decay.handle(
        feedback(
            "MemoryContradicted", {"memory_id": memory.memory_id, "reason": "bought cilantro"}
        ),
        Known(memory),
    )
    [moved] = decision.events
    assert moved.type == "MemoryDecayed"
    assert moved.payload["semantic_weight"] == 0.25
    assert moved.payload["reason"] == "contradicted"  # a code: the words stay in the cause
    assert "cilantro" not in moved.model_dump_json()
    assert not any(e.type in ("MemoryForgotten", "MemoryExpired") for e in decision.events)


def test_weight_halves_per_half_life_and_stops_at_the_floor() -> None:
    _, memory = registered_memory("记住我的尺码是L", INSTANT, None)
    assert memory.type is MemoryType.PREFERENCE
    assert memory.semantic_weight == 0.72
    assert decayed_weight(memory, INSTANT) == 0.72
    assert decayed_weight(memory, INSTANT + timedelta(days=180)) == pytest.approx(0.36)
    assert decayed_weight(memory, INSTANT + timedelta(days=5000)) == 0.1
    constraint = memory.model_copy(update={"type": MemoryType.CONSTRAINT})
    assert decayed_weight(constraint, INSTANT + timedelta(days=5000)) == 0.72


def feedback(event_type: str, payload: dict[str, object], at: datetime = INSTANT) -> Envelope:
    return Envelope(
        event_id=new_event_id(at),
        type=event_type,
        schema_version=1,
        tenant="acme",
        stream="user:U1",
        occurred_at=at,
        actor=Actor(kind=ActorKind.AGENT, id="a"),
        payload=payload,
    )


def test_citations_raise_weight_and_early_citations_raise_trust() -> None:
    state = Weights()
    state.values[M1] = (0.5, 0.6, 0.5)
    state.contexts |= {R2, R3}
    early = cite(state, {"request_id": R1, "memory_id": M1, "position": "beginning"})
    [event] = early.events
    assert event.type == "MemoryDecayed"
    assert (event.payload["semantic_weight"], event.payload["trust"]) == (0.55, 0.62)
    late = cite(state, {"request_id": R2, "memory_id": M1, "position": "end"})
    assert (late.events[0].payload["semantic_weight"], late.events[0].payload["trust"]) == (
        0.52,
        0.6,
    )
    state.values[M1] = (0.98, 1.0, 0.5)
    capped = cite(state, {"request_id": R3, "memory_id": M1, "position": "beginning"})
    assert (capped.events[0].payload["semantic_weight"], capped.events[0].payload["trust"]) == (
        0.99,
        1.0,
    )


def test_a_correction_lowers_weight_and_trust_of_each_memory_used() -> None:
    state = Weights()
    state.values.update({M1: (0.8, 0.5, 0.8), M2: (0.4, 0.05, 0.4)})
    decision = decay.handle(
        feedback("MemoryCorrected", {"memory_ids": [M1, M2, M3], "reason": "wrong size"}),
        state,
    )
    moved = {
        e.payload["memory_id"]: (e.payload["semantic_weight"], e.payload["trust"])
        for e in decision.events
    }
    assert moved == {M1: (0.56, 0.4), M2: (0.28, 0.0)}
    assert all(e.payload["reason"] == "corrected" for e in decision.events)
    assert not any("wrong size" in e.model_dump_json() for e in decision.events)


def test_a_decay_reason_is_a_code_and_never_a_persons_words() -> None:
    """MemoryDecayed is not sealed on a user stream: its reason must hold no words. One
    logged before the reason was a code reads as the code alone."""
    from pydantic import ValidationError

    from mnemo.domain.events import MemoryDecayed

    with pytest.raises(ValidationError):
        MemoryDecayed(memory_id=M1, semantic_weight=0.5, reason="my size is XL")
    with pytest.raises(ValidationError):
        MemoryDecayed(memory_id=M1, semantic_weight=0.5, reason="cited:whatever I said")
    old = MemoryDecayed.model_validate(
        {"memory_id": M1, "semantic_weight": 0.5, "reason": "corrected:wrong size"}
    )
    assert old.reason == "corrected"


def test_feedback_about_another_streams_memories_moves_them_in_their_own_stream() -> None:
    """An answer in user:U1 cites and corrects memories of user:U2 and team:ops: nothing of
    theirs moves in user:U1's partition; each stream gets one relay, and handling the relay
    there moves them as the feedback itself would have."""
    state = Weights()
    state.values.update({M1: (0.8, 0.5, 0.8), M2: (0.4, 0.5, 0.4), M3: (0.6, 0.5, 0.6)})
    state.streams.update({M2: "user:U2", M3: "team:ops"})
    corrected = feedback("MemoryCorrected", {"memory_ids": [M1, M2, M3], "reason": "wrong"})
    decision = decay.handle(corrected, state)
    decided = [e for e in decision.events if e.type == "MemoryDecayed"]
    assert [e.payload["memory_id"] for e in decided] == [M1]  # its own stream's only
    assert {w.memory_id for w in decision.writes if isinstance(w, PutWeight)} == {M1}
    relays = {e.stream: e for e in decision.events if e.type == "FeedbackRelayed"}
    assert sorted(relays) == ["team:ops", "user:U2"]
    relay = relays["user:U2"]
    assert relay.payload["memory_ids"] == [M2]
    assert (relay.payload["feedback"], relay.payload["reason"]) == ("MemoryCorrected", None)
    assert relay.causation_id == corrected.event_id
    assert relay.actor.kind is ActorKind.SYSTEM
    assert decay.handle(corrected, state).events == decision.events  # redelivered: same ids
    there = decay.handle(relay, state)
    [moved] = there.events
    assert (moved.stream, moved.payload["memory_id"]) == ("user:U2", M2)
    assert (moved.payload["semantic_weight"], moved.payload["trust"]) == (0.28, 0.4)
    assert [w for w in there.writes if isinstance(w, PutWeight)] == [
        PutWeight("acme", M2, 0.28, 0.4, 0.4)
    ]
    # a citation and a use in a context travel the same way; an unknown memory goes nowhere
    cited = feedback("MemoryCited", {"request_id": R1, "memory_id": M2, "position": "beginning"})
    [relay] = decay.handle(registrar_reads(cited, state), state).events
    assert (relay.stream, relay.payload["position"]) == ("user:U2", "beginning")
    [moved] = decay.handle(relay, state).events
    assert moved.payload["semantic_weight"] == 0.45
    # the registrar counts the citation once, in the memory's stream, from the relay
    assert bumps(registration.handle(cited, state, RULES)) == []
    assert registration.handle(relay, state, RULES).writes == [
        BumpStats("acme", M2, cited.occurred_at, cited=1)
    ]
    unknown = "019ad4f0-8000-7000-8000-000000000009"
    assert (
        decay.handle(
            feedback("MemoryCited", {"request_id": R1, "memory_id": unknown}), state
        ).events
        == []
    )


def test_a_relayed_correction_carries_none_of_the_words_of_its_cause() -> None:
    """A correction reported on user:U1's context about memories of user:U2 and session:S1
    is relayed to their streams without its reason: sealed there under U2's key or the
    tenant's, U1's words would stay readable after U1's key is shredded. The relay still
    moves the memories as the correction would have."""
    state = Weights()
    state.values.update({M2: (0.4, 0.5, 0.4), M3: (0.6, 0.5, 0.6)})
    state.streams.update({M2: "user:U2", M3: "session:S1"})
    words = "Zyxwvuta Quirkmeister moved to Wangjing"
    corrected = feedback("MemoryCorrected", {"memory_ids": [M2, M3], "reason": words})
    relays = [e for e in decay.handle(corrected, state).events if e.type == "FeedbackRelayed"]
    assert sorted(e.stream for e in relays) == ["session:S1", "user:U2"]
    assert [e for e in relays if words in e.model_dump_json()] == []
    for relay in relays:
        [moved] = decay.handle(relay, state).events
        assert moved.payload["reason"] == "corrected"


def test_a_verification_from_another_stream_renews_the_memory_in_its_own_stream() -> None:
    state = Weights()
    state.values[M2] = (0.1, 0.5, 0.7)
    state.streams[M2] = "user:U2"
    verified = feedback("MemoryVerified", {"memory_id": M2})
    [relay] = decay.handle(verified, state).events
    assert (relay.type, relay.stream) == ("FeedbackRelayed", "user:U2")
    there = decay.handle(relay, state)
    assert [e.payload["semantic_weight"] for e in there.events] == [0.7]  # restored
    assert DropTimer("acme", M2, "verify_deadline") in there.writes
    # registration: the outcome where it was published, the renewal where the memory lives
    here = registration.handle(verified, state, RULES)
    assert [w for w in here.writes if isinstance(w, PutMemory)] == []
    [renewed] = registration.handle(relay, state, RULES).writes
    assert isinstance(renewed, PutMemory)
    assert renewed.memory.verified_at == verified.occurred_at


def test_a_recorded_decision_sets_the_weight_and_a_gone_memory_moves_no_more() -> None:
    _, memory = registered_memory("记住我的尺码是L", INSTANT, None)
    state = Known(memory)
    recorded = feedback(
        "MemoryDecayed",
        {
            "memory_id": memory.memory_id,
            "semantic_weight": 0.12,
            "trust": 0.4,
            "reason": "corrected",
        },
    )
    [put] = decay.handle(recorded, state).writes
    assert (put.weight, put.trust, put.base) == (0.12, 0.4, 0.72)  # type: ignore[union-attr]
    forgotten = feedback("MemoryForgotten", {"memory_id": memory.memory_id})
    assert DropWeight("acme", memory.memory_id) in decay.handle(forgotten, state).writes
    archived = feedback(
        "MemoryArchived", {"memory_id": memory.memory_id, "unused_since": INSTANT.isoformat()}
    )
    assert not any(isinstance(w, DropWeight) for w in decay.handle(archived, state).writes)


def test_verification_restarts_the_fading_clock() -> None:
    _, memory = registered_memory("记住我的尺码是L", INSTANT, None)
    later = INSTANT + timedelta(days=200)
    assert decayed_weight(memory, later) < 0.4
    renewed = memory.model_copy(update={"verified_at": later})
    assert decayed_weight(renewed, later) == 0.72


def test_a_policy_with_non_positive_days_is_refused() -> None:
    with pytest.raises(ValueError, match="positive"):
        DecayPolicy(verify_after_days={MemoryType.PREFERENCE: 0})


def declared_history(text: str, occurred: datetime, sent: datetime) -> Envelope:
    """A turn of an imported conversation: said at `occurred`, sent to Mnemo at `sent`."""
    env = Envelope(
        event_id=new_event_id(sent),
        type="MemoryDeclared",
        schema_version=1,
        tenant="acme",
        stream="user:U1",
        occurred_at=occurred,
        actor=Actor(kind=ActorKind.AGENT, id="importer"),
        payload={"memory": {"type": "history", "content": text}},
    )
    decision = registration.handle(env, NoMemories(), RULES)
    return next(e for e in decision.events if e.type == "MemoryRegistered")


def test_imported_history_is_archived_from_its_arrival_not_its_past_event_time() -> None:
    said = INSTANT - timedelta(days=200)  # months before it was imported
    registered = declared_history("Alice: we moved to Lisbon", said, INSTANT)
    memory = Memory.model_validate(registered.payload["memory"])
    assert memory.created_at == said  # the real event time is kept
    assert decay.arrival(memory) == INSTANT.replace(microsecond=0)
    timers = timers_of(decay.handle(registered, Weights()).writes)
    assert timers == {"archive": INSTANT + timedelta(days=90)}  # history: 90 days unused
    # sent when it happened: the event time and the arrival agree
    live = declared_history("Alice: hello", INSTANT, INSTANT)
    assert timers_of(decay.handle(live, Weights()).writes)["archive"] == INSTANT + timedelta(
        days=90
    )


def test_an_imported_preference_is_asked_about_before_it_counts_as_unanswered() -> None:
    """A preference said 200 days before it was imported is due for confirmation at once,
    and its deadline runs from its arrival: the agent gets the whole answering period to
    ask, instead of the weight dropping to the floor the moment it arrives."""
    said = INSTANT - timedelta(days=200)
    env = Envelope(
        event_id=new_event_id(INSTANT),
        type="MemoryDeclared",
        schema_version=1,
        tenant="acme",
        stream="user:U1",
        occurred_at=said,
        actor=Actor(kind=ActorKind.AGENT, id="importer"),
        payload={"memory": {"type": "preference", "key": "shoe_size", "value": "42"}},
    )
    decision = registration.handle(env, NoMemories(), RULES)
    registered = next(e for e in decision.events if e.type == "MemoryRegistered")
    memory = Memory.model_validate(registered.payload["memory"])
    due_at = timers_of(decay.handle(registered, Weights()).writes)["verify"]
    assert due_at == said + timedelta(days=90)  # long past: ask about it now
    asked = decay.scan([Timer(memory.tenant, memory.memory_id, due_at, "verify")], Known(memory))
    [due] = asked.events
    deadline = timers_of(asked.writes)["verify_deadline"]
    assert deadline == decay.arrival(memory) + timedelta(days=7)
    assert datetime.fromisoformat(due.payload["deadline"]) == deadline
    # asked on time (no import): the deadline is the due time plus the answering period
    _, live = registered_memory("记住我的尺码是L", INSTANT, None)
    on_time = INSTANT + timedelta(days=90)
    asked = decay.scan([Timer(live.tenant, live.memory_id, on_time, "verify")], Known(live))
    assert timers_of(asked.writes)["verify_deadline"] == on_time + timedelta(days=7)


def test_a_citation_credits_only_a_memory_the_cited_context_included() -> None:
    """A citation naming no context, an unknown one, one assembled on another stream, or
    one that did not include the memory moves nothing; nor does the registrar count it."""
    state = Weights()
    state.values.update({M1: (0.5, 0.5, 0.5), M2: (0.5, 0.5, 0.5)})
    state.streams[M2] = "user:OTHER"
    state.hidden.add(M2)  # M2 lives in another stream and was in no context
    genuine = feedback("MemoryCited", {"request_id": R1, "memory_id": M1, "position": "end"})
    assert bumps(
        registrar_reads(genuine, state) and registration.handle(genuine, state, RULES)
    ) == [BumpStats("acme", M1, genuine.occurred_at, cited=1)]
    assert [e.type for e in decay.handle(genuine, state).events] == ["MemoryDecayed"]
    unknown_context = "019ad4f0-8000-7000-8000-0000000000c2"
    for payload in (
        {"memory_id": M1, "position": "beginning"},
        {"request_id": unknown_context, "memory_id": M1, "position": "beginning"},
        {"request_id": R1, "memory_id": M2, "position": "beginning"},
    ):
        forged = feedback("MemoryCited", payload)
        registered = registration.handle(forged, state, RULES)
        assert bumps(registered) == [], payload
        assert [w.outcome.reason_code for w in registered.writes] == [
            "CONTEXT_NOT_FOUND" if payload.get("request_id") != R1 else "CITATION_NOT_IN_CONTEXT"
        ], payload
        assert all(
            str(payload.get("request_id")) not in (w.outcome.detail or "")
            for w in registered.writes
        )
        moved = decay.handle(forged, state)
        assert (moved.events, moved.writes) == ([], []), payload
    # the context is user:U1's: the same citation published on another stream is nothing
    elsewhere = genuine.model_copy(update={"stream": "user:U3"})
    assert decay.handle(elsewhere, state).events == []


def test_a_context_credits_a_memory_once_whatever_the_event_ids_of_its_citations() -> None:
    """A producer writing to the topic picks its own event ids: a real citation repeated
    under new ids moves weight, trust and the count once. The registrar files the first
    one on the context's record, and the decay consumer moves weight for that one only."""
    state = Weights()
    state.values[M1] = (0.5, 0.6, 0.5)
    first = feedback("MemoryCited", {"request_id": R1, "memory_id": M1, "position": "beginning"})
    assert bumps(registration.handle(first, state, RULES)) == [
        BumpStats("acme", M1, first.occurred_at, cited=1)
    ]
    registrar_reads(first, state)
    assert state.records[R1].credited_by(M1) == first.event_id
    assert [e.type for e in decay.handle(first, state).events] == ["MemoryDecayed"]
    for _ in range(3):
        again = feedback(
            "MemoryCited", {"request_id": R1, "memory_id": M1, "position": "beginning"}
        )
        assert again.event_id != first.event_id
        registered = registration.handle(registrar_reads(again, state), state, RULES)
        assert bumps(registered) == []
        [outcome] = [w.outcome for w in registered.writes]
        assert (outcome.kind.value, outcome.reason_code) == ("duplicate", "ALREADY_CITED")
        # the caller's request id is PRIVATE, and an outcome outlives a forget
        assert R1 not in (outcome.detail or "")
        assert decay.handle(again, state).events == []
    # the first citation handled again (a redelivery) is still the one that counted
    assert state.records[R1].credited_by(M1) == first.event_id
    assert [e.type for e in decay.handle(first, state).events] == ["MemoryDecayed"]


def test_a_use_counts_from_its_arrival_and_never_brings_archival_forward() -> None:
    """A use (here a verification) sent now but stamped with an old event time keeps the
    memory for the whole period after the use arrived: the old event time alone must not
    put the archive timer in the past, in the memory's stream or after a relay."""
    _, memory = registered_memory("I want to buy coffee today", INSTANT, None)  # a context
    state = Known(memory)
    arrived = INSTANT + timedelta(hours=2)
    old = feedback("MemoryVerified", {"memory_id": memory.memory_id}, arrived)
    backdated = old.model_copy(
        update={"occurred_at": INSTANT - timedelta(days=400), "received_at": arrived}
    )
    due = timers_of(decay.handle(backdated, state).writes)["archive"]
    assert arrived + timedelta(days=30) <= due < arrived + timedelta(days=30, hours=1)
    # the same verification published on another stream reaches the memory by a relay
    other = Weights()
    other.values[M2] = (0.5, 0.5, 0.5)
    other.streams[M2] = "user:U2"
    away = feedback("MemoryVerified", {"memory_id": M2}, arrived).model_copy(
        update={"occurred_at": INSTANT - timedelta(days=400), "received_at": arrived}
    )
    [relay] = decay.handle(away, other).events
    due = timers_of(decay.handle(relay, other).writes)["archive"]
    assert arrived + timedelta(days=365) <= due < arrived + timedelta(days=365, hours=1)


def test_a_confirmation_dated_before_the_memory_never_asks_again_sooner() -> None:
    """A confirmation stamped with an event time before the memory existed (a client's
    clock, an import) renews it from no earlier than the memory's own time: the next
    question is never due, and the weight never drops, right after a confirmation."""
    _, memory = registered_memory("记住我的尺码是L", INSTANT, None)  # a preference
    state = Known(memory)
    confirmed = feedback("MemoryVerified", {"memory_id": memory.memory_id}, INSTANT).model_copy(
        update={"occurred_at": INSTANT - timedelta(days=400)}
    )
    assert timers_of(decay.handle(confirmed, state).writes)["verify"] == (
        memory.created_at + timedelta(days=90)
    )
