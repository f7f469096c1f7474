"""The chart under test, the helm binary and helpers to read rendered manifests.

helm comes from infra/helm.py (`make helm-tools`), or from MNEMO_HELM.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "helm" / "mnemo"
CI_VALUES = CHART / "ci"
VALUES_FILES = {
    "minimal": CI_VALUES / "minimal-values.yaml",
    "production": CI_VALUES / "production-values.yaml",
    "tenant-keyspace": CI_VALUES / "tenant-keyspace-values.yaml",
}
RELEASE = "mnemo"
NAMESPACE = "memory"

Manifest = dict[str, Any]


def _helm_from_tools() -> Path | None:
    spec = importlib.util.spec_from_file_location("mnemo_infra_helm", REPO / "infra" / "helm.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    found: Path | None = module.fetched()
    return found


def find_helm() -> Path | None:
    override = os.environ.get("MNEMO_HELM")
    if override:
        return Path(override)
    return _helm_from_tools()


@dataclass(frozen=True)
class Helm:
    """The helm binary, run with its cache and config kept inside a temporary directory."""

    binary: Path
    home: Path

    def run(self, *args: str) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "HELM_CACHE_HOME": str(self.home / "cache"),
            "HELM_CONFIG_HOME": str(self.home / "config"),
            "HELM_DATA_HOME": str(self.home / "data"),
        }
        return subprocess.run(
            [str(self.binary), *args], capture_output=True, text=True, env=env, check=False
        )


def set_args(overrides: dict[str, Any] | None) -> list[str]:
    """--set pairs; strings go through --set-string so helm keeps them strings."""
    args: list[str] = []
    for key, value in (overrides or {}).items():
        args += ["--set-string" if isinstance(value, str) else "--set", f"{key}={value}"]
    return args


Render = Callable[..., list[Manifest]]


def fail_render(helm: Helm, files: Iterable[Path], overrides: dict[str, Any] | None = None) -> str:
    """Render expecting failure; returns helm's error output."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for item in files:
        args += ["-f", str(item)]
    result = helm.run(*args, *set_args(overrides))
    assert result.returncode != 0, "the chart rendered values it should have refused"
    return result.stderr


def of_kind(manifests: Iterable[Manifest], kind: str) -> dict[str, Manifest]:
    """The manifests of one kind, by name."""
    return {m["metadata"]["name"]: m for m in manifests if m["kind"] == kind}


def component_of(manifest: Manifest) -> str:
    return str(manifest["metadata"]["labels"]["app.kubernetes.io/component"])


def pod_spec(workload: Manifest) -> dict[str, Any]:
    spec: dict[str, Any] = workload["spec"]["template"]["spec"]
    return spec


def env_of(container: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """A container's env entries by name (duplicates would hide one another: asserted)."""
    entries = container.get("env", [])
    names = [entry["name"] for entry in entries]
    assert len(names) == len(set(names)), f"duplicate env names in {container['name']}"
    return {entry["name"]: entry for entry in entries}


def service_links(manifests: Iterable[Manifest]) -> dict[str, str]:
    """The variables the kubelet gives a pod for each Service of its namespace unless the
    pod sets `enableServiceLinks: false` (the Docker-link style: `<NAME>_SERVICE_HOST`,
    `<NAME>_PORT=tcp://ip:port`, ...), with made-up cluster addresses."""
    env: dict[str, str] = {}
    services = [m for m in manifests if m["kind"] == "Service"]
    for n, service in enumerate(services, start=1):
        if service["spec"].get("clusterIP") == "None":
            continue
        name = service["metadata"]["name"].upper().replace("-", "_")
        ip = f"10.96.0.{n}"
        ports = service["spec"]["ports"]
        env[f"{name}_SERVICE_HOST"] = ip
        env[f"{name}_SERVICE_PORT"] = str(ports[0]["port"])
        env[f"{name}_PORT"] = f"tcp://{ip}:{ports[0]['port']}"
        for port in ports:
            number, proto = port["port"], port.get("protocol", "TCP")
            if "name" in port:
                env[f"{name}_SERVICE_PORT_{port['name'].upper().replace('-', '_')}"] = str(number)
            base = f"{name}_PORT_{number}_{proto}"
            env[base] = f"{proto.lower()}://{ip}:{number}"
            env[f"{base}_PROTO"] = proto.lower()
            env[f"{base}_PORT"] = str(number)
            env[f"{base}_ADDR"] = ip
    return env
