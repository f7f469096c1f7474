"""The store's connection: session, keyspaces, prepared statements, reads in parallel."""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any, Self

from cassandra import AuthenticationFailed, ConsistencyLevel, ProtocolVersion
from cassandra.auth import PlainTextAuthProvider
from cassandra.cluster import EXEC_PROFILE_DEFAULT, Cluster, ExecutionProfile, NoHostAvailable
from cassandra.concurrent import execute_concurrent
from cassandra.policies import DCAwareRoundRobinPolicy, TokenAwarePolicy
from cassandra.protocol import ConfigurationException
from cassandra.query import PreparedStatement, tuple_factory

from mnemo.adapters.cassandra_store.common import Row, _translated, _valid_keyspace
from mnemo.adapters.cassandra_store.rows import _NoBlinder, _WriteClock
from mnemo.adapters.cassandra_store.schema import _DDL_TIMEOUT, _replication_cql, migrate
from mnemo.adapters.cassandra_store.tables import _QUERIES
from mnemo.adapters.holder import holder_name
from mnemo.domain.errors import InvalidInput, Unavailable
from mnemo.ports import Blinder, MemoryQuery

# The driver writes a request in pieces of 4 KiB. With Nagle's algorithm on, every piece
# after the first waits for the node to acknowledge the one before it, and the node delays
# that acknowledgement (up to 40 ms on Linux): a request of more than 4 KiB (an IN of 100
# ids, a batch of writes) took about 44 ms against 3 ms for one of 99 ids. Pieces go out
# at once.
_SOCKET_OPTIONS = [(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)]

# The native protocol every connection speaks, named rather than negotiated. Left to
# itself the driver opens with versions newer than any Cassandra speaks, and downgrades on
# each refusal. Over TLS, Cassandra 5.0 sometimes drops such a connection without sending
# the refusal (a third of the tries on a node of this project's tests), and the driver then
# waits out its five-second connect timeout and gives up: a process failed to start, or
# `mnemo admin migrate` to run, one time in three. Version 5 is what Cassandra 5.0, which
# the schema's storage-attached index needs, speaks natively.
_PROTOCOL_VERSION = ProtocolVersion.V5


class _Connection:
    """The session, the keyspaces (the home one and one per tenant) and the prepared
    statements every part of the store runs on."""

    def __init__(
        self,
        session: Any,
        keyspace: str = "mnemo",
        *,
        keyspace_for: Callable[[str], str] | None = None,
        replication: Mapping[str, object] | None = None,
        create_keyspace: bool = False,
        migrate_schema: bool = True,
        serial_consistency: int = ConsistencyLevel.SERIAL,
        settle_seconds: float = 2.0,
        owns_cluster: bool = False,
        blinder: Blinder | None = None,
    ) -> None:
        self._session = session
        self._blinder: Blinder = blinder or _NoBlinder()
        self.home = _valid_keyspace(keyspace)
        self._keyspace_for = keyspace_for
        self._replication = dict(
            replication or {"class": "SimpleStrategy", "replication_factor": 1}
        )
        self._migrate = migrate_schema
        self._serial = serial_consistency
        self.settle_seconds = settle_seconds
        self._owns_cluster = owns_cluster
        self._writer = holder_name()
        self._clock = _WriteClock()
        self._lock = threading.RLock()  # commits that read-modify-write, recovery, reset
        self._meta = threading.Lock()
        self._prepared: dict[tuple[str, str], PreparedStatement] = {}
        self._ready: set[str] = set()
        self._unindexed: set[str] = set()  # keyspaces seen without a usable type index
        self._inflight: set[str] = set()  # owners of commits this process is applying
        self._dirty: set[str] = set()  # owners of sealed commits this process failed to apply
        self._clean: set[str] = set()  # owners position() found without a commit record
        # owner -> the position this process's last fenced commit wrote and finished under
        # an epoch no claim has replaced since it was taken (see `position`)
        self._committed: dict[str, int] = {}
        if create_keyspace:
            self._create_keyspace(self.home)
        # the versions this connection applied, per keyspace (`mnemo admin migrate` reports
        # them: on a keyspace it created, they are all of them)
        self.applied: dict[str, list[int]] = {}
        if migrate_schema:
            self.applied[self.home] = migrate(session, self.home)
        self._ready.add(self.home)
        self.recover()

    @classmethod
    def connect(
        cls,
        hosts: Sequence[str] | str,
        port: int = 9042,
        keyspace: str = "mnemo",
        *,
        replication: Mapping[str, object] | None = None,
        username: str | None = None,
        password: str | None = None,
        local_dc: str | None = None,
        request_timeout: float = 10.0,
        keyspace_for: Callable[[str], str] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        **options: Any,
    ) -> Self:
        """Connect, create the keyspace if needed, apply the migrations, and finish any
        commit left half-applied. With `ssl_context`, every connection is TLS; when the
        context checks host names, each node's address must match its certificate."""
        contact = [h.strip() for h in hosts.split(",")] if isinstance(hosts, str) else list(hosts)
        profile = ExecutionProfile(
            load_balancing_policy=TokenAwarePolicy(DCAwareRoundRobinPolicy(local_dc=local_dc)),
            consistency_level=ConsistencyLevel.LOCAL_QUORUM,
            serial_consistency_level=options.get("serial_consistency", ConsistencyLevel.SERIAL),
            request_timeout=request_timeout,
            row_factory=tuple_factory,
        )
        auth = (
            PlainTextAuthProvider(username=username, password=password or "")
            if username is not None
            else None
        )
        cluster = Cluster(
            contact_points=contact,
            port=port,
            auth_provider=auth,
            execution_profiles={EXEC_PROFILE_DEFAULT: profile},
            ssl_context=ssl_context,
            sockopts=_SOCKET_OPTIONS,
            protocol_version=_PROTOCOL_VERSION,
        )
        try:
            try:
                with _translated():
                    session = cluster.connect()
            except Unavailable as exc:
                _refuse_unverified_nodes(exc)
                _refuse_refused_credentials(exc, username is not None)
                raise
            return cls(
                session,
                keyspace,
                keyspace_for=keyspace_for,
                replication=replication,
                create_keyspace=True,
                owns_cluster=True,
                **options,
            )
        except BaseException:
            cluster.shutdown()
            raise

    # -- plumbing

    def _create_keyspace(self, ks: str) -> None:
        cql = (
            f"CREATE KEYSPACE IF NOT EXISTS {_valid_keyspace(ks)} "
            f"WITH replication = {_replication_cql(self._replication)}"
        )
        try:
            with _translated():
                self._session.execute(cql, timeout=_DDL_TIMEOUT)
        except ConfigurationException as exc:
            # a replication map the cluster refuses (an unknown datacenter, a bad class):
            # a configuration error naming the setting, not a crash with the driver's trace
            raise InvalidInput(
                f"Cassandra refused the replication of keyspace {ks} "
                f"({_replication_cql(self._replication)}): {getattr(exc, 'message', '')}",
                code="CASSANDRA_REPLICATION_INVALID",
                field="cassandra_replication",
            ) from exc

    @property
    def session(self) -> Any:
        """The driver session (the event archive shares it)."""
        return self._session

    def keyspace_of(self, tenant: str) -> str:
        """The keyspace holding a tenant's rows, created and migrated on first use."""
        return self._keyspace(tenant)

    def _blind(self, tenant: str, kind: str, value: str) -> str:
        return self._blinder.blind(tenant, kind, value)

    def _blinded(self, tenant: str, query: MemoryQuery) -> MemoryQuery:
        """The query with its key and tags hashed as the stored filter columns are."""
        if query.key is None and not query.tags:
            return query
        return replace(
            query,
            key=self._blind(tenant, "key", query.key) if query.key is not None else None,
            tags=tuple(dict.fromkeys(self._blind(tenant, "tag", t) for t in query.tags)),
        )

    def _keyspace(self, tenant: str) -> str:
        if self._keyspace_for is None:
            return self.home
        ks = _valid_keyspace(self._keyspace_for(tenant))
        if ks not in self._ready:
            with self._meta:
                if ks not in self._ready:
                    self._create_keyspace(ks)
                    if self._migrate:
                        self.applied[ks] = migrate(self._session, ks)
                    self._execute(self.home, "keyspace_add", [ks])
                    self._ready.add(ks)
        return ks

    def _keyspaces(self) -> list[str]:
        """The home keyspace, then every keyspace tenants have been given."""
        names = [str(r[0]) for r in self._execute(self.home, "keyspace_list", [])]
        return [self.home, *sorted(set(names) - {self.home})]

    def _prepare(self, ks: str, name: str) -> PreparedStatement:
        key = (ks, name)
        stmt = self._prepared.get(key)
        if stmt is None:
            with _translated():
                stmt = self._session.prepare(_QUERIES[name].replace("{ks}", ks))
            stmt.consistency_level = ConsistencyLevel.LOCAL_QUORUM
            if name in ("head_move", "fence_claim", "fence_seal"):
                stmt.serial_consistency_level = self._serial
            self._prepared[key] = stmt
        return stmt

    def _execute(
        self, ks: str, name: str, params: Sequence[Any], fetch_size: int | None = None
    ) -> Any:
        bound = self._prepare(ks, name).bind(list(params))
        if fetch_size is not None:
            bound.fetch_size = fetch_size
        with _translated():
            return self._session.execute(bound)

    def _rows(self, tenant: str, name: str, params: Sequence[Any]) -> list[Row]:
        with _translated():
            return [tuple(r) for r in self._execute(self._keyspace(tenant), name, params)]

    def _one(self, tenant: str, name: str, params: Sequence[Any]) -> Row | None:
        rows = self._rows(tenant, name, params)
        return rows[0] if rows else None

    def _iterate(
        self, ks: str, name: str, params: Sequence[Any], fetch_size: int = 1000
    ) -> Iterator[Row]:
        """Rows of a query, fetching further pages as the caller goes on."""
        with _translated():
            for row in self._execute(ks, name, params, fetch_size):
                yield tuple(row)

    def _concurrently(self, items: Sequence[tuple[str, str, Sequence[Any]]]) -> list[list[Row]]:
        statements = [(self._prepare(ks, name), list(params)) for ks, name, params in items]
        with _translated():
            results = execute_concurrent(self._session, statements, concurrency=64)
            return [[tuple(r) for r in result] for _, result in results]

    def close(self) -> None:
        if self._owns_cluster:
            self._session.cluster.shutdown()

    def recover(self) -> int:
        """Finish the commits left half-applied (the commits' part of the store does)."""
        raise NotImplementedError


def _unverified(error: object) -> bool:
    """Whether a node's connection error is its certificate failing verification (the
    driver wraps the ssl error in a PermissionError that keeps only its text)."""
    return isinstance(error, ssl.SSLCertVerificationError) or (
        isinstance(error, BaseException) and "CERTIFICATE_VERIFY_FAILED" in str(error)
    )


def _refuse_refused_credentials(exc: Unavailable, sent: bool) -> None:
    """A connection every node refused for its credentials (a wrong user or password, or
    none where the cluster requires them) is a configuration error naming the setting:
    retrying cannot mend it either. The password is never in the message."""
    cause = exc.__cause__
    if not isinstance(cause, NoHostAvailable) or not cause.errors:
        return
    if all(isinstance(e, AuthenticationFailed) for e in cause.errors.values()):
        if sent:
            raise InvalidInput(
                "Cassandra refused the credentials of MNEMO_CASSANDRA_USERNAME and "
                "MNEMO_CASSANDRA_PASSWORD: set a role the cluster knows, with its password",
                code="CASSANDRA_CREDENTIALS_REFUSED",
                field="cassandra_password",
            ) from None
        raise InvalidInput(
            "Cassandra requires a login: set MNEMO_CASSANDRA_USERNAME and MNEMO_CASSANDRA_PASSWORD",
            code="CASSANDRA_CREDENTIALS_REFUSED",
            field="cassandra_username",
        ) from None


def _refuse_unverified_nodes(exc: Unavailable) -> None:
    """A connection no node took because none of their certificates verifies against the
    configured CA (or names the address connected to) is a configuration error naming the
    setting: retrying cannot mend it, and it was retried as STORE_UNAVAILABLE."""
    cause = exc.__cause__
    if not isinstance(cause, NoHostAvailable) or not cause.errors:
        return
    if all(_unverified(e) for e in cause.errors.values()):
        raise InvalidInput(
            "no Cassandra node's certificate verifies against MNEMO_CASSANDRA_SSL_CAFILE "
            "(or names the address connected to, with MNEMO_CASSANDRA_SSL_CHECK_HOSTNAME): "
            "set the CA that signed the nodes' certificates",
            code="TLS_CONFIG_INVALID",
            field="cassandra_ssl_cafile",
        ) from None
