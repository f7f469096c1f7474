"""Fixtures for the Helm chart tests: the pinned helm binary and a renderer.

Without helm the chart tests skip locally and fail under CI, where they must run.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from tests.helm.chart import (
    CHART,
    NAMESPACE,
    RELEASE,
    VALUES_FILES,
    Helm,
    Manifest,
    Render,
    find_helm,
    set_args,
)


@pytest.fixture(scope="session")
def helm(tmp_path_factory: pytest.TempPathFactory) -> Helm:
    binary = find_helm()
    if binary is None or not binary.is_file():
        reason = "helm is not fetched: run `make helm-tools` (or set MNEMO_HELM)"
        if os.environ.get("CI", "").lower() == "true":
            pytest.fail(f"{reason}; the chart tests must run under CI")
        pytest.skip(reason)
    return Helm(binary, tmp_path_factory.mktemp("helm-home"))


@pytest.fixture(scope="session")
def render(helm: Helm, tmp_path_factory: pytest.TempPathFactory) -> Render:
    """Render the chart with values files (names of VALUES_FILES or paths) and --set pairs."""
    cache: dict[tuple[Any, ...], list[Manifest]] = {}
    extra_dir = tmp_path_factory.mktemp("values")

    def _render(
        *files: str | Path,
        overrides: dict[str, Any] | None = None,
        values: dict[str, Any] | None = None,
    ) -> list[Manifest]:
        key = (files, tuple(sorted((overrides or {}).items())), yaml.safe_dump(values))
        if key not in cache:
            args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
            for item in files:
                args += ["-f", str(VALUES_FILES.get(str(item), item))]
            if values is not None:
                extra = extra_dir / f"extra-{len(cache)}.yaml"
                extra.write_text(yaml.safe_dump(values))
                args += ["-f", str(extra)]
            result = helm.run(*args, *set_args(overrides))
            assert result.returncode == 0, result.stderr
            cache[key] = [doc for doc in yaml.safe_load_all(result.stdout) if doc]
        return cache[key]

    return _render
