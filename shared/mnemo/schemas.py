"""Writes the JSON Schemas of the envelope and of every event type into a folder.

    python -m mnemo.schemas schemas

schemas/ is generated from the models; a test fails when the two drift apart.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from mnemo.domain.events import CATALOG, Envelope

__all__ = ["render_all", "write_all"]


def _dump(schema: dict[str, Any]) -> str:
    return json.dumps(schema, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def render_all() -> dict[str, str]:
    """File name (relative to the schemas folder) -> file text."""
    files = {"envelope.schema.json": _dump(Envelope.model_json_schema())}
    for (event_type, version), model in sorted(CATALOG.models.items()):
        schema = model.model_json_schema()
        schema["$id"] = f"mnemo:event:{event_type}:v{version}"
        schema["x-mnemo-publishable"] = model.PUBLIC
        schema["x-mnemo-current"] = CATALOG.current[event_type] == version
        files[f"events/{event_type}.v{version}.schema.json"] = _dump(schema)
    return files


def write_all(folder: Path) -> list[Path]:
    written = []
    for name, text in render_all().items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
        written.append(path)
    return written


if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "schemas")
    for path in write_all(target):
        print(path)
