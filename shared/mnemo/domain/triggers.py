"""Memory-triggered tool calls: operators' triggers and what they suggest. Pure.

A trigger is a condition on memories (type, key, value, tags, age) and the tool call it
suggests (a declared tool and an argument template filled from the memory). Mnemo
suggests; the agent decides. A suggestion names the trigger and the memory version that
fired it; when the agent records the call's result with that reference
(`ToolResultRecorded.trigger`), the result's memory carries the tags
`trigger:<trigger id>` and `answers:<memory id>`, and the trigger does not fire again for
that memory version (a new version of the memory, a new memory id, can fire it again). Only
a result of the suggested tool answers it.

Age is measured from the memory's fetch instant (a tool result) or its creation, to the
instant the suggestions are judged at (`as_of`), as instants: time zones play no part. A
trigger with `older_than: 1d` fires once the memory is at least a day old (the boundary
instant fires).

Loading the YAML (with file and line in every refusal) is mnemo.service.triggers.
"""

from __future__ import annotations

import re
import string
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from mnemo.domain.memory import KEY_RE, TAG_RE, Memory, MemoryType
from mnemo.domain.tool_result import TOOL_NAME_RE, answers_tag, tool_of, trigger_tag

__all__ = [
    "PLACEHOLDERS",
    "Condition",
    "Suggestion",
    "ToolSpec",
    "Trigger",
    "TriggerSet",
    "age_seconds",
    "parse_duration",
]

TRIGGER_ID = r"^[a-z0-9][a-z0-9_.-]{0,39}$"
# what an argument template may name of the memory that fired the trigger
PLACEHOLDERS = frozenset({"stream", "key", "value", "memory_id", "version", "content", "type"})
_DURATION = re.compile(r"^(\d{1,6})(s|m|h|d)$")
_UNIT = {"s": 1, "m": 60, "h": 3600, "d": 86_400}


def parse_duration(text: str | int) -> int:
    """Seconds in `90s`, `30m`, `24h`, `1d` (or a bare number of seconds)."""
    if isinstance(text, int) and not isinstance(text, bool):
        if text < 0:
            raise ValueError("a duration cannot be negative")
        return text
    match = _DURATION.fullmatch(str(text).strip())
    if match is None:
        raise ValueError(f"{text!r} is not a duration such as 90s, 30m, 24h or 1d")
    return int(match.group(1)) * _UNIT[match.group(2)]


Duration = Annotated[int, Field(ge=0)]


class ToolSpec(BaseModel):
    """A tool the operator declares; triggers may only suggest declared tools."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str = Field(pattern=TOOL_NAME_RE.pattern)
    description: str = Field(default="", max_length=500)
    arguments: tuple[Annotated[str, Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]{0,63}$")], ...] = Field(
        default=(), max_length=32, description="the argument names it takes (empty: any)"
    )


class Condition(BaseModel):
    """Which memories fire a trigger: every field given must hold."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    type: MemoryType | None = None
    key: str | None = None
    value: str | None = Field(default=None, max_length=1_000, description="equal to")
    value_in: tuple[str, ...] = Field(default=(), max_length=64, description="one of")
    tags: tuple[str, ...] = Field(default=(), max_length=16, description="every one of")
    older_than: Duration | None = Field(default=None, description="age at least")
    younger_than: Duration | None = Field(default=None, description="age below")

    @field_validator("older_than", "younger_than", mode="before")
    @classmethod
    def _duration(cls, value: Any) -> Any:
        return None if value is None else parse_duration(value)

    @field_validator("key")
    @classmethod
    def _key(cls, value: str | None) -> str | None:
        if value is not None and not KEY_RE.fullmatch(value):
            raise ValueError("key must be 1-64 word characters, dots or dashes")
        return value

    @field_validator("tags")
    @classmethod
    def _tags(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for tag in value:
            if not TAG_RE.fullmatch(tag):
                raise ValueError(f"tag {tag!r} is not 1-64 word characters, ':', '.', '/' or '-'")
        return value

    @model_validator(mode="after")
    def _narrow(self) -> Condition:
        if self.type is None and self.key is None and not self.tags:
            raise ValueError(
                "a condition names a type, a key or tags (else it fires on everything)"
            )
        if self.value is not None and self.value_in:
            raise ValueError("give value or value_in, not both")
        return self

    def holds(self, memory: Memory, as_of: datetime) -> bool:
        if self.type is not None and memory.type is not self.type:
            return False
        if self.key is not None and memory.key != self.key:
            return False
        if self.value is not None and memory.value != self.value:
            return False
        if self.value_in and memory.value not in self.value_in:
            return False
        if not set(self.tags) <= set(memory.tags):
            return False
        age = age_seconds(memory, as_of)
        if self.older_than is not None and age < self.older_than:
            return False
        return not (self.younger_than is not None and age >= self.younger_than)


def _template_fields(template: str) -> list[str]:
    try:
        parsed = list(string.Formatter().parse(template))
    except ValueError as exc:
        raise ValueError(f"template {template!r} does not parse: {exc}") from None
    names = []
    for _, name, spec, conversion in parsed:
        if name is None:
            continue
        if spec or conversion:
            raise ValueError(f"template {template!r}: plain {{name}} fields only")
        if name not in PLACEHOLDERS:
            raise ValueError(
                f"template {template!r} names {name!r}; known: {', '.join(sorted(PLACEHOLDERS))}"
            )
        names.append(name)
    return names


class Suggest(BaseModel):
    """The tool call a trigger suggests."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool: str = Field(pattern=TOOL_NAME_RE.pattern)
    arguments: dict[str, Annotated[str, Field(max_length=500)]] = Field(
        default_factory=dict, max_length=32
    )

    @field_validator("arguments")
    @classmethod
    def _templates(cls, value: dict[str, str]) -> dict[str, str]:
        for template in value.values():
            _template_fields(template)
        return value


class Trigger(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=TRIGGER_ID)
    description: str = Field(default="", max_length=500)
    when: Condition
    suggest: Suggest


@dataclass(frozen=True, slots=True)
class Suggestion:
    """A tool call a trigger suggests, and the memory version that fired it."""

    trigger_id: str
    description: str
    tool: str
    arguments: dict[str, str]
    stream: str
    memory_id: str
    memory_version: int
    key: str | None
    value: str | None
    age_seconds: float

    def as_dict(self) -> dict[str, Any]:
        return {
            "trigger_id": self.trigger_id,
            "description": self.description,
            "tool": self.tool,
            "arguments": dict(self.arguments),
            "stream": self.stream,
            "memory_id": self.memory_id,
            "memory_version": self.memory_version,
            "key": self.key,
            "value": self.value,
            "age_seconds": self.age_seconds,
            # what to send back with the result (ToolResultRecorded.trigger)
            "trigger": {"trigger_id": self.trigger_id, "memory_id": self.memory_id},
        }


def age_seconds(memory: Memory, as_of: datetime) -> float:
    """How old a memory is at `as_of`: since its fetch (a tool result) or its creation."""
    since = memory.fetched_at or memory.created_at
    return (as_of - since).total_seconds()


class TriggerSet:
    """The declared tools and triggers, checked against each other."""

    def __init__(self, tools: Iterable[ToolSpec] = (), triggers: Iterable[Trigger] = ()) -> None:
        self.tools: dict[str, ToolSpec] = {}
        for tool in tools:
            if tool.name in self.tools:
                raise ValueError(f"tool {tool.name!r} is declared twice")
            self.tools[tool.name] = tool
        self.triggers: tuple[Trigger, ...] = tuple(triggers)
        seen: set[str] = set()
        for trigger in self.triggers:
            if trigger.id in seen:
                raise ValueError(f"trigger {trigger.id!r} is declared twice")
            seen.add(trigger.id)
            self.check(trigger)

    def check(self, trigger: Trigger) -> None:
        """ValueError when a trigger suggests an undeclared tool or an argument it lacks."""
        tool = self.tools.get(trigger.suggest.tool)
        if tool is None:
            declared = ", ".join(sorted(self.tools)) or "none"
            raise ValueError(
                f"unknown tool {trigger.suggest.tool!r}; the file declares: {declared}"
            )
        if tool.arguments:
            unknown = sorted(set(trigger.suggest.arguments) - set(tool.arguments))
            if unknown:
                raise ValueError(
                    f"tool {tool.name!r} takes no argument(s) {', '.join(unknown)}; it takes "
                    f"{', '.join(tool.arguments)}"
                )

    def fired(
        self, trigger: Trigger, memory: Memory, as_of: datetime, answered: Iterable[Memory]
    ) -> Suggestion | None:
        """The suggestion `trigger` makes for `memory` at `as_of`, or None: the memory
        must be live, meet the condition, and not be answered already (a memory among
        `answered` carries this trigger's tag and the `answers:<memory id>` tag, and is a
        result of the tool the trigger suggests: another tool's result, or a declared memory
        with those tags, does not close it)."""
        if not memory.is_live(as_of) or not trigger.when.holds(memory, as_of):
            return None
        done = {trigger_tag(trigger.id), answers_tag(memory.memory_id)}
        if any(
            done <= set(m.tags) and tool_of(m.provenance.source_id) == trigger.suggest.tool
            for m in answered
        ):
            return None
        return Suggestion(
            trigger_id=trigger.id,
            description=trigger.description,
            tool=trigger.suggest.tool,
            arguments=fill(trigger.suggest.arguments, memory),
            stream=memory.stream,
            memory_id=memory.memory_id,
            memory_version=memory.version,
            key=memory.key,
            value=memory.value,
            age_seconds=round(age_seconds(memory, as_of), 3),
        )


def fill(templates: Mapping[str, str], memory: Memory) -> dict[str, str]:
    values = {
        "stream": memory.stream,
        "key": memory.key or "",
        "value": memory.value or "",
        "memory_id": memory.memory_id,
        "version": str(memory.version),
        "content": memory.content,
        "type": memory.type.value,
    }
    return {name: template.format_map(values) for name, template in templates.items()}
