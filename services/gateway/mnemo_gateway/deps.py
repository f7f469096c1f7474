"""What every route depends on: the request context, the platform, a checked JSON body."""

from __future__ import annotations

import hmac
from typing import Annotated, Any

import orjson
from fastapi import Depends, Header, Request

from mnemo.bootstrap import Platform
from mnemo.domain.errors import InvalidInput, MnemoError
from mnemo.service.app import Mnemo, RequestContext
from mnemo.settings import GatewaySettings

__all__ = ["App", "Body", "Ctx", "PlatformDep", "json_body", "platform_of", "request_context"]


def request_context(
    x_mnemo_tenant: Annotated[str | None, Header(description="the tenant of the request")] = None,
    x_mnemo_principal: Annotated[str | None, Header(description="who is asking")] = None,
) -> RequestContext:
    """The tenant and principal of a request; no route runs without them."""
    if x_mnemo_tenant is None:
        raise InvalidInput(
            "the X-Mnemo-Tenant header is required",
            code="MISSING_TENANT",
            field="X-Mnemo-Tenant",
        )
    principal = (x_mnemo_principal or "anonymous")[:128]
    return RequestContext(tenant=x_mnemo_tenant, principal=principal)


Ctx = Annotated[RequestContext, Depends(request_context)]


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
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise InvalidInput(f"body over {limit} bytes", code="PAYLOAD_TOO_LARGE")
        chunks.append(chunk)
    try:
        value = orjson.loads(b"".join(chunks))
    except orjson.JSONDecodeError as exc:
        raise InvalidInput(f"the body is not valid JSON: {exc.msg}", code="MALFORMED_JSON") from exc
    if _too_deep(value, settings.max_json_depth):
        raise InvalidInput(
            f"JSON nests deeper than {settings.max_json_depth}", code="JSON_TOO_DEEP"
        )
    return value


Body = Annotated[Any, Depends(json_body)]


def is_admin(request: Request, token: str | None) -> bool:
    """Whether the request carries the operator token (compared in constant time)."""
    wanted = settings_of(request).admin_token
    if wanted is None or token is None:
        return False
    return hmac.compare_digest(token.encode(), wanted.get_secret_value().encode())


def require_admin(
    request: Request,
    x_mnemo_admin_token: Annotated[str | None, Header(description="operator token")] = None,
) -> None:
    """Platform-wide operations belong to operators, not to any tenant."""
    if settings_of(request).admin_token is None:
        raise MnemoError(
            "admin operations over HTTP are off: set MNEMO_GATEWAY_ADMIN_TOKEN",
            code="ADMIN_DISABLED",
        )
    if not is_admin(request, x_mnemo_admin_token):
        raise MnemoError("this needs the operator token", code="ADMIN_ONLY")


Admin = Annotated[None, Depends(require_admin)]
