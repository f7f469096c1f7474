"""The context protocol: templates, scoring, and hierarchical truncation. Pure functions.

A template is a list of sections, each with a priority (1 is the most important), a token
budget, a render pattern and the filters that feed it. Assembly renders every section,
then trims: a memory that cannot fit its section even alone goes first; inside a section
over its budget, older versions shown as history go next, then neighbouring turns (lowest
score first), then the hits: in a section ranked by a text the lowest score first, in one
that does not rank the lowest semantic weight first (a binding constraint last); over the
total budget, the lowest-priority section gives up lines in that same order first, and so
on. A ranked section that must give up a line that does not fit still keeps a later one
that does, so it is never left empty while one of its hits fits (`_drop_order`, and
`assemble`'s `shed`). Memories are whole lines: a line is never cut inside a token or a
sentence (a memory too long for its section keeps only its leading whole sentences). A
constraint is never dropped silently: dropping one is an error unless the caller allowed
it.

Score of a memory (reported component by component):
    relevance = the hybrid retrieval's fused score (dense and BM25 lists fused by the
                vector engine, plus episode and source boosts), scaled to 0..1 (1.0 for the
                best match, and in a section that ranks without a query)
    score     = relevance * (0.5 + weight) * (0.75 + 0.25 * freshness) * (0.75 + 0.25 * trust)
where weight is the decayed semantic weight, freshness the share of validity left (1.0 for
a permanent memory) and trust the provenance's trust score.
"""

from __future__ import annotations

import hashlib
import json
import re
import string
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Annotated, Any

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from mnemo.domain.edge import at_edge, json_int
from mnemo.domain.errors import InvalidInput, MnemoError
from mnemo.domain.memory import Memory, MemoryType, Scope
from mnemo.domain.tool_result import format_age, tool_of

__all__ = [
    "DEFAULT_TEMPLATE",
    "MAX_TEMPLATE_VERSION",
    "PROTOCOL_VERSIONS",
    "RRF_K",
    "Assembly",
    "Candidate",
    "ContextTemplate",
    "SectionSpec",
    "assemble",
    "negotiate_protocol",
    "neutral_text",
    "score_candidate",
]

PROTOCOL_VERSIONS = ("v1",)
RRF_K = 60
PLACEHOLDERS = frozenset(
    {
        "text",
        "content",
        "key",
        "value",
        "weight",
        "trust",
        "type",
        "scope",
        "id",
        "version",
        "source",
        "verified",
    }
)
_SAMPLE = {
    "text": "t",
    "content": "c",
    "key": "k",
    "value": "v",
    "weight": 0.5,
    "trust": 0.5,
    "type": "fact",
    "scope": "user",
    "id": "i",
    "version": 1,
    "source": "s",
    "verified": "user-claimed",
}
# Where a sentence ends: CJK punctuation anywhere; ASCII punctuation only before whitespace
# or the end (so "3.5" or "e.g" are not cut); closing quotes and brackets stay with it.
_SENTENCE_END = re.compile(r"[。！？；]+[\"'”’」』）)]*|[.!?;]+[\"'”’」』）)]*(?=\s|$)|\n")
# Widths and precisions in render patterns: three digits are plenty for a context line.
_HUGE_SPEC_NUMBER = re.compile(r"\d{4,}")
# Stored text must not forge the context's structure: every line break or other control
# character (\r, U+2028, U+2029, U+0085, ...) becomes a space, a citation tag loses its
# angle bracket, and a line cannot start like a heading or the protocol header.
_CONTROL = re.compile(
    r"[\x00-\x1f\x7f-\x9f\u2028\u2029\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]"
)
_REF_TAG = re.compile(r"<(\s*/?\s*memory_ref)", re.IGNORECASE)
_LINE_MARKER = re.compile(r"^(\s*)(#|\[MNEMO-CONTEXT)", re.IGNORECASE)


def neutral_text(text: str) -> str:
    """Stored text made safe to render inside a context line (see above)."""
    flat = _CONTROL.sub(" ", text)
    if "<" in flat:
        flat = _REF_TAG.sub(r"‹\1", flat)
    return " ".join(flat.split())


def _neutral_line(line: str) -> str:
    """A rendered memory line, which can never read as a heading or the header."""
    return _LINE_MARKER.sub(r"\1\\\2", line, count=1)


def _check_pattern(pattern: str) -> str:
    try:
        fields = [
            (name, spec or "")
            for _, name, spec, _ in string.Formatter().parse(pattern)
            if name is not None
        ]
    except ValueError as exc:
        raise ValueError(f"render pattern does not parse: {exc}") from exc
    names = {name for name, _ in fields}
    # plain names only: "{text.__class__}" or "{key[0]}" would reach into the objects
    unknown = names - PLACEHOLDERS
    if unknown:
        raise ValueError(
            f"render pattern names unknown fields {sorted(unknown)}; known: {sorted(PLACEHOLDERS)}"
        )
    if any("{" in spec for _, spec in fields):
        raise ValueError("render pattern format specs cannot name fields")
    if any(_HUGE_SPEC_NUMBER.search(spec) for _, spec in fields):
        raise ValueError("render pattern widths and precisions are at most 999")
    try:
        pattern.format_map(_SAMPLE)
    except (ValueError, KeyError, IndexError, AttributeError) as exc:
        raise ValueError(f"render pattern does not format: {exc}") from exc
    return pattern


class SectionSpec(BaseModel):
    """One section of a template and what feeds it."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[a-z][a-z0-9_-]{0,31}$")
    priority: int = Field(
        ge=1, le=100, description="1 is kept longest; the highest number is cut first"
    )
    budget: int = Field(ge=1, le=100_000, description="the section's own token budget")
    heading: str | None = Field(default=None, max_length=200, description="defaults to '## <name>'")
    render: str = Field(default="- {text} (weight {weight:.2f})", max_length=500)
    kv_render: str = Field(default="- {key}: {value} (weight {weight:.2f})", max_length=500)
    types: tuple[MemoryType, ...] = ()
    scopes: tuple[Scope, ...] = ()
    tags: tuple[Annotated[str, Field(max_length=64)], ...] = Field(default=(), max_length=32)
    query: str | None = Field(
        default=None,
        max_length=2_000,
        description="None: rank by the request's query; '': no ranking, every matching memory "
        "by score; any other text: rank by that text",
    )
    limit: int = Field(default=20, ge=1, le=200)
    neighbours: int = Field(
        default=0, ge=0, le=5, description="turns of the same episode pulled in around each hit"
    )
    _ints = field_validator("priority", "budget", "limit", "neighbours", mode="before")(json_int)
    where: tuple[dict[str, Any], ...] | None = Field(
        default=None,
        min_length=1,
        max_length=16,
        description="a structured query over the documents' entities (POST /v1/query's "
        "conditions): the section is filled with the document sections that meet them",
    )

    @model_validator(mode="before")
    @classmethod
    def _document_render(cls, data: Any) -> Any:
        """A section filled from a structured query shows each hit's place by default."""
        if isinstance(data, Mapping) and data.get("where") and "render" not in data:
            return {**data, "render": DOCUMENT_RENDER}
        return data

    @field_validator("where")
    @classmethod
    def _conditions(
        cls, value: tuple[dict[str, Any], ...] | None
    ) -> tuple[dict[str, Any], ...] | None:
        # the shape only: the values are checked against the entity rules in force where
        # the template comes in (mnemo.service.app, QUERY_INVALID)
        for condition in value or ():
            if set(condition) != {"field", "op", "value"}:
                raise ValueError("a condition is an object with field, op and value")
        return value

    @field_validator("render", "kv_render")
    @classmethod
    def _pattern(cls, value: str) -> str:
        return _check_pattern(value)

    def title(self) -> str:
        return self.heading if self.heading is not None else f"## {self.name}"

    def holds_constraints(self) -> bool:
        """Whether constraints are offered to this section (its types allow them; a
        section filled from a structured query is offered document sections only)."""
        if self.where is not None:
            return False
        return not self.types or MemoryType.CONSTRAINT in self.types

    def hides_constraints(self) -> str | None:
        """Why this section, holding constraints, would not show their words: the field at
        fault, or None. A line must carry the constraint's text whole, plainly (a format
        spec such as `{text:.5}` cuts it)."""
        if not _shows_plainly(self.render, ("text", "content")):
            return "render"
        if not _shows_plainly(self.kv_render, ("text", "value")):
            return "kv_render"
        return None

    def narrows_constraints(self) -> str | None:
        """Why this section would show only some of the subjects' constraints: the field
        at fault, or None. It must take every tag and scope, rank by no text of its own
        (query "" or the request's), and keep at least CONSTRAINT_LIMIT_FLOOR of them. (A
        constraint the request's query does not reach is reported at assembly, as
        CONSTRAINT_DROPPED.)"""
        if self.tags:
            return "tags"
        if self.scopes and set(self.scopes) != set(Scope):
            return "scopes"
        if self.query:
            return "query"
        if self.limit < CONSTRAINT_LIMIT_FLOOR:
            return "limit"
        return None


# the fewest constraints the section that shows them may keep: a section's default limit
CONSTRAINT_LIMIT_FLOOR = 20
# how a section filled from a structured query renders a hit unless it says otherwise: its
# place in the document (p.3 §8.2), then the section's text
DOCUMENT_RENDER = "- [{source}] {text}"


def _shows_plainly(pattern: str, names: tuple[str, ...]) -> bool:
    return any(
        name in names and not spec and not conversion
        for _, name, spec, conversion in string.Formatter().parse(pattern)
    )


# a template's version is stored as a 32-bit signed integer (Cassandra's `int`)
MAX_TEMPLATE_VERSION = 2**31 - 1


class ContextTemplate(BaseModel):
    """A versioned template; its fingerprint changes with any change to its content."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=r"^[a-z][a-z0-9_.-]{0,63}$")
    version: int = Field(ge=1, le=MAX_TEMPLATE_VERSION)
    _ints = field_validator("version", mode="before")(json_int)
    protocol: str = "v1"
    description: str = Field(default="", max_length=1_000)
    sections: tuple[SectionSpec, ...] = Field(min_length=1, max_length=16)

    @field_validator("protocol")
    @classmethod
    def _protocol(cls, value: str) -> str:
        if value not in PROTOCOL_VERSIONS:
            raise ValueError(f"protocol {value!r} is not one of {list(PROTOCOL_VERSIONS)}")
        return value

    @model_validator(mode="after")
    def _unique(self, info: ValidationInfo) -> ContextTemplate:
        names = [s.name for s in self.sections]
        if len(names) != len(set(names)):
            raise ValueError("section names must be unique")
        if at_edge(info):
            self._shows_constraints()
        return self

    def _shows_constraints(self) -> None:
        """Constraints must not vanish from the contexts rendered with this template: the
        first section offered them (in order) shows every one of the subjects', and each
        section offered them renders their words. Refused with the field at fault."""
        holding = [(self.sections.index(s), s) for s in self.ordered() if s.holds_constraints()]
        if not holding:
            raise PydanticCustomError(
                "template_without_constraints",
                "a template needs a section that shows constraints (types empty or naming "
                "constraint)",
                {"path": "sections"},
            )
        index, first = holding[0]
        narrowed = first.narrows_constraints()
        if narrowed is not None:
            raise PydanticCustomError(
                "template_without_constraints",
                "the first section offered constraints must show all of them: no tags or "
                "scopes, no query text of its own and a limit of at least {floor}; section "
                "{section} "
                "narrows them by {narrowed}",
                {
                    "path": f"sections.{index}.{narrowed}",
                    "section": first.name,
                    "narrowed": narrowed,
                    "floor": CONSTRAINT_LIMIT_FLOOR,
                },
            )
        for index, section in holding:
            hidden = section.hides_constraints()
            if hidden is not None:
                raise PydanticCustomError(
                    "template_without_constraints",
                    "a section offered constraints renders their words plainly (the text "
                    "or content field, without a format spec; value or text for key-value "
                    "ones); section {section} does not in {hidden}",
                    {
                        "path": f"sections.{index}.{hidden}",
                        "section": section.name,
                        "hidden": hidden,
                    },
                )

    def fingerprint(self) -> str:
        dumped = self.model_dump(mode="json")
        for section in dumped["sections"]:
            if section.get("where") is None:
                # a section without a query keeps the fingerprint it had before sections
                # could have one
                section.pop("where", None)
        canonical = json.dumps(dumped, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    def ordered(self) -> list[SectionSpec]:
        return sorted(self.sections, key=lambda s: (s.priority, s.name))


DEFAULT_TEMPLATE = ContextTemplate(
    name="default",
    version=1,
    description="Constraints first, then facts and preferences, task context, and history.",
    sections=(
        SectionSpec(
            name="constraints",
            heading="## Constraints",
            priority=1,
            budget=512,
            types=(MemoryType.CONSTRAINT,),
            query="",
            limit=50,
            render="- {text}",
            kv_render="- {key}: {value}",
        ),
        SectionSpec(
            name="facts",
            heading="## Facts and preferences",
            priority=2,
            budget=512,
            types=(MemoryType.PREFERENCE, MemoryType.FACT, MemoryType.EXTERNAL),
        ),
        SectionSpec(
            name="context",
            heading="## Task context",
            priority=3,
            budget=1_024,
            types=(MemoryType.CONTEXT, MemoryType.EPISODE, MemoryType.LONG_TERM),
        ),
        SectionSpec(
            name="history",
            heading="## History",
            priority=4,
            budget=2_048,
            types=(MemoryType.HISTORY,),
            neighbours=1,
        ),
    ),
)


def negotiate_protocol(requested: str, allow_downgrade: bool) -> tuple[str, str | None]:
    """The protocol to render with, and the version it was downgraded from (if any)."""
    if requested in PROTOCOL_VERSIONS:
        return requested, None
    if allow_downgrade:
        return PROTOCOL_VERSIONS[-1], requested
    raise InvalidInput(
        f"protocol {requested!r} is not supported",
        code="PROTOCOL_MISMATCH",
        field="protocol",
        extra={"supported_versions": list(PROTOCOL_VERSIONS)},
    )


@dataclass(frozen=True, slots=True)
class Candidate:
    """A memory offered to a section, with the parts of its score."""

    memory: Memory
    relevance: float
    rank: int | None  # in the engine's fused dense + keyword list; None when not retrieved
    weight: float
    freshness: float
    trust: float
    score: float
    via: str = "retrieval"  # or "neighbour", "history", "summary", "query"
    as_of: datetime | None = None  # the instant it was judged at (a tool result's age)


def score_candidate(
    memory: Memory,
    *,
    rank: int | None,
    ranked: bool,
    weight: float,
    as_of: datetime,
    via: str = "retrieval",
    relevance: float | None = None,
) -> Candidate:
    """`relevance` comes from retrieval (1.0 for the best match); without it, it follows
    from the fused rank by reciprocal rank, 1.0 for the first."""
    if relevance is None and ranked:
        relevance = (RRF_K + 1) / (RRF_K + rank) if rank is not None else 0.0
    elif relevance is None:
        relevance = 1.0
    freshness = memory.remaining_fraction(as_of)
    trust = memory.provenance.trust
    score = relevance * (0.5 + weight) * (0.75 + 0.25 * freshness) * (0.75 + 0.25 * trust)
    return Candidate(
        memory,
        round(relevance, 6),
        rank,
        round(weight, 6),
        round(freshness, 6),
        trust,
        round(score, 9),
        via,
        as_of,
    )


def render_line(spec: SectionSpec, candidate: Candidate, content: str | None = None) -> str:
    m = candidate.memory
    text = neutral_text(content if content is not None else m.text())
    values: dict[str, Any] = {
        "text": text,
        "content": neutral_text(content if content is not None else m.content),
        "key": neutral_text(m.key or ""),
        "value": neutral_text(m.value or ""),
        "weight": candidate.weight,
        "trust": m.provenance.trust,
        "type": m.type.value,
        "scope": m.scope.value,
        "id": m.memory_id,
        "version": m.version,
        "source": neutral_text(m.provenance.source_location or m.provenance.source_id or ""),
        "verified": "verified" if m.provenance.verified else "user-claimed",
    }
    pattern = (
        spec.kv_render if (m.key and m.value and content is None and not m.content) else spec.render
    )
    line = " ".join(pattern.format_map(values).split("\n"))
    return _neutral_line(line + _tool_age(m, candidate.as_of))


def _tool_age(memory: Memory, as_of: datetime | None) -> str:
    """What every line of a tool result says whatever the template: the tool, and the
    result's age at the instant the context is judged at. (A stale one is never shown:
    it is no longer live at that instant.)"""
    tool = tool_of(memory.provenance.source_id)
    if tool is None or memory.fetched_at is None or as_of is None:
        return ""
    age = format_age((as_of - memory.fetched_at).total_seconds())
    return f" [{neutral_text(tool)} result, fetched {age} ago]"


@dataclass(frozen=True, slots=True)
class Included:
    candidate: Candidate
    section: str
    rank: int
    tokens: int
    trimmed: bool


@dataclass(frozen=True, slots=True)
class LeftOut:
    memory_id: str
    section: str
    reason: str  # budget, expired, superseded, low_relevance, not_shown, conflict, summarised


@dataclass
class Assembly:
    text: str
    tokens: int
    included: list[Included]
    left_out: list[LeftOut]
    section_tokens: dict[str, int]
    truncations: list[LeftOut] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)


@dataclass(eq=False)  # a line is itself: removing one never compares memories
class _Line:
    candidate: Candidate
    text: str
    trimmed: bool = False


def _sentences(text: str) -> list[str]:
    """The text cut after each sentence end; joined again they give the text back."""
    parts: list[str] = []
    start = 0
    for end in _SENTENCE_END.finditer(text):
        parts.append(text[start : end.end()])
        start = end.end()
    parts.append(text[start:])
    return [p for p in parts if p.strip()]


def _binding(candidate: Candidate) -> bool:
    """A constraint in force (not an older version shown as history) is never dropped
    silently."""
    return candidate.memory.type is MemoryType.CONSTRAINT and candidate.via != "history"


def _tier(candidate: Candidate) -> int:
    """What a line is to its section: 2 a hit (any line but the two below, and a binding
    constraint always), 1 a turn that came in as a hit's neighbour, 0 an older version
    shown as history. A line is kept only while no line of a higher tier of its section
    has been given up: a neighbour never stays once a hit went, nor an older version once
    its current one (or any other line) went."""
    if _binding(candidate):
        return 2
    return {"history": 0, "neighbour": 1}.get(candidate.via, 2)


def _drop_order(line: _Line, ranked: bool) -> tuple[bool, int, float, float, str]:
    """The line a section gives up first (it keeps them in the reverse order): older
    versions shown as history (never left without their current version), then turns
    that came in as a hit's neighbours (they only fill what the hits leave of the
    budget), then the hits, a binding constraint last. Neighbours go by lowest score (a
    neighbour scores with half its hit's relevance: the neighbours of the weakest hits go
    first); so do the lines of a section `ranked` by a text (the least relevant evidence
    goes first); in a section that does not rank, by lowest weight. Ties: the lowest
    weight or score (the other of the two), then the newest id."""
    c = line.candidate
    by_score = ranked or c.via == "neighbour"
    return (
        _binding(c),
        _tier(c),
        c.score if by_score else c.weight,
        c.weight if by_score else c.score,
        "".join(chr(0x10FFFF - ord(ch)) for ch in c.memory.memory_id),
    )


# A line added to a text adds at least its own tokens, less what a BPE merge across a line
# break saves (one token at most per break in random texts of both encodings; two are
# allowed for). It only spares counting a line that cannot fit: were a tokenizer to save
# more, such a line would be given up although it fits, never kept over the budget.
_JOIN_SLACK = 2


def assemble(
    template: ContextTemplate,
    sections: Mapping[str, Sequence[Candidate]],
    budget: int,
    count: Callable[[str], int],
    *,
    header: str,
    allow_constraint_drop: bool = False,
    ranked: Collection[str] = (),
) -> Assembly:
    """Render and trim. `sections` maps section names to candidates, best first; `ranked`
    names the sections whose candidates were ranked by a text (the request's query or the
    section's own), which give up their least relevant lines first (`_drop_order`)."""
    specs = template.ordered()
    lines: dict[str, list[_Line]] = {}
    truncations: list[LeftOut] = []
    warnings: list[str] = []

    def drop(spec: SectionSpec, victim: _Line) -> None:
        memory = victim.candidate.memory
        if _binding(victim.candidate):
            if not allow_constraint_drop:
                raise MnemoError(
                    f"constraint {memory.memory_id} does not fit in the budget",
                    code="CONSTRAINT_DROPPED",
                    field="budget",
                    extra={"memory_ids": [memory.memory_id], "section": spec.name},
                )
            warnings.append(f"CONSTRAINT_DROPPED:{memory.memory_id}")
        lines[spec.name].remove(victim)
        truncations.append(LeftOut(memory.memory_id, spec.name, "budget"))

    # keyed by the line itself, which it keeps alive: an id would be reused by a line made
    # after one given up was freed, and read its count
    counted: dict[_Line, int] = {}

    def tokens(line: _Line) -> int:
        if line not in counted:
            counted[line] = count(line.text)
        return counted[line]

    def shed(
        order: Sequence[tuple[SectionSpec, _Line]],
        scope: Sequence[SectionSpec],
        limit: int,
        head: str | None,
    ) -> None:
        """Fit the sections of `scope` (after `head`, when there is one) in `limit` tokens.
        Their lines are placed one at a time in the reverse of `order` (the drop order),
        each kept if the text still fits with it, else given up. After a line of a section
        that does not rank, every line after it is given up too (the section and those
        below it give up their lines strictly in drop order); after a line of a `ranked`
        section, the next line is still tried, but only if no line of a higher tier of
        its own section has been given up (`_tier`). The lines given up are dropped in
        drop order.

        Worked out in two steps, with the same outcome. The lines kept before the first
        one given up are the shortest tail of `order` that fits (`_fewest_drops`: a few
        exact counts around an estimate from the lines' own counts). When that line is a
        ranked section's, each line before it is then tried in turn: one whose own count
        (with its section's heading, when the section has nothing yet) cannot fit in what
        is left, allowing `_JOIN_SLACK` per line break, is given up without counting the
        text again; only a line that may fit is counted with the text."""

        def measure(out: set[int]) -> int:
            parts = [] if head is None else [head]
            for spec in scope:
                body = [line.text for line in lines[spec.name] if id(line) not in out]
                if body:
                    parts.append("\n".join([spec.title(), *body]))
            return count("\n".join(parts))

        measured: dict[int, int] = {}

        def fits(k: int) -> bool:
            measured[k] = measure({id(line) for _, line in order[:k]})
            return measured[k] <= limit

        # the tokens left after k drops by the lines' own counts: a guess to start from
        left = {spec.name: len(lines[spec.name]) for spec in scope}
        titles = {spec.name: count(spec.title()) for spec in scope}
        total = (0 if head is None else count(head)) + sum(
            titles[spec.name] + sum(tokens(line) for line in lines[spec.name])
            for spec in scope
            if lines[spec.name]
        )
        estimates = [total]
        for spec, line in order:
            left[spec.name] -= 1
            total -= tokens(line) + (titles[spec.name] if left[spec.name] == 0 else 0)
            estimates.append(total)
        cut = _fewest_drops(fits, estimates, limit)
        placed: set[int] = set()  # lines before the cut that were kept after all
        if cut > 1 and order[cut - 1][0].name in ranked:
            out = {id(line) for _, line in order[:cut]}
            used = measured[cut] if cut in measured else measure(out)
            shown = {
                spec.name: sum(id(line) not in out for line in lines[spec.name]) for spec in scope
            }
            # the highest tier of each section that has given up a line
            lost = {order[cut - 1][0].name: _tier(order[cut - 1][1].candidate)}
            for at in range(cut - 2, -1, -1):
                spec, line = order[at]
                tier = _tier(line.candidate)
                new = shown[spec.name] == 0
                least = tokens(line) + (titles[spec.name] if new else 0)
                if tier >= lost.get(spec.name, -1) and (
                    used + least - _JOIN_SLACK * (2 if new else 1) <= limit
                ):
                    out.discard(id(line))
                    tried = measure(out)
                    if tried <= limit:
                        used = tried
                        shown[spec.name] += 1
                        placed.add(at)
                        continue
                    out.add(id(line))
                if spec.name not in ranked:
                    break  # this line and every one before it in drop order go
                lost[spec.name] = max(lost.get(spec.name, -1), tier)
        for at in range(cut):
            if at not in placed:
                drop(*order[at])

    def dropping(spec: SectionSpec) -> list[_Line]:
        """The section's lines in the order it gives them up."""
        by_score = spec.name in ranked
        return sorted(lines[spec.name], key=lambda line: _drop_order(line, by_score))

    def section_text(spec: SectionSpec) -> str:
        body = lines.get(spec.name) or []
        return "\n".join([spec.title(), *(line.text for line in body)]) if body else ""

    def full_text() -> str:
        parts = [header, *(section_text(s) for s in specs)]
        return "\n".join(p for p in parts if p)

    if count(header) > budget:
        raise InvalidInput(
            "the budget does not fit the protocol header", code="BUDGET_TOO_SMALL", field="budget"
        )
    for spec in specs:
        lines[spec.name] = []
        for candidate in sections.get(spec.name, ()):
            text = render_line(spec, candidate)
            line = _Line(candidate, text)
            if count(f"{spec.title()}\n{text}") > spec.budget:
                trimmed = _trim(spec, candidate, count)
                if trimmed is None:
                    # it cannot fit the section even alone: it goes first, and alone
                    lines[spec.name].append(line)
                    drop(spec, line)
                    continue
                line = trimmed
            lines[spec.name].append(line)
        shed([(spec, line) for line in dropping(spec)], [spec], spec.budget, None)

    # over the whole budget the last section with lines gives up its lines first, in the
    # same order as within a section, then the one before it: the sections are filled in
    # priority order, the highest first
    shed([(s, line) for s in reversed(specs) for line in dropping(s)], specs, budget, header)

    text = full_text()
    included: list[Included] = []
    for spec in specs:
        for rank, line in enumerate(lines[spec.name], 1):
            included.append(Included(line.candidate, spec.name, rank, tokens(line), line.trimmed))
    section_tokens = {s.name: count(section_text(s)) if lines[s.name] else 0 for s in specs}
    return Assembly(
        text, count(text), included, list(truncations), section_tokens, truncations, warnings
    )


def _fewest_drops(fits: Callable[[int], bool], estimates: Sequence[int], limit: int) -> int:
    """The fewest lines, given up in drop order, after which the text fits: the smallest
    k with fits(k), where fits(len(estimates) - 1) always holds (nothing left) and giving
    up a line never makes the text longer. `estimates[k]` is the tokens left after k drops
    by the lines' own counts; the exact count (a tokenization of the whole text) is asked
    about O(log n) candidates around the estimate, not once per dropped line."""
    n = len(estimates) - 1
    start = next((k for k, tokens in enumerate(estimates) if tokens <= limit), n)
    if fits(start):
        high, step = start, 1  # fits(high); look below it
        low = start - step
        while low >= 0 and fits(low):
            high, step = low, step * 2
            low = high - step
        low = max(low, -1)  # fits(low) is false, or low is -1
    else:
        low, step = start, 1  # not fits(low); look above it
        high = min(start + step, n)
        while not fits(high):
            low, step = high, step * 2
            high = min(low + step, n)
    while high - low > 1:
        middle = (low + high) // 2
        if fits(middle):
            high = middle
        else:
            low = middle
    return high


def _trim(spec: SectionSpec, candidate: Candidate, count: Callable[[str], int]) -> _Line | None:
    """The memory cut to its leading whole sentences so that it fits the section alone."""
    sentences = _sentences(" ".join(candidate.memory.text().split()))
    kept: list[str] = []
    best: _Line | None = None
    for sentence in sentences[:-1] if len(sentences) > 1 else []:
        kept.append(sentence)
        text = render_line(spec, candidate, content="".join(kept).strip())
        if count(f"{spec.title()}\n{text}") > spec.budget:
            break
        best = _Line(candidate, text, trimmed=True)
    return best


def utc_iso(value: datetime) -> str:
    return value.astimezone(UTC).isoformat()
