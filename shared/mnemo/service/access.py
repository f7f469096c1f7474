"""Use cases of tenants and API keys: create a tenant, issue, list and revoke keys, and
authenticate a presented key. The secret of a key leaves this module once, as the return
value of `issue_key`; nothing here logs it."""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Iterable
from datetime import datetime

from mnemo.domain.access import (
    ALL_SCOPES,
    NAME_RE,
    ApiKey,
    Caller,
    Scope,
    Tenant,
    Unauthenticated,
    check_key,
    format_key,
    key_digest,
    parse_key,
)
from mnemo.domain.errors import ConflictError, InvalidInput, MnemoError, NotFound
from mnemo.domain.ids import valid_tenant
from mnemo.domain.tool_result import TOOL_NAME_RE
from mnemo.ports import AccessStore, Clock

__all__ = ["DEFAULT_TENANT", "Access", "IssuedKey", "Revoked"]

DEFAULT_TENANT = "default"
MAX_KEYS_PER_TENANT = 1_000


class IssuedKey:
    """A key just made: its record, and the one copy of its plaintext."""

    __slots__ = ("key", "record")

    def __init__(self, record: ApiKey, key: str) -> None:
        self.record = record
        self.key = key

    def __repr__(self) -> str:  # never the secret, even in a debugger or a traceback
        return f"IssuedKey(key_id={self.record.key_id!r}, tenant={self.record.tenant!r})"


class Revoked:
    """A key just revoked, and the keys issued by it (directly or through keys it issued)
    that are still active: revoking a key does not revoke what it issued, so the answer
    names them for the caller to decide."""

    __slots__ = ("issued_active", "record")

    def __init__(self, record: ApiKey, issued_active: list[str]) -> None:
        self.record = record
        self.issued_active = issued_active


def is_active(key: ApiKey, now: datetime) -> bool:
    """Neither revoked nor expired at `now`."""
    return (key.revoked_at is None or key.revoked_at > now) and (
        key.expires_at is None or key.expires_at > now
    )


def could_issue(caller: Caller, key: ApiKey) -> bool:
    """Whether `caller` could have issued `key`: the key's scopes (and tools) are within the
    caller's, and it ends no later than the caller does. The rule of issuing, which is also
    the rule of revoking: a key never undoes what it could not have done."""
    if not set(key.scopes) <= caller.scopes:
        return False
    if caller.tools is not None and (key.tools is None or not set(key.tools) <= caller.tools):
        return False
    if caller.expires_at is not None:
        return key.expires_at is not None and key.expires_at <= caller.expires_at
    return True


def parse_scopes(values: Iterable[str]) -> tuple[Scope, ...]:
    scopes: list[Scope] = []
    for value in values:
        try:
            scope = Scope(value)
        except ValueError as exc:
            raise InvalidInput(
                f"unknown scope {value[:40]!r}; scopes: {', '.join(s.value for s in Scope)}",
                code="INVALID_SCOPE",
                field="scopes",
            ) from exc
        if scope not in scopes:
            scopes.append(scope)
    if not scopes:
        raise InvalidInput("a key needs at least one scope", code="INVALID_SCOPE", field="scopes")
    return tuple(sorted(scopes, key=ALL_SCOPES.index))


MAX_TOOLS_PER_KEY = 64


def parse_tools(values: Iterable[str]) -> tuple[str, ...]:
    """The tool names a key is limited to (an empty list: results of no tool)."""
    tools = sorted(set(values))
    if len(tools) > MAX_TOOLS_PER_KEY:
        raise InvalidInput(
            f"a key names at most {MAX_TOOLS_PER_KEY} tools", code="INVALID_TOOL", field="tools"
        )
    for tool in tools:
        if not isinstance(tool, str) or not TOOL_NAME_RE.fullmatch(tool):
            raise InvalidInput(
                f"tool {str(tool)[:60]!r} is not a tool name (a letter, then letters, digits, "
                "'_', '.' or '-', at most 48)",
                code="INVALID_TOOL",
                field="tools",
            )
    return tuple(tools)


class Access:
    """Tenants and keys over an AccessStore. `pepper` is the server-wide secret every key
    digest is keyed with; `entropy` gives random bytes (os.urandom; tests may pass their
    own)."""

    def __init__(
        self,
        store: AccessStore,
        clock: Clock,
        pepper: bytes,
        entropy: Callable[[int], bytes] = os.urandom,
    ) -> None:
        if len(pepper) < 16:
            raise ValueError("the key pepper must be at least 16 bytes")
        self.store = store
        self.clock = clock
        self._pepper = pepper
        self._entropy = entropy

    def __repr__(self) -> str:
        return "Access(<pepper hidden>)"

    # -- tenants

    def create_tenant(self, tenant: str, by: str) -> Tenant:
        if not valid_tenant(tenant):
            raise InvalidInput(
                "tenant must be 1-63 lowercase letters, digits, '_' or '-'",
                code="INVALID_TENANT",
                field="tenant",
            )
        record = Tenant(tenant=tenant, created_at=self.clock.now(), created_by=by[:128])
        if not self.store.create_tenant(record):
            raise ConflictError(f"tenant {tenant} exists", code="TENANT_EXISTS", field="tenant")
        return record

    def tenant(self, tenant: str) -> Tenant:
        found = self.store.tenant(tenant) if valid_tenant(tenant) else None
        if found is None:
            raise NotFound("no such tenant", code="TENANT_NOT_FOUND", field="tenant")
        return found

    # -- keys

    def issue_key(
        self,
        tenant: str,
        name: str,
        scopes: Iterable[str],
        *,
        by: str,
        expires_at: datetime | None = None,
        tools: Iterable[str] | None = None,
    ) -> IssuedKey:
        """Make a key; its plaintext is in the result and nowhere else."""
        self.tenant(tenant)
        if not NAME_RE.fullmatch(name):
            raise InvalidInput(
                "a key name is 1-64 letters, digits or _.:@- (starting with a letter or digit)",
                code="INVALID_KEY_NAME",
                field="name",
            )
        chosen = parse_scopes(scopes)
        limited = parse_tools(tools) if tools is not None else None
        now = self.clock.now()
        if expires_at is not None and expires_at <= now:
            raise InvalidInput(
                "expires_at must be in the future", code="INVALID_EXPIRY", field="expires_at"
            )
        if len(self.store.keys(tenant)) >= MAX_KEYS_PER_TENANT:
            raise ConflictError(
                f"a tenant holds at most {MAX_KEYS_PER_TENANT} keys; revoke some",
                code="TOO_MANY_KEYS",
            )
        key_id = self._entropy(8).hex()
        secret = base64.urlsafe_b64encode(self._entropy(32)).rstrip(b"=").decode()
        salt = self._entropy(16).hex()
        record = ApiKey(
            key_id=key_id,
            tenant=tenant,
            name=name,
            scopes=chosen,
            salt=salt,
            digest=key_digest(self._pepper, salt, secret),
            created_at=now,
            created_by=by[:128],
            expires_at=expires_at,
            tools=limited,
        )
        self.store.add_key(record)
        return IssuedKey(record, format_key(key_id, secret))

    def keys(self, tenant: str) -> list[ApiKey]:
        self.tenant(tenant)
        return self.store.keys(tenant)

    def revoke(self, tenant: str, key_id: str, by: Caller | None = None) -> Revoked:
        """Revoke a key of the tenant. `by`: the key asking (None: the operator). A key
        revokes itself, or a key it could have issued (`could_issue`), else 403
        REVOKE_NOT_ALLOWED. The tenant's last active key holding `admin` is never revoked
        (409 LAST_ADMIN_KEY): without one, nobody of the tenant could manage its keys."""
        now = self.clock.now()
        keys = self.store.keys(tenant) if valid_tenant(tenant) else []
        target = next((k for k in keys if k.key_id == key_id), None)
        if target is None:
            raise NotFound("the tenant has no such key", code="KEY_NOT_FOUND", field="key_id")
        if by is not None and by.key_id != key_id and not could_issue(by, target):
            raise MnemoError(
                "a key revokes only itself and keys it could have issued (scopes and tools "
                "within its own, ending no later than it does)",
                code="REVOKE_NOT_ALLOWED",
                field="key_id",
            )
        if (
            is_active(target, now)
            and Scope.ADMIN in target.scopes
            and not any(
                k.key_id != key_id and Scope.ADMIN in k.scopes and is_active(k, now) for k in keys
            )
        ):
            raise ConflictError(
                "that is the tenant's last active admin key; issue another admin key first",
                code="LAST_ADMIN_KEY",
                field="key_id",
            )
        revoked = self.store.revoke_key(tenant, key_id, now)
        if revoked is None:
            raise NotFound("the tenant has no such key", code="KEY_NOT_FOUND", field="key_id")
        return Revoked(revoked, _issued_active(keys, key_id, now))

    def authenticate(self, presented: str) -> Caller:
        """The caller a presented key stands for; Unauthenticated for anything else."""
        parsed = parse_key(presented)
        if parsed is None:
            raise Unauthenticated("the API key is not valid", code="UNAUTHENTICATED")
        key_id, secret = parsed
        return check_key(self.store.key(key_id), self._pepper, secret, self.clock.now())

    def recovery_key(
        self, tenant: str, name: str, *, by: str = "operator", expires_at: datetime | None = None
    ) -> IssuedKey:
        """An operator's new admin key (every scope) for an existing tenant: the way back
        for a tenant with no admin key left (all revoked or expired)."""
        return self.issue_key(
            tenant, name, [s.value for s in ALL_SCOPES], by=by, expires_at=expires_at
        )

    # -- first start

    def first_start(self) -> IssuedKey | None:
        """On a store with no tenant at all: create `default` and one admin key holding
        every scope, and return it (to be shown once). None when tenants exist."""
        if self.store.tenants(limit=1):
            return None
        try:
            self.create_tenant(DEFAULT_TENANT, by="first-start")
        except ConflictError:
            return None  # another process got there first
        return self.issue_key(
            DEFAULT_TENANT, "admin", [s.value for s in ALL_SCOPES], by="first-start"
        )


def _issued_active(keys: list[ApiKey], key_id: str, now: datetime) -> list[str]:
    """The active keys issued by `key_id`, directly or down a chain of keys it issued."""
    issuers = {f"key:{key_id}"}
    found: list[str] = []
    grew = True
    while grew:
        grew = False
        for k in keys:
            if k.created_by in issuers and f"key:{k.key_id}" not in issuers:
                issuers.add(f"key:{k.key_id}")
                grew = True
                if k.key_id != key_id and is_active(k, now):
                    found.append(k.key_id)
    return sorted(found)
