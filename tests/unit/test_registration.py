"""Registration: rules, supersede, duplicates and rejection codes, against a dict state."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mnemo.bootstrap import load_rules
from mnemo.domain.errors import InvalidInput
from mnemo.domain.events import (
    Actor,
    ActorKind,
    Envelope,
    MemoryRegistered,
    MemorySuperseded,
    validate_envelope,
)
from mnemo.domain.ids import new_event_id
from mnemo.domain.memory import Memory, MemoryStatus, MemoryType, Scope
from mnemo.domain.projection import OutcomeKind, PurgeTenant, PutMemory, PutOutcome, SetStatus
from mnemo.domain.sealed import EncryptionBlock
from mnemo.handlers import Decision, registration

T0 = datetime(2026, 11, 30, 9, 30, tzinfo=UTC)
RULES = load_rules()


class DictState:
    """A plain dict read model, applying the handler's writes like the store does."""

    def __init__(self) -> None:
        self.memories: dict[str, Memory] = {}

    def get(self, tenant: str, memory_id: str) -> Memory | None:
        m = self.memories.get(memory_id)
        return m if m is not None and m.tenant == tenant else None

    def current_for_key(self, tenant: str, stream: str, key: str) -> Memory | None:
        live = [
            m
            for m in self.memories.values()
            if (m.tenant, m.stream, m.key, m.status) == (tenant, stream, key, MemoryStatus.ACTIVE)
        ]
        return max(live, key=lambda m: m.version, default=None)

    def find_by_hash(self, tenant: str, stream: str, content_hash: str) -> Memory | None:
        for m in self.memories.values():
            if (m.tenant, m.stream, m.content_hash, m.status) == (
                tenant,
                stream,
                content_hash,
                MemoryStatus.ACTIVE,
            ):
                return m
        return None

    def stream_memories(self, tenant: str, stream: str) -> list[Memory]:
        return sorted(
            (m for m in self.memories.values() if (m.tenant, m.stream) == (tenant, stream)),
            key=lambda m: m.memory_id,
        )

    def memory_before(
        self, tenant: str, stream: str, memory_id: str, type: MemoryType
    ) -> Memory | None:
        earlier = [
            m
            for m in self.stream_memories(tenant, stream)
            if m.memory_id < memory_id and m.type is type
        ]
        return earlier[-1] if earlier else None

    def tenant_memories(self, tenant: str) -> list[Memory]:
        return sorted(
            (m for m in self.memories.values() if m.tenant == tenant), key=lambda m: m.memory_id
        )

    def apply(self, decision: Decision) -> None:
        for w in decision.writes:
            if isinstance(w, PutMemory):
                self.memories[w.memory.memory_id] = w.memory
            elif isinstance(w, SetStatus):
                self.memories[w.memory_id] = self.memories[w.memory_id].model_copy(
                    update={"status": w.status}
                )


def event(
    event_type: str,
    payload: dict[str, Any],
    *,
    version: int = 1,
    at: datetime = T0,
    stream: str = "user:U7892",
) -> Envelope:
    return Envelope(
        event_id=new_event_id(at),
        type=event_type,
        schema_version=version,
        tenant="acme",
        stream=stream,
        occurred_at=at,
        actor=Actor(kind=ActorKind.AGENT, id="planner"),
        payload=payload,
    )


def observe(text: str, **kw: Any) -> Envelope:
    payload = {
        "text": text,
        **{k: v for k, v in kw.items() if k in ("kind", "timezone", "speaker")},
    }
    return event(
        "ObservationRecorded", payload, version=2, **{k: v for k, v in kw.items() if k == "at"}
    )


def run(state: DictState, env: Envelope) -> Decision:
    decision = registration.handle(env, state, RULES)
    state.apply(decision)
    return decision


def outcomes(decision: Decision) -> list[tuple[OutcomeKind, str | None]]:
    return [
        (w.outcome.kind, w.outcome.reason_code)
        for w in decision.writes
        if isinstance(w, PutOutcome)
    ]


def registered(decision: Decision) -> list[Memory]:
    found = []
    for e in decision.events:
        if e.type == MemoryRegistered.TYPE:
            found.append(Memory.model_validate(e.payload["memory"]))
    return found


@pytest.mark.parametrize(
    ("text", "key", "value", "mtype", "ttl"),
    [
        ("记住我的尺码是L", "size", "L", MemoryType.PREFERENCE, None),
        ("请记住我的尺码是 XL。", "size", "XL", MemoryType.PREFERENCE, None),
        # T0 is 09:30 UTC: today ends at the next midnight, 14.5 hours on
        ("我今天想买咖啡", "intent", "买咖啡", MemoryType.CONTEXT, timedelta(hours=14.5)),
        ("记住我的生日是五月三日", "生日", "五月三日", MemoryType.PREFERENCE, None),
        ("我的预算是5000元", "budget", "5000元", MemoryType.FACT, None),
        ("Remember that my size is M.", "size", "M", MemoryType.PREFERENCE, None),
        (
            "I want to buy coffee today",
            "intent",
            "buy coffee",
            MemoryType.CONTEXT,
            timedelta(hours=14.5),
        ),
        (
            "please remember my favourite color is teal",
            "favourite_color",
            "teal",
            MemoryType.PREFERENCE,
            None,
        ),
        ("I don't like cilantro", "dislike.cilantro", "cilantro", MemoryType.PREFERENCE, None),
    ],
)
def test_rules_turn_utterances_into_typed_memories(
    text: str, key: str, value: str, mtype: MemoryType, ttl: timedelta | None
) -> None:
    decision = run(DictState(), observe(text))
    [memory] = registered(decision)
    assert (memory.key, memory.value, memory.type) == (key, value, mtype)
    if ttl is None:
        assert memory.valid_until is None
    else:
        assert memory.valid_until == T0 + ttl
    assert memory.rule_id is not None
    assert outcomes(decision) == [(OutcomeKind.REGISTERED, None)]


@pytest.mark.parametrize("text", ["hello there", "今天天气不错", "what is my size?", "I like it"])
def test_utterances_that_ask_nothing_are_not_registered(text: str) -> None:
    decision = run(DictState(), observe(text))
    assert decision.events == []
    assert outcomes(decision) == [(OutcomeKind.IGNORED, "NO_RULE_MATCHED")]


def test_actions_are_not_registered_even_when_a_rule_matches() -> None:
    decision = run(DictState(), observe("记住我的尺码是L", kind="action"))
    assert decision.events == []
    assert outcomes(decision) == [(OutcomeKind.IGNORED, "ACTION_NOT_REMEMBERED")]


def test_a_new_value_supersedes_with_the_next_version_and_keeps_history() -> None:
    state = DictState()
    first = registered(run(state, observe("记住我的尺码是L")))[0]
    second_decision = run(state, observe("remember my size is XL", at=T0 + timedelta(minutes=5)))
    second = registered(second_decision)[0]
    assert (second.version, second.supersedes) == (2, first.memory_id)
    superseded = [e for e in second_decision.events if e.type == MemorySuperseded.TYPE]
    assert superseded[0].payload["memory_id"] == first.memory_id
    assert state.memories[first.memory_id].status is MemoryStatus.SUPERSEDED
    assert outcomes(second_decision) == [(OutcomeKind.SUPERSEDED, None)]
    third = registered(run(state, observe("记住我的尺码是M", at=T0 + timedelta(minutes=9))))[0]
    assert third.version == 3


def test_an_exact_duplicate_is_a_no_op() -> None:
    state = DictState()
    run(state, observe("记住我的尺码是L"))
    again = run(state, observe("记住我的尺码是L", at=T0 + timedelta(minutes=1)))
    assert again.events == []
    assert outcomes(again) == [(OutcomeKind.DUPLICATE, None)]
    assert len(state.memories) == 1


def declare(memory: dict[str, Any], at: datetime) -> Envelope:
    return event("MemoryDeclared", {"memory": memory}, at=at)


def test_repeated_turns_stay_separate_occurrences_while_other_types_deduplicate() -> None:
    state = DictState()
    thanks = {"type": "history", "content": "User: Thanks!"}
    first = run(state, declare(thanks, T0))
    second = run(state, declare(thanks, T0 + timedelta(days=3)))  # another session
    assert outcomes(first) == outcomes(second) == [(OutcomeKind.REGISTERED, None)]
    assert len(state.memories) == 2
    # the same turn at the same instant, imported again under a new event id: a duplicate
    assert outcomes(run(state, declare(thanks, T0))) == [(OutcomeKind.DUPLICATE, None)]
    fact = {"type": "fact", "content": "The user ships to Lisbon."}
    run(state, declare(fact, T0))
    again = run(state, declare(fact, T0 + timedelta(days=3)))
    assert outcomes(again) == [(OutcomeKind.DUPLICATE, None)]
    assert len(state.memories) == 3


def test_a_constraint_with_another_guard_is_no_duplicate() -> None:
    """The same constraint declared again with a wider guard was a duplicate of the first,
    and the new pattern was dropped: an answer it should refuse passed."""
    state = DictState()
    rule = "no credit offers to minors"

    def guarded(*patterns: str) -> dict[str, Any]:
        guard = {"rule_id": "no-credit", "patterns": list(patterns)}
        return {"type": "constraint", "content": rule, "guard": guard}

    first = run(state, declare(guarded("loan"), T0))
    wider = run(state, declare(guarded("loan", "credit card"), T0 + timedelta(minutes=1)))
    assert outcomes(first) == outcomes(wider) == [(OutcomeKind.REGISTERED, None)]
    [old], [new] = registered(first), registered(wider)
    assert new.memory_id != old.memory_id
    assert new.guard is not None
    assert new.guard.patterns == ("loan", "credit card")
    # the same guard again, its patterns in another order, is still a duplicate
    again = run(state, declare(guarded("credit card", "loan"), T0 + timedelta(minutes=2)))
    assert outcomes(again) == [(OutcomeKind.DUPLICATE, None)]
    [put] = [w.outcome for w in again.writes if isinstance(w, PutOutcome)]
    assert put.memory_id == new.memory_id
    # and so is the unguarded constraint declared twice
    bare = {"type": "constraint", "content": rule}
    assert outcomes(run(state, declare(bare, T0))) == [(OutcomeKind.REGISTERED, None)]
    assert outcomes(run(state, declare(bare, T0 + timedelta(minutes=3)))) == [
        (OutcomeKind.DUPLICATE, None)
    ]


def test_redelivery_of_the_same_event_emits_the_same_event_ids() -> None:
    env = observe("记住我的尺码是L")
    first = registration.handle(env, DictState(), RULES)
    second = registration.handle(env, DictState(), RULES)
    assert [e.event_id for e in first.events] == [e.event_id for e in second.events]
    assert registered(first)[0].memory_id == registered(second)[0].memory_id


def test_an_event_seen_again_over_its_own_memory_keeps_its_outcome() -> None:
    # a second owner of the partition, or a redelivery, handles an event whose memory
    # is already in the read model: the outcome stays what it was, not a duplicate
    state = DictState()
    env = observe("记住我的尺码是L")
    first = run(state, env)
    again = run(state, env)
    assert outcomes(again) == outcomes(first) == [(OutcomeKind.REGISTERED, None)]
    [memory] = registered(first)
    [put] = [w.outcome for w in again.writes if isinstance(w, PutOutcome)]
    assert (put.memory_id, put.version) == (memory.memory_id, 1)
    assert again.events == []
    later = observe("remember my size is XL", at=T0 + timedelta(minutes=5))
    superseding = run(state, later)
    assert outcomes(run(state, later)) == outcomes(superseding) == [(OutcomeKind.SUPERSEDED, None)]
    # another event with the same content is still a duplicate
    other = run(state, observe("remember my size is XL", at=T0 + timedelta(minutes=6)))
    assert outcomes(other) == [(OutcomeKind.DUPLICATE, None)]


def test_declared_memories_keep_type_scope_and_provenance() -> None:
    decision = run(
        DictState(),
        event(
            "MemoryDeclared",
            {
                "memory": {
                    "type": "constraint",
                    "scope": "tenant",
                    "content": "禁止向未成年人推荐信贷产品",
                    "semantic_weight": 0.95,
                    "provenance": {
                        "source_id": "policy-7",
                        "source_location": "p.3 l.12",
                        "trust": 0.9,
                        "verified": True,
                    },
                }
            },
        ),
    )
    [memory] = registered(decision)
    assert memory.type is MemoryType.CONSTRAINT
    assert memory.scope is Scope.TENANT
    assert memory.provenance.source_location == "p.3 l.12"
    assert memory.provenance.verified


@pytest.mark.parametrize(
    ("memory", "code"),
    [
        ({"type": "fact", "content": "x", "timezone": "Mars/Olympus"}, "INVALID_TIMEZONE"),
        (
            {"type": "fact", "content": "x", "valid_until": (T0 - timedelta(hours=1)).isoformat()},
            "ALREADY_EXPIRED",
        ),
        ({"type": "fact", "content": "x", "semantic_weight": 1.0}, "INVALID_PAYLOAD"),
        ({"type": "fact", "content": "   "}, "INVALID_PAYLOAD"),
        ({"type": "nonsense", "content": "x"}, "INVALID_PAYLOAD"),
    ],
)
def test_invalid_declarations_are_rejected_with_a_reason_code(
    memory: dict[str, Any], code: str
) -> None:
    decision = run(DictState(), event("MemoryDeclared", {"memory": memory}))
    assert outcomes(decision) == [(OutcomeKind.REJECTED, code)]
    [rejected] = decision.events
    assert rejected.type == "MemoryRejected"
    assert rejected.payload["reason_code"] == code
    assert not any(isinstance(w, PutMemory) for w in decision.writes)


def test_forgetting_one_memory_erases_it_from_the_read_model() -> None:
    state = DictState()
    memory = registered(run(state, observe("记住我的尺码是L")))[0]
    decision = run(state, event("ForgetRequested", {"memory_id": memory.memory_id}))
    assert [e.type for e in decision.events] == ["MemoryForgotten"]
    erase = [w for w in decision.writes if isinstance(w, SetStatus)]
    assert erase[0].status is MemoryStatus.FORGOTTEN
    assert erase[0].erase_content


def test_a_forgotten_memory_keeps_nothing_a_person_said_nor_where_they_are() -> None:
    """The erasure of a forgotten memory's row leaves no field that is sealed whole on a
    user stream in clear: the time zone (where the person lives) went on reading
    `Asia/Shanghai` in the live read model, while a rebuild read it redacted."""
    state = DictState()
    decision = run(
        state,
        event(
            "ObservationRecorded",
            {"text": "记住我的尺码是L", "timezone": "Asia/Shanghai"},
            version=2,
        ),
    )
    [memory] = registered(decision)
    assert memory.timezone == "Asia/Shanghai"
    [erase] = [
        w
        for w in run(state, event("ForgetRequested", {"memory_id": memory.memory_id})).writes
        if isinstance(w, SetStatus)
    ]
    erased = erase.applied_to(memory)
    assert (erased.content, erased.value, erased.key, erased.tags) == ("", None, None, ())
    assert erased.timezone is None


@pytest.mark.parametrize("pattern", ["(a|a)*c", "((a+))+c", "(a+)+c", "(x*y)*z"])
def test_guard_patterns_that_backtrack_exponentially_run_on_the_linear_engine(
    pattern: str,
) -> None:
    """With a backtracking engine each of these takes hours on 100,000 'a's (and holds the
    interpreter lock); on RE2 the answer comes at once."""
    from mnemo.domain.edge import EDGE
    from mnemo.domain.memory import Guard

    guard = Guard.model_validate({"rule_id": "r1", "patterns": [pattern]}, context=EDGE)
    assert not guard.violated_by("a" * 100_000)
    assert Guard(rule_id="r1", patterns=("信贷|loan", "(credit|loan)s?")).violated_by(
        "a LOAN offer"
    )


@pytest.mark.parametrize("pattern", [r"(a)\1", "loan(?=s)", "(?<!no )loan", "a{1001}"])
def test_guard_patterns_the_linear_engine_cannot_run_are_refused_with_a_code(
    pattern: str,
) -> None:
    raw = {
        "event_id": new_event_id(T0),
        "type": "MemoryDeclared",
        "schema_version": 1,
        "tenant": "acme",
        "stream": "user:U1",
        "occurred_at": T0.isoformat(),
        "actor": {"kind": "agent", "id": "a"},
        "payload": {
            "memory": {
                "type": "constraint",
                "content": "no loans",
                "guard": {"rule_id": "r1", "patterns": ["loan", pattern]},
            }
        },
    }
    with pytest.raises(InvalidInput) as refused:
        validate_envelope(raw)
    assert refused.value.code == "UNSUPPORTED_PATTERN"
    assert refused.value.field == "payload.memory.guard.patterns"


def test_a_stored_guard_the_linear_engine_cannot_run_fails_closed() -> None:
    """Read back from the log or a read model (no edge checks), a guard accepted before
    patterns were checked for RE2 still loads, and counts every answer as a violation."""
    from mnemo.domain.memory import Guard

    guard = Guard.model_validate({"rule_id": "r1", "patterns": ["loan(?=s)"]})
    assert guard.violated_by("nothing about credit")


def test_registration_rules_run_on_the_linear_engine() -> None:
    from mnemo.domain.rules import RegistrationRule

    with pytest.raises(ValueError, match="linear-time engine"):
        RegistrationRule(id="r", pattern=r"(?P<value>a)\1", type="fact", key="k")
    rule = RegistrationRule(id="r", pattern=r"(?P<value>(a|a)*)c", type="fact", key="k")
    assert rule.compiled().search("a" * 100_000) is None


def test_sealed_placeholders_carry_their_ciphertexts_into_each_memory() -> None:
    """An observation with two sealed values registers memories that keep the placeholders
    and only the ciphertexts their own text needs; no plaintext is involved."""
    phone, mail = "⟦phone:h0123456789abcdef⟧", "⟦email:hfedcba9876543210⟧"
    block = EncryptionBlock(
        key_id="acme/user:U7892",
        key_version=3,
        fields=("text",),
        wrapped_key="d3JhcHBlZA==",
        values={
            "phone:h0123456789abcdef": "c2VhbGVkMQ==",
            "email:hfedcba9876543210": "c2VhbGVkMg==",
        },
    )
    env = observe(f"remember my phone is {phone}").model_copy(update={"encryption": block})
    (memory,) = registered(run(DictState(), env))
    assert (memory.key, memory.value) == ("phone", phone)
    assert memory.sealed is not None
    assert memory.sealed.values == {"phone:h0123456789abcdef": "c2VhbGVkMQ=="}
    assert (memory.sealed.key_id, memory.sealed.key_version) == ("acme/user:U7892", 3)
    plain = registered(run(DictState(), observe("remember my phone is unknown")))
    assert plain[0].sealed is None
    unsealed_text = observe(f"remember my mail is {mail}")  # no block: nothing to carry
    assert registered(run(DictState(), unsealed_text))[0].sealed is None


def test_forgetting_a_tenant_forgets_every_memory_and_purges() -> None:
    state = DictState()
    run(state, observe("remember my size is M"))
    run(
        state,
        event("MemoryDeclared", {"memory": {"type": "fact", "content": "x"}}, stream="user:B"),
    )
    decision = run(state, event("ForgetRequested", {"tenant": True}, stream="tenant"))
    forgotten = [e.payload["memory_id"] for e in decision.events if e.type == "MemoryForgotten"]
    assert sorted(forgotten) == sorted(state.memories)
    assert any(isinstance(w, PurgeTenant) and w.tenant == "acme" for w in decision.writes)
    assert outcomes(decision) == [(OutcomeKind.APPLIED, None)]


def test_rewrapped_keys_replace_only_the_wrapped_key_they_name() -> None:
    """A memory takes its new wrapped key (and version) when it still holds the one the
    event replaces, under that key id; its values stay as they were. A memory whose wrapped
    key changed meanwhile, or that was erased, is left alone."""
    block = EncryptionBlock(
        key_id="acme/user:U7892",
        key_version=1,
        fields=("text",),
        wrapped_key="b2xkLWtleQ==",
        values={"phone:h0123456789abcdef": "c2VhbGVkMQ=="},
    )
    phone = "⟦phone:h0123456789abcdef⟧"
    state = DictState()
    (kept,) = registered(
        run(
            state, observe(f"remember my phone is {phone}").model_copy(update={"encryption": block})
        )
    )
    mail = "⟦email:hfedcba9876543210⟧"
    other = block.model_copy(
        update={"wrapped_key": "b3RoZXIta2V5", "values": {"email:hfedcba9876543210": "c2Vh"}}
    )
    (changed,) = registered(
        run(
            state,
            observe(f"remember my mail is {mail}").model_copy(update={"encryption": other}),
        )
    )
    previous = registration.wrapped_digest("b2xkLWtleQ==")
    rewrap = event(
        "MemoriesRewrapped",
        {
            "key_id": "acme/user:U7892",
            "key_version": 2,
            "memories": [
                {"memory_id": m.memory_id, "previous": previous, "wrapped_key": "bmV3LWtleQ=="}
                for m in (kept, changed)
            ],
        },
    )
    decision = run(state, rewrap)
    assert outcomes(decision) == [(OutcomeKind.APPLIED, None)]
    moved = state.memories[kept.memory_id].sealed
    assert moved is not None
    assert (moved.wrapped_key, moved.key_version) == ("bmV3LWtleQ==", 2)
    assert moved.values == block.values
    assert state.memories[changed.memory_id].sealed == other
    # under another key id, nothing moves
    wrong = rewrap.model_copy(update={"payload": {**rewrap.payload, "key_id": "acme"}})
    assert [w for w in run(state, wrong).writes if isinstance(w, PutMemory)] == []


# ---- what registration derives for history ------------------------------------------------


def turn_tags(state: DictState, content: str, at: datetime, **extra: Any) -> tuple[str, ...]:
    [memory] = registered(run(state, declare({"type": "history", "content": content, **extra}, at)))
    return memory.tags


def test_history_turns_get_episodes_from_the_pauses_and_speakers_from_the_text() -> None:
    state = DictState()
    first = turn_tags(state, "Caroline: I went to a support group yesterday.", T0)
    second = turn_tags(state, "Melanie: That's great!", T0 + timedelta(seconds=40))
    later = turn_tags(state, "Caroline: Hey, long time!", T0 + timedelta(days=17))
    zh = turn_tags(state, "张伟：好的，谢谢", T0 + timedelta(days=17, minutes=2))
    episode = [t for t in first if t.startswith("episode:")]
    assert len(episode) == 1
    assert first == (episode[0], "speaker:caroline")
    assert second == (episode[0], "speaker:melanie")
    assert later[0].startswith("episode:")
    assert later[0] != episode[0]
    assert zh == (later[0], "speaker:张伟")


def test_an_episode_tag_the_client_sent_is_kept_and_nothing_is_derived_for_other_types() -> None:
    state = DictState()
    tagged = turn_tags(state, "I'll call back", T0, tags=["episode:call-7"])
    assert tagged == ("episode:call-7",)
    assert turn_tags(state, "ok", T0 + timedelta(minutes=1)) == ("episode:call-7",)
    [fact] = registered(run(state, declare({"type": "fact", "content": "Ana: lives in Porto"}, T0)))
    assert fact.tags == ()


def test_a_turn_recorded_with_its_speaker_is_tagged_with_that_speaker() -> None:
    state = DictState()
    [memory] = registered(run(state, observe("好的，谢谢", kind="turn", speaker="客户")))
    assert "speaker:客户" in memory.tags
    assert any(t.startswith("episode:") for t in memory.tags)


@pytest.mark.parametrize(
    ("speaker", "text"),
    [
        ("客服", "我的尺码是L，这款偏大"),
        ("客服", "亲，不要再犹豫了，今天下单有优惠"),
        ("Agent", "I live in Berlin too"),
        ("assistant", "Got it, please reply in English"),
        # a role and a name, or a role among other words
        ("客服小美", "我的尺码是XL，这款偏大"),
        ("理财经理", "我的尺码是XL"),
        ("sales rep", "my size is XL"),
        ("AI advisor", "my size is XL"),
    ],
)
def test_the_agent_sides_turns_are_history_and_never_the_users_memories(
    speaker: str, text: str
) -> None:
    state = DictState()
    run(state, observe("我的尺码是M", kind="turn", speaker="客户"))
    decision = run(state, observe(text, kind="turn", speaker=speaker, at=T0 + timedelta(minutes=1)))
    [turn] = registered(decision)
    assert turn.type is MemoryType.HISTORY
    assert outcomes(decision) == [(OutcomeKind.REGISTERED, None)]
    sizes = [m for m in state.memories.values() if m.key == "size"]
    assert [(m.value, m.status) for m in sizes] == [("M", MemoryStatus.ACTIVE)]


@pytest.mark.parametrize("text", ["客服：我自己一般穿L码", "Agent: I wear a large myself"])
def test_an_agents_turn_that_names_its_speaker_in_the_text_is_history_only(text: str) -> None:
    state = DictState()
    run(state, observe("我的尺码是M", kind="turn", speaker="客户"))
    decision = run(state, observe(text, kind="turn", at=T0 + timedelta(minutes=1)))
    assert [m.type for m in registered(decision)] == [MemoryType.HISTORY]
    sizes = [m for m in state.memories.values() if m.key == "size"]
    assert [(m.value, m.status) for m in sizes] == [("M", MemoryStatus.ACTIVE)]


def test_the_customers_turn_and_an_unnamed_speakers_turn_are_read_by_the_rules() -> None:
    state = DictState()
    [_, size] = registered(run(state, observe("我的尺码是M", kind="turn", speaker="客户")))
    assert (size.key, size.value) == ("size", "M")
    [_, city] = registered(run(state, observe("I live in Berlin", kind="turn")))
    assert (city.key, city.value) == ("home_city", "Berlin")


class AskedState(DictState):
    """Records the content-hash lookups registration makes."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[tuple[str, str, str]] = []

    def find_by_hash(self, tenant: str, stream: str, content_hash: str) -> Memory | None:
        self.asked.append((tenant, stream, content_hash))
        return super().find_by_hash(tenant, stream, content_hash)


@pytest.mark.parametrize(
    "memory",
    [
        {"type": "fact", "content": "The user ships to Lisbon."},
        {"type": "history", "content": "User: Thanks!"},  # hashed with its instant
        {"type": "preference", "content": "Window seats", "key": "seat", "value": "window"},
    ],
)
def test_the_hash_lookups_named_ahead_are_the_ones_registration_makes(
    memory: dict[str, Any],
) -> None:
    state = AskedState()
    env = declare(memory, T0 + timedelta(hours=5))
    run(state, env)
    assert state.asked
    assert registration.hash_lookups(env) == state.asked


def test_no_hash_lookups_are_named_for_other_events_or_undecodable_payloads() -> None:
    assert registration.hash_lookups(observe("remember that I live in Porto")) == []
    broken = declare({"type": "fact", "content": "x"}, T0).model_copy(
        update={"payload": {"memory": {"type": "no such type"}}}
    )
    assert registration.hash_lookups(broken) == []


class TurnAskedState(DictState):
    """Records the turn-before lookups registration makes."""

    def __init__(self) -> None:
        super().__init__()
        self.asked: list[tuple[str, str, str, MemoryType]] = []

    def memory_before(
        self, tenant: str, stream: str, memory_id: str, type: MemoryType
    ) -> Memory | None:
        self.asked.append((tenant, stream, memory_id, type))
        return super().memory_before(tenant, stream, memory_id, type)


@pytest.mark.parametrize(
    "event",
    [
        observe("I moved to Porto last week", kind="turn", speaker="Ana"),
        declare({"type": "history", "content": "Ana: hello again"}, T0 + timedelta(hours=1)),
    ],
)
def test_the_turn_lookups_named_ahead_are_the_ones_registration_makes(event: Envelope) -> None:
    state = TurnAskedState()
    run(state, declare({"type": "history", "content": "Ana: hello"}, T0))
    state.asked.clear()
    run(state, event)
    assert state.asked
    assert registration.turn_lookups(event) == state.asked


def test_no_turn_lookups_are_named_where_registration_derives_no_episode() -> None:
    tagged = {"type": "history", "content": "Ana: hi", "tags": ["episode:e1"]}
    for event in (
        declare(tagged, T0),
        declare({"type": "fact", "content": "The user ships to Lisbon."}, T0),
        declare({"type": "fact", "content": "x"}, T0).model_copy(
            update={"payload": {"memory": {"type": "no such type"}}}
        ),
    ):
        state = TurnAskedState()
        run(state, event)
        assert state.asked == []
        assert registration.turn_lookups(event) == []
