"""What runs before the log records events (a key shredded for a request to forget) runs
only for events the log will record: never for one it refuses or holds already."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from mnemo.adapters.sqlite_log import SqliteEventLog
from mnemo.domain.errors import ConflictError
from mnemo.domain.events import Envelope, validate_envelope
from mnemo.domain.ids import new_event_id
from mnemo.ports import EventLog


def _event(stream: str, expected_seq: int | None = None, event_id: str | None = None) -> Envelope:
    now = datetime.now(UTC)
    raw = {
        "event_id": event_id or new_event_id(now),
        "type": "MemoryDeclared",
        "schema_version": 1,
        "tenant": "acme",
        "stream": stream,
        "occurred_at": now.isoformat(),
        "actor": {"kind": "agent", "id": "a1"},
        "payload": {"memory": {"type": "fact", "content": "x"}},
    }
    if expected_seq is not None:
        raw["expected_seq"] = expected_seq
    return validate_envelope(raw)


class _Lagging(SqliteEventLog):
    """A log whose heads lag by one event, as the distributed log's archive may."""

    def stream_head(self, tenant: str, stream: str) -> int:
        return max(0, super().stream_head(tenant, stream) - 1)


@pytest.fixture(params=["in the transaction", "the port's default, on a lagging log"])
def guarded(request: pytest.FixtureRequest, tmp_path: Path):  # type: ignore[no-untyped-def]
    if request.param == "in the transaction":
        log = SqliteEventLog(tmp_path / "log.sqlite3")
        return log, log.append_guarded
    lagging = _Lagging(tmp_path / "log.sqlite3")
    return lagging, lambda events, before: EventLog.append_guarded(lagging, events, before)


def test_before_sees_the_events_recorded_and_nothing_runs_for_a_refused_batch(guarded) -> None:  # type: ignore[no-untyped-def]
    log, append_guarded = guarded
    seen: list[list[str]] = []

    def before(events: list[Envelope]) -> None:
        seen.append([e.event_id for e in events])

    first = _event("user:a")
    second = _event("user:a")
    append_guarded([first, second], before)
    assert seen == [[first.event_id, second.event_id]]
    # an id the log holds is not handed to `before`; a new one is
    third = _event("user:a")
    append_guarded([_event("user:a", event_id=first.event_id), third], before)
    assert seen[-1] == [third.event_id]
    # a sequence below the head: refused, `before` not called, nothing appended
    head = log.head()
    with pytest.raises(ConflictError) as refused:
        append_guarded([_event("user:b"), _event("user:a", expected_seq=1)], before)
    assert refused.value.code == "STALE_SEQUENCE"
    assert len(seen) == 2
    assert log.head() == head


def test_what_before_raises_leaves_the_log_as_it_was(guarded) -> None:  # type: ignore[no-untyped-def]
    log, append_guarded = guarded

    def vault_down(events: list[Envelope]) -> None:
        raise RuntimeError("vault down")

    with pytest.raises(RuntimeError):
        append_guarded([_event("user:a")], vault_down)
    assert log.head() == 0
    assert log.stream_head("acme", "user:a") == 0
