"""Test support for the distributed mode: real Kafka and Cassandra on 127.0.0.1 (make test
starts them), a fresh topic and keyspace per test, and a pump that drives the four
consumers' partition processors in-process, the way the faust workers do, so that a test
can run them step by step."""

from __future__ import annotations

import hashlib
import os
import socket
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

import pytest
from tests.support import missing
from tests.vault_support import vault_settings

from mnemo.bootstrap import Platform, build_distributed, dead_letter_topic, kafka_config
from mnemo.service.distributed import Follower, NotReady, Sequencer, position_name
from mnemo.settings import MnemoSettings

__all__ = [
    "KAFKA",
    "Pump",
    "cassandra_jmx_port",
    "distributed_settings",
    "drop_keyspace",
    "jmx_missing",
    "nodetool",
    "require_services",
    "running_distributed",
    "table_digests",
]

KAFKA = os.environ.get("MNEMO_KAFKA_BOOTSTRAP", "127.0.0.1:9092")
CASSANDRA_HOSTS = os.environ.get("MNEMO_CASSANDRA_HOSTS", "127.0.0.1")
CASSANDRA_PORT = int(os.environ.get("MNEMO_CASSANDRA_PORT", "9042"))


def _reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def require_services() -> None:
    """Skip on a developer machine without Kafka or Cassandra; under CI, fail."""
    host, _, port = KAFKA.split(",")[0].partition(":")
    if not _reachable(host, int(port)):
        missing("Kafka", f"nothing answers at {KAFKA}")
    if not _reachable(CASSANDRA_HOSTS.split(",")[0], CASSANDRA_PORT):
        missing("Cassandra", f"nothing answers at {CASSANDRA_HOSTS}:{CASSANDRA_PORT}")


def distributed_settings(data: Path, partitions: int = 4, **overrides: object) -> MnemoSettings:
    """Settings for a distributed platform on its own topic and keyspace, sealing with
    the shared OpenBao under key names of its own (skipped without it; CI fails)."""
    tag = uuid.uuid4().hex[:10]
    vault_url, vault_token = vault_settings()
    if vault_token is None:
        missing("OpenBao", "no MNEMO_VAULT_TOKEN and no var/run/services.env")
    values: dict[str, object] = {
        "mode": "distributed",
        "data_dir": data,
        "embedder": "hashing",
        "kafka_bootstrap": KAFKA,
        "kafka_topic": f"test.{tag}",
        "kafka_partitions": partitions,
        "cassandra_hosts": CASSANDRA_HOSTS,
        "cassandra_port": CASSANDRA_PORT,
        "cassandra_keyspace": f"mnemo_d_{tag}",
        # the real OpenBao, as in production: the distributed mode refuses to start without
        # a vault, and every platform a test builds on this topic opens what another sealed
        "vault_addr": vault_url,
        "vault_token": vault_token,
        "vault_key_prefix": f"t{tag}",
    }
    values.update(overrides)
    return MnemoSettings(**values)  # type: ignore[arg-type]


def drop_keyspace(platform: Platform) -> None:
    store = platform.store
    for ks in {platform.settings.cassandra_keyspace, *store._keyspaces()}:  # type: ignore[attr-defined]
        store.session.execute(f"DROP KEYSPACE IF EXISTS {ks}", timeout=120)  # type: ignore[attr-defined]


def create_topics(settings: MnemoSettings) -> None:
    from mnemo.adapters.kafka_topic import ensure_topics

    ensure_topics(
        kafka_config(settings),
        settings.kafka_topic,
        settings.kafka_partitions,
        dead_letter_topic(settings),
    )


@contextmanager
def running_distributed(settings: MnemoSettings, role: str = "test") -> Iterator[Platform]:
    """A distributed platform (gateway side) on fresh topics and a fresh keyspace."""
    require_services()
    create_topics(settings)
    platform = build_distributed(settings, role)
    try:
        yield platform
    finally:
        drop_keyspace(platform)
        platform.close()


class Pump:
    """Drives the registrar (sequencer) and the three followers over the topic, outside
    any consumer group: fetch each partition from the stored position, process, repeat."""

    def __init__(self, platform: Platform, consumers: tuple[str, ...] | None = None) -> None:
        assert platform.distributed is not None
        self.platform = platform
        d = platform.distributed
        self.processors = {
            "registrar": Sequencer(
                platform.runner, platform.store, d.topic, d.archive,
                platform.runner.clock, d.next_position,
            ),
            **{
                name: Follower(platform.runner, platform.store, d.archive, name)
                for name in ("indexer", "decay", "audit")
            },
        }  # fmt: skip
        if consumers is not None:
            self.processors = {k: v for k, v in self.processors.items() if k in consumers}

    def step(self, limit: int = 256) -> int:
        topic = self.platform.distributed.topic  # type: ignore[union-attr]
        done = 0
        for name, processor in self.processors.items():
            for partition in topic.partitions():
                start = self.platform.store.position(position_name(name, partition))
                records = topic.fetch(partition, start, limit)
                if records:
                    with suppress(NotReady):
                        done += processor.process(records)
        return done

    def drain(self, timeout: float = 60.0) -> None:
        """Until every consumer has read every partition to its end."""
        deadline = time.monotonic() + timeout
        topic = self.platform.distributed.topic  # type: ignore[union-attr]
        while time.monotonic() < deadline:
            self.step()
            ends = topic.end_offsets()
            behind = [
                (name, p)
                for name in self.processors
                for p, end in ends.items()
                if self.platform.store.position(position_name(name, p)) < end
            ]
            if not behind:
                return
        raise AssertionError(f"the consumers did not catch up within {timeout} s")


SERVICES_ENV = Path(__file__).resolve().parent.parent / "var" / "run" / "services.env"


def cassandra_jmx_port() -> int:
    """The node's local JMX port: MNEMO_CASSANDRA_JMX_PORT, else services.env, else the
    default infra/services.py starts Cassandra with (7199)."""
    raw = os.environ.get("MNEMO_CASSANDRA_JMX_PORT")
    if raw is None and SERVICES_ENV.exists():
        for line in SERVICES_ENV.read_text(encoding="utf-8").splitlines():
            name, _, value = line.partition("=")
            if name.strip() == "MNEMO_CASSANDRA_JMX_PORT":
                raw = value.strip()
    return int(raw) if raw else 7199


def jmx_missing() -> str | None:
    """Why nodetool cannot reach the local node (None when it can). Under CI that is a
    failure: infra/services.py starts Cassandra with a JMX port."""
    port = cassandra_jmx_port()
    if port and _reachable("127.0.0.1", port):
        return None
    reason = (
        f"Cassandra's JMX port 127.0.0.1:{port} is not listening (the node was started "
        "without it), so nodetool cannot flush or compact"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(f"required under CI: {reason}")
    return reason


def nodetool(*args: str) -> None:
    """Run Cassandra's nodetool on the local node (infra/services.py nodetool); check
    jmx_missing() first."""
    import subprocess
    import sys

    services = Path(__file__).resolve().parent.parent / "infra" / "services.py"
    env = {**os.environ, "MNEMO_CASSANDRA_JMX_PORT": str(cassandra_jmx_port())}
    done = subprocess.run(
        [sys.executable, str(services), "nodetool", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, f"nodetool {' '.join(args)} failed: {done.stderr[-2000:]}"


def table_digests(platform: Platform) -> dict[str, str]:
    """A digest per content table: where a rebuild differs, if it does."""
    from mnemo.adapters.cassandra_store.rows import _plain
    from mnemo.adapters.cassandra_store.tables import _CONTENT_TABLES

    store = platform.store
    out: dict[str, str] = {}
    for ks, table in store._tables():  # type: ignore[attr-defined]
        if table not in _CONTENT_TABLES:
            continue
        rows = sorted(
            repr(tuple(_plain(v) for v in r))
            for r in store._iterate(ks, f"{table}:scan", [], 5_000)  # type: ignore[attr-defined]
        )
        digest = hashlib.sha256("\n".join(rows).encode()).hexdigest()
        out[table] = f"{len(rows)}:{digest}"
    return out
