"""The chart's production values, run as processes on this machine.

helm renders helm/mnemo/ci/production-values.yaml; each hook Job and each Deployment's
container is run with its own command and exactly the environment the rendered manifests
give it (the ConfigMap, the container's env, Secrets by reference, the kubelet's field
references and $(VAR) expansion), with only what a cluster provides replaced:

- the Services' URLs in the settings (the consumers' health Services that the gateway's
  status page reads) point at the loopback ports of the processes their selectors pick;
- service addresses point at the services on 127.0.0.1: the broker's SASL_SSL listener
  (SCRAM-SHA-512, as the values say), the Cassandra node that requires TLS, a client
  certificate and a password, the Qdrant server that requires HTTPS and an API key, and
  OpenBao's HTTPS listener;
- each mounted volume is a folder of temporary files: the Secrets' CA and client
  certificate are the development CA's, the ConfigMap's files are the rendered ones, and
  Vault Agent's token file holds a real child token of OpenBao;
- Secrets referenced by name get values made here (the SASL and Cassandra credentials of
  the local services); listen addresses and ports are moved to free loopback ports, since
  the processes share one network here.

The names the test owns (topic, keyspace, consumer-group suffix, Qdrant collection, vault
key prefix), the local node's datacenter in the replication map, fewer partitions and one
Kafka replica (one broker here) are set through the chart's own values (the group suffix,
collection and key prefix through extraEnv); the hashing embedder (extraEnv) spares the
model's start-up. All components must become ready (their readiness probe's path and port),
a publish through the gateway must become searchable, and the gateway's status page must
reach every consumer."""

from __future__ import annotations

import re
import shutil
import ssl
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import hvac
import pytest
import yaml
from tests.helm.chart import (
    CHART,
    NAMESPACE,
    RELEASE,
    VALUES_FILES,
    Helm,
    find_helm,
    service_links,
)
from tests.support import free_port, missing
from tests.tls_support import CASSANDRA_USER, SASL_USER, TlsServices, tls_services
from tests.vault_support import vault_settings

from mnemo.bootstrap import connect_store
from mnemo.domain.errors import Unavailable
from mnemo.settings import MnemoSettings

READY_WITHIN = 300.0  # seconds for every component on a loaded 2-core machine
CLEANUP_WITHIN = 120.0  # seconds to reach the TLS Cassandra again once the pods stopped
OPERATOR = "chart-processes-operator-token"
VAR = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


@dataclass
class Cluster:
    """What a cluster would give the pods, provided on this machine."""

    root: Path
    tls: TlsServices
    vault_url: str  # plain HTTP, for what the test itself asks of OpenBao
    vault_token: str
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:10])

    def secret(self, name: str, key: str) -> str:
        known = {
            ("mnemo-kafka-user", "username"): SASL_USER,
            ("mnemo-kafka-user", "password"): self.tls.sasl_password,
            ("mnemo-cassandra-superuser", "username"): CASSANDRA_USER[0],
            ("mnemo-cassandra-superuser", "password"): CASSANDRA_USER[1],
            ("mnemo-qdrant", "api-key"): self.tls.qdrant_api_key,
            ("mnemo-gateway-admin", "admin-token"): OPERATOR,
            ("mnemo-key-pepper", "key-pepper"): f"pepper-{self.tag}-0123456789abcdef",
        }
        assert (name, key) in known, f"the chart references Secret {name}/{key}: provide it"
        return known[(name, key)]

    def secret_files(self, name: str) -> dict[str, Path]:
        files = {
            "mnemo-kafka-cluster-ca-cert": {"ca.crt": self.tls.ca},
            "mnemo-cassandra-ca": {"ca.crt": self.tls.ca},
            "mnemo-vault-ca": {"ca.crt": self.tls.ca},
            "mnemo-qdrant-ca": {"ca.crt": self.tls.ca},
            "mnemo-cassandra-client": {
                "tls.crt": self.tls.client_cert,
                "tls.key": self.tls.client_key,
            },
        }
        assert name in files, f"the chart mounts Secret {name}: provide it"
        return files[name]

    def address(self, name: str, value: str) -> str:
        """A service address of the rendered settings, moved to this machine."""
        if name == "MNEMO_KAFKA_BOOTSTRAP":
            return self.tls.kafka_sasl_ssl
        if name == "MNEMO_CASSANDRA_HOSTS":
            return "127.0.0.1"
        if name == "MNEMO_CASSANDRA_PORT":
            return str(self.tls.cassandra_port)
        if name == "MNEMO_QDRANT_URL":
            return self.tls.qdrant_url
        if name == "MNEMO_VAULT_ADDR":
            return self.tls.vault_url
        if name == "OTEL_EXPORTER_OTLP_ENDPOINT":
            return f"http://127.0.0.1:{free_port()}"  # no collector: the exporter gives up
        if name in ("MNEMO_GATEWAY_HOST", "MNEMO_HEALTH_HOST"):
            return "127.0.0.1"
        return value


def render(helm: Helm, cluster: Cluster) -> list[dict[str, Any]]:
    local = {
        # one broker here: the production values' three replicas cannot be placed
        "kafka": {
            "topic": f"chart.{cluster.tag}",
            "partitions": 3,
            "replication": 1,
            "minInsync": 1,
        },
        "cassandra": {
            "keyspace": f"mnemo_chart_{cluster.tag}",
            # the one node's datacenter (SimpleSnitch), where the values name the cluster's dc1
            "replication": "{'class':'NetworkTopologyStrategy','datacenter1':1}",
        },
        "extraEnv": [
            {"name": "MNEMO_KAFKA_GROUP_SUFFIX", "value": f".{cluster.tag}"},
            {"name": "MNEMO_QDRANT_COLLECTION", "value": f"chart_{cluster.tag}"},
            # the shared vault's key names too: under the default prefix, a tenant `acme`
            # that anything else had forgotten (shredded) refused this test's publish 410
            {"name": "MNEMO_VAULT_KEY_PREFIX", "value": f"chart{cluster.tag}"},
            # the real model's start-up is not what is tested here
            {"name": "MNEMO_EMBEDDER", "value": "hashing"},
        ],
    }
    values = cluster.root.parent / "local-values.yaml"
    values.write_text(yaml.safe_dump(local), encoding="utf-8")
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    args += ["-f", str(VALUES_FILES["production"]), "-f", str(values)]
    done = helm.run(*args)
    assert done.returncode == 0, done.stderr
    return [doc for doc in yaml.safe_load_all(done.stdout) if doc]


@dataclass
class Process:
    name: str
    argv: list[str]
    env: dict[str, str]
    ready: str | None
    log: Path
    proc: subprocess.Popen[bytes] | None = None


def pod_processes(manifests: list[dict[str, Any]], cluster: Cluster) -> list[Process]:
    """One process per hook Job (in weight order) and per Deployment."""
    configmaps = {
        m["metadata"]["name"]: m.get("data", {}) for m in manifests if m["kind"] == "ConfigMap"
    }
    jobs = sorted(
        (m for m in manifests if m["kind"] == "Job"),
        key=lambda m: int(m["metadata"]["annotations"]["helm.sh/hook-weight"]),
    )
    deployments = [m for m in manifests if m["kind"] == "Deployment"]
    out = []
    for workload in [*jobs, *deployments]:
        name = workload["metadata"]["name"]
        spec = workload["spec"]["template"]["spec"]
        annotations = workload["spec"]["template"]["metadata"].get("annotations", {})
        (container,) = spec["containers"]
        home = cluster.root / name
        folders = mount_volumes(spec, container, home, configmaps, cluster)
        if annotations.get("vault.hashicorp.com/agent-inject-token") == "true":
            folders["/vault/secrets"] = vault_agent_folder(home, cluster)
        # the kubelet's variables for the namespace's Services, under what the pod sets
        links = service_links(manifests) if spec.get("enableServiceLinks", True) else {}
        env = container_env(container, configmaps, cluster, name, folders, links)
        port = None
        probe = container.get("readinessProbe", {}).get("httpGet")
        if probe is not None:
            port = free_port()
            key = "MNEMO_GATEWAY_PORT" if probe["port"] == "http" else "MNEMO_HEALTH_PORT"
            env[key] = str(port)
        command = [*container["command"], *container.get("args", [])]
        if command[0] == "python":
            command[0] = sys.executable
        else:
            found = shutil.which(command[0], path=env["PATH"])
            assert found, f"{command[0]} is not on the image's PATH"
            command[0] = found
        ready = f"http://127.0.0.1:{port}{probe['path']}" if probe else None
        out.append(Process(name, command, env, ready, home / "process.log"))
    resolve_services(manifests, out)
    return out


def resolve_services(manifests: list[dict[str, Any]], processes: list[Process]) -> None:
    """What the cluster's DNS and Services do: a Service's URL (`http://<name>:<port>`) in
    any process's settings becomes the loopback port of the process its selector picks."""
    local_port = {p.name: p.ready.split(":")[2].split("/")[0] for p in processes if p.ready}
    deployments = [m for m in manifests if m["kind"] == "Deployment"]
    routes: dict[str, str] = {}
    for service in (m for m in manifests if m["kind"] == "Service"):
        selector = service["spec"]["selector"].items()
        [picked] = [
            d
            for d in deployments
            if selector <= d["spec"]["template"]["metadata"]["labels"].items()
        ]
        for port in service["spec"]["ports"]:
            url = f"http://{service['metadata']['name']}:{port['port']}"
            routes[url] = f"http://127.0.0.1:{local_port[picked['metadata']['name']]}"
    for process in processes:
        for name, value in process.env.items():
            for url, local in routes.items():
                value = re.sub(re.escape(url) + r"(?![0-9])", local, value)
            process.env[name] = value


def mount_volumes(
    spec: dict[str, Any],
    container: dict[str, Any],
    home: Path,
    configmaps: dict[str, dict[str, str]],
    cluster: Cluster,
) -> dict[str, Path]:
    """Each volume mount as a local folder with what its volume holds."""
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    folders: dict[str, Path] = {}
    for mount in container.get("volumeMounts", []):
        local = home / "mounts" / mount["mountPath"].strip("/")
        local.mkdir(parents=True, exist_ok=True)
        volume = volumes[mount["name"]]
        if "secret" in volume:
            files = cluster.secret_files(volume["secret"]["secretName"])
            for item in volume["secret"]["items"]:
                shutil.copyfile(files[item["key"]], local / item["path"])
                (local / item["path"]).chmod(0o600)
        elif "configMap" in volume:
            for key, text in configmaps[volume["configMap"]["name"]].items():
                (local / key).write_text(text, encoding="utf-8")
        else:
            assert "emptyDir" in volume, volume
        folders[mount["mountPath"]] = local
    return folders


def vault_agent_folder(home: Path, cluster: Cluster) -> Path:
    """What the Vault Agent Injector gives the pod: /vault/secrets/token, a real token."""
    root = hvac.Client(url=cluster.vault_url, token=cluster.vault_token, timeout=5)
    token = root.auth.token.create(ttl="30m")["auth"]["client_token"]
    folder = home / "mounts" / "vault" / "secrets"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "token").write_text(str(token), encoding="utf-8")
    return folder


def container_env(
    container: dict[str, Any],
    configmaps: dict[str, dict[str, str]],
    cluster: Cluster,
    pod: str,
    folders: dict[str, Path],
    links: dict[str, str],
) -> dict[str, str]:
    """The container's environment as the kubelet builds it, then moved to this machine:
    the Services' link variables first, then what the container names (which wins)."""
    venv_bin = str(Path(sys.executable).parent)
    machine = {"PATH": f"{venv_bin}:/usr/bin:/bin", "HOME": str(folders_home(folders))}
    env: dict[str, str] = {**links, **machine}
    for source in container.get("envFrom", []):
        env.update(configmaps[source["configMapRef"]["name"]])
    for entry in container.get("env", []):
        if "value" in entry:
            value = VAR.sub(lambda m: env.get(m.group(1), m.group(0)), str(entry["value"]))
        elif "secretKeyRef" in entry["valueFrom"]:
            ref = entry["valueFrom"]["secretKeyRef"]
            value = cluster.secret(ref["name"], ref["key"])
        else:
            path = entry["valueFrom"]["fieldRef"]["fieldPath"]
            value = {"metadata.name": f"{pod}-0", "metadata.namespace": NAMESPACE}[path]
        env[entry["name"]] = value
    moved = {}
    for name, value in env.items():
        if name in ("PATH", "HOME") and value == machine[name]:
            # this machine's own paths are not the container's: never remapped (a checkout
            # under /tmp would otherwise land inside the pod's /tmp volume)
            moved[name] = value
            continue
        value = cluster.address(name, value)
        for mount, local in sorted(folders.items(), key=lambda kv: -len(kv[0])):
            if value == mount or value.startswith(mount + "/"):
                value = str(local) + value[len(mount) :]
                break
        moved[name] = value
    return moved


def folders_home(folders: dict[str, Path]) -> Path:
    return folders.get("/tmp") or next(iter(folders.values()))


def wait_ready(processes: list[Process]) -> None:
    deadline = time.monotonic() + READY_WITHIN
    pending = [p for p in processes if p.ready]
    while pending and time.monotonic() < deadline:
        for process in list(pending):
            assert process.proc is not None
            if process.proc.poll() is not None:
                raise AssertionError(f"{process.name} exited ({process.proc.returncode})")
            try:
                if httpx.get(process.ready or "", timeout=2).status_code == 200:
                    pending.remove(process)
            except httpx.HTTPError:
                pass
        time.sleep(0.5)
    assert not pending, f"not ready within {READY_WITHIN} s: {[p.name for p in pending]}"


def show_logs(processes: list[Process]) -> None:
    for process in processes:
        if process.log.exists():
            print(f"--- {process.name}\n{process.log.read_text(errors='replace')[-4000:]}")


@pytest.fixture
def running(tmp_path: Path) -> Iterator[tuple[Cluster, list[Process]]]:
    binary = find_helm()
    if binary is None or not binary.is_file():
        missing("helm", "not fetched: run `make helm-tools` (or set MNEMO_HELM)")
    tls = tls_services(kafka=True, cassandra=True, qdrant=True, vault=True)
    vault_url, vault_token = vault_settings()
    if vault_token is None:
        missing("OpenBao", "no MNEMO_VAULT_TOKEN and no services.env")
    cluster = Cluster(tmp_path / "pods", tls, vault_url, vault_token)
    manifests = render(Helm(binary, tmp_path / "helm"), cluster)
    processes = pod_processes(manifests, cluster)
    try:
        for process in processes:
            process.log.parent.mkdir(parents=True, exist_ok=True)
            with process.log.open("wb") as log:
                process.proc = subprocess.Popen(
                    process.argv,
                    env=process.env,
                    cwd=process.log.parent,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                )
            if process.ready is None:  # a hook Job: it must finish, and succeed
                assert process.proc.wait(timeout=READY_WITHIN) == 0, process.name
        wait_ready(processes)
        yield cluster, processes
    except BaseException:
        show_logs(processes)
        raise
    finally:
        for process in processes:
            if process.proc is not None and process.proc.poll() is None:
                process.proc.terminate()
        for process in processes:
            if process.proc is not None:
                try:
                    process.proc.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.proc.kill()
                    process.proc.wait()
        keyspace = f"mnemo_chart_{cluster.tag}"
        settings = MnemoSettings(
            data_dir=tmp_path / "inspect",
            cassandra_port=tls.cassandra_port,
            cassandra_keyspace=keyspace,
            cassandra_username=CASSANDRA_USER[0],
            cassandra_password=CASSANDRA_USER[1],
            cassandra_ssl_cafile=tls.ca,
            cassandra_ssl_certfile=tls.client_cert,
            cassandra_ssl_keyfile=tls.client_key,
        )
        # right after the pods stop, a loaded machine can take longer than the driver's
        # five seconds to open a TLS connection: try again within a budget
        deadline = time.monotonic() + CLEANUP_WITHIN
        while True:
            try:
                store = connect_store(settings)
                break
            except Unavailable:
                if time.monotonic() >= deadline:
                    raise
        store.session.execute(f"DROP KEYSPACE IF EXISTS {keyspace}", timeout=120)
        store.close()
        drop_collections(cluster)


def drop_collections(cluster: Cluster) -> None:
    """The test's collections on the HTTPS Qdrant server (chart_<tag>_<tenant>)."""
    tls = cluster.tls
    with httpx.Client(
        base_url=tls.qdrant_url,
        headers={"api-key": tls.qdrant_api_key},
        verify=ssl.create_default_context(cafile=str(tls.ca)),
        timeout=30,
    ) as qdrant:
        listed = qdrant.get("/collections").json()["result"]["collections"]
        for collection in listed:
            if collection["name"].startswith(f"chart_{cluster.tag}"):
                qdrant.delete(f"/collections/{collection['name']}")


def test_the_production_values_start_and_a_publish_becomes_searchable(
    running: tuple[Cluster, list[Process]],
) -> None:
    _, processes = running
    names = {p.name for p in processes}
    assert {
        f"{RELEASE}-{c}" for c in ("gateway", "registrar", "indexer", "decay", "audit")
    } <= names
    assert {f"{RELEASE}-create-topics", f"{RELEASE}-migrate"} <= names
    gateway = next(p for p in processes if p.name == f"{RELEASE}-gateway")
    # what the chart promised is what the processes got
    assert gateway.env["MNEMO_VAULT_TOKEN_FILE"].endswith("/vault/secrets/token")
    assert "MNEMO_VAULT_TOKEN" not in gateway.env
    assert gateway.env["MNEMO_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert gateway.env["MNEMO_CASSANDRA_SSL_CERTFILE"].endswith("cassandra-client/tls.crt")
    assert gateway.env["MNEMO_QDRANT_URL"].startswith("https://")
    assert gateway.env["MNEMO_QDRANT_CA_FILE"].endswith("qdrant/ca.crt")
    assert gateway.env["MNEMO_VAULT_ADDR"].startswith("https://")
    assert gateway.env["VAULT_CACERT"].endswith("vault/ca.crt")
    base = (gateway.ready or "").rsplit("/", 1)[0]
    with httpx.Client(base_url=base, timeout=60) as http:
        made = http.post(
            "/v1/admin/tenants",
            json={"tenant": "acme"},
            headers={"X-Mnemo-Admin-Token": OPERATOR},
        )
        assert made.status_code == 201, made.text
        http.headers["Authorization"] = f"Bearer {made.json()['key']}"
        event = {
            "type": "MemoryDeclared",
            "schema_version": 1,
            "stream": "user:U1",
            "payload": {"memory": {"type": "fact", "content": "the night shift ends at six"}},
        }
        answer = http.post("/v1/events", params={"wait": "indexed"}, json={"events": [event]})
        assert answer.status_code == 202, answer.text
        assert answer.json()["accepted"][0]["outcomes"][0]["outcome"] == "registered"
        deadline = time.monotonic() + 60
        hits: list[dict[str, Any]] = []
        while time.monotonic() < deadline and not hits:
            hits = http.post(
                "/v1/search", json={"query": "night shift", "subjects": ["user:U1"]}
            ).json()["hits"]
            if not hits:
                time.sleep(0.5)
        assert hits, "the memory never became searchable"
        assert "six" in hits[0]["memory"]["content"]
        # the production values keep the image's registration rules (`extends: default`)
        said = {
            "type": "ObservationRecorded",
            "schema_version": 2,
            "stream": "user:U1",
            "payload": {"text": "I prefer green tea over coffee"},
        }
        answer = http.post("/v1/events", params={"wait": "registered"}, json={"events": [said]})
        assert answer.status_code == 202, answer.text
        assert answer.json()["accepted"][0]["outcomes"][0]["outcome"] == "registered", answer.text
        # a sealed value goes through OpenBao's HTTPS listener both ways
        secret = {
            **event,
            "payload": {"memory": {"type": "fact", "content": "gate code 7316", "sensitive": True}},
        }
        answer = http.post("/v1/events", params={"wait": "indexed"}, json={"events": [secret]})
        assert answer.status_code == 202, answer.text
        memory_id = answer.json()["accepted"][0]["outcomes"][0]["memory_id"]
        read = http.get(f"/v1/memories/{memory_id}")
        assert read.status_code == 200, read.text
        assert read.json()["content"] == "gate code 7316", read.text
        # the status page reaches every consumer through its Service (mnemo status)
        status = http.get("/v1/admin/status", headers={"X-Mnemo-Admin-Token": OPERATOR})
        assert status.status_code == 200, status.text
        assert status.json()["components"] == {
            "gateway": "ready",
            **{c: "ready" for c in ("registrar", "indexer", "decay", "audit")},
        }, status.text
