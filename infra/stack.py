#!/usr/bin/env python3
"""Start and stop Mnemo's own services, distributed mode, on 127.0.0.1 (`make up`/`make down`).

    python infra/stack.py up      # Kafka and Cassandra must run (infra/services.py up)
    python infra/stack.py down
    python infra/stack.py status

`up` applies the CQL migrations and creates the topics once (`mnemo admin migrate`,
`mnemo admin create-topics`), then starts each component as its own process:

    gateway    HTTP on MNEMO_GATEWAY_PORT (8080); with no MNEMO_QDRANT_URL it also runs the
               indexer (the co-located topology: qdrant-edge admits one process), whose
               health port is 8092
    registrar  faust worker, health on 8091
    decay      faust worker, health on 8093
    audit      faust worker, health on 8094

and waits until each answers /readyz. Logs and PID files go to var/run/mnemo/. Addresses of
Kafka and Cassandra come from var/run/services.env (written by infra/services.py) or from
the environment. Standard library only; tests import `Stack` to run their own copy on
other ports, topics and keyspaces.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TAG = "MNEMO_STACK_COMPONENT"


_handed_out: set[int] = set()


def free_port() -> int:
    """A free port on 127.0.0.1 to listen on, taken below the kernel's ephemeral range.

    A port the kernel hands out (bind to port 0) lies in the range it also gives outgoing
    connections their local ports from: once a process listening on it is killed, any new
    connection may take it, and the process restarted on it cannot listen again.

    Nothing listens on the port until its server starts, so a second call could find the
    same one still free: a port is handed out once per process, never twice."""
    low = 32768
    with contextlib.suppress(OSError, ValueError):
        low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    floor = 10_000 if low > 12_000 else 1_024
    for _ in range(500):
        port = random.randrange(floor, low)  # noqa: S311 - a port number, not a secret
        if port in _handed_out:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed_out.add(port)
        return port
    raise RuntimeError(f"no free port between {floor} and {low}")


def _tagged(pid: int, name: str, attempts: int = 20) -> bool:
    """Whether process `pid` is component `name` of some Stack.

    Its environment is empty for a moment while it is being started (the kernel has not
    yet placed the new environment when the parent's `Popen` returns) and for good once it
    is a zombie; the first is waited out, the second is not running."""
    for _ in range(attempts):
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
            state = Path(f"/proc/{pid}/stat").read_bytes().rpartition(b")")[2].split()[0]
        except (OSError, IndexError):
            return False
        if environ:
            return f"{TAG}={name}".encode() in environ.split(b"\0")
        if state in (b"Z", b"X"):
            return False
        time.sleep(0.01)
    return False


@dataclass
class Component:
    name: str
    module: str
    health_port: int
    http_port: int | None = None

    def ready_url(self) -> str:
        port = self.http_port if self.http_port is not None else self.health_port
        return f"http://127.0.0.1:{port}/readyz"


@dataclass
class Stack:
    """One distributed deployment on this machine."""

    run_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    gateway_port: int = 8080
    ports: dict[str, int] = field(
        default_factory=lambda: {"registrar": 8091, "indexer": 8092, "decay": 8093, "audit": 8094}
    )
    python: str = sys.executable
    # the processes' working directory: faust keeps a `<app>-data` folder there
    workdir: Path = REPO
    _procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)

    def components(self) -> list[Component]:
        return [
            Component("registrar", "mnemo_registrar", self.ports["registrar"]),
            Component("decay", "mnemo_decay", self.ports["decay"]),
            Component("audit", "mnemo_audit", self.ports["audit"]),
            Component("gateway", "mnemo_gateway", self.ports["indexer"], self.gateway_port),
        ]

    def component(self, name: str) -> Component:
        return next(c for c in self.components() if c.name == name)

    def child_env(self, component: Component) -> dict[str, str]:
        env = dict(os.environ)
        env.update(self.env)
        env.setdefault("MNEMO_MODE", "distributed")
        env["MNEMO_HEALTH_PORT"] = str(component.health_port)
        env["MNEMO_GATEWAY_PORT"] = str(self.gateway_port)
        env["MNEMO_GATEWAY_COMPONENTS"] = ",".join(
            f"{n}=http://127.0.0.1:{p}" for n, p in sorted(self.ports.items())
        )
        env[TAG] = component.name
        return env

    def pid_file(self, name: str) -> Path:
        return self.run_dir / f"{name}.pid"

    def log_file(self, name: str) -> Path:
        return self.run_dir / f"{name}.log"

    def pid(self, name: str) -> int | None:
        """The component's PID while it runs, else None.

        A process this Stack started is its own child: it runs until `poll()` reaps it. A
        process another invocation started (`make up`, then `make down`) is recognised by
        the tag in its environment, so a PID reused by something else is never signalled.
        """
        try:
            pid = int(self.pid_file(name).read_text())
        except (OSError, ValueError):
            return None
        proc = self._procs.get(name)
        if proc is not None and proc.pid == pid:
            return pid if proc.poll() is None else None
        return pid if _tagged(pid, name) else None

    def admin(self, *args: str) -> None:
        """Run a `mnemo admin` command with the stack's settings, once."""
        env = self.child_env(Component("admin", "", 0))
        subprocess.run(  # noqa: S603 - our own interpreter and module
            [self.python, "-m", "mnemo.cli", "admin", *args], env=env, check=True, cwd=REPO
        )

    def start(self, name: str) -> int:
        component = self.component(name)
        running = self.pid(name)
        if running is not None:
            return running
        self.run_dir.mkdir(parents=True, exist_ok=True)
        with self.log_file(name).open("ab") as out:
            proc = subprocess.Popen(  # noqa: S603 - our own interpreter and module
                [self.python, "-m", component.module],
                env=self.child_env(component),
                stdout=out,
                stderr=subprocess.STDOUT,
                cwd=self.workdir,
                start_new_session=True,
            )
        self.pid_file(name).write_text(str(proc.pid))
        self._procs[name] = proc
        return proc.pid

    def wait_ready(self, names: list[str], timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        pending = list(names)
        while pending:
            for name in list(pending):
                if self.pid(name) is None:
                    proc = self._procs.get(name)
                    code = proc.poll() if proc is not None else None
                    raise RuntimeError(f"{name} exited (status {code}); see {self.log_file(name)}")
                try:
                    url = self.component(name).ready_url()  # always http://127.0.0.1
                    with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310
                        if r.status == 200:
                            pending.remove(name)
                except (urllib.error.URLError, OSError):
                    pass
            if pending and time.monotonic() > deadline:
                raise RuntimeError(f"not ready after {timeout:.0f} s: {', '.join(pending)}")
            if pending:
                time.sleep(0.25)

    def up(self, timeout: float = 180.0) -> None:
        self.admin("migrate")
        self.admin("create-topics")
        names = [c.name for c in self.components()]
        for name in names:
            self.start(name)
        self.wait_ready(names, timeout)

    def signal(self, name: str, sig: signal.Signals) -> None:
        pid = self.pid(name)
        if pid is not None:
            os.kill(pid, sig)

    def stop(self, name: str, timeout: float = 30.0) -> None:
        pid = self.pid(name)
        if pid is None:
            self.pid_file(name).unlink(missing_ok=True)
            return
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while self.pid(name) is not None and time.monotonic() < deadline:
            time.sleep(0.1)
        if self.pid(name) is not None:
            os.kill(pid, signal.SIGKILL)
            while self.pid(name) is not None:
                time.sleep(0.05)
        self.pid_file(name).unlink(missing_ok=True)

    def kill(self, name: str) -> None:
        """SIGKILL, no goodbye: what a crash looks like."""
        pid = self.pid(name)
        if pid is None:
            return
        os.kill(pid, signal.SIGKILL)
        while self.pid(name) is not None:
            time.sleep(0.05)

    def down(self) -> None:
        for component in reversed(self.components()):
            self.stop(component.name)

    def status(self) -> dict[str, str]:
        out = {}
        for c in self.components():
            if self.pid(c.name) is None:
                out[c.name] = "stopped"
                continue
            try:
                with urllib.request.urlopen(c.ready_url(), timeout=2) as r:  # noqa: S310
                    out[c.name] = "ready" if r.status == 200 else "not ready"
            except urllib.error.HTTPError:
                out[c.name] = "not ready"
            except (urllib.error.URLError, OSError):
                out[c.name] = "starting"
        return out


def services_env(path: Path) -> dict[str, str]:
    """KEY=VALUE lines of infra/services.py's address file."""
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text().splitlines():
        key, sep, value = line.partition("=")
        if sep and key.startswith("MNEMO_") and not key.startswith("MNEMO_VAULT_TOKEN"):
            out[key.strip()] = value.strip()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("up", "down", "status"))
    args = parser.parse_args(argv)
    env = services_env(REPO / "var" / "run" / "services.env")
    env.setdefault("MNEMO_DATA_DIR", str(REPO / "var" / "data-distributed"))
    stack = Stack(
        REPO / "var" / "run" / "mnemo",
        env,
        gateway_port=int(os.environ.get("MNEMO_GATEWAY_PORT", "8080")),
        python=os.environ.get("MNEMO_PYTHON", sys.executable),
    )
    if args.command == "up":
        try:
            stack.up()
        except (RuntimeError, subprocess.CalledProcessError) as exc:
            print(f"[stack] {exc}", file=sys.stderr)
            return 1
        print(f"[stack] Mnemo (distributed) on http://127.0.0.1:{stack.gateway_port}")
        print(json.dumps(stack.status()))
        print(f"[stack] logs in {stack.run_dir}; `make down` stops it")
    elif args.command == "down":
        stack.down()
        print("[stack] stopped")
    else:
        print(json.dumps(stack.status(), indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
