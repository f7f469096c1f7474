"""The dependency rule, read from the source (every import, at the top of a module or inside
a function): domain <- handlers <- service <- bootstrap <- entry points, with the adapters
beside the service (both depend on the ports, neither on the other) and the clients on
the domain alone.

`KNOWN` holds the upward imports the code still has. It may only shrink: an import
against a rule that is not in it fails, and so does an entry of it the code no longer
has (remove it)."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LIBRARY = REPO / "shared"
SERVICES = ("mnemo_gateway", "mnemo_registrar", "mnemo_indexer", "mnemo_decay", "mnemo_audit")
ROOTS = (LIBRARY, *(REPO / "services" / s.removeprefix("mnemo_") for s in SERVICES))
# libraries the domain may use: pure computation, no I/O or infrastructure
DOMAIN_LIBRARIES = {"pydantic", "pydantic_core", "orjson", "re2", "snowballstemmer"}

# (module, what it imports) against a rule today; none left
KNOWN: set[tuple[str, str]] = set()
# modules every layer above the domain may use: the ports, the log's record format and the
# sealer (shared by the server and the Kafka publisher), and telemetry
SHARED = ("mnemo.ports", "mnemo.records", "mnemo.sealing", "mnemo.telemetry")


def _module_name(path: Path) -> str:
    parts = path.relative_to(LIBRARY).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    for root in ROOTS:
        where = root.joinpath(*name.split("."))
        if where.with_suffix(".py").exists() or (where / "__init__.py").exists():
            return True
    return False


def _imports(path: Path) -> Iterator[str]:
    """The modules a file imports (`from a import b` imports a, and a.b when b is one)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}: a relative import"
            assert node.module is not None
            yield node.module
            for a in node.names:
                if _is_module(f"{node.module}.{a.name}"):
                    yield f"{node.module}.{a.name}"


def _within(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def violations() -> set[tuple[str, str]]:
    """Every (module, import) of the library that breaks a rule."""
    found: set[tuple[str, str]] = set()
    for path in sorted((LIBRARY / "mnemo").rglob("*.py")):
        module = _module_name(path)
        for name in set(_imports(path)):
            top = name.split(".")[0]
            if name.startswith("__future__") or top in sys.stdlib_module_names:
                continue
            if _broken(module, name, top):
                found.add((module, name))
    return found


def _broken(module: str, name: str, top: str) -> bool:
    if _within(module, "mnemo.entrypoints") or module == "mnemo.__main__":
        return False  # the outermost layer: it may use everything, the services' too
    if top in SERVICES or _within(name, "mnemo.entrypoints"):
        return True  # nothing below the entry points imports one
    if _within(module, "mnemo.domain"):
        return not (_within(name, "mnemo.domain") or top in DOMAIN_LIBRARIES)
    if _within(module, "mnemo.handlers"):
        return not (
            _within(name, "mnemo.domain") or _within(name, "mnemo.handlers") or top == "pydantic"
        )
    if module in ("mnemo.ports", "mnemo.records", "mnemo.sealing"):
        return top == "mnemo" and not (_within(name, "mnemo.domain") or name in (*SHARED, "mnemo"))
    if _within(module, "mnemo.adapters"):
        return _within_any(name, "handlers", "service", "bootstrap", "client", "settings")
    if _within(module, "mnemo.service"):
        return _within_any(name, "bootstrap", "adapters", "client")
    if _within(module, "mnemo.client") or module == "mnemo.sync":
        return _within_any(name, "service", "adapters", "bootstrap", "handlers")
    return False


def _within_any(name: str, *layers: str) -> bool:
    return any(_within(name, f"mnemo.{layer}") for layer in layers)


def test_no_import_breaks_the_dependency_rule_beyond_the_known_ones() -> None:
    found = violations()
    assert sorted(found - KNOWN) == [], "imports against the dependency rule"
    assert sorted(KNOWN - found) == [], "gone from the code: remove them from KNOWN"


def test_the_rule_catches_an_upward_import() -> None:
    assert _broken("mnemo.domain.memory", "mnemo.service.app", "mnemo")
    assert _broken("mnemo.domain.memory", "cassandra.cluster", "cassandra")
    assert _broken("mnemo.handlers.decay", "mnemo.adapters.sqlite_store", "mnemo")
    assert _broken("mnemo.ports", "mnemo.adapters.clocks", "mnemo")
    assert _broken("mnemo.adapters.sqlite_store", "mnemo.service.runner", "mnemo")
    assert _broken("mnemo.service.app", "mnemo.bootstrap", "mnemo")
    assert _broken("mnemo.client.kafka", "mnemo.adapters.kafka_topic", "mnemo")
    assert _broken("mnemo.client.kafka", "mnemo.service.sealing", "mnemo")
    assert _broken("mnemo.service.distributed", "mnemo.client.kafka", "mnemo")
    assert _broken("mnemo.service.runner", "mnemo.adapters.sqlite_store", "mnemo")
    assert _broken("mnemo.sealing", "mnemo.service.context", "mnemo")
    assert _broken("mnemo.sync", "mnemo_gateway.app", "mnemo_gateway")
    assert _broken("mnemo.bootstrap", "mnemo.entrypoints.workers", "mnemo")
    assert _broken("mnemo.service.app", "mnemo.entrypoints.admin", "mnemo")
    assert not _broken("mnemo.entrypoints.cli", "mnemo_gateway.app", "mnemo_gateway")
    assert not _broken("mnemo.entrypoints.workers", "mnemo.bootstrap", "mnemo")
    assert not _broken("mnemo.client.kafka", "mnemo.sealing", "mnemo")
    assert not _broken("mnemo.service.distributed", "mnemo.records", "mnemo")
    assert not _broken("mnemo.handlers.decay", "mnemo.domain.events", "mnemo")
    assert not _broken("mnemo.service.app", "mnemo.handlers.registry", "mnemo")
    assert not _broken("mnemo.bootstrap", "mnemo.adapters.sqlite_store", "mnemo")


def test_function_level_imports_and_imported_modules_are_read() -> None:
    source = LIBRARY / "mnemo" / "entrypoints" / "workers.py"
    names = set(_imports(source))
    assert "mnemo_gateway.app" in names  # imported inside a function
    assert "mnemo.handlers.registry" in names  # `from mnemo.handlers import registry`
    assert "mnemo.bootstrap.Platform" not in names  # a name, not a module
