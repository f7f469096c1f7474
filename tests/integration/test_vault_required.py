"""The distributed mode fails closed without a vault (issue 16): a worker or a gateway
that would seal with a development key file (its own, or one file shared by several
processes) would leave the other processes opening stand-ins, and every event would read
as the same memory. So it stops at its start with exit status 78 (EX_CONFIG) and a coded
error naming MNEMO_VAULT_ADDR, before it creates a topic or a keyspace or publishes
anything; a development key file offered instead is not used, and no variable turns the
check off. The embedded mode keeps its development key file."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from tests.distributed_support import CASSANDRA_HOSTS, CASSANDRA_PORT, KAFKA, require_services
from tests.support import missing
from tests.vault_support import vault_settings

from mnemo.adapters.local_key_vault import LocalKeyFileVault
from mnemo.bootstrap import build_distributed, build_embedded, connect_store
from mnemo.domain.errors import InvalidInput
from mnemo.settings import MnemoSettings


def topics() -> set[str]:
    from aiokafka.admin import AIOKafkaAdminClient

    async def names() -> set[str]:
        admin = AIOKafkaAdminClient(bootstrap_servers=KAFKA)
        await admin.start()
        try:
            return set(await admin.list_topics())
        finally:
            await admin.close()

    return asyncio.run(names())


def keyspaces() -> set[str]:
    probe = MnemoSettings(
        cassandra_hosts=CASSANDRA_HOSTS,
        cassandra_port=CASSANDRA_PORT,
        cassandra_keyspace="mnemo_probe_vault_required",
    )
    store = connect_store(probe)
    try:
        rows = store.session.execute("SELECT keyspace_name FROM system_schema.keyspaces")
        return {r[0] for r in rows}
    finally:
        store.close()


@pytest.fixture
def names() -> dict[str, str]:
    require_services()
    tag = uuid.uuid4().hex[:10]
    return {"topic": f"novault.{tag}", "keyspace": f"mnemo_novault_{tag}"}


def process_env(tmp_path: Path, names: dict[str, str]) -> dict[str, str]:
    """A distributed process's environment with the services' real addresses and no
    vault, but a development key file offered (it must not be used)."""
    return {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        # the code under test where the checkout is not the installed one
        **{k: v for k, v in os.environ.items() if k == "PYTHONPATH"},
        "MNEMO_MODE": "distributed",
        "MNEMO_DATA_DIR": str(tmp_path / "data"),
        "MNEMO_KEY_FILE": str(tmp_path / "keys" / "shared.json"),
        "MNEMO_EMBEDDER": "hashing",
        "MNEMO_LOG_FORMAT": "json",
        "MNEMO_KAFKA_BOOTSTRAP": KAFKA,
        "MNEMO_KAFKA_TOPIC": names["topic"],
        "MNEMO_KAFKA_PARTITIONS": "2",
        "MNEMO_CASSANDRA_HOSTS": CASSANDRA_HOSTS,
        "MNEMO_CASSANDRA_PORT": str(CASSANDRA_PORT),
        "MNEMO_CASSANDRA_KEYSPACE": names["keyspace"],
        "MNEMO_GATEWAY_PORT": "1",  # never reached: nothing may listen
    }


def error_lines(stderr: str) -> list[dict[str, Any]]:
    out = []
    for line in stderr.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("level") == "ERROR":
            out.append(record)
    return out


@pytest.mark.parametrize(
    "command",
    [["-m", "mnemo_registrar"], ["-m", "mnemo_gateway"], ["-m", "mnemo", "serve"]],
    ids=["worker", "gateway", "mnemo-serve"],
)
def test_a_distributed_process_without_a_vault_stops_at_its_start(
    command: list[str], tmp_path: Path, names: dict[str, str]
) -> None:
    done = subprocess.run(
        [sys.executable, *command],
        env=process_env(tmp_path, names),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 78, done.stderr[-2000:]  # EX_CONFIG
    [error] = error_lines(done.stderr)
    assert (error["error_code"], error["setting"]) == ("VAULT_REQUIRED", "MNEMO_VAULT_ADDR")
    assert "VAULT_REQUIRED" in error["message"]
    # nothing was created, published or registered, and no key file was written
    assert not (tmp_path / "keys").exists()
    assert not (tmp_path / "data").exists() or not any((tmp_path / "data").iterdir())
    assert not {names["topic"], f"{names['topic']}.dlq"} & topics()
    assert names["keyspace"] not in keyspaces()


def test_a_distributed_platform_is_not_built_without_a_vault(
    tmp_path: Path, names: dict[str, str]
) -> None:
    settings = MnemoSettings(
        mode="distributed",
        data_dir=tmp_path / "data",
        key_file=tmp_path / "keys" / "shared.json",
        embedder="hashing",
        kafka_bootstrap=KAFKA,
        kafka_topic=names["topic"],
        cassandra_hosts=CASSANDRA_HOSTS,
        cassandra_port=CASSANDRA_PORT,
        cassandra_keyspace=names["keyspace"],
    )
    with pytest.raises(InvalidInput) as refused:
        build_distributed(settings, "test")
    assert (refused.value.code, refused.value.field) == ("VAULT_REQUIRED", "vault_addr")
    assert "MNEMO_VAULT_ADDR" in refused.value.message
    assert names["keyspace"] not in keyspaces()
    assert not (tmp_path / "keys").exists()
    # a vault address without a token is refused the same way, before any connection
    with pytest.raises(InvalidInput) as no_token:
        build_distributed(settings.model_copy(update={"vault_addr": "http://127.0.0.1:9"}), "t")
    assert no_token.value.code == "VAULT_TOKEN_MISSING"
    assert names["keyspace"] not in keyspaces()


def test_the_embedded_mode_keeps_its_development_key_file(tmp_path: Path) -> None:
    settings = MnemoSettings(
        data_dir=tmp_path / "data", embedder="hashing", sqlite_synchronous="NORMAL"
    )
    platform = build_embedded(settings)
    try:
        assert platform.sealer is not None
        vault = platform.sealer.keys.vault.inner  # type: ignore[attr-defined]
        assert isinstance(vault, LocalKeyFileVault)
        vault.search_key("acme")
    finally:
        platform.close()
    assert (tmp_path / "data" / "keys" / "vault.json").is_file()


@pytest.mark.parametrize(
    "command", [["-m", "mnemo_registrar"], ["-m", "mnemo_gateway"]], ids=["worker", "gateway"]
)
def test_a_distributed_process_with_a_token_the_vault_refuses_stops_at_its_start(
    command: list[str], tmp_path: Path, names: dict[str, str]
) -> None:
    """Before, the worker joined its group and answered ready on a refused token."""
    url, root = vault_settings()
    if root is None:
        missing("OpenBao", "no MNEMO_VAULT_TOKEN and no var/run/services.env")
    refused = f"s.not-a-token-{uuid.uuid4().hex}"
    env = {**process_env(tmp_path, names), "MNEMO_VAULT_ADDR": url, "MNEMO_VAULT_TOKEN": refused}
    del env["MNEMO_KEY_FILE"]
    done = subprocess.run(
        [sys.executable, *command], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 78, done.stderr[-2000:]  # EX_CONFIG, at once
    [error] = error_lines(done.stderr)
    assert (error["error_code"], error["setting"]) == ("VAULT_TOKEN_REFUSED", "MNEMO_VAULT_TOKEN")
    assert refused not in done.stderr + done.stdout
    assert not {names["topic"], f"{names['topic']}.dlq"} & topics()
