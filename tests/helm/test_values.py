"""helm lint on every values file, and values the chart must refuse (values.schema.json and
the chart's own cross-checks)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.helm.chart import (
    CHART,
    RELEASE,
    VALUES_FILES,
    Helm,
    Render,
    env_of,
    fail_render,
    of_kind,
    pod_spec,
)

from mnemo.settings import check_setting_values

BASE: dict[str, Any] = yaml.safe_load(VALUES_FILES["minimal"].read_text())


def write_values(tmp_path: Path, values: dict[str, Any]) -> Path:
    path = tmp_path / "values.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def with_base(**sections: Any) -> dict[str, Any]:
    """The minimal values with some top-level sections merged in (one level deep)."""
    merged = {key: dict(value) if isinstance(value, dict) else value for key, value in BASE.items()}
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged


@pytest.mark.parametrize("name", sorted(VALUES_FILES))
def test_lint_passes_strict(helm: Helm, name: str) -> None:
    result = helm.run("lint", str(CHART), "--strict", "-f", str(VALUES_FILES[name]))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "0 chart(s) failed" in result.stdout


def test_lint_fails_on_a_bad_values_file(helm: Helm, tmp_path: Path) -> None:
    bad = write_values(tmp_path, with_base(components={"registrar": {"replicas": "three"}}))
    result = helm.run("lint", str(CHART), "-f", str(bad))
    assert result.returncode != 0
    assert "/components/registrar/replicas" in result.stdout + result.stderr


@pytest.mark.parametrize(
    ("values", "where"),
    [
        pytest.param(
            {"components": {"registrar": {"replicas": "three"}}},
            "/components/registrar/replicas",
            id="replicas-not-an-integer",
        ),
        pytest.param(
            {"components": {"gateway": {"replicas": -1}}},
            "/components/gateway/replicas",
            id="negative-replicas",
        ),
        pytest.param(
            {"components": {"scheduler": {"replicas": 1}}},
            "scheduler",
            id="unknown-component",
        ),
        pytest.param(
            {"kafka": {"securityProtocol": "SASL_PLAINTEXT"}},
            "/kafka/securityProtocol",
            id="unsupported-kafka-protocol",
        ),
        pytest.param(
            {"kafka": {"replication": 0}},
            "/kafka/replication",
            id="no-kafka-replicas",
        ),
        pytest.param(
            {"cassandra": {"tenantKeyspaces": ["Acme Corp"]}},
            "/cassandra/tenantKeyspaces/0",
            id="tenant-that-cannot-name-a-keyspace",
        ),
        pytest.param(
            {"cassandra": {"tenantKeyspaces": ["blue-team"]}},
            "/cassandra/tenantKeyspaces/0",
            id="tenant-with-a-hyphen",
        ),
        pytest.param(
            {"vault": {"auditSigningKeyType": "aes256-gcm96"}},
            "/vault/auditSigningKeyType",
            id="audit-signing-key-that-cannot-sign",
        ),
        pytest.param(
            {"cassandra": {"keyspace": "Mnemo"}},
            "/cassandra/keyspace",
            id="keyspace-in-upper-case",
        ),
        pytest.param(
            {"image": {"digest": "latest"}},
            "/image/digest",
            id="digest-that-is-not-one",
        ),
        pytest.param(
            {"extraEnv": [{"name": "MNEMO_BATCH_SIZE", "value": 10}]},
            "/extraEnv/0/value",
            id="env-value-not-a-string",
        ),
        # values the processes would refuse at start (check_setting_values): the schema
        # refuses them first, so a release never installs pods that all exit
        pytest.param({"kafka": {"partitions": 1025}}, "/kafka/partitions", id="partitions"),
        pytest.param({"kafka": {"topic": "t" * 201}}, "/kafka/topic", id="topic-too-long"),
        pytest.param(
            {"vault": {"transitMount": "/transit"}}, "/vault/transitMount", id="mount-slash"
        ),
        pytest.param(
            {"vault": {"transitMount": "t" * 65}}, "/vault/transitMount", id="mount-too-long"
        ),
        pytest.param({"cassandra": {"replication": "{}"}}, "/cassandra/replication", id="no-class"),
    ],
)
def test_schema_refuses_bad_values(
    helm: Helm, tmp_path: Path, values: dict[str, Any], where: str
) -> None:
    error = fail_render(helm, [write_values(tmp_path, with_base(**values))])
    assert "schema" in error
    assert where in error


@pytest.mark.parametrize(
    "values",
    [
        pytest.param({"kafka": {"sasl": {"password": "hunter2"}}}, id="kafka-password"),
        pytest.param({"cassandra": {"auth": {"password": "hunter2"}}}, id="cassandra-password"),
        pytest.param({"qdrant": {"apiKey": {"value": "hunter2"}}}, id="qdrant-api-key"),
        pytest.param({"vault": {"token": {"value": "hvs.hunter2"}}}, id="vault-token"),
        pytest.param({"gateway": {"adminToken": {"token": "hunter2"}}}, id="admin-token"),
        pytest.param({"gateway": {"keyPepper": {"value": "hunter2"}}}, id="key-pepper"),
    ],
)
def test_there_is_no_place_for_a_literal_secret(
    helm: Helm, tmp_path: Path, values: dict[str, Any]
) -> None:
    error = fail_render(helm, [write_values(tmp_path, with_base(**values))])
    assert "additional properties" in error
    assert "hunter2" not in error


@pytest.mark.parametrize(
    ("values", "message"),
    [
        pytest.param({"kafka": {"bootstrap": []}}, "kafka.bootstrap", id="no-brokers"),
        pytest.param({"cassandra": {"hosts": []}}, "cassandra.hosts", id="no-cassandra"),
        pytest.param({"qdrant": {"url": ""}}, "qdrant.url", id="no-qdrant"),
        pytest.param({"vault": {"addr": ""}}, "vault.addr", id="no-vault"),
        pytest.param(
            {"vault": {"agent": {"enabled": True, "role": "mnemo"}}},
            "not both",
            id="vault-token-twice",
        ),
        pytest.param(
            {"vault": {"token": {"existingSecret": ""}, "agent": {"enabled": True}}},
            "vault.agent.role",
            id="vault-agent-without-role",
        ),
        pytest.param(
            {"kafka": {"securityProtocol": "SASL_SSL"}},
            "kafka.sasl.existingSecret",
            id="sasl-without-credentials",
        ),
        pytest.param(
            {"vault": {"token": {"existingSecret": ""}}},
            "vault: set agent.enabled",
            id="no-vault-token-at-all",
        ),
        pytest.param(
            {"gateway": {"keyPepper": {"existingSecret": ""}}},
            "gateway.keyPepper.existingSecret is required",
            id="no-key-pepper",
        ),
        pytest.param(
            {"kafka": {"securityProtocol": "SSL", "sasl": {"existingSecret": "kafka-user"}}},
            "kafka.sasl.existingSecret needs kafka.securityProtocol SASL_SSL",
            id="sasl-credentials-never-used",
        ),
        pytest.param(
            {"kafka": {"tls": {"caSecret": "kafka-ca"}}},
            "kafka.tls.caSecret needs kafka.securityProtocol SSL or SASL_SSL",
            id="kafka-ca-over-plaintext",
        ),
        pytest.param(
            {"kafka": {"partitions": 4}, "components": {"decay": {"replicas": 5}}},
            "components.decay: 5 replicas, more than kafka.partitions (4)",
            id="more-consumer-replicas-than-partitions",
        ),
        pytest.param(
            {
                "kafka": {"partitions": 12},
                "components": {"registrar": {"autoscaling": {"enabled": True, "maxReplicas": 50}}},
            },
            "components.registrar: 50 replicas, more than kafka.partitions (12)",
            id="autoscaler-beyond-the-partitions",
        ),
        pytest.param(
            {"kafka": {"replication": 2, "minInsync": 3}},
            "kafka.minInsync",
            id="more-in-sync-replicas-than-replicas",
        ),
        pytest.param(
            {"components": {"gateway": {"autoscaling": {"keda": {"enabled": True}}}}},
            "gateway has no consumer lag",
            id="keda-on-the-gateway",
        ),
        pytest.param(
            {"defaults": {"autoscaling": {"enabled": True, "minReplicas": 8}}},
            "components.gateway.autoscaling: minReplicas (8) cannot be more than maxReplicas (6)",
            id="cpu-autoscaler-min-over-max",
        ),
        pytest.param(
            {
                "components": {
                    "indexer": {
                        "autoscaling": {
                            "minReplicas": 4,
                            "maxReplicas": 2,
                            "keda": {"enabled": True},
                        }
                    }
                }
            },
            "components.indexer.autoscaling: minReplicas (4) cannot be more than maxReplicas (2)",
            id="keda-min-over-max",
        ),
    ],
)
def test_chart_refuses_incomplete_or_contradictory_values(
    helm: Helm, tmp_path: Path, values: dict[str, Any], message: str
) -> None:
    assert message in fail_render(helm, [write_values(tmp_path, with_base(**values))])


def test_chart_refuses_a_cluster_older_than_it_supports(helm: Helm) -> None:
    minimal = str(VALUES_FILES["minimal"])
    old = helm.run("template", "x", str(CHART), "-f", minimal, "--kube-version", "1.26.0")
    assert old.returncode != 0
    assert "kubeVersion" in old.stderr
    supported = helm.run("template", "x", str(CHART), "-f", minimal, "--kube-version", "1.27.0")
    assert supported.returncode == 0, supported.stderr


@pytest.mark.parametrize(
    "values",
    [
        pytest.param({"kafka": {"partitions": 1024, "topic": "t" * 200}}, id="kafka-edges"),
        pytest.param({"vault": {"transitMount": "mnemo/" + "x" * 58}}, id="mount-edge"),
        pytest.param(
            {"cassandra": {"replication": '{"class": "NetworkTopologyStrategy", "dc1": 3}'}},
            id="replication-double-quotes",
        ),
    ],
)
def test_what_the_schema_takes_at_its_edges_the_processes_take(
    render: Render, values: dict[str, Any]
) -> None:
    """The other side of the refusals above: a value at the edge of what the schema allows
    renders, and each container's settings take it (check_setting_values, as at start)."""
    manifests = render(values=with_base(**values))
    data = of_kind(manifests, "ConfigMap")[RELEASE]["data"]
    checked = 0
    for manifest in manifests:
        if manifest["kind"] not in ("Deployment", "Job"):
            continue
        for container in pod_spec(manifest)["containers"]:
            env = {**data}
            env.update(
                {
                    n: e["value"]
                    for n, e in env_of(container).items()
                    if isinstance(e.get("value"), str)
                }
            )
            check_setting_values({n: v for n, v in env.items() if n.startswith("MNEMO_")})
            checked += 1
    assert checked > 0
