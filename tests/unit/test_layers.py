"""The dependency rule, read from the source (every import, at the top of a module or inside
a function), and the table of layers docs/architecture.md shows (`layers_markdown`).

From the inside out: the domain; the handlers on it; the ports and what every layer above
the domain shares (the log's record format, the sealer, telemetry); the adapters and the
use cases beside each other on those, neither importing the other; the clients on the
domain and the shared modules alone; the wiring (bootstrap, settings) on all of them; and
the entry points, which may use everything, the services' packages too. Nothing below the
entry points imports one.

`KNOWN` holds the imports against the rule the code still has. It may only shrink: an
import against the rule that is not in it fails, and so does an entry of it the code no
longer has (remove it). Run this file (`python -m tests.unit.test_layers`) to write the
tables into docs/architecture.md (the table of consumers too)."""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from mnemo.handlers import registry

REPO = Path(__file__).resolve().parents[2]
LIBRARY = REPO / "shared"
DOC = REPO / "docs" / "architecture.md"
# the gateway's package and one package per consumer of the table
SERVICES = ("mnemo_gateway", *(c.module for c in registry.CONSUMERS))
ROOTS = (LIBRARY, *(REPO / "services" / s.removeprefix("mnemo_") for s in SERVICES))
# libraries the domain may use: pure computation, no I/O or infrastructure
DOMAIN_LIBRARIES = frozenset({"pydantic", "pydantic_core", "orjson", "re2", "snowballstemmer"})

# (module, what it imports) against the rule today; none left
KNOWN: set[tuple[str, str]] = set()


@dataclass(frozen=True, slots=True)
class Layer:
    name: str
    modules: tuple[str, ...]  # its packages and modules (a name and everything below it)
    uses: tuple[str, ...]  # the layers it may import besides its own
    what: str
    libraries: frozenset[str] | None = None  # the outside libraries it may use (None: any)


LAYERS: tuple[Layer, ...] = (
    Layer(
        "Domain",
        ("mnemo.domain",),
        (),
        "events and catalog, memories, rules, ids, keywords, projection writes, the context "
        "protocol, the replica fold, acceptance of an event, errors",
        DOMAIN_LIBRARIES,
    ),
    Layer(
        "Handlers",
        ("mnemo.handlers",),
        ("Domain",),
        "pure handlers and the table of consumers (`registry.py`)",
        frozenset({"pydantic"}),
    ),
    Layer(
        "Shared",
        (
            "mnemo",
            "mnemo.ports",
            "mnemo.records",
            "mnemo.sealing",
            "mnemo.telemetry",
            "mnemo.schemas",
        ),
        ("Domain",),
        "the ports (abstract classes), the log's record format, the sealer (the server's and "
        "the Kafka publisher's), telemetry, the event schemas",
    ),
    Layer(
        "Adapters",
        ("mnemo.adapters",),
        ("Domain", "Shared"),
        "one module (or package) per technology, each implementing ports",
    ),
    Layer(
        "Application",
        ("mnemo.service",),
        ("Domain", "Handlers", "Shared"),
        "use cases, context assembly, the console's queries, the embedded runner, the "
        "distributed partition processors, the ports' sealing views",
    ),
    Layer(
        "Clients",
        ("mnemo.client", "mnemo.sync"),
        ("Domain", "Shared"),
        "the Python SDK and the Kafka publisher, the device replica",
    ),
    Layer(
        "Wiring",
        ("mnemo.bootstrap", "mnemo.settings"),
        ("Domain", "Handlers", "Shared", "Adapters", "Application"),
        "settings, and the one place that builds a platform from them",
    ),
    Layer(
        "Entry points",
        ("mnemo.entrypoints", "mnemo.__main__", "mnemo.cli", *SERVICES),
        ("Domain", "Handlers", "Shared", "Adapters", "Application", "Clients", "Wiring"),
        "the `mnemo` CLI, the MCP server, the faust workers, the one-consumer mains, the "
        "admin actions; the services' packages (`services/*`: the HTTP gateway, one "
        "consumer per process)",
    ),
)


def layer_of(module: str) -> Layer | None:
    """The layer of a module: the one naming it or its nearest package."""
    best: tuple[int, Layer] | None = None
    for layer in LAYERS:
        for m in layer.modules:
            if _within(module, m) and (best is None or len(m) > best[0]):
                best = (len(m), layer)
    return best[1] if best else None


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
    own = layer_of(module)
    assert own is not None, f"{module} belongs to no layer: add it to LAYERS"
    if top != "mnemo" and top not in SERVICES:
        return own.libraries is not None and top not in own.libraries
    target = layer_of(name)
    return target is not None and target.name not in (own.name, *own.uses)


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
    assert _broken("mnemo.adapters.sqlite_store", "mnemo.settings", "mnemo")
    assert _broken("mnemo.handlers.decay", "orjson", "orjson")
    assert not _broken("mnemo.handlers.decay", "mnemo.domain.events", "mnemo")
    assert not _broken("mnemo.service.app", "mnemo.handlers.registry", "mnemo")
    assert not _broken("mnemo.bootstrap", "mnemo.adapters.sqlite_store", "mnemo")


def test_function_level_imports_and_imported_modules_are_read() -> None:
    source = LIBRARY / "mnemo" / "entrypoints" / "workers.py"
    names = set(_imports(source))
    assert "mnemo_gateway.app" in names  # imported inside a function
    assert "mnemo.handlers.registry" in names  # `from mnemo.handlers import registry`
    assert "mnemo.bootstrap.Platform" not in names  # a name, not a module


def test_every_module_of_the_library_belongs_to_a_layer() -> None:
    for path in sorted((LIBRARY / "mnemo").rglob("*.py")):
        assert layer_of(_module_name(path)) is not None, path


# ---- the tables docs/architecture.md shows --------------------------------------------


def _where(module: str) -> str:
    if module in SERVICES:
        return f"`services/{module.removeprefix('mnemo_')}`"
    path = Path("shared", *module.split("."))
    return f"`{path}/`" if (REPO / path).is_dir() else f"`{path}.py`"


def layers_markdown() -> str:
    rows = ["| Layer | Where | What | May import |", "|---|---|---|---|"]
    for layer in LAYERS:
        where = ", ".join(_where(m) for m in layer.modules if m != "mnemo")
        if "mnemo" in layer.modules:
            where += ", `shared/mnemo/__init__.py`"
        uses = ", ".join(layer.uses) or "-"
        if layer.libraries is not None:
            uses += "; of outside libraries only " + ", ".join(sorted(layer.libraries))
        rows.append(f"| {layer.name} | {where} | {layer.what} | {uses} |")
    return "\n".join(rows) + "\n"


def _classes(path: Path) -> Iterator[tuple[str, list[str]]]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            yield node.name, [b.id for b in node.bases if isinstance(b, ast.Name)]


def ports_markdown() -> str:
    """Each port of mnemo.ports (an abstract class), the ports it is made of, and the
    adapter classes that implement it (directly, through a port made of it, or through an
    adapter class they extend), read from the source."""
    tree = ast.parse((LIBRARY / "mnemo" / "ports.py").read_text(encoding="utf-8"))
    ports = {
        n.name: [ast.unparse(b) for b in n.bases if ast.unparse(b) != "abc.ABC"]
        for n in tree.body
        if isinstance(n, ast.ClassDef) and any(ast.unparse(b) == "abc.ABC" for b in n.bases)
    }
    classes: dict[str, list[str]] = {}  # "module.Class" -> its bases' names
    for path in sorted((LIBRARY / "mnemo" / "adapters").rglob("*.py")):
        module = _module_name(path).removeprefix("mnemo.adapters.")
        for name, parents in _classes(path):
            classes[f"{module}.{name}"] = parents

    def ancestors(name: str, module: str) -> set[str]:
        found: set[str] = set()
        parents = ports[name] if name in ports else classes.get(f"{module}.{name}", [])
        for b in parents:
            home = module
            if b not in ports and f"{module}.{b}" not in classes:  # imported from another
                home = next((c.rsplit(".", 1)[0] for c in classes if c.endswith(f".{b}")), "")
            found |= {b, *ancestors(b, home)}
        return found

    rows = ["| Port | Made of | Adapters |", "|---|---|---|"]
    for port, parts in ports.items():
        made = ", ".join(f"`{p}`" for p in parts) or "-"
        adapters = [f"`{c}`" for c in classes if port in ancestors(*reversed(c.rsplit(".", 1)))]
        rows.append(f"| `{port}` | {made} | {', '.join(adapters) or '-'} |")
    return "\n".join(rows) + "\n"


def _section(doc: str, name: str) -> str | None:
    found = re.search(rf"<!-- {name}:begin -->\n(.*?)<!-- {name}:end -->", doc, re.S)
    return found.group(1) if found else None


def _write(doc: str, name: str, table: str) -> str:
    return re.sub(
        rf"(<!-- {name}:begin -->\n).*?(<!-- {name}:end -->)",
        lambda m: m.group(1) + table + m.group(2),
        doc,
        flags=re.S,
    )


def test_the_architecture_doc_shows_the_layers_and_ports_as_the_code_has_them() -> None:
    doc = DOC.read_text(encoding="utf-8")
    hint = "run `python -m tests.unit.test_layers`"
    assert _section(doc, "layers") == layers_markdown(), hint
    assert _section(doc, "ports") == ports_markdown(), hint


if __name__ == "__main__":  # also the table of consumers (test_registry checks it)
    text = DOC.read_text(encoding="utf-8")
    for name, table in (
        ("layers", layers_markdown()),
        ("ports", ports_markdown()),
        ("consumers", registry.table_markdown()),
    ):
        text = _write(text, name, table)
    DOC.write_text(text)
