"""Reading the YAML files operators give Mnemo (registration triggers, history rules, entity
rules): the text of the operator's file or of Mnemo's own default, and its parse, with any
failure raised as the caller's error naming the file and the line."""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any

import yaml

__all__ = ["parse_yaml", "read_rule_text"]


def read_rule_text(path: Path | None, default: str, error: type[Exception]) -> tuple[str, str]:
    """(name, text): the operator's file at `path`, or Mnemo's `mnemo/<default>`."""
    if path is None:
        return f"mnemo/{default}", resources.files("mnemo").joinpath(default).read_text("utf-8")
    try:
        return str(path), path.read_text(encoding="utf-8")
    except OSError as exc:
        raise error(f"{path}: cannot be read ({type(exc).__name__})") from None


def parse_yaml(name: str, text: str, error: type[Exception]) -> tuple[yaml.Node | None, Any]:
    """The node tree (which keeps line numbers) and the data of a YAML text."""
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader), yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f":{mark.line + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise error(f"{name}{line}: not valid YAML: {problem}") from None
