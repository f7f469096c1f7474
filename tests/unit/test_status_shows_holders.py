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
    assert "the lag and the log head could not be read: STORE_UNAVAILABLE" in said
    assert "the read-model counts could not be read: STORE_UNAVAILABLE" in said
