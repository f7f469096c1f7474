"""A process that cannot start: waiting for a service that is not there yet is retried,
a configuration error is not (it names the setting and exits with status 78)."""

from __future__ import annotations

import logging

import pytest

from mnemo.domain.errors import InvalidInput, Unavailable
from mnemo.entrypoints.workers import ConfigurationError, _starting


def test_a_configuration_error_fails_at_once_naming_the_setting(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = 0

    def build() -> None:
        nonlocal calls
        calls += 1
        raise InvalidInput(
            "MNEMO_VAULT_ADDR is set but MNEMO_VAULT_TOKEN is not",
            code="VAULT_TOKEN_MISSING",
            field="vault_token",
        )

    with caplog.at_level(logging.ERROR, "mnemo.worker"), pytest.raises(ConfigurationError) as got:
        _starting("starting the worker", build, attempts=20, delay=0.0)
    assert calls == 1
    assert got.value.code == 78
    assert "VAULT_TOKEN_MISSING" in got.value.message
    assert "MNEMO_VAULT_TOKEN" in got.value.message
    assert got.value.message in caplog.text


def test_a_service_not_reachable_yet_is_waited_for() -> None:
    calls = 0

    def build() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise Unavailable("Cassandra is not there yet", code="STORE_UNAVAILABLE")
        return "built"

    assert _starting("connecting", build, attempts=5, delay=0.0) == "built"
    assert calls == 3


def test_a_service_that_never_comes_is_given_up_on() -> None:
    def build() -> None:
        raise ConnectionRefusedError("nothing listens")

    with pytest.raises(ConnectionRefusedError):
        _starting("connecting", build, attempts=3, delay=0.0)
