"""The distributed consumers as faust-streaming workers.

Each consumer (registrar, indexer, decay, audit) is a faust app of its own, in its own
service folder, with its own consumer group (`mnemo-<consumer>` plus an optional suffix: a
rebuild runs fresh groups). Its one agent takes batches of records from the log topic and
hands them to the partition processor of mnemo.service.distributed on a worker thread, so
the event loop keeps heartbeating while a batch embeds or writes. A batch that cannot be
written (Cassandra or Kafka away) is retried with backoff until it is; faust's offsets are
only committed for batches the processor returned from, and the processor's own
positions (committed with its writes) make every retry harmless.

Every worker serves `/healthz` (the process runs), `/readyz` (Cassandra and Kafka answer,
no partition it was assigned is fenced off, and its batch in flight is not failing) and
`/metrics` (Prometheus text) on `MNEMO_HEALTH_PORT`.

One writer per partition (ADR 0014): when Kafka assigns the worker its partitions, it
claims each one in the store (an epoch, by compare-and-set), and every commit carries that
epoch; a commit from a worker that lost the partition meanwhile is refused. On a
revocation the worker stops taking the revoked partitions' records and waits (up to
`_DRAIN_SECONDS`) for the batch in flight to finish, so the usual rebalance hands over a
committed position rather than a refused batch.

The co-located topology: with no Qdrant server configured, the vectors live in a
qdrant-edge shard that one process may open; the gateway process then runs the indexer
worker itself and serves HTTP from the same event loop (`run_gateway`).
"""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar, cast

from mnemo import telemetry
from mnemo.bootstrap import (
    Platform,
    build_distributed,
    check_kafka_sasl,
    check_qdrant_access,
    check_setting_files,
    check_vault_token,
    dead_letter_topic,
    kafka_config,
    kafka_tls,
    require_qdrant_for_indexer,
    require_vault,
)
from mnemo.domain.errors import MnemoError, Unavailable
from mnemo.entrypoints import heap
from mnemo.handlers import decay, indexing, registration, registry
from mnemo.ports import LogRecord
from mnemo.service.distributed import Follower, NotReady, Ownership, Sequencer, position_name
from mnemo.settings import GatewaySettings, MnemoSettings, worker_settings

__all__ = [
    "ConfigurationError",
    "Worker",
    "make_worker",
    "readiness_status",
    "run_gateway",
    "run_worker",
]

log = logging.getLogger("mnemo.worker")

T = TypeVar("T")

CONSUMERS = registry.NAMES
# the periodic work a worker knows how to run (handlers/registry.py says whose it is)
PERIODIC = ("scan", "checkpoint")
_MAX_TAKE = 2_048  # records in one batch at most
_DRAIN_SECONDS = 5.0  # on a revocation, how long to wait for the batch in flight
_WAIT_LOOK = 0.02  # seconds between looks at the registrar's positions while a follower waits
_WAIT_LOOK_LIMIT = 2.0  # after this long the batch is handled again whatever they say
_GIVE_WAY_LOOK = 0.1  # seconds between looks at the registrar's backlog while giving way
_FILL_EVERY = 1.0  # seconds between looks for records the stream left behind
_QUIET_SECONDS = 3.0  # a partition behind its end with no batch for this long is filled in
# after SIGTERM or SIGINT, how long the stop may take before the process ends anyway: with
# the brokers gone, faust waits up to 60 s for its consumer to leave the group; this stays
# under the chart's 30 s grace period, so a pod is not killed in the middle of its stop
STOP_SECONDS = 20.0


def _broker_url(settings: MnemoSettings) -> str:
    return ";".join(f"kafka://{h.strip()}" for h in settings.kafka_bootstrap.split(","))


def _credentials(settings: MnemoSettings) -> Any:
    """faust's broker credentials from the same settings (and TLS context) as every other
    Kafka client of Mnemo."""
    import faust

    context = kafka_tls(settings)
    if settings.kafka_security_protocol.startswith("SASL_"):
        check_kafka_sasl(settings)
        return faust.SASLCredentials(
            username=settings.kafka_sasl_username,
            password=(
                settings.kafka_sasl_password.get_secret_value()
                if settings.kafka_sasl_password
                else None
            ),
            mechanism=settings.kafka_sasl_mechanism,
            ssl_context=context,
        )
    if context is not None:
        return faust.SSLCredentials(context)
    return None


class Worker:
    """One consumer's faust app over a distributed platform."""

    def __init__(
        self,
        consumer: str,
        settings: MnemoSettings,
        platform: Platform | None = None,
        *,
        with_http: GatewaySettings | None = None,
    ) -> None:
        import faust

        spec = registry.consumer(consumer)  # ValueError for a consumer it does not hold
        self.spec = spec
        self.consumer = consumer
        self.settings = settings
        self.platform = platform or build_distributed(settings, consumer, with_index=spec.indexes)
        d = self.platform.distributed
        assert d is not None, "workers run on a distributed platform"
        self.distributed = d
        self.processor: Sequencer | Follower = (
            Sequencer(
                self.platform.runner,
                self.platform.store,
                d.topic,
                d.archive,
                self.platform.runner.clock,
                d.next_position,
            )
            if spec.sequencer
            else Follower(self.platform.runner, self.platform.store, d.archive, consumer, d.topic)
        )
        self.ownership = Ownership(self.platform.store, consumer)
        self.processor.ownership = self.ownership
        self.executor = ThreadPoolExecutor(1, thread_name_prefix=f"mnemo-{consumer}")
        self._unwatch = telemetry.watch_lag(self.lag)
        self.failures = 0
        self.last_error = ""
        self.periodic_failures = 0
        # when a batch of each partition last arrived from the stream (or it was assigned)
        self._arrived: dict[int, float] = {}
        self.filled_in = 0  # records read from the topic because the stream did not bring them
        self.giving_way = False
        self.gave_way_seconds = 0.0
        self.app = faust.App(
            f"mnemo-{consumer}{settings.kafka_group_suffix}",
            broker=_broker_url(settings),
            broker_credentials=_credentials(settings),
            value_serializer="raw",
            key_serializer="raw",
            topic_allow_declare=False,
            topic_disable_leader=True,
            consumer_auto_offset_reset="earliest",
            broker_session_timeout=settings.kafka_session_timeout,
            broker_heartbeat_interval=min(3.0, settings.kafka_session_timeout / 3),
            web_enabled=settings.health_port > 0,
            web_port=settings.health_port or 6066,
            web_bind=settings.health_host,
            web_in_thread=False,
            # faust's own wait on a rebalance has no bound (a follower waiting for the
            # registrar would hold the group up); `on_revoked` drains with a bound instead
            stream_wait_empty=False,
            store="memory://",
        )
        self.topic = self.app.topic(
            settings.kafka_topic,
            value_type=bytes,
            key_type=bytes,
            value_serializer="raw",
            key_serializer="raw",
        )
        self._install(with_http)

    # -- the agent

    async def _process(self, records: list[LogRecord]) -> None:
        loop = asyncio.get_running_loop()
        backoff = 0.05
        on_fate: frozenset[tuple[int, int]] = frozenset()
        await self._give_way(records)
        if isinstance(self.processor, Follower):
            # a follower reads each record as the registrar does, and nearly always before
            # the registrar has decided on it: watch the registrar's positions until they
            # pass the first record of each of the batch's partitions that the follower
            # cannot pass over (the indexer and a context's record need no decision),
            # rather than handling the batch once for nothing and then again. (Not its
            # last: in a burst the follower then trails the registrar by one of the
            # registrar's batches, not by one of its own, which can hold thousands.)
            first, on_fate = self.processor.waits(records)
            await self._until_decided(NotReady("", first), on_fate, first_look=0.0)
        while True:
            try:
                await loop.run_in_executor(self.executor, self.processor.process, records)
                self.failures = 0
                return
            except NotReady as waiting:
                # the registrar is a step behind: watch its positions (one small read per
                # look) rather than handling the whole batch again every few milliseconds
                await self._until_decided(waiting, on_fate)
            except MnemoError as exc:
                self.failures += 1
                self.last_error = exc.code
                log.warning("%s: batch not written (%s); retrying", self.consumer, exc.code)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
            except Exception as exc:
                self.failures += 1
                self.last_error = type(exc).__name__
                log.exception("%s: batch failed; retrying", self.consumer)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    async def _give_way(self, records: list[LogRecord]) -> None:
        """For a consumer off the path from a publish to its search (`gives_way`): returns
        once the registrar has at most `give_way_backlog` records left to take in each of
        the batch's partitions, or after `give_way_seconds`. A burst is then registered and
        indexed with the machine's cores and the store to itself, and this consumer takes
        its records in larger batches after it (or every `give_way_seconds` meanwhile)."""
        limit = self.settings.give_way_seconds
        if not (
            registry.consumer(self.consumer).gives_way
            and limit > 0
            and records
            and isinstance(self.processor, Follower)
        ):
            return
        follower = self.processor
        partitions = {r.partition for r in records}
        loop = asyncio.get_running_loop()
        started = time.monotonic()

        def backlog() -> int:
            ends = self.distributed.topic.end_offsets()
            return follower.sequencer_backlog({p: e for p, e in ends.items() if p in partitions})

        try:
            while time.monotonic() - started < limit:
                if not partitions <= set(self.ownership.held()):
                    return  # revoked meanwhile: the batch goes on to leave those records
                try:
                    behind = await loop.run_in_executor(self.executor, backlog)
                except Exception:
                    return  # the handling meets the same trouble, and reports it
                if behind <= self.settings.give_way_backlog:
                    return
                self.giving_way = True
                # the stream is not quiet, this worker holds it: the fill-in look must not
                # read the held partitions from the topic meanwhile (nor right after)
                now = time.monotonic()
                for p in self._arrived:
                    self._arrived[p] = now
                await asyncio.sleep(_GIVE_WAY_LOOK)
        finally:
            if self.giving_way:
                self.gave_way_seconds += time.monotonic() - started
            self.giving_way = False

    async def _until_decided(
        self,
        waiting: NotReady,
        on_fate: frozenset[tuple[int, int]] = frozenset(),
        first_look: float = _WAIT_LOOK,
    ) -> None:
        """Returns once the registrar has decided on every {partition: offset} that
        `waiting` names (or after `_WAIT_LOOK_LIMIT` seconds, or at once when it names
        none): then the batch is worth handling. The registrar records a record's fate
        before it commits its position past it, and a follower handles a record below that
        position, or one of `on_fate` once its fate is recorded (`Follower._ready`), so
        those are what is watched (`Follower.undecided`); a look is one small read per
        partition, taken `first_look` seconds after the call and every `_WAIT_LOOK` seconds
        after that."""
        if not waiting.waits:
            return
        assert isinstance(self.processor, Follower)
        loop = asyncio.get_running_loop()
        deadline = time.monotonic() + _WAIT_LOOK_LIMIT
        needed = dict(waiting.waits)
        pause = first_look
        while True:
            if pause > 0:
                await asyncio.sleep(pause)
            pause = _WAIT_LOOK
            try:
                needed = await loop.run_in_executor(
                    self.executor, self.processor.undecided, needed, on_fate
                )
            except MnemoError:
                return  # the handling reports the store's trouble
            except Exception:
                log.exception("%s: looking at the registrar's progress failed", self.consumer)
                return  # the handling meets the same trouble, and retries it
            if not needed or time.monotonic() >= deadline:
                return

    def _install(self, with_http: GatewaySettings | None) -> None:
        app = self.app
        # BATCH_SIZE counts records per partition: a batch of the whole topic is split by
        # partition (partition processors), so take up to that many for each partition
        take = min(_MAX_TAKE, self.settings.batch_size * max(1, self.settings.kafka_partitions))

        @app.agent(self.topic, name=f"mnemo.{self.consumer}")
        async def consume(stream: Any) -> None:
            # a batch is what arrived within the consumer's batch window (or `take`
            # records): faust waits that long before every batch, so it bounds each
            # hop's added latency (10 ms on the path from a publish to its search)
            within = registry.consumer(self.consumer).batch_window
            async for events in stream.take_events(take, within=within):
                records = [
                    LogRecord(
                        e.message.partition,
                        e.message.offset,
                        e.message.key,
                        e.message.value,
                        _headers(e.message.headers),
                        e.message.timestamp,
                    )
                    for e in events
                ]
                now = time.monotonic()
                for r in records:
                    self._arrived[r.partition] = now
                await self._process(records)

        topic_name = self.settings.kafka_topic

        def ours(partitions: Any) -> list[int]:
            return sorted(tp.partition for tp in partitions if tp.topic == topic_name)

        async def on_assigned(sender: Any, *args: Any, signal: Any = None, **kw: Any) -> None:
            assigned = args[0] if args else kw.get("assigned", ())
            loop = asyncio.get_running_loop()
            now = time.monotonic()
            for partition in ours(assigned):
                self._arrived[partition] = now
            await loop.run_in_executor(None, self.ownership.assign, ours(assigned))
            log.info("%s holds partitions %s", self.consumer, ours(assigned))

        async def on_revoked(sender: Any, *args: Any, signal: Any = None, **kw: Any) -> None:
            revoked = args[0] if args else kw.get("revoked", ())
            loop = asyncio.get_running_loop()
            await loop.run_in_executor(None, self.ownership.revoke, ours(revoked))
            # the batch in flight finishes (its commit still holds: nobody has claimed the
            # partitions yet) before the group moves on; past the bound, the fence decides
            drained = loop.run_in_executor(self.executor, lambda: None)
            try:
                await asyncio.wait_for(drained, _DRAIN_SECONDS)
            except TimeoutError:
                log.warning("%s: a batch was still running at the revocation", self.consumer)

        # faust's signal types do not admit a coroutine receiver, which it supports
        app.on_partitions_assigned.connect(cast(Any, on_assigned))
        app.on_partitions_revoked.connect(cast(Any, on_revoked))

        @app.timer(interval=_FILL_EVERY)  # type: ignore[untyped-decorator]
        async def fill_in() -> None:
            await self.periodically("filling in", self.fill_in)

        unknown = [p for p in self.spec.periodic if p not in PERIODIC]
        if unknown:
            raise LookupError(f"the worker has no periodic work {unknown} of {self.consumer!r}")

        if "scan" in self.spec.periodic:

            @app.timer(interval=1.0)  # type: ignore[untyped-decorator]
            async def scan() -> None:
                await self.periodically("the decay scan", self._scan_when_caught_up)

        if "checkpoint" in self.spec.periodic:

            @app.timer(interval=1.0)  # type: ignore[untyped-decorator]
            async def checkpoint() -> None:
                """Sign the chain heads that waited long enough (ADR 0017), also when no
                records arrive."""
                await self.periodically("checkpoint signing", self.platform.runner.checkpoint_tick)

        @app.page("/healthz")
        async def healthz(web: Any, request: Any) -> Any:
            return web.json({"status": "ok", "consumer": self.consumer})

        @app.page("/readyz")
        async def readyz(web: Any, request: Any) -> Any:
            loop = asyncio.get_running_loop()
            checks = await loop.run_in_executor(None, self.readiness)
            status = readiness_status(checks)
            ok = status == "ready"
            return web.json({"status": status, "checks": checks}, status=200 if ok else 503)

        @app.page("/metrics")
        async def metrics(web: Any, request: Any) -> Any:
            loop = asyncio.get_running_loop()
            body = await loop.run_in_executor(None, self.metrics_text)
            return web.text(body, content_type="text/plain; version=0.0.4")

        if with_http is not None:
            gateway = with_http

            @app.task  # type: ignore[untyped-decorator]
            async def serve_http() -> None:
                import uvicorn
                from mnemo_gateway.app import create_app

                config = uvicorn.Config(
                    create_app(self.platform, gateway, run_consumers=False),
                    host=gateway.host,
                    port=gateway.port,
                    log_level=self.settings.log_level.lower(),
                    log_config=_uvicorn_logging(self.settings),
                )
                server = _EmbeddedServer(config)
                await server.serve()

    async def periodically(self, what: str, work: Callable[[], object]) -> bool:
        """Run one round of a timer's work on the batch thread. A round that fails (a store
        or the signer away, or a bug) is logged and counted and the next round tries again:
        an exception escaping a timer would stop the worker's agent for good while its
        process looked alive. Whether the round succeeded."""
        loop = asyncio.get_running_loop()
        try:
            await loop.run_in_executor(self.executor, work)
            return True
        except NotReady:
            return False  # the registrar is a step behind; the next round looks again
        except MnemoError as exc:
            self.periodic_failures += 1
            log.warning("%s: %s skipped (%s)", self.consumer, what, exc.code)
        except Exception:
            self.periodic_failures += 1
            log.exception("%s: %s failed", self.consumer, what)
        return False

    def fill_in(self, quiet: float = _QUIET_SECONDS) -> int:
        """Handle the records of held partitions that the stream has not brought.

        The stored position, not Kafka's committed offset, says what this consumer has
        handled. After a rebalance the two can disagree: a worker that lost a partition
        acknowledges the records it leaves alone, so the group's committed offset runs
        past the stored position, and the partition's new owner starts reading after
        records nobody handled. When more records follow, `_fresh` reads the missing ones
        first; when none follow (the end of a burst), this look does: a held partition
        whose position is behind the log's end and whose stream has brought nothing for
        `quiet` seconds is read from the topic at its stored position. It runs on the
        batch thread, so it never overlaps a batch; what the stream brings later is
        passed over by position."""
        held = self.ownership.held()
        if not held:
            return 0
        now = time.monotonic()
        stale = [p for p in held if now - self._arrived.get(p, 0.0) >= quiet]
        if not stale:
            return 0
        ends = self.distributed.topic.end_offsets()
        at = self.platform.store.positions([position_name(self.consumer, p) for p in stale])
        take = min(_MAX_TAKE, self.settings.batch_size)
        done = 0
        for partition in stale:
            start = at[position_name(self.consumer, partition)]
            if start >= ends.get(partition, 0):
                continue
            records = self.distributed.topic.fetch(partition, start, take)
            if not records:
                continue
            log.info(
                "%s: partition %d is behind its end with nothing arriving; reading %d "
                "records from offset %d",
                self.consumer,
                partition,
                len(records),
                start,
            )
            try:
                handled = self.processor.process(records)
            except NotReady:
                continue  # the registrar is a step behind: the next look tries again
            done += handled
            self.filled_in += handled
            self._arrived[partition] = time.monotonic()
        return done

    def _scan_when_caught_up(self) -> int:
        """Timers are complete only once the registrar has decided on every record and the
        decay consumer has read what that produced; scan only then (a restarted or
        rebuilding consumer waits). Decay passes over records it does not read (a forget
        request, a declaration) before the registrar decides on them, so its own position
        alone does not say that the events they lead to (`MemoryForgotten`, a toolchain's
        outcome) are in: the registrar's positions must pass the topic's end first, and
        decay's the end read after that (the registrar produces what it emits before it
        commits its position)."""
        topic = self.distributed.topic
        store = self.platform.store
        ends = topic.end_offsets()
        names = [position_name(c, p) for c in (registration.CONSUMER, decay.CONSUMER) for p in ends]
        at = store.positions(names)
        if any(at[position_name(registration.CONSUMER, p)] < end for p, end in ends.items()):
            return 0
        after = topic.end_offsets()
        if any(at[position_name(decay.CONSUMER, p)] < end for p, end in after.items()):
            return 0
        return self.platform.runner.decay_scan()

    # -- health and metrics

    def lag(self) -> dict[str, dict[int, int]]:
        """Records this consumer still has to read, per partition (mnemo.consumer.lag)."""
        ends = self.distributed.topic.end_offsets()
        at = self.platform.store.positions([position_name(self.consumer, p) for p in ends])
        return {
            self.consumer: {
                p: max(0, end - at[position_name(self.consumer, p)])
                for p, end in sorted(ends.items())
            }
        }

    def readiness(self) -> dict[str, Any]:
        checks: dict[str, Any] = {}
        try:
            # positions() always reads the store (position() answers a partition this
            # process committed from memory, which kept a Cassandra outage from showing)
            self.platform.store.positions([position_name(self.consumer, 0)])
            checks["cassandra"] = "ok"
        except MnemoError as exc:
            checks["cassandra"] = exc.code
        try:
            self.distributed.topic.reachable()
            checks["kafka"] = "ok"
        except MnemoError as exc:
            checks["kafka"] = exc.code
        checks["failing_batches"] = self.failures
        # partitions held, and those whose commits another owner's claim now refuses
        checks["partitions"] = self.ownership.snapshot()
        if self.last_error:
            checks["last_error"] = self.last_error
        return checks

    def metrics_text(self) -> str:
        c = self.processor.counters
        name = self.consumer
        lines = [
            "# TYPE mnemo_consumer_records_total counter",
            f'mnemo_consumer_records_total{{consumer="{name}"}} {c.records}',
            "# TYPE mnemo_consumer_batches_total counter",
            f'mnemo_consumer_batches_total{{consumer="{name}"}} {c.batches}',
            "# TYPE mnemo_events_in_total counter",
        ]
        lines += [
            f'mnemo_events_in_total{{consumer="{name}",type="{t}"}} {n}'
            for t, n in sorted(c.by_type.items())
        ]
        if isinstance(self.processor, Sequencer):
            lines += [
                "# TYPE mnemo_records_archived_total counter",
                f"mnemo_records_archived_total {c.archived}",
                "# TYPE mnemo_records_duplicate_total counter",
                f"mnemo_records_duplicate_total {c.duplicates}",
                "# TYPE mnemo_records_stale_total counter",
                f"mnemo_records_stale_total {c.stale}",
                "# TYPE mnemo_dead_letters_total counter",
                f"mnemo_dead_letters_total {c.dead_letters}",
            ]
        try:
            ends = self.distributed.topic.end_offsets()
            at = self.platform.store.positions([position_name(name, p) for p in ends])
            lines.append("# TYPE mnemo_consumer_lag gauge")
            for partition, end in sorted(ends.items()):
                behind = max(0, end - at[position_name(name, partition)])
                lines.append(
                    f'mnemo_consumer_lag{{consumer="{name}",partition="{partition}"}} {behind}'
                )
        except MnemoError:
            pass
        held = self.ownership.snapshot()
        lines += [
            "# TYPE mnemo_consumer_fenced_partitions gauge",
            f'mnemo_consumer_fenced_partitions{{consumer="{name}"}} {len(held["fenced"])}',
            "# TYPE mnemo_consumer_refused_commits_total counter",
            f'mnemo_consumer_refused_commits_total{{consumer="{name}"}} {held["refused_commits"]}',
            "# TYPE mnemo_consumer_not_owned_records_total counter",
            f'mnemo_consumer_not_owned_records_total{{consumer="{name}"}} {c.not_owned}',
        ]
        lines += [
            "# TYPE mnemo_consumer_filled_in_records_total counter",
            f'mnemo_consumer_filled_in_records_total{{consumer="{name}"}} {self.filled_in}',
        ]
        lines.append("# TYPE mnemo_consumer_failing_batches gauge")
        lines.append(f'mnemo_consumer_failing_batches{{consumer="{name}"}} {self.failures}')
        lines.append("# TYPE mnemo_consumer_giving_way gauge")
        lines.append(f'mnemo_consumer_giving_way{{consumer="{name}"}} {int(self.giving_way)}')
        lines.append("# TYPE mnemo_consumer_gave_way_seconds_total counter")
        lines.append(
            f'mnemo_consumer_gave_way_seconds_total{{consumer="{name}"}} '
            f"{self.gave_way_seconds:.3f}"
        )
        lines.append("# TYPE mnemo_consumer_periodic_failures_total counter")
        lines.append(
            f'mnemo_consumer_periodic_failures_total{{consumer="{name}"}} {self.periodic_failures}'
        )
        lines.append(f"# mnemo_consumer_last_batch_at {c.last_batch_at or time.time():.0f}")
        return "\n".join(lines) + "\n"

    # -- running

    def run(self) -> None:
        """Run until SIGTERM or SIGINT; faust handles both."""
        log.info(
            "%s consuming %s as group %s",
            self.consumer,
            self.settings.kafka_topic,
            self.app.conf.id,
        )
        try:
            heap.settle()
            faust_worker(self.app, self.settings, self.consumer).execute_from_commandline()
        finally:
            self._unwatch()
            self.executor.shutdown(wait=True)
            self.platform.close()
            telemetry.shutdown()


def faust_worker(app: Any, settings: MnemoSettings, consumer: str) -> Any:
    """faust's worker for `app`, logging as `settings` say, whose stop is bounded
    (`STOP_SECONDS`). Without its terminal spinner: faust sets the root logger to DEBUG for
    the spinner at WARNING and above, and every debug line of the Kafka client and the
    HTTP libraries was then built and handed to the handlers, only to be dropped there."""
    from faust.worker import Worker as FaustWorker

    class BoundedStop(FaustWorker):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.spinner = None

        def _schedule_shutdown(self, signal: Any) -> None:
            _end_unless_stopped_within(STOP_SECONDS, consumer)
            super()._schedule_shutdown(signal)

    return BoundedStop(
        app,
        loglevel=settings.log_level.lower(),
        quiet=True,
        logging_config=telemetry.logging_config(settings.log_level, settings.log_format),
    )


_stop_timer: threading.Timer | None = None


def _end_unless_stopped_within(seconds: float, what: str) -> None:
    """Arm (once) a timer that ends the process if its stop has not finished within
    `seconds`. Ending it there is what a kill would do: nothing is lost, as a batch not
    committed is read again by the partition's next owner."""
    global _stop_timer
    if _stop_timer is not None:
        return

    def say() -> None:
        log.error(
            "%s: the stop did not finish within %.0f s (a service not answering?); ending "
            "the process now: what it did not commit is handled again by the next owner",
            what,
            seconds,
        )
        for handler in logging.getLogger().handlers:
            handler.flush()

    def expire() -> None:
        # the line is written from a thread of its own, given a second: a handler held by a
        # thread stuck in a write (a full pipe) must not keep the process from ending
        speaker = threading.Thread(target=say, daemon=True)
        speaker.start()
        speaker.join(1.0)
        os._exit(1)

    _stop_timer = threading.Timer(seconds, expire)
    _stop_timer.daemon = True
    _stop_timer.start()


# consecutive failures of the batch in flight before /readyz says `failing`: one retried
# blip (a timeout under load, a rebalance) is no outage (about 0.35 s of retries)
FAILING_AFTER = 3


def readiness_status(checks: dict[str, Any]) -> str:
    """What a worker's /readyz answers for its `checks`: `ready`, else `not_ready`
    (Cassandra or Kafka does not answer), `failing` (the batch in flight cannot be written
    and is being retried: a dependency the two pings do not reach, such as the indexer's
    Qdrant server, refuses it) or `fenced` (another process owns some of its partitions)."""
    if not all(checks.get(k) == "ok" for k in ("cassandra", "kafka")):
        return "not_ready"
    if checks["partitions"]["fenced"]:
        return "fenced"
    if checks.get("failing_batches", 0) >= FAILING_AFTER:
        return "failing"
    return "ready"


def _headers(raw: Any) -> tuple[tuple[str, bytes], ...]:
    if not raw:
        return ()
    items = raw.items() if isinstance(raw, dict) else raw
    return tuple((str(k), bytes(v) if v is not None else b"") for k, v in items)


class _EmbeddedServer:
    """uvicorn inside another program's event loop: the worker owns the signals."""

    def __init__(self, config: Any) -> None:
        import uvicorn

        class Quiet(uvicorn.Server):
            def install_signal_handlers(self) -> None:
                return None

        self._server = Quiet(config)
        self._server.capture_signals = _no_signals  # type: ignore[method-assign]

    async def serve(self) -> None:
        await self._server.serve()


def _no_signals() -> Any:
    from contextlib import nullcontext

    return nullcontext()


def _uvicorn_logging(settings: MnemoSettings) -> Any:
    """uvicorn's own log set-up for text logs; none for JSON (its loggers then reach the
    root logger's JSON handler)."""
    import uvicorn.config

    return None if settings.log_format == "json" else uvicorn.config.LOGGING_CONFIG


def make_worker(consumer: str, settings: MnemoSettings | None = None) -> Worker:
    return Worker(consumer, settings or MnemoSettings())


class ConfigurationError(SystemExit):
    """A process cannot start as configured: the error names the setting, and the process
    exits at once with status 78 (EX_CONFIG) instead of retrying."""

    def __init__(self, what: str, exc: MnemoError) -> None:
        self.error_code = exc.code  # (SystemExit's own `code` is the exit status)
        self.setting = f"MNEMO_{exc.field.upper()}" if exc.field else None
        named = f" (setting {self.setting})" if self.setting else ""
        super().__init__(78)
        self.message = f"{what}: configuration error {exc.code}{named}: {exc.message}"

    def log(self) -> None:
        """One error line; in JSON logs `error_code` and `setting` are fields of their own."""
        fields = {"error_code": self.error_code, "setting": self.setting}
        log.error("%s", self.message, extra={k: v for k, v in fields.items() if v})


def _starting(what: str, build: Callable[[], T], attempts: int = 20, delay: float = 1.0) -> T:
    """Build something that needs Kafka, Cassandra, the vault or Qdrant, retrying while they
    are not reachable yet (a deploy that starts everything at once, a node that is still
    booting). Anything else is a configuration error, and retrying cannot mend it: it is
    logged with the setting it names and the process exits at once."""
    for attempt in range(1, attempts + 1):
        try:
            return build()
        except (Unavailable, ConnectionError, TimeoutError) as exc:
            if attempt == attempts:
                raise
            code = getattr(exc, "code", type(exc).__name__)
            log.warning("%s failed (%s), attempt %d of %d; retrying", what, code, attempt, attempts)
            time.sleep(delay)
            delay = min(delay * 1.5, 10.0)
        except MnemoError as exc:
            failure = ConfigurationError(what, exc)
            failure.log()
            raise failure from None
    raise AssertionError("unreachable")


def _preflight(settings: MnemoSettings, *, indexer: bool = False) -> None:
    """What a distributed process checks before it touches Kafka, Cassandra or the vault:
    a vault to seal with (VAULT_REQUIRED), rules and policy files Mnemo takes, and SASL
    settings that go together (KAFKA_SASL_INVALID); for the indexer, a Qdrant server to
    write (QDRANT_REQUIRED); on failure
    nothing was created or published."""
    try:
        require_vault(settings)
        check_setting_files(settings)
        check_kafka_sasl(settings)
        if indexer:
            require_qdrant_for_indexer(settings)
    except MnemoError as exc:
        failure = ConfigurationError("checking the configuration", exc)
        failure.log()
        raise failure from None


def run_worker(consumer: str) -> None:
    """`python -m mnemo_<consumer>` in the distributed mode."""
    settings = worker_settings(consumer)
    telemetry.configure_logging(settings.log_level, settings.log_format)
    _preflight(settings, indexer=consumer == indexing.CONSUMER)
    telemetry.configure(
        consumer, prometheus_port=settings.prometheus_port, prometheus_host=settings.health_host
    )
    _starting("checking the vault token", lambda: check_vault_token(settings))
    if consumer == indexing.CONSUMER:
        _starting("checking the Qdrant server", lambda: check_qdrant_access(settings))
    _starting("creating the topics", lambda: ensure_topics_from(settings))
    _starting("starting the worker", lambda: make_worker(consumer, settings)).run()


def run_gateway(settings: MnemoSettings, gateway: GatewaySettings) -> None:
    """The gateway in the distributed mode. With a Qdrant server, it is only the HTTP API;
    without one, it also runs the indexer (the co-located topology)."""
    telemetry.configure_logging(settings.log_level, settings.log_format)
    _preflight(settings)
    telemetry.configure(
        "gateway", prometheus_port=settings.prometheus_port, prometheus_host=gateway.host
    )
    _starting("checking the vault token", lambda: check_vault_token(settings))
    _starting("checking the Qdrant server", lambda: check_qdrant_access(settings))
    _starting("creating the topics", lambda: ensure_topics_from(settings))
    if settings.qdrant_url is None:
        # the co-located indexer works with the indexer's own settings (MNEMO_INDEXER_...)
        indexer = worker_settings(indexing.CONSUMER, settings)
        worker = _starting(
            "starting the gateway",
            lambda: Worker(
                indexing.CONSUMER,
                indexer,
                build_distributed(indexer, "gateway"),
                with_http=gateway,
            ),
        )
        log.info("gateway with the co-located indexer on %s:%d", gateway.host, gateway.port)
        worker.run()
        return
    import uvicorn
    from mnemo_gateway.app import create_app

    platform = _starting("connecting", lambda: build_distributed(settings, "gateway"))
    try:
        app = create_app(platform, gateway, run_consumers=False)
        heap.settle()
        uvicorn.run(
            app,
            host=gateway.host,
            port=gateway.port,
            log_level=settings.log_level.lower(),
            log_config=_uvicorn_logging(settings),
        )
    finally:
        platform.close()


def ensure_topics_from(settings: MnemoSettings) -> list[str]:
    """Create the log and dead-letter topics when they are missing (idempotent)."""
    from mnemo.adapters.kafka_topic import ensure_topics

    return ensure_topics(
        kafka_config(settings, "mnemo-admin"),
        settings.kafka_topic,
        settings.kafka_partitions,
        dead_letter_topic(settings),
        replication=settings.kafka_replication,
        min_insync=settings.kafka_min_insync,
    )
