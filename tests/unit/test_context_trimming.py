"""Trimming to the budget gives up the same lines as dropping one line at a time in drop
order until the text fits (the rule docs/context.md states), while tokenizing a text
proportional to the lines, not to the lines times the lines dropped."""

from __future__ import annotations

import random
from collections.abc import Callable, Mapping, Sequence

import pytest
from tests.unit.test_context_assembly import HEADER, cand, mem

from mnemo.adapters.toktok_tokenizer import ToktokTokenizer
from mnemo.domain.context import (
    Assembly,
    Candidate,
    ContextTemplate,
    SectionSpec,
    _drop_order,
    _Line,
    assemble,
    render_line,
)
from mnemo.domain.errors import MnemoError
from mnemo.domain.memory import MemoryType

WORDS = ("coffee", "Kyoto", "loan", "尺码", "花生", "每天早上", "the", "of", "42", "refund")
TYPES = (MemoryType.FACT, MemoryType.HISTORY, MemoryType.CONSTRAINT, MemoryType.CONTEXT)


def weight(rng: random.Random) -> float:
    return round(rng.uniform(0.01, 0.99), 3)


def template(budgets: Sequence[int]) -> ContextTemplate:
    return ContextTemplate(
        name="t",
        version=1,
        sections=[
            SectionSpec(name=f"s{i}", priority=i + 1, budget=b, types=(TYPES[i % len(TYPES)],))
            for i, b in enumerate(budgets)
        ],
    )


def reference(
    tpl: ContextTemplate,
    sections: Mapping[str, Sequence[Candidate]],
    budget: int,
    count: Callable[[str], int],
) -> tuple[str, list[str]]:
    """The rule, one line at a time: in each section, while it is over its budget, the
    first line in drop order goes; then, while the whole is over the budget, the last
    section with lines gives up its first line in drop order. (Lines that need trimming
    are left out of these inputs: each one fits its section alone.)"""
    specs = tpl.ordered()
    lines = {s.name: [_Line(c, render_line(s, c)) for c in sections.get(s.name, ())] for s in specs}
    dropped: list[str] = []

    def text_of(spec: SectionSpec) -> str:
        body = lines[spec.name]
        return "\n".join([spec.title(), *(line.text for line in body)]) if body else ""

    def whole() -> str:
        return "\n".join(p for p in [HEADER, *(text_of(s) for s in specs)] if p)

    def drop(spec: SectionSpec) -> None:
        victim = min(lines[spec.name], key=_drop_order)
        lines[spec.name].remove(victim)
        dropped.append(victim.candidate.memory.memory_id)

    for spec in specs:
        while lines[spec.name] and count(text_of(spec)) > spec.budget:
            drop(spec)
    while count(whole()) > budget:
        drop(next(s for s in reversed(specs) if lines[s.name]))
    return whole(), dropped


def random_case(
    rng: random.Random, sections: int, lines: int
) -> tuple[ContextTemplate, dict[str, list[Candidate]], int]:
    tpl = template([rng.randint(40, 400) for _ in range(sections)])
    by_section: dict[str, list[Candidate]] = {}
    n = 0
    for spec in tpl.ordered():
        found = []
        for _ in range(rng.randint(0, lines)):
            n += 1
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))
            memory = mem(f"m{n:04d}", words, type=rng.choice(TYPES), weight=weight(rng))
            found.append(cand(memory, score=rng.random()))
        by_section[spec.name] = found
    return tpl, by_section, rng.randint(30, 900)


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
def test_the_lines_given_up_are_those_of_one_at_a_time(encoding: str) -> None:
    tokenizer = ToktokTokenizer(encoding)

    def count(text: str) -> int:
        return tokenizer.count([text])[0]

    rng = random.Random(11)
    compared = refused = 0
    for _ in range(300):
        tpl, sections, budget = random_case(rng, rng.randint(1, 4), 40)
        if count(HEADER) > budget:  # refused whole (not what this test is about)
            continue
        expected = reference(tpl, sections, budget, count)
        dropped_constraint = any(
            c.memory.memory_id in expected[1] and c.memory.type is MemoryType.CONSTRAINT
            for found in sections.values()
            for c in found
        )
        if dropped_constraint:
            with pytest.raises(MnemoError) as refusal:
                assemble(tpl, sections, budget, count, header=HEADER)
            assert refusal.value.code == "CONSTRAINT_DROPPED"
            refused += 1
        got = assemble(tpl, sections, budget, count, header=HEADER, allow_constraint_drop=True)
        assert (got.text, [t.memory_id for t in got.truncations]) == expected
        compared += 1
    # both outcomes were exercised
    assert compared > 250
    assert refused > 20


def test_trimming_a_long_section_tokenizes_a_text_in_proportion_to_its_lines() -> None:
    tokenizer = ToktokTokenizer("cl100k_base")
    counted: list[int] = []

    def count(text: str) -> int:
        counted.append(len(text))
        return tokenizer.count([text])[0]

    rng = random.Random(3)
    memories = [
        mem(f"m{i:04d}", " ".join(rng.choice(WORDS) for _ in range(8)), weight=weight(rng))
        for i in range(400)
    ]
    tpl = template([400])
    result: Assembly = assemble(
        tpl, {"s0": [cand(m) for m in memories]}, 1_000, count, header=HEADER
    )
    assert 5 < len(result.included) < 100
    assert len(result.truncations) > 300
    rendered = sum(len(render_line(tpl.sections[0], cand(m))) + 1 for m in memories)
    # one at a time, each of the 300 and more drops tokenized what was left of the
    # section: about 150 times the lines' length; here a few times it
    assert sum(counted) < 25 * rendered
