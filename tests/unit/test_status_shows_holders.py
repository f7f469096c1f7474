"""`mnemo status` on a distributed deployment shows the processes holding each consumer's
partitions (one row per replica at work), from the claims that fence the partitions."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

from mnemo.entrypoints.cli import render_distributed_status


def shown(status: dict[str, Any]) -> str:
    console = Console(record=True, width=200)
    console.print(render_distributed_status(status))
    return console.export_text()


def test_one_row_per_process_holding_partitions() -> None:
    status = {
        "mode": "distributed",
        "topic": "mnemo.events",
        "log_head": 12,
        "dead_letters": 0,
        "lag": {"registrar": 0, "indexer": 3},
        "partitions": {"registrar": {"0": 0, "1": 0, "2": 0}, "indexer": {"0": 3, "1": 0}},
        "components": {"gateway": "ready", "registrar": "ready", "indexer": "ready"},
        "holders": {
            "registrar": {"pod-b/7/aa11bb": [2], "pod-a/9/cc22dd": [0, 1]},
            "indexer": {"pod-c/3/ee33ff": [0, 1, 2]},
        },
    }
    text = shown(status)
    rows = [line.split() for line in text.splitlines() if "pod-" in line]
    cells = [[c for c in row if c not in {"│", "┃", "|"}] for row in rows]
    assert cells == [
        ["registrar", "pod-a/9/cc22dd", "0,1"],
        ["registrar", "pod-b/7/aa11bb", "2"],
        ["indexer", "pod-c/3/ee33ff", "0,1,2"],
    ], text


def test_no_holder_table_when_they_could_not_be_read(capsys: pytest.CaptureFixture[str]) -> None:
    text = shown(
        {
            "mode": "distributed",
            "topic": "mnemo.events",
            "log_head": 0,
            "dead_letters": None,
            "error": "STORE_UNAVAILABLE",
            "lag": {},
            "components": {"gateway": "ready"},
            "counts_error": "STORE_UNAVAILABLE",
        }
    )
    assert "process (host/pid)" not in text
    said = capsys.readouterr().out
    assert "the lag could not be read: STORE_UNAVAILABLE" in said
    assert "0 records, unknown dead letters" in said
    assert "the read-model counts could not be read: STORE_UNAVAILABLE" in said


def test_a_failed_holders_read_keeps_the_lag(monkeypatch: pytest.MonkeyPatch) -> None:
    """The holders are read after the lag: when only they fail, the lag stays and the
    status says which part could not be read (and the lag's failure drops `partitions`)."""
    from types import SimpleNamespace

    from mnemo.domain.errors import Unavailable
    from mnemo.entrypoints import admin

    monkeypatch.setattr(admin, "backing_services", lambda platform: {})

    def down(*args: object) -> Any:
        raise Unavailable("the store is down", code="STORE_UNAVAILABLE")

    topic = SimpleNamespace(
        name="mnemo.events",
        reachable=lambda: None,
        end_offsets=lambda: {0: 5, 1: 7},
        dead_letter_count=lambda: 0,
    )
    progress = SimpleNamespace(lag=lambda: {"registrar": {0: 0, 1: 2}}, holders=down)
    platform = SimpleNamespace(distributed=SimpleNamespace(topic=topic, progress=progress))
    body = admin.distributed_status(platform, "")  # type: ignore[arg-type]
    assert body["lag"] == {"registrar": 2}
    assert body["log_head"] == 12
    assert body["partitions"] == {"registrar": {"0": 0, "1": 2}}
    assert body["holders_error"] == "STORE_UNAVAILABLE"
    assert "holders" not in body
    assert "error" not in body

    progress.lag = down
    body = admin.distributed_status(platform, "")  # type: ignore[arg-type]
    assert body["error"] == "STORE_UNAVAILABLE"
    assert "partitions" not in body
    assert "holders" not in body
    # the log head is Kafka's: it is still known while the store is down
    assert (body["log_head"], body["lag"], body["dead_letters"]) == (12, {}, 0)

    def log_down(*args: object) -> Any:
        raise Unavailable("the event log (Kafka) is unavailable", code="LOG_UNAVAILABLE")

    # the brokers down: said at once, the head and the dead letters unknown, not 0
    topic.reachable = log_down
    topic.end_offsets = topic.dead_letter_count = progress.lag = progress.holders = None
    body = admin.distributed_status(platform, "")  # type: ignore[arg-type]
    assert body["error"] == "LOG_UNAVAILABLE"
    assert (body["log_head"], body["dead_letters"], body["lag"]) == (None, None, {})
    assert shown(body)  # the CLI renders it


def test_a_tenant_admins_status_says_nothing_of_the_log_it_was_not_given(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Without the operator token the gateway leaves out the topic, the log's size and the
    dead letters: the status does not show them as unknown, as if the brokers were down."""
    text = shown(
        {
            "mode": "distributed",
            "lag": {"registrar": 0},
            "components": {"gateway": "ready", "registrar": "ready"},
        }
    )
    said = capsys.readouterr().out
    assert said.splitlines()[0] == "Mnemo (distributed)"
    assert "unknown" not in said
    assert "registrar" in text
