"""Each consumer service reads its own prefix over the shared settings."""

from __future__ import annotations

import pytest

from mnemo.settings import worker_settings


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
