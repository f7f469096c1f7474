"""The table of Mnemo's consumers: the one place that says which consumers there are, which
event types each one handles with which handler, and which read models it writes.

Everything that runs or deploys the consumers reads this table or is checked against it
(tests/unit/test_registry.py): the embedded runner, the distributed partition processors
and faust workers, bootstrap, the one-consumer services (`services/<name>`), the stack of
processes on one machine (infra/stack.py) and the Helm chart's component list. Adding a
consumer starts here, and that test names every place that does not know it yet.

A consumer is one or more projections: a pure handler function, the event types it reads
(None: every type) and the read models its writes land in. The registrar projects
registration and the timeline, each declared on its own.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from mnemo.domain.events import CATALOG, MemoryRegistered
from mnemo.domain.projection import (
    BumpStats,
    DropDocuments,
    DropTimer,
    DropToolchain,
    DropWeight,
    PutAudit,
    PutContextRecord,
    PutDocument,
    PutMemory,
    PutOutcome,
    PutTemplate,
    PutTimeline,
    PutTimer,
    PutToolchain,
    PutWeight,
    SetStatus,
)
from mnemo.handlers import audit, decay, indexing, registration, timeline, toolchain

__all__ = [
    "CONSUMERS",
    "FOLLOWERS",
    "NAMES",
    "READ_MODELS",
    "SEQUENCER",
    "Consumer",
    "Projection",
    "ReadModel",
    "consumer",
]


@dataclass(frozen=True, slots=True)
class ReadModel:
    """State built from the log alone: thrown away and rebuilt by replaying it."""

    name: str
    what: str
    # the projection writes that land in it (None: the vector index, which the indexer
    # writes itself rather than through store writes)
    writes: tuple[type, ...] | None


READ_MODELS: Mapping[str, ReadModel] = {
    m.name: m
    for m in (
        ReadModel("memories", "every memory, its versions and status", (PutMemory, SetStatus)),
        ReadModel("outcomes", "what registration made of each published event", (PutOutcome,)),
        ReadModel("templates", "context templates", (PutTemplate,)),
        ReadModel("context_records", "assembled contexts", (PutContextRecord,)),
        ReadModel("usage", "inclusions, truncations, citations, corrections", (BumpStats,)),
        ReadModel("timeline", "which events touched each memory", (PutTimeline,)),
        ReadModel("timers", "expiry, verification and archive timers", (PutTimer, DropTimer)),
        ReadModel("weights", "semantic weight and trust", (PutWeight, DropWeight)),
        ReadModel("audit", "the hash chain over every stream", (PutAudit,)),
        ReadModel("vectors", "embeddings and keyword vectors", None),
        ReadModel(
            "toolchains",
            "toolchain state per session: steps done, failures, the next step, expiry",
            (PutToolchain, DropToolchain),
        ),
        ReadModel(
            "documents",
            "ingested documents and the entities of their sections (structured queries)",
            (PutDocument, DropDocuments),
        ),
    )
}


@dataclass(frozen=True, slots=True)
class Projection:
    """A pure handler, the event types it reads, and the read models it writes."""

    handler: Callable[..., Any]
    types: frozenset[str] | None  # None: every event type of the catalog
    writes: tuple[str, ...]

    def reads(self, event_type: str) -> bool:
        return self.types is None or event_type in self.types


@dataclass(frozen=True, slots=True)
class Consumer:
    """One consumer: its own position (and, distributed, its own consumer group and
    process, `python -m mnemo_<name>`)."""

    name: str
    projections: tuple[Projection, ...]
    # numbers each stream's events and archives the topic's records (ADR 0008); the
    # others follow what it archived
    sequencer: bool = False
    # work on a clock rather than on events: the decay scan of due timers, the audit
    # checkpoint signing (ADR 0017)
    periodic: tuple[str, ...] = ()
    # seconds a batch gathers records before it is handled (distributed workers): the
    # consumers between a publish and its search (the registrar, the indexer) wait 10 ms;
    # the others gather longer, so their fixed cost per batch (the position and fate
    # reads, the fenced commit, a wait for the registrar) is paid for many records at
    # once and leaves the two cores to the search path
    batch_window: float = 0.01
    # event types a follower handles once the sequencer recorded their fate, without waiting
    # for its commit past them: the indexer reads a MemoryRegistered for the memory it
    # carries, and the sequencer's own handling of one (a timeline line) is nothing the
    # indexer reads; every other record waits for the commit, whose decisions (a
    # citation's credit, what registration wrote) its reader may depend on
    on_fate: frozenset[str] = frozenset()
    # off the path from a publish to its search: while the registrar has a backlog in a
    # batch's partitions, the batch is held back (up to `give_way_seconds`), so that this
    # consumer's work, and the store and vault requests it makes, leave the machine to the
    # path during a burst; it catches up once the registrar has
    gives_way: bool = False

    @property
    def module(self) -> str:
        """Its service's Python package (services/<name>/mnemo_<name>)."""
        return f"mnemo_{self.name}"

    @property
    def read_models(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(m for p in self.projections for m in p.writes))

    @property
    def indexes(self) -> bool:
        """Whether it writes the vector index (only its process opens one)."""
        return "vectors" in self.read_models

    def handles(self) -> dict[str, tuple[Callable[..., Any], ...]]:
        """Each event type it reads, mapped to the handler functions that read it."""
        return {
            t: found
            for t in sorted(CATALOG.current)
            if (found := tuple(p.handler for p in self.projections if p.reads(t)))
        }

    def projects(self, read_model: str) -> bool:
        return read_model in self.read_models


CONSUMERS: tuple[Consumer, ...] = (
    Consumer(
        registration.CONSUMER,
        (
            Projection(
                registration.handle,
                registration.HANDLED,
                ("memories", "outcomes", "templates", "context_records", "usage", "documents"),
            ),
            Projection(timeline.entries, timeline.HANDLED, ("timeline",)),
            Projection(toolchain.handle, toolchain.HANDLED, ("toolchains", "outcomes")),
        ),
        sequencer=True,
    ),
    Consumer(
        indexing.CONSUMER,
        (Projection(indexing.plan, indexing.HANDLED, ("vectors",)),),
        on_fate=frozenset({MemoryRegistered.TYPE}),
    ),
    Consumer(
        decay.CONSUMER,
        (
            Projection(decay.handle, decay.HANDLED, ("timers", "weights")),
            Projection(toolchain.timers, toolchain.TIMERS_HANDLED, ("timers",)),
        ),
        periodic=("scan",),
        batch_window=0.25,
        gives_way=True,
    ),
    Consumer(
        audit.CONSUMER,
        (Projection(audit.handle, None, ("audit",)),),
        periodic=("checkpoint",),
        batch_window=0.25,
        gives_way=True,
    ),
)

NAMES: tuple[str, ...] = tuple(c.name for c in CONSUMERS)
SEQUENCER: str = next(c.name for c in CONSUMERS if c.sequencer)
FOLLOWERS: tuple[str, ...] = tuple(c.name for c in CONSUMERS if not c.sequencer)


def consumer(name: str) -> Consumer:
    """The consumer of that name; ValueError for a name the table does not hold."""
    for c in CONSUMERS:
        if c.name == name:
            return c
    raise ValueError(f"unknown consumer {name!r}; one of {NAMES}")


def table_markdown() -> str:
    """The table as docs/architecture.md shows it (a test keeps the two equal)."""
    rows = [
        "| Consumer | Handler | Event types | Read models | Periodic |",
        "|---|---|---|---|---|",
    ]
    for c in CONSUMERS:
        for p in c.projections:
            types = (
                "every type" if p.types is None else ", ".join(f"`{t}`" for t in sorted(p.types))
            )
            handler = f"`{p.handler.__module__.rsplit('.', 1)[-1]}.{p.handler.__name__}`"
            rows.append(
                f"| {c.name}{' (sequencer)' if c.sequencer else ''} | {handler} | {types} | "
                f"{', '.join(p.writes)} | {', '.join(c.periodic) or '-'} |"
            )
    return "\n".join(rows) + "\n"
