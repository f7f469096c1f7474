"""Run one consumer as its own process over the embedded storage.

The services' entry points (`python -m mnemo_registrar`, ...) call `main` with their
consumer's name. `mnemo serve` runs all four in the gateway's process instead, which is
the embedded default; in distributed mode each consumer runs over Kafka instead.
"""

from __future__ import annotations

import logging
import signal
import threading

from mnemo.bootstrap import build_embedded
from mnemo.settings import MnemoSettings

__all__ = ["main"]


def main(consumer: str) -> None:
    settings = MnemoSettings()
    logging.basicConfig(
        level=settings.log_level, format="%(asctime)s %(name)s %(levelname)s %(message)s"
    )
    platform = build_embedded(settings, consumers=(consumer,))
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    logging.getLogger("mnemo").info("%s consuming %s", consumer, settings.data_dir)
    platform.runner.start()
    try:
        stop.wait()
    finally:
        platform.close()
