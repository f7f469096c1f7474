"""Registration rules: regex triggers whose capture groups become typed key/value memories.

Rules come from YAML (see mnemo/rules/default.yaml); this module only checks and applies
them. An utterance that no rule matches is not remembered.
"""

from __future__ import annotations

import re
import string
from datetime import datetime, timedelta, timezone
from typing import Annotated
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, field_validator

from mnemo.domain.memory import MemoryDraft, MemoryType, Provenance, Scope
from mnemo.domain.patterns import LinearPattern, UnsupportedPattern, linear_pattern

__all__ = [
    "RegistrationRule",
    "RuleMatch",
    "RuleSet",
    "end_of_local_day",
    "parse_duration",
    "to_local",
    "zone_of",
]

_DURATION = re.compile(r"^(\d+)([smhdw])$")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800}
_OFFSET = re.compile(r"^([+-])(\d{2}):?(\d{2})$")


def parse_duration(text: str) -> int:
    """Seconds in a duration such as 30m, 24h, 7d."""
    match = _DURATION.fullmatch(text.strip())
    if not match:
        raise ValueError(f"duration {text!r} is not like 30m, 24h or 7d")
    return int(match.group(1)) * _UNITS[match.group(2)]


def zone_of(name: str | None) -> ZoneInfo | None:
    """The tzinfo for a zone name; None means: use the offset the event carried."""
    if name is None or _OFFSET.fullmatch(name):
        return None
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ValueError(f"unknown time zone {name!r}") from exc


def to_local(instant: datetime, zone_name: str | None) -> datetime:
    """An instant seen on the user's wall clock: in their zone, else at the offset the
    event carried."""
    zone = zone_of(zone_name)
    if zone is not None:
        return instant.astimezone(zone)
    if zone_name is not None:
        match = _OFFSET.fullmatch(zone_name)
        assert match is not None
        sign = 1 if match.group(1) == "+" else -1
        delta = timedelta(hours=int(match.group(2)), minutes=int(match.group(3)))
        return instant.astimezone(timezone(sign * delta))
    return instant


def end_of_local_day(instant: datetime, zone_name: str | None) -> datetime:
    """The next local midnight after `instant`, on the user's calendar."""
    local = to_local(instant, zone_name)
    # wall-clock arithmetic in the zone: a DST change during the day is honoured
    return (local + timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)


class RegistrationRule(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str = Field(pattern=r"^[a-z0-9][a-z0-9_.-]{0,63}$")
    description: str = ""
    pattern: str
    type: MemoryType
    scope: Scope = Scope.USER
    key: str = Field(description="a literal key, or {group} to take it from the match")
    value: str = Field(default="{value}", description="a template over the capture groups")
    content: str | None = Field(default=None, description="template; defaults to key: value")
    ttl: Annotated[str, Field(pattern=r"^(permanent|end_of_day|\d+[smhdw])$")] = "permanent"
    tags: tuple[str, ...] = ()
    trust: float = Field(default=0.5, ge=0.0, le=1.0)
    semantic_weight: float = Field(default=0.5, ge=0.0, le=0.99)

    @field_validator("pattern")
    @classmethod
    def _compiles(cls, value: str) -> str:
        try:
            linear_pattern(value, ignore_case=True)
        except UnsupportedPattern as exc:
            raise ValueError(str(exc)) from None
        return value

    def compiled(self) -> LinearPattern:
        """The pattern on the linear-time engine (RE2), case insensitive."""
        return linear_pattern(self.pattern, ignore_case=True)


class RuleMatch(BaseModel):
    model_config = ConfigDict(frozen=True)

    rule_id: str
    draft: MemoryDraft


def _fill(template: str, groups: dict[str, str]) -> str:
    try:
        return template.format(**groups).strip()
    except (KeyError, IndexError) as exc:
        raise ValueError(f"template {template!r} names a group the pattern lacks") from exc


class RuleSet:
    """Rules in priority order; the first rule to claim a key wins."""

    def __init__(self, rules: list[RegistrationRule]) -> None:
        ids = [r.id for r in rules]
        if len(ids) != len(set(ids)):
            raise ValueError("rule ids must be unique")
        for rule in rules:
            groups = set(rule.compiled().groupindex)
            for name, template in (
                ("key", rule.key),
                ("value", rule.value),
                ("content", rule.content),
            ):
                if template is None:
                    continue
                wanted = {f for _, f, _, _ in string.Formatter().parse(template) if f}
                allowed = groups | ({"value"} if name == "content" else set())
                if wanted - allowed:
                    raise ValueError(
                        f"rule {rule.id}: {name} names {sorted(wanted - allowed)}, which the "
                        f"pattern does not capture"
                    )
        self.rules = rules
        self._compiled = [(r, r.compiled()) for r in rules]

    def match(self, text: str, occurred_at: datetime, zone_name: str | None) -> list[RuleMatch]:
        found: dict[str, RuleMatch] = {}
        claimed: list[tuple[int, int]] = []
        for rule, pattern in self._compiled:
            hit = pattern.search(text)
            if hit is None or any(
                hit.start() < end and start < hit.end() for start, end in claimed
            ):
                continue
            groups = {k: v.strip() for k, v in hit.groupdict().items() if v is not None}
            key = _fill(rule.key, groups).lower().replace(" ", "_")
            if key in found or not key:
                continue
            value = _fill(rule.value, groups).rstrip("。.!！ ")
            if not value:
                continue
            content = _fill(rule.content, {**groups, "value": value}) if rule.content else ""
            ttl_seconds: int | None = None
            valid_until: datetime | None = None
            if rule.ttl == "end_of_day":
                valid_until = end_of_local_day(occurred_at, zone_name)
            elif rule.ttl != "permanent":
                ttl_seconds = parse_duration(rule.ttl)
            draft = MemoryDraft(
                type=rule.type,
                scope=rule.scope,
                key=key,
                value=value,
                content=content,
                tags=rule.tags,
                ttl_seconds=ttl_seconds,
                valid_until=valid_until,
                timezone=zone_name,
                semantic_weight=rule.semantic_weight,
                provenance=Provenance(source_id=f"rule:{rule.id}", trust=rule.trust),
            )
            found[key] = RuleMatch(rule_id=rule.id, draft=draft)
            claimed.append((hit.start(), hit.end()))
        return list(found.values())
