"""Every error leaves the gateway as {"error": {"code", "message", "field"}}."""

from __future__ import annotations

import logging
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import BaseRoute, Match

from mnemo.domain.access import redact, redact_all
from mnemo.domain.errors import ConflictError, MnemoError, NotFound, Unavailable

__all__ = ["ErrorResponse", "error_response", "install_error_handlers", "status_of"]

log = logging.getLogger("mnemo.gateway")

_STATUS_BY_CODE = {
    "PAYLOAD_TOO_LARGE": 413,
    "OUTPUT_TOO_LARGE": 413,
    "TENANT_MISMATCH": 403,
    "CONSTRAINT_DROPPED": 422,
    "CONSTRAINT_VIOLATION": 422,
    "ADMIN_DISABLED": 403,
    "ADMIN_ONLY": 403,
    "UNAUTHENTICATED": 401,
    "KEY_REVOKED": 401,
    "KEY_EXPIRED": 401,
    "SCOPE_MISSING": 403,
    "FORBIDDEN": 403,
    "REVOKE_NOT_ALLOWED": 403,
    "RATE_LIMITED": 429,
    "TOO_MANY_TAILS": 429,
    "SENSITIVE_VALUE_REJECTED": 422,
    "KEY_DESTROYED": 410,
    "TOOL_NOT_ALLOWED": 403,
    "TOOL_RESULT_TOO_LARGE": 413,
    "DOCUMENT_TOO_LARGE": 413,
    "UNSUPPORTED_DOCUMENT_TYPE": 415,
}


class ErrorBody(BaseModel):
    code: str
    message: str
    field: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody


def status_of(exc: MnemoError) -> int:
    if exc.code in _STATUS_BY_CODE:
        return _STATUS_BY_CODE[exc.code]
    if isinstance(exc, NotFound):
        return 404
    if isinstance(exc, ConflictError):
        return 409
    if isinstance(exc, Unavailable):
        return 503
    return 400


def error_response(
    status: int, code: str, message: str, field: str | None = None, **extra: Any
) -> JSONResponse:
    """An error body. Messages and field names repeat what the caller sent (an event type,
    a member name, a subject, a tool); a key pasted there is not repeated, whole or cut."""
    body: dict[str, Any] = {"code": code, "message": redact(message)}
    if field is not None:
        body["field"] = redact(field)
    body.update({name: redact_all(v) for name, v in extra.items()})
    headers: dict[str, str] | None = None
    if status == 503:
        headers = {"Retry-After": "1"}
    elif status == 429:
        headers = {"Retry-After": str(extra.get("retry_after", 1))}
    elif status == 401:
        headers = {"WWW-Authenticate": 'Bearer realm="mnemo"'}
    return JSONResponse({"error": body}, status_code=status, headers=headers)


_LOCATIONS = ("body", "query", "path", "header", "cookie")


def _field(loc: Any, *, located: bool = False) -> str | None:
    """The failing field's dotted path. FastAPI puts where a value came from first
    (`("body", "query")`, `("query", "limit")`); only that first element is a location, so
    a body field named `query` or `path` keeps its name."""
    parts = [str(p) for p in loc]
    if located and parts and parts[0] in _LOCATIONS:
        parts = parts[1:]
    return ".".join(parts) or None


def _allowed(request: Request) -> list[str]:
    """The methods the routes of the request's path take, for a 405's `Allow` (RFC 9110):
    Starlette names only the first route's, and `GET /v1/events` and `POST /v1/events` are
    two routes (in included routers)."""
    methods: set[str] = set()

    def collect(routes: Any, scope: dict[str, Any]) -> None:
        for route in routes:
            if not isinstance(route, BaseRoute):
                continue
            match, child = route.matches(scope)
            if match == Match.NONE:
                continue
            methods.update(getattr(route, "methods", None) or ())
            inner = getattr(route, "routes", None)
            if inner is None:  # FastAPI's included router keeps its routes on the original
                inner = getattr(getattr(route, "original_router", None), "routes", None)
            if inner:
                collect(inner, {**scope, **child})

    collect(request.app.router.routes, dict(request.scope))
    return sorted(methods)


_MODEL_NAME = re.compile(r"a valid dictionary or instance of \w+")


def install_error_handlers(app: FastAPI) -> None:
    @app.exception_handler(MnemoError)
    async def _mnemo_error(_: Request, exc: MnemoError) -> JSONResponse:
        extra = getattr(exc, "extra", None) or {}
        return error_response(status_of(exc), exc.code, exc.message, exc.field, **extra)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        err = errors[0] if errors else {"loc": (), "msg": "invalid request"}
        return error_response(
            422,
            "VALIDATION_ERROR",
            str(err.get("msg")),
            _field(err.get("loc", ()), located=True),
        )

    @app.exception_handler(ValidationError)
    async def _body_validation(_: Request, exc: ValidationError) -> JSONResponse:
        err = exc.errors()[0]
        # "a valid dictionary or instance of RotateIn": the model's name means nothing to
        # the caller; the body is a JSON object
        message = _MODEL_NAME.sub("a JSON object", str(err["msg"]))
        return error_response(422, "VALIDATION_ERROR", message, _field(err["loc"]))

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        code = {404: "ROUTE_NOT_FOUND", 405: "METHOD_NOT_ALLOWED"}.get(
            exc.status_code, "HTTP_ERROR"
        )
        answer = error_response(exc.status_code, code, str(exc.detail))
        if exc.status_code == 405:
            answer.headers["Allow"] = ", ".join(_allowed(request))
        return answer

    @app.exception_handler(Exception)
    async def _unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error", exc_info=exc)
        return error_response(
            500, "INTERNAL_ERROR", "an unexpected error occurred; it has been logged"
        )
