"""Tool triggers: loading the operators' YAML, and the suggestions for some subjects.

`load_triggers` refuses a file that is not YAML, that has keys it does not know, a tool or
trigger that does not validate, or a trigger that suggests a tool the file does not
declare, with a message naming the file, the line and the trigger (TriggerFileError).
`suggestions` evaluates the triggers over the subjects' live memories at an instant
(mnemo.domain.triggers says when one fires, and when it stops firing).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path

import yaml
from pydantic import ValidationError

from mnemo.domain.memory import Memory, MemoryStatus
from mnemo.domain.tool_result import answers_tag
from mnemo.domain.triggers import Suggestion, ToolSpec, Trigger, TriggerSet
from mnemo.ports import MemoryQuery, MemoryStore
from mnemo.service.yaml_files import parse_yaml, read_rule_text

__all__ = ["TriggerFileError", "load_triggers", "suggestions"]

_KEYS = {"tools", "triggers"}
DEFAULT_NAME = "mnemo/rules/triggers.yaml"
MAX_MEMORIES_PER_TRIGGER = 200


class TriggerFileError(ValueError):
    """A trigger file Mnemo refuses; the message names the file, the line and the trigger."""


def _line(node: yaml.Node | None, *path: str | int) -> int:
    """The 1-based line of the node at `path` under `node` (the deepest one found)."""
    if node is None:
        return 1
    for step in path:
        found: yaml.Node | None = None
        if isinstance(node, yaml.MappingNode):
            found = next((v for k, v in node.value if getattr(k, "value", None) == step), None)
            if found is None:
                found = next((k for k, _ in node.value if getattr(k, "value", None) == step), None)
        elif isinstance(node, yaml.SequenceNode) and isinstance(step, int):
            found = node.value[step] if 0 <= step < len(node.value) else None
        if found is None:
            break
        node = found
    return int(node.start_mark.line) + 1


def _where(exc: ValidationError) -> tuple[tuple[str | int, ...], str]:
    err = exc.errors()[0]
    loc = tuple(err["loc"])
    return loc, f"{'.'.join(str(p) for p in loc) or '(top)'}: {err['msg']}"


def load_triggers(path: Path | None = None) -> TriggerSet:
    """The tools and triggers of a YAML file, or Mnemo's defaults (none)."""
    name, text = read_rule_text(path, "rules/triggers.yaml", TriggerFileError)
    root, data = parse_yaml(name, text, TriggerFileError)
    if data is None:
        return TriggerSet()
    if not isinstance(data, dict):
        raise TriggerFileError(f"{name}:1: the top level must be a mapping (tools, triggers)")
    unknown = sorted(str(k) for k in set(data) - _KEYS)
    if unknown:
        raise TriggerFileError(
            f"{name}:{_line(root, unknown[0])}: unknown key(s) {', '.join(unknown)}; "
            "a trigger file holds tools and triggers"
        )
    for key in _KEYS:
        if data.get(key) is not None and not isinstance(data[key], list):
            raise TriggerFileError(f"{name}:{_line(root, key)}: {key} must be a list")
    tools: list[ToolSpec] = []
    for i, raw in enumerate(data.get("tools") or []):
        try:
            tools.append(ToolSpec.model_validate(raw))
        except ValidationError as exc:
            loc, msg = _where(exc)
            raise TriggerFileError(
                f"{name}:{_line(root, 'tools', i, *loc)}: tool #{i + 1}: {msg}"
            ) from None
    known = TriggerSet(_unique_tools(name, root, tools))
    triggers: list[Trigger] = []
    seen: set[str] = set()
    for i, raw in enumerate(data.get("triggers") or []):
        label = repr(raw.get("id")) if isinstance(raw, dict) and raw.get("id") else f"#{i + 1}"
        try:
            trigger = Trigger.model_validate(raw)
        except ValidationError as exc:
            loc, msg = _where(exc)
            raise TriggerFileError(
                f"{name}:{_line(root, 'triggers', i, *loc)}: trigger {label}: {msg}"
            ) from None
        if trigger.id in seen:
            raise TriggerFileError(
                f"{name}:{_line(root, 'triggers', i, 'id')}: trigger {label} is declared twice"
            )
        seen.add(trigger.id)
        try:
            known.check(trigger)
        except ValueError as exc:
            at = _line(root, "triggers", i, "suggest", "tool")
            raise TriggerFileError(f"{name}:{at}: trigger {label}: {exc}") from None
        triggers.append(trigger)
    return TriggerSet(known.tools.values(), triggers)


def _unique_tools(name: str, root: yaml.Node | None, tools: list[ToolSpec]) -> list[ToolSpec]:
    seen: set[str] = set()
    for i, tool in enumerate(tools):
        if tool.name in seen:
            raise TriggerFileError(
                f"{name}:{_line(root, 'tools', i, 'name')}: tool {tool.name!r} is declared twice"
            )
        seen.add(tool.name)
    return tools


_ANSWERS_PAGE = 100


def _answers(store: MemoryStore, tenant: str, memory_id: str) -> list[Memory]:
    """Every memory (of any status) that answers `memory_id`, page by page: a polled tool
    whose results answer one trigger must not hide the answer to another past a page."""
    found: list[Memory] = []
    after: str | None = None
    while True:
        page = store.query(
            tenant,
            MemoryQuery(
                tags=(answers_tag(memory_id),),
                statuses=tuple(MemoryStatus),
                limit=_ANSWERS_PAGE,
                after=after,
            ),
        )
        found += page
        if len(page) < _ANSWERS_PAGE:
            return found
        after = page[-1].memory_id


def suggestions(
    store: MemoryStore,
    triggers: TriggerSet,
    tenant: str,
    subjects: Sequence[str],
    as_of: datetime,
) -> list[Suggestion]:
    """The tool calls the triggers suggest for the subjects' memories at `as_of`, by
    trigger then memory; each (trigger, memory version) at most once, and none whose
    suggested call was answered by a recorded result."""
    found: list[Suggestion] = []
    for trigger in triggers.triggers:
        when = trigger.when
        for subject in dict.fromkeys(subjects):
            query = MemoryQuery(
                stream=subject,
                types=(when.type,) if when.type is not None else (),
                key=when.key,
                tags=when.tags[:1],
                live_at=as_of,
                limit=MAX_MEMORIES_PER_TRIGGER,
            )
            for memory in store.query(tenant, query):
                if not memory.is_live(as_of) or not when.holds(memory, as_of):
                    continue
                answered = _answers(store, tenant, memory.memory_id)
                fired = triggers.fired(trigger, memory, as_of, answered)
                if fired is not None:
                    found.append(fired)
    return found
