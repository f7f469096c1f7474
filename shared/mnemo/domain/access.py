"""Tenants, API keys and scopes: the pure rules of who may do what.

An API key reads `mnemo_<key id>_<secret>`. The key id (16 lowercase hex digits) is public:
it names the key in listings and lets the gateway find its record in one lookup. The
secret (43 URL-safe base64 characters, 256 bits) is shown once, when the key is made, and
only a salted, peppered digest of it is stored: HMAC-SHA256 under a server-wide pepper
over the key's own salt and the secret. A stolen table of digests is useless without the
pepper, and a stolen pepper is useless without the table. Digests are compared in constant
time. Randomness comes in from the caller (the service), so everything here is pure.
"""

from __future__ import annotations

import enum
import hashlib
import hmac
import re
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from mnemo.domain.errors import MnemoError
from mnemo.domain.ids import valid_tenant

__all__ = [
    "ALL_SCOPES",
    "KEY_PREFIX",
    "MAX_KEY_SECONDS",
    "ApiKey",
    "Caller",
    "Scope",
    "Tenant",
    "Unauthenticated",
    "check_key",
    "format_key",
    "key_digest",
    "key_id_of",
    "looks_like_key",
    "no_key_in",
    "parse_key",
    "redact",
    "redact_all",
    "require_scope",
]

KEY_PREFIX = "mnemo_"
KEY_ID_RE = re.compile(r"^[0-9a-f]{16}$")
_SECRET_RE = re.compile(r"^[A-Za-z0-9_-]{43}$")
_KEY_RE = re.compile(r"^mnemo_([0-9a-f]{16})_([A-Za-z0-9_-]{43})$")
# a key inside a longer text, its prefix in any case: what identifiers and URLs refuse
_KEY_IN_TEXT = re.compile(r"(?i:mnemo)_([0-9a-fA-F]{16})_[A-Za-z0-9_-]{43}")
# the id and the secret alone (the prefix dropped: the secret is as good without it). Not
# refused in identifiers: 16 digits (a microsecond time), '_' and a base64url SHA-256 have
# the same shape; but cut from what errors and logs show, where a wrong cut costs nothing
_BARE_KEY = r"(?<![A-Za-z0-9_-])([0-9a-fA-F]{16})_[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])"
# what redaction cuts: a key, or one cut short (a message that cuts an input at 48 or 64
# characters would otherwise hold most of a key's secret)
_KEY_OR_PART = re.compile(r"(?i:mnemo)_([0-9a-fA-F]{16})_[A-Za-z0-9_-]+|" + _BARE_KEY)
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,63}$")


class Scope(enum.StrEnum):
    """What a key may do."""

    MEMORY_WRITE = "memory:write"  # publish events
    MEMORY_READ = "memory:read"  # read memories, replay, search, sync, the heat map
    CONTEXT = "context"  # assemble contexts, report answers, read templates
    AUDIT_READ = "audit:read"  # the audit chain, the tenant's event and rejection views
    ADMIN = "admin"  # the tenant's keys, consumer status, templates, wide forgets


ALL_SCOPES: tuple[Scope, ...] = tuple(Scope)
MAX_KEY_SECONDS = 10 * 365 * 86_400  # the longest an API key may be issued for


class Tenant(BaseModel):
    """A tenant: the unit of isolation. Its id is the `tenant` of every event it owns."""

    model_config = ConfigDict(frozen=True)

    tenant: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$")
    created_at: datetime
    created_by: str = Field(max_length=128)


class ApiKey(BaseModel):
    """A stored key: everything but the secret, which only its digest stands for."""

    model_config = ConfigDict(frozen=True)

    key_id: str = Field(pattern=r"^[0-9a-f]{16}$")
    tenant: str = Field(pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$")
    name: str = Field(pattern=NAME_RE.pattern, description="who uses it; the default actor")
    scopes: tuple[Scope, ...]
    salt: str = Field(pattern=r"^[0-9a-f]{32}$")
    digest: str = Field(pattern=r"^[0-9a-f]{64}$")
    created_at: datetime
    created_by: str = Field(max_length=128)
    expires_at: datetime | None = None
    revoked_at: datetime | None = None
    tools: tuple[str, ...] | None = Field(
        default=None,
        description="the tools whose results it may record (ToolResultRecorded); None: any",
    )

    def public(self) -> dict[str, object]:
        """What listings show: never the salt or the digest."""
        return {
            "key_id": self.key_id,
            "tenant": self.tenant,
            "name": self.name,
            "scopes": [s.value for s in self.scopes],
            "created_at": self.created_at.isoformat(),
            "created_by": self.created_by,
            "expires_at": self.expires_at.isoformat() if self.expires_at else None,
            "revoked_at": self.revoked_at.isoformat() if self.revoked_at else None,
            "tools": list(self.tools) if self.tools is not None else None,
        }


class Caller(BaseModel):
    """Who a request is: the key that authenticated it, and so its tenant and scopes."""

    model_config = ConfigDict(frozen=True)

    tenant: str
    key_id: str
    name: str
    scopes: frozenset[Scope]
    tools: frozenset[str] | None = None  # the tools whose results it may record; None: any
    expires_at: datetime | None = None  # when the key stops working; None: never


class Unauthenticated(MnemoError):
    """No valid credential: missing, malformed, unknown, revoked or expired (401)."""

    code = "UNAUTHENTICATED"


def format_key(key_id: str, secret: str) -> str:
    return f"{KEY_PREFIX}{key_id}_{secret}"


def parse_key(text: str) -> tuple[str, str] | None:
    """(key id, secret) of a well-formed key, else None."""
    match = _KEY_RE.fullmatch(text)
    return (match.group(1), match.group(2)) if match else None


def looks_like_key(text: str) -> bool:
    return _KEY_IN_TEXT.search(text) is not None


def no_key_in(value: str) -> str:
    """An identifier that holds an API key is refused: identifiers are stored and served
    in clear (replay, the log, read models), so a key pasted into one would be handed out
    again."""
    if looks_like_key(value):
        raise ValueError("holds an API key; credentials go in headers, never in identifiers")
    return value


def key_id_of(text: str) -> str | None:
    parsed = parse_key(text)
    return parsed[0] if parsed else None


def redact(text: str) -> str:
    """The text with every key in it, whole or cut short, cut down to its public id."""
    return _KEY_OR_PART.sub(lambda m: f"mnemo_{m.group(1) or m.group(2)}_[redacted]", text)


def redact_all(value: Any) -> Any:
    """A JSON value with every key in its strings (member names too) redacted."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, list | tuple):
        return [redact_all(v) for v in value]
    if isinstance(value, dict):
        return {redact(str(k)): redact_all(v) for k, v in value.items()}
    return value


def key_digest(pepper: bytes, salt: str, secret: str) -> str:
    """HMAC-SHA256 under the pepper, over the key's salt and its secret."""
    if not _SECRET_RE.fullmatch(secret):
        raise ValueError("not a key secret")
    return hmac.new(pepper, f"{salt}:{secret}".encode(), hashlib.sha256).hexdigest()


def check_key(record: ApiKey | None, pepper: bytes, secret: str, now: datetime) -> Caller:
    """The caller a presented secret proves, or Unauthenticated. The message never says
    which check failed for an unknown key; revoked and expired keys say so, since only
    the holder of the secret can learn it."""
    if record is None:
        # compare anyway, so an unknown id costs what a known one does
        hmac.compare_digest(key_digest(pepper, "0" * 32, secret), "0" * 64)
        raise Unauthenticated("the API key is not valid", code="UNAUTHENTICATED")
    if not hmac.compare_digest(key_digest(pepper, record.salt, secret), record.digest):
        raise Unauthenticated("the API key is not valid", code="UNAUTHENTICATED")
    if record.revoked_at is not None and record.revoked_at <= now:
        raise Unauthenticated("the API key was revoked", code="KEY_REVOKED")
    if record.expires_at is not None and record.expires_at <= now:
        raise Unauthenticated("the API key has expired", code="KEY_EXPIRED")
    if not valid_tenant(record.tenant):
        raise Unauthenticated("the API key is not valid", code="UNAUTHENTICATED")
    return Caller(
        tenant=record.tenant,
        key_id=record.key_id,
        name=record.name,
        scopes=frozenset(record.scopes),
        tools=frozenset(record.tools) if record.tools is not None else None,
        expires_at=record.expires_at,
    )


def require_scope(caller: Caller, scope: Scope) -> None:
    if scope not in caller.scopes:
        raise MnemoError(
            f"this needs a key with the {scope.value} scope",
            code="SCOPE_MISSING",
            extra={"scope": scope.value},
        )
