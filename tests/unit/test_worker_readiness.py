"""What a distributed worker's /readyz answers, and what `mnemo status` makes of it: a
worker whose batch keeps failing (the indexer with its Qdrant server away, which the
Cassandra and Kafka pings do not reach) is not ready, and says why."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from mnemo.entrypoints.admin import _not_ready
from mnemo.entrypoints.workers import readiness_status


def checks(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "cassandra": "ok",
        "kafka": "ok",
        "failing_batches": 0,
        "partitions": {"held": [0, 1], "fenced": []},
    }
    return {**base, **over}


def test_a_worker_whose_dependencies_answer_is_ready() -> None:
    assert readiness_status(checks()) == "ready"


def test_a_worker_whose_batch_keeps_failing_is_not_ready() -> None:
    failing = checks(failing_batches=4, last_error="VECTOR_INDEX_UNAVAILABLE")
    assert readiness_status(failing) == "failing"


@pytest.mark.parametrize("dependency", ["cassandra", "kafka"])
def test_a_worker_whose_store_or_log_does_not_answer_is_not_ready(dependency: str) -> None:
    assert readiness_status(checks(**{dependency: "STORE_UNAVAILABLE"})) == "not_ready"
    assert readiness_status(checks(failing_batches=2, **{dependency: "X"})) == "not_ready"


def test_a_fenced_worker_says_so_even_while_its_commits_fail() -> None:
    fenced = {"held": [0, 1], "fenced": [1]}
    assert readiness_status(checks(partitions=fenced)) == "fenced"
    assert readiness_status(checks(partitions=fenced, failing_batches=3)) == "fenced"


@pytest.mark.parametrize(
    ("body", "shown"),
    [
        ({"status": "failing"}, "failing"),
        ({"status": "fenced"}, "fenced"),
        ({"status": "not_ready"}, "not_ready"),
        ({"status": "something else"}, "not_ready"),
    ],
)
def test_the_status_page_shows_why_a_component_is_not_ready(
    body: dict[str, str], shown: str
) -> None:
    assert _not_ready(httpx.Response(503, json=body)) == shown


@pytest.mark.parametrize("failures", [1, 2])
def test_a_batch_retried_once_or_twice_is_no_outage(failures: int) -> None:
    assert readiness_status(checks(failing_batches=failures)) == "ready"
    assert readiness_status(checks(failing_batches=failures + 2)) == "failing"
