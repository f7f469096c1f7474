"""The HTTP gateway: decode the request, call the use case, encode the answer.

Every error leaves as JSON with a machine-readable code (see errors.py). Every route runs
inside a request context that names a tenant and a principal (see deps.py).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from mnemo import __version__, telemetry
from mnemo.bootstrap import Platform
from mnemo.entrypoints.mcp_server import mount_mcp
from mnemo.settings import GatewaySettings
from mnemo_gateway.errors import ErrorResponse, install_error_handlers
from mnemo_gateway.guard import McpGuard, install_log_redaction
from mnemo_gateway.query_params import single_valued_queries
from mnemo_gateway.ratelimit import RateLimiter
from mnemo_gateway.routes import (
    access,
    admin,
    console,
    context,
    documents,
    events,
    health,
    memories,
    sync,
    tool_results,
    toolchains,
)
from mnemo_gateway.tails import TailLimiter, TailNews

__all__ = ["create_app"]


def create_app(
    platform: Platform, settings: GatewaySettings | None = None, *, run_consumers: bool = True
) -> FastAPI:
    """The gateway over a built platform. With run_consumers, the embedded consumers run
    in this process for as long as the app does."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        if run_consumers:
            platform.runner.start()
        try:
            async with mcp.running():
                yield
        finally:
            platform.runner.stop()

    app = FastAPI(
        dependencies=[Depends(single_valued_queries)],
        title="Mnemo",
        version=__version__,
        summary="Durable, governed, shared memory for AI agents.",
        lifespan=lifespan,
        telemetry=telemetry.fastapi_config(),  # Mnemo's providers (tests install their own)
        responses={
            400: {"model": ErrorResponse},
            401: {"model": ErrorResponse},
            403: {"model": ErrorResponse},
            404: {"model": ErrorResponse},
            429: {"model": ErrorResponse},
            503: {"model": ErrorResponse},
        },
    )
    app.state.platform = platform
    app.state.gateway_settings = gateway = settings or GatewaySettings()
    app.state.rate_limiter = RateLimiter(
        gateway.rate_tenant_per_second,
        gateway.rate_tenant_burst,
        gateway.rate_key_per_second,
        gateway.rate_key_burst,
    )
    app.state.tail_limiter = TailLimiter(gateway.max_tails_per_tenant, gateway.max_tails_per_key)
    app.state.tail_news = tail_news = TailNews()
    platform.app.listen(tail_news.notify)  # appends wake the waiting live tails
    app.state.run_consumers = run_consumers
    install_error_handlers(app)
    install_log_redaction()
    app.add_middleware(McpGuard)
    for module in (
        health,
        access,
        events,
        memories,
        context,
        sync,
        admin,
        console,
        toolchains,
        tool_results,
        documents,
    ):
        app.include_router(module.router)
    # MCP over streamable HTTP at /mcp; each request's own identity headers reach the API
    mcp = mount_mcp(app, gateway.host, gateway.max_body_bytes)
    return app
