"""Tool results as memories: the rules of what a recorded tool call becomes. Pure.

A `ToolResultRecorded` event carries a tool's name, the arguments it was called with and
its structured result (both as JSON text, so that on a user stream they are sealed whole
like any other words of a person), the system it came from, when it was fetched and for
how long it stays fresh. Registration turns it into one `external` memory:

- provenance `source_id = tool:<name>`, `source_location = <source system>`;
- `fetched_at` the fetch instant, `valid_until` (and `stale_after`) the freshness
  deadline `fetched_at + fresh_for_seconds`: the decay consumer's expiry timer ends the
  memory at that instant (MemoryExpired), and a context judged at or after it (`as_of`)
  never shows it;
- key: the one the caller names, or `tool.<name>.<digest of the arguments>`, so that a
  newer result of the same call supersedes the older one (version + 1);
- value: the result's JSON when it is at most MAX_VALUE_CHARS long, else a digest of it
  (the content holds the whole result);
- tags `tool:<name>` and `tool-result`, and, when it answers a suggested call,
  `trigger:<trigger id>` and `answers:<memory id>` (see mnemo.domain.triggers).
"""

from __future__ import annotations

import hashlib
import math
import re
from datetime import datetime, timedelta
from typing import Any

import orjson

from mnemo.domain.errors import InvalidInput
from mnemo.domain.memory import MemoryDraft, MemoryType, Provenance

__all__ = [
    "MAX_ARGUMENTS_CHARS",
    "MAX_RESULT_CHARS",
    "TOOL_NAME_RE",
    "TOOL_SOURCE_PREFIX",
    "answers_tag",
    "canonical_json",
    "default_key",
    "format_age",
    "is_tool_memory",
    "parse_json_text",
    "tool_memory_draft",
    "tool_of",
    "trigger_tag",
]

TOOL_NAME_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,47}$")
TOOL_SOURCE_PREFIX = "tool:"
MAX_ARGUMENTS_CHARS = 2_000
MAX_RESULT_CHARS = 5_000  # the memory's content holds the result whole (at most 8,000)
MAX_VALUE_CHARS = 1_000
MAX_FRESH_FOR_SECONDS = 366 * 86_400
MAX_JSON_DEPTH = 32


def _finite(value: Any, depth: int = 0) -> bool:
    """JSON as RFC 8259 has it: no NaN or infinities, not nested past MAX_JSON_DEPTH."""
    if depth > MAX_JSON_DEPTH:
        return False
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _finite(v, depth + 1) for k, v in value.items())
    if isinstance(value, list):
        return all(_finite(v, depth + 1) for v in value)
    return value is None or isinstance(value, str | int | bool)


def finite_json(value: Any) -> bool:
    """Whether a decoded value is JSON a tool result may hold: no NaN or infinities, not
    nested past MAX_JSON_DEPTH."""
    return _finite(value)


def canonical_json(value: Any, *, field: str, limit: int) -> str:
    """A JSON value as compact text with sorted keys; InvalidInput when it is not JSON
    (TOOL_RESULT_NOT_JSON) or longer than `limit` characters (TOOL_RESULT_TOO_LARGE)."""
    if not _finite(value):
        raise InvalidInput(
            f"{field} is not JSON (no NaN, infinities or nesting past {MAX_JSON_DEPTH})",
            code="TOOL_RESULT_NOT_JSON",
            field=field,
        )
    try:
        text = orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode()
    except (TypeError, orjson.JSONEncodeError) as exc:
        raise InvalidInput(
            f"{field} is not JSON", code="TOOL_RESULT_NOT_JSON", field=field
        ) from exc
    if len(text) > limit:
        raise InvalidInput(
            f"{field} is {len(text)} characters as JSON; at most {limit}",
            code="TOOL_RESULT_TOO_LARGE",
            field=field,
            extra={"limit": limit},
        )
    return text


def parse_json_text(text: str) -> Any:
    """The JSON value a text holds; ValueError when it holds none (orjson is strict:
    no NaN, no trailing data)."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"not JSON: {exc}") from None
    if not _finite(value):
        raise ValueError("not JSON: nested too deep")
    return value


def default_key(tool: str, arguments: str) -> str:
    """The key a result is remembered under when the caller names none: one per tool and
    arguments, so a newer result of the same call supersedes the older."""
    digest = hashlib.sha256(arguments.encode()).hexdigest()[:8]
    return f"tool.{tool}.{digest}"


def value_of(result: str) -> str:
    return result if len(result) <= MAX_VALUE_CHARS else "sha256:" + _digest(result)


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def content_of(tool: str, arguments: str, result: str) -> str:
    return f"{tool}({arguments}) -> {result}"


def freshness_deadline(fetched_at: datetime, fresh_for_seconds: int) -> datetime:
    return fetched_at + timedelta(seconds=fresh_for_seconds)


def trigger_tag(trigger_id: str) -> str:
    return f"trigger:{trigger_id}"


def answers_tag(memory_id: str) -> str:
    return f"answers:{memory_id}"


def tool_of(source_id: str | None) -> str | None:
    """The tool a memory's provenance names, if it is a tool result."""
    if source_id and source_id.startswith(TOOL_SOURCE_PREFIX):
        return source_id[len(TOOL_SOURCE_PREFIX) :]
    return None


def is_tool_memory(source_id: str | None, fetched_at: datetime | None) -> bool:
    return fetched_at is not None and tool_of(source_id) is not None


def format_age(seconds: float) -> str:
    """An age as a context line shows it: 42s, 5m, 3h 20m, 2d 4h."""
    s = max(0, int(seconds))
    if s < 60:
        return f"{s}s"
    if s < 3600:
        return f"{s // 60}m"
    if s < 86_400:
        h, m = divmod(s // 60, 60)
        return f"{h}h {m}m" if m else f"{h}h"
    d, h = divmod(s // 3600, 24)
    return f"{d}d {h}h" if h else f"{d}d"


def tool_memory_draft(
    tool: str,
    arguments: str,
    result: str,
    source: str,
    fetched_at: datetime,
    fresh_for_seconds: int,
    key: str | None,
    trust: float,
    trigger: tuple[str, str] | None = None,
) -> MemoryDraft:
    """The memory a recorded tool result becomes (see the module docstring). `trigger`:
    (trigger id, memory id) of the suggested call it answers."""
    deadline = freshness_deadline(fetched_at, fresh_for_seconds)
    tags = [f"tool:{tool}", "tool-result"]
    if trigger is not None:
        tags += [trigger_tag(trigger[0]), answers_tag(trigger[1])]
    return MemoryDraft(
        type=MemoryType.EXTERNAL,
        content=content_of(tool, arguments, result),
        key=key or default_key(tool, arguments),
        value=value_of(result),
        tags=tuple(tags),
        valid_until=deadline,
        stale_after=deadline,
        provenance=Provenance(
            source_id=TOOL_SOURCE_PREFIX + tool, source_location=source, trust=trust
        ),
    )
