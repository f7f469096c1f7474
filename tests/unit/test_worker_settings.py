"""Each consumer service reads its own prefix over the shared settings."""

from __future__ import annotations

from pathlib import Path

import pytest

from mnemo.entrypoints import consumer_main
from mnemo.settings import MnemoSettings, worker_settings


def test_a_consumer_prefix_overrides_the_shared_value_for_that_consumer_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MNEMO_BATCH_SIZE", "100")
    monkeypatch.setenv("MNEMO_INDEXER_BATCH_SIZE", "16")
    monkeypatch.setenv("MNEMO_INDEXER_HEALTH_PORT", "9102")
    indexer = worker_settings("indexer")
    assert (indexer.batch_size, indexer.health_port) == (16, 9102)
    audit = worker_settings("audit")
    assert (audit.batch_size, audit.health_port) == (100, 8081)


def test_a_bad_consumer_value_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MNEMO_DECAY_BATCH_SIZE", "0")
    with pytest.raises(ValueError, match="batch_size"):
        worker_settings("decay")


def test_a_consumer_on_embedded_storage_takes_its_own_settings_too(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """`python -m mnemo_registrar` without the distributed mode builds its runner with the
    registrar's own values over the shared ones, as the distributed worker does."""
    monkeypatch.setenv("MNEMO_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("MNEMO_BATCH_SIZE", "100")
    monkeypatch.setenv("MNEMO_REGISTRAR_BATCH_SIZE", "7")
    monkeypatch.setenv("MNEMO_REGISTRAR_LOG_LEVEL", "DEBUG")
    built: list[MnemoSettings] = []

    class Built(Exception):
        pass

    def build_consumer(settings: MnemoSettings, consumer: str) -> None:
        built.append(settings)
        raise Built

    monkeypatch.setattr(consumer_main, "build_consumer", build_consumer)
    monkeypatch.setattr(consumer_main.telemetry, "configure_logging", lambda *args: None)
    monkeypatch.setattr(consumer_main.telemetry, "configure", lambda *args, **kw: None)
    with pytest.raises(Built):
        consumer_main.main("registrar")
    assert built[0].mode == "embedded"
    assert (built[0].batch_size, built[0].log_level) == (7, "DEBUG")


def test_how_long_a_consumer_gives_way_is_its_own_over_the_shared_value(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("MNEMO_GIVE_WAY_SECONDS", "2.5")
    monkeypatch.setenv("MNEMO_GIVE_WAY_BACKLOG", "500")
    monkeypatch.setenv("MNEMO_AUDIT_GIVE_WAY_SECONDS", "0")
    audit, decay = worker_settings("audit"), worker_settings("decay")
    assert (audit.give_way_seconds, audit.give_way_backlog) == (0.0, 500)
    assert (decay.give_way_seconds, decay.give_way_backlog) == (2.5, 500)
    monkeypatch.setenv("MNEMO_DECAY_GIVE_WAY_BACKLOG", "0")
    with pytest.raises(ValueError, match="give_way_backlog"):
        worker_settings("decay")
