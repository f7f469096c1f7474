"""A server's start-up heap is out of the cyclic collector's walks before it serves
(mnemo.entrypoints.heap): `mnemo serve`, the distributed gateway and every consumer."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from mnemo.entrypoints import cli


@pytest.fixture
def thawed() -> Iterator[None]:
    gc.unfreeze()
    yield
    gc.unfreeze()  # what a test froze goes back to the collector


def test_the_embedded_server_freezes_what_start_up_made_before_it_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, thawed: None
) -> None:
    import uvicorn

    seen: dict[str, Any] = {}

    def serving(app: Any, **options: Any) -> None:
        seen["frozen"] = gc.get_freeze_count()
        seen["app"] = app

    monkeypatch.setattr(uvicorn, "run", serving)
    monkeypatch.setenv("MNEMO_EMBEDDER", "hashing")
    assert gc.get_freeze_count() == 0
    from click.testing import CliRunner

    done = CliRunner().invoke(cli.cli, ["serve", "--data-dir", str(tmp_path / "data")])
    assert done.exit_code == 0, done.output
    assert seen["app"] is not None
    # the platform, the app and every module loaded by then: far more than a handful
    assert seen["frozen"] > 50_000


def test_the_distributed_gateway_freezes_what_start_up_made_before_it_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, thawed: None
) -> None:
    """`python -m mnemo_gateway` in the distributed mode with a Qdrant server: the wiring
    is the embedded platform here (the real one needs Kafka, Cassandra and OpenBao, and
    tests/e2e starts it so); what is checked is that the heap is frozen when it serves."""
    import uvicorn

    from mnemo.bootstrap import build_embedded
    from mnemo.entrypoints import workers
    from mnemo.settings import GatewaySettings, MnemoSettings

    seen: dict[str, int] = {}
    monkeypatch.setattr(uvicorn, "run", lambda app, **_: seen.update(frozen=gc.get_freeze_count()))
    monkeypatch.setattr(workers, "_preflight", lambda settings: None)
    monkeypatch.setattr(workers, "ensure_topics_from", lambda settings: [])
    monkeypatch.setattr(workers, "check_qdrant_access", lambda settings: None)
    settings = MnemoSettings(
        data_dir=tmp_path / "data", embedder="hashing", qdrant_url="http://127.0.0.1:1"
    )
    local = settings.model_copy(update={"qdrant_url": None})
    monkeypatch.setattr(workers, "build_distributed", lambda s, role: build_embedded(local))
    assert gc.get_freeze_count() == 0
    workers.run_gateway(settings, GatewaySettings())
    assert seen["frozen"] > 50_000


def test_a_consumer_freezes_what_start_up_made_before_it_consumes(
    monkeypatch: pytest.MonkeyPatch, thawed: None
) -> None:
    """`Worker.run` (every `python -m mnemo_<consumer>`): the heap is frozen when faust's
    worker takes over. The worker here is what `run` reads of a wired one; building a real
    one needs Kafka, Cassandra and OpenBao (tests/e2e starts them so)."""
    from types import SimpleNamespace

    import faust.worker

    from mnemo import telemetry
    from mnemo.entrypoints import workers
    from mnemo.settings import MnemoSettings

    seen: dict[str, int] = {}
    closed: list[str] = []

    class Faust:
        def __init__(self, app: Any, **options: Any) -> None:
            pass

        def execute_from_commandline(self) -> None:
            seen["frozen"] = gc.get_freeze_count()

    monkeypatch.setattr(faust.worker, "Worker", Faust)
    monkeypatch.setattr(telemetry, "shutdown", lambda: closed.append("telemetry"))
    wired = SimpleNamespace(
        consumer="registrar",
        settings=MnemoSettings(),
        app=SimpleNamespace(conf=SimpleNamespace(id="mnemo-registrar")),
        _unwatch=lambda: closed.append("watch"),
        executor=SimpleNamespace(shutdown=lambda wait: closed.append("executor")),
        platform=SimpleNamespace(close=lambda: closed.append("platform")),
    )
    assert gc.get_freeze_count() == 0
    workers.Worker.run(wired)  # type: ignore[arg-type]
    # start-up's modules at least (faust, the drivers, Mnemo): far more than a handful
    assert seen["frozen"] > 50_000
    assert closed == ["watch", "executor", "platform", "telemetry"]
