"""The pure rules of API keys: format, parsing, digests, expiry, revocation, scopes,
redaction."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mnemo.domain.access import (
    ApiKey,
    Scope,
    Unauthenticated,
    check_key,
    format_key,
    key_digest,
    looks_like_key,
    parse_key,
    redact,
    redact_all,
    require_scope,
)
from mnemo.domain.errors import MnemoError

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
PEPPER = b"unit-test-pepper-0123456789"
SALT = "0123456789abcdef" * 2
SECRET = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNO-_"
KEY_ID = "00112233aabbccdd"


def record(**extra: object) -> ApiKey:
    return ApiKey.model_validate(
        {
            "key_id": KEY_ID,
            "tenant": "acme",
            "name": "planner",
            "scopes": ["memory:read"],
            "salt": SALT,
            "digest": key_digest(PEPPER, SALT, SECRET),
            "created_at": T0,
            "created_by": "test",
            **extra,
        }
    )


def test_a_key_round_trips_through_its_text() -> None:
    text = format_key(KEY_ID, SECRET)
    assert text == f"mnemo_{KEY_ID}_{SECRET}"
    assert parse_key(text) == (KEY_ID, SECRET)
    for bad in ("", text + "x", text[:-1], text.upper(), f"Bearer {text}", f"{text}\n", "mnemo_"):
        assert parse_key(bad) is None


@given(st.text(max_size=120))
def test_parsing_never_raises(text: str) -> None:
    parsed = parse_key(text)
    assert parsed is None or format_key(*parsed) == text


def test_the_digest_depends_on_pepper_salt_and_secret() -> None:
    base = key_digest(PEPPER, SALT, SECRET)
    assert len(base) == 64
    assert key_digest(b"another-pepper-000000", SALT, SECRET) != base
    assert key_digest(PEPPER, "f" * 32, SECRET) != base
    assert key_digest(PEPPER, SALT, SECRET[:-1] + "P") != base
    assert SECRET not in base


def test_check_key_accepts_only_the_right_secret_while_valid() -> None:
    caller = check_key(record(), PEPPER, SECRET, T0)
    assert (caller.tenant, caller.key_id, caller.name) == ("acme", KEY_ID, "planner")
    assert caller.scopes == {Scope.MEMORY_READ}
    codes = []
    for rec, secret, now in [
        (None, SECRET, T0),
        (record(), SECRET[:-1] + "P", T0),
        (record(revoked_at=T0), SECRET, T0),
        (record(expires_at=T0), SECRET, T0),
        (record(expires_at=T0 + timedelta(seconds=1)), SECRET, T0 + timedelta(seconds=2)),
    ]:
        with pytest.raises(Unauthenticated) as caught:
            check_key(rec, PEPPER, secret, now)
        codes.append(caught.value.code)
    assert codes == [
        "UNAUTHENTICATED",
        "UNAUTHENTICATED",
        "KEY_REVOKED",
        "KEY_EXPIRED",
        "KEY_EXPIRED",
    ]
    # a revocation dated later is not in force yet
    assert check_key(record(revoked_at=T0 + timedelta(hours=1)), PEPPER, SECRET, T0)


def test_scopes_are_required_one_by_one() -> None:
    caller = check_key(record(scopes=["memory:read", "context"]), PEPPER, SECRET, T0)
    require_scope(caller, Scope.CONTEXT)
    with pytest.raises(MnemoError) as caught:
        require_scope(caller, Scope.ADMIN)
    assert caught.value.code == "SCOPE_MISSING"
    assert caught.value.extra == {"scope": "admin"}


def test_public_views_and_redaction_hide_secrets() -> None:
    shown = record().public()
    assert "digest" not in shown
    assert "salt" not in shown
    text = f"GET /v1/x?api_key={format_key(KEY_ID, SECRET)} and {format_key(KEY_ID, SECRET)}!"
    cleaned = redact(text)
    assert SECRET not in cleaned
    assert cleaned.count(f"mnemo_{KEY_ID}_[redacted]") == 2
    assert redact("nothing to hide") == "nothing to hide"


def test_redaction_cuts_a_key_cut_short_and_every_string_of_a_value() -> None:
    """A message that cuts its input at 48 characters held 25 of the secret's 43."""
    cut = format_key(KEY_ID, SECRET)[:48]
    assert redact(f"tool '{cut}' is not a tool name") == (
        f"tool 'mnemo_{KEY_ID}_[redacted]' is not a tool name"
    )
    assert redact(redact(cut)) == redact(cut)
    key = format_key(KEY_ID, SECRET)
    cleaned = redact_all({"ids": [key, 3], key: {"x": (cut,)}, "n": None})
    assert SECRET[:8] not in str(cleaned)
    assert cleaned["n"] is None
    assert cleaned["ids"][1] == 3


def test_a_key_in_upper_case_is_still_a_key_and_one_without_its_prefix_is_never_shown() -> None:
    """Detection once needed the literal lower-case `mnemo_`: `MNEMO_` passed as a stream
    name, and the id and secret alone were echoed whole in error messages. Without its
    prefix a key has the shape of other identifiers (16 digits, '_', a base64url digest),
    so it is not refused there, only cut from what is shown."""
    bare = f"{KEY_ID}_{SECRET}"
    for text in (f"MNEMO_{bare}", f"Mnemo_{KEY_ID.upper()}_{SECRET}", f"user:mnemo_{bare}"):
        assert looks_like_key(text), text
        assert SECRET not in redact(f"unknown event type '{text}'")
    for text in (bare, f"user:{bare}", f"session:1733490000123456_{SECRET}"):
        assert not looks_like_key(text), text
        assert SECRET not in redact(f"unknown event type '{text}'")
    assert redact(bare) == f"mnemo_{KEY_ID}_[redacted]"
    # identifiers that merely hold hex and underscores are left as they are
    for text in (f"x{bare}", f"{bare}x", f"{KEY_ID}_short", "0123456789abcdef_" + "a" * 42):
        assert redact(text) == text, text
