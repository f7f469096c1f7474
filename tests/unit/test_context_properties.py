"""Properties of assembled contexts over random memories on a real embedded platform:
within budget, only the caller's tenant and subjects, nothing expired or superseded, and
every included memory shows in the text; with history, an older version only ever shows
beside its current one. Each test function builds one platform that its examples share."""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mnemo.adapters.clocks import FixedClock
from mnemo.adapters.toktok_tokenizer import ToktokTokenizer, encoding_for_model
from mnemo.bootstrap import Platform, build_embedded
from mnemo.domain.context import DEFAULT_TEMPLATE, ContextTemplate
from mnemo.domain.ids import uuid7_at
from mnemo.domain.memory import Memory, MemoryStatus
from mnemo.service.app import RequestContext
from mnemo.service.context import ContextRequest, ContextResponse
from mnemo.settings import MnemoSettings

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
TENANTS = ("acme", "globex")
SUBJECTS = ("user:U1", "user:U2", "session:S1")
WORDS = (
    "coffee",
    "tea",
    "Kyoto",
    "Lyon",
    "loan",
    "size",
    "peanuts",
    "allergy",
    "trip",
    "March",
    "email",
    "nurse",
    "咖啡",
    "上海",
    "浦东",
    "尺码",
    "信贷",
    "未成年人",
    "花生",
    "旅行",
    "每天早上",
)
KEYS = ("size", "city", "diet", "lang", "rule.credit")
# constraints twice as often: they are the ones that conflict and must not vanish silently
TYPES = (
    "constraint",
    "constraint",
    "preference",
    "fact",
    "context",
    "history",
    "episode",
    "external",
)
TTLS = (None, None, None, 60, 3_600, 86_400, 7 * 86_400)
TOKENIZERS = (None, "cl100k_base", "o200k_base", "gpt-4o")
ENDS = ("", ".", "。", "!", "？")

# Small section budgets, so memories get trimmed to their leading sentences and sections
# overflow on their own, not only the total budget.
TIGHT = ContextTemplate.model_validate(
    {
        "name": "tight",
        "version": 1,
        "sections": [
            {
                "name": "rules",
                "priority": 1,
                "budget": 30,
                "types": ["constraint"],
                "query": "",
                "render": "- {text}",
            },
            {"name": "facts", "priority": 2, "budget": 25, "types": ["preference", "fact"]},
            {
                "name": "notes",
                "priority": 3,
                "budget": 40,
                # other types show here only as neighbours of a hit in their episode
                "types": ["history"],
                "neighbours": 2,
            },
        ],
    }
)
TEMPLATES = {t.name: t for t in (DEFAULT_TEMPLATE, TIGHT)}

SETTINGS = settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@dataclass
class World:
    """One platform per test function, shared by its examples; memories pile up."""

    platform: Platform
    clock: FixedClock
    ids: Iterator[int] = field(default_factory=itertools.count)

    def event_id(self) -> str:
        n = next(self.ids)
        ms = int(self.clock.now().timestamp() * 1000)
        return str(uuid7_at(ms, hashlib.sha256(f"event-{n}".encode()).digest()))


@pytest.fixture
def world(tmp_path: Path) -> Iterator[World]:
    clock = FixedClock(T0)
    built = build_embedded(
        MnemoSettings(data_dir=tmp_path / "data", embedder="hashing", sqlite_synchronous="NORMAL"),
        clock=clock,
    )
    world = World(built, clock)
    for tenant in TENANTS:
        built.app.register_template(RequestContext(tenant, "admin"), TIGHT.model_dump(mode="json"))
    publish(world, list(starting_memories()))
    built.runner.drain()
    yield world
    built.close()


def starting_memories() -> Iterator[tuple[str, str, dict[str, Any]]]:
    """What every world starts with, so conflicts and episodes turn up for sure: the same
    constraint key with a different trust in every subject, and an episode of turns."""
    for tenant in TENANTS:
        for n, subject in enumerate(SUBJECTS):
            yield (
                tenant,
                subject,
                {
                    "type": "constraint",
                    "key": "rule.credit",
                    "value": f"level {n}",
                    "content": f"信贷 rule number {n}. Never offer a loan to minors.",
                    "provenance": {"trust": 0.3 + 0.2 * n},
                },
            )
            # a key whose older version weighs more than the current one
            for value, weight in (("L", 0.95), ("XL", 0.1)):
                yield (
                    tenant,
                    subject,
                    {
                        "type": "preference",
                        "key": "size",
                        "value": value,
                        "semantic_weight": weight,
                    },
                )
            for turn, kind in enumerate(("history", "context", "external", "history")):
                yield (
                    tenant,
                    subject,
                    {
                        "type": kind,
                        "content": f"Turn {turn} of the trip 旅行.",
                        "tags": ["episode:e0"],
                    },
                )


sentence = st.lists(st.sampled_from(WORDS), min_size=1, max_size=7).map(" ".join)


@st.composite
def contents(draw: st.DrawFn) -> str:
    parts = draw(st.lists(st.tuples(sentence, st.sampled_from(ENDS)), min_size=1, max_size=6))
    return " ".join(f"{words}{end}" for words, end in parts)


@st.composite
def memories(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(st.sampled_from(TYPES))
    memory: dict[str, Any] = {
        "type": kind,
        "semantic_weight": draw(st.sampled_from((0.1, 0.3, 0.5, 0.7, 0.95))),
        "provenance": {"trust": draw(st.sampled_from((0.2, 0.5, 0.9)))},
    }
    if draw(st.booleans()):
        # constraints share few keys, so the same key turns up in several subjects
        memory["key"] = draw(st.sampled_from(KEYS[-2:] if kind == "constraint" else KEYS))
        memory["value"] = draw(sentence)
        if draw(st.booleans()):
            memory["content"] = draw(contents())
    else:
        memory["content"] = draw(contents())
    ttl = draw(st.sampled_from(TTLS))
    if ttl is not None:
        memory["ttl_seconds"] = ttl
    if draw(st.booleans()):
        memory["tags"] = [f"episode:e{draw(st.integers(0, 1))}"]
    return memory


batches = st.lists(
    st.tuples(st.sampled_from(TENANTS), st.sampled_from(SUBJECTS), memories()),
    min_size=4,
    max_size=14,
)


def publish(world: World, batch: list[tuple[str, str, dict[str, Any]]]) -> None:
    for tenant, subject, memory in batch:
        event = {
            "event_id": world.event_id(),
            "type": "MemoryDeclared",
            "schema_version": 1,
            "stream": subject,
            "payload": {"memory": memory},
        }
        world.platform.app.publish(RequestContext(tenant, "writer"), [event])


def tokens_of(response: ContextResponse) -> int:
    return ToktokTokenizer(encoding_for_model(response.tokenizer)).count([response.assembly.text])[
        0
    ]


def shows(memory: Memory, text: str, trimmed: bool) -> bool:
    whole = " ".join(memory.text().split())
    if not trimmed:
        return whole in text
    # a trimmed memory shows its leading whole sentences: some proper prefix that ends a
    # sentence, never a cut inside one
    cuts = [i + 1 for i, ch in enumerate(whole[:-1]) if ch in ".!?;。！？；"]
    return any(whole[:cut].strip() in text for cut in cuts)


def check(
    world: World,
    tenant: str,
    subjects: tuple[str, ...],
    as_of: datetime,
    budget: int,
    response: ContextResponse,
) -> None:
    a = response.assembly
    template = TEMPLATES[response.template.split("@")[0]]
    assert a.tokens <= budget
    assert a.tokens == tokens_of(response)
    assert a.text.startswith(f"[MNEMO-CONTEXT v1 | fp:{template.fingerprint()} |")
    for spec in template.sections:
        assert a.section_tokens[spec.name] <= spec.budget
    included = [i.candidate.memory for i in a.included]
    assert len({m.memory_id for m in included}) == len(included), "a memory shows once"
    assert not {m.memory_id for m in included} & {t.memory_id for t in a.truncations}
    current = {
        m.memory_id: m
        for m in world.platform.store.get_many(tenant, [m.memory_id for m in included])
    }
    for inc in a.included:
        m = inc.candidate.memory
        assert m.tenant == tenant
        assert m.stream in subjects
        assert m.memory_id in current, "the memory exists in the caller's own tenant"
        assert m.valid_until is None or m.valid_until > as_of, "expired at as_of"
        assert m.status is MemoryStatus.ACTIVE
        assert current[m.memory_id].status is not MemoryStatus.SUPERSEDED
        assert shows(m, a.text, inc.trimmed), (m.text(), a.text)
    # and nothing else reaches the text: every line under a heading is an included memory
    body = [ln for ln in a.text.splitlines()[1:] if not ln.startswith("## ")]
    assert len(body) == len(a.included)


@SETTINGS
@given(data=st.data())
def test_assembled_contexts_keep_their_promises(world: World, data: st.DataObject) -> None:
    publish(world, data.draw(batches, label="memories"))
    wait = data.draw(st.sampled_from((0, 0, 45, 1_800, 2 * 86_400)), label="wait")
    world.clock.advance(timedelta(seconds=wait))
    world.platform.runner.drain()

    for _ in range(2):
        tenant = data.draw(st.sampled_from(TENANTS), label="tenant")
        subjects = tuple(
            data.draw(
                st.lists(st.sampled_from(SUBJECTS), min_size=1, max_size=3, unique=True),
                label="subjects",
            )
        )
        ahead = data.draw(st.sampled_from((0, 60, 3_600, 86_400)), label="as_of ahead")
        as_of = world.clock.now() + timedelta(seconds=ahead)
        budget = data.draw(st.integers(60, 1_500), label="budget")
        query = data.draw(
            st.one_of(st.just(""), st.lists(st.sampled_from(WORDS), max_size=3).map(" ".join)),
            label="query",
        )
        request = ContextRequest(
            subjects=subjects,
            query=query,
            budget=budget,
            template=data.draw(st.sampled_from(sorted(TEMPLATES)), label="template"),
            tokenizer=data.draw(st.sampled_from(TOKENIZERS), label="tokenizer"),
            allow_constraint_drop=True,
            as_of=as_of,
        )
        response = world.platform.app.context(RequestContext(tenant, "reader"), request)
        check(world, tenant, subjects, as_of, budget, response)
        # the same request at the same instant renders the same bytes
        again = world.platform.app.context(RequestContext(tenant, "reader"), request)
        assert again.assembly.text == response.assembly.text
        assert again.request_id != response.request_id


@SETTINGS
@given(data=st.data())
def test_history_only_brings_older_versions_of_keys_shown(
    world: World, data: st.DataObject
) -> None:
    publish(world, data.draw(batches, label="memories"))
    world.platform.runner.drain()
    tenant = data.draw(st.sampled_from(TENANTS), label="tenant")
    subject = data.draw(st.sampled_from(SUBJECTS), label="subject")
    budget = data.draw(st.integers(60, 1_500), label="budget")
    request = ContextRequest(
        subjects=(subject,),
        budget=budget,
        template=data.draw(st.sampled_from(sorted(TEMPLATES)), label="template"),
        allow_constraint_drop=True,
        include_history=True,
        as_of=world.clock.now(),
    )
    response = world.platform.app.context(RequestContext(tenant, "reader"), request)
    a = response.assembly
    assert a.tokens <= budget
    shown = {
        (i.candidate.memory.stream, i.candidate.memory.key)
        for i in a.included
        if i.candidate.via != "history"
    }
    for inc in a.included:
        m = inc.candidate.memory
        assert m.tenant == tenant
        assert m.stream == subject
        if m.status is MemoryStatus.SUPERSEDED:
            assert inc.candidate.via == "history"
            # an older version of a key whose current version was retrieved
            assert m.key is not None
            current = world.platform.store.history(tenant, subject, m.key)
            assert any(c.status is MemoryStatus.ACTIVE and c.version > m.version for c in current)
        else:
            assert m.status is MemoryStatus.ACTIVE
        if inc.candidate.via == "history":
            # never an old version without the current one beside it
            assert (m.stream, m.key) in shown, (m.key, a.text)
