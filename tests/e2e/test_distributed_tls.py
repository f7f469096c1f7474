"""The distributed mode with every connection encrypted and authenticated, as separate
processes: the gateway and the faust workers (started by infra/stack.py) talk to the
broker's SASL_SSL listener (SCRAM-SHA-512) and to the Cassandra node that requires TLS,
a client certificate and a password; the hooks' commands (`mnemo admin migrate`,
`create-topics`) do too. Everything comes from settings in the environment, as the chart
sets them. A publish is registered, indexed and found."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from tests.support import free_port, missing, stack_module
from tests.tls_support import CASSANDRA_USER, SASL_USER, TlsServices, tls_services
from tests.vault_support import vault_settings

from mnemo.bootstrap import connect_store
from mnemo.settings import MnemoSettings

OPERATOR = "tls-operator-token"
Stack = stack_module().Stack


@pytest.fixture
def deployment(tmp_path: Path) -> Iterator[tuple[object, httpx.Client, TlsServices]]:
    tls = tls_services(kafka=True, cassandra=True)
    tag = uuid.uuid4().hex[:10]
    env = {
        "MNEMO_MODE": "distributed",
        "MNEMO_EMBEDDER": "hashing",
        "MNEMO_DATA_DIR": str(tmp_path / "data"),
        "MNEMO_LOG_LEVEL": "WARNING",
        "MNEMO_GATEWAY_ADMIN_TOKEN": OPERATOR,
        "MNEMO_KEY_PEPPER": f"tls-pepper-{tag}-0123456789",
        "MNEMO_KAFKA_BOOTSTRAP": tls.kafka_sasl_ssl,
        "MNEMO_KAFKA_TOPIC": f"tls-e2e.{tag}",
        "MNEMO_KAFKA_PARTITIONS": "3",
        "MNEMO_KAFKA_GROUP_SUFFIX": f".{tag}",
        "MNEMO_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "MNEMO_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
        "MNEMO_KAFKA_SASL_USERNAME": SASL_USER,
        "MNEMO_KAFKA_SASL_PASSWORD": tls.sasl_password,
        "MNEMO_KAFKA_SSL_CAFILE": str(tls.ca),
        "MNEMO_CASSANDRA_HOSTS": "127.0.0.1",
        "MNEMO_CASSANDRA_PORT": str(tls.cassandra_port),
        "MNEMO_CASSANDRA_KEYSPACE": f"mnemo_tls_{tag}",
        "MNEMO_CASSANDRA_USERNAME": CASSANDRA_USER[0],
        "MNEMO_CASSANDRA_PASSWORD": CASSANDRA_USER[1],
        "MNEMO_CASSANDRA_SSL_CAFILE": str(tls.ca),
        "MNEMO_CASSANDRA_SSL_CERTFILE": str(tls.client_cert),
        "MNEMO_CASSANDRA_SSL_KEYFILE": str(tls.client_key),
    }
    # one vault for every process, as in production (a user's words are always sealed)
    vault_url, vault_token = vault_settings()
    if vault_token is None:
        missing("OpenBao", "no MNEMO_VAULT_TOKEN and no services.env")
    env |= {
        "MNEMO_VAULT_ADDR": vault_url,
        "MNEMO_VAULT_TOKEN": vault_token,
        "MNEMO_VAULT_KEY_PREFIX": f"tls-{tag}",
    }
    stack = Stack(
        tmp_path / "run",
        env,
        gateway_port=free_port(),
        ports={n: free_port() for n in ("registrar", "indexer", "decay", "audit")},
    )
    http = httpx.Client(base_url=f"http://127.0.0.1:{stack.gateway_port}", timeout=60)
    try:
        stack.up(timeout=240)
    except Exception:
        for name in ("gateway", "registrar", "decay", "audit"):
            log = stack.log_file(name)
            if log.exists():
                print(f"--- {name}\n{log.read_text()[-3000:]}")
        stack.down()
        raise
    try:
        yield stack, http, tls
    finally:
        http.close()
        stack.down()
        values = {k.removeprefix("MNEMO_").lower(): v for k, v in env.items()}
        values["data_dir"] = str(tmp_path / "inspect")
        store = connect_store(MnemoSettings(**values))  # type: ignore[arg-type]
        keyspace = env["MNEMO_CASSANDRA_KEYSPACE"]
        store.session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=120)
        store.close()


def test_a_publish_is_registered_and_found_over_tls_everywhere(
    deployment: tuple[object, httpx.Client, TlsServices],
) -> None:
    stack, http, tls = deployment
    made = http.post(
        "/v1/admin/tenants", json={"tenant": "acme"}, headers={"X-Mnemo-Admin-Token": OPERATOR}
    )
    assert made.status_code == 201, made.text
    http.headers["Authorization"] = f"Bearer {made.json()['key']}"
    answer = http.post(
        "/v1/events",
        params={"wait": "indexed"},
        json={
            "events": [
                {
                    "type": "MemoryDeclared",
                    "schema_version": 1,
                    "stream": "user:U1",
                    "payload": {
                        "memory": {"type": "fact", "content": "the courier comes on Tuesdays"}
                    },
                }
            ]
        },
    )
    assert answer.status_code == 202, answer.text
    body = answer.json()
    assert body["complete"] is True
    assert body["accepted"][0]["outcomes"][0]["outcome"] == "registered"
    hits = http.post("/v1/search", json={"query": "courier", "subjects": ["user:U1"]}).json()
    assert "Tuesdays" in hits["hits"][0]["memory"]["content"]
    status = http.get("/v1/admin/status").json()
    assert set(status["components"]) == {"gateway", "registrar", "indexer", "decay", "audit"}
    # no process wrote the SASL password into its log
    for name in ("gateway", "registrar", "decay", "audit"):
        log = stack.log_file(name)  # type: ignore[attr-defined]
        assert tls.sasl_password not in log.read_text(errors="replace")
