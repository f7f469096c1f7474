"""A rebuild by fresh consumers into an empty keyspace after a user's forget, on a real
Kafka broker, Cassandra node and OpenBao: the user's key is shredded, so the rebuilding
consumers read every word of theirs as the redaction marker, and still reach the live read
models (the same checksum) without adding an event to the log.

The consumers' partition processors are driven in-process (tests/distributed_support)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from tests.distributed_support import Pump, distributed_settings, running_distributed

from mnemo.bootstrap import Platform
from mnemo.ports import MemoryQuery
from mnemo.service.app import RequestContext
from mnemo.service.context import ContextRequest

CTX = RequestContext("acme", "agent")
S = "user:R1"


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    with running_distributed(distributed_settings(tmp_path / "data", partitions=2)) as built:
        yield built


def event(type_: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"type": type_, "schema_version": 1, "stream": S, "payload": payload}


def test_a_rebuild_after_forgetting_a_user_gives_the_live_read_models(
    platform: Platform, tmp_path: Path
) -> None:
    pump = Pump(platform)
    error = {"type": "unavailable", "field": "amount", "reason": "PSP down", "retryable": True}
    drink = {"memory": {"type": "preference", "content": "tea", "key": "drink", "value": "tea"}}
    steps: list[dict[str, Any]] = [
        event("ToolchainStarted", {"toolchain_id": "pay-1", "steps": ["order", "link"]}),
        event(
            "ToolchainStepCompleted",
            {"toolchain_id": "pay-1", "step_id": "order", "output": json.dumps({"id": 1})},
        ),
        event("ToolchainStepFailed", {"toolchain_id": "pay-1", "step_id": "link", "error": error}),
        event(
            "ToolchainStepFailed",
            {
                "toolchain_id": "pay-1",
                "step_id": "link",
                "error": {**error, "reason": "PSP said no"},
            },
        ),
        event("MemoryDeclared", drink),
    ]
    for one in steps:  # one at a time: each decided before the next is sent
        platform.app.publish(CTX, [one])
        pump.drain()
    platform.app.publish(CTX, [event("MemoryDeclared", drink)])  # a duplicate
    pump.drain()
    [registered] = platform.store.query("acme", MemoryQuery(stream=S))
    memory_id = registered.memory_id
    # citations, whose request ids are sealed with the user's words: one from a reported
    # answer, one published before the registrar recorded its context
    first = platform.app.context(CTX, ContextRequest(subjects=(S,), budget=2_000)).request_id
    pump.drain()
    platform.app.report(CTX, first, f'Tea <memory_ref id="{memory_id}"/>')
    second = platform.app.context(CTX, ContextRequest(subjects=(S,), budget=2_000)).request_id
    cite = {"memory_id": memory_id, "request_id": second, "position": "beginning"}
    platform.app.publish(CTX, [event("MemoryCited", cite)])
    pump.drain()
    for request_id in (first, second):
        record = platform.store.context_record("acme", request_id)
        assert record is not None
        assert record.credited_by(memory_id) is not None
    platform.app.publish(CTX, [event("ForgetRequested", {})])
    pump.drain()
    live = platform.store.checksum()
    logged = platform.log.stream_head("acme", S)
    fresh = platform.settings.model_copy(
        update={
            "cassandra_keyspace": f"{platform.settings.cassandra_keyspace}_r",
            "data_dir": tmp_path / "rebuild",
        }
    )
    with running_distributed(fresh, "rebuild") as rebuilt:
        Pump(rebuilt).drain(timeout=300)
        assert rebuilt.store.checksum() == live
    # what the rebuilding consumers emitted again (the decay consumer's decisions, under
    # the ids they had) the sequencer drops as the copies they are: the log holds no new
    # event, and the live read models are as they were
    pump.drain()
    assert platform.log.stream_head("acme", S) == logged
    assert platform.store.checksum() == live
