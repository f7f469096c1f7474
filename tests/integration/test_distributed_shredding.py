"""Crypto-shredding in the distributed mode: Kafka for the log, Cassandra for the read
models, OpenBao for the keys. Markers published through the gateway's use case are read
back in plaintext, yet no raw Kafka segment of the topic and no Cassandra file (commit
log, SSTables) holds them, before or after the user is forgotten; a control value that
is not sensitive is found in both, so the scan does see the bytes the services wrote."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from tests.distributed_support import Pump, distributed_settings, running_distributed
from tests.shred_support import plant_markers, scan
from tests.vault_support import vault_settings

from mnemo.domain.pii import REDACTED
from mnemo.service.app import RequestContext

CTX = RequestContext("acme", "tester")


def _run_dir() -> Path:
    default = Path(__file__).resolve().parents[2] / "var" / "run"
    return Path(os.environ.get("MNEMO_RUN_DIR", default))


def _missing(reason: str) -> None:
    if os.environ.get("CI") == "true":
        pytest.fail(f"required under CI: {reason}")
    pytest.skip(reason)


def event(event_type: str, stream: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": event_type,
        "schema_version": 2 if event_type == "ObservationRecorded" else 1,
        "stream": stream,
        "payload": payload,
    }


def test_distributed_shredding_leaves_no_plaintext_in_kafka_or_cassandra(
    tmp_path: Path,
) -> None:
    url, token = vault_settings()
    if token is None:
        _missing("OpenBao is not reachable (no MNEMO_VAULT_TOKEN, no var/run/services.env)")
    kafka_data = _run_dir() / "kafka" / "data"
    cassandra_data = _run_dir() / "cassandra" / "data"
    if not (kafka_data.is_dir() and cassandra_data.is_dir()):
        _missing(f"the services' data directories are not under {_run_dir()} (MNEMO_RUN_DIR)")
    settings = distributed_settings(
        tmp_path / "data",
        partitions=1,
        vault_addr=url,
        vault_token=token,
        vault_key_prefix=f"dist{uuid.uuid4().hex[:10]}",
    )
    m = plant_markers()
    control = f"ctrl{uuid.uuid4().hex}"
    with running_distributed(settings) as platform:
        app = platform.app
        app.publish(
            CTX,
            [
                event(
                    "ObservationRecorded", "user:alice", {"text": f"remember my phone is {m.phone}"}
                ),
                event(
                    "MemoryDeclared",
                    "user:alice",
                    {
                        "memory": {
                            "type": "fact",
                            "content": f"ID {m.id_number}, card {m.card}, mail {m.email}, "
                            f"password: {m.password}, note {control}",
                        }
                    },
                ),
            ],
        )
        Pump(platform).drain()
        memories = app.list_memories(CTX, "user:alice")
        assert {(x.key, x.value) for x in memories if x.key} == {("phone", m.phone)}
        assert any(m.id_number in x.content and m.email in x.content for x in memories)

        paths = [*sorted(kafka_data.glob(f"{settings.kafka_topic}*")), cassandra_data]
        assert paths[:-1], "no Kafka segment for the topic"
        assert scan([control], paths[:-1]) != []  # the segments hold what was produced
        assert scan([control], [cassandra_data]) != []  # and Cassandra's files what it stored
        assert scan(m.all(), [*paths, tmp_path / "data"]) == []

        app.publish(CTX, [event("ForgetRequested", "user:alice", {"reason": "asked"})])
        Pump(platform).drain()
        assert app.list_memories(CTX, "user:alice") == []
        for before in memories:
            after = app.get(CTX, before.memory_id)
            assert after.status.value == "forgotten"
            assert (after.content, after.value, after.sealed) == ("", None, None)
        replayed = app.replay(CTX, "user:alice", 1, 100)
        texts = [e.envelope.payload.get("text") for e in replayed if e.envelope.payload.get("text")]
        assert texts == [f"remember my phone is {REDACTED}"]
        assert scan(m.all(), [*paths, tmp_path / "data"]) == []
