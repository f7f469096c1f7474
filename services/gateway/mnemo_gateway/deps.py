"""What every route depends on: the request context, the platform, a checked JSON body."""

from __future__ import annotations

import hmac
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

import orjson
from fastapi import Depends, Header, Request
from starlette.requests import ClientDisconnect

from mnemo.bootstrap import Platform
from mnemo.domain.access import Caller, Scope, Unauthenticated, looks_like_key, require_scope
from mnemo.domain.errors import InvalidInput, MnemoError
from mnemo.entrypoints.bodies import names_a_member_twice
from mnemo.service.app import Mnemo, RequestContext
from mnemo.settings import GatewaySettings
from mnemo_gateway.ratelimit import RateLimiter

__all__ = [
    "AdminCtx",
    "App",
    "AuditCtx",
    "Body",
    "CallerDep",
    "ContextCtx",
    "Ctx",
    "OperatorOrAdminCtx",
    "PlatformDep",
    "ReadCtx",
    "WriteCtx",
    "authenticate",
    "json_body",
    "needs",
    "platform_of",
]


KEY_HEADER = "X-Mnemo-Key"
ADMIN_TOKEN_HEADER = "X-Mnemo-Admin-Token"  # noqa: S105 (a header name)
# the scope each `needs(...)` dependency checks, by dependency: mnemo_gateway.scopes reads
# it to list what every route requires (docs/security.md's table is generated from it)
REQUIRED_SCOPE: dict[Callable[..., Any], Scope | None] = {}
# query parameters that would put a credential into URLs (and so into access logs)
CREDENTIAL_PARAMS = frozenset(
    {"api_key", "apikey", "access_token", "admin_token", "authorization", "x-mnemo-key"}
)


def refuse_credentials_in_url(request: Request) -> None:
    """A credential in the query string or the path is refused: URLs end up in logs and
    histories."""
    if looks_like_key(request.url.path):
        raise InvalidInput(
            "send credentials in headers, never in the URL", code="CREDENTIAL_IN_URL", field="path"
        )
    for name, value in request.query_params.multi_items():
        if name.lower() in CREDENTIAL_PARAMS or looks_like_key(value):
            raise InvalidInput(
                "send credentials in headers, never in the URL",
                code="CREDENTIAL_IN_URL",
                field=name[:40],
            )


def _utf8_header(value: str) -> str | None:
    """A header value as the UTF-8 its bytes are (HTTP hands them over as Latin-1: café
    would arrive as cafÃ©); None when they are no UTF-8."""
    try:
        return value.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return None


def _one_header(request: Request, name: str, shown: str) -> str | None:
    """A credential header's value. Sent twice with different values it is refused: the
    first would speak here, while a proxy in front may have read the last."""
    values = request.headers.getlist(name)
    if len({v.strip() for v in values}) > 1:
        raise Unauthenticated(
            f"{shown} is sent more than once with different values; send it once",
            code="CREDENTIALS_CONFLICT",
            field=shown,
        )
    return values[0] if values else None


def presented_key(request: Request) -> str | None:
    """The API key a request carries: `Authorization: Bearer <key>` or `X-Mnemo-Key`."""
    refuse_credentials_in_url(request)
    auth = _one_header(request, "authorization", "Authorization")
    direct = _one_header(request, KEY_HEADER.lower(), KEY_HEADER)
    if auth is not None:
        scheme, _, value = auth.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            raise Unauthenticated(
                "use Authorization: Bearer <API key>", code="UNAUTHENTICATED", field="Authorization"
            )
        if direct is not None and direct.strip() != value.strip():
            # two keys: which one speaks is ambiguous, so neither does
            raise Unauthenticated(
                f"Authorization and {KEY_HEADER} carry different keys; send one",
                code="CREDENTIALS_CONFLICT",
                field=KEY_HEADER,
            )
        return value.strip()
    if direct is not None:
        return direct.strip()
    return None


def authenticate(request: Request) -> Caller:
    """The caller of a request, from its API key (cached on the request); 401 otherwise."""
    cached: Caller | None = getattr(request.state, "caller", None)
    if cached is not None:
        return cached
    key = presented_key(request)
    if key is None:
        raise Unauthenticated(
            "this needs an API key: Authorization: Bearer <key>",
            code="UNAUTHENTICATED",
            field="Authorization",
        )
    caller = platform_of(request).access.authenticate(key)
    # every X-Mnemo-Tenant must name the key's tenant (sent twice, one could name another)
    if any(claimed != caller.tenant for claimed in request.headers.getlist("x-mnemo-tenant")):
        raise MnemoError(
            "X-Mnemo-Tenant names another tenant than the API key's",
            code="TENANT_MISMATCH",
            field="X-Mnemo-Tenant",
        )
    limiter: RateLimiter = request.app.state.rate_limiter
    limiter.check(caller.tenant, caller.key_id)
    request.state.caller = caller
    return caller


def needs(scope: Scope | None) -> Callable[..., RequestContext]:
    """A dependency giving the request context of a caller holding `scope` (any
    authenticated caller when None)."""

    def dependency(
        request: Request,
        x_mnemo_principal: Annotated[
            str | None, Header(description="who is asking (default: the key's name)")
        ] = None,
    ) -> RequestContext:
        caller = authenticate(request)
        if scope is not None:
            require_scope(caller, scope)
        given = _utf8_header(x_mnemo_principal) if x_mnemo_principal else None
        if x_mnemo_principal and (
            given is None or len(given) > 128 or not given.isprintable() or looks_like_key(given)
        ):
            # the principal becomes the events' actor id: not cut short, nor taken with
            # control characters, without a word
            raise InvalidInput(
                "X-Mnemo-Principal is 1 to 128 printable UTF-8 characters, and no API key",
                code="INVALID_PRINCIPAL",
                field="X-Mnemo-Principal",
            )
        principal = (given or caller.name)[:128]
        return RequestContext(
            tenant=caller.tenant,
            principal=principal,
            scopes=frozenset(s.value for s in caller.scopes),
            tools=caller.tools,
        )

    REQUIRED_SCOPE[dependency] = scope
    return dependency


def caller_of(request: Request) -> Caller:
    return authenticate(request)


CallerDep = Annotated[Caller, Depends(caller_of)]
Ctx = Annotated[RequestContext, Depends(needs(None))]
ReadCtx = Annotated[RequestContext, Depends(needs(Scope.MEMORY_READ))]
WriteCtx = Annotated[RequestContext, Depends(needs(Scope.MEMORY_WRITE))]
ContextCtx = Annotated[RequestContext, Depends(needs(Scope.CONTEXT))]
AuditCtx = Annotated[RequestContext, Depends(needs(Scope.AUDIT_READ))]
AdminCtx = Annotated[RequestContext, Depends(needs(Scope.ADMIN))]


def platform_of(request: Request) -> Platform:
    platform: Platform = request.app.state.platform
    return platform


def mnemo_of(request: Request) -> Mnemo:
    return platform_of(request).app


def settings_of(request: Request) -> GatewaySettings:
    settings: GatewaySettings = request.app.state.gateway_settings
    return settings


App = Annotated[Mnemo, Depends(mnemo_of)]
PlatformDep = Annotated[Platform, Depends(platform_of)]


def _too_deep(value: Any, limit: int) -> bool:
    """True when a JSON value nests deeper than `limit` (checked without recursion)."""
    stack = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if level > limit:
            return True
        if isinstance(item, dict):
            stack.extend((v, level + 1) for v in item.values())
        elif isinstance(item, list):
            stack.extend((v, level + 1) for v in item)
    return False


async def json_body(request: Request) -> Any:
    """The request body as JSON, refused when too large, malformed or too deeply nested."""
    settings = settings_of(request)
    limit = settings.max_body_bytes
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise InvalidInput(f"body over {limit} bytes", code="PAYLOAD_TOO_LARGE")
    chunks: list[bytes] = []
    size = 0
    try:
        async for chunk in request.stream():
            size += len(chunk)
            if size > limit:
                raise InvalidInput(f"body over {limit} bytes", code="PAYLOAD_TOO_LARGE")
            chunks.append(chunk)
    except ClientDisconnect:
        # the caller went away mid-body: nobody reads the answer, and it is no server
        # error (each once logged a traceback at ERROR, a way to flood the log)
        raise InvalidInput(
            "the client closed the connection before the body was sent",
            code="CLIENT_DISCONNECTED",
        ) from None
    body = b"".join(chunks)
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"the body is not valid JSON: {exc.msg}", code="MALFORMED_JSON") from exc
    if _too_deep(value, settings.max_json_depth):
        raise InvalidInput(
            f"JSON nests deeper than {settings.max_json_depth}", code="JSON_TOO_DEEP"
        )
    if names_a_member_twice(body):
        # {"stream": "a", "stream": "b"}: a proxy that reads the first would see another
        # request than the one handled here
        raise InvalidInput("the body names a member of one object twice", code="MALFORMED_JSON")
    return value


Body = Annotated[Any, Depends(json_body)]


def is_admin(request: Request) -> bool:
    """Whether the request carries the operator token (compared in constant time). The
    header sent twice with different values is refused, as an API key's is."""
    token = _one_header(request, ADMIN_TOKEN_HEADER.lower(), ADMIN_TOKEN_HEADER)
    wanted = settings_of(request).admin_token
    if wanted is None or token is None:
        return False
    return hmac.compare_digest(token.encode(), wanted.get_secret_value().encode())


def require_admin(
    request: Request,
    x_mnemo_admin_token: Annotated[str | None, Header(description="operator token")] = None,
) -> None:
    """Platform-wide operations belong to operators, not to any tenant."""
    refuse_credentials_in_url(request)
    if settings_of(request).admin_token is None:
        raise MnemoError(
            "admin operations over HTTP are off: set MNEMO_GATEWAY_ADMIN_TOKEN",
            code="ADMIN_DISABLED",
        )
    if not is_admin(request):
        raise MnemoError("this needs the operator token", code="ADMIN_ONLY")


Admin = Annotated[None, Depends(require_admin)]


def _operator_or_admin_key(
    request: Request,
    x_mnemo_principal: Annotated[
        str | None, Header(description="who is asking (default: the key's name)")
    ] = None,
) -> RequestContext | None:
    """The operator token alone (None: no API key is looked up, so the answer does not
    depend on the store that holds the keys), else a key with the admin scope."""
    refuse_credentials_in_url(request)
    if is_admin(request):
        return None
    return _ADMIN_KEY(request, x_mnemo_principal)


_ADMIN_KEY = needs(Scope.ADMIN)
REQUIRED_SCOPE[_operator_or_admin_key] = Scope.ADMIN
# the operator token, or a key with the admin scope (the status: what an operator reads
# while Cassandra, where the keys are, is down)
OperatorOrAdminCtx = Annotated[RequestContext | None, Depends(_operator_or_admin_key)]


def checked_as_of(value: datetime | None, now: datetime) -> datetime:
    """A query's `as_of`, or now: one outside 1970-2200 is refused as /v1/context refuses
    it (INVALID_AS_OF), never read as a valid instant."""
    if value is None:
        return now
    if not 1970 <= value.year <= 2200:
        raise InvalidInput(
            "as_of must fall between the years 1970 and 2200", code="INVALID_AS_OF", field="as_of"
        )
    return value
