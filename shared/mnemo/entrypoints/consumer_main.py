"""Run one consumer as its own process: a faust worker on Kafka and Cassandra in the
distributed mode (MNEMO_MODE=distributed, see mnemo.entrypoints.workers), or a runner over the
embedded storage.

The services' entry points (`python -m mnemo_registrar`, ...) call `main` with their
consumer's name. `mnemo serve` runs all four in the gateway's process, the embedded
default. Separate processes share the SQLite files (WAL mode allows it); the vector index
admits one process, so a separate indexer and a gateway that answers searches cannot run
on the same data directory at once: on one machine, keep the indexer in the gateway.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading

from mnemo import telemetry
from mnemo.bootstrap import build_consumer
from mnemo.settings import MnemoSettings, UnknownSetting, check_environment

__all__ = ["main"]


def main(consumer: str) -> None:
    try:
        check_environment()
    except UnknownSetting as exc:  # a configuration error: exit status 78 (EX_CONFIG)
        print(
            f"mnemo-{consumer}: cannot start: configuration error {exc.code}: {exc.message}",
            file=sys.stderr,
        )
        sys.exit(78)
    settings = MnemoSettings()
    if settings.mode == "distributed":
        from mnemo.entrypoints.workers import run_worker

        run_worker(consumer)
        return
    telemetry.configure_logging(settings.log_level, settings.log_format)
    telemetry.configure(consumer, prometheus_port=settings.prometheus_port)
    runner = build_consumer(settings, consumer)
    telemetry.watch_lag(lambda: {consumer: {0: runner.lag()[consumer]}})
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    logging.getLogger("mnemo").info("%s consuming %s", consumer, settings.data_dir)
    runner.start()
    try:
        stop.wait()
    finally:
        runner.stop()
        runner.index.close()
        runner.store.close()
        runner.log.close()
        telemetry.shutdown()
