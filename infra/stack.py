#!/usr/bin/env python3
"""Start and stop Mnemo's own services, distributed mode, on 127.0.0.1 (`make up`/`make down`).

    python infra/stack.py up      # the backing services must run (infra/services.py up)
    python infra/stack.py down
    python infra/stack.py status
    python infra/stack.py check   # the settings in the environment, before anything starts

`up` applies the CQL migrations and creates the topics once (`mnemo admin migrate`,
`mnemo admin create-topics`), then starts each component as its own process:

    gateway    HTTP on MNEMO_GATEWAY_PORT (8080)
    indexer    with a Qdrant server (MNEMO_QDRANT_URL): a faust worker of its own, health
               on 8092, and the gateway only serves HTTP (the chart's topology). Without
               one, the gateway runs the indexer over a qdrant-edge shard (the co-located
               topology: the shard admits one process), its health port then 8092
    registrar  faust worker, health on 8091
    decay      faust worker, health on 8093
    audit      faust worker, health on 8094

and waits until each answers /readyz. If one exits or is not ready in time, it prints the
end of that component's log and stops what it started. The consumers' health ports follow
MNEMO_<CONSUMER>_HEALTH_PORT.

The run directory is MNEMO_RUN_DIR (default var/run). The addresses of Kafka, Cassandra,
OpenBao (with its root token) and the Qdrant server come from its services.env (written by
infra/services.py); `up` gives the components a vault token of their own, made with the
root token and carrying only the policy docs/deploy.md gives Mnemo's token (kept in
<run>/mnemo/vault.token, mode 0600, while OpenBao takes it). An operator
token is made once and kept in <run>/mnemo/operator.token (mode 0600) and handed to the
gateway. The first `up` creates the tenant `default` with an
admin key and prints the operator token and that key, once. Logs and PID files go to
<run>/mnemo/. The consumers and their default health ports (8091 on, in the table's order)
come from the table of consumers (mnemo.handlers.registry), and the vault's engines are
enabled by Mnemo's own adapters; otherwise standard library only. Tests import `Stack` to run their own copy on other ports, topics and keyspaces.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import os
import random
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from mnemo.handlers.registry import CONSUMERS as TABLE

REPO = Path(__file__).resolve().parent.parent
TAG = "MNEMO_STACK_COMPONENT"

# Every variable this script reads itself (the components it starts read Mnemo's settings).
# Mnemo's start-up check reads this table without running the script.
ENVIRONMENT = {
    "MNEMO_GATEWAY_PORT": "the gateway's port (8080), also a setting of the gateway",
    "MNEMO_PYTHON": "the Python that runs the components (default: this one)",
    "MNEMO_RUN_DIR": "the run directory: services.env, logs, PID files (default var/run)",
    "MNEMO_STACK_COMPONENT": "set by this script in each component it starts, to recognise it",
}


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


# Variables that only infra/services.py and this script read: Mnemo's processes are not
# given them (a Mnemo process may refuse a MNEMO_* variable it does not know). A unit test
# checks this against the scripts' ENVIRONMENT tables and Mnemo's settings.
INFRA_ONLY = frozenset(
    {
        "MNEMO_RUN_DIR",
        "MNEMO_PYTHON",
        "MNEMO_INFRA_SERVICE",
        "MNEMO_KAFKA_PORT",
        "MNEMO_KAFKA_CONTROLLER_PORT",
        "MNEMO_KAFKA_HEAP",
        "MNEMO_KAFKA_VERSION",
        "MNEMO_CASSANDRA_STORAGE_PORT",
        "MNEMO_CASSANDRA_JMX_PORT",
        "MNEMO_CASSANDRA_HEAP",
        "MNEMO_CASSANDRA_VERSION",
        "MNEMO_VAULT_PORT",
        "MNEMO_QDRANT_HTTP_PORT",
        "MNEMO_QDRANT_GRPC_PORT",
        "MNEMO_QDRANT_ARCHIVE",
        "MNEMO_BAO_BIN",
        "MNEMO_JAVA",
        "MNEMO_MVN",
        "MNEMO_KAFKA_SSL_PORT",
        "MNEMO_KAFKA_SASL_SSL_PORT",
        "MNEMO_CASSANDRA_TLS_PORT",
        "MNEMO_CASSANDRA_TLS_STORAGE_PORT",
        "MNEMO_CASSANDRA_TLS_HEAP",
        "MNEMO_VAULT_TLS_PORT",
        "MNEMO_QDRANT_TLS_HTTP_PORT",
        "MNEMO_QDRANT_TLS_GRPC_PORT",
        *(
            f"MNEMO_{s}_TIMEOUT"
            for s in ("KAFKA", "CASSANDRA", "CASSANDRA_TLS", "OPENBAO", "QDRANT", "QDRANT_TLS")
        ),
    }
)


class StackError(RuntimeError):
    """A component could not be started; the message says which and why."""


@dataclass
class Component:
    name: str
    module: str
    health_port: int
    http_port: int | None = None

    def ready_url(self) -> str:
        port = self.http_port if self.http_port is not None else self.health_port
        return f"http://127.0.0.1:{port}/readyz"


def _port_is_free(port: int) -> bool:
    """Whether nothing listens on 127.0.0.1:port (a bind succeeds)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        return True
    except OSError:
        return False
    finally:
        sock.close()


# each consumer's default health port, in the order of the table of consumers
CONSUMER_PORTS = {c.name: 8091 + n for n, c in enumerate(TABLE)}
# the consumer that writes the vector index: a process of its own beside a Qdrant server,
# else run by the gateway over its qdrant-edge shard
INDEXER = next(c for c in TABLE if c.indexes)


@dataclass
class Stack:
    """One distributed deployment on this machine."""

    run_dir: Path
    env: dict[str, str] = field(default_factory=dict)
    gateway_port: int = 8080
    ports: dict[str, int] = field(default_factory=lambda: dict(CONSUMER_PORTS))
    python: str = sys.executable
    # the processes' working directory: faust keeps a `<app>-data` folder there
    workdir: Path = REPO
    # consumer -> how many processes run it (default 1); replica n > 1 is named `<consumer>-n`
    # and takes a health port of its own (see scale())
    replicas: dict[str, int] = field(default_factory=dict)
    _procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, repr=False)

    def qdrant_url(self) -> str | None:
        """The Qdrant server the components use (the stack's env, else this process's);
        an empty value in the stack's env means none."""
        url = self.env.get("MNEMO_QDRANT_URL", os.environ.get("MNEMO_QDRANT_URL", ""))
        return url.strip() or None

    @property
    def topology(self) -> str:
        """`server`: a Qdrant server holds the vectors, the indexer is a process of its own
        and the gateway only serves HTTP (the chart's topology). `co-located`: no Qdrant
        server, the gateway runs the indexer over a qdrant-edge shard."""
        return "server" if self.qdrant_url() else "co-located"

    def components(self) -> list[Component]:
        consumers = [
            Component(c.name, c.module, self.ports[c.name]) for c in TABLE if c is not INDEXER
        ]
        if self.topology == "server":
            consumers.append(Component(INDEXER.name, INDEXER.module, self.ports[INDEXER.name]))
            gateway = Component("gateway", "mnemo_gateway", 0, self.gateway_port)
        else:
            gateway = Component(
                "gateway", "mnemo_gateway", self.ports[INDEXER.name], self.gateway_port
            )
        extra = [
            Component(f"{c.name}-{n}", c.module, self._replica_port(f"{c.name}-{n}"))
            for c in consumers
            for n in range(2, self.replicas.get(c.name, 1) + 1)
        ]
        return [*consumers, *extra, gateway]

    def _replica_port(self, name: str) -> int:
        if name not in self.ports:
            self.ports[name] = free_port()
        return self.ports[name]

    def scale(self, consumer: str, count: int, timeout: float = 180.0) -> None:
        """Run `count` processes of a consumer, all in its one consumer group: start the
        missing replicas and wait until they are ready, or stop the ones past `count`."""
        if count < 1:
            raise StackError(f"{consumer}: at least one replica runs")
        if consumer not in {c.name for c in self.components()}:
            raise StackError(f"{consumer} is not a consumer process of this topology")
        before = {c.name for c in self.components()}
        self.replicas[consumer] = count
        after = [c.name for c in self.components()]
        for name in sorted(before - set(after), reverse=True):
            self.stop(name)
        added = [name for name in after if name not in before]
        for name in added:
            self.start(name)
        self.wait_ready(added, timeout)

    def component(self, name: str) -> Component:
        return next(c for c in self.components() if c.name == name)

    def child_env(self, component: Component) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in INFRA_ONLY}
        env.update(self.env)
        for key in [k for k, v in self.env.items() if not v]:
            env.pop(key, None)  # an empty value in the stack's env: not set at all
        # a distributed stack whatever the caller's shell exports (MNEMO_MODE=embedded there
        # would start every component embedded); the stack's own env may still say
        env["MNEMO_MODE"] = self.env.get("MNEMO_MODE") or "distributed"
        env["MNEMO_HEALTH_PORT"] = str(component.health_port)
        consumer = next((c for c in TABLE if c.module == component.module), None)
        if consumer is not None:
            # a consumer reads its own variable over MNEMO_HEALTH_PORT: one inherited from
            # this script's environment would give a replica its first process's port
            env[f"MNEMO_{consumer.name.upper()}_HEALTH_PORT"] = str(component.health_port)
        env["MNEMO_GATEWAY_PORT"] = str(self.gateway_port)
        env["MNEMO_GATEWAY_COMPONENTS"] = ",".join(
            f"{n}=http://127.0.0.1:{p}" for n, p in sorted(self.ports.items()) if "-" not in n
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
        done = subprocess.run(  # noqa: S603 - our own interpreter and module
            [self.python, "-m", "mnemo", "admin", *args],
            env=env,
            cwd=REPO,
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            output = (done.stdout + done.stderr).strip().splitlines()[-20:]
            raise StackError(
                f"`mnemo admin {' '.join(args)}` failed (exit {done.returncode}):\n"
                + "\n".join(output)
            )

    def start(self, name: str) -> int:
        component = self.component(name)
        running = self.pid(name)
        if running is not None:
            return running
        # a port another process holds (a `make run` left running, an earlier stack's
        # component): that process would answer the readiness probe in this one's place
        taken = [
            port
            for port in (component.http_port, component.health_port)
            if port and not _port_is_free(port)
        ]
        if taken:
            raise StackError(
                f"{name}: port {', '.join(map(str, taken))} on 127.0.0.1 is already in use by "
                "another process (a `make run` still running? `make down` stops this stack's "
                "own); free it or give this component another port"
            )
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

    def log_tail(self, name: str, lines: int = 20) -> str:
        try:
            text = self.log_file(name).read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def wait_ready(self, names: list[str], timeout: float = 120.0) -> None:
        deadline = time.monotonic() + timeout
        pending = list(names)
        while pending:
            for name in list(pending):
                if self.pid(name) is None:
                    proc = self._procs.get(name)
                    code = proc.poll() if proc is not None else None
                    raise StackError(
                        f"{name} exited (status {code}); the end of {self.log_file(name)}:\n"
                        + self.log_tail(name)
                    )
                try:
                    url = self.component(name).ready_url()  # always http://127.0.0.1
                    with urllib.request.urlopen(url, timeout=2) as r:  # noqa: S310
                        if r.status == 200:
                            pending.remove(name)
                except (urllib.error.URLError, OSError):
                    pass
            if pending and time.monotonic() > deadline:
                tails = "".join(
                    f"\n--- the end of {self.log_file(n)}:\n{self.log_tail(n)}" for n in pending
                )
                raise StackError(f"not ready after {timeout:.0f} s: {', '.join(pending)}{tails}")
            if pending:
                time.sleep(0.25)

    def up(self, timeout: float = 180.0) -> None:
        """Migrate, create the topics, start every component and wait until each is ready;
        when one fails, stop those this call started and raise StackError."""
        names = [c.name for c in self.components()]
        already = {name for name in names if self.pid(name) is not None}
        try:
            self.admin("migrate")
            self.admin("create-topics")
            for name in names:
                self.start(name)
            self.wait_ready(names, timeout)
        except BaseException:
            for name in reversed(names):
                if name not in already:
                    self.stop(name)
            raise

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
        names = [c.name for c in reversed(self.components())]
        # replicas a scale-out started (`<consumer>-<n>`), which another invocation (`make
        # down`) does not know of: found by their PID files, and stopped first
        known = set(names)
        extra = sorted(
            {p.stem for p in self.run_dir.glob("*-*.pid")} - known,
            reverse=True,
        )
        # every process asked to stop at once, then each waited for: stops that run to
        # their bound (the brokers gone) take it side by side, not one after another
        order = [*extra, *names]
        for name in order:
            pid = self.pid(name)
            if pid is not None:
                os.kill(pid, signal.SIGTERM)
        for name in order:
            self.stop(name)

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


# What the components take from services.env: the services' addresses and OpenBao's token
# (never the other lines, such as Cassandra's JMX port, which no component reads).
PASSED_ON = (
    "MNEMO_KAFKA_BOOTSTRAP",
    "MNEMO_CASSANDRA_HOSTS",
    "MNEMO_CASSANDRA_PORT",
    "MNEMO_VAULT_ADDR",
    "MNEMO_VAULT_TOKEN",
    "MNEMO_QDRANT_URL",
)
FIRST_TENANT = "default"


def services_env(path: Path) -> dict[str, str]:
    """The lines of infra/services.py's address file that the components use."""
    if not path.exists():
        return {}
    out = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip() in PASSED_ON and value.strip():
            out[key.strip()] = value.strip()
    return out


def _port(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    try:
        return int(raw) if raw else default
    except ValueError:
        raise StackError(f"{name}={raw!r} is not a port number") from None


def operator_token(stack_dir: Path) -> tuple[str, bool]:
    """The operator token of this run directory, made once and kept (mode 0600); and
    whether it was made just now."""
    path = stack_dir / "operator.token"
    with contextlib.suppress(OSError):
        token = path.read_text(encoding="utf-8").strip()
        if token:
            return token, False
    stack_dir.mkdir(parents=True, exist_ok=True)
    token = secrets.token_urlsafe(32)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(token + "\n")
    return token, True


def first_tenant(url: str, token: str, tenant: str = FIRST_TENANT) -> str | None:
    """Create the first tenant with its admin key; the key, or None if the tenant exists."""
    body = json.dumps({"tenant": tenant, "admin_key_name": "admin"}).encode()
    request = urllib.request.Request(  # noqa: S310 - the gateway on 127.0.0.1
        f"{url}/v1/admin/tenants",
        data=body,
        method="POST",
        headers={"Content-Type": "application/json", "X-Mnemo-Admin-Token": token},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as answer:  # noqa: S310
            return str(json.loads(answer.read())["key"])
    except urllib.error.HTTPError as exc:
        if exc.code == 409:
            return None
        raise StackError(
            f"creating tenant {tenant!r} answered {exc.code}: {exc.read()[:500]!r}"
        ) from None
    except OSError as exc:  # URLError, a reset connection, a timeout
        raise StackError(f"creating tenant {tenant!r} failed: {exc}") from None


# The components' vault token carries the policy docs/deploy.md gives Mnemo's token; the
# engines it names are enabled beforehand with the root token, as the guide asks.
COMPONENT_POLICY = "mnemo-components"
DEPLOY_GUIDE = REPO / "docs" / "deploy.md"


def vault_names() -> dict[str, str]:
    """The vault's names this stack's components use (their settings, or the defaults)."""
    return {
        "transit": os.environ.get("MNEMO_VAULT_TRANSIT_MOUNT") or "transit",
        "anchors": os.environ.get("MNEMO_AUDIT_ANCHOR_MOUNT") or "mnemo-anchors",
        "signing": os.environ.get("MNEMO_AUDIT_SIGNING_KEY") or "mnemo-audit",
        "prefix": os.environ.get("MNEMO_VAULT_KEY_PREFIX") or "mnemo",
    }


def component_policy(names: dict[str, str]) -> str:
    """The guide's policy for Mnemo's token, its names replaced by `names`, each path
    rewritten once (a name that is another's default is not replaced twice)."""
    text = DEPLOY_GUIDE.read_text(encoding="utf-8")
    start = text.find("**Vault or OpenBao**")
    begin = text.find("```hcl\n", start)
    end = text.find("```", begin + 7)
    if start < 0 or begin < 0 or end < 0:
        raise StackError(f"{DEPLOY_GUIDE} gives no Vault policy for Mnemo's token")
    lines = []
    for line in text[begin + 7 : end].splitlines():
        head, quote, rest = line.partition('path "')
        path, _, tail = rest.partition('"')
        if not quote:
            lines.append(line)
            continue
        mount, _, below = path.partition("/")
        if mount == "transit":
            mount = names["transit"]
            below = below.replace("/mnemo-audit", "/" + names["signing"])
        elif mount == "mnemo-anchors":
            mount = names["anchors"]
            below = below.replace("/mnemo/", f"/{names['prefix']}/")
        lines.append(f'{head}path "{mount}/{below}"{tail}' if below else line)
    return "\n".join(lines) + "\n"


def _openbao(addr: str, token: str, method: str, path: str, body: object = None) -> object:
    """One call of OpenBao's API with `token`; its JSON answer ({} when empty). Errors name
    the path and the status, never the token."""
    request = urllib.request.Request(  # noqa: S310 - the development OpenBao
        f"{addr.rstrip('/')}/v1/{path}",
        data=None if body is None else json.dumps(body).encode(),
        method=method,
        headers={"X-Vault-Token": token, "Content-Type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as answer:  # noqa: S310
            raw = answer.read()
        return json.loads(raw) if raw else {}
    except urllib.error.HTTPError as exc:
        raise StackError(f"OpenBao answered {method} {path} with {exc.code}") from None
    except OSError as exc:
        raise StackError(f"OpenBao at {addr} did not answer {method} {path}: {exc}") from None
    except ValueError:
        raise StackError(f"OpenBao answered {method} {path} with something not JSON") from None


def component_vault_token(addr: str, root: str, stack_dir: Path) -> str:
    """A token for the components, carrying only `component_policy()`, made with the
    development OpenBao's root token (which no component is given): the stack runs on the
    policy the guide gives a deployment. The engines are enabled first with the root token,
    by Mnemo's own adapters. The token is kept in <run>/mnemo/vault.token (mode 0600) and
    used again while OpenBao takes it with that policy; otherwise a new one (32 days)."""
    from mnemo.adapters.vault_anchors import VaultKvAnchors
    from mnemo.adapters.vault_key_vault import VaultKeyVault
    from mnemo.domain.errors import MnemoError

    names = vault_names()
    policy = component_policy(names)
    default = component_policy(
        {"transit": "transit", "anchors": "mnemo-anchors", "signing": "mnemo-audit",
         "prefix": "mnemo"}
    )  # fmt: skip
    name = COMPONENT_POLICY
    if policy != default:  # other names: a policy of their own beside the default one's
        name = f"{COMPONENT_POLICY}-{hashlib.sha256(policy.encode()).hexdigest()[:10]}"
    try:
        VaultKeyVault(addr, root, mount=names["transit"], prefix=names["prefix"]).has_key(
            "stack-probe"
        )
        VaultKvAnchors(addr, root, mount=names["anchors"], prefix=names["prefix"]).of_tenant(
            "stack-probe"
        )
    except MnemoError as exc:
        raise StackError(f"preparing OpenBao's engines failed: {exc.code}") from None
    _openbao(addr, root, "PUT", f"sys/policies/acl/{name}", {"policy": policy})
    kept = stack_dir / "vault.token"
    with contextlib.suppress(OSError, StackError):
        token = kept.read_text(encoding="utf-8").strip()
        looked = _openbao(addr, token, "GET", "auth/token/lookup-self")
        data = looked.get("data") if isinstance(looked, dict) else None
        if isinstance(data, dict) and name in (data.get("policies") or []):
            return token
    made = _openbao(
        addr,
        root,
        "POST",
        "auth/token/create",
        {"policies": [name], "ttl": "768h", "display_name": "mnemo-stack"},
    )
    auth = made.get("auth") if isinstance(made, dict) else None
    token = auth.get("client_token") if isinstance(auth, dict) else None
    if not isinstance(token, str) or not token:
        raise StackError("OpenBao made no token for the components")
    stack_dir.mkdir(parents=True, exist_ok=True)
    kept.unlink(missing_ok=True)
    fd = os.open(kept, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(token + "\n")
    return token


def revoke_component_vault_token(addr: str, stack_dir: Path) -> str:
    """`down`: the components' vault token kept in <run>/mnemo/vault.token is revoked (it
    revokes itself, so no root token is needed) and the file removed, so no token outlives
    the stack it was made for; the next `up` makes a new one. A token OpenBao no longer
    takes is only removed. When OpenBao cannot be reached the file stays, for the next
    `down` (or `up`, which uses it again). What happened, in a few words."""
    kept = stack_dir / "vault.token"
    try:
        token = kept.read_text(encoding="utf-8").strip()
    except OSError:
        return "no components' vault token kept"
    if token and addr:
        request = urllib.request.Request(  # noqa: S310 - the development OpenBao
            f"{addr.rstrip('/')}/v1/auth/token/revoke-self",
            data=b"",
            method="POST",
            headers={"X-Vault-Token": token},
        )
        try:
            with urllib.request.urlopen(request, timeout=30):  # noqa: S310
                pass
        except urllib.error.HTTPError as exc:
            if exc.code >= 500:
                return f"the components' vault token is kept: OpenBao answered {exc.code}"
            # 403: OpenBao takes it no more (expired, revoked, or another OpenBao's)
        except OSError as exc:
            return f"the components' vault token is kept: OpenBao at {addr} did not answer ({exc})"
    kept.unlink(missing_ok=True)
    return "the components' vault token revoked"


def from_environment() -> Stack:
    """The stack `make up` runs: the run directory MNEMO_RUN_DIR (default var/run), the
    services' addresses and OpenBao's token from its services.env, the operator token kept
    in it, the gateway on MNEMO_GATEWAY_PORT and each consumer's health port on
    MNEMO_<CONSUMER>_HEALTH_PORT (8091 to 8094)."""
    raw = os.environ.get("MNEMO_RUN_DIR", "").strip()
    run = (Path(raw).expanduser() if raw else REPO / "var" / "run").resolve()
    env = services_env(run / "services.env")
    if "MNEMO_DATA_DIR" not in os.environ:
        env["MNEMO_DATA_DIR"] = str(run.parent / "data-distributed")
    stack_dir = run / "mnemo"
    if not os.environ.get("MNEMO_GATEWAY_ADMIN_TOKEN"):
        env["MNEMO_GATEWAY_ADMIN_TOKEN"] = operator_token(stack_dir)[0]

    return Stack(
        stack_dir,
        env,
        gateway_port=_port("MNEMO_GATEWAY_PORT", 8080),
        ports={
            name: _port(f"MNEMO_{name.upper()}_HEALTH_PORT", default)
            for name, default in CONSUMER_PORTS.items()
        },
        python=os.environ.get("MNEMO_PYTHON", sys.executable),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("command", choices=("up", "down", "status", "check"))
    args = parser.parse_args(argv)
    if args.command == "check":
        # `make up` asks first, so a configuration error stops it before any service runs:
        # the checks every Mnemo process makes at its start (an unknown or misspelt
        # MNEMO_* variable, a value a setting cannot take), here and now
        done = subprocess.run(  # noqa: S603 - our own interpreter and module
            [os.environ.get("MNEMO_PYTHON") or sys.executable, "-m", "mnemo", "--help"],
            capture_output=True,
            text=True,
        )
        if done.returncode != 0:
            print(done.stderr.strip(), file=sys.stderr)
        return done.returncode
    try:
        stack = from_environment()
    except StackError as exc:
        print(f"[stack] {exc}", file=sys.stderr)
        return 1
    url = f"http://127.0.0.1:{stack.gateway_port}"
    if args.command == "down":
        stack.down()
        print("[stack] stopped")
        print(
            f"[stack] {revoke_component_vault_token(stack.env.get('MNEMO_VAULT_ADDR', ''), stack.run_dir)}"
        )
        return 0
    if args.command == "status":
        print(json.dumps(stack.status(), indent=2))
        return 0
    token_file = stack.run_dir / "operator.token"
    admin_token = stack.env.get("MNEMO_GATEWAY_ADMIN_TOKEN") or os.environ.get(
        "MNEMO_GATEWAY_ADMIN_TOKEN", ""
    )
    fresh_token = not (stack.run_dir / ".operator-token-shown").exists()
    print(f"[stack] starting Mnemo ({stack.topology} topology) ...", flush=True)
    try:
        if stack.env.get("MNEMO_VAULT_ADDR") and stack.env.get("MNEMO_VAULT_TOKEN"):
            # services.env holds the development OpenBao's root token: the components get
            # a token of their own, with the policy the guide gives a deployment
            stack.env["MNEMO_VAULT_TOKEN"] = component_vault_token(
                stack.env["MNEMO_VAULT_ADDR"], stack.env["MNEMO_VAULT_TOKEN"], stack.run_dir
            )
        stack.up()
    except StackError as exc:
        print(f"[stack] {exc}", file=sys.stderr)
        print("[stack] stopped the components this run started", file=sys.stderr)
        return 1
    try:
        key = first_tenant(url, admin_token)
    except StackError as exc:
        print(f"[stack] {exc}", file=sys.stderr)
        print("[stack] the components are running; `make down` stops them", file=sys.stderr)
        return 1
    print(f"[stack] Mnemo (distributed, {stack.topology}) on {url}")
    print(json.dumps(stack.status()))
    if "MNEMO_GATEWAY_ADMIN_TOKEN" in stack.env:
        if fresh_token:
            print(f"[stack] operator token (kept in {token_file}, mode 0600):")
            print(f"    {stack.env['MNEMO_GATEWAY_ADMIN_TOKEN']}")
            (stack.run_dir / ".operator-token-shown").touch()
        else:
            print(f"[stack] operator token: in {token_file}")
    if key is not None:
        print(f"[stack] tenant {FIRST_TENANT!r} created; its admin key (shown once, not kept):")
        print(f"    {key}")
    else:
        print(f"[stack] tenant {FIRST_TENANT!r} exists; its admin key was shown when it was made")
    mnemo = Path(stack.python).parent / "mnemo"
    print(
        f"[stack] try: MNEMO_URL={url} MNEMO_ADMIN_TOKEN=$(cat {token_file}) "
        f"MNEMO_API_KEY=<the key> {mnemo if mnemo.exists() else 'mnemo'} status"
    )
    print(f"[stack] logs in {stack.run_dir}; `make down` stops it")
    return 0


if __name__ == "__main__":
    sys.exit(main())
