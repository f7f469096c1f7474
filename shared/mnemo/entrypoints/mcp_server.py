"""Mnemo as a Model Context Protocol server, on the official MCP Python SDK (2.x).

The server is a thin adapter over Mnemo's HTTP API: every tool call and resource read is
one or a few HTTP requests made with `AsyncMnemoClient`, so authentication and tenancy
have a single path, the gateway's. Who is asking depends on the transport:

- stdio (`mnemo mcp --url ...`): one identity for the process, from MNEMO_API_KEY,
  MNEMO_PRINCIPAL and (optionally) MNEMO_TENANT, or the `mnemo` options.
- streamable HTTP, mounted in the gateway at /mcp: every MCP request forwards its own
  API key (Authorization, or X-Mnemo-Key) and X-Mnemo-Principal (and X-Mnemo-Tenant, if
  sent) to the API. There is no server-wide identity; the gateway refuses a request
  without a valid key before it reaches this server.

A failure the agent can act on comes back as a tool result with `isError` set and a
structured `{code, field, reason}` taken from Mnemo's error body (or INVALID_ARGUMENTS
when the arguments break the tool's input schema). docs/mcp.md has the reference.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import json
import os
import re
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, Literal

import httpx
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import (
    ResourceError,
    ResourceNotFoundError,
    ToolError,
    UnexpectedToolError,
)
from mcp.server.transport_security import TransportSecurityMiddleware, TransportSecuritySettings
from mcp_types import CallToolResult, InputRequiredResult, TextContent, ToolAnnotations
from pydantic import BaseModel, Field, ValidationError
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mnemo import __version__
from mnemo.client import AsyncMnemoClient, MnemoAPIError, _core
from mnemo.client.models import Memory, PublishResult
from mnemo.domain.access import redact, redact_all
from mnemo.domain.ids import STREAM_RE
from mnemo.domain.memory import KEY_RE, TAG_RE
from mnemo.domain.tool_result import TOOL_NAME_RE, finite_json
from mnemo.entrypoints.bodies import body_within, read_json

__all__ = [
    "MCP_PATH",
    "Identity",
    "McpMount",
    "build_server",
    "env_identity",
    "header_identity",
    "mount_mcp",
    "run_stdio",
]

MCP_PATH = "/mcp"
PAGE_MEMORIES = 50  # memories per resource page
PAGE_BYTES = 64 * 1024  # and at most about this much JSON per page
LOOPBACK = ("127.0.0.1", "localhost", "::1")

INSTRUCTIONS = """\
Mnemo is a shared, durable memory. Memories belong to a subject stream such as
user:U7892, session:S1 or agent:planner. Use `record_turn` for what someone said, in
their own words: it is kept as history, and the preferences, facts, corrections and
negations in it are registered. Use `remember` to store a memory you have already
shaped (a type, and content or key and value), `recall` to search, and `get_context`
before answering: it returns the memories that matter within a token budget,
constraints first. Cite the memories you rely on with
<memory_ref id="MEMORY_ID"/> in your answer, then call `feedback` with the context's
request_id and your answer (and the user's correction, if any); cited memories gain
weight, corrected ones lose it. `forget` erases a memory. Errors come back as
{code, field, reason}."""

# ---- identity ---------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Identity:
    """Who a call is made for: sent to the API as Authorization (the API key, which decides
    the tenant), X-Mnemo-Principal and, when set, X-Mnemo-Tenant (which must match)."""

    tenant: str | None
    principal: str | None = None
    authorization: str | None = None


IdentityOf = Callable[[Context[Any, Any] | None], Identity]


def env_identity(environ: Mapping[str, str] | None = None) -> Identity:
    """The identity of a stdio server: MNEMO_TENANT, MNEMO_PRINCIPAL, MNEMO_API_KEY."""
    env = os.environ if environ is None else environ
    key = env.get("MNEMO_API_KEY")
    return Identity(
        tenant=env.get("MNEMO_TENANT"),
        principal=env.get("MNEMO_PRINCIPAL", "mcp"),
        authorization=f"Bearer {key}" if key else None,
    )


def header_identity(ctx: Context[Any, Any] | None) -> Identity:
    """The identity an HTTP caller sent with this very MCP request."""
    headers = {k.lower(): v for k, v in ((ctx.headers if ctx else None) or {}).items()}
    key = headers.get("x-mnemo-key")
    principal = headers.get("x-mnemo-principal")
    if principal is not None:
        # HTTP hands header bytes over as Latin-1; sent on as they came, josé reached the
        # API as josÃ©. Bytes that are no UTF-8 go on as they are, for the API to refuse.
        with contextlib.suppress(UnicodeEncodeError, UnicodeDecodeError):
            principal = principal.encode("latin-1").decode("utf-8")
    return Identity(
        tenant=headers.get("x-mnemo-tenant"),
        principal=principal,
        authorization=headers.get("authorization") or (f"Bearer {key}" if key else None),
    )


def fixed_identity(identity: Identity) -> IdentityOf:
    return lambda _ctx: identity


@dataclass
class Upstream:
    """The HTTP client to Mnemo's API, and how to find who each call is for."""

    identity_of: IdentityOf
    client: AsyncMnemoClient | None = None

    def api(self, ctx: Context[Any, Any] | None) -> AsyncMnemoClient:
        if self.client is None:
            raise MnemoAPIError(503, "MCP_NOT_STARTED", "the MCP server is not running")
        who = self.identity_of(ctx)
        extra = {"Authorization": who.authorization} if who.authorization else None
        return self.client.with_identity(tenant=who.tenant, principal=who.principal, headers=extra)


# ---- tool results -------------------------------------------------------------------------


def error_result(
    code: str, reason: str, field: str | None = None, **details: Any
) -> CallToolResult:
    """A tool error the agent can read: isError, and {code, field, reason} both as
    structured content and as JSON text (for clients that only show text). An API key
    pasted into an argument's name or value is not repeated, whole or cut short."""
    error: dict[str, Any] = {
        "code": code,
        "field": None if field is None else redact(field),
        "reason": redact(reason),
    }
    if details:
        error["details"] = {name: redact_all(v) for name, v in details.items()}
    text = json.dumps({"error": error}, ensure_ascii=False)
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=error, is_error=True
    )


# the API's names for what a tool's arguments became, by the tools' own names
_ARGUMENT_NAMES = {"memory": "content", "stream": "subject"}


def _argument_of(field: str | None) -> str | None:
    """The API's field path as the tool's argument: `events[0].payload.memory_id` is the
    `memory_id` the agent gave, `events[0].stream` its `subject`."""
    if field is None:
        return None
    bare = re.sub(r"^payload\.(memory\.)?", "", re.sub(r"^events\[\d+\]\.", "", field))
    return _ARGUMENT_NAMES.get(bare, bare)


def api_error_result(exc: MnemoAPIError) -> CallToolResult:
    return error_result(exc.code, exc.message, _argument_of(exc.field), **exc.extra)


def ok(result: BaseModel) -> CallToolResult:
    data = result.model_dump(mode="json")
    text = json.dumps(data, ensure_ascii=False)
    return CallToolResult(content=[TextContent(type="text", text=text)], structured_content=data)


def _loc(parts: Sequence[int | str]) -> str:
    out = ""
    for p in parts:
        out += f"[{p}]" if isinstance(p, int) else (f".{p}" if out else str(p))
    return out


def _json_types(schema: Mapping[str, Any]) -> set[str]:
    """The JSON types an argument's schema allows (empty: no simple type to check)."""
    if "type" in schema:
        given = schema["type"]
        return set(given) if isinstance(given, list) else {str(given)}
    branches = schema.get("anyOf") or schema.get("oneOf") or []
    types = [_json_types(b) for b in branches if isinstance(b, Mapping)]
    return set().union(*types) if types and all(types) else set()


def _is_json_type(value: object, name: str) -> bool:
    match name:
        case "integer":
            return isinstance(value, int) and not isinstance(value, bool)
        case "number":
            return isinstance(value, int | float) and not isinstance(value, bool)
        case "boolean":
            return isinstance(value, bool)
        case "string":
            return isinstance(value, str)
        case "array":
            return isinstance(value, list)
        case "object":
            return isinstance(value, dict)
        case "null":
            return value is None
    return True


def _json_type_of(value: object) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _is_json_type(value, name):
            return name
    return type(value).__name__


class MnemoMCPServer(MCPServer[Any]):
    """MCPServer whose argument-validation failures are structured errors too."""

    async def call_tool(
        self, name: str, arguments: dict[str, Any], context: Context[Any, Any] | None = None
    ) -> CallToolResult | InputRequiredResult:
        # an argument the tool does not take is refused, not dropped: `recall` given
        # `subject` for `subjects` searched every subject, and `remember` given
        # `sensitive: true` stored the content as any other
        known = next((t.input_schema for t in await self.list_tools() if t.name == name), None)
        if known is None:
            return error_result("UNKNOWN_TOOL", f"there is no tool {name[:64]!r}", "name")
        properties = known.get("properties", {})
        unknown = sorted(set(arguments) - set(properties))
        if unknown:
            return error_result(
                "INVALID_ARGUMENTS",
                f"{name} takes no argument {unknown[0][:64]!r}; it takes: "
                f"{', '.join(sorted(properties))}",
                unknown[0][:64],
            )
        # JSON types as the schema gives them: "5", 5.0 or true for an integer were taken
        # as 5, 5 and 1 (a limit of true returned one hit)
        for argument, value in arguments.items():
            wanted = _json_types(properties[argument])
            if isinstance(value, str) and wanted & {"array", "object"}:
                # some clients send a list or an object as its JSON text; the library reads
                # it as such, so its text is what is checked
                with contextlib.suppress(ValueError):
                    value = json.loads(value)
            if wanted and not any(_is_json_type(value, t) for t in wanted):
                return error_result(
                    "INVALID_ARGUMENTS",
                    f"{argument} must be {' or '.join(sorted(wanted))}, not {_json_type_of(value)}",
                    argument,
                )
        try:
            return await super().call_tool(name, arguments, context)
        except UnexpectedToolError:
            raise
        except ToolError as exc:
            cause = exc.__cause__
            if isinstance(cause, ValidationError):
                err = cause.errors()[0]
                return error_result("INVALID_ARGUMENTS", str(err["msg"]), _loc(err["loc"]) or None)
            return error_result("TOOL_ERROR", str(exc))


# ---- argument and result shapes -------------------------------------------------------------

MemoryTypeName = Literal[
    "constraint", "context", "history", "external", "preference", "fact", "episode", "long_term"
]
ScopeName = Literal["session", "user", "agent", "tenant"]
Subject = Annotated[
    str,
    Field(
        pattern=STREAM_RE.pattern,
        description="a subject stream: 'user:U7892', 'session:S1', 'agent:planner', ...",
    ),
]
Tag = Annotated[str, Field(pattern=TAG_RE.pattern)]
MemoryId = Annotated[str, Field(min_length=1, max_length=64, description="a memory's id")]


class RememberOut(BaseModel):
    event_id: str = Field(description="the MemoryDeclared event (the idempotency key)")
    memory_id: str | None = Field(description="the memory; null while registration is pending")
    outcome: str = Field(description="registered, superseded, duplicate or pending")
    version: int | None = Field(description="the key's version (a new value supersedes)")
    detail: str | None = None


class ExtractedOut(BaseModel):
    index: int = Field(description="1 on: what the registration rules made of the turn")
    outcome: str = Field(description="registered, superseded, duplicate, rejected or ignored")
    memory_id: str | None = None
    reason_code: str | None = Field(
        default=None,
        description="why nothing was remembered: VALUE_NOT_FOUND (ask for the value), "
        "TARGET_NOT_FOUND (ask what to change), REQUEST_NOT_UNDERSTOOD (declare it), "
        "AMBIGUOUS_REFERENCE (ask which thing the user means), FORGET_REQUESTED (confirm "
        "which memories, then call forget)",
    )
    detail: str | None = None


class TurnOut(BaseModel):
    event_id: str = Field(description="the ObservationRecorded event (the idempotency key)")
    memory_id: str | None = Field(description="the history memory of the turn; null if pending")
    outcome: str = Field(description="registered, duplicate or pending")
    extracted: list[ExtractedOut] = Field(
        description="memories the rules extracted from the turn, or why none"
    )


class HitOut(BaseModel):
    memory_id: str
    subject: str
    type: str
    scope: str
    content: str
    key: str | None
    value: str | None
    tags: list[str]
    score: float
    weight: float = Field(description="current semantic weight, after decay")
    created_at: str
    valid_until: str | None


class RecallOut(BaseModel):
    hits: list[HitOut]


class IncludedOut(BaseModel):
    memory_id: str
    section: str
    type: str
    text: str = Field(description="what the memory says")


class LeftOutOut(BaseModel):
    memory_id: str
    section: str
    reason: str


class ConflictOut(BaseModel):
    """Two constraints that cannot both hold: the one kept, the one left out, and why."""

    kept: str = Field(description="the memory id kept in the context")
    dropped: str = Field(description="the memory id left out (listed in left_out)")
    kept_text: str | None = None
    dropped_text: str | None = None
    why: str | None = Field(default=None, description="what makes them incompatible")
    decided_by: str | None = Field(
        default=None, description="trust, specificity or recency: what chose the one kept"
    )
    key: str | None = None


def _conflict(raw: dict[str, Any]) -> ConflictOut:
    """A resolved conflict as the context answer gives it, with the fields an agent reads."""

    def text(name: str) -> str | None:
        value = raw.get(name)
        return None if value is None else str(value)

    return ConflictOut(
        kept=str(raw.get("kept", "")),
        dropped=str(raw.get("dropped", "")),
        kept_text=text("kept_text"),
        dropped_text=text("dropped_text"),
        why=text("why"),
        decided_by=text("decided_by"),
        key=text("key"),
    )


class ContextOut(BaseModel):
    request_id: str = Field(description="pass it to `feedback` with your answer")
    context: str = Field(description="the text to put in front of the model")
    tokens: int
    budget: int
    template: str
    included: list[IncludedOut]
    left_out: list[LeftOutOut]
    conflicts: list[ConflictOut] = Field(
        default_factory=list,
        description="constraints that contradict each other, resolved: tell the user which "
        "one was applied when it matters",
    )
    warnings: list[str]
    suggestions: list[dict[str, Any]] = Field(
        default_factory=list,
        description="tool calls the operators' triggers suggest (see suggested_tool_calls)",
    )


class ForgetOut(BaseModel):
    memory_id: str
    subject: str
    forgotten: bool
    event_id: str


class FeedbackOut(BaseModel):
    request_id: str | None = Field(description="the context the answer was reported for")
    cited: list[str] = Field(description="memories recorded as cited")
    unknown_refs: list[str] = Field(description="memory_ref ids that were not in the context")
    corrected: list[str]
    verified: list[str]
    event_ids: list[str] = Field(description="events published for cite/correct/verify")


class DueOut(BaseModel):
    subject: str
    items: list[dict[str, Any]] = Field(description="memories due to be verified again")


def _hit(m: Memory, score: float, weight: float) -> HitOut:
    return HitOut(
        memory_id=m.memory_id,
        subject=m.stream,
        type=m.type.value,
        scope=m.scope.value,
        content=m.content,
        key=m.key,
        value=m.value,
        tags=list(m.tags),
        score=score,
        weight=weight,
        created_at=m.created_at.isoformat(),
        valid_until=m.valid_until.isoformat() if m.valid_until else None,
    )


def _first_outcome(result: PublishResult) -> tuple[str, str | None, int | None, str | None]:
    """(outcome, memory_id, version, detail) of a single-event publish; a rejection raises."""
    outcomes = result.outcomes
    if not outcomes:
        return "pending", None, None, "registration did not finish within the wait"
    o = outcomes[0]
    if o.outcome == "rejected":
        raise MnemoAPIError(
            422, o.reason_code or "REJECTED", o.detail or "registration rejected it", "memory"
        )
    return o.outcome, o.memory_id, o.version, o.detail


# ---- the server ------------------------------------------------------------------------------


def build_server(upstream: Upstream) -> MnemoMCPServer:
    """The MCP server: its tools and resources, each a call to Mnemo's HTTP API."""
    server = MnemoMCPServer(
        "mnemo",
        title="Mnemo",
        description="Durable, governed, shared memory for AI agents.",
        instructions=INSTRUCTIONS,
        version=__version__,
        log_level="WARNING",
    )
    _tools(server, upstream)
    _tool_result_tools(server, upstream)
    _document_tools(server, upstream)
    _resources(server, upstream)
    from mnemo.entrypoints.mcp_toolchain import register as register_toolchain_tools

    register_toolchain_tools(server, upstream)
    return server


def _tools(server: MnemoMCPServer, upstream: Upstream) -> None:
    @server.tool(
        title="Remember",
        description="Store a memory about a subject. Give `content`, or a `key` with a "
        "`value` (a new value of a key supersedes the old one). Returns the memory's id "
        "once Mnemo has registered it.",
        annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=False),
    )
    async def remember(
        subject: Subject,
        type: Annotated[
            MemoryTypeName,
            Field(
                description="constraint (a rule to obey), preference, fact, context (task "
                "state, usually with a TTL), history, episode or external"
            ),
        ],
        ctx: Context[Any, Any],
        content: Annotated[str, Field(max_length=8_000, description="what to remember")] = "",
        key: Annotated[
            str | None,
            Field(pattern=KEY_RE.pattern, description="a name for the memory, e.g. 'size'"),
        ] = None,
        value: Annotated[
            str | None, Field(max_length=1_000, description="the key's value, e.g. 'L'")
        ] = None,
        scope: Annotated[
            ScopeName, Field(description="who it applies to; tenant = shared by every agent")
        ] = "user",
        ttl_seconds: Annotated[
            int | None, Field(gt=0, description="seconds until it expires; none = permanent")
        ] = None,
        tags: Annotated[Sequence[Tag], Field(max_length=32)] = (),
        semantic_weight: Annotated[
            float | None, Field(ge=0, le=0.99, description="importance, default 0.5")
        ] = None,
        wait: Annotated[
            Literal["registered", "indexed"],
            Field(description="indexed: also searchable when the call returns"),
        ] = "registered",
    ) -> Annotated[CallToolResult, RememberOut]:
        try:
            result = await upstream.api(ctx).remember(
                subject,
                content or None,
                type=type,
                key=key,
                value=value,
                scope=scope,
                tags=tags,
                ttl_seconds=ttl_seconds,
                semantic_weight=semantic_weight,
                wait=wait,
            )
            outcome, memory_id, version, detail = _first_outcome(result)
        except MnemoAPIError as exc:
            return api_error_result(exc)
        return ok(
            RememberOut(
                event_id=result.accepted[0].event_id,
                memory_id=memory_id,
                outcome=outcome,
                version=version,
                detail=detail,
            )
        )

    @server.tool(
        title="Record a conversation turn",
        description="Record one turn of a conversation about a subject. It is always kept "
        "as a history memory; the registration rules also extract preferences, facts, "
        "corrections and negations from it. Give `occurred_at` when importing a past "
        "conversation.",
        annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=False),
    )
    async def record_turn(
        subject: Subject,
        text: Annotated[str, Field(min_length=1, max_length=8_000, description="what was said")],
        ctx: Context[Any, Any],
        speaker: Annotated[
            str | None, Field(min_length=1, max_length=128, description="who said it")
        ] = None,
        occurred_at: Annotated[
            datetime | None, Field(description="when it was said (ISO 8601 with an offset)")
        ] = None,
        wait: Annotated[
            Literal["registered", "indexed"],
            Field(description="indexed: also searchable when the call returns"),
        ] = "registered",
    ) -> Annotated[CallToolResult, TurnOut]:
        try:
            result = await upstream.api(ctx).record_turn(
                subject, text, speaker=speaker, occurred_at=occurred_at, wait=wait
            )
            outcome, memory_id, _, _ = _first_outcome(result)
        except MnemoAPIError as exc:
            return api_error_result(exc)
        return ok(
            TurnOut(
                event_id=result.accepted[0].event_id,
                memory_id=memory_id,
                outcome=outcome,
                extracted=[
                    ExtractedOut(
                        index=o.index,
                        outcome=o.outcome,
                        memory_id=o.memory_id,
                        reason_code=o.reason_code,
                        detail=o.detail,
                    )
                    for o in result.outcomes
                    if o.index > 0
                ],
            )
        )

    @server.tool(
        title="Recall",
        description="Search memories by meaning and keywords (hybrid search), best first. "
        "Filter by subjects, memory types and tags.",
        annotations=ToolAnnotations(read_only_hint=True),
    )
    async def recall(
        query: Annotated[str, Field(min_length=1, max_length=2_000, description="what to find")],
        ctx: Context[Any, Any],
        subjects: Annotated[
            Sequence[Subject], Field(max_length=32, description="only these subjects (default all)")
        ] = (),
        types: Annotated[Sequence[MemoryTypeName], Field(description="only these types")] = (),
        tags: Annotated[
            Sequence[Tag], Field(max_length=32, description="only memories with all")
        ] = (),
        limit: Annotated[int, Field(ge=1, le=100)] = 10,
        timezone: Annotated[
            str | None,
            Field(
                max_length=64,
                description="the user's IANA time zone (e.g. Asia/Shanghai): the query's "
                "'yesterday' is their yesterday (default UTC)",
            ),
        ] = None,
    ) -> Annotated[CallToolResult, RecallOut]:
        try:
            found = await upstream.api(ctx).search(
                query, subjects=subjects, types=types, tags=tags, limit=limit, timezone=timezone
            )
        except MnemoAPIError as exc:
            return api_error_result(exc)
        return ok(RecallOut(hits=[_hit(h.memory, h.score, h.weight) for h in found.hits]))

    @server.tool(
        title="Get context",
        description="The memories that matter for a question, rendered within a token budget "
        '(constraints first). Cite what you use as <memory_ref id="MEMORY_ID"/> and report '
        "your answer with `feedback` and the returned request_id.",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False),
    )
    async def get_context(
        subjects: Annotated[Sequence[Subject], Field(min_length=1, max_length=32)],
        ctx: Context[Any, Any],
        query: Annotated[str, Field(max_length=2_000, description="the current question")] = "",
        budget: Annotated[
            int, Field(ge=16, le=200_000, description="total tokens, header included")
        ] = 1_000,
        template: Annotated[
            str, Field(pattern=r"^[a-z][a-z0-9_.-]{0,63}$", description="a context template")
        ] = "default",
        tokenizer: Annotated[
            str | None,
            Field(max_length=64, description="an encoding (cl100k_base) or a model name"),
        ] = None,
        timezone: Annotated[
            str | None,
            Field(
                max_length=64,
                description="the user's IANA time zone (e.g. Asia/Shanghai): the query's "
                "'yesterday' is their yesterday (default UTC)",
            ),
        ] = None,
        history: Annotated[
            Literal["facts", "facts_only", "raw"],
            Field(
                description="how the history section shows a conversation: facts (typed "
                "facts in place of the turns they were read from), facts_only (the facts "
                "alone) or raw (the turns themselves)",
            ),
        ] = "facts",
        where: Annotated[
            dict[str, list[dict[str, Any]]] | None,
            Field(
                max_length=16,
                description="for a template section filled from a structured query: its "
                "conditions ({field, op, value}, as structured_query's where) by section name",
            ),
        ] = None,
    ) -> Annotated[CallToolResult, ContextOut]:
        try:
            c = await upstream.api(ctx).context(
                subjects,
                query,
                budget=budget,
                template=template,
                tokenizer=tokenizer,
                timezone=timezone,
                history=history,
                where=where,
            )
        except MnemoAPIError as exc:
            return api_error_result(exc)
        return ok(
            ContextOut(
                request_id=c.request_id,
                context=c.context,
                tokens=c.tokens,
                budget=c.budget,
                template=c.template,
                included=[
                    IncludedOut(
                        memory_id=i.memory.memory_id,
                        section=i.section,
                        type=i.memory.type.value,
                        text=i.memory.text(),
                    )
                    for i in c.included
                ],
                left_out=[
                    LeftOutOut(memory_id=x.memory_id, section=x.section, reason=x.reason)
                    for x in c.left_out
                ],
                conflicts=[_conflict(x) for x in c.conflicts],
                warnings=c.warnings,
                suggestions=[x.model_dump(mode="json") for x in c.suggestions],
            )
        )

    @server.tool(
        title="Forget",
        description="Forget a memory of a subject: its content is erased and it is no "
        "longer found or used.",
        annotations=ToolAnnotations(destructive_hint=True, idempotent_hint=True),
    )
    async def forget(
        memory_id: MemoryId,
        subject: Subject,
        ctx: Context[Any, Any],
        reason: Annotated[str | None, Field(max_length=1_000)] = None,
    ) -> Annotated[CallToolResult, ForgetOut]:
        try:
            result = await upstream.api(ctx).forget(subject, memory_id, reason=reason)
            outcome = result.outcomes[0] if result.outcomes else None
            if outcome is not None and outcome.outcome == "rejected":
                code = outcome.reason_code or "REJECTED"
                return error_result(code, outcome.detail or "not forgotten", "memory_id")
        except MnemoAPIError as exc:
            return api_error_result(exc)
        return ok(
            ForgetOut(
                memory_id=memory_id,
                subject=subject,
                forgotten=outcome is not None,
                event_id=result.accepted[0].event_id,
            )
        )

    @server.tool(
        title="Feedback",
        description="Report how memories were used. With `request_id` (from get_context) "
        'and `response` (your answer, citing memories as <memory_ref id="..."/>), the '
        "cited memories gain weight; a `correction` from the user lowers the weight of the "
        "memories used (or of `corrected_memory_ids`). `cite` (with the `request_id` of "
        "the context that included them), `correct` (needs `correction` as the reason) and "
        "`verify` act on memory ids directly.",
        annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=False),
    )
    async def feedback(
        ctx: Context[Any, Any],
        request_id: Annotated[
            str | None, Field(max_length=64, description="get_context's request_id")
        ] = None,
        response: Annotated[
            str | None, Field(min_length=1, max_length=200_000, description="your answer")
        ] = None,
        correction: Annotated[
            str | None, Field(min_length=1, max_length=1_000, description="what was wrong")
        ] = None,
        corrected_memory_ids: Annotated[Sequence[MemoryId], Field(max_length=200)] = (),
        cite: Annotated[
            Sequence[MemoryId], Field(max_length=200, description="memories you used")
        ] = (),
        correct: Annotated[
            Sequence[MemoryId], Field(max_length=200, description="memories that were wrong")
        ] = (),
        verify: Annotated[
            Sequence[MemoryId], Field(max_length=200, description="memories confirmed still true")
        ] = (),
    ) -> Annotated[CallToolResult, FeedbackOut]:
        if request_id is None and not (cite or correct or verify):
            return error_result(
                "NOTHING_TO_REPORT", "give request_id and response, or cite/correct/verify"
            )
        if cite and request_id is None:
            return error_result(
                "CITATION_WITHOUT_CONTEXT",
                "`cite` names memories of a context: give its request_id",
                "request_id",
            )
        if request_id is not None and response is None and not cite:
            return error_result("MISSING_RESPONSE", "a report needs your answer", "response")
        if correct and correction is None:
            return error_result("MISSING_REASON", "`correct` needs `correction`", "correction")
        out = FeedbackOut(
            request_id=request_id,
            cited=[],
            unknown_refs=[],
            corrected=[],
            verified=[],
            event_ids=[],
        )
        try:
            api = upstream.api(ctx)
            if request_id is not None and response is not None:
                fb = await api.report(
                    request_id,
                    response,
                    correction=correction,
                    corrected_memory_ids=corrected_memory_ids,
                )
                out.cited += [c.memory_id for c in fb.cited]
                out.unknown_refs += fb.unknown_refs
                out.corrected += fb.corrected
            events: list[dict[str, Any]] = []
            streams = {m: (await api.get(m)).stream for m in {*cite, *correct, *verify}}
            if cite:
                assert request_id is not None
                events += [_core.cited(m, streams[m], request_id, None) for m in cite]
            if correct:
                by_stream: dict[str, list[str]] = {}
                for m in correct:
                    by_stream.setdefault(streams[m], []).append(m)
                events += [
                    _core.corrected(ids, s, correction or "", None) for s, ids in by_stream.items()
                ]
            events += [_core.verified(m, streams[m]) for m in verify]
            if events:
                published = await api.publish(events)
                out.event_ids = published.event_ids
                out.cited += [m for m in cite if m not in out.cited]
                out.corrected += [m for m in correct if m not in out.corrected]
                out.verified = list(verify)
        except MnemoAPIError as exc:
            return api_error_result(exc)
        return ok(out)

    @server.tool(
        title="Due verifications",
        description="Memories of a subject that are due to be confirmed again (ask the user, "
        "then call `feedback` with `verify`).",
        annotations=ToolAnnotations(read_only_hint=True),
    )
    async def due_verifications(
        subject: Subject, ctx: Context[Any, Any]
    ) -> Annotated[CallToolResult, DueOut]:
        try:
            items = await upstream.api(ctx).due_verifications(subject)
        except MnemoAPIError as exc:
            return api_error_result(exc)
        return ok(DueOut(subject=subject, items=items))


class ToolResultOut(BaseModel):
    event_id: str = Field(description="the ToolResultRecorded event (the idempotency key)")
    memory_id: str | None = Field(description="the result's memory; null while pending")
    outcome: str = Field(description="registered, superseded, duplicate, rejected or pending")
    reason_code: str | None = None


class SuggestionsOut(BaseModel):
    subject: str
    as_of: str
    suggestions: list[dict[str, Any]] = Field(
        description="each: tool, arguments, the memory that fired it (memory_id, "
        "memory_version, key, value, age_seconds) and `trigger`, to pass back to "
        "record_tool_result"
    )


class IngestedOut(BaseModel):
    document_id: str
    event_id: str
    sections: int = Field(description="how many sections became long_term memories")
    pages: int
    status: str = Field(description="registered, pending, rejected or accepted")


class StructuredQueryOut(BaseModel):
    total: int = Field(description="how many documents met every condition")
    documents: list[dict[str, Any]] = Field(
        description="each: document_id, filename, subject, hits (memory_id, section, page, "
        "clause, text, entities: field, value, text)"
    )


def _document_tools(server: MnemoMCPServer, upstream: Upstream) -> None:
    """Documents: ingest one, and ask exact structured questions of their entities."""

    @server.tool(
        title="Ingest document",
        description="Ingest a document (PDF, DOCX, XLSX, Markdown or plain text) for a "
        "subject, or for the whole tenant (subject 'tenant'): its sections become long_term "
        "memories with their page and clause, its entities (parties, dates, amounts, rates, "
        "clause numbers) answer structured_query. Send the bytes base64-encoded, or plain "
        "text in `text`.",
        annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=True),
    )
    async def ingest_document(
        filename: Annotated[str, Field(min_length=1, max_length=256)],
        ctx: Context[Any, Any],
        subject: Annotated[str, Field(min_length=1, max_length=128)] = "tenant",
        content_base64: Annotated[
            str | None, Field(description="the document's bytes, base64")
        ] = None,
        text: Annotated[str | None, Field(description="a plain-text document instead")] = None,
    ) -> Annotated[CallToolResult, IngestedOut]:
        if (content_base64 is None) == (text is None):
            return error_result("INVALID_ARGUMENTS", "send content_base64 or text", "text")
        try:
            data = (
                base64.b64decode(content_base64, validate=True)
                if content_base64 is not None
                else (text or "").encode()
            )
        except (binascii.Error, ValueError):
            return error_result("INVALID_ARGUMENTS", "not base64", "content_base64")
        try:
            done = await upstream.api(ctx).ingest_document(
                data, filename, subject=subject, wait="registered"
            )
        except MnemoAPIError as exc:
            return api_error_result(exc)
        return ok(
            IngestedOut(
                document_id=done.document_id,
                event_id=done.event_id,
                sections=done.sections,
                pages=done.pages,
                status=done.status,
            )
        )

    @server.tool(
        title="Structured query",
        description="Exact questions over the entities of the tenant's documents: `where` "
        "is a list of {field, op, value} ANDed per document (fields: party_a, party_b, "
        "party, organisation, person, contract_no, clause_no, signed_at, date, period, "
        "amount, penalty_rate, rate, duration; ops: eq, ne, in, contains, gt, gte, lt, lte, "
        "between, within). Example: penalty_rate gt '5%', signed_at within '2023-Q3', "
        "amount gte {amount: 500000, currency: CNY}. `text` only ranks the exact result.",
        annotations=ToolAnnotations(read_only_hint=True),
    )
    async def structured_query(
        where: Annotated[list[dict[str, Any]], Field(min_length=1, max_length=16)],
        ctx: Context[Any, Any],
        text: Annotated[str | None, Field(max_length=2_000)] = None,
        subjects: Annotated[list[str] | None, Field(max_length=100)] = None,
        limit: Annotated[int, Field(ge=1, le=1_000)] = 20,
        hits_limit: Annotated[int, Field(ge=1, le=1_000)] = 20,
    ) -> Annotated[CallToolResult, StructuredQueryOut]:
        try:
            found = await upstream.api(ctx).query(
                where, text=text, subjects=subjects or (), limit=limit, hits_limit=hits_limit
            )
        except MnemoAPIError as exc:
            return api_error_result(exc)
        return ok(
            StructuredQueryOut(
                total=found.total,
                documents=[d.model_dump(mode="json") for d in found.documents],
            )
        )


def _tool_result_tools(server: MnemoMCPServer, upstream: Upstream) -> None:
    """Tool results as memories, and the tool calls memories suggest."""

    @server.tool(
        title="Record tool result",
        description="Record the structured result of a tool you called, about a subject: it "
        "is remembered (provenance tool:<name>) and shown with its age until it goes stale "
        "after fresh_for_seconds. Pass a suggestion's `trigger` when the call was suggested: "
        "it then stops being suggested for that memory.",
        annotations=ToolAnnotations(destructive_hint=False, idempotent_hint=False),
    )
    async def record_tool_result(
        subject: Subject,
        tool: Annotated[str, Field(pattern=TOOL_NAME_RE.pattern, description="the tool's name")],
        result: Annotated[Any, Field(description="the tool's structured result (any JSON)")],
        source: Annotated[
            str, Field(min_length=1, max_length=256, description="the system it came from")
        ],
        fresh_for_seconds: Annotated[
            int, Field(gt=0, le=366 * 86_400, description="how long it stays fresh")
        ],
        ctx: Context[Any, Any],
        arguments: Annotated[
            dict[str, Any] | None, Field(description="the arguments it was called with")
        ] = None,
        fetched_at: Annotated[
            str | None, Field(description="ISO 8601 with a UTC offset; now when absent")
        ] = None,
        key: Annotated[str | None, Field(max_length=64, description="the memory key")] = None,
        trigger: Annotated[
            dict[str, str] | None,
            Field(description="the `trigger` of the suggestion this call answers"),
        ] = None,
    ) -> Annotated[CallToolResult, ToolResultOut]:
        try:
            when = datetime.fromisoformat(fetched_at) if fetched_at else None
        except ValueError:
            return error_result("INVALID_ARGUMENTS", "fetched_at is not ISO 8601", "fetched_at")
        # NaN and infinities parse in a JSON-RPC request but are no JSON to send on (the
        # request would fail as an unexpected error): the API's own code, named here
        for name, value in (("result", result), ("arguments", arguments or {})):
            if not finite_json(value):
                return error_result(
                    "TOOL_RESULT_NOT_JSON",
                    f"{name} is not JSON (no NaN, infinities or nesting past 32)",
                    name,
                )
        try:
            recorded = await upstream.api(ctx).record_tool_result(
                subject,
                tool,
                result,
                source=source,
                fresh_for_seconds=fresh_for_seconds,
                arguments=arguments,
                fetched_at=when,
                key=key,
                trigger=trigger,
                wait="registered",
            )
        except MnemoAPIError as exc:
            return api_error_result(exc)
        first = recorded.outcomes[0] if recorded.outcomes else None
        return ok(
            ToolResultOut(
                event_id=recorded.event_id,
                memory_id=first.memory_id if first else None,
                outcome=first.outcome if first else "pending",
                reason_code=first.reason_code if first else None,
            )
        )

    @server.tool(
        title="Suggested tool calls",
        description="Tool calls the operator's triggers suggest for a subject's memories "
        "(for example: a proposal sent over a day ago -> look the deal up in the CRM). Mnemo "
        "suggests, you decide; record the result with record_tool_result and the "
        "suggestion's `trigger`.",
        annotations=ToolAnnotations(read_only_hint=True),
    )
    async def suggested_tool_calls(
        subject: Subject, ctx: Context[Any, Any]
    ) -> Annotated[CallToolResult, SuggestionsOut]:
        try:
            found = await upstream.api(ctx).suggestions(subject)
        except MnemoAPIError as exc:
            return api_error_result(exc)
        return ok(
            SuggestionsOut(
                subject=subject,
                as_of=found.as_of.isoformat(),
                suggestions=[x.model_dump(mode="json") for x in found.suggestions],
            )
        )


def _resource_error(exc: MnemoAPIError) -> ResourceError:
    text = json.dumps({"code": exc.code, "field": exc.field, "reason": exc.message})
    return ResourceNotFoundError(text) if exc.status == 404 else ResourceError(text)


def memories_page(subject: str, memories: Sequence[Memory], more: str | None) -> dict[str, Any]:
    """One resource page: at most PAGE_MEMORIES memories and about PAGE_BYTES of JSON (never
    fewer than one memory); `next_cursor` continues after the last one shown."""
    shown: list[dict[str, Any]] = []
    size = 0
    for memory in memories[:PAGE_MEMORIES]:
        item = memory.model_dump(mode="json")
        item_size = len(json.dumps(item, ensure_ascii=False).encode())
        if shown and size + item_size > PAGE_BYTES:
            break
        shown.append(item)
        size += item_size
    cut = len(shown) < len(memories)
    cursor = shown[-1]["memory_id"] if (cut and shown) else more
    return {
        "subject": subject,
        "memories": shown,
        "next_cursor": cursor,
        "next_uri": f"mnemo://subjects/{subject}/memories?cursor={cursor}" if cursor else None,
    }


def _resources(server: MnemoMCPServer, upstream: Upstream) -> None:
    @server.resource(
        "mnemo://subjects/{subject}/memories{?cursor}",
        name="subject-memories",
        title="A subject's memories",
        description=f"A subject's live memories, {PAGE_MEMORIES} at most per read (and about "
        f"{PAGE_BYTES // 1024} KiB). Read `next_uri` (or add ?cursor=next_cursor) for the "
        "next page; next_cursor is null on the last.",
        mime_type="application/json",
    )
    async def subject_memories(
        subject: str, ctx: Context[Any, Any], cursor: str | None = None
    ) -> str:
        try:
            page = await upstream.api(ctx).list(subject, limit=PAGE_MEMORIES, after=cursor or None)
        except MnemoAPIError as exc:
            raise _resource_error(exc) from exc
        body = memories_page(subject, page.memories, page.next_after)
        return json.dumps(body, ensure_ascii=False)

    @server.resource(
        "mnemo://memories/{memory_id}",
        name="memory",
        title="One memory",
        description="One memory, every field.",
        mime_type="application/json",
    )
    async def memory(memory_id: str, ctx: Context[Any, Any]) -> str:
        try:
            found = await upstream.api(ctx).get(memory_id)
        except MnemoAPIError as exc:
            raise _resource_error(exc) from exc
        return found.model_dump_json()

    @server.resource(
        "mnemo://templates{?name}",
        name="templates",
        title="Context templates",
        description="The tenant's context templates and the built-in ones (or one, by name).",
        mime_type="application/json",
    )
    async def templates(ctx: Context[Any, Any], name: str | None = None) -> str:
        try:
            api = upstream.api(ctx)
            found = [await api.template(name)] if name else await api.templates()
        except MnemoAPIError as exc:
            raise _resource_error(exc) from exc
        return json.dumps({"templates": [t.model_dump(mode="json") for t in found]})


# ---- transports ------------------------------------------------------------------------------


async def run_stdio(url: str, identity: Identity | None = None, *, timeout: float = 60.0) -> None:
    """Serve MCP on stdin/stdout for one identity, talking to Mnemo at `url`."""
    who = identity or env_identity()
    async with AsyncMnemoClient(url, tenant=None, timeout=timeout) as client:
        upstream = Upstream(fixed_identity(who), client)
        await build_server(upstream).run_stdio_async()


# what the transport's header checks refuse, by the status they answer, as the API's coded
# errors (the transport itself answers in plain text)
_TRANSPORT_REFUSALS = {
    400: ("INVALID_CONTENT_TYPE", "an MCP request is sent as application/json"),
    403: ("ORIGIN_NOT_ALLOWED", "this endpoint does not answer pages of that origin"),
    421: ("MISDIRECTED_HOST", "this endpoint answers only under the host it listens on"),
}


class _Endpoint:
    """The /mcp route: checks the request's headers as the transport would (DNS rebinding
    protection on loopback, the content type of a POST) and refuses with a coded error, then
    hands the request to the session manager of the current run."""

    def __init__(self, mount: McpMount) -> None:
        self.mount = mount
        self.checks = TransportSecurityMiddleware(mount.security)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        request = Request(scope)
        refused = await self.checks.validate_request(request, is_post=request.method == "POST")
        if refused is not None:
            code, message = _TRANSPORT_REFUSALS.get(
                refused.status_code, ("REQUEST_REFUSED", "the MCP transport refused the request")
            )
            answer = JSONResponse(
                {"error": {"code": code, "message": message}}, status_code=refused.status_code
            )
            await answer(scope, receive, send)
            return
        if request.method != "POST":
            # stateless, with JSON answers: there is no stream for a GET to hold open (each
            # one was kept open for good, uncounted), and no session for a DELETE to end
            refused_method = JSONResponse(
                {
                    "error": {
                        "code": "METHOD_NOT_ALLOWED",
                        "message": "this MCP endpoint takes POST only (stateless, JSON answers)",
                    }
                },
                status_code=405,
                headers={"Allow": "POST"},
            )
            await refused_method(scope, receive, send)
            return
        if request.method == "POST":
            # the API's body limit, before anything parses it (the MCP library's own is 4 MiB)
            try:
                body = await body_within(Request(scope, receive), self.mount.max_body_bytes)
            except ClientDisconnect:
                return  # the caller went away mid-body: nobody to answer, no server error
            read = read_json(body) if body is not None else None  # parsed once for both
            shape = _not_a_request(read[0]) if read is not None else None
            if shape is not None:
                bad = JSONResponse(
                    {"jsonrpc": "2.0", "id": None, "error": {"code": -32600, "message": shape}},
                    status_code=400,
                )
                await bad(scope, receive, send)
                return
            if read is not None and read[1]:
                # {"name": "toolchain_state", "name": "forget"}: the last one won, so a proxy
                # that read the first saw another call than the one made
                twice = JSONResponse(
                    {
                        "jsonrpc": "2.0",
                        "id": None,
                        "error": {
                            "code": -32600,
                            "message": "the body names a member of one object twice",
                        },
                    },
                    status_code=400,
                )
                await twice(scope, receive, send)
                return
            if body is None:
                limit = self.mount.max_body_bytes
                too_large = JSONResponse(
                    {"error": {"code": "PAYLOAD_TOO_LARGE", "message": f"body over {limit} bytes"}},
                    status_code=413,
                )
                await too_large(scope, receive, send)
                return
            receive = _replayed(body, receive)
        await self.mount.server.session_manager.handle_request(scope, receive, send)


def _not_a_request(message: Any) -> str | None:
    """What makes a body's JSON no JSON-RPC message (Invalid Request, -32600), in a
    sentence; None for a message (a body that is not JSON is the library's parse error).
    The library answered these -32602 with its validator's dump."""
    if isinstance(message, list):
        return "a batch (a JSON array) is not taken: send one message per request"
    if not isinstance(message, dict):
        return "a JSON-RPC message is a JSON object"
    if message.get("jsonrpc") != "2.0":
        return 'a JSON-RPC message has "jsonrpc": "2.0"'
    if "method" in message and not isinstance(message["method"], str):
        return "method is a string"
    if "method" not in message and "result" not in message and "error" not in message:
        return "a JSON-RPC message has a method (a request or notification), or is a response"
    if "id" in message and (
        isinstance(message["id"], bool) or not isinstance(message["id"], str | int)
    ):
        return "id is a string or an integer"
    if message.get("params") is not None and not isinstance(message["params"], dict):
        return "params is an object"
    return None


def _replayed(body: bytes, receive: Receive) -> Receive:
    """A receive channel that hands over `body` once, then the client's own messages."""
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


class McpMount:
    """The MCP endpoint of a gateway. `running()` belongs in the gateway's lifespan: it
    starts the streamable-HTTP session manager and the client that calls the API in
    process (through the app itself, so every call takes the same path as any other)."""

    def __init__(self, app: ASGIApp, host: str, max_body_bytes: int = 1_048_576) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes
        self.upstream = Upstream(header_identity)
        self.server = build_server(self.upstream)
        loopback = host in LOOPBACK
        self.security = TransportSecuritySettings(
            enable_dns_rebinding_protection=loopback,
            allowed_hosts=["127.0.0.1:*", "localhost:*", "[::1]:*"] if loopback else [],
            allowed_origins=(
                ["http://127.0.0.1:*", "http://localhost:*", "http://[::1]:*"] if loopback else []
            ),
        )

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        # a session manager runs once, so each run (each lifespan) gets a new one
        self.server.streamable_http_app(
            streamable_http_path=MCP_PATH,
            stateless_http=True,
            json_response=True,
            transport_security=self.security,
        )
        # an unexpected server error stays a 500 answer (INTERNAL_ERROR), never an exception
        transport = httpx.ASGITransport(app=self.app, raise_app_exceptions=False)
        async with (
            AsyncMnemoClient("http://mnemo.internal", tenant=None, transport=transport) as client,
            self.server.session_manager.run(),
        ):
            self.upstream.client = client
            try:
                yield
            finally:
                self.upstream.client = None


def mount_mcp(app: Any, host: str = "127.0.0.1", max_body_bytes: int = 1_048_576) -> McpMount:
    """Add the streamable-HTTP MCP endpoint at /mcp to a Starlette/FastAPI app. Stateless
    (every request stands alone, so any gateway replica can answer) and JSON answers; a
    body over `max_body_bytes` is refused (413 PAYLOAD_TOO_LARGE), as the API refuses it."""
    mount = McpMount(app, host, max_body_bytes)
    app.router.routes.append(Route(MCP_PATH, endpoint=_Endpoint(mount)))
    return mount
