"""The distributed mode end to end, as separate processes on a real Kafka broker and a real
Cassandra node, started by infra/stack.py on ports, a topic and a keyspace of this test's
own, in either topology:

- `server` (the chart's): the vectors on the Qdrant server (`make test` starts one), the
  indexer a faust worker of its own, the gateway stateless HTTP only;
- `co-located` (small deployments): no Qdrant server, the gateway runs the indexer over a
  qdrant-edge shard.

The registrar, decay and audit faust workers run as processes of their own in both. The
happy path runs in both topologies; the fault tests (slow) run in the chart's.

- publish through the gateway -> registered -> searchable -> context -> replay;
- publish straight to the topic with a Kafka client -> the same read models;
- SIGKILL a consumer while events keep coming, restart it: every accepted event is
  projected exactly once (outcomes, memories, vectors, audit links, sequences);
- the broker and Cassandra restarted under load: the gateway answers 503 with a code or
  accepts; whatever it accepted is projected exactly once.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from tests.distributed_support import (
    CASSANDRA_HOSTS,
    CASSANDRA_PORT,
    KAFKA,
    Pump,
    drop_keyspace,
    require_services,
    running_distributed,
)
from tests.support import (
    audit_trails,
    free_port,
    missing,
    qdrant_server_url,
    stack_module,
    verify_trails,
)
from tests.vault_support import vault_settings

from mnemo.bootstrap import Platform, build_distributed
from mnemo.domain.ids import new_event_id
from mnemo.ports import MemoryQuery
from mnemo.settings import MnemoSettings

REPO = Path(__file__).resolve().parents[2]
H = {"X-Mnemo-Principal": "planner"}
OPERATOR = "e2e-operator-token"

Stack = stack_module().Stack


def declared(content: str, stream: str = "user:U1", **memory: Any) -> dict[str, Any]:
    return {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": stream,
        "payload": {"memory": {"type": "fact", "content": content, **memory}},
    }


class Deployment:
    def __init__(self, root: Path, topology: str = "server") -> None:
        tag = uuid.uuid4().hex[:10]
        self.topology = topology
        self.topic = f"e2e.{tag}"
        self.keyspace = f"mnemo_e2e_{tag}"
        self.data = root / "data"
        self.env = {
            "MNEMO_MODE": "distributed",
            "MNEMO_EMBEDDER": "hashing",
            "MNEMO_DATA_DIR": str(self.data),
            "MNEMO_KAFKA_BOOTSTRAP": KAFKA,
            "MNEMO_KAFKA_TOPIC": self.topic,
            "MNEMO_KAFKA_PARTITIONS": "6",
            "MNEMO_KAFKA_GROUP_SUFFIX": f".{tag}",
            "MNEMO_CASSANDRA_HOSTS": CASSANDRA_HOSTS,
            "MNEMO_CASSANDRA_PORT": str(CASSANDRA_PORT),
            "MNEMO_CASSANDRA_KEYSPACE": self.keyspace,
            "MNEMO_LOG_LEVEL": "WARNING",
            "MNEMO_GATEWAY_ADMIN_TOKEN": OPERATOR,
            # a loaded machine may take more than the default 10 s to index a new
            # deployment's first events (a new user's key, the first statements): the
            # waits below ask for up to a minute
            "MNEMO_GATEWAY_WAIT_TIMEOUT": "60",
            "MNEMO_KEY_PEPPER": f"e2e-pepper-{tag}-0123456789",
            # the audit worker signs idle chain heads after a second (its timer)
            "MNEMO_AUDIT_CHECKPOINT_SECONDS": "1",
            # co-located: none, even if this process's environment names a server
            "MNEMO_QDRANT_URL": qdrant_server_url() if topology == "server" else "",
            "MNEMO_QDRANT_COLLECTION": f"e2e_{tag}",
        }
        # one vault for every process, as in production: a user's words are always sealed,
        # and a development key file is not safe to share between processes
        vault_url, vault_token = vault_settings()
        if vault_token is None:
            missing("OpenBao", "no MNEMO_VAULT_TOKEN and no services.env")
        self.env["MNEMO_VAULT_ADDR"] = vault_url
        self.env["MNEMO_VAULT_TOKEN"] = vault_token
        self.env["MNEMO_VAULT_KEY_PREFIX"] = f"e2e-{tag}"
        self.stack = Stack(
            root / "run",
            self.env,
            gateway_port=free_port(),
            ports={n: free_port() for n in ("registrar", "indexer", "decay", "audit")},
        )
        self.url = f"http://127.0.0.1:{self.stack.gateway_port}"
        self.http = httpx.Client(base_url=self.url, headers=H, timeout=60)
        self.key = ""

    def create_tenant(self) -> None:
        """Tenant acme and its admin key, made with the operator token; every later
        request of the test sends that key."""
        made = self.http.post(
            "/v1/admin/tenants", json={"tenant": "acme"}, headers={"X-Mnemo-Admin-Token": OPERATOR}
        )
        assert made.status_code == 201, made.text
        self.key = made.json()["key"]
        self.http.headers["Authorization"] = f"Bearer {self.key}"

    def settings(self) -> MnemoSettings:
        values = {k.removeprefix("MNEMO_").lower(): v for k, v in self.env.items() if v}
        values["data_dir"] = str(self.data.parent / "inspect")
        return MnemoSettings(**values)  # type: ignore[arg-type]

    def drop_collections(self) -> None:
        """The Qdrant server's collections of this deployment (the live one, the rebuild's)."""
        url = self.env["MNEMO_QDRANT_URL"]
        if not url:
            return
        name = self.env["MNEMO_QDRANT_COLLECTION"]
        for collection in (name, f"{name}_r"):
            httpx.delete(f"{url}/collections/{collection}", timeout=60)

    def inspect(self) -> Platform:
        """A platform in the test process to look at the store and the archive."""
        return build_distributed(self.settings(), "inspect", with_index=False)

    def outcome(self, event_id: str, timeout: float = 60.0) -> str | None:
        """The first outcome of an event published straight to the topic, once there is one."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            got = self.http.get(f"/v1/events/{event_id}/outcome")
            if got.status_code == 200 and got.json():
                return str(got.json()[0]["outcome"])
            time.sleep(0.2)
        return None

    def wait_caught_up(self, timeout: float = 120.0) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        status: dict[str, Any] = {}
        while time.monotonic() < deadline:
            try:
                status = self.http.get("/v1/admin/status").json()
            except httpx.HTTPError:
                time.sleep(0.5)
                continue
            lag = status.get("lag", {})
            if lag and not any(lag.values()) and status.get("consumers_running"):
                return status
            time.sleep(0.3)
        raise AssertionError(f"the consumers did not catch up: {status}")


@pytest.fixture
def deployment(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Deployment]:
    """A deployment in the topology the test asks for (indirect parametrization), else the
    chart's (`server`)."""
    require_services()
    d = Deployment(tmp_path, getattr(request, "param", "server"))
    assert d.stack.topology == d.topology
    try:
        d.stack.up(timeout=180)
    except Exception:
        for component in d.stack.components():
            log = d.stack.log_file(component.name)
            if log.exists():
                print(f"--- {component.name}\n{log.read_text()[-3000:]}")
        d.stack.down()
        d.drop_collections()
        raise
    try:
        d.create_tenant()
        yield d
    finally:
        d.http.close()
        d.stack.down()
        inspect = d.inspect()
        drop_keyspace(inspect)
        inspect.close()
        d.drop_collections()


def publish(
    d: Deployment, events: list[dict[str, Any]], wait: str = "none", timeout: float = 45
) -> httpx.Response:
    params: dict[str, Any] = {"wait": wait}
    if wait != "none":
        params["timeout"] = timeout
    return d.http.post("/v1/events", params=params, json={"events": events})


def assert_projected_exactly_once(d: Deployment, accepted: list[str]) -> None:
    """Every accepted event: one outcome, its memory once; vectors = memories; one audit
    link per archived event; gapless streams; the checksum of a rebuild."""
    platform = d.inspect()
    try:
        for event_id in accepted:
            outcomes = platform.store.outcome("acme", event_id)
            assert len(outcomes) == 1, (event_id, outcomes)
            assert outcomes[0].kind.value == "registered"
        memories = platform.store.query("acme", MemoryQuery(limit=100_000))
        assert len(memories) == len(accepted)
        assert len({m.source_event_id for m in memories}) == len(accepted)
        streams = {m.stream for m in memories}
        archived = 0
        for stream in streams:
            events = platform.log.read_stream("acme", stream, 1, 100_000)
            assert [e.envelope.seq for e in events] == list(range(1, len(events) + 1))
            ids = [e.envelope.event_id for e in events]
            assert len(ids) == len(set(ids))
            archived += len(events)
        trails = audit_trails(platform.store, "acme")
        assert set(trails) == streams
        assert sum(len(t) for t in trails.values()) == archived
        logged = {
            r.event_id: platform.log.get("acme", r.event_id) for t in trails.values() for r in t
        }
        assert verify_trails(trails, {k: v.envelope for k, v in logged.items() if v}) == {}
        # and the same read models as a rebuild: fresh consumers from offset 0 into an
        # empty keyspace give the live checksum, so nothing was applied twice or skipped
        live = platform.store.checksum()
        fresh = d.settings().model_copy(
            update={
                "cassandra_keyspace": f"{d.keyspace}_r",
                "data_dir": d.data.parent / "r",
                "qdrant_collection": f"{d.env['MNEMO_QDRANT_COLLECTION']}_r",
            }
        )
        with running_distributed(fresh, "rebuild") as rebuilt:
            Pump(rebuilt).drain(timeout=600)
            assert rebuilt.store.counts()["memories"] == len(accepted)
            assert rebuilt.store.checksum() == live
    finally:
        platform.close()
    # the vectors, read by the gateway (the process that owns the shard)
    counts = d.http.get("/v1/admin/status").json()
    assert counts["lag"]["indexer"] == 0


@pytest.mark.parametrize("deployment", ["co-located", "server"], indirect=True)
def test_gateway_and_raw_kafka_paths_end_in_the_same_read_models(deployment: Deployment) -> None:
    d = deployment
    # the processes the topology runs: a separate indexer only with the Qdrant server
    expected = {"gateway", "registrar", "decay", "audit"}
    if d.topology == "server":
        expected.add("indexer")
    assert {c.name for c in d.stack.components() if d.stack.pid(c.name)} == expected
    answer = publish(
        d,
        [
            {"type": "ObservationRecorded", "schema_version": 2, "stream": "user:U1",
             "payload": {"text": "记住我的尺码是L"}},
            declared("the user is allergic to peanuts"),
        ],
        wait="indexed",
    )  # fmt: skip
    assert answer.status_code == 202, answer.text
    body = answer.json()
    assert body["complete"] is True
    assert [a["outcomes"][0]["outcome"] for a in body["accepted"]] == ["registered"] * 2

    hits = d.http.post("/v1/search", json={"query": "peanuts", "subjects": ["user:U1"]}).json()
    assert "peanuts" in hits["hits"][0]["memory"]["content"]
    context = d.http.post(
        "/v1/context", json={"query": "what size do I wear", "subjects": ["user:U1"]}
    ).json()
    assert "尺码：L" in context["context"]

    # straight to the topic, as any Kafka client could (the SDK's publisher here)
    from mnemo.client.kafka import EventPublisher

    async def produce() -> list[str]:
        async with EventPublisher(KAFKA, tenant="acme", principal="ingest", topic=d.topic) as pub:
            return await pub.publish([declared("the office is on floor 7", stream="user:U2")])

    [raw_id] = asyncio.run(produce())
    assert d.outcome(raw_id) == "registered"
    d.wait_caught_up()
    hits = d.http.post("/v1/search", json={"query": "office floor", "subjects": ["user:U2"]}).json()
    assert "floor 7" in hits["hits"][0]["memory"]["content"]

    replay = d.http.get("/v1/subjects/user:U1/events", params={"from_seq": 1}).json()["events"]
    assert [e["seq"] for e in replay] == list(range(1, len(replay) + 1))
    assert [e["type"] for e in replay] == [
        "ObservationRecorded",
        "MemoryDeclared",
        "MemoryRegistered",
        "MemoryRegistered",
        "ContextAssembled",  # the gateway records each context through the log too
    ]
    # the dead letters span tenants: the operator's to read
    status = d.http.get("/v1/admin/status", headers={"X-Mnemo-Admin-Token": OPERATOR}).json()
    assert status["mode"] == "distributed"
    assert status["dead_letters"] == 0
    assert set(status["components"]) == {"gateway", "registrar", "indexer", "decay", "audit"}
    assert all(v == "ready" for v in status["components"].values())
    assert status["services"]["qdrant"] == (
        "ready" if d.topology == "server" else "embedded (qdrant-edge)"
    )
    # the audit worker signed every chain head on its own (no further records came), and
    # the gateway verifies the chains against those checkpoints
    deadline, audit = time.monotonic() + 60, {}
    while time.monotonic() < deadline:
        audit = d.http.get("/v1/insights/audit").json()
        if audit["status"] != "intact" or (audit["unsigned"] == 0 and audit["checkpoints"]):
            break
        time.sleep(0.3)
    assert (audit["status"], audit["code"], audit["unsigned"]) == ("intact", None, 0), audit
    assert audit["checkpoints"] >= len({"user:U1", "user:U2"})
    assert audit["signed"] == audit["links"]
    # the CLI's status is the same answer, rendered
    cli = subprocess.run(
        [sys.executable, "-m", "mnemo", "--url", d.url, "--api-key", d.key, "status"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert cli.returncode == 0, cli.stderr
    assert "registrar" in cli.stdout
    assert "ready" in cli.stdout

    # a third path: kcat, a plain Kafka client, with one JSON line as docs/distributed.md
    # shows it (key and value split at '|')
    kcat = shutil.which("kcat")
    if kcat is None:
        missing("kcat", "apt-get install kcat; make test installs it")
    kcat_id = new_event_id(datetime.now(UTC))
    envelope = {
        "event_id": kcat_id,
        "type": "MemoryDeclared",
        "schema_version": 1,
        "tenant": "acme",
        "stream": "user:U3",
        "occurred_at": datetime.now(UTC).isoformat(),
        "actor": {"kind": "agent", "id": "kcat"},
        "payload": {"memory": {"type": "fact", "content": "the parking spot is B12"}},
    }
    line = "acme:user:U3|" + json.dumps(envelope, ensure_ascii=False) + "\n"
    produced = subprocess.run(
        [kcat, "-P", "-b", KAFKA, "-t", d.topic, "-K", "|"],
        input=line,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert produced.returncode == 0, produced.stderr
    assert d.outcome(kcat_id) == "registered"
    d.wait_caught_up()
    hits = d.http.post("/v1/search", json={"query": "parking spot", "subjects": ["user:U3"]})
    assert "B12" in hits.json()["hits"][0]["memory"]["content"]
    replay = d.http.get("/v1/subjects/user:U3/events", params={"from_seq": 1}).json()["events"]
    assert [(e["seq"], e["type"]) for e in replay] == [
        (1, "MemoryDeclared"),
        (2, "MemoryRegistered"),
    ]
    assert replay[0]["actor"]["id"] == "kcat"


class Publisher:
    """Publishes batches on a thread until stopped, as a well-behaved client does: every
    event carries its own id, and a batch refused with a 503 (or lost in transport) is sent
    again, the same ids, until it is accepted. An answer lost after the append is then
    harmless: the log keeps one event per id. Keeps the accepted ids and the refusals."""

    def __init__(self, d: Deployment, streams: int = 8) -> None:
        self.d = d
        self.streams = streams
        self.accepted: list[str] = []
        self.refused: list[str] = []
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)
        self.n = 0

    def _next_batch(self) -> list[dict[str, Any]]:
        batch = []
        for i in range(5):
            event = declared(f"fact {self.n + i}", stream=f"user:U{(self.n + i) % self.streams}")
            event["event_id"] = new_event_id(datetime.now(UTC))
            batch.append(event)
        self.n += 5
        return batch

    def run(self) -> None:
        headers = {**H, "Authorization": f"Bearer {self.d.key}"}
        with httpx.Client(base_url=self.d.url, headers=headers, timeout=60) as http:
            batch: list[dict[str, Any]] | None = None
            # after a stop, finish the batch in hand: it may already be in the log
            while batch is not None or not self.stop.is_set():
                batch = batch or self._next_batch()
                try:
                    answer = http.post("/v1/events", json={"events": batch})
                except httpx.HTTPError:
                    self.refused.append("transport")
                    time.sleep(0.2)
                    continue
                if answer.status_code == 202:
                    self.accepted.extend(a["event_id"] for a in answer.json()["accepted"])
                    batch = None
                else:
                    assert answer.status_code == 503, answer.text
                    self.refused.append(answer.json()["error"]["code"])
                    time.sleep(0.2)
                time.sleep(0.1)  # a steady load, not a flood

    def __enter__(self) -> Publisher:
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.stop.set()
        self.thread.join(timeout=300)


def test_a_consumer_killed_mid_batch_and_restarted_projects_everything_once(
    deployment: Deployment,
) -> None:
    d = deployment
    with Publisher(d) as pub:
        time.sleep(3)
        for name in ("registrar", "audit"):
            d.stack.kill(name)
            time.sleep(1.5)
            d.stack.start(name)
            d.stack.wait_ready([name], timeout=120)
            time.sleep(1.0)
    assert len(pub.accepted) >= 100
    assert pub.refused == []
    d.wait_caught_up(timeout=180)
    assert_projected_exactly_once(d, pub.accepted)


# readiness budgets for a service restarted mid-test, generous for a loaded 2-core machine
# (infra/services.py's own defaults are 90 s for Kafka and 180 s for Cassandra)
RESTART_BUDGET = {"MNEMO_KAFKA_TIMEOUT": "300", "MNEMO_CASSANDRA_TIMEOUT": "420"}


def _services(*args: str) -> None:
    """infra/services.py ARGS; a failure says what the script and the service logged."""
    done = subprocess.run(
        [sys.executable, str(REPO / "infra" / "services.py"), *args],
        check=False,
        cwd=REPO,
        env={**os.environ, **RESTART_BUDGET},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, (
        f"infra/services.py {' '.join(args)} exited {done.returncode}:\n"
        f"{done.stdout[-4_000:]}\n{done.stderr[-4_000:]}"
    )


@pytest.mark.parametrize("service", ["kafka", "cassandra"])
def test_a_restarted_broker_or_cassandra_loses_and_doubles_nothing(
    deployment: Deployment, service: str
) -> None:
    d = deployment
    with Publisher(d) as pub:
        time.sleep(2)
        _services("down", service)
        try:
            # the operator reads the status while it is away, with the operator token alone
            # (the API keys are in Cassandra): the service is shown as not ready
            status = httpx.get(
                f"{d.url}/v1/admin/status", headers={"X-Mnemo-Admin-Token": OPERATOR}, timeout=60
            )
            assert status.status_code == 200, status.text
            assert status.json()["services"][service] != "ready", status.json()
            if service == "cassandra":
                assert status.json()["counts_error"] == "STORE_UNAVAILABLE", status.json()
                assert status.json()["error"] == "STORE_UNAVAILABLE", status.json()
                # the log head is the brokers' and still known
                assert status.json()["log_head"] >= len(pub.accepted), status.json()
            else:
                assert status.json()["log_head"] is None, status.json()
            # every consumer has committed by now, and still says it is not ready: its
            # check reads the store or asks the brokers (it answered from memory before)
            for name in ("registrar", "indexer", "decay", "audit"):
                assert status.json()["components"][name] not in ("ready", "unreachable"), name
                ready = httpx.get(d.stack.component(name).ready_url(), timeout=30)
                assert ready.status_code == 503, (name, ready.text)
                check = "cassandra" if service == "cassandra" else "kafka"
                assert ready.json()["checks"][check] != "ok", (name, ready.text)
            time.sleep(3)
        finally:  # whatever failed above, the service comes back for the tests after
            _services("up", service)
        time.sleep(3)
    assert len(pub.accepted) >= 20
    # while it is away the gateway refuses with a code (the log or the key store is down);
    # it never accepts what it cannot keep
    expected = {"kafka": {"LOG_UNAVAILABLE", "transport"}, "cassandra": {"STORE_UNAVAILABLE"}}
    assert set(pub.refused) <= expected[service]
    d.wait_caught_up(timeout=240)
    assert_projected_exactly_once(d, pub.accepted)


def test_consumers_stop_within_their_bound_while_the_broker_is_down(
    deployment: Deployment,
) -> None:
    """SIGTERM with the brokers gone: faust alone waited 60 s for its consumer to leave
    the group, past the chart's 30 s grace period, and `make down` stopped the processes
    one after another. Each consumer now ends within STOP_SECONDS of the signal, saying
    why in its log, and the whole stack stops within the grace period."""
    from mnemo.entrypoints.workers import STOP_SECONDS

    d = deployment
    names = ["registrar", "indexer", "decay", "audit", "gateway"]
    assert all(d.stack.pid(n) for n in names), {n: d.stack.pid(n) for n in names}
    # the grace period the chart gives a pod, which the stop must stay under
    values = yaml.safe_load((REPO / "helm" / "mnemo" / "values.yaml").read_text())
    grace = float(values["defaults"]["terminationGracePeriodSeconds"])
    assert grace > STOP_SECONDS
    _services("down", "kafka")
    try:
        started = time.monotonic()
        d.stack.down()  # SIGTERM to every process, then a wait for each
        took = time.monotonic() - started
        assert all(d.stack.pid(n) is None for n in names)
        assert took < grace, f"the stack took {took:.1f} s to stop"
        if took >= STOP_SECONDS:  # some stop ran to its bound, and said so
            logs = [d.stack.log_file(n).read_text() for n in names]
            assert any("did not finish within" in text for text in logs)
    finally:
        _services("up", "kafka")
