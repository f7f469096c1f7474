"""The table of consumers (mnemo.handlers.registry) against every place that runs or deploys
them. `places_lacking` names each place that does not know a consumer of a table; the
table as it is must leave none, and a consumer added to it must be named missing in each
place that is not generated from it."""

from __future__ import annotations

import json
import re
import tomllib
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest
import yaml
from tests.support import stack_module

from mnemo import settings
from mnemo.bootstrap import Platform
from mnemo.domain.events import CATALOG, Actor, ActorKind, Envelope
from mnemo.domain.projection import PutTimeline
from mnemo.entrypoints import workers
from mnemo.handlers import Decision, decay, indexing, registration, registry, timeline, toolchain
from mnemo.handlers.registry import Consumer, Projection

REPO = Path(__file__).resolve().parents[2]
GATEWAY = "gateway"


def _helm_component_names() -> list[str]:
    helpers = (REPO / "helm/mnemo/templates/_helpers.tpl").read_text(encoding="utf-8")
    found = re.search(r'define "mnemo\.componentNames" -}}\s*(.*?)\s*{{- end', helpers, re.S)
    assert found is not None, "_helpers.tpl defines mnemo.componentNames"
    return found.group(1).split()


def places_lacking(table: Sequence[Consumer], runner_steps: Callable[[], object]) -> list[str]:
    """Each place (with the consumer it lacks) that does not know a consumer of `table`.
    `runner_steps` builds the embedded runner's steps from the table (it raises when the
    runner has no step for one)."""
    lacking: list[str] = []
    names = [c.name for c in table]
    try:
        runner_steps()
    except LookupError as exc:
        lacking.append(f"service/runner.py: {exc}")
    for c in table:
        if not set(c.periodic) <= set(workers.PERIODIC):
            lacking.append(f"entrypoints/workers.py PERIODIC: {c.name}")
    if tuple(settings.CONSUMERS) != tuple(names):
        lacking.append(f"settings.py CONSUMERS: {sorted(set(names) - set(settings.CONSUMERS))}")
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    setuptools = project["tool"]["setuptools"]
    mypy_path = project["tool"]["mypy"]["mypy_path"]
    for c in table:
        package = REPO / "services" / c.name / c.module
        main = package / "__main__.py"
        if not main.exists() or f'main("{c.name}")' not in main.read_text(encoding="utf-8"):
            lacking.append(f"services/{c.name}/{c.module}/__main__.py")
        app = package / "app.py"
        if not app.exists() or f'make_worker("{c.name}")' not in app.read_text(encoding="utf-8"):
            lacking.append(f"services/{c.name}/{c.module}/app.py")
        if setuptools["package-dir"].get(c.module) != f"services/{c.name}/{c.module}":
            lacking.append(f"pyproject.toml package-dir: {c.module}")
        if c.module not in setuptools["packages"]:
            lacking.append(f"pyproject.toml packages: {c.module}")
        if f"services/{c.name}" not in mypy_path:
            lacking.append(f"pyproject.toml mypy_path: services/{c.name}")
    stack = stack_module()
    if sorted(stack.CONSUMER_PORTS) != sorted(names):
        lacking.append(f"infra/stack.py CONSUMER_PORTS: {sorted(stack.CONSUMER_PORTS)}")
    server = stack.Stack(Path("/nonexistent"), env={"MNEMO_QDRANT_URL": "http://127.0.0.1:1"})
    if sorted(server.ports) != sorted(names):
        lacking.append(f"infra/stack.py Stack.ports: {sorted(server.ports)}")
    else:
        processes = {c.name: c.module for c in server.components() if c.name != GATEWAY}
        if processes != {c.name: c.module for c in table}:
            lacking.append(f"infra/stack.py Stack.components: {sorted(processes)}")
    if _helm_component_names() != [GATEWAY, *names]:
        lacking.append(f"helm _helpers.tpl mnemo.componentNames: {_helm_component_names()}")
    values = yaml.safe_load((REPO / "helm/mnemo/values.yaml").read_text(encoding="utf-8"))
    for c in table:
        if values["components"].get(c.name, {}).get("consumerGroup") != f"mnemo-{c.name}":
            lacking.append(f"helm values.yaml components.{c.name}.consumerGroup")
    schema = json.loads((REPO / "helm/mnemo/values.schema.json").read_text(encoding="utf-8"))
    components = schema["properties"]["components"]["properties"]
    if sorted(components) != sorted([GATEWAY, *names]):
        lacking.append(f"helm values.schema.json components: {sorted(components)}")
    return lacking


@pytest.fixture
def steps(platform: Platform) -> Callable[[], object]:
    return platform.runner._steps_of_consumers


def test_every_place_knows_every_consumer_of_the_table(steps: Callable[[], object]) -> None:
    assert places_lacking(registry.CONSUMERS, steps) == []


def test_a_consumer_added_to_the_table_is_named_missing_in_each_place(
    steps: Callable[[], object], monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = Consumer(
        "ledger",
        (Projection(lambda event: Decision(), None, ("usage",)),),
        periodic=("reconcile",),
    )
    table = (*registry.CONSUMERS, ledger)
    monkeypatch.setattr(registry, "CONSUMERS", table)
    lacking = places_lacking(table, steps)
    expected = [
        "service/runner.py",
        "entrypoints/workers.py PERIODIC: ledger",
        "settings.py CONSUMERS",
        "services/ledger/mnemo_ledger/__main__.py",
        "services/ledger/mnemo_ledger/app.py",
        "pyproject.toml package-dir: mnemo_ledger",
        "pyproject.toml packages: mnemo_ledger",
        "pyproject.toml mypy_path: services/ledger",
        "infra/stack.py CONSUMER_PORTS",
        "infra/stack.py Stack.ports",
        "helm _helpers.tpl mnemo.componentNames",
        "helm values.yaml components.ledger.consumerGroup",
        "helm values.schema.json components",
    ]
    for place in expected:
        assert any(x.startswith(place) for x in lacking), f"{place} not named in {lacking}"
    assert len(lacking) == len(expected), lacking
    assert "ledger" in lacking[0]


def test_the_runner_and_the_processors_take_their_consumers_from_the_table(
    platform: Platform,
) -> None:
    from mnemo.service import distributed, runner

    assert runner.CONSUMERS == workers.CONSUMERS == registry.NAMES
    assert list(platform.runner._steps) == list(registry.NAMES)
    assert distributed.Sequencer.consumer == registry.SEQUENCER
    for name in registry.FOLLOWERS:
        if not registry.consumer(name).indexes:
            assert callable(platform.runner.decider(name))
    with pytest.raises(LookupError):
        platform.runner.decider(registry.SEQUENCER + "-unknown")
    with pytest.raises(ValueError, match="unknown consumer"):
        registry.consumer("ledger")


def test_the_timeline_is_a_read_model_the_registrar_declares_and_projects(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mnemo.service import runner
    from mnemo.service.app import RequestContext

    registrar = registry.consumer(registry.SEQUENCER)
    assert registrar.projects("timeline")
    assert registry.READ_MODELS["timeline"].writes == (PutTimeline,)
    ctx = RequestContext("acme", "tester")

    def declared(content: str) -> list[str]:
        event = {
            "type": "MemoryDeclared",
            "schema_version": 1,
            "stream": "user:U1",
            "payload": {"memory": {"type": "fact", "content": content}},
        }
        published = platform.app.publish(ctx, [event])
        platform.runner.drain()
        [outcome] = platform.app.outcome(ctx, published.accepted[0].event_id)
        assert outcome.memory_id is not None
        return [e.what for e in platform.store.timeline("acme", outcome.memory_id)]

    assert declared("The user ships to Lisbon.") == ["registered"]
    # a registrar whose table entry leaves the timeline out writes none
    without = Consumer(
        registrar.name,
        tuple(p for p in registrar.projections if "timeline" not in p.writes),
        sequencer=True,
    )
    monkeypatch.setattr(runner, "_REGISTRAR", without)
    assert declared("The user ships to Porto.") == []


def _envelope(event_type: str) -> Envelope:
    return Envelope(
        event_id="0190a6a0-0000-7000-8000-000000000001",
        type=event_type,
        schema_version=CATALOG.current[event_type],
        tenant="acme",
        stream="user:1",
        occurred_at="2026-11-30T12:00:00Z",  # type: ignore[arg-type]
        actor=Actor(kind=ActorKind.AGENT, id="a"),
        payload={},
    )


@pytest.mark.parametrize("spec", registry.CONSUMERS, ids=registry.NAMES)
def test_a_handler_does_nothing_with_an_event_type_it_does_not_declare(spec: Consumer) -> None:
    """The declared types are the handlers' own dispatch: an event of any other type of
    the catalog (here with an empty payload, which a handler reading it would choke on)
    gives no writes and no events."""
    for projection in spec.projections:
        if projection.types is None:
            continue
        assert projection.types <= set(CATALOG.current)
        for event_type in sorted(set(CATALOG.current) - projection.types):
            event = _envelope(event_type)
            handler = projection.handler
            if handler is indexing.plan:
                assert len(handler([event])) == 0, event_type
            elif handler is timeline.entries:
                assert handler(event, 1) == [], event_type
            elif handler is registration.handle:
                decided = handler(event, _NoState(), _NoRules())
                assert (decided.events, decided.writes) == ([], []), event_type
            elif handler in (decay.handle, toolchain.handle, toolchain.timers):
                decided = handler(event, _NoState())
                assert (decided.events, decided.writes) == ([], []), event_type
            else:
                pytest.fail(f"no way to call {handler} here")


class _NoState:
    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"read state ({name}) for an event it does not handle")


class _NoRules(_NoState):
    pass


def test_the_architecture_doc_shows_the_table_as_the_code_has_it() -> None:
    doc = (REPO / "docs/architecture.md").read_text(encoding="utf-8")
    found = re.search(r"<!-- consumers:begin -->\n(.*?)<!-- consumers:end -->", doc, re.S)
    assert found is not None, "docs/architecture.md has the consumers table"
    assert found.group(1) == registry.table_markdown()
