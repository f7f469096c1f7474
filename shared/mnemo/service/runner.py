"""Drives the consumers of handlers/registry.py over the event log.

Each consumer reads a batch after its position, runs the pure handler, appends what the
handler emitted (idempotent by event id), and then commits its projection writes together
with its new position. A crash anywhere in between redoes the batch, and redoing it
changes nothing: that is how every accepted event is projected exactly once.

Tenants take turns (`EmbeddedRunner._take`): a step gives every tenant with waiting events
a bounded slice of the batch, so one tenant's backlog delays another's event by at most
one step. A consumer's position is then two things, committed together with the writes:
the offset up to which every event is handled (`<consumer>`), and for a tenant handled
ahead of it, the offset up to which that tenant's events are (`<consumer>@<tenant>`). A
tenant's events are always taken in log order, so each stream keeps its order.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mnemo import telemetry
from mnemo.domain.errors import Unavailable
from mnemo.domain.events import ActorKind, Envelope, ForgetRequested, LoggedEvent
from mnemo.domain.keywords import history_terms, memory_keyword_text, passage_vector
from mnemo.domain.memory import MemoryType
from mnemo.domain.projection import (
    AuditRecord,
    DropTimer,
    Outcome,
    OutcomeKind,
    PutAudit,
    PutOutcome,
)
from mnemo.domain.rules import RuleSet
from mnemo.handlers import (
    Decision,
    audit,
    decay,
    indexing,
    registration,
    registry,
    timeline,
    toolchain,
)
from mnemo.ports import (
    Clock,
    ConsumerStore,
    Embedder,
    EventLog,
    StoreTransaction,
    VectorIndex,
    VectorPoint,
)
from mnemo.service.checkpoints import AuditCheckpointer
from mnemo.service.examples import EmbeddingSelector

__all__ = ["CONSUMERS", "EmbeddedRunner", "rewind", "tenant_position"]

log = logging.getLogger("mnemo.runner")
# the event types the decay consumer's handlers read (the consumer table's); it opens no
# other
_DECAY_READS = frozenset(registry.consumer(decay.CONSUMER).handles())

CONSUMERS = registry.NAMES


_REGISTRAR = registry.consumer(registration.CONSUMER)


def _applied(decision: Decision) -> bool:
    """Whether a decision registers its event (an `applied` outcome)."""
    return any(
        isinstance(w, PutOutcome) and w.outcome.kind is OutcomeKind.APPLIED for w in decision.writes
    )


def tenant_position(consumer: str, tenant: str) -> str:
    """The position name under which a consumer records how far it has handled one
    tenant's events ahead of its own position."""
    return f"{consumer}@{tenant}"


def rewind(tx: StoreTransaction, log_: EventLog, consumer: str) -> None:
    """Send a consumer back to the start of the log, its per-tenant positions with it."""
    tx.set_position(consumer, 0)
    for tenant in log_.tenants_between(0, log_.head()):
        tx.set_position(tenant_position(consumer, tenant), 0)


@dataclass(frozen=True, slots=True)
class _Turn:
    """One step's work for a consumer: the records to handle, in log order, and the
    positions to commit once they are handled."""

    records: list[LoggedEvent]
    positions: dict[str, int]


class EmbeddedRunner:
    """Runs every consumer in one process, on a background thread or step by step."""

    def __init__(
        self,
        log_: EventLog,
        store: ConsumerStore,
        index: VectorIndex,
        embedder: Embedder,
        clock: Clock,
        rules: RuleSet,
        *,
        batch_size: int = 256,
        embed_batch: int = 32,
        poll_seconds: float = 0.2,
        consumers: tuple[str, ...] = CONSUMERS,
        decay_policy: decay.DecayPolicy | None = None,
        checkpointer: AuditCheckpointer | None = None,
        opener: Callable[[Envelope], Envelope] | None = None,
        open_many: Callable[[Sequence[Envelope]], list[Envelope]] | None = None,
    ) -> None:
        self.log = log_
        # what a user stream's events sealed whole are opened by before a handler reads
        # them (the audit consumer chains the events as logged)
        self.opener = opener
        # the opener over a batch at once (its keys fetched side by side), when there is one
        self.open_many = open_many
        self.store = store
        self.index = index
        self.embedder = embedder
        self.clock = clock
        self.rules = rules
        self.selector = EmbeddingSelector(rules, embedder)
        # ingested documents' sections and entities (set by the wiring; none: documents are
        # rejected with DOCUMENT_UNAVAILABLE)
        self.documents: registration.DocumentSource | None = None
        # seals a history fact's carried values again under its new data key (set by the
        # wiring, from the sealer)
        self.reseal: registration.Resealer | None = None
        self.stand_ins: registration.StandIns | None = None
        # crypto-shreds the keys a request to forget names once it is registered, unless its
        # publisher did (set by the wiring, from the sealer; a producer writing straight
        # to the topic cannot shred): no forget is registered with its keys left alive
        self.shred: Callable[[Envelope], object] | None = None
        self.batch_size = batch_size
        self.embed_batch = embed_batch
        self.poll_seconds = poll_seconds
        unknown = set(consumers) - set(CONSUMERS)
        if unknown:
            raise ValueError(f"unknown consumers: {sorted(unknown)}")
        self.consumers = consumers
        self.decay_policy = decay_policy or decay.DecayPolicy()
        self.checkpointer = checkpointer
        self._progress = threading.Condition()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.errors = 0
        self.on_progress: list[Callable[[], None]] = []
        self._step_lock = threading.RLock()
        self._failures: dict[str, int] = {}
        self._retry_at: dict[str, float] = {}
        self._served: dict[str, str] = {}  # per consumer, the tenant served last in a turn
        self._steps = self._steps_of_consumers()

    # ---- one step of each consumer ----------------------------------------------------

    def _take(self, consumer: str) -> _Turn | None:
        """The next step's records for a consumer, at most `batch_size`, shared between the
        tenants with events past its position: each gets an equal slice first (the tenants
        in turn, starting after the one served last), then the room left goes to those
        that filled theirs. Each tenant's records are its next ones in log order. None when
        the consumer has caught up with the log."""
        start = self.store.position(consumer)
        head = self.log.head()
        if consumer != registration.CONSUMER and registration.CONSUMER in self.consumers:
            # the other consumers read what the registrar decided on (a citation's credit,
            # the memories it registered): never past it
            head = min(head, self.store.position(registration.CONSUMER))
        if head <= start:
            return None
        firsts = self.log.tenants_between(start, head)
        names = {t: tenant_position(consumer, t) for t in firsts}
        ahead = self.store.positions(list(names.values())) if names else {}
        tenants = sorted(firsts)
        last = self._served.get(consumer)
        if last is not None:
            cut = next((i for i, t in enumerate(tenants) if t > last), 0)
            tenants = tenants[cut:] + tenants[:cut]
        cursor = {t: max(start, ahead[names[t]]) for t in tenants}
        exhausted: set[str] = set()
        taken: dict[str, list[LoggedEvent]] = {t: [] for t in tenants}
        room = self.batch_size
        share = max(1, room // max(1, len(tenants)))
        for limit in (share, None):  # equal slices, then the room left
            for tenant in tenants:
                if room == 0:
                    break
                if tenant in exhausted:
                    continue
                want = room if limit is None else min(limit, room)
                read = self.log.read_tenant(tenant, cursor[tenant], want)
                got = [e for e in read if e.offset <= head]
                if len(got) < want:
                    exhausted.add(tenant)
                if got:
                    taken[tenant].extend(got)
                    cursor[tenant] = got[-1].offset
                    room -= len(got)
                    if limit is not None:
                        self._served[consumer] = tenant
        # every event up to `done` is handled once these records are: each tenant's next
        # event lies past its cursor (past the head once it has none left)
        nexts = [head + 1 if t in exhausted else max(firsts[t], cursor[t] + 1) for t in tenants]
        done = min([head, *(n - 1 for n in nexts)])
        positions = {consumer: done}
        for tenant in tenants:
            at = head if tenant in exhausted else cursor[tenant]
            if at > done and at > ahead[names[tenant]]:
                positions[names[tenant]] = at
        records = sorted((e for got in taken.values() for e in got), key=lambda e: e.offset)
        return _Turn(records, positions)

    def _consume(
        self, consumer: str, decide: Callable[[LoggedEvent, StoreTransaction], Decision]
    ) -> int:
        turn = self._take(consumer)
        if turn is None:
            return 0
        batch = turn.records
        if not batch:  # what was left had been handled ahead: only the position moves
            with self.store.transaction() as tx:
                for name, offset in turn.positions.items():
                    tx.set_position(name, offset)
            return 0
        parents = [telemetry.parent_of(r.envelope.trace) for r in batch]
        if consumer == audit.CONSUMER:
            self.audit_started()
        with (
            telemetry.consuming(
                consumer, parents, system="sqlite", destination=telemetry.EMBEDDED_LOG
            ) as t,
            self.store.transaction() as tx,
        ):
            emitted: list[Envelope] = []
            for record, parent in zip(batch, parents, strict=True):
                with telemetry.handling(t, record.envelope, parent):
                    decision = decide(record, tx)
                tx.apply(decision.writes)
                emitted.extend(decision.events)
            if emitted:
                self.log.append(emitted)
            for name, offset in turn.positions.items():
                tx.set_position(name, offset)
        telemetry.committed(consumer, [r.envelope for r in batch])
        if consumer == audit.CONSUMER:
            self.audit_committed()
        return len(batch)

    def _opened_all(self, envelopes: list[Envelope]) -> list[Envelope]:
        if self.open_many is not None:
            return self.open_many(envelopes)
        if self.opener is not None:
            return [self.opener(e) for e in envelopes]
        return envelopes

    def opened(self, record: LoggedEvent) -> LoggedEvent:
        """A logged event as the handlers read it (see `opener`)."""
        if self.opener is None:
            return record
        env = self.opener(record.envelope)
        return record if env is record.envelope else LoggedEvent(offset=record.offset, envelope=env)

    def _register(
        self,
        record: LoggedEvent,
        tx: StoreTransaction,
        caused: Sequence[LoggedEvent] | None = None,
    ) -> Decision:
        env = record.envelope
        try:
            prior: list[Envelope] = []
            if registration.is_command(env):
                if caused is None:
                    caused = self.log.caused_by(env.tenant, env.event_id)
                prior = [
                    self.opened(e).envelope
                    for e in caused
                    if e.envelope.actor.kind is ActorKind.SYSTEM
                    and e.envelope.actor.id == registration.CONSUMER
                    and e.envelope.event_id[14] == "8"  # a derived id: no publisher can hold one
                ]
            return registration.handle(
                env,
                tx,
                self.rules,
                prior,
                self.selector,
                self.documents,
                self.reseal,
                self.stand_ins,
            )
        except Unavailable as exc:
            # the vault or a store is away: the batch is tried again once it answers (an
            # event refused for it would be lost, though it was accepted)
            log.warning(
                "registration of %s waits: %s",
                env.event_id,
                exc.code,
                extra={"event_id": env.event_id},
            )
            raise
        except Exception:
            # a handler bug must not wedge the consumer; the event stays in the log and
            # the outcome says what happened, so it can be replayed once fixed
            self.errors += 1
            log.exception("registration failed", extra={"event_id": env.event_id})
            return Decision(
                writes=[
                    PutOutcome(
                        Outcome(
                            env.tenant,
                            env.event_id,
                            0,
                            OutcomeKind.REJECTED,
                            reason_code="HANDLER_ERROR",
                            detail="registration failed",
                        )
                    )
                ]
            )

    def decide_registrar(
        self,
        record: LoggedEvent,
        tx: StoreTransaction,
        caused: Sequence[LoggedEvent] | None = None,
        *,
        opened: bool = False,
    ) -> Decision:
        """Registration, plus the timeline entries of the memories the event touched.
        `caused`: the log's events caused by this one, when the caller looked them up
        already (the distributed registrar does, for a whole batch at once); `opened`: the
        record comes from `prepare_registrar`, its sealed fields opened already."""
        if not opened:
            record = self.opened(record)
        decision = self._register(record, tx, caused)
        if record.envelope.type == ForgetRequested.TYPE:
            if self.shred is not None and _applied(decision):
                # before the batch commits: a vault that cannot answer fails the batch,
                # which is tried again, so the registration waits for its shred
                self.shred(record.envelope)
            self._forget_blobs(record.envelope)
        if _REGISTRAR.projects("timeline"):
            decision.writes.extend(timeline.entries(record.envelope, record.offset))
        if _REGISTRAR.projects("toolchains"):
            decision.extend(self._toolchain(record.envelope, tx))
        return decision

    def _forget_blobs(self, env: Envelope) -> None:
        """A forgotten stream's (or tenant's) document blobs go with it: deleted when the
        registrar reads the request (again on a redelivery or a rebuild: a no-op then)."""
        forget = getattr(self.documents, "forget", None)
        if forget is None or env.payload.get("memory_id") is not None:
            return
        forget(env.tenant, None if env.payload.get("tenant") is True else env.stream)

    def _toolchain(self, env: Envelope, tx: StoreTransaction) -> Decision:
        """The toolchain read model's projection (handlers/toolchain.py); a handler bug
        leaves the event in the log with a HANDLER_ERROR outcome, as registration does."""
        try:
            return toolchain.handle(env, tx)
        except Exception:
            self.errors += 1
            log.exception("toolchain projection failed", extra={"event_id": env.event_id})
            if env.type not in toolchain.HANDLED - {"ForgetRequested"}:
                return Decision()
            failed = Outcome(
                env.tenant,
                env.event_id,
                0,
                OutcomeKind.REJECTED,
                reason_code="HANDLER_ERROR",
                detail="the toolchain projection failed",
            )
            return Decision(writes=[PutOutcome(failed)])

    def prepare_registrar(
        self, records: Sequence[LoggedEvent], tx: StoreTransaction
    ) -> list[LoggedEvent]:
        """A batch's records opened as registration reads them, with the transaction told
        the content-hash and turn-before lookups registration will make, so a store that
        pays a round trip per lookup reads them all at once. Hand each to
        `decide_registrar(opened=True)`."""
        envelopes = self._opened_all([r.envelope for r in records])
        opened = [
            r if e is r.envelope else LoggedEvent(offset=r.offset, envelope=e)
            for r, e in zip(records, envelopes, strict=True)
        ]
        tx.prefetch_lookups(
            [k for r in opened for k in registration.hash_lookups(r.envelope)],
            [k for r in opened for k in registration.turn_lookups(r.envelope)],
        )
        return opened

    def decide_decay(self, record: LoggedEvent, tx: StoreTransaction) -> Decision:
        if record.envelope.type not in _DECAY_READS:
            return Decision()  # not opened: its sealed fields are not decay's business
        env = (
            record.envelope
            if record.envelope.type in decay.READ_SEALED
            else self.opened(record).envelope
        )
        tx.prefetch_memories(env.tenant, decay.memory_lookups(env))
        decision = decay.handle(env, tx, self.decay_policy)
        decision.extend(toolchain.timers(env, tx))
        return decision

    def decide_audit(self, record: LoggedEvent, tx: StoreTransaction) -> Decision:
        env = record.envelope
        decision = audit.handle(env, record.offset, tx.last_audit(env.tenant, env.stream))
        if self.checkpointer is not None:
            for write in decision.writes:
                if isinstance(write, PutAudit):
                    self.checkpointer.observe(write.record)
        return decision

    def audit_started(self) -> None:
        """The audit consumer starts a batch: the links a batch that raised before it
        observed are settled (signed later if the store holds them, else forgotten)."""
        if self.checkpointer is not None:
            self.checkpointer.settle(self._link_stored)

    def _link_stored(self, record: AuditRecord) -> bool:
        found = self.store.audit_trail(record.tenant, record.stream, record.n - 1, 1)
        return bool(found) and found[0].n == record.n and found[0].hash == record.hash

    def audit_committed(self) -> int:
        """The audit consumer committed a batch: sign the heads it extended (ADR 0017)."""
        return self.checkpointer.batch_committed() if self.checkpointer is not None else 0

    def checkpoint_tick(self) -> int:
        """Sign the audit chain heads that have waited long enough (ADR 0017)."""
        if self.checkpointer is None:
            return 0
        self.checkpointer.settle(self._link_stored)
        return self.checkpointer.tick()

    def step_registrar(self) -> int:
        return self._consume(registration.CONSUMER, self.decide_registrar)

    def step_decay(self) -> int:
        return self._consume(decay.CONSUMER, self.decide_decay)

    def step_audit(self) -> int:
        return self._consume(audit.CONSUMER, self.decide_audit)

    def step_indexer(self) -> int:
        turn = self._take(indexing.CONSUMER)
        if turn is None:
            return 0
        batch = turn.records
        if batch:
            parents = [telemetry.parent_of(r.envelope.trace) for r in batch]
            with telemetry.consuming(
                indexing.CONSUMER, parents, system="sqlite", destination=telemetry.EMBEDDED_LOG
            ):
                self.index_events([r.envelope for r in batch])
        with self.store.transaction() as tx:
            for name, offset in turn.positions.items():
                tx.set_position(name, offset)
        if batch:
            telemetry.committed(indexing.CONSUMER, [r.envelope for r in batch])
        return len(batch)

    def index_events(self, envelopes: list[Envelope]) -> None:
        """Embed and upsert what the events registered, each with its keyword vector; drop
        what they ended. Only the events the indexer reads are opened."""
        envelopes = self._opened_all([e for e in envelopes if e.type in indexing.HANDLED])
        plan = indexing.plan(envelopes)
        for tenant in sorted(plan.purges):  # a forgotten tenant: before these upserts
            self.index.delete(tenant, self.index.ids(tenant))
        memories = list(plan.upserts.values())
        for start in range(0, len(memories), self.embed_batch):
            chunk = memories[start : start + self.embed_batch]
            vectors = self.embedder.embed_passages([m.text() for m in chunk])
            self.index.upsert(
                [
                    VectorPoint(
                        m.memory_id,
                        m.tenant,
                        m.stream,
                        m.type.value,
                        m.scope.value,
                        m.tags,
                        v,
                        passage_vector(
                            memory_keyword_text(m.key, m.value, m.content),
                            history_terms(m.content, m.created_at, m.timezone)
                            if m.type is MemoryType.HISTORY
                            else (),
                        ),
                    )
                    for m, v in zip(chunk, vectors, strict=True)
                ]
            )
        by_tenant: dict[str, list[str]] = {}
        for memory_id, tenant in plan.deletes.items():
            by_tenant.setdefault(tenant, []).append(memory_id)
        for tenant, ids in sorted(by_tenant.items()):
            self.index.delete(tenant, sorted(ids))
        if len(plan):
            self.index.flush()

    def decay_scan(self) -> int:
        """Expire every memory whose validity has ended by the clock's now."""
        due = self.store.due_timers(self.clock.now(), self.batch_size)
        if not due:
            return 0
        store = self.store

        def decided(tenant: str, event_id: str) -> bool:
            return bool(store.outcome(tenant, event_id))

        with self.store.transaction() as tx:
            decision = decay.scan(due, tx, self.decay_policy, decided)
            if decision.events:
                self.log.append(decision.events)
            tx.apply(decision.writes)
        # a timer kept for a later scan (a toolchain start not yet decided) is not work
        # done: counting it would keep drain() going round until the registrar decides
        dropped = {
            (w.tenant, w.memory_id, w.kind) for w in decision.writes if isinstance(w, DropTimer)
        }
        return sum(1 for t in due if (t.tenant, t.memory_id, t.kind) in dropped)

    def _scan_when_caught_up(self) -> int:
        """Timers are only complete once the decay consumer has read the whole log (after
        a restart or during a rebuild it may still be behind): scan only then, so no
        decision is taken on a partial picture."""
        if self.store.position(decay.CONSUMER) < self.log.head():
            return 0
        return self.decay_scan()

    def decider(self, consumer: str) -> Callable[[LoggedEvent, StoreTransaction], Decision]:
        """How a consumer that projects through store writes decides on one event (both
        modes call it; the indexer writes vectors in batches instead: `index_events`).
        The registrar, the decay and the audit hand their handlers more than the event and
        the transaction; any other consumer of the table is decided by its projections
        alone (`decide_by_table`)."""
        deciders: dict[str, Callable[[LoggedEvent, StoreTransaction], Decision]] = {
            registration.CONSUMER: self.decide_registrar,
            decay.CONSUMER: self.decide_decay,
            audit.CONSUMER: self.decide_audit,
        }
        if consumer in deciders:
            return deciders[consumer]
        try:
            spec = registry.consumer(consumer)
        except ValueError as exc:
            raise LookupError(f"the runner has no decision for consumer {consumer!r}") from exc
        if spec.indexes:
            raise LookupError(f"{consumer!r} writes the vector index, not store writes")
        return functools.partial(self.decide_by_table, spec)

    def decide_by_table(
        self, spec: registry.Consumer, record: LoggedEvent, tx: StoreTransaction
    ) -> Decision:
        """A consumer's decision as its table entry has it: each projection that reads the
        event's type called as `handler(envelope, tx)` (the envelope opened), in the
        table's order."""
        env = self.opened(record).envelope
        decision = Decision()
        for projection in spec.projections:
            if projection.reads(env.type):
                decision.extend(projection.handler(env, tx))
        return decision

    def _steps_of_consumers(self) -> dict[str, tuple[Callable[[], int], ...]]:
        """Each consumer of the registry's table: its step over the log's events, then its
        periodic work."""
        periodic: dict[str, Callable[[], int]] = {
            "scan": self._scan_when_caught_up,
            "checkpoint": self.checkpoint_tick,
        }
        steps = {}
        for spec in registry.CONSUMERS:
            on_events = (
                self.step_indexer
                if spec.indexes
                else functools.partial(self._consume, spec.name, self.decider(spec.name))
            )
            missing = [p for p in spec.periodic if p not in periodic]
            if missing:
                raise LookupError(
                    f"the embedded runner has no periodic work {missing} of {spec.name!r}"
                )
            steps[spec.name] = (on_events, *(periodic[p] for p in spec.periodic))
        return steps

    def run_once(self) -> int:
        """One step of every consumer; how many events (and timers) they handled."""
        steps = self._steps
        done = 0
        with self._step_lock:  # one driver at a time: a batch is never taken twice
            for name in CONSUMERS:
                if name not in self.consumers or time.monotonic() < self._retry_at.get(name, 0.0):
                    continue
                try:
                    for step in steps[name]:
                        done += step()
                    self._failures.pop(name, None)
                except Exception:
                    # one consumer's trouble must not hold the others back; it retries later
                    self.errors += 1
                    failures = self._failures.get(name, 0) + 1
                    self._failures[name] = failures
                    self._retry_at[name] = time.monotonic() + min(30.0, 0.1 * 2**failures)
                    log.exception("consumer %s failed; retrying", name)
        if done:
            with self._progress:
                self._progress.notify_all()
            for callback in self.on_progress:
                callback()
        return done

    def drain(self, max_rounds: int = 1_000_000) -> None:
        """Run until every consumer has caught up with the log."""
        for _ in range(max_rounds):
            if self.run_once() == 0:
                return

    # ---- background operation ---------------------------------------------------------------

    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="mnemo-runner", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout)
            if self._thread.is_alive():
                raise Unavailable("the consumers did not stop in time", code="RUNNER_BUSY")
            self._thread = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wake(self) -> None:
        self._wake.set()

    def _loop(self) -> None:
        backoff = 0.0
        while not self._stop.is_set():
            try:
                done = self.run_once()
                backoff = 0.0
            except Exception:
                self.errors += 1
                log.exception("consumer step failed; retrying")
                backoff = min(5.0, backoff * 2 or 0.1)
                self._stop.wait(backoff)
                continue
            if done == 0:
                self._wake.wait(self.poll_seconds)
                self._wake.clear()

    def wait_for(
        self, consumer: str, offset: int, timeout: float, tenant: str | None = None
    ) -> bool:
        """Block until `consumer` has processed the log up to `offset`; with a `tenant`,
        until it has processed that tenant's events up to there."""
        names = [consumer] if tenant is None else [consumer, tenant_position(consumer, tenant)]
        deadline = time.monotonic() + timeout
        with self._progress:
            while max(self.store.positions(names).values()) < offset:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._progress.wait(min(remaining, 0.05))
        return True

    def lag(self) -> dict[str, int]:
        head = self.log.head()
        return {name: head - self.store.position(name) for name in CONSUMERS}
