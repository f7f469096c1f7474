"""The Dockerfile, read as text (no container engine runs the tests): a pinned base, a
non-root user that matches the chart, a health check that works, no secrets, and a build
context that holds what the COPY lines need."""

from __future__ import annotations

import fnmatch
import http.server
import os
import re
import subprocess
import sys
import threading
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from tests.helm.chart import REPO, Render, of_kind, pod_spec

DOCKERFILE = REPO / "Dockerfile"
DOCKERIGNORE = REPO / ".dockerignore"
HEALTHCHECK_SCRIPT = REPO / "infra" / "docker" / "healthcheck.py"
SECRET_WORDS = re.compile(r"PASSWORD|PASSWD|SECRET|TOKEN|API_KEY|PRIVATE_KEY|CREDENTIAL", re.I)


@dataclass(frozen=True)
class Instruction:
    keyword: str
    args: str
    stage: int


def instructions() -> list[Instruction]:
    """Instructions with continuation lines joined and comments dropped."""
    joined: list[str] = []
    pending = ""
    for raw in DOCKERFILE.read_text().splitlines():
        line = raw.strip()
        if not pending and (not line or line.startswith("#")):
            continue
        if line.startswith("#"):
            continue
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        joined.append(pending + line)
        pending = ""
    assert not pending, "the Dockerfile ends inside a continued line"
    result: list[Instruction] = []
    stage = -1
    for text in joined:
        keyword, _, args = text.partition(" ")
        if keyword.upper() == "FROM":
            stage += 1
        result.append(Instruction(keyword.upper(), args.strip(), stage))
    return result


def final_stage() -> list[Instruction]:
    found = instructions()
    last = max(i.stage for i in found)
    return [i for i in found if i.stage == last]


def test_base_images_are_pinned() -> None:
    bases = [i.args.split()[0] for i in instructions() if i.keyword == "FROM"]
    assert bases
    for base in bases:
        if "@" in base:
            assert re.fullmatch(r"[^@\s]+@sha256:[0-9a-f]{64}", base), base
        else:
            name, _, tag = base.partition(":")
            # an exact release (3.11.7), never latest or a moving minor tag (3.11)
            assert re.match(r"^\d+\.\d+\.\d+", tag), f"{base} is not pinned to a release"
            assert name


def test_runs_as_the_unprivileged_user_the_chart_expects(render: Render) -> None:
    users = [i.args for i in final_stage() if i.keyword == "USER"]
    assert users, "the final stage sets no USER: it would run as root"
    uid, _, gid = users[-1].partition(":")
    assert uid not in ("0", "root")
    assert gid not in ("0", "root")
    deployment = next(iter(of_kind(render("minimal"), "Deployment").values()))
    pod = pod_spec(deployment)["securityContext"]
    assert (str(pod["runAsUser"]), str(pod["runAsGroup"])) == (uid, gid)
    for user in users:
        assert user.partition(":")[0] not in ("0", "root"), user


def test_has_a_health_check() -> None:
    checks = [i.args for i in final_stage() if i.keyword == "HEALTHCHECK"]
    assert len(checks) == 1
    assert not checks[0].upper().startswith("NONE")
    assert "mnemo-healthcheck" in checks[0]
    copies = [i.args for i in final_stage() if i.keyword == "COPY"]
    assert any(
        "infra/docker/healthcheck.py" in c and c.endswith("/opt/mnemo/bin/mnemo-healthcheck")
        for c in copies
    )


def test_default_command_and_chart_commands_name_real_modules(render: Render) -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    packages = set(project["tool"]["setuptools"]["packages"])
    scripts = project["project"]["scripts"]
    cmd = [i.args for i in final_stage() if i.keyword == "CMD"]
    assert cmd == ['["python", "-m", "mnemo_gateway"]']
    for manifest in render("minimal"):
        if manifest["kind"] not in ("Deployment", "Job"):
            continue
        command = pod_spec(manifest)["containers"][0]["command"]
        if command[:2] == ["python", "-m"]:
            assert command[2] in packages, command
        else:
            assert command[0] in scripts, command


def test_no_secrets_in_the_image_definition() -> None:
    for instruction in instructions():
        if instruction.keyword in ("ENV", "ARG", "LABEL"):
            assert not SECRET_WORDS.search(instruction.args), instruction
        if instruction.keyword in ("COPY", "ADD"):
            assert not any(part.startswith(".env") for part in instruction.args.split())
            assert "--secret" not in instruction.args
    text = DOCKERFILE.read_text()
    assert not re.search(r"(?i)(hvs\.|sk-|AKIA)[A-Za-z0-9]{8,}", text)
    assert "ADD http" not in text


def _ignored(path: str, patterns: list[str]) -> bool:
    return any(
        fnmatch.fnmatch(path, pattern) or fnmatch.fnmatch(path.split("/")[0], pattern)
        for pattern in patterns
    )


def test_build_context_holds_what_copy_needs() -> None:
    patterns = [
        line.strip()
        for line in DOCKERIGNORE.read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    # local state never reaches the build context
    for private in (".venv", ".git", "var", ".env"):
        assert _ignored(private, patterns), private
    for instruction in instructions():
        if instruction.keyword != "COPY" or instruction.args.startswith("--from"):
            continue
        *sources, _ = instruction.args.split()
        for source in sources:
            assert (REPO / source).exists(), f"COPY {source}: not in the repository"
            assert not _ignored(source.rstrip("/"), patterns), f"COPY {source}: in .dockerignore"


@pytest.fixture
def health_server() -> Iterator[int]:
    """A stand-in component answering /healthz with 200 on a free loopback port."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            self.send_response(200 if self.path == "/healthz" else 404)
            self.end_headers()

        def log_message(self, *_: object) -> None:
            return

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()


def _free_port() -> int:
    server = http.server.HTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    port = int(server.server_address[1])
    server.server_close()
    return port


def _healthcheck(**env: str) -> int:
    result = subprocess.run(
        [sys.executable, str(HEALTHCHECK_SCRIPT)],
        env={**os.environ, **env},
        capture_output=True,
        timeout=30,
        check=False,
    )
    return result.returncode


def test_health_check_script_follows_the_component(health_server: int) -> None:
    closed = str(_free_port())
    assert _healthcheck(MNEMO_HEALTH_PORT=str(health_server), MNEMO_GATEWAY_PORT=closed) == 0
    assert _healthcheck(MNEMO_HEALTH_PORT=closed, MNEMO_GATEWAY_PORT=str(health_server)) == 0
    # a consumer given a port of its own serves there, not on the shared one
    own = {"MNEMO_HEALTH_PORT": closed, "MNEMO_GATEWAY_PORT": closed}
    assert _healthcheck(**own, MNEMO_AUDIT_HEALTH_PORT=str(health_server)) == 0
    assert _healthcheck(**own, MNEMO_AUDIT_HEALTH_PORT=closed) == 1
    assert _healthcheck(MNEMO_HEALTH_PORT=closed, MNEMO_GATEWAY_PORT=closed) == 1
