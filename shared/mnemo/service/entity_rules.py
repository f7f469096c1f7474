"""Entity rules: Mnemo's (`mnemo/rules/entities.yaml`) and an operator's file in front of
them (`MNEMO_ENTITY_RULES_FILE`).

`load_entity_rules` refuses a file that is not YAML, has keys it does not know, or holds a
rule that does not compile (an unknown template, a pattern RE2 cannot run, a kind and
normaliser that do not agree, a field given two kinds), with `EntityRulesInvalid` naming
the file, the line and the rule. The rules themselves are `mnemo.domain.documents`'.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import yaml

from mnemo.domain.documents import EntityRules, EntityRulesInvalid, RuleLayer, compile_entity_rules
from mnemo.service.yaml_files import parse_yaml

__all__ = ["DEFAULT_NAME", "load_entity_rules"]

DEFAULT_NAME = "mnemo/rules/entities.yaml"
_KEYS = {"templates", "rules"}


def _layer(name: str, text: str) -> RuleLayer:
    root, data = parse_yaml(name, text, EntityRulesInvalid)
    if data is None:
        return RuleLayer(name, {}, ())
    if not isinstance(data, dict) or not isinstance(root, yaml.MappingNode):
        raise EntityRulesInvalid(f"{name}:1: the top level must be a mapping (templates, rules)")
    nodes = {getattr(k, "value", None): (k, v) for k, v in root.value}
    unknown = sorted(str(k) for k in set(data) - _KEYS)
    if unknown:
        line = nodes[unknown[0]][0].start_mark.line + 1 if unknown[0] in nodes else 1
        raise EntityRulesInvalid(
            f"{name}:{line}: unknown key(s) {', '.join(unknown)}; an entity rule file holds "
            "templates and rules"
        )
    templates = data.get("templates") or {}
    if not isinstance(templates, dict):
        line = nodes["templates"][1].start_mark.line + 1
        raise EntityRulesInvalid(f"{name}:{line}: templates must be a mapping")
    rules = data.get("rules") or []
    if not isinstance(rules, list):
        line = nodes["rules"][1].start_mark.line + 1
        raise EntityRulesInvalid(f"{name}:{line}: rules must be a list")
    lines = [1] * len(rules)
    if "rules" in nodes and isinstance(nodes["rules"][1], yaml.SequenceNode):
        lines = [item.start_mark.line + 1 for item in nodes["rules"][1].value]
    return RuleLayer(name, templates, tuple(zip(rules, lines, strict=True)))


def load_entity_rules(path: Path | None = None) -> EntityRules:
    """Mnemo's entity rules, with the rules of the operator's file at `path` (if any) in
    front of them, so that they claim text first."""
    default = resources.files("mnemo").joinpath("rules/entities.yaml").read_text("utf-8")
    layers = [_layer(DEFAULT_NAME, default)]
    if path is not None:
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise EntityRulesInvalid(f"{path}: cannot be read ({type(exc).__name__})") from None
        layers.insert(0, _layer(str(path), text))
    return compile_entity_rules(layers)
