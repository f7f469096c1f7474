"""Cassandra over TLS with a password, on the real second node infra/services.py starts
(client_encryption_options with PEM files of a development CA, client certificates
required, PasswordAuthenticator): the store connects the way every Mnemo process does,
from settings, creates and migrates its keyspace, and writes and reads.

Each missing or wrong piece is refused: no client certificate, one of another CA, a node
the CA file does not vouch for, a wrong password (never shown), no TLS at all."""

from __future__ import annotations

import ssl
import uuid
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr
from tests.tls_support import CASSANDRA_USER, TlsServices, rogue_ca, tls_services

from mnemo.bootstrap import connect_store
from mnemo.domain.errors import InvalidInput, Unavailable
from mnemo.settings import MnemoSettings


@pytest.fixture(scope="module")
def tls() -> TlsServices:
    return tls_services(cassandra=True)


def settings(tls: TlsServices, tmp_path: Path, **values: Any) -> MnemoSettings:
    base: dict[str, Any] = {
        "data_dir": tmp_path,
        "mode": "distributed",
        "cassandra_hosts": "127.0.0.1",
        "cassandra_port": tls.cassandra_port,
        "cassandra_keyspace": f"mnemo_tls_{uuid.uuid4().hex[:10]}",
        "cassandra_username": CASSANDRA_USER[0],
        "cassandra_password": CASSANDRA_USER[1],
        "cassandra_ssl_cafile": tls.ca,
        "cassandra_ssl_certfile": tls.client_cert,
        "cassandra_ssl_keyfile": tls.client_key,
    }
    base.update(values)
    return MnemoSettings(**base)


def test_the_store_works_over_tls_with_a_password(tls: TlsServices, tmp_path: Path) -> None:
    config = settings(tls, tmp_path)
    store = connect_store(config)
    try:
        session = store.session
        keyspaces = {
            r[0] for r in session.execute("SELECT keyspace_name FROM system_schema.keyspaces")
        }
        assert config.cassandra_keyspace in keyspaces  # created and migrated over TLS
        assert store.position("tls-probe") == 0
        assert session.cluster.ssl_context is not None  # the node takes nothing else anyway
    finally:
        store.session.execute(f"DROP KEYSPACE IF EXISTS {config.cassandra_keyspace}", timeout=120)
        store.close()


def test_every_connection_is_made_at_the_first_try(tls: TlsServices, tmp_path: Path) -> None:
    """Connecting names its protocol version rather than probing newer ones first: over
    TLS the node dropped about one probe in three without a word, and the driver then sat
    out its five-second connect timeout and gave up (NoHostAvailable), so a process failed
    to start one time in three. Twelve connections in a row, with the right password and
    with a wrong one, are each answered."""
    config = settings(tls, tmp_path)
    connect_store(config).close()  # the keyspace made once; the connections below reuse it
    try:
        for _ in range(12):
            store = connect_store(config)
            assert store.position("tls-probe") == 0
            store.close()
        wrong = config.model_copy(update={"cassandra_password": SecretStr("wrong-password-77")})
        for _ in range(12):
            with pytest.raises(InvalidInput) as failed:
                connect_store(wrong).close()
            assert failed.value.code == "CASSANDRA_CREDENTIALS_REFUSED"
    finally:
        store = connect_store(config)
        store.session.execute(f"DROP KEYSPACE IF EXISTS {config.cassandra_keyspace}", timeout=120)
        store.close()


def test_without_the_name_check_the_chain_is_still_checked(
    tls: TlsServices, tmp_path: Path
) -> None:
    """MNEMO_CASSANDRA_SSL_CHECK_HOSTNAME=false: for certificates that name nodes by DNS
    only; a node the CA does not vouch for is refused all the same."""
    config = settings(tls, tmp_path, cassandra_ssl_check_hostname=False)
    store = connect_store(config)
    try:
        context = store.session.cluster.ssl_context
        assert context.check_hostname is False
        assert context.verify_mode == ssl.CERT_REQUIRED
        assert store.position("tls-probe") == 0
    finally:
        store.session.execute(f"DROP KEYSPACE IF EXISTS {config.cassandra_keyspace}", timeout=120)
        store.close()
    other_ca, _, _ = rogue_ca(tmp_path / "rogue")
    unverified(
        settings(tls, tmp_path, cassandra_ssl_check_hostname=False, cassandra_ssl_cafile=other_ca)
    )


def refused(config: MnemoSettings) -> Unavailable:
    with pytest.raises(Unavailable) as failed:
        connect_store(config).close()
    return failed.value


def test_without_a_client_certificate_the_node_refuses(tls: TlsServices, tmp_path: Path) -> None:
    refused(settings(tls, tmp_path, cassandra_ssl_certfile=None, cassandra_ssl_keyfile=None))


def test_a_client_certificate_of_another_ca_is_refused(tls: TlsServices, tmp_path: Path) -> None:
    _, cert, key = rogue_ca(tmp_path / "rogue")
    refused(settings(tls, tmp_path, cassandra_ssl_certfile=cert, cassandra_ssl_keyfile=key))


def unverified(config: MnemoSettings) -> InvalidInput:
    """A node whose certificate the CA file does not verify: a configuration error naming
    the setting, which retrying cannot mend (it was retried 20 times as STORE_UNAVAILABLE)."""
    with pytest.raises(InvalidInput) as failed:
        connect_store(config).close()
    assert (failed.value.code, failed.value.field) == ("TLS_CONFIG_INVALID", "cassandra_ssl_cafile")
    assert "MNEMO_CASSANDRA_SSL_CAFILE" in failed.value.message
    return failed.value


def test_a_node_the_ca_file_does_not_vouch_for_is_refused(tls: TlsServices, tmp_path: Path) -> None:
    other_ca, _, _ = rogue_ca(tmp_path / "rogue")
    unverified(settings(tls, tmp_path, cassandra_ssl_cafile=other_ca))


def test_a_wrong_password_is_a_configuration_error_that_never_shows_it(
    tls: TlsServices, tmp_path: Path
) -> None:
    """Retrying cannot mend refused credentials: the start stops at once, naming the
    setting (they were retried 20 times as STORE_UNAVAILABLE)."""
    with pytest.raises(InvalidInput) as failed:
        connect_store(settings(tls, tmp_path, cassandra_password="wrong-password-77")).close()
    error = failed.value
    assert (error.code, error.field) == ("CASSANDRA_CREDENTIALS_REFUSED", "cassandra_password")
    assert "MNEMO_CASSANDRA_PASSWORD" in error.message
    assert "wrong-password-77" not in str(error)
    assert "wrong-password-77" not in error.message


def test_no_login_where_the_cluster_requires_one_names_the_setting(
    tls: TlsServices, tmp_path: Path
) -> None:
    with pytest.raises(InvalidInput) as failed:
        connect_store(
            settings(tls, tmp_path, cassandra_username=None, cassandra_password=None)
        ).close()
    assert (failed.value.code, failed.value.field) == (
        "CASSANDRA_CREDENTIALS_REFUSED",
        "cassandra_username",
    )


def test_without_tls_the_node_refuses(tls: TlsServices, tmp_path: Path) -> None:
    refused(
        settings(
            tls,
            tmp_path,
            cassandra_ssl_cafile=None,
            cassandra_ssl_certfile=None,
            cassandra_ssl_keyfile=None,
        )
    )


def test_a_client_certificate_without_a_ca_file_is_a_configuration_error(
    tls: TlsServices, tmp_path: Path
) -> None:
    with pytest.raises(InvalidInput) as wrong:
        connect_store(settings(tls, tmp_path, cassandra_ssl_cafile=None))
    assert wrong.value.code == "TLS_CONFIG_INVALID"
    assert wrong.value.field == "cassandra_ssl_cafile"
