"""Refusals of a memory's tags and guard patterns name the place of the bad value, never
the value: a tag or a pattern may hold a card number or an e-mail address, and an error
message reaches the caller's logs (and a dead letter on the topic)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from mnemo.domain.memory import MemoryDraft

CARD = "4111111111111111"
EMAIL = "bob.q@example.com"


def _refusal(memory: dict[str, object]) -> str:
    with pytest.raises(ValidationError) as caught:
        MemoryDraft.model_validate(memory, context={"edge": True})
    # what a refusal says (the gateway's message is built from these, not the input)
    return " ".join(str(e["msg"]) for e in caught.value.errors())


def test_a_bad_tag_is_named_by_its_place() -> None:
    text = _refusal({"type": "fact", "content": "x", "tags": ["ok", f"card {CARD}"]})
    assert "tag 1 is not" in text
    assert CARD not in text


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        (f"({EMAIL}", "missing )"),
        (f"{EMAIL}(?=x)", "invalid perl operator"),
        (f"{CARD}\\1", "invalid escape sequence"),
    ],
)
def test_a_pattern_re2_cannot_run_is_named_by_its_place(pattern: str, reason: str) -> None:
    guard = {"rule_id": "r", "patterns": ["fine", pattern]}
    text = _refusal({"type": "constraint", "content": "x", "guard": guard})
    assert "guard pattern 1:" in text
    assert reason in text
    assert EMAIL not in text
    assert CARD not in text


def test_a_pattern_matching_empty_text_is_named_by_its_place() -> None:
    guard = {"rule_id": "r", "patterns": [f"({EMAIL})?"]}
    text = _refusal({"type": "constraint", "content": "x", "guard": guard})
    assert "guard pattern 0 matches empty text" in text
    assert EMAIL not in text
