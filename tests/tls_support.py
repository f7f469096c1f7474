"""Where tests find the TLS listeners infra/services.py starts: the broker's SSL and
SASL_SSL listeners and the second Cassandra node (TLS, PasswordAuthenticator), with the
development CA, client certificate and SASL password under <run>/tls.

Also the second Qdrant server (HTTPS and an API key, qdrant-tls) and OpenBao's HTTPS
listener. Ports come from the environment (MNEMO_KAFKA_SSL_PORT, MNEMO_KAFKA_SASL_SSL_PORT,
MNEMO_CASSANDRA_TLS_PORT, MNEMO_QDRANT_TLS_HTTP_PORT, MNEMO_VAULT_TLS_PORT), else from
<run>/services.env, else the defaults; the run directory from MNEMO_RUN_DIR, else
var/run. `rogue_ca` makes a CA nobody trusts, with a client certificate of its own, for
the refusals."""

from __future__ import annotations

import datetime
import os
import socket
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from tests.support import missing

__all__ = ["TlsServices", "rogue_ca", "tls_services"]

REPO = Path(__file__).resolve().parents[1]
HOST = "127.0.0.1"
CASSANDRA_USER = ("cassandra", "cassandra")  # the TLS node's built-in superuser (loopback)
SASL_USER = "mnemo"


def _run_dir() -> Path:
    return Path(os.environ.get("MNEMO_RUN_DIR") or REPO / "var" / "run")


def _setting(name: str, default: int) -> int:
    raw = os.environ.get(name)
    env_file = _run_dir() / "services.env"
    if raw is None and env_file.exists():
        for line in env_file.read_text(encoding="utf-8").splitlines():
            key, _, value = line.partition("=")
            if key.strip() == name:
                raw = value.strip()
    return int(raw) if raw else default


def _answers(port: int) -> bool:
    try:
        with socket.create_connection((HOST, port), timeout=1):
            return True
    except OSError:
        return False


@dataclass(frozen=True)
class TlsServices:
    tls_dir: Path
    kafka_ssl: str
    kafka_sasl_ssl: str
    cassandra_port: int

    @property
    def ca(self) -> Path:
        return self.tls_dir / "ca.pem"

    @property
    def client_cert(self) -> Path:
        return self.tls_dir / "client.crt"

    @property
    def client_key(self) -> Path:
        return self.tls_dir / "client.key"

    @property
    def sasl_password(self) -> str:
        return (self.tls_dir / "sasl.password").read_text(encoding="utf-8").strip()

    @property
    def qdrant_api_key(self) -> str:
        return (self.tls_dir / "qdrant.api-key").read_text(encoding="utf-8").strip()

    @property
    def qdrant_url(self) -> str:
        return f"https://{HOST}:{_setting('MNEMO_QDRANT_TLS_HTTP_PORT', 6343)}"

    @property
    def vault_url(self) -> str:
        return f"https://{HOST}:{_setting('MNEMO_VAULT_TLS_PORT', 8210)}"


def tls_services(
    *, kafka: bool = False, cassandra: bool = False, qdrant: bool = False, vault: bool = False
) -> TlsServices:
    """The listeners, when they answer; else a skip on a developer machine, a failure
    under CI (`make test` starts them)."""
    found = TlsServices(
        _run_dir() / "tls",
        f"{HOST}:{_setting('MNEMO_KAFKA_SSL_PORT', 9094)}",
        f"{HOST}:{_setting('MNEMO_KAFKA_SASL_SSL_PORT', 9095)}",
        _setting("MNEMO_CASSANDRA_TLS_PORT", 9142),
    )
    if not found.ca.is_file():
        missing("TLS material", f"no {found.ca}; start: infra/services.py up kafka cassandra-tls")
    if kafka:
        for address in (found.kafka_ssl, found.kafka_sasl_ssl):
            if not _answers(int(address.rpartition(":")[2])):
                missing("Kafka", f"no TLS listener at {address}")
    if cassandra and not _answers(found.cassandra_port):
        missing("Cassandra", f"no TLS node at {HOST}:{found.cassandra_port} (cassandra-tls)")
    if qdrant and not _answers(int(found.qdrant_url.rpartition(":")[2])):
        missing("Qdrant", f"no HTTPS server at {found.qdrant_url} (qdrant-tls)")
    if vault and not _answers(int(found.vault_url.rpartition(":")[2])):
        missing("OpenBao", f"no HTTPS listener at {found.vault_url}")
    return found


def rogue_ca(folder: Path) -> tuple[Path, Path, Path]:
    """(CA file, client certificate, client key) of a CA that no service trusts."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "not the Mnemo CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    leaf_key = ec.generate_private_key(ec.SECP256R1())
    leaf = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "intruder")]))
        .issuer_name(subject)
        .public_key(leaf_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=30))
        .sign(ca_key, hashes.SHA256())
    )
    pem = serialization.Encoding.PEM
    folder.mkdir(parents=True, exist_ok=True)
    paths = (folder / "rogue-ca.pem", folder / "rogue.crt", folder / "rogue.key")
    paths[0].write_bytes(ca.public_bytes(pem))
    paths[1].write_bytes(leaf.public_bytes(pem))
    paths[2].write_bytes(
        leaf_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return paths
