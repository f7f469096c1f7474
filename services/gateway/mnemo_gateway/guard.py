"""Guards around the whole gateway: the MCP endpoint admits only callers with a valid API
key, and access logs never carry a credential."""

from __future__ import annotations

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send

from mnemo.domain.errors import MnemoError
from mnemo.entrypoints.mcp_server import MCP_PATH
from mnemo.log_redaction import RedactCredentials, install_log_redaction
from mnemo_gateway.deps import authenticate
from mnemo_gateway.errors import error_response, status_of

__all__ = ["McpGuard", "RedactCredentials", "install_log_redaction"]


class McpGuard:
    """Requests to /mcp need a valid API key before the MCP server sees them (each tool call
    is then authorised again, with its scope, by the API it calls)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"].rstrip("/") == MCP_PATH:
            try:
                await run_in_threadpool(authenticate, Request(scope))  # reads the store
            except MnemoError as exc:
                extra = getattr(exc, "extra", None) or {}
                response = error_response(status_of(exc), exc.code, exc.message, exc.field, **extra)
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
