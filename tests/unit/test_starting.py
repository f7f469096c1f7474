"""A process that cannot start: waiting for a service that is not there yet is retried,
a configuration error is not (it names the setting and exits with status 78)."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from tests.support import refused_start

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


# ---- a rules or policy file Mnemo refuses -------------------------------------------------

BAD_TRIGGERS = """\
tools:
  - name: crm.get_deal
    arguments: [client]
triggers:
  - id: stale-proposal
    when:
      key: stage
      older_than: 1d
    suggest:
      tool: crm.fetch
      arguments:
        client: "{stream}"
"""


@pytest.fixture
def bad_triggers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    path = tmp_path / "triggers.yaml"
    path.write_text(BAD_TRIGGERS, encoding="utf-8")
    monkeypatch.setenv("MNEMO_TRIGGERS_FILE", str(path))
    monkeypatch.setenv("MNEMO_EMBEDDER", "hashing")
    return path


def test_a_refused_rules_file_is_a_configuration_error_naming_the_setting_and_the_line(
    bad_triggers: Path,
) -> None:
    from mnemo.bootstrap import check_setting_files
    from mnemo.settings import MnemoSettings

    with pytest.raises(InvalidInput) as got:
        check_setting_files(MnemoSettings())
    assert got.value.code == "INVALID_SETTING"
    assert got.value.field == "triggers_file"
    assert f"{bad_triggers}:10: trigger 'stale-proposal': unknown tool 'crm.fetch'" in str(
        got.value.message
    )


def test_a_distributed_process_refuses_a_bad_rules_file_before_it_connects(
    bad_triggers: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """The preflight, which runs before the topics and the keyspace are made: the file used
    to be read half-way through build_distributed, after both were made, and the process
    died with a traceback (exit 1)."""
    from mnemo.entrypoints import workers
    from mnemo.settings import MnemoSettings

    settings = MnemoSettings(
        mode="distributed", vault_addr="http://127.0.0.1:1", vault_token="not-a-real-token"
    )
    with caplog.at_level(logging.ERROR, "mnemo.worker"), pytest.raises(ConfigurationError) as got:
        workers._preflight(settings)
    assert got.value.code == 78
    assert got.value.setting == "MNEMO_TRIGGERS_FILE"
    assert "unknown tool 'crm.fetch'" in caplog.text
    assert "not-a-real-token" not in caplog.text


def test_mnemo_serve_stops_with_status_78_on_a_bad_rules_file(
    bad_triggers: Path, tmp_path: Path
) -> None:
    from click.testing import CliRunner

    from mnemo.entrypoints import cli

    done = CliRunner().invoke(cli.cli, ["serve", "--data-dir", str(tmp_path / "data")])
    assert done.exit_code == 78, done.output
    assert "configuration error INVALID_SETTING (setting MNEMO_TRIGGERS_FILE)" in done.output
    assert "unknown tool 'crm.fetch'" in done.output
    assert not (tmp_path / "data").exists()  # nothing was made


def test_mnemo_serve_stops_with_status_78_on_a_vault_without_a_token(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from click.testing import CliRunner

    from mnemo.entrypoints import cli

    monkeypatch.setenv("MNEMO_EMBEDDER", "hashing")
    monkeypatch.setenv("MNEMO_VAULT_ADDR", "http://127.0.0.1:1")
    monkeypatch.delenv("MNEMO_VAULT_TOKEN", raising=False)
    monkeypatch.delenv("MNEMO_VAULT_TOKEN_FILE", raising=False)
    done = CliRunner().invoke(cli.cli, ["serve", "--data-dir", str(tmp_path / "data")])
    assert done.exit_code == 78, done.output
    assert "configuration error VAULT_TOKEN_MISSING (setting MNEMO_VAULT_TOKEN)" in done.output


@pytest.mark.parametrize("setting", ["MNEMO_DECAY_POLICY_FILE", "MNEMO_PII_POLICY_FILE"])
def test_a_refused_policy_file_is_named_without_quoting_what_it_holds(
    setting: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A token file named by mistake: the error says where and why, never the token
    (pydantic's own text quotes the values it refused)."""
    from mnemo.bootstrap import check_setting_files
    from mnemo.settings import MnemoSettings

    secret = "s.NOT-TO-BE-PRINTED-5f3a9c"
    path = tmp_path / "token"
    path.write_text(secret + "\n", encoding="utf-8")
    monkeypatch.setenv(setting, str(path))
    with pytest.raises(InvalidInput) as got:
        check_setting_files(MnemoSettings())
    assert got.value.code == "INVALID_SETTING"
    assert got.value.field == setting.removeprefix("MNEMO_").lower()
    assert str(path) in got.value.message
    assert secret not in got.value.message


def test_an_embedded_consumer_stops_with_status_78_on_a_bad_rules_file(
    bad_triggers: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from mnemo.entrypoints import consumer_main

    def building(*_: object) -> None:
        raise AssertionError("the consumer went on to start")

    monkeypatch.setattr(consumer_main, "build_consumer", building)
    monkeypatch.setenv("MNEMO_DATA_DIR", str(tmp_path / "data"))
    with pytest.raises(SystemExit) as got:
        consumer_main.main("registrar")
    assert got.value.code == 78
    err = capsys.readouterr().err
    assert "configuration error INVALID_SETTING (setting MNEMO_TRIGGERS_FILE)" in err
    assert not (tmp_path / "data").exists()


def test_an_indexer_process_without_a_qdrant_server_does_not_start(tmp_path: Path) -> None:
    """`python -m mnemo_indexer` in the distributed mode without MNEMO_QDRANT_URL would
    index into a private store of its own, which no gateway searches, and take partitions
    from the co-located indexer's group: exit status 78, QDRANT_REQUIRED, before it
    touches the vault, Kafka or Cassandra (none of them is reachable here)."""
    env = {
        "PATH": "/usr/bin:/bin",
        "MNEMO_DATA_DIR": str(tmp_path / "data"),
        "MNEMO_MODE": "distributed",
        "MNEMO_KAFKA_BOOTSTRAP": "127.0.0.1:9",
        "MNEMO_CASSANDRA_HOSTS": "127.0.0.1",
        "MNEMO_CASSANDRA_PORT": "9",
        "MNEMO_VAULT_ADDR": "http://127.0.0.1:9",
        "MNEMO_VAULT_TOKEN": "not-a-real-token",
    }
    output = refused_start("mnemo_indexer", env=env)
    assert "QDRANT_REQUIRED" in output
    assert "MNEMO_QDRANT_URL" in output
    assert "not-a-real-token" not in output
    # the registrar takes no Qdrant server: the same environment gets past this check
    from mnemo.entrypoints import workers
    from mnemo.settings import MnemoSettings

    settings = MnemoSettings(
        mode="distributed", vault_addr="http://127.0.0.1:9", vault_token="not-a-real-token"
    )
    workers._preflight(settings)
    with pytest.raises(ConfigurationError):
        workers._preflight(settings, indexer=True)
