"""The rendered manifests' key fields, for the values files in helm/mnemo/ci and overrides."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from tests.helm.chart import (
    NAMESPACE,
    RELEASE,
    REPO,
    VALUES_FILES,
    Helm,
    Manifest,
    Render,
    component_of,
    env_of,
    fail_render,
    of_kind,
    pod_spec,
    service_links,
)

from mnemo.bootstrap import load_rules
from mnemo.handlers import registry
from mnemo.ports import PROBE_SECONDS
from mnemo.service.triggers import load_triggers
from mnemo.settings import check_environment, setting_variables

# the gateway and one component per consumer of the table
COMPONENTS = ("gateway", *registry.NAMES)
CONSUMERS = COMPONENTS[1:]
SECRET_NAMED = re.compile(r"(PASSWORD|TOKEN|API_KEY|SECRET)$")


def deployments(manifests: list[Manifest]) -> dict[str, Manifest]:
    """Deployments by component."""
    return {component_of(m): m for m in of_kind(manifests, "Deployment").values()}


def pod_templates(manifests: list[Manifest]) -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{m['kind']}/{m['metadata']['name']}", pod_spec(m))
        for m in manifests
        if m["kind"] in ("Deployment", "Job")
    ]


def config(manifests: list[Manifest]) -> dict[str, str]:
    data: dict[str, str] = of_kind(manifests, "ConfigMap")[RELEASE]["data"]
    return data


def checksum(manifests: list[Manifest], component: str) -> str:
    annotations = deployments(manifests)[component]["spec"]["template"]["metadata"]["annotations"]
    return str(annotations["checksum/config"])


# ----------------------------------------------------------------------------- workloads


def test_one_deployment_per_component_running_its_module(render: Render) -> None:
    found = deployments(render("minimal"))
    assert sorted(found) == sorted(COMPONENTS)
    for name, deployment in found.items():
        assert deployment["metadata"]["name"] == f"{RELEASE}-{name}"
        (container,) = pod_spec(deployment)["containers"]
        assert container["command"] == ["python", "-m", f"mnemo_{name}"]
        assert container["image"] == "mnemo:0.1.0"
        selector = deployment["spec"]["selector"]["matchLabels"]
        assert selector["app.kubernetes.io/component"] == name
        labels = deployment["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items()


def test_production_pulls_the_image_by_digest(render: Render) -> None:
    for name, spec in pod_templates(render("production")):
        image = spec["containers"][0]["image"]
        assert re.fullmatch(r"registry\.example\.com/platform/mnemo@sha256:[0-9a-f]{64}", image), (
            name
        )


@pytest.mark.parametrize("values", sorted(VALUES_FILES))
def test_every_pod_is_locked_down(render: Render, values: str) -> None:
    for name, spec in pod_templates(render(values)):
        # nor handed the namespace's Services as variables (MNEMO_GATEWAY_PORT=tcp://...)
        assert spec["enableServiceLinks"] is False, name
        pod = spec["securityContext"]
        assert pod["runAsNonRoot"] is True, name
        assert pod["runAsUser"] != 0, name
        assert pod["seccompProfile"]["type"] == "RuntimeDefault", name
        for container in spec["containers"]:
            ctx = container["securityContext"]
            assert ctx["runAsNonRoot"] is True, name
            assert ctx["readOnlyRootFilesystem"] is True, name
            assert ctx["allowPrivilegeEscalation"] is False, name
            assert ctx["privileged"] is False, name
            assert ctx["capabilities"] == {"drop": ["ALL"]}, name
            assert "resources" in container, name
            assert container["resources"]["limits"]["memory"], name


@pytest.mark.parametrize("values", sorted(VALUES_FILES))
def test_writable_paths_are_empty_dirs(render: Render, values: str) -> None:
    """With a read-only root, only /var/lib/mnemo (MNEMO_DATA_DIR) and /tmp are writable."""
    manifests = render(values)
    assert config(manifests)["MNEMO_DATA_DIR"] == "/var/lib/mnemo"
    for name, spec in pod_templates(manifests):
        volumes = {volume["name"]: volume for volume in spec["volumes"]}
        mounts = {m["mountPath"]: m for m in spec["containers"][0]["volumeMounts"]}
        for path, volume in (("/var/lib/mnemo", "data"), ("/tmp", "tmp")):
            assert mounts[path]["name"] == volume, name
            assert "emptyDir" in volumes[volume], name
        writable = {path for path, mount in mounts.items() if not mount.get("readOnly")}
        assert writable == {"/var/lib/mnemo", "/tmp"}, name


def test_probes_hit_the_health_endpoints_on_the_right_port(render: Render) -> None:
    for name, deployment in deployments(render("minimal")).items():
        (container,) = pod_spec(deployment)["containers"]
        ports = {port["name"]: port["containerPort"] for port in container["ports"]}
        expected = {"http": 8080} if name == "gateway" else {"health": 8081}
        assert ports == expected, name
        (port_name,) = expected
        probes = {
            kind: container[f"{kind}Probe"]["httpGet"]
            for kind in ("startup", "liveness", "readiness")
        }
        assert probes["liveness"] == {"path": "/healthz", "port": port_name}, name
        assert probes["startup"] == {"path": "/healthz", "port": port_name}, name
        assert probes["readiness"] == {"path": "/readyz", "port": port_name}, name
        # /readyz gives the brokers PROBE_SECONDS, the store its read besides
        timeout = container["readinessProbe"]["timeoutSeconds"]
        assert timeout > PROBE_SECONDS, name


def test_gateway_listens_on_all_interfaces_and_is_served(render: Render) -> None:
    manifests = render("minimal")
    env = env_of(pod_spec(deployments(manifests)["gateway"])["containers"][0])
    assert env["MNEMO_GATEWAY_HOST"]["value"] == "0.0.0.0"
    assert env["MNEMO_GATEWAY_PORT"]["value"] == "8080"
    service = of_kind(manifests, "Service")[f"{RELEASE}-gateway"]
    assert service["spec"]["selector"]["app.kubernetes.io/component"] == "gateway"
    assert service["spec"]["ports"] == [
        {"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"}
    ]
    # besides it, one Service per consumer for the status page's reads of its health port
    assert set(of_kind(manifests, "Service")) == {f"{RELEASE}-{c}" for c in COMPONENTS}


def test_consumers_are_scraped_on_the_health_port(render: Render) -> None:
    for name, deployment in deployments(render("minimal")).items():
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        if name == "gateway":
            assert "prometheus.io/scrape" not in annotations
        else:
            assert annotations["prometheus.io/port"] == "8081"
            assert annotations["prometheus.io/path"] == "/metrics"
    quiet = render("minimal", overrides={"metrics.podAnnotations": False})
    for deployment in deployments(quiet).values():
        assert (
            "prometheus.io/scrape" not in deployment["spec"]["template"]["metadata"]["annotations"]
        )


def test_pods_get_settings_from_the_configmap_and_their_own_service_name(render: Render) -> None:
    manifests = render("minimal")
    data = config(manifests)
    assert data["MNEMO_MODE"] == "distributed"
    assert data["MNEMO_KAFKA_BOOTSTRAP"] == "kafka.kafka.svc:9092"
    assert data["MNEMO_KAFKA_TOPIC"] == "mnemo.events"
    assert data["MNEMO_KAFKA_PARTITIONS"] == "12"
    assert data["MNEMO_CASSANDRA_HOSTS"] == "cassandra.cassandra.svc"
    assert data["MNEMO_QDRANT_URL"] == "http://qdrant.qdrant.svc:6333"
    assert data["MNEMO_VAULT_ADDR"] == "http://vault.vault.svc:8200"
    assert data["MNEMO_AUDIT_SIGNING_KEY"] == "mnemo-audit"
    assert data["MNEMO_AUDIT_SIGNING_KEY_TYPE"] == "ed25519"
    assert data["MNEMO_HEALTH_PORT"] == "8081"
    for name, deployment in deployments(manifests).items():
        (container,) = pod_spec(deployment)["containers"]
        assert container["envFrom"] == [{"configMapRef": {"name": RELEASE}}]
        env = env_of(container)
        assert env["OTEL_SERVICE_NAME"]["value"] == f"mnemo-{name}"
        attributes = env["OTEL_RESOURCE_ATTRIBUTES"]["value"]
        assert f"k8s.deployment.name={RELEASE}-{name}" in attributes
        # the kubelet expands $(POD_NAME) only from variables defined before it
        names = [entry["name"] for entry in container["env"]]
        assert names.index("POD_NAME") < names.index("OTEL_RESOURCE_ATTRIBUTES")


def test_the_audit_signing_key_is_chosen_in_values(render: Render) -> None:
    overrides = {"vault.auditSigningKey": "prod-audit", "vault.auditSigningKeyType": "ecdsa-p256"}
    data = config(render("minimal", overrides=overrides))
    assert data["MNEMO_AUDIT_SIGNING_KEY"] == "prod-audit"
    assert data["MNEMO_AUDIT_SIGNING_KEY_TYPE"] == "ecdsa-p256"
    assert config(render("minimal"))["MNEMO_AUDIT_ANCHOR_MOUNT"] == "mnemo-anchors"
    moved = config(render("minimal", overrides={"vault.auditAnchorMount": "audit/anchors"}))
    assert moved["MNEMO_AUDIT_ANCHOR_MOUNT"] == "audit/anchors"


def test_indexer_keeps_blas_to_one_thread(render: Render) -> None:
    env = env_of(pod_spec(deployments(render("minimal"))["indexer"])["containers"][0])
    assert env["OPENBLAS_NUM_THREADS"]["value"] == "1"


# ----------------------------------------------------------------------------- overrides


def test_replicas_are_overridden_per_component(render: Render) -> None:
    found = deployments(render("minimal", overrides={"components.indexer.replicas": 5}))
    replicas = {name: d["spec"]["replicas"] for name, d in found.items()}
    assert replicas == {**dict.fromkeys(CONSUMERS, 1), "gateway": 2, "indexer": 5}


def test_zero_and_false_overrides_are_kept(render: Render) -> None:
    """An override to 0 or false must win over a non-zero default."""
    manifests = render(
        "minimal",
        overrides={
            "components.decay.replicas": 0,
            "components.audit.pdb.enabled": False,
            "defaults.replicas": 3,
        },
    )
    replicas = {name: d["spec"]["replicas"] for name, d in deployments(manifests).items()}
    assert replicas == {**dict.fromkeys(CONSUMERS, 3), "gateway": 2, "decay": 0}
    pdbs = {component_of(p) for p in of_kind(manifests, "PodDisruptionBudget").values()}
    assert pdbs == set(COMPONENTS) - {"audit"}


def test_resources_merge_key_by_key(render: Render) -> None:
    found = deployments(
        render("minimal", overrides={"components.decay.resources.limits.memory": "3Gi"})
    )
    decay = pod_spec(found["decay"])["containers"][0]["resources"]
    assert decay == {"requests": {"cpu": "250m", "memory": "512Mi"}, "limits": {"memory": "3Gi"}}
    audit = pod_spec(found["audit"])["containers"][0]["resources"]
    assert audit["limits"] == {"memory": "1Gi"}


def test_component_env_is_added_to_that_component_only(render: Render) -> None:
    found = deployments(
        render(
            "minimal",
            values={
                "components": {"audit": {"env": [{"name": "MNEMO_BATCH_SIZE", "value": "64"}]}}
            },
        )
    )
    for name, deployment in found.items():
        env = env_of(pod_spec(deployment)["containers"][0])
        assert ("MNEMO_BATCH_SIZE" in env) is (name == "audit")


def test_a_disabled_component_leaves_nothing_behind(render: Render) -> None:
    manifests = render("production", overrides={"components.registrar.enabled": False})
    assert "registrar" not in deployments(manifests)
    leftovers = [
        f"{m['kind']}/{m['metadata']['name']}"
        for m in manifests
        if m["metadata"].get("labels", {}).get("app.kubernetes.io/component") == "registrar"
    ]
    assert leftovers == []


# ----------------------------------------------------------------------------- config rollout


def test_config_checksum_is_shared_and_follows_the_config(render: Render) -> None:
    base = render("minimal")
    sums = {checksum(base, name) for name in COMPONENTS}
    assert len(sums) == 1
    (original,) = sums
    assert re.fullmatch(r"[0-9a-f]{64}", original)
    changes: list[dict[str, Any]] = [
        {"config.logLevel": "DEBUG"},
        {"kafka.partitions": 24},
        {"cassandra.keyspace": "memories"},
        {"config.registrationRules": "rules: []"},
        {"config.triggers": "tools: []"},
    ]
    for change in changes:
        changed = render("minimal", overrides=change)
        for name in COMPONENTS:
            assert checksum(changed, name) != original, (change, name)
    # scaling is not a config change: pods must not roll for it
    scaled = render("minimal", overrides={"components.indexer.replicas": 4})
    assert checksum(scaled, "indexer") == original


def test_rules_and_policy_are_mounted_from_a_configmap(render: Render, tmp_path: Path) -> None:
    manifests = render("production")
    files = of_kind(manifests, "ConfigMap")[f"{RELEASE}-files"]["data"]
    rules = files["registration-rules.yaml"]
    assert files == {"registration-rules.yaml": rules}
    # the production example keeps the image's rules: a file without `extends: default`
    # replaces them, and every observation would come back NO_RULE_MATCHED
    (tmp_path / "rules.yaml").write_text(rules, encoding="utf-8")
    defaults = {r.id for r in load_rules(None).rules}
    assert defaults
    assert defaults <= {r.id for r in load_rules(tmp_path / "rules.yaml").rules}
    assert config(manifests)["MNEMO_RULES_FILE"] == "/etc/mnemo/config/registration-rules.yaml"
    assert "MNEMO_DECAY_POLICY_FILE" not in config(manifests)
    for deployment in deployments(manifests).values():
        mounts = {m["name"]: m for m in pod_spec(deployment)["containers"][0]["volumeMounts"]}
        assert mounts["config-files"]["mountPath"] == "/etc/mnemo/config"
    assert f"{RELEASE}-files" not in of_kind(render("minimal"), "ConfigMap")


def test_triggers_are_mounted_from_a_configmap_only_when_given(
    render: Render, tmp_path: Path
) -> None:
    text = (REPO / "docs" / "examples" / "sales_triggers.yaml").read_text(encoding="utf-8")
    manifests = render("minimal", values={"config": {"triggers": text}})
    files = of_kind(manifests, "ConfigMap")[f"{RELEASE}-files"]["data"]
    assert files == {"triggers.yaml": text}
    assert config(manifests)["MNEMO_TRIGGERS_FILE"] == "/etc/mnemo/config/triggers.yaml"
    assert "MNEMO_RULES_FILE" not in config(manifests)
    for deployment in deployments(manifests).values():
        spec = pod_spec(deployment)
        mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
        assert mounts["config-files"]["mountPath"] == "/etc/mnemo/config"
        volumes = {v["name"]: v for v in spec["volumes"]}
        assert volumes["config-files"]["configMap"]["name"] == f"{RELEASE}-files"
    # hooks mount no files: they must not be pointed at one
    for job in of_kind(manifests, "Job").values():
        assert "MNEMO_TRIGGERS_FILE" not in env_of(pod_spec(job)["containers"][0])
    # what the pods read is the file Mnemo loads, with its tools and triggers intact
    mounted = tmp_path / "triggers.yaml"
    mounted.write_text(files["triggers.yaml"], encoding="utf-8")
    loaded = load_triggers(mounted)
    assert sorted(loaded.tools) == ["crm.get_deal", "fx.rate"]
    assert [t.id for t in loaded.triggers] == ["stale-proposal"]
    for values in ("minimal", "production"):
        assert "MNEMO_TRIGGERS_FILE" not in config(render(values))


# ----------------------------------------------------------------------------- secrets


@pytest.mark.parametrize("values", sorted(VALUES_FILES))
def test_credentials_only_by_reference_to_existing_secrets(render: Render, values: str) -> None:
    manifests = render(values)
    assert of_kind(manifests, "Secret") == {}
    for key in config(manifests):
        assert not SECRET_NAMED.search(key), key
    for name, spec in pod_templates(manifests):
        for entry in spec["containers"][0]["env"]:
            if SECRET_NAMED.search(entry["name"]):
                assert "value" not in entry, (name, entry["name"])
                assert set(entry["valueFrom"]) == {"secretKeyRef"}, (name, entry["name"])


def test_production_secret_references(render: Render) -> None:
    manifests = render("production")
    expected = {
        "MNEMO_KAFKA_SASL_USERNAME": ("mnemo-kafka-user", "username"),
        "MNEMO_KAFKA_SASL_PASSWORD": ("mnemo-kafka-user", "password"),
        "MNEMO_CASSANDRA_USERNAME": ("mnemo-cassandra-superuser", "username"),
        "MNEMO_CASSANDRA_PASSWORD": ("mnemo-cassandra-superuser", "password"),
    }
    # the Qdrant key reaches only the processes that read or write Qdrant
    qdrant = {f"Deployment/{RELEASE}-gateway", f"Deployment/{RELEASE}-indexer"}
    for name, spec in pod_templates(manifests):
        env = env_of(spec["containers"][0])
        refs = {
            key: (
                entry["valueFrom"]["secretKeyRef"]["name"],
                entry["valueFrom"]["secretKeyRef"]["key"],
            )
            for key, entry in env.items()
            if "valueFrom" in entry and "secretKeyRef" in entry["valueFrom"]
        }
        want = dict(expected)
        if name in qdrant:
            want["MNEMO_QDRANT_API_KEY"] = ("mnemo-qdrant", "api-key")
        if name == f"Deployment/{RELEASE}-gateway":
            want["MNEMO_GATEWAY_ADMIN_TOKEN"] = ("mnemo-gateway-admin", "admin-token")
            want["MNEMO_KEY_PEPPER"] = ("mnemo-key-pepper", "key-pepper")
        assert refs == want, name
        # the Vault token comes from Vault Agent, not from a Secret
        assert "MNEMO_VAULT_TOKEN" not in env, name


def test_kafka_user_name_can_be_plain_when_the_secret_holds_only_the_password(
    render: Render,
) -> None:
    manifests = render("production", overrides={"kafka.sasl.username": "mnemo"})
    for name, spec in pod_templates(manifests):
        env = env_of(spec["containers"][0])
        assert env["MNEMO_KAFKA_SASL_USERNAME"] == {
            "name": "MNEMO_KAFKA_SASL_USERNAME",
            "value": "mnemo",
        }
        password = env["MNEMO_KAFKA_SASL_PASSWORD"]["valueFrom"]["secretKeyRef"]
        assert password == {"name": "mnemo-kafka-user", "key": "password"}, name


def test_vault_agent_writes_the_token_file(render: Render) -> None:
    manifests = render("production")
    assert config(manifests)["MNEMO_VAULT_TOKEN_FILE"] == "/vault/secrets/token"
    for name, spec in pod_templates(manifests):
        assert spec["automountServiceAccountToken"] is True, name
    for deployment in deployments(manifests).values():
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert annotations["vault.hashicorp.com/agent-inject"] == "true"
        assert annotations["vault.hashicorp.com/agent-inject-token"] == "true"
        assert annotations["vault.hashicorp.com/role"] == "mnemo"
        # the token file must be readable by uid 10001, the user the agent then runs as
        assert annotations["vault.hashicorp.com/agent-run-as-same-user"] == "true"
        assert "vault.hashicorp.com/agent-pre-populate-only" not in annotations
        # the agent logs in at the vault Mnemo uses, over TLS with the CA Mnemo trusts
        assert annotations["vault.hashicorp.com/service"] == "https://vault.vault.svc:8200"
        assert annotations["vault.hashicorp.com/tls-secret"] == "mnemo-vault-ca"
        assert annotations["vault.hashicorp.com/ca-cert"] == "/vault/tls/ca.crt"
    # an operator's own annotation for the address wins, and is not written twice
    own = {"vault.hashicorp.com/service": "https://vault.internal:8200"}
    chosen = render("production", values={"vault": {"agent": {"annotations": own}}})
    for deployment in deployments(chosen).values():
        annotations = deployment["spec"]["template"]["metadata"]["annotations"]
        assert annotations["vault.hashicorp.com/service"] == "https://vault.internal:8200"
    for job in of_kind(manifests, "Job").values():
        # a Job with a long-lived agent sidecar would never complete
        annotations = job["spec"]["template"]["metadata"]["annotations"]
        assert annotations["vault.hashicorp.com/agent-pre-populate-only"] == "true"


def test_without_vault_agent_no_token_is_mounted(render: Render) -> None:
    manifests = render("minimal")
    assert "MNEMO_VAULT_TOKEN_FILE" not in config(manifests)
    for name, spec in pod_templates(manifests):
        assert spec["automountServiceAccountToken"] is False, name
        env = env_of(spec["containers"][0])
        assert env["MNEMO_VAULT_TOKEN"]["valueFrom"]["secretKeyRef"] == {
            "name": "mnemo-vault-token",
            "key": "token",
        }
    for account in of_kind(manifests, "ServiceAccount").values():
        assert account["automountServiceAccountToken"] is False


def test_tls_cas_are_mounted_and_named_in_the_settings(render: Render) -> None:
    manifests = render("production")
    data = config(manifests)
    expected = {
        "MNEMO_KAFKA_SSL_CAFILE": ("kafka", "mnemo-kafka-cluster-ca-cert"),
        "MNEMO_CASSANDRA_SSL_CAFILE": ("cassandra", "mnemo-cassandra-ca"),
        "VAULT_CACERT": ("vault", "mnemo-vault-ca"),
    }
    assert data["MNEMO_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert data["MNEMO_KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"
    for name, spec in pod_templates(manifests):
        volumes = {v["name"]: v for v in spec["volumes"]}
        mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
        for key, (dependency, secret) in expected.items():
            assert data[key] == f"/etc/mnemo/tls/{dependency}/ca.crt"
            volume = volumes[f"tls-{dependency}"]["secret"]
            assert volume["secretName"] == secret, name
            mount = mounts[f"tls-{dependency}"]
            assert mount == {
                "name": f"tls-{dependency}",
                "mountPath": f"/etc/mnemo/tls/{dependency}",
                "readOnly": True,
            }, name
    assert not any(k.endswith("CAFILE") for k in config(render("minimal")))


# ----------------------------------------------------------------------------- tenants


def test_tenants_with_their_own_keyspace(render: Render) -> None:
    manifests = render("tenant-keyspace")
    data = config(manifests)
    assert data["MNEMO_CASSANDRA_TENANT_KEYSPACES"] == "acme,globex"
    assert data["MNEMO_CASSANDRA_HOSTS"] == "cassandra-0.cassandra.svc,cassandra-1.cassandra.svc"
    assert data["MNEMO_KAFKA_BOOTSTRAP"] == "kafka-0.kafka.svc:9092,kafka-1.kafka.svc:9092"
    # the migrations hook creates those keyspaces, so it must see the list too
    migrate = of_kind(manifests, "Job")[f"{RELEASE}-migrate"]
    env = env_of(pod_spec(migrate)["containers"][0])
    assert env["MNEMO_CASSANDRA_TENANT_KEYSPACES"]["value"] == "acme,globex"
    assert "MNEMO_CASSANDRA_TENANT_KEYSPACES" not in config(render("minimal"))
    assert checksum(manifests, "registrar") != checksum(render("minimal"), "registrar")


# ----------------------------------------------------------------------------- hooks


def test_topics_then_migrations_run_as_hooks(render: Render) -> None:
    manifests = render("minimal")
    jobs = of_kind(manifests, "Job")
    assert sorted(jobs) == [f"{RELEASE}-create-topics", f"{RELEASE}-migrate"]
    weights = {}
    for name, job in jobs.items():
        annotations = job["metadata"]["annotations"]
        assert annotations["helm.sh/hook"] == "pre-install,pre-upgrade", name
        assert annotations["helm.sh/hook-delete-policy"] == "before-hook-creation,hook-succeeded"
        weights[name] = int(annotations["helm.sh/hook-weight"])
        spec = pod_spec(job)
        assert spec["restartPolicy"] == "Never"
        assert spec["serviceAccountName"] == f"{RELEASE}-hooks"
        assert job["spec"]["backoffLimit"] >= 1
        assert job["spec"]["activeDeadlineSeconds"] > 0
    assert weights[f"{RELEASE}-create-topics"] < weights[f"{RELEASE}-migrate"]
    topics = pod_spec(jobs[f"{RELEASE}-create-topics"])["containers"][0]
    migrate = pod_spec(jobs[f"{RELEASE}-migrate"])["containers"][0]
    assert [*topics["command"], *topics["args"]] == ["mnemo", "admin", "create-topics"]
    assert [*migrate["command"], *migrate["args"]] == ["mnemo", "admin", "migrate"]
    # the hooks run before the ConfigMap exists: their settings are inline and the same
    for container in (topics, migrate):
        assert "envFrom" not in container
        env = env_of(container)
        inline = {k: v["value"] for k, v in env.items() if "value" in v and k.startswith("MNEMO_")}
        assert inline == config(manifests)
    # and so does their service account, created as an earlier hook
    account = of_kind(manifests, "ServiceAccount")[f"{RELEASE}-hooks"]
    hook = account["metadata"]["annotations"]
    assert hook["helm.sh/hook"] == "pre-install,pre-upgrade"
    assert int(hook["helm.sh/hook-weight"]) < min(weights.values())
    assert "hook-succeeded" not in hook["helm.sh/hook-delete-policy"]


def test_the_topics_are_created_with_the_replication_the_values_ask_for(render: Render) -> None:
    """The create-topics hook (and every component, which makes sure the topics exist at its
    start) creates the log with the replicas and min.insync.replicas of the values: a
    production log kept on one broker, acknowledged by one, loses records with that broker."""
    production = render("production")
    data = config(production)
    assert data["MNEMO_KAFKA_REPLICATION"] == "3"
    assert data["MNEMO_KAFKA_MIN_INSYNC"] == "2"
    topics = of_kind(production, "Job")[f"{RELEASE}-create-topics"]
    env = env_of(pod_spec(topics)["containers"][0])
    assert env["MNEMO_KAFKA_REPLICATION"]["value"] == "3"
    assert env["MNEMO_KAFKA_MIN_INSYNC"]["value"] == "2"
    single = config(render("minimal", overrides={"kafka.replication": 1, "kafka.minInsync": 1}))
    assert (single["MNEMO_KAFKA_REPLICATION"], single["MNEMO_KAFKA_MIN_INSYNC"]) == ("1", "1")


def test_hooks_can_be_switched_off(render: Render) -> None:
    manifests = render(
        "minimal", overrides={"hooks.createTopics.enabled": False, "hooks.migrate.enabled": False}
    )
    assert of_kind(manifests, "Job") == {}
    assert f"{RELEASE}-hooks" not in of_kind(manifests, "ServiceAccount")
    only = of_kind(render("minimal", overrides={"hooks.createTopics.enabled": False}), "Job")
    assert list(only) == [f"{RELEASE}-migrate"]


def test_an_existing_service_account_is_used_everywhere(render: Render) -> None:
    manifests = render(
        "minimal", overrides={"serviceAccount.create": False, "serviceAccount.name": "platform"}
    )
    assert of_kind(manifests, "ServiceAccount") == {}
    for name, spec in pod_templates(manifests):
        assert spec["serviceAccountName"] == "platform", name


# ----------------------------------------------------------------------------- scaling


def test_minimal_has_fixed_replicas_and_no_autoscalers(render: Render) -> None:
    manifests = render("minimal")
    assert of_kind(manifests, "HorizontalPodAutoscaler") == {}
    assert of_kind(manifests, "ScaledObject") == {}
    assert all("replicas" in d["spec"] for d in deployments(manifests).values())


def test_production_autoscales_on_cpu_and_on_lag(render: Render) -> None:
    manifests = render("production")
    found = deployments(manifests)
    hpas = {component_of(h): h for h in of_kind(manifests, "HorizontalPodAutoscaler").values()}
    scaled = {component_of(s): s for s in of_kind(manifests, "ScaledObject").values()}
    assert set(hpas) == {"gateway"}
    assert set(scaled) == {"registrar", "indexer"}
    # a Deployment that an autoscaler owns carries no replica count to fight it
    for name, deployment in found.items():
        assert ("replicas" in deployment["spec"]) is (name not in hpas and name not in scaled)
    hpa = hpas["gateway"]["spec"]
    assert hpa["scaleTargetRef"] == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": f"{RELEASE}-gateway",
    }
    assert (hpa["minReplicas"], hpa["maxReplicas"]) == (3, 10)
    assert hpa["metrics"][0]["resource"]["name"] == "cpu"
    assert hpa["metrics"][0]["resource"]["target"]["averageUtilization"] == 70
    registrar = scaled["registrar"]
    assert registrar["apiVersion"] == "keda.sh/v1alpha1"
    assert registrar["spec"]["scaleTargetRef"] == {"name": f"{RELEASE}-registrar"}
    assert (registrar["spec"]["minReplicaCount"], registrar["spec"]["maxReplicaCount"]) == (2, 12)
    (trigger,) = registrar["spec"]["triggers"]
    assert trigger["type"] == "kafka"
    assert trigger["metadata"] == {
        "bootstrapServers": "mnemo-kafka-bootstrap.kafka.svc:9093",
        "consumerGroup": "mnemo-registrar",
        "topic": "mnemo.events",
        "lagThreshold": "500",
        "allowIdleConsumers": "false",
    }
    assert trigger["authenticationRef"] == {"name": "mnemo-kafka-keda"}
    (indexer_trigger,) = scaled["indexer"]["spec"]["triggers"]
    assert indexer_trigger["metadata"]["lagThreshold"] == "1000"


def test_keda_replaces_the_cpu_autoscaler_of_a_consumer(render: Render) -> None:
    manifests = render(
        "minimal",
        overrides={
            "components.decay.autoscaling.enabled": True,
            "components.registrar.autoscaling.enabled": True,
            "components.registrar.autoscaling.keda.enabled": True,
        },
    )
    hpas = {component_of(h) for h in of_kind(manifests, "HorizontalPodAutoscaler").values()}
    scaled = {component_of(s) for s in of_kind(manifests, "ScaledObject").values()}
    assert (hpas, scaled) == ({"decay"}, {"registrar"})


def test_the_audit_consumer_scales_like_the_others(render: Render) -> None:
    """Each stream's audit chain has one writer, the owner of its partition, so replicas
    and lag scaling are allowed for audit too."""
    found = deployments(render("minimal", overrides={"components.audit.replicas": 4}))
    assert found["audit"]["spec"]["replicas"] == 4
    manifests = render(
        "minimal",
        overrides={
            "components.audit.autoscaling.enabled": True,
            "components.audit.autoscaling.keda.enabled": True,
        },
    )
    scaled = {component_of(s) for s in of_kind(manifests, "ScaledObject").values()}
    assert scaled == {"audit"}
    assert "replicas" not in deployments(manifests)["audit"]["spec"]


def test_every_component_has_a_disruption_budget(render: Render) -> None:
    minimal = {
        component_of(p): p for p in of_kind(render("minimal"), "PodDisruptionBudget").values()
    }
    assert sorted(minimal) == sorted(COMPONENTS)
    for name, pdb in minimal.items():
        assert pdb["spec"]["maxUnavailable"] == 1
        assert "minAvailable" not in pdb["spec"]
        assert pdb["spec"]["selector"]["matchLabels"]["app.kubernetes.io/component"] == name
        # an outage of a dependency makes every pod unready; a drain must still go on
        assert pdb["spec"]["unhealthyPodEvictionPolicy"] == "AlwaysAllow"
    production = of_kind(render("production"), "PodDisruptionBudget")
    assert production[f"{RELEASE}-audit"]["spec"] == {
        "maxUnavailable": 1,
        "unhealthyPodEvictionPolicy": "AlwaysAllow",
        "selector": {
            "matchLabels": {
                "app.kubernetes.io/name": "mnemo",
                "app.kubernetes.io/instance": RELEASE,
                "app.kubernetes.io/component": "audit",
            }
        },
    }


# ----------------------------------------------------------------------------- network


def _ports(rule: dict[str, Any]) -> set[tuple[int, str]]:
    return {(p["port"], p["protocol"]) for p in rule["ports"]}


def test_network_policy_defaults(render: Render) -> None:
    manifests = render("minimal")
    policies = of_kind(manifests, "NetworkPolicy")
    base = policies[RELEASE]["spec"]
    assert base["podSelector"]["matchLabels"] == {
        "app.kubernetes.io/name": "mnemo",
        "app.kubernetes.io/instance": RELEASE,
    }
    assert base["policyTypes"] == ["Ingress", "Egress"]
    assert [_ports(rule) for rule in base["ingress"]] == [{(8081, "TCP")}, {(8081, "TCP")}]
    egress = [_ports(rule) for rule in base["egress"]]
    assert egress[0] == {(53, "UDP"), (53, "TCP")}
    allowed = set().union(*egress)
    assert {(9092, "TCP"), (9042, "TCP"), (6333, "TCP"), (8200, "TCP")} <= allowed
    # no collector configured: no egress for it
    assert (4317, "TCP") not in allowed
    gateway = policies[f"{RELEASE}-gateway"]["spec"]
    assert gateway["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "gateway"
    assert gateway["policyTypes"] == ["Ingress", "Egress"]
    assert [_ports(rule) for rule in gateway["ingress"]] == [{(8080, "TCP")}]
    # every pod of the release, hooks included, is under the base policy
    selector = base["podSelector"]["matchLabels"]
    for name, manifest in [(n, m) for n, m in of_kind(manifests, "Deployment").items()] + list(
        of_kind(manifests, "Job").items()
    ):
        labels = manifest["spec"]["template"]["metadata"]["labels"]
        assert selector.items() <= labels.items(), name


def _gateway_components(gateway: Manifest) -> str:
    env = env_of(pod_spec(gateway)["containers"][0])
    return str(env["MNEMO_GATEWAY_COMPONENTS"]["value"])


def test_the_gateway_reaches_each_consumers_health_port_for_its_status_page(
    render: Render,
) -> None:
    # mnemo status reads every consumer's /readyz: the gateway names one Service per
    # consumer, each Service picks that consumer's pods on their health port, and the
    # network policies let the gateway through, also where the scrapes are restricted
    manifests = render("production")
    components = _gateway_components(deployments(manifests)["gateway"])
    named = dict(item.split("=", 1) for item in components.split(","))
    assert set(named) == set(CONSUMERS)
    services = of_kind(manifests, "Service")
    for consumer, url in named.items():
        service = services[f"{RELEASE}-{consumer}"]
        assert url == f"http://{RELEASE}-{consumer}:8081"
        assert service["spec"]["selector"]["app.kubernetes.io/component"] == consumer
        # a failing or fenced replica is not ready, and must still be seen by the status page
        assert service["spec"]["publishNotReadyAddresses"] is True
        [port] = service["spec"]["ports"]
        assert (port["port"], port["targetPort"]) == (8081, "health")
        container = pod_spec(deployments(manifests)[consumer])["containers"][0]
        assert {"name": "health", "containerPort": 8081, "protocol": "TCP"} in container["ports"]
    policies = of_kind(manifests, "NetworkPolicy")
    gateway_pods = {"app.kubernetes.io/component": "gateway"}
    admitted = [
        rule
        for rule in policies[RELEASE]["spec"]["ingress"]
        if any(
            gateway_pods.items() <= peer.get("podSelector", {}).get("matchLabels", {}).items()
            for peer in rule.get("from", [])
        )
    ]
    assert [_ports(rule) for rule in admitted] == [{(8081, "TCP")}]
    [out] = policies[f"{RELEASE}-gateway"]["spec"]["egress"]
    assert _ports(out) == {(8081, "TCP")}
    assert out["to"][0]["podSelector"]["matchLabels"]["app.kubernetes.io/instance"] == RELEASE
    # a consumer switched off is neither named nor served
    fewer = render("production", overrides={"components.decay.enabled": False})
    names = _gateway_components(deployments(fewer)["gateway"])
    assert "decay=" not in names
    assert "registrar=" in names
    assert f"{RELEASE}-decay" not in of_kind(fewer, "Service")


def test_network_policy_restricts_peers_in_production(render: Render) -> None:
    policies = of_kind(render("production"), "NetworkPolicy")
    gateway = policies[f"{RELEASE}-gateway"]["spec"]["ingress"][0]
    assert gateway["from"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "agents"}}}
    ]
    base = policies[RELEASE]["spec"]
    assert base["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"] == {
        "kubernetes.io/metadata.name": "monitoring"
    }
    kafka = next(rule for rule in base["egress"] if _ports(rule) == {(9093, "TCP")})
    assert kafka["to"] == [
        {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kafka"}}}
    ]
    assert any(_ports(rule) == {(4317, "TCP"), (4318, "TCP")} for rule in base["egress"])


def test_network_policies_can_be_left_to_the_cluster(render: Render) -> None:
    manifests = render("minimal", overrides={"networkPolicy.enabled": False})
    assert of_kind(manifests, "NetworkPolicy") == {}


def test_everything_lands_in_the_release_namespace(render: Render) -> None:
    for manifest in render("production"):
        assert manifest["metadata"]["namespace"] == NAMESPACE


# ----------------------------------------------------------------------------- settings


@pytest.mark.parametrize("values", sorted(VALUES_FILES))
def test_every_mnemo_variable_the_chart_sets_is_a_setting_mnemo_reads(
    render: Render, values: str
) -> None:
    """ConfigMap data and each container's own env (Deployments and hook Jobs): no name the
    processes would refuse at start (UNKNOWN_SETTING), none that no setting reads."""
    manifests = render(values)
    names = set(config(manifests))
    for _, spec in pod_templates(manifests):
        for container in spec["containers"]:
            names |= set(env_of(container))
        if spec.get("enableServiceLinks", True):
            # what the kubelet adds for the release's own Services (mnemo-gateway, ...)
            names |= set(service_links(manifests))
    rendered = {n for n in names if n.startswith("MNEMO_")}
    settings = setting_variables()
    assert rendered - set(settings) == set(), values
    check_environment(dict.fromkeys(names, "x"))  # what the processes check at start
    assert {"MNEMO_MODE", "MNEMO_KAFKA_BOOTSTRAP", "MNEMO_VAULT_ADDR"} <= rendered
    if values == "production":
        assert {"MNEMO_VAULT_TOKEN_FILE", "MNEMO_CASSANDRA_SSL_CAFILE"} <= rendered


def test_client_certificates_are_mounted_and_named_in_the_settings(render: Render) -> None:
    manifests = render("production", overrides={"kafka.tls.clientSecret": "mnemo-kafka-tls-user"})
    data = config(manifests)
    assert data["MNEMO_CASSANDRA_SSL_CHECK_HOSTNAME"] == "false"
    for dep, secret in (("cassandra", "mnemo-cassandra-client"), ("kafka", "mnemo-kafka-tls-user")):
        setting = f"MNEMO_{dep.upper()}_SSL_"
        assert data[f"{setting}CERTFILE"] == f"/etc/mnemo/tls/{dep}-client/tls.crt"
        assert data[f"{setting}KEYFILE"] == f"/etc/mnemo/tls/{dep}-client/tls.key"
        for name, spec in pod_templates(manifests):
            volume = {v["name"]: v for v in spec["volumes"]}[f"tls-{dep}-client"]["secret"]
            assert volume["secretName"] == secret, name
            assert volume["defaultMode"] == 0o440  # the key: owner and fsGroup only
            mount = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
            assert mount[f"tls-{dep}-client"]["mountPath"] == f"/etc/mnemo/tls/{dep}-client"
    minimal = config(render("minimal"))
    assert not any("SSL" in key for key in minimal)
    assert (
        config(render("production", overrides={"cassandra.tls.checkHostname": True}))[
            "MNEMO_CASSANDRA_SSL_CHECK_HOSTNAME"
        ]
        == "true"
    )


def test_client_certificates_without_tls_are_refused(helm: Helm) -> None:
    minimal = [VALUES_FILES["minimal"]]
    error = fail_render(helm, minimal, {"kafka.tls.clientSecret": "user"})
    assert "kafka.tls.clientSecret needs kafka.securityProtocol SSL or SASL_SSL" in error
    error = fail_render(helm, minimal, {"cassandra.tls.clientSecret": "client"})
    assert "cassandra.tls.clientSecret needs cassandra.tls.caSecret" in error


def test_the_consumers_health_port_listens_where_the_kubelet_probes(render: Render) -> None:
    """The probes go to the pod's IP: a health server on 127.0.0.1 (the setting's default,
    right for one machine) would leave every consumer pod unready."""
    data = config(render("minimal"))
    assert data["MNEMO_HEALTH_HOST"] == "0.0.0.0"
    assert data["MNEMO_HEALTH_PORT"] == "8081"
    for component, deployment in deployments(render("minimal")).items():
        (container,) = pod_spec(deployment)["containers"]
        probe_port = container["readinessProbe"]["httpGet"]["port"]
        (port,) = [p for p in container["ports"] if p["name"] == probe_port]
        if component != "gateway":
            assert port["containerPort"] == int(data["MNEMO_HEALTH_PORT"]), component
