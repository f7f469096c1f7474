"""The context protocol's pure core: hierarchical truncation, trimming, token accounting,
protocol negotiation and template validation; plus the service's stable candidate order."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from pydantic import ValidationError

from mnemo.adapters.toktok_tokenizer import ToktokTokenizer
from mnemo.bootstrap import Platform
from mnemo.domain.context import (
    DEFAULT_TEMPLATE,
    Assembly,
    Candidate,
    ContextTemplate,
    SectionSpec,
    assemble,
    negotiate_protocol,
    score_candidate,
)
from mnemo.domain.errors import InvalidInput, MnemoError
from mnemo.domain.memory import Memory, MemoryType, Provenance, Scope
from mnemo.service.app import RequestContext
from mnemo.service.context import ContextRequest

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
CL100K = ToktokTokenizer("cl100k_base")
O200K = ToktokTokenizer("o200k_base")
HEADER = "[MNEMO-CONTEXT v1 | fp:0123456789abcdef | tpl:t@1]"


def counter(tokenizer: ToktokTokenizer = CL100K) -> Callable[[str], int]:
    return lambda text: tokenizer.count([text])[0]


COUNT = counter()


def mem(
    mid: str,
    content: str = "",
    *,
    type: MemoryType = MemoryType.FACT,
    key: str | None = None,
    value: str | None = None,
    weight: float = 0.5,
    trust: float = 0.5,
) -> Memory:
    return Memory(
        memory_id=mid,
        tenant="acme",
        stream="user:U1",
        type=type,
        scope=Scope.USER,
        content=content,
        key=key,
        value=value,
        semantic_weight=weight,
        provenance=Provenance(trust=trust),
        created_at=T0,
        source_event_id=f"event-{mid}",
        content_hash=f"hash-{mid}",
    )


def cand(memory: Memory, *, score: float = 1.0, weight: float | None = None) -> Candidate:
    return Candidate(
        memory=memory,
        relevance=1.0,
        rank=None,
        weight=memory.semantic_weight if weight is None else weight,
        freshness=1.0,
        trust=memory.provenance.trust,
        score=score,
    )


def section(name: str, priority: int, budget: int = 10_000, **extra: Any) -> SectionSpec:
    return SectionSpec(name=name, priority=priority, budget=budget, render="- {text}", **extra)


def template(*sections: SectionSpec) -> ContextTemplate:
    return ContextTemplate(name="t", version=1, sections=sections)


THREE = template(
    section("rules", 1, types=(MemoryType.CONSTRAINT,)),
    section("facts", 2),
    section("notes", 3),
)

# Weight and score disagree on purpose: truncation must follow the weight.
RULES = [
    cand(mem("r1", "Never offer credit to minors.", type=MemoryType.CONSTRAINT, weight=0.9)),
    cand(mem("r2", "Always answer in French.", type=MemoryType.CONSTRAINT, weight=0.4)),
]
FACTS = [
    cand(mem("f1", "The user lives in Lyon.", weight=0.3), score=0.9),
    cand(mem("f2", "The user has two cats.", weight=0.9), score=0.5),
    cand(mem("f3", "The user works as a nurse.", weight=0.6), score=0.1),
]
NOTES = [
    cand(mem("n1", "Asked about train times yesterday.", weight=0.2), score=0.9),
    cand(mem("n2", "Prefers short answers in the evening.", weight=0.8), score=0.1),
    cand(mem("n3", "Mentioned a trip to Kyoto in March.", weight=0.5), score=0.5),
]
SECTIONS = {"rules": RULES, "facts": FACTS, "notes": NOTES}
# notes by weight, then facts by weight, then the constraints by weight
DROP_ORDER = ["n1", "n3", "n2", "f1", "f3", "f2", "r2", "r1"]


def run(
    budget: int,
    sections: dict[str, list[Candidate]] | None = None,
    tpl: ContextTemplate = THREE,
    *,
    count: Callable[[str], int] = COUNT,
    allow: bool = False,
) -> Assembly:
    return assemble(
        tpl,
        SECTIONS if sections is None else sections,
        budget,
        count,
        header=HEADER,
        allow_constraint_drop=allow,
    )


def ids(assembly: Assembly) -> list[str]:
    return [i.candidate.memory.memory_id for i in assembly.included]


def dropped(assembly: Assembly) -> list[str]:
    return [t.memory_id for t in assembly.truncations]


# ---- truncation order ---------------------------------------------------------------------


def test_everything_fits_in_template_order_with_headings() -> None:
    a = run(10_000)
    assert a.text.splitlines() == [
        HEADER,
        "## rules",
        "- Never offer credit to minors.",
        "- Always answer in French.",
        "## facts",
        "- The user lives in Lyon.",
        "- The user has two cats.",
        "- The user works as a nurse.",
        "## notes",
        "- Asked about train times yesterday.",
        "- Prefers short answers in the evening.",
        "- Mentioned a trip to Kyoto in March.",
    ]
    assert a.truncations == []
    assert a.warnings == []
    assert [(i.section, i.rank) for i in a.included][:3] == [
        ("rules", 1),
        ("rules", 2),
        ("facts", 1),
    ]


def test_over_the_total_budget_the_lowest_priority_section_gives_up_its_lightest_first() -> None:
    full = run(10_000).tokens
    seen_drops: list[str] = []
    for budget in range(full, COUNT(HEADER) - 1, -1):
        a = run(budget, allow=True)
        assert a.tokens <= budget
        assert a.tokens == COUNT(a.text)
        order = dropped(a)
        # always a prefix of the global order: notes (by weight), facts, then constraints
        assert order == DROP_ORDER[: len(order)], (budget, order)
        assert len(order) >= len(seen_drops), "a smaller budget never keeps more"
        seen_drops = order
        assert sorted(ids(a) + order) == sorted(DROP_ORDER)
    assert seen_drops == DROP_ORDER


def test_exactly_the_lightest_note_goes_when_one_line_too_many() -> None:
    without_n1 = run(10_000, {**SECTIONS, "notes": NOTES[1:]})
    a = run(without_n1.tokens)
    assert dropped(a) == ["n1"]  # weight 0.2 but the best score of its section
    assert a.text == without_n1.text
    assert [(x.memory_id, x.section, x.reason) for x in a.left_out] == [("n1", "notes", "budget")]
    # one token less and the next lightest note goes too
    assert dropped(run(without_n1.tokens - 1)) == ["n1", "n3"]


def test_section_budgets_are_enforced_independently() -> None:
    two_facts = COUNT("## facts\n- The user has two cats.\n- The user works as a nurse.")
    tpl = template(
        section("rules", 1, types=(MemoryType.CONSTRAINT,)),
        section("facts", 2, budget=two_facts),
        section("notes", 3),
    )
    a = run(10_000, tpl=tpl)
    assert dropped(a) == ["f1"]  # the lightest fact, although it has the best score
    assert [i.candidate.memory.memory_id for i in a.included if i.section == "notes"] == [
        "n1",
        "n2",
        "n3",
    ]
    assert a.section_tokens["facts"] == two_facts
    for spec in tpl.sections:
        assert a.section_tokens[spec.name] <= spec.budget
    # the section's tokens are those of its own block of the text
    lines = a.text.splitlines()
    start = lines.index("## facts")
    block = "\n".join(lines[start : lines.index("## notes")])
    assert a.section_tokens["facts"] == COUNT(block)
    # a section one token short of its content loses one more
    tighter = template(
        section("rules", 1, types=(MemoryType.CONSTRAINT,)),
        section("facts", 2, budget=two_facts - 1),
        section("notes", 3),
    )
    assert dropped(run(10_000, tpl=tighter)) == ["f1", "f3"]


def test_per_memory_tokens_and_ranks() -> None:
    a = run(10_000)
    for inc in a.included:
        assert inc.tokens == COUNT(f"- {inc.candidate.memory.content}")
    facts = [i for i in a.included if i.section == "facts"]
    assert [(i.candidate.memory.memory_id, i.rank) for i in facts] == [
        ("f1", 1),
        ("f2", 2),
        ("f3", 3),
    ]


# ---- constraints ----------------------------------------------------------------------------


def test_a_constraint_that_would_be_dropped_is_an_error_unless_allowed() -> None:
    one_rule = COUNT("## rules\n- Never offer credit to minors.")
    tpl = template(
        section("rules", 1, budget=one_rule, types=(MemoryType.CONSTRAINT,)),
        section("facts", 2),
    )
    sections = {"rules": RULES, "facts": FACTS}
    with pytest.raises(MnemoError) as caught:
        run(10_000, sections, tpl)
    assert caught.value.code == "CONSTRAINT_DROPPED"
    assert caught.value.extra["memory_ids"] == ["r2"]
    a = run(10_000, sections, tpl, allow=True)
    assert dropped(a) == ["r2"]
    assert a.warnings == ["CONSTRAINT_DROPPED:r2"]
    assert "r1" in ids(a)


def test_the_total_budget_drops_constraints_only_when_nothing_else_is_left() -> None:
    only_rules = run(10_000, {"rules": RULES})
    # everything but the constraints fits: facts and notes go, no error
    a = run(only_rules.tokens, allow=False)
    assert ids(a) == ["r1", "r2"]
    assert a.warnings == []
    with pytest.raises(MnemoError) as caught:
        run(only_rules.tokens - 1)
    assert caught.value.code == "CONSTRAINT_DROPPED"
    assert caught.value.extra["memory_ids"] == ["r2"]


def test_in_a_mixed_section_facts_go_before_a_lighter_constraint() -> None:
    mixed = template(section("all", 1))
    light_rule = cand(mem("c1", "Never share the address.", type=MemoryType.CONSTRAINT, weight=0.1))
    heavy_fact = cand(mem("x1", "The user likes jazz music a lot.", weight=0.9))
    sections = {"all": [light_rule, heavy_fact]}
    only_rule = run(10_000, {"all": [light_rule]}, mixed)
    a = run(only_rule.tokens, sections, mixed)
    assert ids(a) == ["c1"]
    assert dropped(a) == ["x1"]


def history(memory: Memory, *, score: float = 0.1) -> Candidate:
    return Candidate(memory, 0.25, None, memory.semantic_weight, 1.0, 0.5, score, "history")


def test_an_old_version_never_stays_without_the_current_one() -> None:
    new = cand(mem("v2", key="size", value="XL", weight=0.3), score=0.9)
    old = history(mem("v1", key="size", value="L", weight=0.9))
    tpl = template(section("facts", 1, kv_render="- {key}: {value} (v{version})"))
    only_new = run(10_000, {"facts": [new]}, tpl)
    a = run(only_new.tokens, {"facts": [new, old]}, tpl)
    assert ids(a) == ["v2"]
    assert dropped(a) == ["v1"]


def test_dropping_an_old_version_of_a_constraint_is_not_dropping_a_constraint() -> None:
    rule = cand(mem("c2", "Never lend to minors.", type=MemoryType.CONSTRAINT, weight=0.2))
    old = history(mem("c1", "Never lend money.", type=MemoryType.CONSTRAINT, weight=0.9))
    tpl = template(section("rules", 1))
    only_rule = run(10_000, {"rules": [rule]}, tpl)
    a = run(only_rule.tokens, {"rules": [rule, old]}, tpl)  # no error
    assert ids(a) == ["c2"]
    assert dropped(a) == ["c1"]
    assert a.warnings == []


# ---- trimming -------------------------------------------------------------------------------

LONG_EN = (
    "The user moved to Lyon in 2021. She works night shifts at the hospital. "
    "Her cats are called Miso and Tofu. She prefers to be contacted by email."
)
LONG_ZH = "用户住在上海浦东。她每天早上喝一杯美式咖啡。她对花生过敏！她喜欢周末去爬山。"


@pytest.mark.parametrize(("content", "cut"), [(LONG_EN, ". "), (LONG_ZH, "。")])
def test_a_memory_longer_than_its_section_keeps_whole_leading_sentences(
    content: str, cut: str
) -> None:
    full_line = COUNT(f"## notes\n- {content}")
    tpl = template(section("notes", 1, budget=full_line - 2))
    a = run(10_000, {"notes": [cand(mem("m1", content))]}, tpl)
    assert ids(a) == ["m1"]
    inc = a.included[0]
    assert inc.trimmed
    line = a.text.splitlines()[-1]
    kept = line.removeprefix("- ")
    assert kept != content
    assert content.startswith(kept)
    assert kept[-1] in ".。！!", f"cut inside a sentence: {kept!r}"
    rest = content[len(kept) :]
    assert rest
    assert rest[0] not in ".。！!？?"
    if cut == ". ":
        assert rest[0] == " "
    assert a.section_tokens["notes"] <= full_line - 2
    assert inc.tokens == COUNT(line)


def test_trimming_keeps_as_many_sentences_as_fit() -> None:
    sentences = [
        "The user moved to Lyon in 2021.",
        " She works night shifts at the hospital.",
        " Her cats are called Miso and Tofu.",
        " She prefers to be contacted by email.",
    ]
    for keep in (1, 2, 3):
        budget = COUNT("## notes\n- " + "".join(sentences[:keep]))
        tpl = template(section("notes", 1, budget=budget))
        a = run(10_000, {"notes": [cand(mem("m1", LONG_EN))]}, tpl)
        assert a.text.splitlines()[-1] == "- " + "".join(sentences[:keep])
        assert a.included[0].trimmed


def test_a_decimal_point_is_not_a_sentence_end() -> None:
    content = "The fee is 3.5 percent of the loan amount for now. It is waived for students."
    budget = COUNT("## notes\n- The fee is 3.5 percent of the loan amount for now.")
    tpl = template(section("notes", 1, budget=budget))
    a = run(10_000, {"notes": [cand(mem("m1", content))]}, tpl)
    assert a.text.splitlines()[-1] == "- The fee is 3.5 percent of the loan amount for now."
    # and one token less: nothing whole fits, so the memory goes rather than "The fee is 3."
    tpl = template(section("notes", 1, budget=budget - 1))
    a = run(10_000, {"notes": [cand(mem("m1", content))]}, tpl)
    assert ids(a) == []
    assert dropped(a) == ["m1"]
    assert "3." not in a.text


def test_a_memory_that_cannot_fit_goes_and_does_not_take_lighter_ones_with_it() -> None:
    one_sentence = "A single very long sentence about the user's many travel plans " * 3
    big = cand(mem("big", one_sentence.strip(), weight=0.9))
    small = cand(mem("small", "Likes tea.", weight=0.1))
    budget = COUNT("## notes\n- Likes tea.") + 2
    tpl = template(section("notes", 1, budget=budget))
    a = run(10_000, {"notes": [big, small]}, tpl)
    assert ids(a) == ["small"]
    assert dropped(a) == ["big"]
    assert not any(i.trimmed for i in a.included)


def test_an_untrimmable_constraint_is_refused_by_name() -> None:
    rule = cand(mem("c1", "Never " + "ever " * 40 + "lend money.", type=MemoryType.CONSTRAINT))
    other = cand(mem("c2", "Be polite.", type=MemoryType.CONSTRAINT, weight=0.1))
    tpl = template(section("rules", 1, budget=20))
    with pytest.raises(MnemoError) as caught:
        run(10_000, {"rules": [rule, other]}, tpl)
    assert caught.value.code == "CONSTRAINT_DROPPED"
    assert caught.value.extra["memory_ids"] == ["c1"]


# ---- header and budget ----------------------------------------------------------------------


def test_the_header_alone_over_budget_is_budget_too_small() -> None:
    with pytest.raises(InvalidInput) as caught:
        run(COUNT(HEADER) - 1)
    assert caught.value.code == "BUDGET_TOO_SMALL"
    with pytest.raises(InvalidInput):
        run(COUNT(HEADER) - 1, {})
    bare = run(COUNT(HEADER), allow=True)
    assert bare.text == HEADER
    assert bare.included == []
    assert set(dropped(bare)) == set(DROP_ORDER)
    assert bare.section_tokens == {"rules": 0, "facts": 0, "notes": 0}


# ---- determinism and token accounting -------------------------------------------------------


def test_the_same_inputs_give_the_same_text() -> None:
    first = run(90, allow=True)
    for _ in range(3):
        again = run(90, allow=True)
        assert again.text == first.text
        assert dropped(again) == dropped(first)
        assert again.section_tokens == first.section_tokens


ZH_FACTS = [
    cand(mem("z1", "用户住在上海浦东，离地铁站很近。", weight=0.7)),
    cand(mem("z2", "用户每天早上喝一杯美式咖啡。", weight=0.4)),
    cand(mem("z3", "禁止向未成年人推荐信贷产品。", type=MemoryType.CONSTRAINT, weight=0.9)),
    cand(mem("z4", "用户对花生过敏，点餐时要提醒。", weight=0.2)),
]
EN_FACTS = [*FACTS, *NOTES]
MIXED = [*ZH_FACTS[:2], *FACTS[:2]]


@pytest.mark.parametrize("tokenizer", [CL100K, O200K], ids=["cl100k", "o200k"])
@pytest.mark.parametrize("content", [ZH_FACTS, EN_FACTS, MIXED], ids=["zh", "en", "mixed"])
def test_reported_tokens_are_the_tokenizers_own_count(
    tokenizer: ToktokTokenizer, content: list[Candidate]
) -> None:
    count = counter(tokenizer)
    tpl = template(section("facts", 1), section("more", 2, budget=40))
    sections = {"facts": content[:2], "more": content[2:]}
    full = run(100_000, sections, tpl, count=count, allow=True).tokens
    for budget in range(count(HEADER), full + 2, 3):
        a = run(budget, sections, tpl, count=count, allow=True)
        assert a.tokens == tokenizer.count([a.text])[0]
        assert a.tokens <= budget
        for inc in a.included:
            assert not inc.trimmed
            assert inc.tokens == count(f"- {inc.candidate.memory.content}")


def test_the_two_encodings_count_chinese_differently() -> None:
    # the point of naming the tokenizer: the same text costs a different number of tokens
    text = run(100_000, {"facts": ZH_FACTS[:2]}, template(section("facts", 1))).text
    assert CL100K.count([text])[0] != O200K.count([text])[0]


# ---- scores ---------------------------------------------------------------------------------


def test_score_components() -> None:
    m = mem("s1", "x", trust=1.0)
    top = score_candidate(m, rank=1, ranked=True, weight=0.5, as_of=T0)
    assert top.relevance == 1.0
    assert top.score == pytest.approx(1.0 * 1.0 * 1.0 * 1.0)
    second = score_candidate(m, rank=2, ranked=True, weight=0.5, as_of=T0)
    assert second.relevance == pytest.approx(61 / 62)  # reciprocal rank, K = 60
    missed = score_candidate(m, rank=None, ranked=True, weight=0.5, as_of=T0)
    assert missed.relevance == 0.0
    unranked = score_candidate(m, rank=None, ranked=False, weight=0.1, as_of=T0)
    assert unranked.relevance == 1.0
    assert unranked.score == pytest.approx(0.6)


# ---- protocol negotiation -------------------------------------------------------------------


def test_negotiate_protocol() -> None:
    assert negotiate_protocol("v1", allow_downgrade=False) == ("v1", None)
    assert negotiate_protocol("v1", allow_downgrade=True) == ("v1", None)
    with pytest.raises(InvalidInput) as caught:
        negotiate_protocol("v2", allow_downgrade=False)
    assert caught.value.code == "PROTOCOL_MISMATCH"
    assert caught.value.field == "protocol"
    assert caught.value.extra["supported_versions"] == ["v1"]
    assert caught.value.as_dict()["supported_versions"] == ["v1"]
    assert negotiate_protocol("v2", allow_downgrade=True) == ("v1", "v2")


# ---- templates ------------------------------------------------------------------------------


def body(**changes: Any) -> dict[str, Any]:
    sec: dict[str, Any] = {
        "name": "facts",
        "priority": 1,
        "budget": 100,
        "render": "- {text} ({weight:.2f})",
    }
    sec.update(changes.pop("section", {}))
    base: dict[str, Any] = {"name": "support", "version": 1, "sections": [sec]}
    base.update(changes)
    return base


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("unknown placeholder", body(section={"render": "- {text} {secret}"})),
        ("positional placeholder", body(section={"render": "- {}"})),
        ("attribute access", body(section={"render": "- {text.__class__}"})),
        ("index access", body(section={"kv_render": "- {key[0]}"})),
        ("bad format spec", body(section={"render": "- {text:.2f}"})),
        ("bad spec on an int", body(section={"render": "- {version:s}"})),
        ("unbalanced brace", body(section={"render": "- {text"})),
        ("huge width", body(section={"render": "- {text:>99999999}"})),
        (
            "duplicate section names",
            body(sections=[{"name": "a", "priority": 1, "budget": 10}] * 2),
        ),
        ("bad protocol", body(protocol="v2")),
        ("bad section name", body(section={"name": "Facts!"})),
        ("zero budget", body(section={"budget": 0})),
        ("no sections", body(sections=[])),
        ("unknown field", body(colour="blue")),
        ("unknown memory type", body(section={"types": ["gossip"]})),
    ],
)
def test_invalid_templates_are_refused(name: str, bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        ContextTemplate.model_validate(bad)


def test_a_valid_template_renders_what_it_names() -> None:
    tpl = ContextTemplate.model_validate(
        body(section={"render": "* [{type}/{scope} v{version}] {text} ({weight:.2f}, {verified})"})
    )
    a = assemble(tpl, {"facts": [FACTS[0]]}, 1_000, COUNT, header=HEADER)
    assert (
        a.text.splitlines()[-1] == "* [fact/user v1] The user lives in Lyon. (0.30, user-claimed)"
    )
    kv = cand(mem("k1", key="size", value="L", type=MemoryType.PREFERENCE))
    a = assemble(DEFAULT_TEMPLATE, {"facts": [kv]}, 1_000, COUNT, header=HEADER)
    assert "- size: L (weight 0.50)" in a.text.splitlines()


FINGERPRINT_CHANGES: list[dict[str, Any]] = [
    {"name": "support2"},
    {"version": 2},
    {"description": "for the help desk"},
    {"section": {"name": "facts2"}},
    {"section": {"priority": 2}},
    {"section": {"budget": 101}},
    {"section": {"heading": "## Facts"}},
    {"section": {"render": "- {text}"}},
    {"section": {"kv_render": "- {key}={value}"}},
    {"section": {"types": ["fact"]}},
    {"section": {"scopes": ["user"]}},
    {"section": {"tags": ["health"]}},
    {"section": {"query": ""}},
    {"section": {"limit": 5}},
    {"section": {"neighbours": 1}},
    {"section": {"where": [{"field": "party_a", "op": "eq", "value": "XX科技"}]}},
    {
        "sections": [
            {"name": "facts", "priority": 1, "budget": 100, "render": "- {text} ({weight:.2f})"},
            {"name": "more", "priority": 2, "budget": 100},
        ]
    },
]


def test_the_fingerprint_changes_with_any_field_and_only_then() -> None:
    base = ContextTemplate.model_validate(body())
    fp = base.fingerprint()
    assert len(fp) == 16
    assert int(fp, 16) >= 0
    assert ContextTemplate.model_validate(body()).fingerprint() == fp
    assert ContextTemplate.model_validate_json(base.model_dump_json()).fingerprint() == fp
    # defaults spelled out are the same template
    explicit = body(
        protocol="v1", description="", section={"limit": 20, "neighbours": 0, "where": None}
    )
    assert ContextTemplate.model_validate(explicit).fingerprint() == fp
    seen = {fp}
    for change in FINGERPRINT_CHANGES:
        other = ContextTemplate.model_validate(body(**dict(change))).fingerprint()
        assert other not in seen, change
        seen.add(other)


# ---- a section filled from a structured query -------------------------------------------

WHERE = [{"field": "penalty_rate", "op": "gt", "value": "5%"}]


def with_clauses(**section: Any) -> dict[str, Any]:
    rules = {"name": "rules", "priority": 1, "budget": 100, "types": ["constraint"], "query": ""}
    clauses = {"name": "clauses", "priority": 2, "budget": 200, "where": WHERE, **section}
    return {"name": "contracts", "version": 1, "sections": [rules, clauses]}


def test_a_query_section_shows_each_hits_place_and_is_offered_no_constraints() -> None:
    template = ContextTemplate.model_validate(with_clauses())
    clauses = template.sections[1]
    assert clauses.render == "- [{source}] {text}"
    assert not clauses.holds_constraints()
    # its own render pattern stands; without a `where` the usual default
    assert ContextTemplate.model_validate(with_clauses(render="- {text}")).sections[1].render == (
        "- {text}"
    )
    assert SectionSpec(name="x", priority=1, budget=10).render == "- {text} (weight {weight:.2f})"
    # the constraints section of a template is never one filled from documents
    only = {"name": "t", "version": 1, "sections": [with_clauses()["sections"][1]]}
    with pytest.raises(ValidationError, match="shows constraints"):
        ContextTemplate.model_validate(only, context={"edge": True})
    # a condition is an object with field, op and value, no more
    for bad in ([{"field": "party_a", "op": "eq"}], [{**WHERE[0], "x": 1}], []):
        with pytest.raises(ValidationError):
            ContextTemplate.model_validate(with_clauses(where=bad))
    # a template without one keeps the fingerprint it always had
    assert "where" not in DEFAULT_TEMPLATE.model_dump(mode="json", exclude_none=True)["sections"][0]


def test_a_query_section_is_unavailable_where_documents_are_not_served(
    platform: Platform,
) -> None:
    from mnemo.domain.errors import Unavailable
    from mnemo.ports import DocumentReads

    class Unserved(DocumentReads):
        """A store that cannot serve the entity read model now."""

        def _none(self) -> Unavailable:
            return Unavailable("not served", code="DOCUMENT_QUERY_UNAVAILABLE")

        def document(self, tenant: str, document_id: str) -> Any:
            raise self._none()

        def stream_documents(self, tenant: str, stream: str) -> Any:
            raise self._none()

        def entity_rows(self, tenant: str, wanted: Any) -> Any:
            raise self._none()

    ctx = RequestContext("acme", "agent")
    platform.app.register_template(ctx, with_clauses())
    platform.runner.drain()
    documents = platform.app.documents
    assert documents is not None
    documents.reads = Unserved()
    with pytest.raises(MnemoError) as refused:
        platform.app.context(ctx, ContextRequest(subjects=("user:U1",), template="contracts"))
    assert refused.value.code == "DOCUMENT_QUERY_UNAVAILABLE"
    # a template without such a section is served as before
    plain = platform.app.context(ctx, ContextRequest(subjects=("user:U1",)))
    assert plain.template == "default@1"


# ---- the service orders candidates stably -------------------------------------------------


def test_the_service_orders_candidates_the_same_whatever_order_they_arrive_in(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    assembler = platform.app.contexts
    tied = [
        cand(mem(f"m{i:02d}", f"Fact number {i} about the user.", weight=0.5), score=0.5)
        for i in range(12)
    ]
    better = cand(mem("m99", "The most relevant fact.", weight=0.5), score=0.9)
    pool = [*tied, better]
    rng = random.Random(7)
    texts: set[str] = set()
    orders: set[tuple[str, ...]] = set()

    def shuffled(
        reads: object, tenant: str, subjects: Sequence[str], spec: SectionSpec, *_: object
    ) -> list[Candidate]:
        if spec.name != "facts":
            return []
        out = list(pool)
        rng.shuffle(out)
        return out

    monkeypatch.setattr(assembler, "_retrieve", shuffled)
    for _ in range(6):
        r = assembler.assemble(
            "acme", "tester", ContextRequest(subjects=("user:U1",), query="facts", as_of=T0)
        )
        texts.add(r.assembly.text)
        orders.add(tuple(ids(r.assembly)))
    assert len(texts) == 1
    (order,) = orders
    assert order == ("m99", *(f"m{i:02d}" for i in range(12)))


def test_a_subject_named_twice_brings_its_memories_once(platform: Platform) -> None:
    ctx = RequestContext("acme", "writer")
    memories = [
        {"type": "constraint", "content": "Never offer credit to minors."},
        {"type": "fact", "content": "The user lives in Lyon."},
    ]
    platform.app.publish(
        ctx,
        [
            {
                "type": "MemoryDeclared",
                "schema_version": 1,
                "stream": "user:U1",
                "payload": {"memory": m},
            }
            for m in memories
        ],
    )
    platform.runner.drain()
    for query in ("", "where does the user live"):
        once = platform.app.context(ctx, ContextRequest(subjects=("user:U1",), query=query))
        twice = platform.app.context(
            ctx, ContextRequest(subjects=("user:U1", "user:U1"), query=query)
        )
        assert len(ids(once.assembly)) == 2
        assert ids(twice.assembly) == ids(once.assembly)
        assert twice.assembly.text == once.assembly.text


def neighbour(memory: Memory, *, score: float) -> Candidate:
    return Candidate(memory, 0.5, None, memory.semantic_weight, 1.0, 0.5, score, "neighbour")


def test_neighbouring_turns_only_fill_what_the_hits_leave_of_the_budget() -> None:
    turn = dict(type=MemoryType.HISTORY)
    hits = [
        cand(mem("h1", "Caroline: I joined a support group.", **turn), score=0.9),
        cand(mem("h2", "Melanie: We went camping in June.", **turn), score=0.3),
    ]
    # the turn right after the best hit scores above the weaker hit, yet goes first
    after = neighbour(mem("h1n", "Melanie: How did it feel?", **turn), score=0.45)
    tpl = template(section("history", 1, types=(MemoryType.HISTORY,)))
    hits_only = run(10_000, {"history": hits}, tpl)
    tight = run(hits_only.tokens, {"history": [hits[0], after, hits[1]]}, tpl)
    assert ids(tight) == ["h1", "h2"]
    assert dropped(tight) == ["h1n"]
    roomy = run(10_000, {"history": [hits[0], after, hits[1]]}, tpl)
    assert ids(roomy) == ["h1", "h1n", "h2"]
    # among neighbours, the one around the weaker hit goes first
    other = neighbour(mem("h2n", "Caroline: Where did you camp?", **turn), score=0.15)
    lines = [hits[0], after, hits[1], other]
    one_spare = run(
        hits_only.tokens + COUNT("\n- Melanie: How did it feel?"), {"history": lines}, tpl
    )
    assert ids(one_spare) == ["h1", "h1n", "h2"]
    assert dropped(one_spare) == ["h2n"]


# ---- ranked sections spend the budget on their evidence ---------------------------------------

TURN = MemoryType.HISTORY
HISTORY_ONLY = template(section("history", 1, types=(TURN,)))


def turn(mid: str, content: str, *, weight: float) -> Memory:
    return mem(mid, content, type=TURN, weight=weight)


def hit(memory: Memory, *, score: float) -> Candidate:
    return Candidate(memory, score, 1, memory.semantic_weight, 1.0, 0.5, score)


def test_the_neighbours_of_the_weaker_hit_go_first_however_old_the_stronger_one_is() -> None:
    # the stronger hit was said first, so it and its neighbours have decayed a little more:
    # a lower weight must not send its neighbours out before the weaker hit's
    strong = hit(turn("s0", "Caroline: my sister adopted a kitten.", weight=0.228195), score=0.637)
    weak = hit(turn("w0", "Melanie: Pepper sleeps on the piano.", weight=0.228206), score=0.599)
    around_strong = [
        neighbour(
            turn(f"s{i}", f"Caroline: we spoke about thing {i}.", weight=0.228190), score=0.3186
        )
        for i in (1, 2)
    ]
    around_weak = [
        neighbour(
            turn(f"w{i}", f"Melanie: we spoke about thing {i}.", weight=0.228210), score=0.2996
        )
        for i in (1, 2)
    ]
    lines = [strong, weak, *around_strong, *around_weak]
    hits_and_one = run(10_000, {"history": [strong, weak, around_strong[0]]}, HISTORY_ONLY)
    # in a section that does not rank and in one that does alike
    for ranked in ((), ("history",)):
        a = assemble(
            HISTORY_ONLY,
            {"history": lines},
            hits_and_one.tokens,
            COUNT,
            header=HEADER,
            **({"ranked": ranked} if ranked else {}),
        )
        assert sorted(ids(a)) == ["s0", "s1", "w0"], ranked
        # the weaker hit's neighbours first, the newest id first among equal scores
        assert dropped(a) == ["w2", "w1", "s2"], ranked


def test_a_ranked_section_gives_up_its_least_relevant_hit_first() -> None:
    # two hits said three minutes apart: their weights differ in the sixth digit
    best = hit(turn("r1", "Caroline: my sister adopted a kitten.", weight=0.228195), score=0.637)
    second = hit(turn("r2", "Melanie: Pepper sleeps on the piano.", weight=0.228206), score=0.599)
    sections = {"history": [best, second]}
    one_line = run(10_000, {"history": [best]}, HISTORY_ONLY).tokens
    ranked = assemble(HISTORY_ONLY, sections, one_line, COUNT, header=HEADER, ranked={"history"})
    assert ids(ranked) == ["r1"]
    assert dropped(ranked) == ["r2"]
    # a section that does not rank keeps the documented order: the lightest line first
    unranked = assemble(HISTORY_ONLY, sections, one_line, COUNT, header=HEADER)
    assert ids(unranked) == ["r2"]
    assert dropped(unranked) == ["r1"]


def test_a_ranked_section_is_not_left_empty_while_one_of_its_hits_fits() -> None:
    long = hit(
        turn("h1", "Melanie: " + "we talked about the weather and the garden " * 8, weight=0.9),
        score=0.9,
    )
    short = hit(turn("h2", "Caroline: the kitten is called Pepper.", weight=0.5), score=0.6)
    shorter = hit(turn("h3", "Caroline: Pepper is grey.", weight=0.5), score=0.3)
    after_long = neighbour(turn("n1", "Caroline: oh nice.", weight=0.5), score=0.45)
    lines = [long, short, after_long, shorter]
    only_short = run(10_000, {"history": [short]}, HISTORY_ONLY).tokens
    assert only_short < run(10_000, {"history": [long]}, HISTORY_ONLY).tokens
    a = assemble(
        HISTORY_ONLY, {"history": lines}, only_short, COUNT, header=HEADER, ranked={"history"}
    )
    # the best hit does not fit: it goes, and the next hit takes what is left
    assert ids(a) == ["h2"]
    assert dropped(a) == ["n1", "h3", "h1"]
    # room for the neighbour, but its hit went: a neighbour never stays once a hit of its
    # section was given up
    room = only_short + COUNT("\n- Caroline: oh nice.")
    a = assemble(HISTORY_ONLY, {"history": lines}, room, COUNT, header=HEADER, ranked={"history"})
    assert "n1" in dropped(a)
    assert "h1" in dropped(a)
    # with room for the two short hits both stay, the weaker after the stronger
    both = run(10_000, {"history": [short, shorter]}, HISTORY_ONLY).tokens
    a = assemble(HISTORY_ONLY, {"history": lines}, both, COUNT, header=HEADER, ranked={"history"})
    assert ids(a) == ["h2", "h3"]
    # over the total budget, below a higher section, the same: a hit that fits what the
    # higher section leaves stays
    two = template(section("facts", 1), section("history", 2, types=(TURN,)))
    facts = run(10_000, {"facts": FACTS}, two).tokens
    extra = facts + COUNT("\n## history\n- Caroline: the kitten is called Pepper.")
    a = assemble(
        two, {"facts": FACTS, "history": lines}, extra, COUNT, header=HEADER, ranked={"history"}
    )
    assert ids(a) == ["f1", "f2", "f3", "h2"]


def test_an_old_version_in_a_ranked_section_never_stays_without_its_current_one() -> None:
    current = "The user's size is XL since the spring, and the user prefers dark colours."
    new = hit(mem("v2", current, key="size", weight=0.3), score=0.9)
    old = history(mem("v1", key="size", value="L", weight=0.9))
    small = hit(mem("x1", "Likes tea.", weight=0.2), score=0.2)
    tpl = template(section("facts", 1))
    # room for the small hit and the old version, not for the current version
    budget = run(10_000, {"facts": [small, old]}, tpl).tokens
    assert run(10_000, {"facts": [new]}, tpl).tokens > budget
    a = assemble(tpl, {"facts": [new, old, small]}, budget, COUNT, header=HEADER, ranked={"facts"})
    assert ids(a) == ["x1"]
    assert dropped(a) == ["v1", "v2"]


def test_each_included_line_reports_its_own_tokens_after_others_were_given_up() -> None:
    # lines given up in one section are freed; a line made later must not read their count
    long = [
        cand(
            mem(
                f"a{i:02d}",
                f"A much longer note about the user's travel plans number {i}.",
                weight=0.1 + i / 100,
            )
        )
        for i in range(30)
    ]
    short = [cand(mem(f"b{i:02d}", f"Short {i}.")) for i in range(30)]
    tpl = template(section("first", 1, budget=40), section("second", 2))
    a = run(10_000, {"first": long, "second": short}, tpl)
    assert len(a.included) > 30
    for inc in a.included:
        assert inc.tokens == COUNT(f"- {inc.candidate.memory.content}"), (
            inc.candidate.memory.memory_id
        )


def said(platform: Platform, texts: Sequence[str]) -> list[str]:
    """The turns of one conversation, three minutes apart and ending an hour before T0
    (the platform's clock): the later a turn, the less its weight has decayed."""
    ctx = RequestContext("acme", "agent")
    start = T0 - timedelta(hours=1)
    result = platform.app.publish(
        ctx,
        [
            {
                "type": "MemoryDeclared",
                "schema_version": 1,
                "stream": "user:U1",
                "occurred_at": (start + timedelta(minutes=3 * i)).isoformat(),
                "payload": {"memory": {"type": "history", "content": text}},
            }
            for i, text in enumerate(texts)
        ],
    )
    platform.runner.drain()
    found = [platform.app.outcome(ctx, a.event_id)[0] for a in result.accepted]
    return [m.memory_id for m in found if m is not None]


CHAT = [
    "Melanie: the weather was grey all week by the sea.",
    "Caroline: we painted the fence on Saturday morning.",
    "Melanie: the bakery on the corner closed early.",
    "Caroline: my sister adopted a grey kitten named Pepper last week.",
    "Melanie: the train was late again on Monday.",
    "Caroline: I finished the book about old lighthouses.",
    "Melanie: the garden needs more water this summer.",
    "Caroline: we watched a film about mountain climbers.",
    "Melanie: a kitten sleeps on our piano.",
    "Caroline: the museum opens a new wing in spring.",
    "Melanie: my cousin moved to a flat near the park.",
    "Caroline: the soup recipe needs less salt next time.",
]


def test_a_conversation_over_budget_keeps_its_best_hit_and_that_hits_neighbours(
    platform: Platform,
) -> None:
    ctx = RequestContext("acme", "agent")
    platform.app.register_template(
        ctx,
        {
            "name": "chat",
            "version": 1,
            "sections": [
                {
                    "name": "rules",
                    "priority": 1,
                    "budget": 200,
                    "types": ["constraint"],
                    "query": "",
                },
                {
                    "name": "history",
                    "priority": 2,
                    "budget": 800,
                    "types": ["history"],
                    "limit": 2,
                    "neighbours": 2,
                    "render": "- {text}",
                },
            ],
        },
    )
    turns = said(platform, CHAT)

    def context(budget: int) -> list[Candidate]:
        request = ContextRequest(
            subjects=("user:U1",),
            query="my sister adopted a kitten",
            budget=budget,
            history="raw",
            template="chat",
        )
        return [i.candidate for i in platform.app.context(ctx, request).assembly.included]

    everything = context(1_000)
    hits = [c for c in everything if c.via == "retrieval"]
    # the stronger hit was said first: its turns weigh a little less than the weaker's
    assert [c.memory.memory_id for c in hits] == [turns[3], turns[8]]
    assert hits[0].score > hits[1].score
    assert hits[0].weight < hits[1].weight
    around = {c.memory.memory_id: c for c in everything if c.via == "neighbour"}
    assert len(around) == 8
    # too small for the stronger hit's line, not for the weaker's: the weaker one is shown
    assert [c.memory.memory_id for c in context(40)] == [turns[8]]
    for budget in range(50, 130, 10):
        kept = context(budget)
        assert kept[0].memory.memory_id == turns[3], budget  # never the weaker hit alone
        shown = {c.memory.memory_id for c in kept}
        gone = [c for mid, c in around.items() if mid not in shown]
        stayed = [c for mid, c in around.items() if mid in shown]
        if stayed and gone:
            # the neighbours of the weaker hit went first
            assert min(c.score for c in stayed) >= max(c.score for c in gone), budget


def test_a_small_budget_shows_the_best_short_hit_rather_than_nothing(
    platform: Platform,
) -> None:
    filler = "Melanie: " + " ".join(
        ["we talked about the weather and the garden and many unrelated small things"] * 7
    )
    texts = [
        filler,
        "Caroline: my sister adopted a grey kitten named Pepper.",
        filler + " again",
        filler + " more",
        "Caroline: the kitten Pepper sleeps on the piano.",
        filler + " last",
    ]
    turns = said(platform, texts)
    ctx = RequestContext("acme", "agent")
    hits = {turns[1], turns[4]}

    def shown(budget: int) -> list[str]:
        request = ContextRequest(
            subjects=("user:U1",), query="kitten Pepper", budget=budget, history="raw"
        )
        found = platform.app.context(ctx, request).assembly.included
        return [i.candidate.memory.memory_id for i in found]

    best = shown(1_000)[0]
    assert best in hits
    for budget in (60, 80, 100):
        # the header and one short hit fit: the best of them is shown
        assert best in shown(budget), budget
    # room for both short hits and no filler: the two hits, not a filler turn
    assert set(shown(140)) == hits
