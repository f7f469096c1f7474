"""The asyncio client, on httpx.AsyncClient. Kept in step with the blocking one."""

from __future__ import annotations

import asyncio
import builtins
import random
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Mapping, Sequence
from datetime import datetime
from types import TracebackType
from typing import Any, TypeVar

import httpx

from mnemo.client import _core, _toolchain
from mnemo.client._core import Call, RetryPolicy, Wait
from mnemo.client._toolchain import Toolchain
from mnemo.client.errors import MnemoConnectionError, api_error
from mnemo.client.models import (
    ContextResponse,
    EventPage,
    Feedback,
    IngestedDocument,
    Memory,
    MemoryPage,
    Outcome,
    PublishResult,
    QueryResult,
    RegisteredTemplate,
    SearchResult,
    Suggestions,
    TemplateInfo,
    ToolResultRecorded,
)
from mnemo.domain.access import redact
from mnemo.domain.memory import MemoryDraft, MemoryType, Scope

__all__ = ["AsyncMnemoClient"]

T = TypeVar("T")


class AsyncMnemoClient:
    """Mnemo's HTTP API for one tenant and principal, for asyncio.

    Every published event gets a client-made UUIDv7 `event_id` before it is first sent,
    so a publish repeated after a lost answer is recognised by the log as a duplicate.
    Calls are repeated on 429 and 503 (after Retry-After at least) and on connection
    errors, as `retry` says; errors raise `MnemoAPIError`.

        async with AsyncMnemoClient("http://127.0.0.1:8080", tenant="acme") as m:
            await m.remember("user:U7892", "记住我的尺码是L")
            hits = (await m.search("尺码", subjects=["user:U7892"])).hits
    """

    def __init__(
        self,
        url: str = "http://127.0.0.1:8080",
        *,
        tenant: str | None = None,
        principal: str | None = None,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 30.0,
        retry: RetryPolicy | None = None,
        http_client: httpx.AsyncClient | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        rng: random.Random | None = None,
    ) -> None:
        """`api_key` is sent as `Authorization: Bearer <key>`; `headers` are sent with every
        request too. `http_client` shares a connection pool (this client then does not
        close it); `transport` replaces the network (tests); `sleep` is how retries wait."""
        self.url = _core.checked_url(url)
        self.tenant = tenant
        self.principal = principal
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.headers = _core.identity_headers(tenant, principal, api_key, headers)
        self._owns_http = http_client is None
        try:
            self._http = http_client or httpx.AsyncClient(
                base_url=self.url, timeout=timeout, transport=transport
            )
        except httpx.InvalidURL:
            raise _core.invalid_url(self.url) from None
        self._sleep = sleep
        self._rng = rng or random.Random()  # noqa: S311 - jitter, not secrecy

    # ---- plumbing -----------------------------------------------------------------------

    async def aclose(self) -> None:
        if self._owns_http:
            await self._http.aclose()

    async def __aenter__(self) -> AsyncMnemoClient:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    def with_identity(
        self,
        *,
        tenant: str | None,
        principal: str | None = None,
        api_key: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> AsyncMnemoClient:
        """A client for another tenant and principal over this one's connections and
        settings. Closing it leaves the connections open; close this one when done."""
        return AsyncMnemoClient(
            self.url,
            tenant=tenant,
            principal=principal,
            api_key=api_key,
            headers=headers,
            timeout=self.timeout,
            retry=self.retry,
            http_client=self._http,
            sleep=self._sleep,
            rng=self._rng,
        )

    async def call(self, call: Call[T]) -> T:
        """Send one call, repeating it as the retry policy allows; the parsed answer."""
        retry = 0
        while True:
            last = retry + 1 >= self.retry.attempts
            try:
                response = await self._http.request(
                    call.method,
                    self.url + call.path,
                    params=call.params,
                    json=call.body if call.content is None else None,
                    content=call.content,
                    headers=_core.with_content_type(self.headers, call.content_type),
                    timeout=_core.http_timeout(self.timeout, call),
                )
            except _core.FATAL as exc:
                shown = _core.shown_url(self.url)
                raise MnemoConnectionError(
                    f"cannot talk to Mnemo at {shown}: {redact(str(exc))}"
                ) from exc
            except httpx.TransportError as exc:
                if last or not (call.idempotent or isinstance(exc, _core.NOT_SENT)):
                    shown = _core.shown_url(self.url)
                    raise MnemoConnectionError(
                        f"Mnemo at {shown} did not answer: {type(exc).__name__} {exc}"
                    ) from exc
                await self._sleep(self.retry.delay(retry, None, self._rng))
                retry += 1
                continue
            if response.status_code in self.retry.statuses and not last:
                wait = _core.retry_after_seconds(response)
                await self._sleep(self.retry.delay(retry, wait, self._rng))
                retry += 1
                continue
            if response.is_error:
                raise api_error(response, _core.retry_after_seconds(response))
            return call.parse(_core.decode(response))

    # ---- publishing ----------------------------------------------------------------------

    async def publish(
        self,
        events: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        wait: Wait = "none",
        timeout: float | None = None,
    ) -> PublishResult:
        """Publish one event or a batch (all or none). Events without an `event_id` get one
        here. `wait="registered"` (or "indexed") returns once the consumers have handled
        them, with their outcomes: read-your-writes."""
        return await self.call(_core.publish(events, wait, timeout))

    async def observe(
        self,
        stream: str,
        text: str,
        *,
        kind: str = "utterance",
        timezone: str | None = None,
        language: str | None = None,
        wait: Wait = "registered",
    ) -> PublishResult:
        """Record an observation; the registration rules decide what to remember."""
        event = _core.observation(stream, text, kind=kind, timezone=timezone, language=language)
        return await self.publish(event, wait=wait)

    async def record_turn(
        self,
        stream: str,
        text: str,
        *,
        speaker: str | None = None,
        occurred_at: datetime | str | None = None,
        timezone: str | None = None,
        language: str | None = None,
        wait: Wait = "registered",
    ) -> PublishResult:
        """Record one turn of a conversation. It is kept as a history memory (outcome 0)
        whatever the rules make of it; what they extract follows (outcomes 1 on).
        `occurred_at`: when it was said (an imported conversation keeps its real dates)."""
        event = _core.turn(
            stream,
            text,
            speaker=speaker,
            occurred_at=occurred_at,
            timezone=timezone,
            language=language,
        )
        return await self.publish(event, wait=wait)

    async def declare(
        self,
        stream: str,
        memory: MemoryDraft | Mapping[str, Any],
        *,
        wait: Wait = "registered",
        event_id: str | None = None,
        correlation_id: str | None = None,
        traceparent: str | None = None,
    ) -> PublishResult:
        """Declare a memory explicitly (a MemoryDeclared event)."""
        event = _core.declared(stream, _core.draft(memory))
        extra = {"event_id": event_id, "correlation_id": correlation_id}
        event.update({k: v for k, v in extra.items() if v is not None})
        if traceparent is not None:
            event["trace"] = {"traceparent": traceparent}
        return await self.publish(event, wait=wait)

    async def remember(
        self,
        stream: str,
        text: str | None = None,
        *,
        type: MemoryType | str | None = None,
        key: str | None = None,
        value: str | None = None,
        scope: Scope | str | None = None,
        tags: Iterable[str] = (),
        ttl_seconds: int | None = None,
        semantic_weight: float | None = None,
        wait: Wait = "registered",
    ) -> PublishResult:
        """Remember something. With only `text`, it is an observation for the rules to read
        (like `mnemo remember`); with a `type`, a declared memory of that type."""
        if type is None:
            if text is None or key is not None:
                raise ValueError("remember needs text, or a type for a declared memory")
            return await self.observe(stream, text, wait=wait)
        memory = _core.draft(
            type=type,
            content=text,
            key=key,
            value=value,
            scope=scope,
            tags=tags,
            ttl_seconds=ttl_seconds,
            semantic_weight=semantic_weight,
        )
        return await self.declare(stream, memory, wait=wait)

    async def forget(
        self,
        stream: str,
        memory_id: str | None = None,
        *,
        reason: str | None = None,
        wait: Wait = "registered",
    ) -> PublishResult:
        """Forget one memory of `stream`, or all of them (`memory_id` None)."""
        return await self.publish(_core.forgotten(stream, memory_id, reason), wait=wait)

    async def cite(
        self,
        memory_id: str,
        *,
        request_id: str,
        stream: str | None = None,
        position: str | None = None,
        wait: Wait = "none",
    ) -> PublishResult:
        """Say a memory was used in the answer to the context `request_id` (its weight and
        trust rise). The context must have included the memory (else
        CITATION_NOT_IN_CONTEXT); Mnemo files the citation on the context's stream, once
        per context and memory. `stream` defaults to the memory's own, looked up first."""
        stream = stream or (await self.get(memory_id)).stream
        return await self.publish(_core.cited(memory_id, stream, request_id, position), wait=wait)

    async def correct(
        self,
        memory_ids: str | Iterable[str],
        reason: str,
        *,
        stream: str | None = None,
        request_id: str | None = None,
        wait: Wait = "none",
    ) -> PublishResult:
        """Say memories were wrong (their weight and trust fall): one event per stream."""
        grouped = _core.Grouped()
        for memory_id in _core.strs(memory_ids):
            grouped.add(stream or (await self.get(memory_id)).stream, memory_id)
        events = [
            _core.corrected(ids, s, reason, request_id) for s, ids in grouped.by_stream.items()
        ]
        return await self.publish(events, wait=wait)

    async def verify(
        self, memory_id: str, *, stream: str | None = None, wait: Wait = "none"
    ) -> PublishResult:
        """Confirm a memory is still true (a MemoryVerified event)."""
        stream = stream or (await self.get(memory_id)).stream
        return await self.publish(_core.verified(memory_id, stream), wait=wait)

    # ---- reading -----------------------------------------------------------------------

    async def get(self, memory_id: str) -> Memory:
        return await self.call(_core.get(memory_id))

    async def list(
        self,
        stream: str,
        *,
        types: Iterable[MemoryType | str] = (),
        scopes: Iterable[Scope | str] = (),
        tags: Iterable[str] = (),
        key: str | None = None,
        include_expired: bool = False,
        include_superseded: bool = False,
        include_archived: bool = False,
        limit: int = 100,
        after: str | None = None,
    ) -> MemoryPage:
        """One page of a subject's memories; `next_after` is the cursor of the next."""
        return await self.call(
            _core.list_memories(
                stream,
                types=types,
                scopes=scopes,
                tags=tags,
                key=key,
                include_expired=include_expired,
                include_superseded=include_superseded,
                include_archived=include_archived,
                limit=limit,
                after=after,
            )
        )

    async def iter_memories(
        self, stream: str, *, page_size: int = 100, include_archived: bool = False
    ) -> AsyncIterator[Memory]:
        """Every live memory of a subject, page by page."""
        after: str | None = None
        while True:
            page = await self.list(
                stream, limit=page_size, after=after, include_archived=include_archived
            )
            for memory in page.memories:
                yield memory
            if page.next_after is None:
                return
            after = page.next_after

    async def history(self, stream: str, key: str) -> builtins.list[Memory]:
        """Every version of a key, oldest first."""
        return (await self.call(_core.history(stream, key))).memories

    async def search(
        self,
        query: str,
        *,
        subjects: str | Iterable[str] = (),
        types: Iterable[MemoryType | str] = (),
        scopes: Iterable[Scope | str] = (),
        tags: Iterable[str] = (),
        limit: int = 10,
        timezone: str | None = None,
        include_archived: bool = False,
    ) -> SearchResult:
        """Hybrid search (vector + keyword), best first. The query's time expressions
        ("yesterday") are read in `timezone` (an IANA name; UTC when none)."""
        return await self.call(
            _core.search(
                query,
                subjects=subjects,
                types=types,
                scopes=scopes,
                tags=tags,
                limit=limit,
                timezone=timezone,
                include_archived=include_archived,
            )
        )

    async def context(
        self,
        subjects: str | Iterable[str],
        query: str = "",
        *,
        budget: int = 1_000,
        template: str = "default",
        template_version: int | None = None,
        tokenizer: str | None = None,
        include_history: bool = False,
        allow_constraint_drop: bool = False,
        as_of: datetime | str | None = None,
        history: str = "facts",
        timezone: str | None = None,
        where: Mapping[str, Sequence[Mapping[str, Any]]] | None = None,
    ) -> ContextResponse:
        """The context for an LLM call within `budget` tokens. The query's time
        expressions are read in `timezone` (an IANA name), else in as_of's UTC offset,
        else in UTC."""
        return await self.call(
            _core.context(
                subjects,
                query,
                budget=budget,
                template=template,
                template_version=template_version,
                tokenizer=tokenizer,
                include_history=include_history,
                allow_constraint_drop=allow_constraint_drop,
                as_of=as_of,
                history=history,
                timezone=timezone,
                where=where,
            )
        )

    async def report(
        self,
        request_id: str,
        response: str,
        *,
        correction: str | None = None,
        corrected_memory_ids: Iterable[str] = (),
    ) -> Feedback:
        """Report the model's answer to a context: `<memory_ref id="..."/>` tags in it are
        citations; a correction lowers the weight of the memories used (or those named)."""
        return await self.call(
            _core.report(
                request_id,
                response,
                correction=correction,
                corrected_memory_ids=corrected_memory_ids,
            )
        )

    async def outcome(self, event_id: str) -> builtins.list[Outcome]:
        return await self.call(_core.outcome(event_id))

    async def replay(self, stream: str, *, from_seq: int = 1, limit: int = 1_000) -> EventPage:
        """A stream's events from a sequence number; `next` is where the next page starts."""
        return await self.call(_core.replay(stream, from_seq, limit))

    async def tail(self, *, after_offset: int = 0, limit: int = 100) -> EventPage:
        """The tenant's events after a log offset; `next` is the offset to continue from."""
        return await self.call(_core.tail(after_offset, limit))

    async def templates(self) -> builtins.list[TemplateInfo]:
        return await self.call(_core.templates())

    async def template(self, name: str, version: int | None = None) -> TemplateInfo:
        return await self.call(_core.template(name, version))

    async def register_template(self, template: Mapping[str, Any]) -> RegisteredTemplate:
        return await self.call(_core.register_template(template))

    async def due_verifications(self, subject: str) -> builtins.list[dict[str, Any]]:
        """Memories of a subject that are due to be verified again."""
        return await self.call(_core.due_verifications(subject))

    # ---- toolchains (docs/toolchains.md) ---------------------------------------------------

    async def start_toolchain(
        self,
        toolchain_id: str,
        subject: str,
        steps: Sequence[str],
        *,
        ttl_seconds: int | None = None,
    ) -> Toolchain:
        """Start a toolchain of planned steps for a subject (it expires after `ttl_seconds`,
        a day by default). Starting it again with the same plan returns its state."""
        return await self.call(_toolchain.start(toolchain_id, subject, list(steps), ttl_seconds))

    async def complete_step(self, toolchain_id: str, step_id: str, output: Any) -> Toolchain:
        """Record that a step succeeded with `output` (any JSON value). Recording it again
        with the same output changes nothing; other output is STEP_CONFLICT."""
        return await self.call(_toolchain.complete_step(toolchain_id, step_id, output))

    async def fail_step(
        self,
        toolchain_id: str,
        step_id: str,
        *,
        type: str,
        reason: str,
        retryable: bool,
        field: str | None = None,
    ) -> Toolchain:
        """Record that a step failed, and why."""
        return await self.call(
            _toolchain.fail_step(
                toolchain_id, step_id, type=type, reason=reason, retryable=retryable, field=field
            )
        )

    async def toolchain(
        self, toolchain_id: str, *, as_of: datetime | str | None = None
    ) -> Toolchain:
        """A toolchain's state: steps done with their outputs, the failed step, and
        `next_step`, the one to run (expiry judged at `as_of`, default now)."""
        return await self.call(_toolchain.get(toolchain_id, as_of))

    # ---- tool results and suggested tool calls -----------------------------------------

    async def ingest_document(
        self,
        data: bytes,
        filename: str,
        *,
        subject: str = "tenant",
        content_type: str | None = None,
        wait: Wait = "none",
        timeout: float | None = None,
    ) -> IngestedDocument:
        """Ingest a document (its raw bytes) for `subject` (a stream, or "tenant"): its
        sections become long_term memories and its entities answer `query`. A document
        Mnemo refuses raises MnemoAPIError with its code (DOCUMENT_TOO_LARGE, ...)."""
        return await self.call(
            _core.ingest_document(
                data,
                filename,
                subject=subject,
                content_type=content_type,
                wait=wait,
                timeout=timeout,
            )
        )

    async def query(
        self,
        where: Mapping[str, Any] | Sequence[Mapping[str, Any]],
        *,
        text: str | None = None,
        subjects: str | Sequence[str] = (),
        limit: int = 100,
        hits_limit: int = 100,
    ) -> QueryResult:
        """An exact structured query over the tenant's documents (docs/documents.md):
        `where` conditions (one dict, or a list of them) ANDed per document; `text` ranks
        the result, never widens it. Each document carries at most `hits_limit` sections,
        and `hits_total`."""
        return await self.call(
            _core.query(where, text=text, subjects=subjects, limit=limit, hits_limit=hits_limit)
        )

    async def record_tool_result(
        self,
        stream: str,
        tool: str,
        result: Any,
        *,
        source: str,
        fresh_for_seconds: int,
        arguments: Mapping[str, Any] | None = None,
        fetched_at: datetime | str | None = None,
        key: str | None = None,
        trust: float | None = None,
        trigger: Mapping[str, str] | None = None,
        wait: Wait = "none",
        timeout: float | None = None,
    ) -> ToolResultRecorded:
        """Record a tool call's structured result as a memory of `stream`, fresh for
        `fresh_for_seconds` from `fetched_at` (now when absent). Pass a suggestion's
        `trigger` to close its loop: that trigger stops firing for that memory version."""
        return await self.call(
            _core.record_tool_result(
                stream,
                tool,
                result,
                source=source,
                fresh_for_seconds=fresh_for_seconds,
                arguments=arguments,
                fetched_at=fetched_at,
                key=key,
                trust=trust,
                trigger=trigger,
                wait=wait,
                timeout=timeout,
            )
        )

    async def suggestions(
        self, subject: str, *, as_of: datetime | str | None = None
    ) -> Suggestions:
        """The tool calls the operators' triggers suggest for a subject's memories."""
        return await self.call(_core.suggestions(subject, as_of))
