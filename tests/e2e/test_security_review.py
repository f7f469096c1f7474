"""The holes an outside security review found (issue 16), each probed the way the review
did. Tests that need the server to stay responsive while a hostile request runs start
`mnemo serve` as a process of its own, so that the test's own interpreter is free to
measure it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.support import auth, free_port, wait_healthy

SERVE = [sys.executable, "-m", "mnemo.cli", "serve"]
# generous bounds: a backtracking engine takes hours on these inputs, RE2 milliseconds
REQUEST_BOUND = 60.0
HEALTH_BOUND = 10.0


@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, dict[str, str]]]:
    """`mnemo serve` in a process of its own: (base URL, admin headers)."""
    port = free_port()
    env = {**os.environ, "MNEMO_EMBEDDER": "hashing", "MNEMO_LOG_LEVEL": "WARNING"}
    process = subprocess.Popen(
        [*SERVE, "--port", str(port), "--data-dir", str(tmp_path / "data")],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        assert process.stdout is not None
        shown: list[str] = []
        for line in process.stdout:
            shown.append(line)
            if line.startswith("Mnemo listening"):
                break
        keys = [w for line in shown for w in line.split() if w.startswith("mnemo_")]
        assert len(keys) == 1, shown
        wait_healthy(url, lambda: process.poll() is None)
        yield url, {**auth(keys[0], "reviewer"), "Content-Type": "application/json"}
    finally:
        process.send_signal(signal.SIGINT)
        try:
            process.communicate(timeout=20)
        except subprocess.TimeoutExpired:  # stuck in a match: nothing else stops it
            process.kill()
            process.communicate(timeout=20)


def _guarded_context(url: str, headers: dict[str, str], patterns: list[str]) -> str:
    declared = {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": "user:U1",
        "payload": {
            "memory": {
                "type": "constraint",
                "content": "Never offer credit to minors.",
                "guard": {"rule_id": "no-credit", "patterns": patterns},
            }
        },
    }
    r = httpx.post(f"{url}/v1/events?wait=registered", json=declared, headers=headers)
    assert r.status_code == 202, r.text
    assert r.json()["accepted"][0]["outcomes"][0]["outcome"] == "registered"
    ctx = httpx.post(f"{url}/v1/context", json={"subjects": ["user:U1"]}, headers=headers)
    assert ctx.status_code == 200, ctx.text
    return str(ctx.json()["request_id"])


def test_pathological_guard_patterns_run_in_linear_time_and_health_answers_meanwhile(
    served: tuple[str, dict[str, str]],
) -> None:
    """Finding 1: `(a|a)*c` and `((a+))+c` against a long run of 'a's (hours with a
    backtracking engine, which also holds the interpreter lock and so freezes /healthz)."""
    url, headers = served
    request_id = _guarded_context(url, headers, ["(a|a)*c", "((a+))+c"])
    answer: dict[str, Any] = {}

    def report() -> None:
        try:
            answer["response"] = httpx.post(
                f"{url}/v1/context/{request_id}/response",
                json={"response": "a" * 100_000},
                headers=headers,
                timeout=REQUEST_BOUND,
            )
        except httpx.HTTPError as exc:
            answer["error"] = exc

    worker = threading.Thread(target=report, daemon=True)
    worker.start()
    health: list[int] = []
    while worker.is_alive() or not health:
        started = time.monotonic()
        try:
            status = httpx.get(f"{url}/healthz", timeout=HEALTH_BOUND).status_code
        except httpx.TimeoutException:
            pytest.fail(f"/healthz did not answer within {HEALTH_BOUND} s during the match")
        assert time.monotonic() - started < HEALTH_BOUND
        health.append(status)
    worker.join(REQUEST_BOUND)
    assert "error" not in answer, f"the report did not complete: {answer.get('error')!r}"
    assert answer["response"].status_code == 200, answer["response"].text
    assert set(health) == {200}
    # the guard still works: an answer that matches breaks it
    broken = httpx.post(
        f"{url}/v1/context/{request_id}/response",
        json={"response": "a" * 1_000 + "c"},
        headers=headers,
        timeout=REQUEST_BOUND,
    )
    assert broken.status_code == 422, broken.text
    assert broken.json()["error"]["code"] == "CONSTRAINT_VIOLATION"
