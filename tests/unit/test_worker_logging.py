"""A consumer's root logger stays at the level its settings give, whatever faust does for
its terminal spinner."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import faust
import pytest

from mnemo.entrypoints.workers import faust_worker
from mnemo.settings import MnemoSettings


@pytest.fixture
def root_logging() -> Iterator[logging.Logger]:
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    yield root
    root.setLevel(level)
    root.handlers[:] = handlers


@pytest.mark.parametrize("level", ["WARNING", "ERROR", "INFO"])
def test_the_root_logger_is_at_the_configured_level_and_drops_debug_lines(
    root_logging: logging.Logger, level: str
) -> None:
    app = faust.App("mnemo-logging-test", broker="kafka://127.0.0.1:1", autodiscover=False)
    worker = faust_worker(app, MnemoSettings(log_level=level, log_format="text"), "audit")
    worker._setup_logging()
    assert root_logging.level == getattr(logging, level)
    seen: list[logging.LogRecord] = []
    counter = logging.Handler()
    counter.emit = seen.append  # type: ignore[method-assign]
    root_logging.addHandler(counter)
    # a debug line of a library (the Kafka client's fetcher) is not even built
    library = logging.getLogger("aiokafka.consumer.fetcher")
    library.debug("fetching")
    library.error("refused")
    assert [r.getMessage() for r in seen] == ["refused"]
