"""The distributed mode's log and consumers: the same handlers over a partitioned topic.

The topic (Kafka) is the log: the gateway, the SDK and any Kafka client produce to it,
keyed by tenant + ":" + stream, so a stream keeps its order in one partition. Kafka has
no per-stream sequence, so the registrar is the log's sequencer (ADR 0008): reading each
partition in order, it checks every record, gives each new event the next gapless number
of its stream, and records it in the archive (Cassandra) together with the record's fate:

- archived: a new event, sequenced;
- duplicate: an event id already archived (a publisher's retry);
- stale: `expected_seq` was not the stream's head; refused with an outcome, as the
  embedded log refuses the append;
- dead: not an event (not JSON, wrong schema, unknown type, oversized, a key that does
  not name its tenant and stream): copied to the dead-letter topic with its reason.

The indexer, decay and audit consumers follow the fates: they handle exactly the archived
records, in partition order, and wait for the registrar where it has not decided yet
(its fate recorded and its commit past the record; for the record types a follower takes
on the fate alone, `registry.Consumer.on_fate`, the fate).

Positions: every consumer keeps, per partition, the next offset to read, committed in the
same store commit as its projection writes (`<consumer>/<partition>`). Kafka's committed
group offsets only say where to start fetching; a redelivered record below the stored
position is skipped, so redelivery changes nothing. Emitted events are produced before the
commit that records their cause as done; a crash in between emits them again with the
same derived ids, and the sequencer finds them duplicates.

Offsets handed to the handlers (`LoggedEvent.offset`, kept by the audit chain and the
timeline) are the record's Kafka coordinates, `offset * 1024 + partition`: the same on
every replay of the topic, which keeps a rebuild's checksum equal to the live one.
"""

from __future__ import annotations

import contextvars
import logging
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor, wait
from contextlib import AbstractContextManager, ExitStack
from dataclasses import dataclass, field
from typing import Any

import orjson

from mnemo import telemetry
from mnemo.domain.acceptance import reuses_id
from mnemo.domain.errors import FencedOff, InvalidInput, MnemoError, Unavailable
from mnemo.domain.events import Envelope, LoggedEvent
from mnemo.domain.projection import Outcome, OutcomeKind, PutOutcome
from mnemo.handlers import audit, indexing, registration, registry
from mnemo.ports import (
    Appended,
    ArchivedEvent,
    Clock,
    EventArchive,
    LogRecord,
    LogTopic,
    ProjectionStore,
    RecordFate,
    RecordStatus,
)
from mnemo.records import decode_offset, encode_offset, parse_record
from mnemo.service.runner import EmbeddedRunner

__all__ = [
    "Follower",
    "NotReady",
    "Ownership",
    "PartitionProgress",
    "Sequencer",
    "position_name",
]

log = logging.getLogger("mnemo.distributed")


# streams whose heads the registrar keeps per partition between batches, at most
_HEADS_KEPT = 100_000


def position_name(consumer: str, partition: int) -> str:
    return f"{consumer}/{partition}"


class NotReady(Exception):
    """A follower reached records the sequencer has not decided on yet; retry shortly.
    `waits` names, per partition, the first offset still undecided: the batch is worth
    handling again once the sequencer has decided on it (`Follower.undecided`)."""

    def __init__(self, message: str, waits: dict[int, int] | None = None) -> None:
        super().__init__(message)
        self.waits: dict[int, int] = dict(waits or {})


# ---- the consumers --------------------------------------------------------------------------


class Ownership:
    """The partitions a worker holds and the epoch it claimed for each (ADR 0014).

    Kafka's group assignment says which partitions a worker should handle; the store
    enforces it. On every assignment the worker claims each partition it was given
    (`ProjectionStore.claim`), and commits under that epoch: once another process claims the
    partition, this worker's commits for it are refused (FencedOff), and it leaves the
    partition's records alone until Kafka assigns it again. Claims are only made for
    partitions of the latest assignment, so a worker that lost a partition cannot take it
    back from its new owner; `revoke` waits for a claim in progress."""

    def __init__(self, store: ProjectionStore, consumer: str) -> None:
        self.store = store
        self.consumer = consumer
        self._lock = threading.Lock()
        self.assigned: set[int] = set()
        self.epochs: dict[int, int] = {}
        self.fenced: dict[int, str] = {}  # partition -> why its commits were refused
        self.refused = 0  # commits refused since the start

    def assign(self, partitions: Sequence[int]) -> None:
        """A new assignment (Kafka's rebalance): claim each of its partitions."""
        with self._lock:
            self.assigned = set(partitions)
            self.epochs.clear()
            self.fenced.clear()
            for partition in sorted(self.assigned):
                try:
                    self.epochs[partition] = self.store.claim(
                        position_name(self.consumer, partition)
                    )
                except MnemoError as exc:  # claimed on first use instead
                    log.warning(
                        "%s: could not claim partition %d now (%s)",
                        self.consumer,
                        partition,
                        exc.code,
                    )

    def revoke(self, partitions: Sequence[int]) -> None:
        with self._lock:
            for partition in partitions:
                self.assigned.discard(partition)
                self.epochs.pop(partition, None)
                self.fenced.pop(partition, None)

    def held(self) -> list[int]:
        """The partitions this worker may handle now: assigned and not fenced off."""
        with self._lock:
            return sorted(self.assigned - set(self.fenced))

    def epoch(self, partition: int) -> int | None:
        """The epoch to commit a partition under; None when this worker does not hold it
        (not assigned, or fenced off by a newer claim)."""
        with self._lock:
            if partition not in self.assigned or partition in self.fenced:
                return None
            if partition not in self.epochs:
                self.epochs[partition] = self.store.claim(position_name(self.consumer, partition))
            return self.epochs[partition]

    def fence(self, partition: int, error: FencedOff) -> None:
        """A commit for `partition` was refused. The partition is fenced off unless this
        worker has claimed it again since (a batch that outlived its revocation and the
        next assignment): then the refused batch is simply handled again."""
        with self._lock:
            self.refused += 1
            refused = error.extra.get("epoch")
            held = self.epochs.get(partition)
            if partition in self.assigned and (held is None or held == refused):
                self.epochs.pop(partition, None)
                self.fenced[partition] = error.message
        log.warning(
            "%s: partition %d is fenced off (%s); its records are left to its new owner",
            self.consumer,
            partition,
            error.message,
        )

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {
                "assigned": sorted(self.assigned),
                "fenced": sorted(self.fenced),
                "refused_commits": self.refused,
            }


@dataclass
class Counters:
    """What a partition processor has done, for /metrics and `mnemo status`."""

    records: int = 0
    archived: int = 0
    duplicates: int = 0
    stale: int = 0
    dead_letters: int = 0
    skipped: int = 0
    not_owned: int = 0  # records of partitions this worker does not hold (fenced, revoked)
    batches: int = 0
    last_batch_at: float = 0.0
    by_type: dict[str, int] = field(default_factory=dict)


class _Processor:
    consumer: str
    archive: EventArchive
    # where records missing from a batch are read (see _fresh); None: not read
    topic: LogTopic | None = None
    # partitions of one batch handled at once; each stays in offset order and commits its
    # own store transaction
    parallel = 1

    def __init__(self, runner: EmbeddedRunner, store: ProjectionStore) -> None:
        self.runner = runner
        self.store = store
        # set by a worker in a consumer group: commits then carry the partition's epoch;
        # without it (tools, tests driving one processor) commits are not fenced
        self.ownership: Ownership | None = None
        self.counters = Counters()
        self._counting = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._reads: ThreadPoolExecutor | None = None
        self._writes: ThreadPoolExecutor | None = None

    def _consuming(
        self, partition: int, records: Sequence[LogRecord]
    ) -> AbstractContextManager[telemetry.Consumed]:
        """The CONSUMER span of one partition's records in a batch."""
        return telemetry.consuming(
            self.consumer,
            [telemetry.parent_of(headers=r.headers) for r in records],
            system="kafka",
            destination=self.archive.topic,
            partition=partition,
            group=f"mnemo-{self.consumer}",
        )

    def _held(self, partition: int, items: Sequence[LogRecord]) -> tuple[bool, int | None]:
        """Whether this processor may handle a partition now, and the epoch to commit
        under (None: unfenced)."""
        if self.ownership is None:
            return True, None
        epoch = self.ownership.epoch(partition)
        if epoch is None:
            with self._counting:
                self.counters.not_owned += len(items)
            return False, None
        return True, epoch

    def _fresh(self, partition: int, items: Sequence[LogRecord]) -> list[LogRecord]:
        """The records past the stored position, in offset order, each offset once (after
        a rebalance a batch can hold a record twice), with no record left out between the
        stored position and the last one. A batch that starts past the stored position
        (Kafka's committed offset ran ahead of it: a worker that lost the partition
        acknowledged records it left alone), or that jumps forward inside (records buffered
        before a rebalance, then records fetched from a committed offset that had run
        ahead), is completed from the topic: the position committed after the batch then
        never passes over a record nobody handled (an audit link left out, a fate never
        recorded)."""
        start = self.store.position(position_name(self.consumer, partition))
        once = {r.offset: r for r in reversed(items) if r.offset >= start}
        with self._counting:
            self.counters.skipped += len(items) - len(once)
        if once and self.topic is not None:
            at = start
            for offset in sorted(once):
                if offset > at:
                    self._fill(partition, at, offset, once)
                at = offset + 1
        return [once[o] for o in sorted(once)]

    def _fill(self, partition: int, at: int, until: int, into: dict[int, LogRecord]) -> None:
        """Read the records of offsets [at, until) from the topic into `into` (offsets the
        topic does not hold, if any, stay missing)."""
        assert self.topic is not None
        first = at
        while at < until:
            found = self.topic.fetch(partition, at, min(1_000, until - at))
            if not found:
                break
            for r in found:
                if r.offset < until:
                    into.setdefault(r.offset, r)
            at = found[-1].offset + 1
        log.info(
            "%s: records %d to %d of partition %d were not in the batch; read them",
            self.consumer,
            first,
            until - 1,
            partition,
        )

    def _side_by_side(
        self, fn: Callable[..., Any], calls: Sequence[tuple[Any, ...]], *, writes: bool = False
    ) -> list[Any]:
        """`fn(*args)` for each of `calls`, on this processor's threads when there are
        several; results in order, the first error raised (once every call ended). Calls
        that write (`writes`) must be independent of each other: one partition's commit
        each, never two steps of one partition."""
        if len(calls) < 2:
            return [fn(*args) for args in calls]
        pool = self._writer() if writes else self._reader()
        # each call runs in a copy of this thread's context, so the trace's current span
        # (and anything else kept in context variables) is its parent there too
        futures = [pool.submit(contextvars.copy_context().run, fn, *args) for args in calls]
        wait(futures)
        return [f.result() for f in futures]

    def _writer(self) -> ThreadPoolExecutor:
        """Threads for independent writes made side by side (each partition's commit)."""
        with self._counting:
            if self._writes is None:
                self._writes = ThreadPoolExecutor(8, f"mnemo-{self.consumer}-write")
            return self._writes

    def _reader(self) -> ThreadPoolExecutor:
        """Threads for the steps of one partition made side by side: reads, and the
        sequencer's archive step beside its reads of the read model (never a commit, nor
        two writes whose order matters). Enough for every partition of a batch to run its
        steps at once; a step never waits for this pool itself."""
        with self._counting:
            if self._reads is None:
                self._reads = ThreadPoolExecutor(
                    4 * max(2, self.parallel), f"mnemo-{self.consumer}-read"
                )
            return self._reads

    def _one(self, partition: int, items: list[LogRecord]) -> int:
        """The records of one partition past this consumer's stored position, in order."""
        held, epoch = self._held(partition, items)
        if not held:
            return 0
        fresh = self._fresh(partition, items)
        if not fresh:
            return 0
        try:
            with self._consuming(partition, fresh) as batch:
                return self._partition(partition, fresh, batch, epoch)
        except FencedOff as exc:
            assert self.ownership is not None
            self.ownership.fence(partition, exc)
            return 0

    def process(self, records: Sequence[LogRecord]) -> int:
        """Handle a batch (of any partitions); raises NotReady once the other partitions
        are done when one of them waits for the sequencer, and the first other error."""
        by_partition: dict[int, list[LogRecord]] = {}
        for r in records:
            by_partition.setdefault(r.partition, []).append(r)
        work = sorted(by_partition.items())
        outcomes: list[int | BaseException] = []
        if self.parallel > 1 and len(work) > 1:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(self.parallel, f"mnemo-{self.consumer}-part")
            futures = [self._pool.submit(self._one, p, items) for p, items in work]
            for f in futures:
                error = f.exception()
                outcomes.append(error if error is not None else f.result())
        else:
            for p, items in work:
                try:
                    outcomes.append(self._one(p, items))
                except Exception as exc:  # the other partitions go on
                    outcomes.append(exc)
        done = sum(o for o in outcomes if isinstance(o, int))
        with self._counting:
            self.counters.records += done
            self.counters.batches += 1
            self.counters.last_batch_at = time.time()
        errors = [o for o in outcomes if isinstance(o, BaseException)]
        for error in errors:
            if not isinstance(error, NotReady):
                raise error
        if errors:
            waits: dict[int, int] = {}
            for error in errors:
                assert isinstance(error, NotReady)
                waits.update(error.waits)
            raise NotReady(str(errors[0]), waits)
        return done

    def _partition(
        self,
        partition: int,
        records: list[LogRecord],
        batch: telemetry.Consumed,
        epoch: int | None,
    ) -> int:
        raise NotImplementedError


class Sequencer(_Processor):
    """The registrar: sequences and archives each partition's records, then registers.
    The partitions of a batch are checked, archived and registered concurrently (each one's
    archive writes and store transaction are its own)."""

    consumer = registration.CONSUMER
    parallel = 8
    topic: LogTopic

    def __init__(
        self,
        runner: EmbeddedRunner,
        store: ProjectionStore,
        topic: LogTopic,
        archive: EventArchive,
        clock: Clock,
        next_position: Callable[[], int],
    ) -> None:
        super().__init__(runner, store)
        self.topic = topic
        self.archive = archive
        self.clock = clock
        self.next_position = next_position
        # partition -> (the offset its heads hold below, each stream's head there): what
        # this process's last commit of the partition left, so that the next batch, which
        # starts at that offset, reads only the heads of streams it has not seen
        self._heads: dict[int, tuple[int, dict[tuple[str, str], int]]] = {}

    def _stream_heads(
        self, partition: int, start: int, keys: list[tuple[str, str]]
    ) -> tuple[dict[tuple[str, str], int], dict[tuple[str, str], int]]:
        """The head of each stream below `start` in `partition` (a batch redone from there
        numbers its events again), and the heads this process knew of the partition. The
        heads it knew hold when its last commit of the partition ended at `start`: a
        stream's events are all in one partition, and whoever handled records of it since
        moved its position past `start` (or, failing to commit, placed events only at or
        after `start`, which a read with `below` leaves out too)."""
        held = self._heads.pop(partition, None)  # put back only after a commit
        known = held[1] if held is not None and held[0] == start else {}
        unknown = [k for k in dict.fromkeys(keys) if k not in known]
        read = self.archive.stream_heads(unknown, below=(partition, start)) if unknown else {}
        return {k: known[k] if k in known else read[k] for k in keys}, known

    def _reuses_id(self, event: Envelope, earlier: Envelope | None) -> bool:
        """Whether `event`, whose id is archived already (or taken by `earlier` in this
        batch), is another event under that id (`acceptance.reuses_id`): read from the
        archive only for an event with a digest, so a retry or a redelivery without one
        costs nothing more."""
        if event.digest is None:
            return False
        if earlier is None:
            held = self.archive.get(event.tenant, event.event_id)
            if held is None:  # not readable yet: taken for a retry, as before digests
                return False
            earlier = held.envelope
        return reuses_id(event, earlier.digest)

    def _partition(
        self,
        partition: int,
        records: list[LogRecord],
        batch: telemetry.Consumed,
        epoch: int | None,
    ) -> int:
        now = self.clock.now()
        parsed: list[tuple[LogRecord, Envelope | InvalidInput]] = []
        for r in records:
            try:
                parsed.append((r, parse_record(r, now)))
            except InvalidInput as exc:
                parsed.append((r, exc))
        # the fates recorded before, where each id went, every stream's head (kept up to
        # date below) and where the batch's commands' earlier emissions were archived, if
        # they were handled before (a redo): four reads side by side
        commands = [
            (e.tenant, e.event_id)
            for _, e in parsed
            if isinstance(e, Envelope) and registration.is_command(e)
        ]
        known, located, (heads, kept), places = self._side_by_side(
            lambda read: read(),
            [
                (lambda: self.archive.fates(partition, records[0].offset, records[-1].offset),),
                (
                    lambda: self.archive.locate(
                        [(e.tenant, e.event_id) for _, e in parsed if isinstance(e, Envelope)]
                    ),
                ),
                (
                    lambda: self._stream_heads(
                        partition,
                        records[0].offset,
                        [(e.tenant, e.stream) for _, e in parsed if isinstance(e, Envelope)],
                    ),
                ),
                (lambda: self.archive.causes(commands),),
            ],
        )
        seen: dict[tuple[str, str], Envelope] = {}
        fates: list[RecordFate] = []
        archived: list[ArchivedEvent] = []
        accepted_at: dict[int, float | None] = {r.offset: r.timestamp for r in records}
        parents = {r.offset: telemetry.parent_of(headers=r.headers) for r in records}
        letters: list[tuple[LogRecord, str, str]] = []
        stale: list[Envelope] = []
        for r, item in parsed:
            if isinstance(item, InvalidInput):
                if r.offset not in known:
                    letters.append((r, item.code, str(item)))
                fates.append(RecordFate(partition, r.offset, RecordStatus.DEAD, reason=item.code))
                continue
            env = item
            ident = (env.tenant, env.event_id)
            where = located.get(ident)
            if ident in seen or (
                where is not None and (where.partition, where.offset) != (partition, r.offset)
            ):
                if self._reuses_id(env, seen.get(ident)):
                    if r.offset not in known:
                        letters.append(
                            (r, "EVENT_ID_REUSED", "the event id is archived with other content")
                        )
                    fates.append(
                        RecordFate(
                            partition,
                            r.offset,
                            RecordStatus.DEAD,
                            env.tenant,
                            env.event_id,
                            env.stream,
                            reason="EVENT_ID_REUSED",
                        )
                    )
                    continue
                fates.append(
                    RecordFate(
                        partition,
                        r.offset,
                        RecordStatus.DUPLICATE,
                        env.tenant,
                        env.event_id,
                        env.stream,
                        where.seq if where else 0,
                        reason="DUPLICATE_EVENT_ID",
                    )
                )
                continue
            seen[ident] = env
            key = (env.tenant, env.stream)
            head = heads[key]
            if where is not None:  # placed before a crash: the same number again
                seq, position = where.seq, where.position
            elif env.expected_seq is not None and env.expected_seq != head:
                heads[key] = head
                stale.append(env)
                fates.append(
                    RecordFate(
                        partition,
                        r.offset,
                        RecordStatus.STALE,
                        env.tenant,
                        env.event_id,
                        env.stream,
                        reason="STALE_SEQUENCE",
                    )
                )
                continue
            else:
                seq, position = head + 1, self.next_position()
            heads[key] = max(head, seq)
            sequenced = env.model_copy(update={"seq": seq})
            archived.append(ArchivedEvent(sequenced, partition, r.offset, position))
            fates.append(
                RecordFate(
                    partition,
                    r.offset,
                    RecordStatus.ARCHIVED,
                    env.tenant,
                    env.event_id,
                    env.stream,
                    seq,
                    position,
                )
            )
        if letters:
            self.topic.dead_letter(letters)
            telemetry.dead_lettered([code for _, code, _ in letters], self.topic.name)
            for r, code, _ in letters:
                log.warning(
                    "record %s/%d/%d sent to the dead-letter topic: %s",
                    self.topic.name,
                    r.partition,
                    r.offset,
                    code,
                )
        self._count(fates, archived, letters)
        # the earlier emissions of the commands archived now (not of duplicates)
        wanted = {
            key: places.get(key, [])
            for key in (
                (e.envelope.tenant, e.envelope.event_id)
                for e in archived
                if registration.is_command(e.envelope)
            )
        }
        with self.store.transaction() as tx:
            emitted: list[Envelope] = []
            # the archive step, the earlier emissions read, and the batch opened with its
            # content-hash and turn-before lookups read (registration reads the read model,
            # never the archive), side by side; registration starts once all are done
            _, caused, records_opened = self._side_by_side(
                lambda step: step(),
                [
                    (lambda: self.archive.record(archived, fates),),
                    (lambda: self.archive.caused_events(wanted),),
                    (
                        lambda: self.runner.prepare_registrar(
                            [
                                LoggedEvent(
                                    offset=encode_offset(partition, e.offset), envelope=e.envelope
                                )
                                for e in archived
                            ],
                            tx,
                        ),
                    ),
                ],
            )
            # what this batch itself holds of what its commands emitted: a rebuild from the
            # start of the log archives an event and what it emitted in one batch, so an
            # event archived for the first time may still have emitted before (the places
            # were read before this batch's archive step)
            _emitted_in_batch(caused, archived)
            for event, record in zip(archived, records_opened, strict=True):
                key = (event.envelope.tenant, event.envelope.event_id)
                with telemetry.handling(
                    batch, event.envelope, parents[event.offset], offset=event.offset
                ):
                    decision = self.runner.decide_registrar(
                        record, tx, caused.get(key, []), opened=True
                    )
                tx.apply(decision.writes)
                emitted.extend(decision.events)
            for env in stale:
                tx.apply(
                    [
                        PutOutcome(
                            Outcome(
                                env.tenant,
                                env.event_id,
                                0,
                                OutcomeKind.REJECTED,
                                reason_code="STALE_SEQUENCE",
                                detail=f"expected_seq {env.expected_seq} is not the head of "
                                f"{env.stream}",
                            )
                        )
                    ]
                )
            if emitted:
                self.runner.log.append(emitted)
            tx.set_position(position_name(self.consumer, partition), records[-1].offset + 1, epoch)
        kept.update(heads)
        if len(kept) <= _HEADS_KEPT:
            self._heads[partition] = (records[-1].offset + 1, kept)
        telemetry.committed(
            self.consumer,
            [e.envelope for e in archived],
            [accepted_at[e.offset] for e in archived],
        )
        return len(records)

    def _count(
        self,
        fates: list[RecordFate],
        archived: list[ArchivedEvent],
        letters: list[tuple[LogRecord, str, str]],
    ) -> None:
        c = self.counters
        with self._counting:
            c.archived += len(archived)
            c.duplicates += sum(f.status is RecordStatus.DUPLICATE for f in fates)
            c.stale += sum(f.status is RecordStatus.STALE for f in fates)
            c.dead_letters += len(letters)
            for e in archived:
                c.by_type[e.envelope.type] = c.by_type.get(e.envelope.type, 0) + 1


def _emitted_in_batch(
    caused: dict[tuple[str, str], list[LoggedEvent]], archived: Sequence[ArchivedEvent]
) -> None:
    """Add to `caused` ({command: what it emitted, as the archive held it}) the events of
    `archived` that name one of its commands as their cause, each once, ordered as the
    archive orders them (by position)."""
    for e in archived:
        env = e.envelope
        if env.causation_id is None:
            continue
        held = caused.get((env.tenant, env.causation_id))
        if held is None or any(h.envelope.event_id == env.event_id for h in held):
            continue
        held.append(LoggedEvent(offset=e.position, envelope=env))
        held.sort(key=lambda h: h.offset)


class Follower(_Processor):
    """The indexer, decay or audit consumer: handles the records the sequencer archived."""

    def __init__(
        self,
        runner: EmbeddedRunner,
        store: ProjectionStore,
        archive: EventArchive,
        consumer: str,
        topic: LogTopic | None = None,
    ) -> None:
        super().__init__(runner, store)
        if consumer not in registry.FOLLOWERS:
            raise ValueError(f"{consumer} is not a following consumer")
        self.consumer = consumer
        self.archive = archive
        self.topic = topic
        # the event types this consumer reads; None: every type (the audit chain)
        spec = registry.consumer(consumer)
        self._reads_types: frozenset[str] | None = (
            None if any(p.types is None for p in spec.projections) else frozenset(spec.handles())
        )
        self._on_fate: frozenset[str] = spec.on_fate

    def _type_of(self, record: LogRecord) -> str | None:
        """The event type a record's JSON names, None when it names none."""
        if not record.value:
            return None
        try:
            raw = orjson.loads(record.value)
        except orjson.JSONDecodeError:
            return None
        kind = raw.get("type") if isinstance(raw, dict) else None
        return kind if isinstance(kind, str) else None

    def needs_commit(self, record: LogRecord) -> bool:
        """Whether the record waits for the sequencer's commit past it, not only for its
        fate (`registry.Consumer.on_fate`): the sequencer records a record's fate before it
        commits what it decided on it, and most followers read what it decided."""
        return not self._on_fate or self._type_of(record) not in self._on_fate

    def on_fate(self, records: Sequence[LogRecord]) -> frozenset[tuple[int, int]]:
        """The (partition, offset) of each of `records` handled on its fate alone."""
        return self.waits(records)[1]

    def waits(
        self, records: Sequence[LogRecord]
    ) -> tuple[dict[int, int], frozenset[tuple[int, int]]]:
        """What a worker watches for `records` before handling them, each record's type
        read once: per partition, the offset of the first record this consumer cannot
        handle before the sequencer has decided on it; and the (partition, offset) of each
        record handled on its fate alone."""
        first: dict[int, int] = {}
        on_fate: set[tuple[int, int]] = set()
        for r in records:
            kind = self._type_of(r) if self._reads_types is not None or self._on_fate else None
            reads = self._reads_types is None or kind is None or kind in self._reads_types
            if reads and r.offset < first.get(r.partition, r.offset + 1):
                first[r.partition] = r.offset
            if kind is not None and kind in self._on_fate:
                on_fate.add((r.partition, r.offset))
        return first, frozenset(on_fate)

    def passes_over(self, record: LogRecord) -> bool:
        """Whether this consumer does nothing with the record whatever the sequencer decides
        on it (archived, duplicate or rejected): a JSON object whose `type` is an event type
        this consumer does not read (the indexer and a context's record, decay and a
        declaration). Such a record is passed without waiting for the sequencer; a record
        that is not one waits for its fate like the rest. The sequencer archives an event
        under the type its record names, so the record's own field decides."""
        if self._reads_types is None:
            return False
        kind = self._type_of(record)
        return kind is not None and kind not in self._reads_types

    def first_undecided(self, records: Sequence[LogRecord]) -> dict[int, int]:
        """Per partition, the offset of the first of `records` this consumer cannot handle
        before the sequencer has decided on it."""
        return self.waits(records)[0]

    def sequencer_backlog(self, ends: dict[int, int]) -> int:
        """The most records the sequencer has still to take in any partition of `ends`
        ({partition: the end of its log}): one read of its positions there."""
        if not ends:
            return 0
        names = {p: position_name(registration.CONSUMER, p) for p in ends}
        at = self.store.positions(list(names.values()))
        return max(max(0, end - at[names[p]]) for p, end in ends.items())

    def undecided(
        self, waits: dict[int, int], on_fate: frozenset[tuple[int, int]] = frozenset()
    ) -> dict[int, int]:
        """Of `waits` ({partition: first offset not ready}), those the sequencer has still
        not decided on: its position is not past the offset and, for a record handled on its
        fate alone (`on_fate` holds its (partition, offset)), no fate is recorded yet. One
        read of the positions, and one small fates read per such partition."""
        names = {p: position_name(registration.CONSUMER, p) for p in waits}
        at = self.store.positions(list(names.values())) if names else {}
        left = {p: o for p, o in waits.items() if at[names[p]] <= o}
        early = [(p, o) for p, o in left.items() if (p, o) in on_fate]
        if early:
            found = self._side_by_side(lambda p, o: o in self.archive.fates(p, o, o), early)
            for (p, _), decided in zip(early, found, strict=True):
                if decided:
                    del left[p]
        return left

    def _ready(
        self, partition: int, records: list[LogRecord]
    ) -> tuple[list[LogRecord], list[LoggedEvent], list[float | None], dict[int, Any]]:
        """The records the sequencer has decided on, or that this consumer passes over
        (`passes_over`): a prefix of `records`; and the archived events among them, with
        their publish times and trace parents."""
        passed = {r.offset for r in records if self.passes_over(r)}
        waiting = [r.offset for r in records if r.offset not in passed]
        fates: dict[int, Any] = {}
        decided = 0
        if waiting:
            fates = self.archive.fates(partition, waiting[0], waiting[-1])
            # the sequencer records the fates before it commits what it decided on them
            # (a citation's credit, the memories it registered): a record is ready once
            # both are
            name = position_name(registration.CONSUMER, partition)
            decided = self.store.positions([name])[name]
        ready = []
        for r in records:
            if r.offset not in passed and (
                r.offset not in fates or (r.offset >= decided and self.needs_commit(r))
            ):
                break
            ready.append(r)
        events: list[LoggedEvent] = []
        accepted_at: list[float | None] = []
        parents: dict[int, telemetry.Parent | None] = {}
        for r in ready:
            if r.offset in passed:
                continue
            fate = fates[r.offset]
            if fate.status is not RecordStatus.ARCHIVED:
                continue
            assert r.value is not None  # an archived record had a value
            env = Envelope.model_validate_json(r.value).model_copy(update={"seq": fate.seq})
            events.append(LoggedEvent(offset=encode_offset(partition, r.offset), envelope=env))
            accepted_at.append(r.timestamp)
            parents[r.offset] = telemetry.parent_of(env.trace, r.headers)
            with self._counting:
                self.counters.by_type[env.type] = self.counters.by_type.get(env.type, 0) + 1
        return ready, events, accepted_at, parents

    def process(self, records: Sequence[LogRecord]) -> int:
        if self.consumer != indexing.CONSUMER:
            return super().process(records)
        # the indexer: the ready records of every partition of the batch are embedded and
        # written to the index, which is flushed, once; then each partition's position
        by_partition: dict[int, list[LogRecord]] = {}
        for r in records:
            by_partition.setdefault(r.partition, []).append(r)
        waiting: NotReady | None = None
        done = 0
        held: list[tuple[int, list[LogRecord], int | None]] = []
        for partition, items in sorted(by_partition.items()):
            owned, epoch = self._held(partition, items)
            if owned:
                held.append((partition, list(items), epoch))

        def look(
            partition: int, items: list[LogRecord]
        ) -> tuple[list[LogRecord], tuple[Any, ...] | None]:
            fresh = self._fresh(partition, items)
            return fresh, (self._ready(partition, fresh) if fresh else None)

        # each partition's stored position and fates read side by side, not in turn
        looked = self._side_by_side(look, [(p, items) for p, items, _ in held])
        with ExitStack() as spans:
            steps: list[tuple[int, int, list[LoggedEvent], list[float | None], int | None]] = []
            for (partition, _, epoch), (fresh, found) in zip(held, looked, strict=True):
                if not fresh or found is None:
                    continue
                spans.enter_context(self._consuming(partition, fresh))
                ready, events, accepted_at, _ = found
                if len(ready) < len(fresh):
                    waits = waiting.waits if waiting is not None else {}
                    waits[partition] = fresh[len(ready)].offset
                    waiting = NotReady(
                        f"{self.consumer} waits for the registrar on partition {partition}",
                        waits,
                    )
                if ready:
                    steps.append((partition, ready[-1].offset + 1, events, accepted_at, epoch))
                    done += len(ready)
            envelopes = [e.envelope for step in steps for e in step[2]]
            if envelopes:
                self.runner.index_events(envelopes)

            def commit(
                partition: int,
                next_offset: int,
                events: list[LoggedEvent],
                accepted_at: list[float | None],
                epoch: int | None,
            ) -> None:
                try:
                    with self.store.transaction() as tx:
                        tx.set_position(position_name(self.consumer, partition), next_offset, epoch)
                except FencedOff as exc:
                    assert self.ownership is not None
                    self.ownership.fence(partition, exc)
                    return
                telemetry.committed(self.consumer, [e.envelope for e in events], accepted_at)

            # each partition's position is its own fenced commit: side by side, not in turn
            self._side_by_side(commit, steps, writes=True)
        with self._counting:
            self.counters.records += done
            self.counters.batches += 1
            self.counters.last_batch_at = time.time()
        if waiting is not None:
            raise waiting
        return done

    def _partition(
        self,
        partition: int,
        records: list[LogRecord],
        batch: telemetry.Consumed,
        epoch: int | None,
    ) -> int:
        ready, events, accepted_at, parents = self._ready(partition, records)
        waits = {partition: records[len(ready)].offset} if len(ready) < len(records) else {}
        if not ready:
            raise NotReady(
                f"{self.consumer} waits for the registrar on partition {partition}", waits
            )
        name = position_name(self.consumer, partition)
        decide = self.runner.decider(self.consumer)
        if self.consumer == audit.CONSUMER:
            self.runner.audit_started()
        with self.store.transaction() as tx:
            emitted: list[Envelope] = []
            for record in events:
                offset = decode_offset(record.offset)[1]
                with telemetry.handling(batch, record.envelope, parents[offset], offset=offset):
                    decision = decide(record, tx)
                tx.apply(decision.writes)
                emitted.extend(decision.events)
            if emitted:
                self.runner.log.append(emitted)
            tx.set_position(name, ready[-1].offset + 1, epoch)
        telemetry.committed(self.consumer, [e.envelope for e in events], accepted_at)
        if self.consumer == audit.CONSUMER:
            self.runner.audit_committed()
        if waits:
            raise NotReady(
                f"{self.consumer} waits for the registrar on partition {partition}", waits
            )
        return len(ready)


# ---- read-your-writes ---------------------------------------------------------------------


class PartitionProgress:
    """`?wait=` in the distributed mode: how far each consumer is, per partition."""

    def __init__(
        self,
        store: ProjectionStore,
        topic: LogTopic,
        archive: EventArchive | None = None,
        poll_seconds: float = 0.02,
    ) -> None:
        self.store = store
        self.topic = topic
        self.archive = archive
        self.poll_seconds = poll_seconds

    def refused(self, accepted: Sequence[Appended]) -> dict[str, str]:
        """The records among `accepted` the sequencer sent to the dead-letter topic as
        another event under a reused id (EVENT_ID_REUSED): one read of fates per
        partition, after `wait` saw the registrar pass them."""
        if self.archive is None or not accepted:
            return {}
        by_partition: dict[int, dict[int, str]] = {}
        for a in accepted:
            partition, offset = decode_offset(a.offset)
            by_partition.setdefault(partition, {})[offset] = a.event_id
        out: dict[str, str] = {}
        for partition, ids in by_partition.items():
            fates = self.archive.fates(partition, min(ids), max(ids))
            for offset, event_id in ids.items():
                fate = fates.get(offset)
                if fate is not None and fate.reason == "EVENT_ID_REUSED":
                    out[event_id] = fate.reason
        return out

    def _until(self, targets: dict[str, int], deadline: float) -> bool:
        pending = dict(targets)
        while pending:
            at = self.store.positions(list(pending))
            pending = {n: o for n, o in pending.items() if at[n] < o}
            if not pending:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(self.poll_seconds)
        return True

    def wait(self, accepted: Sequence[Appended], indexed: bool, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        needed: dict[int, int] = {}
        for a in accepted:
            partition, offset = decode_offset(a.offset)
            needed[partition] = max(needed.get(partition, 0), offset + 1)
        if not self._until(
            {position_name(registration.CONSUMER, p): o for p, o in needed.items()}, deadline
        ):
            return False
        if not indexed:
            return True
        # the registrar produced what it emitted before it committed its position
        try:
            ends = self.topic.end_offsets()
        except Unavailable:
            return False
        return self._until(
            {position_name(indexing.CONSUMER, p): ends.get(p, 0) for p in needed}, deadline
        )

    def caught_up(self, timeout: float) -> bool:
        """Until the registrar has handled every record each partition held when called."""
        deadline = time.monotonic() + timeout
        try:
            ends = self.topic.end_offsets()
        except Unavailable:
            return False
        return self._until(
            {position_name(registration.CONSUMER, p): o for p, o in ends.items() if o > 0},
            deadline,
        )

    def holders(self, partitions: Sequence[int]) -> dict[str, dict[str, list[int]]]:
        """Per consumer, the processes holding its partitions (each partition's latest
        claim), with the partitions each one holds; a partition never claimed is left out."""
        consumers = registry.NAMES
        claims = self.store.claims([position_name(c, p) for c in consumers for p in partitions])
        out: dict[str, dict[str, list[int]]] = {}
        for c in consumers:
            held: dict[str, list[int]] = {}
            for p in sorted(partitions):
                claim = claims.get(position_name(c, p))
                if claim is not None:  # one claimed before holders were recorded: unknown
                    held.setdefault(claim.holder or "unknown", []).append(p)
            out[c] = held
        return out

    def lag(self) -> dict[str, dict[int, int]]:
        """Records each consumer still has to read, per partition."""
        ends = self.topic.end_offsets()
        consumers = registry.NAMES
        at = self.store.positions([position_name(c, p) for c in consumers for p in ends])
        return {
            c: {p: max(0, end - at[position_name(c, p)]) for p, end in sorted(ends.items())}
            for c in consumers
        }
