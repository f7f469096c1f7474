"""Loading the history rules (mnemo/rules/history.yaml, or the operator's file).

`load_history_rules` refuses a file that is not YAML, has keys it does not know, a kind or
rule that does not validate, a rule naming an undeclared kind or a field its kind lacks,
or a rule id declared twice, with a message naming the file, the line and the rule
(HistoryRuleFileError). A file with `extends: default` adds its kinds and rules to the
defaults' (its rules first, its kinds over same-named ones).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from mnemo.domain.history import FactKind, FactRule, FactRules
from mnemo.service.triggers import _line, _where
from mnemo.service.yaml_files import parse_yaml, read_rule_text

__all__ = ["DEFAULT_NAME", "HistoryRuleFileError", "load_history_rules"]

DEFAULT_NAME = "mnemo/rules/history.yaml"
_KEYS = {"kinds", "facts", "extends"}


class HistoryRuleFileError(ValueError):
    """A history rule file Mnemo refuses; the message names the file, the line and the rule."""


def _read(path: Path | None) -> tuple[str, yaml.Node | None, dict[str, Any]]:
    name, text = read_rule_text(path, "rules/history.yaml", HistoryRuleFileError)
    root, data = parse_yaml(name, text, HistoryRuleFileError)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise HistoryRuleFileError(f"{name}:1: the top level must be a mapping (kinds, facts)")
    unknown = sorted(str(k) for k in set(data) - _KEYS)
    if unknown:
        raise HistoryRuleFileError(
            f"{name}:{_line(root, unknown[0])}: unknown key(s) {', '.join(unknown)}; "
            "a history rule file holds kinds, facts and extends"
        )
    if data.get("kinds") is not None and not isinstance(data["kinds"], dict):
        raise HistoryRuleFileError(f"{name}:{_line(root, 'kinds')}: kinds must be a mapping")
    if data.get("facts") is not None and not isinstance(data["facts"], list):
        raise HistoryRuleFileError(f"{name}:{_line(root, 'facts')}: facts must be a list")
    if data.get("extends") not in (None, "default"):
        raise HistoryRuleFileError(
            f"{name}:{_line(root, 'extends')}: extends may only name 'default'"
        )
    return name, root, data


def _layer(
    name: str, root: yaml.Node | None, data: dict[str, Any], kinds: dict[str, FactKind]
) -> list[FactRule]:
    for kind_name, raw in (data.get("kinds") or {}).items():
        try:
            kinds[str(kind_name)] = FactKind.model_validate(raw)
        except ValidationError as exc:
            loc, msg = _where(exc)
            at = _line(root, "kinds", kind_name, *loc)
            raise HistoryRuleFileError(f"{name}:{at}: kind {kind_name!r}: {msg}") from None
    rules: list[FactRule] = []
    for i, raw in enumerate(data.get("facts") or []):
        label = repr(raw.get("id")) if isinstance(raw, dict) and raw.get("id") else f"#{i + 1}"
        try:
            rules.append(FactRule.model_validate(raw))
        except ValidationError as exc:
            loc, msg = _where(exc)
            at = _line(root, "facts", i, *loc)
            raise HistoryRuleFileError(f"{name}:{at}: rule {label}: {msg}") from None
    return rules


def load_history_rules(path: Path | None = None, numbers: Any | None = None) -> FactRules:
    """The history rules of a YAML file, or Mnemo's defaults. `numbers` writes Chinese
    numerals as digits (the platform passes cn2an's)."""
    name, root, data = _read(path)
    layers = [(name, root, data)]
    if path is not None and data.get("extends") == "default":
        layers.append(_read(None))
    kinds: dict[str, FactKind] = {}
    for layer_name, layer_root, layer in reversed(layers):  # the file's kinds win
        _layer(layer_name, layer_root, {"kinds": layer.get("kinds")}, kinds)
    rules: list[tuple[str, yaml.Node | None, int, FactRule]] = []
    for layer_name, layer_root, layer in layers:  # the file's rules first
        found = _layer(layer_name, layer_root, {"facts": layer.get("facts")}, {})
        rules += [(layer_name, layer_root, i, r) for i, r in enumerate(found)]
    seen: set[str] = set()
    for layer_name, layer_root, i, rule in rules:
        if rule.id in seen:
            at = _line(layer_root, "facts", i, "id")
            raise HistoryRuleFileError(f"{layer_name}:{at}: rule {rule.id!r} is declared twice")
        seen.add(rule.id)
        try:
            FactRules.check(rule, kinds)
        except ValueError as exc:
            at = _line(layer_root, "facts", i, "kind")
            raise HistoryRuleFileError(f"{layer_name}:{at}: {exc}") from None
    try:
        return FactRules(kinds, [r for _, _, _, r in rules], numbers=numbers)
    except ValueError as exc:
        raise HistoryRuleFileError(f"{name}: {exc}") from None
