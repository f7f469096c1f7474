"""Regular expressions that clients and operators supply, run on a linear-time engine.

A constraint's guard patterns come from any client allowed to declare memories, and the
registration rules from the operator's YAML. Python's `re` backtracks: `(a|a)*c` against a
few dozen `a`s takes hours, and holds the interpreter lock meanwhile, so one request could
freeze the whole server. These patterns run on RE2 instead (the `google-re2` package),
whose matching time grows linearly with the text, whatever the pattern.

RE2 refuses what it cannot run in linear time: backreferences (`\\1`), lookahead and
lookbehind (`(?=`, `(?<!`), possessive and atomic groups, and repetitions over 1,000
(`a{1001}`). Such a pattern is refused where it is registered, with `UnsupportedPattern`
(its pydantic error type is ``unsupported_pattern``, which the edge reports as the code
UNSUPPORTED_PATTERN). In RE2, `\\d`, `\\s`, `\\w` and `\\b` are ASCII classes; write
`\\pN`, `\\p{Han}` or an explicit set to match beyond ASCII.

RE2 is a pure computation library (no I/O), like `re`, which is why the domain may use it.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from functools import lru_cache
from typing import Protocol, cast

import re2  # google-re2

__all__ = [
    "CACHED_PATTERNS",
    "MAX_PATTERN_MEMORY",
    "LinearPattern",
    "PatternMatch",
    "UnsupportedPattern",
    "linear_pattern",
]

# RE2 compiles and matches within this much memory per pattern: a pattern that needs more
# to compile is refused, and a match whose DFA would need more falls back to RE2's slower,
# still linear, engine. With the cache below, compiled patterns hold at most
# MAX_PATTERN_MEMORY * CACHED_PATTERNS (256 MiB), and far less in practice.
MAX_PATTERN_MEMORY = 2 << 20
CACHED_PATTERNS = 128


class UnsupportedPattern(ValueError):
    """A pattern the linear-time engine cannot run (or that does not parse at all)."""


class PatternMatch(Protocol):
    """What Mnemo reads of a match (positions are in characters, as with `re`)."""

    def start(self, group: int = 0) -> int: ...

    def end(self, group: int = 0) -> int: ...

    def groupdict(self) -> dict[str, str | None]: ...


class LinearPattern:
    """One compiled pattern; `search` takes time linear in the text's length."""

    def __init__(self, pattern: str, *, ignore_case: bool = False) -> None:
        options = re2.Options()
        options.case_sensitive = not ignore_case
        options.log_errors = False  # RE2 would print the pattern to stderr
        options.max_mem = MAX_PATTERN_MEMORY
        try:
            self._regexp = re2.compile(pattern, options)
        except re2.error as exc:
            reason = exc.args[0] if exc.args else exc
            if isinstance(reason, bytes):
                reason = reason.decode("utf-8", "replace")
            raise UnsupportedPattern(
                f"the pattern cannot run on the linear-time engine (RE2): {reason}"
            ) from None
        self.pattern = pattern

    @property
    def groupindex(self) -> Mapping[str, int]:
        return cast(Mapping[str, int], self._regexp.groupindex)

    def search(self, text: str) -> PatternMatch | None:
        return cast(PatternMatch | None, self._regexp.search(text))

    def finditer(self, text: str) -> Iterator[PatternMatch]:
        """Every non-overlapping match, left to right (linear in the text's length)."""
        return cast(Iterator[PatternMatch], self._regexp.finditer(text))


@lru_cache(maxsize=CACHED_PATTERNS)
def linear_pattern(pattern: str, *, ignore_case: bool = False) -> LinearPattern:
    """A compiled pattern, cached (guards are checked on every reported answer)."""
    return LinearPattern(pattern, ignore_case=ignore_case)
