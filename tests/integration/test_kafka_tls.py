"""Kafka over TLS and SASL, on the real broker's SSL and SASL_SSL listeners (infra/services.py
starts them with a development CA): the log adapter's producer, reader and admin client,
built from settings as every Mnemo process builds them, and faust's credentials.

A broker whose certificate the CA file does not vouch for, a client certificate of another
CA, and a wrong SASL password are each refused."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from tests.tls_support import SASL_USER, TlsServices, rogue_ca, tls_services

from mnemo.adapters.kafka_topic import KafkaTopic, ensure_topics
from mnemo.bootstrap import kafka_config
from mnemo.domain.errors import InvalidInput, Unavailable
from mnemo.entrypoints.workers import _credentials
from mnemo.settings import MnemoSettings


@pytest.fixture(scope="module")
def tls() -> TlsServices:
    return tls_services(kafka=True)


def settings(tmp_path: Path, **values: Any) -> MnemoSettings:
    return MnemoSettings(data_dir=tmp_path, mode="distributed", **values)


def round_trip(config_settings: MnemoSettings) -> None:
    """Create a topic, produce to it and read the record back, over the configured
    protocol; the admin client, the producer and the reader all connect."""
    name = f"tls.{uuid.uuid4().hex[:10]}"
    config = kafka_config(config_settings)
    config = type(config)(**{**config.__dict__, "request_timeout_ms": 8_000})
    assert ensure_topics(config, name, 2, f"{name}.dlq") == [name, f"{name}.dlq"]
    topic = KafkaTopic(config, name)
    try:
        [placed] = topic.produce([(b"acme:user:U1", b'{"secret":"in flight"}', [])])
        [record] = topic.fetch(placed.partition, placed.offset, 1)
        assert record.value == b'{"secret":"in flight"}'
    finally:
        topic.close()


def test_ssl_with_the_ca_file(tls: TlsServices, tmp_path: Path) -> None:
    round_trip(
        settings(
            tmp_path,
            kafka_bootstrap=tls.kafka_ssl,
            kafka_security_protocol="SSL",
            kafka_ssl_cafile=tls.ca,
        )
    )


def test_ssl_with_a_client_certificate(tls: TlsServices, tmp_path: Path) -> None:
    round_trip(
        settings(
            tmp_path,
            kafka_bootstrap=tls.kafka_ssl,
            kafka_security_protocol="SSL",
            kafka_ssl_cafile=tls.ca,
            kafka_ssl_certfile=tls.client_cert,
            kafka_ssl_keyfile=tls.client_key,
        )
    )


@pytest.mark.parametrize("mechanism", ["PLAIN", "SCRAM-SHA-512"])
def test_sasl_ssl(tls: TlsServices, tmp_path: Path, mechanism: str) -> None:
    round_trip(
        settings(
            tmp_path,
            kafka_bootstrap=tls.kafka_sasl_ssl,
            kafka_security_protocol="SASL_SSL",
            kafka_sasl_mechanism=mechanism,
            kafka_sasl_username=SASL_USER,
            kafka_sasl_password=tls.sasl_password,
            kafka_ssl_cafile=tls.ca,
        )
    )


def refused(config_settings: MnemoSettings) -> Unavailable:
    config = kafka_config(config_settings)
    config = type(config)(**{**config.__dict__, "request_timeout_ms": 5_000})
    with pytest.raises(Unavailable) as failed:
        ensure_topics(config, f"tls.{uuid.uuid4().hex[:10]}", 1, "unused.dlq")
    return failed.value


def test_a_broker_the_ca_does_not_vouch_for_is_a_configuration_error(
    tls: TlsServices, tmp_path: Path
) -> None:
    # retrying cannot mend a CA that signed none of the brokers: the start stops at once,
    # naming the setting (a worker exits 78), instead of twenty retries as LOG_UNAVAILABLE
    other_ca, _, _ = rogue_ca(tmp_path / "rogue")
    config = kafka_config(
        settings(
            tmp_path,
            kafka_bootstrap=tls.kafka_ssl,
            kafka_security_protocol="SSL",
            kafka_ssl_cafile=other_ca,
        )
    )
    config = type(config)(**{**config.__dict__, "request_timeout_ms": 5_000})
    with pytest.raises(InvalidInput) as failed:
        ensure_topics(config, f"tls.{uuid.uuid4().hex[:10]}", 1, "unused.dlq")
    assert (failed.value.code, failed.value.field) == ("TLS_CONFIG_INVALID", "kafka_ssl_cafile")
    assert "MNEMO_KAFKA_SSL_CAFILE" in str(failed.value)


def test_a_client_certificate_of_another_ca_is_refused(tls: TlsServices, tmp_path: Path) -> None:
    _, cert, key = rogue_ca(tmp_path / "rogue")
    refused(
        settings(
            tmp_path,
            kafka_bootstrap=tls.kafka_ssl,
            kafka_security_protocol="SSL",
            kafka_ssl_cafile=tls.ca,
            kafka_ssl_certfile=cert,
            kafka_ssl_keyfile=key,
        )
    )


def test_a_wrong_sasl_password_is_a_configuration_error_that_never_shows_it(
    tls: TlsServices, tmp_path: Path
) -> None:
    """Retrying cannot mend a login every broker refuses: the start stops at once, naming
    the setting (it was retried 20 times as LOG_UNAVAILABLE)."""
    config = kafka_config(
        settings(
            tmp_path,
            kafka_bootstrap=tls.kafka_sasl_ssl,
            kafka_security_protocol="SASL_SSL",
            kafka_sasl_mechanism="SCRAM-SHA-512",
            kafka_sasl_username=SASL_USER,
            kafka_sasl_password="not-the-password-42",
            kafka_ssl_cafile=tls.ca,
        )
    )
    config = type(config)(**{**config.__dict__, "request_timeout_ms": 5_000})
    with pytest.raises(InvalidInput) as failed:
        ensure_topics(config, f"tls.{uuid.uuid4().hex[:10]}", 1, "unused.dlq")
    error = failed.value
    assert (error.code, error.field) == ("KAFKA_CREDENTIALS_REFUSED", "kafka_sasl_password")
    assert "MNEMO_KAFKA_SASL_PASSWORD" in error.message
    assert "not-the-password-42" not in str(error)
    assert "not-the-password-42" not in error.message


def test_tls_files_for_a_plaintext_protocol_or_unreadable_are_refused_by_name(
    tls: TlsServices, tmp_path: Path
) -> None:
    with pytest.raises(InvalidInput) as plaintext:
        kafka_config(settings(tmp_path, kafka_ssl_cafile=tls.ca))
    assert plaintext.value.code == "TLS_CONFIG_INVALID"
    with pytest.raises(InvalidInput) as unreadable:
        kafka_config(
            settings(
                tmp_path,
                kafka_security_protocol="SSL",
                kafka_ssl_cafile=tmp_path / "missing-ca.pem",
            )
        )
    assert unreadable.value.code == "TLS_CONFIG_INVALID"
    assert "MNEMO_KAFKA_SSL_CAFILE" in unreadable.value.message


def test_faust_credentials_reach_the_broker(tls: TlsServices, tmp_path: Path) -> None:
    """The faust workers' credentials, as aiokafka options faust hands to its clients."""
    from faust.transport.drivers.aiokafka import credentials_to_aiokafka_auth

    config = settings(
        tmp_path,
        kafka_bootstrap=tls.kafka_sasl_ssl,
        kafka_security_protocol="SASL_SSL",
        kafka_sasl_mechanism="SCRAM-SHA-512",
        kafka_sasl_username=SASL_USER,
        kafka_sasl_password=tls.sasl_password,
        kafka_ssl_cafile=tls.ca,
    )
    auth = dict(credentials_to_aiokafka_auth(_credentials(config)))
    assert auth["security_protocol"] == "SASL_SSL"
    name = f"tls.{uuid.uuid4().hex[:10]}"
    assert ensure_topics(kafka_config(config), name, 1, f"{name}.dlq") == [name, f"{name}.dlq"]

    async def produce_and_read() -> bytes:
        producer = AIOKafkaProducer(bootstrap_servers=tls.kafka_sasl_ssl, **auth)
        await producer.start()
        try:
            await producer.send_and_wait(name, b"through faust's options", partition=0)
        finally:
            await producer.stop()
        consumer = AIOKafkaConsumer(bootstrap_servers=tls.kafka_sasl_ssl, **auth)
        await consumer.start()
        try:
            part = TopicPartition(name, 0)
            consumer.assign([part])
            await consumer.seek_to_beginning(part)
            batch = await consumer.getmany(part, timeout_ms=10_000)
            return batch[part][0].value  # type: ignore[no-any-return]
        finally:
            await consumer.stop()

    assert asyncio.run(produce_and_read()) == b"through faust's options"
