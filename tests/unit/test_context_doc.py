"""docs/context.md's score formula is the one context assembly computes, and its example
response's score follows from that formula and the parts it shows."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from mnemo.domain import context

DOC = Path(__file__).resolve().parents[2] / "docs" / "context.md"


def _code_formula() -> str:
    source = inspect.getsource(context.score_candidate)
    found = re.search(r"^\s*score = (.+)$", source, re.M)
    assert found is not None, "score_candidate computes `score = ...`"
    return found.group(1).strip()


def test_the_documented_score_formula_is_the_code_s() -> None:
    doc = DOC.read_text(encoding="utf-8")
    found = re.search(r"^\s*score\s+= (.+?)\s*$", doc, re.M)
    assert found is not None, "docs/context.md states `score = ...`"
    documented = found.group(1).replace("×", "*")
    assert documented == _code_formula()


def test_the_example_score_is_what_the_formula_gives() -> None:
    doc = DOC.read_text(encoding="utf-8")
    found = re.search(
        r'"score": \{"relevance": ([\d.]+), "rank": \d+,\s*"weight": ([\d.]+), '
        r'"freshness": ([\d.]+), "trust": ([\d.]+), "score": ([\d.]+)\}',
        doc,
    )
    assert found is not None, "docs/context.md shows an example score"
    relevance, weight, freshness, trust, score = map(float, found.groups())
    parts = {"relevance": relevance, "weight": weight, "freshness": freshness, "trust": trust}
    computed = eval(_code_formula(), {"__builtins__": {}}, parts)  # the code's own formula
    assert round(computed, 6) == score
