"""infra/services.py on a run directory and ports of a test's own, for tests that start,
stop and wipe a backing service (never the shared ones `make test` starts)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

from tests.support import free_port

__all__ = ["Services", "alive", "pair_of_ports"]

REPO = Path(__file__).resolve().parents[1]
SERVICES = REPO / "infra" / "services.py"


class Services:
    """infra/services.py on a run directory and ports of a test's own."""

    def __init__(self, run_dir: Path, **ports: int) -> None:
        self.run_dir = run_dir
        self.env = {
            k: v for k, v in os.environ.items() if not k.startswith(("MNEMO_QDRANT", "MNEMO_VAULT"))
        }
        self.env["MNEMO_RUN_DIR"] = str(run_dir)
        # the second listeners of OpenBao and Qdrant, off the shared services' ports
        self.env["MNEMO_VAULT_TLS_PORT"] = str(free_port())
        self.env["MNEMO_QDRANT_TLS_HTTP_PORT"] = str(free_port())
        self.env["MNEMO_QDRANT_TLS_GRPC_PORT"] = str(free_port())
        self.env.update({k: str(v) for k, v in ports.items()})
        self.started: list[str] = []

    def run(self, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, str(SERVICES), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    def up(self, service: str) -> None:
        self.started.append(service)
        done = self.run("up", service)
        assert done.returncode == 0, f"up {service} failed:\n{done.stdout}\n{done.stderr}"

    def down(self, service: str) -> None:
        done = self.run("down", service)
        assert done.returncode == 0, f"down {service} failed:\n{done.stdout}\n{done.stderr}"

    def addresses(self) -> dict[str, str]:
        path = self.run_dir / "services.env"
        out = {}
        for line in path.read_text(encoding="utf-8").splitlines():
            key, sep, value = line.partition("=")
            if sep and not key.startswith("#"):
                out[key] = value
        return out

    def pid(self, service: str) -> int | None:
        try:
            return int((self.run_dir / service / f"{service}.pid").read_text())
        except (OSError, ValueError):
            return None

    def stop_all(self) -> None:
        for service in dict.fromkeys(self.started):
            self.run("down", service)


def pair_of_ports() -> tuple[int, int]:
    """Two free ports, the second one above the first (OpenBao's cluster port)."""
    for _ in range(50):
        port = free_port()
        try:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port + 1))
        except OSError:
            continue
        return port, port + 1
    raise AssertionError("no two adjacent free ports")


def alive(pid: int) -> bool:
    """Whether a process runs (a zombie does not)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except OSError:
        return False
    return state not in ("Z", "X")
