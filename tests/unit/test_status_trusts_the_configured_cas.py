"""The distributed status page probes Qdrant and the vault trusting the CAs Mnemo's own
connections to them trust (MNEMO_QDRANT_CA_FILE, VAULT_CACERT): a server behind a
private CA is reported as it is, not as unreachable."""

from __future__ import annotations

import datetime
import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from ipaddress import IPv4Address
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID
from tests.support import answer_json

from mnemo.domain.errors import Unavailable
from mnemo.entrypoints.admin import backing_services
from mnemo.settings import MnemoSettings


def _name(common: str) -> x509.Name:
    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common)])


def _private_ca(directory: Path) -> tuple[Path, Path, Path]:
    """A CA nobody trusts by default and a certificate it signed for 127.0.0.1: the CA
    file, the server's certificate and its key."""
    now = datetime.datetime.now(datetime.UTC)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(_name("status test CA"))
        .issuer_name(_name("status test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name("127.0.0.1"))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(IPv4Address("127.0.0.1"))]),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    paths = (directory / "ca.pem", directory / "server.pem", directory / "server.key")
    paths[0].write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    paths[1].write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    paths[2].write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return paths


class Handler(BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # Qdrant's /readyz and the vault's /v1/sys/health alike
        answer_json(self, 200, b"{}")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def https_server(tmp_path: Path) -> Iterator[tuple[str, Path]]:
    """An HTTPS server on 127.0.0.1 under a private CA: its URL and the CA file."""
    ca, cert, key = _private_ca(tmp_path)
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    context.load_cert_chain(cert, key)
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}", ca
    finally:
        server.shutdown()
        server.server_close()


def _platform(settings: MnemoSettings) -> Any:
    """Just what backing_services reads: Kafka and Cassandra that answer, and settings."""
    topic = SimpleNamespace(partitions=lambda: [0], reachable=lambda timeout=3.0: None)
    store = SimpleNamespace(positions=lambda names: dict.fromkeys(names, 0))
    return SimpleNamespace(
        distributed=SimpleNamespace(topic=topic), store=store, settings=settings, sealer=None
    )


def test_qdrant_and_the_vault_behind_a_private_ca_are_probed_with_that_ca(
    https_server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, ca = https_server
    monkeypatch.setenv("VAULT_CACERT", str(ca))
    settings = MnemoSettings(vault_addr=url, qdrant_url=url, qdrant_ca_file=ca)
    services = backing_services(_platform(settings))
    assert services["qdrant"] == "ready"
    assert services["vault"] == "ready"


def test_without_the_ca_the_same_servers_are_not_trusted(
    https_server: tuple[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    url, _ = https_server
    monkeypatch.delenv("VAULT_CACERT", raising=False)
    monkeypatch.delenv("VAULT_CAPATH", raising=False)
    services = backing_services(_platform(MnemoSettings(vault_addr=url, qdrant_url=url)))
    assert services["qdrant"] == services["vault"] == "unreachable"


def test_a_ca_file_that_cannot_be_read_is_reported_as_such(
    https_server: tuple[str, Path], tmp_path: Path
) -> None:
    url, _ = https_server
    settings = MnemoSettings(qdrant_url=url, qdrant_ca_file=tmp_path / "missing.pem")
    assert backing_services(_platform(settings))["qdrant"] == "tls_config_invalid"


def test_kafka_is_ready_only_when_its_brokers_answer() -> None:
    """The partitions a client keeps from its metadata answered while Kafka was down, so
    the status showed it ready: a broker round trip decides."""

    def down(timeout: float = 3.0) -> None:
        raise Unavailable("the event log (Kafka) is unavailable", code="LOG_UNAVAILABLE")

    platform = _platform(MnemoSettings())
    platform.distributed.topic.reachable = down
    assert backing_services(platform)["kafka"] == "LOG_UNAVAILABLE"
