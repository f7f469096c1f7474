"""Offline token counting with `toktok` (package `toktok-rs`): exact BPE, Rust core.

Supports the OpenAI encodings `cl100k_base` (GPT-3.5, GPT-4) and `o200k_base` (GPT-4o,
GPT-4.1, o-series). Counting releases the GIL and runs across threads; vocabularies are
compiled into the extension, so nothing is downloaded.

Notes on the library:

* `toktok.truncate` returns `(prefix, total_tokens_of_whole_input)`, not just the text.
* It cuts at a token boundary and then drops a partial code point (byte-level BPE can
  split one character across tokens), so the prefix is always valid text. It does not
  know grapheme clusters: a combining accent or an emoji ZWJ sequence can be split
  between code points.
* Special-token strings such as ``<|endoftext|>`` are counted as ordinary text.
* Lone surrogates cannot be encoded as UTF-8; they are rejected as invalid input here.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

import toktok

from mnemo.domain.errors import InvalidInput
from mnemo.ports import Tokenizer

__all__ = ["ENCODINGS", "ToktokTokenizer", "encoding_for_model", "tokenizer_for_model"]

ENCODINGS = ("cl100k_base", "o200k_base")

# Checked in order: the o200k families first, since "gpt-4o" also starts with "gpt-4".
_MODEL_PREFIXES: tuple[tuple[str, str], ...] = (
    ("gpt-4o", "o200k_base"),
    ("gpt-4.1", "o200k_base"),
    ("gpt-5", "o200k_base"),
    ("gpt-4", "cl100k_base"),
    ("gpt-3.5", "cl100k_base"),
)
# The o-series: the bare name or the name and a dash ("o1", "o3-mini", "o4-mini-high").
_O_SERIES = ("o1", "o3", "o4")


class ToktokTokenizer(Tokenizer):
    """Counts and truncates the way an OpenAI model's encoding does."""

    def __init__(self, encoding: str = "cl100k_base", threads: int = 0) -> None:
        if encoding not in ENCODINGS:
            raise InvalidInput(
                f"unknown encoding {encoding!r}; expected one of {', '.join(ENCODINGS)}",
                code="UNKNOWN_TOKENIZER",
                field="encoding",
            )
        self.encoding = encoding
        self.name = encoding
        self._threads = threads  # 0: every core

    def count(self, texts: Sequence[str]) -> list[int]:
        items = list(texts)
        if not items:
            return []
        try:
            if len(items) == 1:
                # one text: `truncate` with no limit counts it on this thread; handing it
                # to the worker threads cost 60 to 600 us a call on a busy machine, and
                # the context assembler counts one line at a time
                return [toktok.truncate(items[0], sys.maxsize, self.encoding)[1]]
            counts: list[int] = toktok.batch_count(items, self.encoding, self._threads)
        except UnicodeEncodeError as exc:
            raise InvalidInput(f"text is not valid Unicode: {exc.reason}") from exc
        return counts

    def truncate(self, text: str, max_tokens: int) -> str:
        if max_tokens < 0:
            raise InvalidInput("max_tokens must not be negative", field="max_tokens")
        try:
            prefix, _total = toktok.truncate(text, max_tokens, self.encoding)
        except UnicodeEncodeError as exc:
            raise InvalidInput(f"text is not valid Unicode: {exc.reason}") from exc
        kept: str = prefix
        return kept

    def __repr__(self) -> str:
        return f"ToktokTokenizer({self.encoding!r})"


def encoding_for_model(name: str) -> str:
    """The encoding a model (or an encoding name) uses. Raises InvalidInput otherwise."""
    key = name.strip().lower()
    if key in ENCODINGS:
        return key
    for prefix, encoding in _MODEL_PREFIXES:
        if key.startswith(prefix):
            return encoding
    if any(key == series or key.startswith(series + "-") for series in _O_SERIES):
        return "o200k_base"
    raise InvalidInput(
        f"no tokenizer known for model {name!r}", code="UNKNOWN_TOKENIZER", field="tokenizer"
    )


def tokenizer_for_model(name: str) -> ToktokTokenizer:
    """The tokenizer for a model name such as "gpt-4o-mini", or for an encoding name."""
    return ToktokTokenizer(encoding_for_model(name))
