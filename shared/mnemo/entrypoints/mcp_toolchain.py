"""The MCP server's toolchain tools (mnemo.mcp_server; docs/toolchains.md): start a
toolchain, record a step's outcome, and read the state to resume from after a crash or on
another device. Each is a call to the HTTP API, as every tool of the server is."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context
from mcp_types import CallToolResult, ToolAnnotations
from pydantic import Field

from mnemo.client import MnemoAPIError
from mnemo.client._toolchain import Toolchain
from mnemo.domain.toolchain import DEFAULT_TTL_SECONDS, MAX_STEPS, MAX_TTL_SECONDS
from mnemo.entrypoints.mcp_server import (
    MnemoMCPServer,
    Subject,
    Upstream,
    api_error_result,
    error_result,
    ok,
)

__all__ = ["register"]

ToolchainId = Annotated[
    str,
    Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}$", description="the toolchain's id"),
]
StepId = Annotated[
    str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,63}$", description="a planned step's id")
]


def register(server: MnemoMCPServer, upstream: Upstream) -> None:
    @server.tool(
        title="Start a toolchain",
        description="Plan a chain of tool calls for a subject (e.g. create_order, "
        "payment_link, confirm_payment) under an id of your choice. It expires after "
        "`ttl_seconds` (a day by default). Record each step with `record_step`; after a "
        "crash, `toolchain_state` says what to run next.",
        annotations=ToolAnnotations(idempotent_hint=True),
    )
    async def start_toolchain(
        toolchain_id: ToolchainId,
        subject: Subject,
        steps: Annotated[list[StepId], Field(min_length=1, max_length=MAX_STEPS)],
        ctx: Context[Any, Any],
        ttl_seconds: Annotated[int, Field(ge=1, le=MAX_TTL_SECONDS)] = DEFAULT_TTL_SECONDS,
    ) -> Annotated[CallToolResult, Toolchain]:
        try:
            chain = await upstream.api(ctx).start_toolchain(
                toolchain_id, subject, steps, ttl_seconds=ttl_seconds
            )
        except MnemoAPIError as exc:
            return api_error_result(exc)
        return ok(chain)

    @server.tool(
        title="Record a step",
        description="Record a step's outcome: `completed` with its `output` (any JSON), or "
        "`failed` with `error_type`, `reason` and `retryable`. Recording a step again with "
        "the same content changes nothing; a completed step is never run again.",
        annotations=ToolAnnotations(idempotent_hint=True),
    )
    async def record_step(
        toolchain_id: ToolchainId,
        step_id: StepId,
        status: Literal["completed", "failed"],
        ctx: Context[Any, Any],
        output: Any = None,
        error_type: Annotated[str | None, Field(pattern=r"^[A-Za-z][A-Za-z0-9_.:-]{0,63}$")] = None,
        reason: Annotated[str | None, Field(min_length=1, max_length=2_000)] = None,
        retryable: bool = True,
        field: Annotated[str | None, Field(max_length=256)] = None,
    ) -> Annotated[CallToolResult, Toolchain]:
        api = upstream.api(ctx)
        failure = {"error_type": error_type, "reason": reason, "field": field}
        if status == "completed" and any(v is not None for v in failure.values()):
            # a completed step with a failure's arguments was recorded completed with no
            # output, the reason dropped: the caller meant something else
            given = next(k for k, v in failure.items() if v is not None)
            return error_result(
                "INVALID_STEP", f"a completed step takes output, not {given}", given
            )
        if status == "failed" and output is not None:
            return error_result("INVALID_STEP", "a failed step takes no output", "output")
        try:
            if status == "completed":
                chain = await api.complete_step(toolchain_id, step_id, output)
            else:
                if error_type is None or reason is None:
                    return error_result(
                        "INVALID_STEP", "a failed step needs error_type and reason", "reason"
                    )
                chain = await api.fail_step(
                    toolchain_id,
                    step_id,
                    type=error_type,
                    reason=reason,
                    retryable=retryable,
                    field=field,
                )
        except MnemoAPIError as exc:
            return api_error_result(exc)
        return ok(chain)

    @server.tool(
        title="Toolchain state",
        description="A toolchain's state: the steps done with their outputs, the failed "
        "step and its error, and `next_step`, the one to run now (never a step done).",
        annotations=ToolAnnotations(read_only_hint=True),
    )
    async def toolchain_state(
        toolchain_id: ToolchainId, ctx: Context[Any, Any]
    ) -> Annotated[CallToolResult, Toolchain]:
        try:
            chain = await upstream.api(ctx).toolchain(toolchain_id)
        except MnemoAPIError as exc:
            return api_error_result(exc)
        return ok(chain)
