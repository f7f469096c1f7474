"""The envelope, the catalog, upcasting, and schemas/ kept in step with the models."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from mnemo.domain.errors import InvalidInput
from mnemo.domain.events import CATALOG, ObservationRecorded, decode_payload, validate_envelope
from mnemo.schemas import render_all

SCHEMAS = Path(__file__).resolve().parents[2] / "schemas"


def raw(**over: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "event_id": "019ad4f0-8000-7000-8000-000000000001",
        "type": "ObservationRecorded",
        "schema_version": 2,
        "tenant": "acme",
        "stream": "user:U1",
        "occurred_at": "2026-11-30T20:00:00+08:00",
        "actor": {"kind": "agent", "id": "planner"},
        "payload": {"text": "记住我的尺码是L"},
    }
    base.update(over)
    return base


def test_a_valid_event_keeps_its_utc_offset() -> None:
    env = validate_envelope(raw())
    assert env.occurred_at.utcoffset() is not None
    assert env.occurred_at.isoformat() == "2026-11-30T20:00:00+08:00"


def test_version_1_observations_are_upcast_on_read() -> None:
    env = validate_envelope(raw(schema_version=1, payload={"utterance": "记住我的尺码是L"}))
    payload = decode_payload(env)
    assert isinstance(payload, ObservationRecorded)
    assert payload.text == "记住我的尺码是L"
    assert payload.kind == "utterance"
    # the stored event is not rewritten
    assert env.payload == {"utterance": "记住我的尺码是L"}


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({"text": "hi"}, "payload.utterance"),  # version 2's name: version 1 lacks it
        ({}, "payload.utterance"),
        ({"utterance": "u", "text": "t"}, "payload.text"),  # was kept, then overwritten
        ({"utterance": ""}, "payload.utterance"),
    ],
)
def test_a_version_1_observation_is_held_to_version_1(payload: dict[str, Any], field: str) -> None:
    """An older version is checked against its own model before it is upcast: a missing
    `utterance` was a KeyError in the upcaster (500), and an extra `text` was overwritten."""
    with pytest.raises(InvalidInput) as refused:
        validate_envelope(raw(schema_version=1, payload=payload))
    assert (refused.value.code, refused.value.field) == ("INVALID_PAYLOAD", field)


@pytest.mark.parametrize(
    ("over", "code"),
    [
        ({"type": "MemoryInvented"}, "UNKNOWN_EVENT_TYPE"),
        ({"schema_version": 9}, "UNSUPPORTED_SCHEMA_VERSION"),
        ({"schema_version": "2"}, "UNSUPPORTED_SCHEMA_VERSION"),
        ({"type": "MemoryRegistered", "schema_version": 1}, "EVENT_TYPE_NOT_PUBLISHABLE"),
        ({"tenant": "../etc"}, "INVALID_TENANT"),
        ({"tenant": "acme'; DROP"}, "INVALID_TENANT"),
        ({"occurred_at": "2026-11-30T20:00:00"}, "INVALID_ENVELOPE"),
        ({"stream": "user/U1"}, "INVALID_ENVELOPE"),
        ({"payload": {"text": ""}}, "INVALID_PAYLOAD"),
        (
            {
                "type": "MemoryDeclared",
                "schema_version": 1,
                "payload": {"memory": {"type": "fact", "content": "x", "semantic_weight": 1.0}},
            },
            "INVALID_SEMANTIC_WEIGHT",
        ),
        (
            {
                "type": "MemoryDeclared",
                "schema_version": 1,
                "payload": {"memory": {"type": "fact", "content": ""}},
            },
            "EMPTY_CONTENT",
        ),
    ],
)
def test_bad_events_get_a_precise_code(over: dict[str, Any], code: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        validate_envelope(raw(**over))
    assert caught.value.code == code


def test_every_type_has_a_current_version_and_consecutive_upcasters() -> None:
    for event_type, current in CATALOG.current.items():
        assert CATALOG.versions(event_type) == list(range(1, current + 1))
        for version in range(1, current):
            assert (event_type, version) in CATALOG.upcasters


def test_schemas_folder_matches_the_models() -> None:
    rendered = render_all()
    on_disk = {
        str(p.relative_to(SCHEMAS)): p.read_text(encoding="utf-8") for p in SCHEMAS.rglob("*.json")
    }
    assert sorted(on_disk) == sorted(rendered), "run `make schemas`"
    for name, text in rendered.items():
        assert on_disk[name] == text, f"{name} drifted from the models: run `make schemas`"


BLOCK = {
    "key_id": "acme/user:U1",
    "key_version": 1,
    "fields": ["text"],
    "wrapped_key": "dmF1bHQ6djE6eHh4",
    "values": {"email:h0123456789abcdef": "AAAA"},
}


@pytest.mark.parametrize("key_id", ["globex", "globex/user:U1", "acme/user:U2", "acmex"])
def test_an_encryption_block_must_name_the_tenants_key_for_its_stream(key_id: str) -> None:
    """A trusted producer's block names the tenant's key or the stream's own key; another
    tenant's (or another user's) key id is refused, with a reason a dead letter carries."""
    event = raw(stream="user:U1", encryption={**BLOCK, "key_id": key_id})
    with pytest.raises(InvalidInput) as refused:
        validate_envelope(event, public=False)
    assert (refused.value.code, refused.value.field) == (
        "FOREIGN_ENCRYPTION_KEY",
        "encryption.key_id",
    )
    for own in ("acme", "acme/user:U1"):
        assert validate_envelope(raw(stream="user:U1", encryption={**BLOCK, "key_id": own}))


def test_a_topic_record_sealed_under_another_tenants_key_is_dead_lettered() -> None:
    import orjson

    from mnemo.ports import LogRecord
    from mnemo.records import parse_record

    event = raw(stream="user:U1", encryption={**BLOCK, "key_id": "globex/user:U1"})
    record = LogRecord(0, 0, b"acme:user:U1", orjson.dumps(event))
    with pytest.raises(InvalidInput) as refused:
        parse_record(record, datetime.now(UTC))
    assert refused.value.code == "FOREIGN_ENCRYPTION_KEY"


def test_a_sensitive_memory_written_to_the_topic_in_clear_is_dead_lettered() -> None:
    """`sensitive: true` was applied by the publish path only: a producer writing to the
    topic without a vault had its words archived, projected and embedded in clear."""
    import orjson
    from tests.unit.test_sealing import Ticker, declared
    from tests.vault_support import SwitchableVault

    from mnemo.domain.events import Envelope
    from mnemo.ports import LogRecord
    from mnemo.records import parse_record
    from mnemo.sealing import KeyCache, Sealer

    def record(event: Envelope | dict[str, Any]) -> LogRecord:
        body = (
            event.model_dump(mode="json", exclude_none=True)
            if isinstance(event, Envelope)
            else event
        )
        return LogRecord(0, 0, b"acme:user:U1", orjson.dumps(body))

    draft = {"type": "fact", "key": "locker", "value": "left 12", "content": "code left 12"}
    for memory in (
        draft,
        {"type": "fact", "content": "left 12"},
        {"type": "fact", "key": "k", "value": "left 12"},
    ):
        clear = declared({**memory, "sensitive": True})
        with pytest.raises(InvalidInput) as refused:
            parse_record(record(clear), datetime.now(UTC))
        assert refused.value.code == "SENSITIVE_NOT_SEALED"
        assert refused.value.field in {"payload.memory.content", "payload.memory.value"}
        assert "left 12" not in str(refused.value)
    sealer = Sealer(KeyCache(SwitchableVault(), ttl=30.0, now=Ticker()))
    sealed = sealer.seal(declared({**draft, "sensitive": True}))
    assert parse_record(record(sealed), datetime.now(UTC)).payload["memory"]["sensitive"] is True
    # nothing marked sensitive: a trusted producer's clear words are its own choice
    assert parse_record(record(declared(draft)), datetime.now(UTC))


@pytest.mark.parametrize(
    "value",
    ["Nope" * 100_000, {"nested": ["x" * 100_000]}, ["MemoryDeclared"] * 10_000],
)
def test_an_unknown_type_is_not_repeated_whole(value: object) -> None:
    with pytest.raises(InvalidInput) as refused:
        validate_envelope(raw(type=value))
    assert refused.value.code == "UNKNOWN_EVENT_TYPE"
    assert len(str(refused.value)) < 200
