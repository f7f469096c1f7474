"""Trimming to the budget gives up the same lines as placing them one at a time, in the
reverse of the drop order, while the text fits (the rule docs/context.md states), while
tokenizing a text proportional to the lines, not to the lines times the lines dropped."""

from __future__ import annotations

import random
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import replace

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
    _tier,
    assemble,
    render_line,
)
from mnemo.domain.errors import MnemoError
from mnemo.domain.memory import MemoryType

WORDS = ("coffee", "Kyoto", "loan", "尺码", "花生", "每天早上", "the", "of", "42", "refund")
TYPES = (MemoryType.FACT, MemoryType.HISTORY, MemoryType.CONSTRAINT, MemoryType.CONTEXT)
VIAS = ("retrieval", "retrieval", "retrieval", "retrieval", "neighbour", "history")


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
    ranked: Collection[str] = (),
) -> tuple[str, list[str]]:
    """The rule, one line at a time: each section places its lines in the reverse of the
    drop order, keeping each one if the section still fits its budget with it. A line that
    does not fit is given up; in a section that does not rank, so is every line after it,
    in a ranked one the next line is still tried, unless a line of a higher tier (hit,
    neighbour, older version) of the section has been given up. Then the sections, in
    priority order, place what they kept the same way in the whole text (after a line of
    a section that does not rank is given up, every line after it goes, lower sections'
    included). The lines given up are listed in drop order: section by section, then over
    the total budget the last section's first. (Lines that need trimming are left out of
    these inputs: each one fits its section alone.)"""
    specs = tpl.ordered()
    lines = {s.name: [_Line(c, render_line(s, c)) for c in sections.get(s.name, ())] for s in specs}
    shown = {s.name: [True] * len(lines[s.name]) for s in specs}
    dropped: list[str] = []

    def text_of(spec: SectionSpec) -> str:
        body = [
            line.text for line, on in zip(lines[spec.name], shown[spec.name], strict=True) if on
        ]
        return "\n".join([spec.title(), *body]) if body else ""

    def whole() -> str:
        return "\n".join(p for p in [HEADER, *(text_of(s) for s in specs)] if p)

    def drop_order(spec: SectionSpec) -> list[int]:
        return sorted(
            (i for i, on in enumerate(shown[spec.name]) if on),
            key=lambda i: _drop_order(lines[spec.name][i], spec.name in ranked),
        )

    def place(queue: list[tuple[SectionSpec, int]], fits: Callable[[], bool]) -> None:
        """Place the lines of `queue` (in keep order) one at a time."""
        for spec, i in queue:
            shown[spec.name][i] = False
        given_up: set[tuple[str, int]] = set()
        lost: dict[str, int] = {}
        stopped = False
        for spec, i in queue:
            tier = _tier(lines[spec.name][i].candidate)
            if not stopped and tier >= lost.get(spec.name, -1):
                shown[spec.name][i] = True
                if fits():
                    continue
                shown[spec.name][i] = False
            given_up.add((spec.name, i))
            lost[spec.name] = max(lost.get(spec.name, -1), tier)
            stopped = stopped or spec.name not in ranked
        for spec, i in reversed(queue):
            if (spec.name, i) in given_up:
                dropped.append(lines[spec.name][i].candidate.memory.memory_id)

    for spec in specs:
        place(
            [(spec, i) for i in reversed(drop_order(spec))],
            lambda spec=spec: count(text_of(spec)) <= spec.budget,
        )
    place(
        [(spec, i) for spec in specs for i in reversed(drop_order(spec))],
        lambda: count(whole()) <= budget,
    )
    return whole(), dropped


def random_case(
    rng: random.Random, sections: int, lines: int
) -> tuple[ContextTemplate, dict[str, list[Candidate]], int, set[str]]:
    """A template, its sections' candidates (hits, and now and then a neighbouring turn or
    an older version shown as history), a total budget, and the sections ranked by a
    text (about half of them)."""
    tpl = template([rng.randint(40, 400) for _ in range(sections)])
    by_section: dict[str, list[Candidate]] = {}
    n = 0
    for spec in tpl.ordered():
        found = []
        for _ in range(rng.randint(0, lines)):
            n += 1
            words = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 6)))
            memory = mem(f"m{n:04d}", words, type=rng.choice(TYPES), weight=weight(rng))
            via = rng.choice(VIAS)
            found.append(replace(cand(memory, score=rng.random()), via=via))
        by_section[spec.name] = found
    ranked = {s.name for s in tpl.sections if rng.random() < 0.5}
    return tpl, by_section, rng.randint(30, 900), ranked


@pytest.mark.parametrize("encoding", ["cl100k_base", "o200k_base"])
def test_the_lines_given_up_are_those_of_one_at_a_time(encoding: str) -> None:
    tokenizer = ToktokTokenizer(encoding)

    def count(text: str) -> int:
        return tokenizer.count([text])[0]

    rng = random.Random(11)
    compared = refused = skipped = 0
    for _ in range(300):
        tpl, sections, budget, ranked = random_case(rng, rng.randint(1, 4), 40)
        if count(HEADER) > budget:  # refused whole (not what this test is about)
            continue
        expected = reference(tpl, sections, budget, count, ranked)
        dropped_constraint = any(
            c.memory.memory_id in expected[1]
            and c.memory.type is MemoryType.CONSTRAINT
            and c.via != "history"
            for found in sections.values()
            for c in found
        )
        if dropped_constraint:
            with pytest.raises(MnemoError) as refusal:
                assemble(tpl, sections, budget, count, header=HEADER, ranked=ranked)
            assert refusal.value.code == "CONSTRAINT_DROPPED"
            refused += 1
        got = assemble(
            tpl, sections, budget, count, header=HEADER, allow_constraint_drop=True, ranked=ranked
        )
        assert (got.text, [t.memory_id for t in got.truncations]) == expected
        compared += 1
        # a ranked section skipped a line that did not fit and kept a later one
        kept = {i.candidate.memory.memory_id for i in got.included}
        skipped += any(
            c.memory.memory_id in expected[1]
            and any(
                o.memory.memory_id in kept
                and _drop_order(_Line(o, ""), True) < _drop_order(_Line(c, ""), True)
                for o in sections[name]
            )
            for name in ranked
            for c in sections[name]
        )
    # every outcome was exercised
    assert compared > 250
    assert refused > 20
    assert skipped > 20


@pytest.mark.parametrize("ranked", [False, True], ids=["unranked", "ranked"])
def test_trimming_a_long_section_tokenizes_a_text_in_proportion_to_its_lines(
    ranked: bool,
) -> None:
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
    # ranked, the lines after the first one given up are each tried in turn, too
    result: Assembly = assemble(
        tpl,
        {"s0": [cand(m, score=rng.random()) for m in memories]},
        1_000,
        count,
        header=HEADER,
        ranked={"s0"} if ranked else (),
    )
    assert 5 < len(result.included) < 100
    assert len(result.truncations) > 300
    rendered = sum(len(render_line(tpl.sections[0], cand(m))) + 1 for m in memories)
    # one at a time, each of the 300 and more drops tokenized what was left of the
    # section: about 150 times the lines' length; here a few times it
    assert sum(counted) < 25 * rendered
