"""What `make up` does, from a fresh run directory: infra/services.py starts OpenBao and the
Qdrant server (on ports of this test's own), then infra/stack.py starts Mnemo's services
with nothing but that run directory to go on, and prints the operator token and the first
admin key; `mnemo status` then shows every component and backing service, and
`mnemo admin tenant create` works with the printed token.

Kafka and Cassandra are the ones the other tests use (`make test` starts them), on a
topic, consumer groups and a keyspace of this test's own: starting another broker and
node here would cost minutes and gigabytes for nothing `services.py` does not already do
for them. A configuration error stops `up` at once, naming the setting, and leaves nothing
running.
"""

from __future__ import annotations

import json
import os
import re
import stat
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.distributed_support import (
    CASSANDRA_HOSTS,
    CASSANDRA_PORT,
    KAFKA,
    require_services,
)
from tests.support import free_port, missing

REPO = Path(__file__).resolve().parents[2]
CONSUMERS = ("registrar", "indexer", "decay", "audit")
KEY_RE = re.compile(r"^\s+(mnemo_\S+)$", re.MULTILINE)


class MakeUp:
    """A run directory and the environment `make up` would run with, on ports of its own."""

    def __init__(self, root: Path) -> None:
        self.run_dir = root / "run"
        self.tag = uuid.uuid4().hex[:10]
        self.gateway_port = free_port()
        # nothing of the caller's MNEMO_* settings: only what `make up` itself provides
        self.env = {k: v for k, v in os.environ.items() if not k.startswith("MNEMO_")}
        self.env.update(
            {
                "MNEMO_RUN_DIR": str(self.run_dir),
                "MNEMO_GATEWAY_PORT": str(self.gateway_port),
                # ports, topic and keyspace of this test's own (the shared ones may be busy)
                "MNEMO_KAFKA_TOPIC": f"up.{self.tag}",
                "MNEMO_KAFKA_PARTITIONS": "3",
                "MNEMO_KAFKA_GROUP_SUFFIX": f".{self.tag}",
                "MNEMO_CASSANDRA_KEYSPACE": f"mnemo_up_{self.tag}",
                "MNEMO_DATA_DIR": str(root / "data"),
                "MNEMO_EMBEDDER": "hashing",  # the default embedder, five times, is slow here
                "MNEMO_LOG_LEVEL": "WARNING",
                **{f"MNEMO_{c.upper()}_HEALTH_PORT": str(free_port()) for c in CONSUMERS},
            }
        )
        vault_port = free_port()
        while not _free(vault_port + 1):
            vault_port = free_port()
        self.env["MNEMO_VAULT_PORT"] = str(vault_port)
        self.env["MNEMO_QDRANT_HTTP_PORT"] = str(free_port())
        self.env["MNEMO_QDRANT_GRPC_PORT"] = str(free_port())
        self.env["MNEMO_VAULT_TLS_PORT"] = str(free_port())
        self.url = f"http://127.0.0.1:{self.gateway_port}"

    def run(
        self, script: str, *args: str, timeout: float = 420
    ) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(REPO / "infra" / script), *args],
            env=self.env,
            cwd=REPO,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def mnemo(self, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "mnemo", "--url", self.url, *args],
            env={**self.env, **extra},
            capture_output=True,
            text=True,
            timeout=120,
        )

    def reuse_kafka_and_cassandra(self) -> None:
        """The services.env lines `services.py up kafka cassandra` would have written."""
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / "services.env").write_text(
            f"MNEMO_KAFKA_BOOTSTRAP={KAFKA}\n"
            f"MNEMO_CASSANDRA_HOSTS={CASSANDRA_HOSTS}\n"
            f"MNEMO_CASSANDRA_PORT={CASSANDRA_PORT}\n"
        )

    def pids(self) -> dict[str, int]:
        out = {}
        for pid_file in (self.run_dir / "mnemo").glob("*.pid"):
            out[pid_file.stem] = int(pid_file.read_text())
        return out

    def cleanup(self) -> None:
        self.run("stack.py", "down", timeout=180)
        self.run("services.py", "down", "openbao", "qdrant", timeout=180)
        # with a plain session: a platform would check the vault this keyspace recorded,
        # the stack's own OpenBao, stopped above
        from cassandra.cluster import Cluster

        cluster = Cluster(CASSANDRA_HOSTS.split(","), port=CASSANDRA_PORT, connect_timeout=10)
        try:
            keyspace = self.env["MNEMO_CASSANDRA_KEYSPACE"]
            cluster.connect().execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=120)
        finally:
            cluster.shutdown()


def _free(port: int) -> bool:
    import socket

    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")


@pytest.fixture
def make_up(tmp_path: Path) -> Iterator[MakeUp]:
    require_services()
    up = MakeUp(tmp_path)
    up.reuse_kafka_and_cassandra()
    try:
        yield up
    finally:
        up.cleanup()


def _services_up(up: MakeUp) -> None:
    fetched = up.run("services.py", "fetch", "openbao", "qdrant")
    if fetched.returncode != 0:
        missing(
            "Qdrant", f"OpenBao or the Qdrant server binary is missing: {fetched.stderr[-300:]}"
        )
    started = up.run("services.py", "up", "openbao", "qdrant")
    assert started.returncode == 0, started.stdout + started.stderr


def test_stack_up_from_a_fresh_run_directory_starts_everything_and_prints_the_tokens(
    make_up: MakeUp,
) -> None:
    up = make_up
    _services_up(up)
    addresses = (up.run_dir / "services.env").read_text()
    assert "MNEMO_VAULT_TOKEN=" in addresses
    assert "MNEMO_QDRANT_URL=" in addresses

    first = up.run("stack.py", "up")
    assert first.returncode == 0, first.stdout + first.stderr
    assert "server topology" in first.stdout
    token_file = up.run_dir / "mnemo" / "operator.token"
    assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
    operator = token_file.read_text().strip()
    assert len(operator) >= 32
    assert operator in first.stdout  # printed on the first start
    keys = KEY_RE.findall(first.stdout)
    assert len(keys) == 1, first.stdout
    admin_key = keys[0]
    # the indexer is a process of its own, the gateway only serves HTTP
    assert set(up.pids()) == {"gateway", *CONSUMERS}
    # what each process was given: the tokens and the addresses, not the infra's own settings
    for name, pid in up.pids().items():
        given = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        names = {item.split(b"=", 1)[0].decode() for item in given if item}
        assert {"MNEMO_VAULT_ADDR", "MNEMO_VAULT_TOKEN", "MNEMO_QDRANT_URL"} <= names, name
        assert "MNEMO_GATEWAY_ADMIN_TOKEN" in names, name
        assert not names & {"MNEMO_RUN_DIR", "MNEMO_VAULT_PORT", "MNEMO_QDRANT_HTTP_PORT"}, name
    # the vault token they were given is not OpenBao's root token (services.env keeps that),
    # but one with the policy docs/deploy.md gives a deployment's token
    kept = dict(line.split("=", 1) for line in addresses.splitlines() if "=" in line)
    root = kept["MNEMO_VAULT_TOKEN"]
    given_tokens = set()
    for pid in up.pids().values():
        for item in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
            if item.startswith(b"MNEMO_VAULT_TOKEN="):
                given_tokens.add(item.split(b"=", 1)[1].decode())
    assert len(given_tokens) == 1
    holds_root = root in given_tokens  # (compared here: a failure must not print tokens)
    assert not holds_root, "a component was given OpenBao's root token"
    looked_up = httpx.get(
        f"{kept['MNEMO_VAULT_ADDR']}/v1/auth/token/lookup-self",
        headers={"X-Vault-Token": given_tokens.pop()},
        timeout=30,
    )
    assert looked_up.status_code == 200, looked_up.text
    assert sorted(looked_up.json()["data"]["policies"]) == ["default", "mnemo-components"]
    vault_token_file = up.run_dir / "mnemo" / "vault.token"
    assert stat.S_IMODE(vault_token_file.stat().st_mode) == 0o600
    components_token = vault_token_file.read_text().strip()

    # mnemo status: every component and every backing service
    shown = up.mnemo("--json", "status", MNEMO_API_KEY=admin_key, MNEMO_ADMIN_TOKEN=operator)
    assert shown.returncode == 0, shown.stderr
    status: dict[str, Any] = json.loads(shown.stdout)
    assert status["components"] == dict.fromkeys(("gateway", *CONSUMERS), "ready")
    assert status["services"] == dict.fromkeys(("kafka", "cassandra", "vault", "qdrant"), "ready")
    rendered = up.mnemo("status", MNEMO_API_KEY=admin_key, MNEMO_ADMIN_TOKEN=operator)
    assert rendered.returncode == 0, rendered.stderr
    for name in ("registrar", "indexer", "qdrant", "vault", "kafka", "cassandra"):
        assert name in rendered.stdout

    # the printed operator token creates tenants
    made = up.mnemo("admin", "tenant", "create", "globex", MNEMO_ADMIN_TOKEN=operator)
    assert made.returncode == 0, made.stdout + made.stderr
    assert re.search(r"^key mnemo_\S+ *$", made.stdout, re.MULTILINE), made.stdout

    # a sensitive value goes through the vault, the memory through the Qdrant server
    headers = {"Authorization": f"Bearer {admin_key}", "X-Mnemo-Principal": "planner"}
    event = {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": "user:U1",
        "payload": {
            "memory": {"type": "fact", "content": "locker code 4417 by the gym", "sensitive": True}
        },
    }
    answer = httpx.post(
        f"{up.url}/v1/events", params={"wait": "indexed"}, json=event, headers=headers, timeout=60
    )
    assert answer.status_code == 202, answer.text
    assert answer.json()["complete"] is True
    memories = httpx.get(f"{up.url}/v1/subjects/user:U1/memories", headers=headers, timeout=60)
    assert memories.status_code == 200, memories.text
    assert "locker code 4417" in memories.text  # opened with the vault's key

    # again: already running, nothing printed twice
    again = up.run("stack.py", "up")
    assert again.returncode == 0, again.stdout + again.stderr
    assert operator not in again.stdout
    assert KEY_RE.findall(again.stdout) == []
    same = vault_token_file.read_text().strip() == components_token
    assert same, "a second `up` made another vault token while OpenBao takes the kept one"

    pids = up.pids()
    down = up.run("stack.py", "down")
    assert down.returncode == 0, down.stderr
    assert [name for name, pid in pids.items() if _alive(pid)] == []
    # the components' vault token does not outlive the stack: revoked, its file removed
    assert "vault token revoked" in down.stdout, down.stdout
    assert not vault_token_file.exists()
    after = httpx.get(
        f"{kept['MNEMO_VAULT_ADDR']}/v1/auth/token/lookup-self",
        headers={"X-Vault-Token": components_token},
        timeout=30,
    )
    assert after.status_code == 403
    assert components_token not in down.stdout + down.stderr


def test_a_configuration_error_stops_up_at_once_naming_the_setting(make_up: MakeUp) -> None:
    up = make_up
    # a vault address with no token: every component must refuse to start, once
    with (up.run_dir / "services.env").open("a") as env:
        env.write("MNEMO_VAULT_ADDR=http://127.0.0.1:9\n")
    failed = up.run("stack.py", "up")
    assert failed.returncode == 1, failed.stdout + failed.stderr
    assert "VAULT_TOKEN_MISSING" in failed.stderr
    assert "MNEMO_VAULT_TOKEN" in failed.stderr
    # no twenty retries: a configuration error is not retried at all
    logs = "".join(p.read_text() for p in (up.run_dir / "mnemo").glob("*.log"))
    assert "retrying" not in logs
    assert logs.count("VAULT_TOKEN_MISSING") >= 1
    # and nothing it started is left running
    assert [name for name, pid in up.pids().items() if _alive(pid)] == []
