"""SASL to Kafka takes a mechanism, a user name and a password. One missing is a
configuration error naming it (KAFKA_SASL_INVALID, exit status 78), before any Kafka
client is built: the client library's own error names none of Mnemo's settings and left
a traceback where the topics are created."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.support import refused_start

from mnemo.bootstrap import check_kafka_sasl, kafka_config
from mnemo.domain.errors import InvalidInput
from mnemo.entrypoints.workers import ensure_topics_from
from mnemo.settings import MnemoSettings

SASL = {
    "kafka_security_protocol": "SASL_SSL",
    "kafka_sasl_mechanism": "SCRAM-SHA-512",
    "kafka_sasl_username": "mnemo",
    "kafka_sasl_password": "not-the-real-one-1234",
}


@pytest.mark.parametrize(
    "missing", ["kafka_sasl_mechanism", "kafka_sasl_username", "kafka_sasl_password"]
)
def test_sasl_without_one_of_its_settings_is_refused_by_its_name(missing: str) -> None:
    settings = MnemoSettings(**{**SASL, missing: None})
    for build in (check_kafka_sasl, kafka_config, ensure_topics_from):
        with pytest.raises(InvalidInput) as refused:
            build(settings)
        assert refused.value.code == "KAFKA_SASL_INVALID"
        assert refused.value.field == missing
        assert f"MNEMO_{missing.upper()}" in refused.value.message
        assert "not-the-real-one" not in str(refused.value)


def test_sasl_with_all_three_and_no_sasl_at_all_pass() -> None:
    check_kafka_sasl(MnemoSettings(**SASL))
    check_kafka_sasl(MnemoSettings(kafka_security_protocol="SSL"))
    check_kafka_sasl(MnemoSettings())


@pytest.mark.parametrize(
    "command",
    [["mnemo", "admin", "create-topics"], ["mnemo_registrar"]],
    ids=["create-topics", "registrar"],
)
def test_a_start_without_the_mechanism_exits_78_naming_it(
    command: list[str], tmp_path: Path
) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "MNEMO_DATA_DIR": str(tmp_path),
        "MNEMO_MODE": "distributed",
        "MNEMO_KAFKA_BOOTSTRAP": "127.0.0.1:9",
        "MNEMO_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
        "MNEMO_KAFKA_SASL_USERNAME": "mnemo",
        "MNEMO_KAFKA_SASL_PASSWORD": "not-the-real-one-1234",
        "MNEMO_VAULT_ADDR": "http://127.0.0.1:9",
        "MNEMO_VAULT_TOKEN": "hvs.not-a-token",
    }
    output = refused_start(*command, env=env)
    assert "KAFKA_SASL_INVALID" in output
    assert "MNEMO_KAFKA_SASL_MECHANISM" in output
    assert "not-the-real-one" not in output
