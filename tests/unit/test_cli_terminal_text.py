"""Stored text reaches an operator's terminal through the CLI's tables: an agent (or a
user's words) must not be able to send the terminal escape sequences."""

from __future__ import annotations

import io

from rich.console import Console

from mnemo.entrypoints.cli import describe_outcome, fields_table, memory_table

HOSTILE = "hello \x1b[31mRED\x1b[0m \x1b]0;PWNED\x07 \x9b2J\r\u202eend"


def _printed(renderable: object) -> str:
    buffer = io.StringIO()
    Console(file=buffer, width=400, color_system=None, force_terminal=False).print(renderable)
    return buffer.getvalue()


def test_tables_write_control_characters_out_instead_of_sending_them() -> None:
    memory = {
        "memory_id": "01a24611-cb4d-8ed9-8ed1-8c24c516d7b4",
        "type": "fact",
        "version": 1,
        "status": "active",
        "key": "esc",
        "value": "v\x1b[5m",
        "content": HOSTILE,
        "semantic_weight": 0.5,
        "valid_until": None,
    }
    for out in (_printed(memory_table([memory])), _printed(fields_table(memory))):
        for raw in ("\x1b", "\x07", "\x9b", "\r", "\u202e"):
            assert raw not in out
        assert "\\x1b[31mRED" in out  # still readable as what was stored
        assert "\\u202eend" in out


def test_an_outcomes_detail_is_written_out_too() -> None:
    line = describe_outcome({"outcome": "ignored", "reason_code": "X", "detail": HOSTILE})
    assert "\x1b" not in line
    assert "\\x1b" in line
