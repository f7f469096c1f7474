"""What the edge refuses before anything reaches the log: a blank turn, a time zone that
is no zone, a time given as a number, a guard that every answer would violate. Each with
its own code; what the log already holds is read back as it was accepted."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from pydantic import ValidationError

from mnemo.domain.errors import InvalidInput
from mnemo.domain.events import Envelope, decode_payload, validate_envelope
from mnemo.domain.ids import new_event_id
from mnemo.domain.rules import zone_of
from mnemo.domain.timeexpr import resolve, zone_name_error


def _raw(event_type: str, payload: dict[str, Any], **extra: Any) -> dict[str, Any]:
    now = datetime.now(UTC)
    return {
        "event_id": new_event_id(now),
        "type": event_type,
        "schema_version": 2 if event_type == "ObservationRecorded" else 1,
        "tenant": "acme",
        "stream": "user:u1",
        "occurred_at": now.isoformat(),
        "actor": {"kind": "agent", "id": "a1"},
        "payload": payload,
        **extra,
    }


def _code(raw: dict[str, Any]) -> str:
    with pytest.raises(InvalidInput) as refused:
        validate_envelope(raw)
    return refused.value.code


@pytest.mark.parametrize("text", ["   ", "\n\t ", "\u3000"])
def test_a_blank_turn_or_utterance_is_refused(text: str) -> None:
    for kind in ("turn", "utterance"):
        assert _code(_raw("ObservationRecorded", {"text": text, "kind": kind})) == "BLANK_TEXT"


BAD_ZONES = ["+99:00", "+24:00", "+08:60", "-13:00", "+14:30", "Mars/Olympus", "localtime",
             "Factory", "posix/Asia/Shanghai", "right/UTC", "America", "Etc"]  # fmt: skip
GOOD_ZONES = ["+08:00", "-12:00", "+14:00", "+0530", "Asia/Shanghai", "UTC", "America/New_York"]


@pytest.mark.parametrize("zone", BAD_ZONES)
def test_a_time_zone_that_is_no_zone_is_refused_at_the_edge(zone: str) -> None:
    turn = {"text": "hi", "kind": "turn", "timezone": zone}
    assert _code(_raw("ObservationRecorded", turn)) == "INVALID_TIMEZONE"
    declared = {"memory": {"type": "fact", "content": "x", "timezone": zone}}
    assert _code(_raw("MemoryDeclared", declared)) == "INVALID_TIMEZONE"
    assert zone_name_error(zone) is not None
    with pytest.raises(ValueError, match=r"zone|offset|IANA"):
        zone_of(zone)


@pytest.mark.parametrize("zone", GOOD_ZONES)
def test_an_iana_name_or_an_offset_in_range_is_taken(zone: str) -> None:
    envelope = validate_envelope(
        _raw("ObservationRecorded", {"text": "hi", "kind": "turn", "timezone": zone})
    )
    assert envelope.payload["timezone"] == zone
    assert zone_name_error(zone) is None


def test_the_log_reads_back_what_it_holds_whatever_the_edge_now_refuses() -> None:
    raw = _raw("ObservationRecorded", {"text": "hi", "kind": "turn", "timezone": "+99:00"})
    held = Envelope.model_validate(raw)  # read from the log: no edge context
    assert held.payload["timezone"] == "+99:00"


# a string holding a number was read as seconds since 1970 (a 2023 date, accepted)
@pytest.mark.parametrize(
    "number", [1_700_000_000, 0, 1.7e9, "1700000000", "1700000000.5", " 17e8 ", "-1"]
)
def test_a_time_given_as_a_number_is_refused(number: float | str) -> None:
    raw = _raw("MemoryDeclared", {"memory": {"type": "fact", "content": "x"}})
    raw["occurred_at"] = number
    assert _code(raw) == "INVALID_TIME"
    for field in ("valid_until", "stale_after"):
        declared = {"memory": {"type": "fact", "content": "x", field: number}}
        assert _code(_raw("MemoryDeclared", declared)) == "INVALID_TIME"


@pytest.mark.parametrize("pattern", ["", "x?", "(a|)", "\\s*"])
def test_a_guard_that_matches_empty_text_is_refused(pattern: str) -> None:
    memory = {"type": "constraint", "content": "be polite",
              "guard": {"rule_id": "g", "patterns": ["rude", pattern]}}  # fmt: skip
    assert _code(_raw("MemoryDeclared", {"memory": memory})) == "PATTERN_MATCHES_EVERYTHING"


def test_a_guard_that_needs_a_word_is_taken() -> None:
    memory = {"type": "constraint", "content": "be polite",
              "guard": {"rule_id": "g", "patterns": ["\\bidiot\\b", "stupid+"]}}  # fmt: skip
    validate_envelope(_raw("MemoryDeclared", {"memory": memory}))


@pytest.mark.parametrize(
    ("text", "at"),
    [
        ("last week, yesterday and 三天前", datetime(1, 1, 1, tzinfo=UTC)),
        ("next week, tomorrow, next year and 明天", datetime(9999, 12, 31, 23, 59, tzinfo=UTC)),
    ],
)
def test_time_expressions_at_the_calendars_edges_resolve_to_nothing_past_it(
    text: str, at: datetime
) -> None:
    spans = resolve(text, at)
    assert all(s.first.year >= 1 and s.last.year <= 9999 for s in spans)


# control characters and noncharacters show nothing either: a constraint made of a NUL
# rendered as an empty bullet in every context
INVISIBLE = ["\u0000", "\u0000\u0000 ", "\u0001\u0002", "\u007f", "\u0085\u009f", "\ufdd0",
             "\U0010ffff", "\ufffe \u200b"]  # fmt: skip


@pytest.mark.parametrize("text", INVISIBLE)
def test_control_characters_and_noncharacters_alone_are_blank(text: str) -> None:
    for kind in ("turn", "utterance"):
        assert _code(_raw("ObservationRecorded", {"text": text, "kind": kind})) == "BLANK_TEXT"
    declared = {"memory": {"type": "constraint", "scope": "user", "content": text}}
    assert _code(_raw("MemoryDeclared", declared)) == "EMPTY_CONTENT"
    mid = "01a24d23-651c-819a-9c03-2ae59db01e7b"
    corrected = {"memory_ids": [mid], "reason": text}
    assert _code(_raw("MemoryCorrected", corrected)) == "BLANK_REASON"
    contradicted = {"memory_id": mid, "reason": text}
    assert _code(_raw("MemoryContradicted", contradicted)) == "BLANK_REASON"


@pytest.mark.parametrize("text", ["ok\u0000", "\u00e9", "\ue000", "\U0001f600", "a\ufffe"])
def test_a_text_that_shows_something_is_not_blank(text: str) -> None:
    envelope = validate_envelope(_raw("ObservationRecorded", {"text": text, "kind": "turn"}))
    assert envelope.payload["text"] == text
    mid = "01a24d23-651c-819a-9c03-2ae59db01e7b"
    validate_envelope(_raw("MemoryCorrected", {"memory_ids": [mid], "reason": text}))


def test_a_blank_reason_in_the_log_reads_back() -> None:
    mid = "01a24d23-651c-819a-9c03-2ae59db01e7b"
    held = Envelope.model_validate(_raw("MemoryCorrected", {"memory_ids": [mid], "reason": " "}))
    assert decode_payload(held).reason == " "  # type: ignore[attr-defined]
    with pytest.raises(ValidationError):
        decode_payload(held, edge=True)


def test_an_integer_beyond_64_bits_is_said_to_be_out_of_range() -> None:
    """The JSON reader gives 2**70 as a float: it was sent as an integer, so the answer
    says it is out of range, not that it is no integer (100.0 still is not one)."""
    from pydantic import BaseModel, field_validator

    from mnemo.domain.edge import EDGE, json_int

    class Versioned(BaseModel):
        version: int
        _ints = field_validator("version", mode="before")(json_int)

    for value, said in ((float(2**70), "out of range"), (100.0, "must be a JSON integer")):
        with pytest.raises(ValidationError) as refused:
            Versioned.model_validate({"version": value}, context=EDGE)
        assert said in str(refused.value)
    assert Versioned.model_validate({"version": 7}, context=EDGE).version == 7
