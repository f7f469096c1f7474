"""Run one consumer as its own process: a faust worker on Kafka and Cassandra in the
distributed mode (MNEMO_MODE=distributed, see mnemo.entrypoints.workers), or a runner over the
embedded storage.

The services' entry points (`python -m mnemo_registrar`, ...) call `main` with their
consumer's name. They are generated from the table of consumers (mnemo.handlers.registry)
by `make consumer-services` (`python -m mnemo.entrypoints.consumer_main <repo>`, see
`service_files`); a unit test keeps them equal. `mnemo serve` runs every consumer in the
gateway's process, the embedded default. Separate processes share the SQLite files (WAL
mode allows it); the vector index admits one process, so a separate indexer and a gateway
that answers searches cannot run on the same data directory at once: on one machine, keep
the indexer in the gateway.
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from pathlib import Path
from typing import NoReturn

from mnemo import telemetry
from mnemo.bootstrap import build_consumer, check_setting_files
from mnemo.domain.errors import InvalidInput
from mnemo.handlers import registry
from mnemo.settings import check_environment, check_setting_values, worker_settings

__all__ = ["main", "service_files", "write_service_files"]


def main(consumer: str) -> None:
    try:
        check_environment()
        check_setting_values()
    except InvalidInput as exc:  # a configuration error: exit status 78 (EX_CONFIG)
        print(
            f"mnemo-{consumer}: cannot start: configuration error {exc.code}: {exc.message}",
            file=sys.stderr,
        )
        sys.exit(78)
    # the consumer's own values (MNEMO_REGISTRAR_BATCH_SIZE, ...) over the shared ones, in
    # either mode
    settings = worker_settings(consumer)
    if settings.mode == "distributed":
        from mnemo.entrypoints.workers import run_worker

        run_worker(consumer)
        return
    try:
        check_setting_files(settings)
    except InvalidInput as exc:  # a rules or policy file Mnemo refuses: exit status 78 too
        _refused(consumer, exc)
    telemetry.configure_logging(settings.log_level, settings.log_format)
    telemetry.configure(consumer, prometheus_port=settings.prometheus_port)
    try:
        runner = build_consumer(settings, consumer)
    except InvalidInput as exc:  # a vault without the data directory's keys, for one
        _refused(consumer, exc)
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


def _refused(consumer: str, exc: InvalidInput) -> NoReturn:
    """A configuration error at the start: exit status 78, naming the setting."""
    print(
        f"mnemo-{consumer}: cannot start: configuration error {exc.code} "
        f"(setting MNEMO_{(exc.field or '').upper()}): {exc.message}",
        file=sys.stderr,
    )
    sys.exit(78)


def service_files(consumer: registry.Consumer) -> dict[str, str]:
    """The package of a consumer's service (`services/<name>/mnemo_<name>`), path (from the
    repository) to text: what makes `python -m mnemo_<name>` run it."""
    package = f"services/{consumer.name}/{consumer.module}"
    header = "(generated from mnemo.handlers.registry by `make consumer-services`)"
    return {
        f"{package}/__init__.py": f'"""Mnemo\'s {consumer.name} service\n{header}."""\n',
        f"{package}/__main__.py": (
            f'"""Entry point: run the {consumer.name} consumer (`python -m {consumer.module}`)'
            f'\n{header}."""\n\n'
            "from mnemo.entrypoints.consumer_main import main\n\n"
            'if __name__ == "__main__":\n'
            f'    main("{consumer.name}")\n'
        ),
    }


def write_service_files(repo: Path) -> list[Path]:
    """Write every consumer's service package under `repo`; the files it wrote anew."""
    written = []
    for consumer in registry.CONSUMERS:
        for name, text in service_files(consumer).items():
            path = repo / name
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                path.parent.mkdir(parents=True, exist_ok=True)
                path.write_text(text, encoding="utf-8")
                written.append(path)
    return written


if __name__ == "__main__":  # python -m mnemo.entrypoints.consumer_main <repository>
    for path in write_service_files(Path(sys.argv[1] if len(sys.argv) > 1 else ".")):
        print(f"wrote {path}")
