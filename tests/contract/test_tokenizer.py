"""Contract: a Tokenizer counts exactly like its model's encoding and truncates to a
prefix that fits and never breaks a character."""

from __future__ import annotations

import pytest

from mnemo.adapters.toktok_tokenizer import (
    ToktokTokenizer,
    encoding_for_model,
    tokenizer_for_model,
)
from mnemo.domain.errors import InvalidInput
from mnemo.ports import Tokenizer

ENGLISH = "The quick brown fox jumps over the lazy dog."
MIXED = "我的尺码是L，今天天气很好。My size is L 🧠🧠 and héllo wörld ñ — 衣服尺码L号"


class TokenizerContract:
    """Subclasses provide a `tokenizer` fixture and the counts of `KNOWN`'s texts."""

    KNOWN: dict[str, int]

    @pytest.fixture
    def tokenizer(self) -> Tokenizer:
        raise NotImplementedError

    def test_known_counts(self, tokenizer: Tokenizer) -> None:
        texts = list(self.KNOWN)
        assert tokenizer.count(texts) == [self.KNOWN[t] for t in texts]

    def test_a_text_counted_alone_counts_as_in_a_batch(self, tokenizer: Tokenizer) -> None:
        """One text is counted another way than several (on the caller's thread): the
        counts agree."""
        for text, known in self.KNOWN.items():
            assert tokenizer.count([text]) == [known]

    def test_count_empty(self, tokenizer: Tokenizer) -> None:
        assert tokenizer.count([]) == []
        assert tokenizer.count([""]) == [0]

    def test_count_keeps_order(self, tokenizer: Tokenizer) -> None:
        texts = [ENGLISH, "hello world", MIXED, ""]
        assert tokenizer.count(texts) == [tokenizer.count([t])[0] for t in texts]

    @pytest.mark.parametrize("text", [ENGLISH, MIXED, "🧠🧠🧠", "今天天气很好" * 5])
    def test_truncate_fits_and_is_a_prefix(self, tokenizer: Tokenizer, text: str) -> None:
        total = tokenizer.count([text])[0]
        previous = ""
        for max_tokens in range(total + 2):
            cut = tokenizer.truncate(text, max_tokens)
            assert text.startswith(cut)
            assert tokenizer.count([cut])[0] <= max_tokens
            assert len(cut) >= len(previous)  # more room never keeps less
            previous = cut
        assert tokenizer.truncate(text, total) == text

    @pytest.mark.parametrize("text", [MIXED, "🧠🧠🧠", "今天天气很好" * 5, "héllo wörld ñ"])
    def test_truncate_never_breaks_a_character(self, tokenizer: Tokenizer, text: str) -> None:
        encoded = text.encode("utf-8")
        for max_tokens in range(tokenizer.count([text])[0] + 1):
            cut = tokenizer.truncate(text, max_tokens)
            raw = cut.encode("utf-8")  # raises on a lone surrogate
            assert raw.decode("utf-8") == cut
            assert "\ufffd" not in cut
            assert encoded.startswith(raw)

    def test_truncate_zero_and_negative(self, tokenizer: Tokenizer) -> None:
        assert tokenizer.truncate(ENGLISH, 0) == ""
        with pytest.raises(InvalidInput):
            tokenizer.truncate(ENGLISH, -1)

    def test_truncate_keeps_short_text_whole(self, tokenizer: Tokenizer) -> None:
        assert tokenizer.truncate("hello world", 100) == "hello world"
        assert tokenizer.truncate("hello world", 1) == "hello"

    def test_rejects_lone_surrogates(self, tokenizer: Tokenizer) -> None:
        with pytest.raises(InvalidInput):
            tokenizer.count(["a\ud800b"])
        with pytest.raises(InvalidInput):
            tokenizer.truncate("a\ud800b", 1)


class TestToktokCl100k(TokenizerContract):
    KNOWN = {  # noqa: RUF012 - read-only table
        "hello world": 2,
        ENGLISH: 10,
        "我的尺码是L": 6,
        "今天天气很好": 8,
        "🧠🧠": 6,
        "<|endoftext|>": 7,  # special tokens count as plain text
    }

    @pytest.fixture
    def tokenizer(self) -> Tokenizer:
        return ToktokTokenizer("cl100k_base")

    def test_name_and_default(self) -> None:
        assert ToktokTokenizer().name == "cl100k_base"


class TestToktokO200k(TokenizerContract):
    KNOWN = {  # noqa: RUF012 - read-only table
        "hello world": 2,
        ENGLISH: 10,
        "我的尺码是L": 5,
        "今天天气很好": 4,
        "🧠🧠": 6,
        "<|endoftext|>": 7,
    }

    @pytest.fixture
    def tokenizer(self) -> Tokenizer:
        return ToktokTokenizer("o200k_base")

    def test_name(self) -> None:
        assert ToktokTokenizer("o200k_base").name == "o200k_base"


@pytest.mark.parametrize(
    ("model", "encoding"),
    [
        ("gpt-4o", "o200k_base"),
        ("gpt-4o-mini", "o200k_base"),
        ("GPT-4o-2024-08-06", "o200k_base"),
        ("gpt-4.1", "o200k_base"),
        ("gpt-4.1-nano", "o200k_base"),
        ("o1", "o200k_base"),
        ("o1-mini", "o200k_base"),
        ("o3-mini", "o200k_base"),
        ("o4-mini", "o200k_base"),
        ("gpt-5", "o200k_base"),
        ("gpt-4", "cl100k_base"),
        ("gpt-4-turbo", "cl100k_base"),
        ("gpt-4-0613", "cl100k_base"),
        ("gpt-3.5-turbo", "cl100k_base"),
        ("cl100k_base", "cl100k_base"),
        ("o200k_base", "o200k_base"),
    ],
)
def test_tokenizer_for_model(model: str, encoding: str) -> None:
    assert encoding_for_model(model) == encoding
    tokenizer = tokenizer_for_model(model)
    assert isinstance(tokenizer, ToktokTokenizer)
    assert tokenizer.name == encoding


@pytest.mark.parametrize("model", ["claude-3-opus", "llama-3", "", "o10", "p50k_base", "qwen3.5"])
def test_unknown_model(model: str) -> None:
    with pytest.raises(InvalidInput) as info:
        tokenizer_for_model(model)
    assert info.value.code == "UNKNOWN_TOKENIZER"


def test_unknown_encoding() -> None:
    with pytest.raises(InvalidInput) as info:
        ToktokTokenizer("r50k_base")
    assert info.value.code == "UNKNOWN_TOKENIZER"
