"""Every rendered manifest against the Kubernetes API schemas, offline and strict (unknown
fields are errors), with kubernetes-validate's bundled schemas."""

from __future__ import annotations

import copy
import re
from typing import Any

import kubernetes_validate
import pytest
import yaml
from tests.helm.chart import CHART, VALUES_FILES, Manifest, Render


def _chart_floor() -> str:
    """The oldest Kubernetes the chart claims (Chart.yaml kubeVersion: ">=X.Y.Z-0")."""
    constraint = str(yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"])
    found = re.fullmatch(r">=(\d+\.\d+\.\d+)(-0)?", constraint)
    assert found, constraint
    return found.group(1)


# the chart's floor, and the Kubernetes the pinned helm's client targets
KUBERNETES_VERSIONS = (_chart_floor(), "1.35.0")
# custom resources: no bundled schema, checked field by field in test_manifests.py
CUSTOM_KINDS = {("keda.sh/v1alpha1", "ScaledObject")}

# every option the chart has, switched on at once, on top of the production values
EVERYTHING: dict[str, Any] = {
    "imagePullSecrets": [{"name": "registry"}],
    "config": {"decayPolicy": "policies: []"},
    "defaults": {
        "nodeSelector": {"kubernetes.io/os": "linux"},
        "tolerations": [{"key": "memory", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "podAntiAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {
                        "weight": 100,
                        "podAffinityTerm": {
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "mnemo"}},
                        },
                    }
                ]
            }
        },
        "priorityClassName": "memory-critical",
        "podLabels": {"team": "memory"},
        "podAnnotations": {"example.com/owner": "memory"},
    },
    "components": {"decay": {"autoscaling": {"enabled": True}}},
    "extraEnv": [
        {
            "name": "PARTNER_API_TOKEN",
            "valueFrom": {"secretKeyRef": {"name": "extra", "key": "value"}},
        }
    ],
    "networkPolicy": {"extraEgress": [{"to": [{"ipBlock": {"cidr": "10.0.0.0/8"}}]}]},
    "gateway": {"service": {"type": "LoadBalancer", "annotations": {"example.com/lb": "internal"}}},
}

CASES = [(name, None) for name in sorted(VALUES_FILES)] + [("production", EVERYTHING)]


def validate(manifest: Manifest, version: str) -> None:
    try:
        kubernetes_validate.validate(manifest, version, strict=True)
    except kubernetes_validate.ValidationError as error:
        where = "/".join(str(part) for part in error.path)
        kind, name = manifest["kind"], manifest["metadata"]["name"]
        pytest.fail(f"{kind}/{name} at {where}: {error.message}")


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
@pytest.mark.parametrize(
    ("values", "extra"), CASES, ids=[*sorted(VALUES_FILES), "production+everything"]
)
def test_rendered_manifests_are_valid_kubernetes(
    render: Render, values: str, extra: dict[str, Any] | None, version: str
) -> None:
    manifests = render(values, values=extra)
    kinds = {(m["apiVersion"], m["kind"]) for m in manifests}
    assert ("apps/v1", "Deployment") in kinds
    checked = 0
    for manifest in manifests:
        if (manifest["apiVersion"], manifest["kind"]) in CUSTOM_KINDS:
            continue
        validate(manifest, version)
        checked += 1
    assert checked >= 15


def test_the_validator_catches_a_misspelt_field(render: Render) -> None:
    """Guard against a validator that accepts anything (e.g. a missing schema)."""
    deployment = next(m for m in render("minimal") if m["kind"] == "Deployment")
    broken = copy.deepcopy(deployment)
    broken["spec"]["template"]["spec"]["containers"][0]["securityContext"]["readOnlyRootFS"] = True
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, KUBERNETES_VERSIONS[-1], strict=True)
    wrong_type = copy.deepcopy(deployment)
    wrong_type["spec"]["replicas"] = "2"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(wrong_type, KUBERNETES_VERSIONS[-1], strict=True)


def test_custom_resources_have_the_fields_keda_requires(render: Render) -> None:
    scaled = [m for m in render("production") if m["kind"] == "ScaledObject"]
    assert scaled
    for manifest in scaled:
        spec = manifest["spec"]
        assert spec["scaleTargetRef"]["name"]
        for trigger in spec["triggers"]:
            # KEDA reads trigger metadata as a map of strings
            assert all(isinstance(value, str) for value in trigger["metadata"].values())
