"""`mnemo toolchain ...`: start a toolchain, record its steps, show its state (the commands
of mnemo.cli; docs/toolchains.md). Outputs are read as JSON (`-` for stdin)."""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from datetime import datetime
from typing import Any

import click
from rich.console import Group
from rich.table import Table

from mnemo.cli import CliError, State, add_row, pass_state, seg, table

__all__ = ["toolchain"]


def render_toolchain(state: Mapping[str, Any]) -> Group:
    click.echo(
        f"toolchain {state['toolchain_id']} ({state['subject']}): {state['status']}, "
        f"next step: {state['next_step'] or '-'}, expires {state['expires_at']}"
    )
    steps: Table = table("step", "status", "output or error")
    done = {d["step_id"]: d for d in state["done"]}
    failed = state.get("failed") or {}
    for step_id in state["steps"]:
        if step_id in done:
            add_row(steps, step_id, "done", json.dumps(done[step_id]["output"], ensure_ascii=False))
        elif failed.get("step_id") == step_id:
            error = failed["error"]
            retry = "retryable" if error["retryable"] else "not retryable"
            why = f"{error['type']}: {error['reason']} ({retry}, attempt {failed['attempts']})"
            add_row(steps, step_id, "failed", why)
        else:
            add_row(steps, step_id, "next" if step_id == state["next_step"] else "pending", "")
    return Group(steps)


def _json_value(text: str) -> Any:
    raw = sys.stdin.read() if text == "-" else text
    try:
        return json.loads(raw, parse_constant=_no_constant)
    except ValueError as exc:
        raise CliError(f"the output is not JSON: {exc}") from exc


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


@click.group()
def toolchain() -> None:
    """Toolchains: planned tool calls that resume where they stopped."""


@toolchain.command("start")
@click.argument("toolchain_id")
@click.option("--subject", required=True, help="The stream it acts for, e.g. user:U7892.")
@click.option("--step", "steps", multiple=True, required=True, help="A planned step, in order.")
@click.option("--ttl", type=click.IntRange(min=1), default=None, help="Seconds [default: a day].")
@pass_state
def start(
    state: State, toolchain_id: str, subject: str, steps: tuple[str, ...], ttl: int | None
) -> None:
    """Start a toolchain of planned steps."""
    body: dict[str, Any] = {"toolchain_id": toolchain_id, "subject": subject, "steps": list(steps)}
    if ttl is not None:
        body["ttl_seconds"] = ttl
    state.show(state.api.call("POST", "/v1/toolchains", body=body), render_toolchain)


@toolchain.command("done")
@click.argument("toolchain_id")
@click.argument("step_id")
@click.argument("output")
@pass_state
def done(state: State, toolchain_id: str, step_id: str, output: str) -> None:
    """Record that a step completed with OUTPUT (JSON; `-` reads it from stdin)."""
    body = {"status": "completed", "output": _json_value(output)}
    path = f"/v1/toolchains/{seg(toolchain_id)}/steps/{seg(step_id)}"
    state.show(state.api.call("POST", path, body=body), render_toolchain)


@toolchain.command("failed")
@click.argument("toolchain_id")
@click.argument("step_id")
@click.option("--type", "error_type", required=True, help="A code: timeout, validation...")
@click.option("--reason", required=True)
@click.option("--field", default=None, help="The input at fault.")
@click.option("--retryable/--not-retryable", default=True, show_default=True)
@pass_state
def failed(
    state: State,
    toolchain_id: str,
    step_id: str,
    error_type: str,
    reason: str,
    field: str | None,
    retryable: bool,
) -> None:
    """Record that a step failed, and why."""
    error: dict[str, Any] = {"type": error_type, "reason": reason, "retryable": retryable}
    if field is not None:
        error["field"] = field
    path = f"/v1/toolchains/{seg(toolchain_id)}/steps/{seg(step_id)}"
    state.show(
        state.api.call("POST", path, body={"status": "failed", "error": error}), render_toolchain
    )


@toolchain.command("show")
@click.argument("toolchain_id")
@click.option(
    "--as-of",
    type=click.DateTime(["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S.%f%z"]),
    default=None,
    help="Judge expiry at this instant (with its UTC offset).",
)
@pass_state
def show(state: State, toolchain_id: str, as_of: datetime | None) -> None:
    """A toolchain's state: steps done, the failed step, what to run next."""
    params = {"as_of": as_of.isoformat()} if as_of is not None else None
    answer = state.api.call("GET", f"/v1/toolchains/{seg(toolchain_id)}", params=params)
    state.show(answer, render_toolchain)
