"""Several replicas of each consumer in one group, as separate processes
(`python -m mnemo_<consumer>`) on a real Kafka broker and a real Cassandra node, under a
publish burst, with replicas killed (SIGKILL), added and restarted while the burst is being
consumed: five rounds on one deployment, and after each one every accepted event has
exactly one outcome and one memory, every stream is gapless and in publish order, and the
audit chains verify; at the end a rebuild from offset 0 gives the live read models, table
by table, and the whole checksum (ADR 0014). Every consumer runs at least two replicas, and
each one loses a replica in some round. From the second round on, the bursts also cite and
correct a few memories from every other stream (so from every partition): their usage
counters count each citation once, and their weights match the rebuild's.

The indexer replicas share a Qdrant server (`tests.support.qdrant_server_url`; required
under CI), and the vectors then hold one point per memory. On a developer machine without
one, each replica keeps a qdrant-edge shard of its own, and the vectors are not compared
(the positions and the fence are)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import tests.support as support
from tests.distributed_support import (
    CASSANDRA_HOSTS,
    CASSANDRA_PORT,
    KAFKA,
    Pump,
    drop_keyspace,
    require_services,
    running_distributed,
    table_digests,
)
from tests.support import free_port, missing
from tests.vault_support import vault_settings

from mnemo.bootstrap import Platform, build_distributed
from mnemo.domain.projection import OutcomeKind
from mnemo.entrypoints.admin import distributed_status
from mnemo.entrypoints.workers import ensure_topics_from
from mnemo.ports import MemoryQuery
from mnemo.service.app import RequestContext
from mnemo.service.context import ContextRequest
from mnemo.service.distributed import position_name
from mnemo.service.insights import Insights
from mnemo.settings import MnemoSettings

CTX = RequestContext("acme", "scale-test")
PARTITIONS = 6
STREAMS = 24
BURST = 180  # declared memories per round: enough that a fault lands while they are consumed
CITES = 10  # per round and popular memory: citations from as many other streams
MODULES = {c: f"mnemo_{c}" for c in ("registrar", "indexer", "decay", "audit")}


@dataclass(frozen=True)
class Round:
    registrars: int
    indexers: int
    fault: str  # kill | add | restart
    target: str  # the consumer it hits
    also_killed: str | None = None  # another consumer that loses a replica at that moment


FOLLOWERS = 2  # replicas of decay and of audit, every round
ROUNDS = (
    Round(2, 2, "kill", "registrar", also_killed="decay"),
    Round(3, 3, "kill", "indexer", also_killed="audit"),
    Round(2, 2, "add", "registrar"),
    Round(3, 2, "restart", "registrar", also_killed="decay"),
    Round(2, 3, "add", "indexer"),
)


def _qdrant_url() -> str | None:
    """The Qdrant server the indexer replicas share: required under CI (make test starts
    one); on a developer machine without one, None (a qdrant-edge shard per replica)."""
    if os.environ.get("CI") == "true" or support.services_env_value("MNEMO_QDRANT_URL"):
        return support.qdrant_server_url()
    return None


class Fleet:
    """The worker processes of one deployment: start, wait until ready, kill, stop."""

    def __init__(self, root: Path, env: dict[str, str]) -> None:
        self.root = root
        self.env = env
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.ports: dict[str, int] = {}
        self.serial = 0

    def running(self, consumer: str) -> list[str]:
        return sorted(
            n for n, p in self.procs.items() if n.startswith(consumer + "-") and p.poll() is None
        )

    def start(self, consumer: str) -> str:
        self.serial += 1
        name = f"{consumer}-{self.serial}"
        home = self.root / name
        home.mkdir(parents=True)
        port = free_port()
        env = {
            **os.environ,
            **self.env,
            "MNEMO_HEALTH_PORT": str(port),
            "MNEMO_DATA_DIR": str(home / "data"),  # a qdrant-edge shard of its own
        }
        with (home / "log").open("ab") as out:
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-m", MODULES[consumer]],
                env=env,
                cwd=home,  # faust keeps its data folder in the working directory
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.ports[name] = port
        return name

    def log(self, name: str) -> str:
        path = self.root / name / "log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""

    def readiness(self, name: str) -> tuple[int, dict[str, Any]]:
        try:
            answer = httpx.get(f"http://127.0.0.1:{self.ports[name]}/readyz", timeout=5)
        except httpx.HTTPError:
            return 0, {}
        return answer.status_code, answer.json()

    def wait_ready(self, names: list[str], timeout: float = 240.0) -> None:
        deadline = time.monotonic() + timeout
        pending = list(names)
        while pending:
            for name in list(pending):
                if self.procs[name].poll() is not None:
                    raise AssertionError(f"{name} exited:\n{self.log(name)}")
                if self.readiness(name)[0] == 200:
                    pending.remove(name)
            if pending and time.monotonic() > deadline:
                logs = "\n".join(f"--- {n}\n{self.log(n)}" for n in pending)
                raise AssertionError(f"not ready after {timeout:.0f} s: {pending}\n{logs}")
            time.sleep(0.3)

    def kill(self, name: str) -> None:
        proc = self.procs[name]
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=60)

    def stop(self, name: str) -> None:
        proc = self.procs[name]
        if proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.kill(name)

    def scale(self, consumer: str, replicas: int) -> list[str]:
        """Start or stop replicas of a consumer until `replicas` run; returns the new ones."""
        started = []
        while len(self.running(consumer)) < replicas:
            started.append(self.start(consumer))
        for name in self.running(consumer)[replicas:]:
            self.stop(name)
        return started

    def down(self) -> None:
        for name in self.procs:
            self.stop(name)


class Deployment:
    def __init__(self, root: Path) -> None:
        tag = uuid.uuid4().hex[:10]
        self.keyspace = f"mnemo_scale_{tag}"
        self.qdrant = _qdrant_url()
        self.env = {
            "MNEMO_MODE": "distributed",
            "MNEMO_EMBEDDER": "hashing",
            "MNEMO_KAFKA_BOOTSTRAP": KAFKA,
            "MNEMO_KAFKA_TOPIC": f"scale.{tag}",
            "MNEMO_KAFKA_PARTITIONS": str(PARTITIONS),
            "MNEMO_KAFKA_GROUP_SUFFIX": f".{tag}",
            "MNEMO_KAFKA_SESSION_TIMEOUT": "6",
            "MNEMO_CASSANDRA_HOSTS": CASSANDRA_HOSTS,
            "MNEMO_CASSANDRA_PORT": str(CASSANDRA_PORT),
            "MNEMO_CASSANDRA_KEYSPACE": self.keyspace,
            "MNEMO_LOG_LEVEL": "WARNING",
            "MNEMO_LOG_FORMAT": "text",
        }
        if self.qdrant:
            self.env["MNEMO_QDRANT_URL"] = self.qdrant
            self.env["MNEMO_QDRANT_COLLECTION"] = f"scale_{tag}"
        # every replica opens what the gateway sealed (a user's words are always sealed):
        # one vault for all of them, as in production
        vault_url, vault_token = vault_settings()
        if vault_token is None:
            missing("OpenBao", "no MNEMO_VAULT_TOKEN and no services.env")
        self.env["MNEMO_VAULT_ADDR"] = vault_url
        self.env["MNEMO_VAULT_TOKEN"] = vault_token
        self.env["MNEMO_VAULT_KEY_PREFIX"] = f"scale-{tag}"
        self.root = root
        self.fleet = Fleet(root / "fleet", self.env)
        values = {k.removeprefix("MNEMO_").lower(): v for k, v in self.env.items()}
        values["data_dir"] = str(root / "inspect")
        self.settings = MnemoSettings(**values)  # type: ignore[arg-type]
        ensure_topics_from(self.settings)
        self.platform: Platform = build_distributed(
            self.settings, "test", with_index=self.qdrant is not None
        )
        self.accepted: list[str] = []
        self.order: dict[str, list[str]] = {}  # stream -> event ids in publish order
        self.feedback: dict[str, list[str]] = {}  # stream -> feedback event ids, in order
        self.popular: list[tuple[str, str]] = []  # (memory id, stream): cited from elsewhere
        self.cited: dict[str, int] = {}  # memory id -> citations published
        # contexts that showed a popular memory, cited in the next round (request id,
        # memory id, the context's stream); and every memory a context showed
        self.pending: list[tuple[str, str, str]] = []
        self.shown: set[str] = set()
        self.corrected: dict[str, int] = {}
        self.published = 0

    def publish_burst(self, count: int) -> None:
        for start in range(0, count, 30):
            events = []
            for i in range(start, min(count, start + 30)):
                n = self.published + i
                events.append(
                    {
                        "type": "MemoryDeclared",
                        "schema_version": 1,
                        "stream": f"user:U{n % STREAMS}",
                        "payload": {"memory": {"type": "fact", "content": f"fact number {n}"}},
                    }
                )
            result = self.platform.app.publish(CTX, events)
            for event, accepted in zip(events, result.accepted, strict=True):
                self.accepted.append(accepted.event_id)
                self.order.setdefault(event["stream"], []).append(accepted.event_id)
        self.published += count
        self.publish_feedback()

    def publish_feedback(self) -> None:
        """Citations of each popular memory from CITES other streams, and a correction of
        them all from one more: read-modify-write of one memory's counters and weight
        from several partitions at once, were they not kept per partition or relayed. A
        citation names a context that showed the memory: the contexts are assembled in
        one round and cited in the next, once the registrars have recorded them."""
        chosen_now = not self.popular
        if chosen_now:  # two memories registered by now become popular
            memories = self.platform.store.query("acme", MemoryQuery(limit=100_000))
            by_stream = {m.stream: m.memory_id for m in memories}
            self.popular = [(by_stream[s], s) for s in sorted(by_stream)[:2]]
            if len(self.popular) < 2:
                self.popular = []
                return
        events = []
        for k, (request_id, memory_id, stream) in enumerate(self.pending):
            position = ("beginning", "end")[k % 2]
            events.append(
                feedback(
                    "MemoryCited",
                    stream,
                    memory_id=memory_id,
                    request_id=request_id,
                    position=position,
                )
            )
            self.cited[memory_id] = self.cited.get(memory_id, 0) + 1
        self.pending = []
        for n, (memory_id, home) in enumerate(self.popular):
            others = [f"user:U{i}" for i in range(STREAMS) if f"user:U{i}" != home]
            start = (self.published // BURST + n) % len(others)
            memory = self.platform.app.get(CTX, memory_id)  # opened: the query is its text
            for k in range(CITES):
                stream = others[(start + k) % len(others)]
                request = ContextRequest(
                    subjects=(stream, home), query=memory.content or "", budget=4_000
                )
                shown = self.platform.app.context(CTX, request)
                ids = {i.candidate.memory.memory_id for i in shown.assembly.included}
                self.shown |= ids
                if memory_id in ids:
                    self.pending.append((shown.request_id, memory_id, stream))
        # memories chosen just now may be registered and not yet indexed (a context finds
        # them by their text); from the next round on, every consumer has caught up since
        assert self.pending or chosen_now, "no context showed a popular memory"
        ids = [m for m, _ in self.popular]
        events.append(feedback("MemoryCorrected", "user:U23", memory_ids=ids, reason="outdated"))
        for memory_id in ids:
            self.corrected[memory_id] = self.corrected.get(memory_id, 0) + 1
        result = self.platform.app.publish(CTX, events)
        for event, accepted in zip(events, result.accepted, strict=True):
            self.feedback.setdefault(event["stream"], []).append(accepted.event_id)

    def lag(self) -> dict[str, int]:
        d = self.platform.distributed
        assert d is not None
        return {c: sum(v.values()) for c, v in d.progress.lag().items()}

    def consumed(self, consumer: str) -> int:
        """Records `consumer` has committed past, over every partition."""
        d = self.platform.distributed
        assert d is not None
        ends = d.progress.topic.end_offsets()
        names = [position_name(consumer, p) for p in ends]
        return sum(d.progress.store.positions(names).values())

    def wait_progress(
        self, consumer: str, since: int, records: int, timeout: float = 180.0
    ) -> None:
        """Until `consumer` has committed past `records` more records than `since` (what it
        had before the burst was published): the fault then lands while the burst is being
        consumed, or just after when the consumers outrun the publisher."""
        deadline = time.monotonic() + timeout
        while self.consumed(consumer) - since < records:
            if time.monotonic() > deadline:
                raise AssertionError(f"{consumer} made no progress: {self.lag()}")
            time.sleep(0.1)

    def wait_caught_up(self, timeout: float = 240.0) -> None:
        deadline = time.monotonic() + timeout
        while True:
            lag = self.lag()
            ready = {n: self.fleet.readiness(n) for c in MODULES for n in self.fleet.running(c)}
            if not any(lag.values()) and all(code == 200 for code, _ in ready.values()):
                return
            if time.monotonic() > deadline:
                logs = "\n".join(f"--- {n}\n{self.fleet.log(n)[-1500:]}" for n in ready)
                raise AssertionError(f"not caught up: lag {lag}, readiness {ready}\n{logs}")
            time.sleep(0.5)

    def close(self) -> None:
        self.fleet.down()
        drop_keyspace(self.platform)
        if self.qdrant:
            self.platform.index.clear()
        self.platform.close()


def feedback(event_type: str, stream: str, **payload: Any) -> dict[str, Any]:
    return {"type": event_type, "schema_version": 1, "stream": stream, "payload": payload}


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[Deployment]:
    require_services()
    d = Deployment(tmp_path)
    try:
        yield d
    finally:
        d.close()


def assert_each_accepted_event_once(d: Deployment) -> None:
    store, log = d.platform.store, d.platform.log
    for event_id in d.accepted:
        outcomes = store.outcome("acme", event_id)
        assert [o.kind for o in outcomes] == [OutcomeKind.REGISTERED], (event_id, outcomes)
    memories = store.query("acme", MemoryQuery(limit=100_000))
    assert sorted(m.source_event_id for m in memories) == sorted(d.accepted)
    if d.qdrant:  # one point per memory in the shared collection
        assert sorted(d.platform.index.ids("acme")) == sorted(m.memory_id for m in memories)
    popular = dict(d.popular)
    total = 0
    for stream, published in d.order.items():
        events = log.read_stream("acme", stream, 1, 100_000)
        total += len(events)
        assert [e.envelope.seq for e in events] == list(range(1, len(events) + 1)), stream
        declared = [e.envelope.event_id for e in events if e.envelope.type == "MemoryDeclared"]
        assert declared == published, stream  # gapless, once each, in publish order
        registered = [e for e in events if e.envelope.type == "MemoryRegistered"]
        assert len(registered) == len(published)  # each with its MemoryRegistered
        feedback = [
            e.envelope.event_id
            for e in events
            if e.envelope.type in ("MemoryCited", "MemoryCorrected")
        ]
        assert feedback == d.feedback.get(stream, []), stream
        for e in events:  # a popular memory's weight moves only in its own stream
            if e.envelope.type == "MemoryDecayed":
                assert popular.get(e.envelope.payload["memory_id"], stream) == stream
    # each citation and correction counted once, whichever partition counted it
    for memory_id in popular:
        [stats] = store.memory_stats("acme", [memory_id])
        assert (stats.cited, stats.corrected) == (
            d.cited.get(memory_id, 0),
            d.corrected.get(memory_id, 0),
        ), memory_id
    # what `mnemo audit verify` checks, through the same service call
    verdict = Insights(log, store, d.platform.app.clock).audit(CTX)
    assert verdict.status == "intact", verdict
    assert verdict.links == total


def test_replicas_killed_added_and_restarted_under_a_burst_lose_and_double_nothing(
    deployment: Deployment,
) -> None:
    d = deployment
    fleet = d.fleet
    names = fleet.scale("decay", FOLLOWERS) + fleet.scale("audit", FOLLOWERS)
    names += fleet.scale("registrar", ROUNDS[0].registrars)
    names += fleet.scale("indexer", ROUNDS[0].indexers)
    fleet.wait_ready(names)
    began = time.monotonic()
    for number, plan in enumerate(ROUNDS, 1):
        fleet.wait_ready(fleet.scale("registrar", plan.registrars))
        fleet.wait_ready(fleet.scale("indexer", plan.indexers))
        fleet.wait_ready(fleet.scale("decay", FOLLOWERS) + fleet.scale("audit", FOLLOWERS))
        since = d.consumed(plan.target)
        d.publish_burst(BURST)
        # the fault lands once a fifth of the burst is consumed
        d.wait_progress(plan.target, since, BURST // 5)
        victims = fleet.running(plan.target)
        if plan.also_killed is not None:
            fleet.kill(fleet.running(plan.also_killed)[0])
        if plan.fault == "kill":
            fleet.kill(victims[0])
        elif plan.fault == "restart":
            fleet.kill(victims[0])
            fleet.wait_ready([fleet.start(plan.target)])
        else:  # a replica joins: the group rebalances under load
            fleet.wait_ready([fleet.start(plan.target)])
        d.wait_caught_up()
        assert_each_accepted_event_once(d)
        print(
            f"round {number} ({plan}): {len(d.accepted)} events, {time.monotonic() - began:.0f} s"
        )
    # the status names the processes holding each consumer's partitions (`mnemo status`
    # shows these): only running replicas, one row each, between them every partition (a
    # replica the group left without partitions has no row)
    assert d.platform.distributed is not None
    ends = d.platform.distributed.topic.end_offsets()
    status = distributed_status(d.platform, "")
    for consumer in MODULES:
        pids = {fleet.procs[n].pid for n in fleet.running(consumer)}
        held = status["holders"][consumer]
        holding = {int(h.split("/")[1]) for h in held}
        assert holding <= pids, (consumer, held, pids)
        assert len(holding) >= min(2, len(pids)), (consumer, held, pids)
        assert sorted(p for parts in held.values() for p in parts) == sorted(ends), held
    # nothing fenced is left, and a rebuild from offset 0 gives the live checksum
    for consumer in MODULES:
        for name in fleet.running(consumer):
            code, body = fleet.readiness(name)
            assert code == 200, (name, body)
            assert body["checks"]["partitions"]["fenced"] == []
    live = d.platform.store.checksum()
    rebuilt_checksum = ""
    everything = [m.memory_id for m in d.platform.store.query("acme", MemoryQuery(limit=100_000))]
    live_usage = d.platform.store.memory_stats("acme", everything)
    assert {s.memory_id for s in live_usage} == set(dict(d.popular)) | d.shown
    fresh = d.settings.model_copy(
        update={
            "cassandra_keyspace": f"{d.keyspace}_r",
            "data_dir": d.root / "rebuild",
            "qdrant_collection": f"{d.settings.qdrant_collection}_r",
        }
    )
    live_tables = table_digests(d.platform)
    with running_distributed(fresh, "rebuild") as rebuilt:
        Pump(rebuilt).drain(timeout=600)
        rebuilt_tables = table_digests(rebuilt)
        rebuilt_checksum = rebuilt.store.checksum()
        rebuilt_usage = rebuilt.store.memory_stats("acme", everything)
    # the usage counters are what one process reading the log from offset 0 counts
    assert rebuilt_usage == live_usage
    # every table, then the whole checksum (no read model is shared across partitions
    # outside the fence since keyword statistics moved into the vector engine, ADR 0015)
    assert rebuilt_tables == live_tables
    assert {"memories", "outcomes", "audit_links", "timeline"} <= set(live_tables)
    assert "term_stats" not in live_tables
    assert rebuilt_checksum == live
