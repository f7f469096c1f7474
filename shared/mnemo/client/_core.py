"""What the sync and async clients share: the retry policy, and every API call described
as data (method, path, parameters, body, how to read the answer, whether it may be
repeated). The two clients only differ in how they send a call and how they wait."""

from __future__ import annotations

import random
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Generic, Literal, TypeVar
from urllib.parse import quote, urlsplit, urlunsplit

import httpx
from pydantic import BaseModel, TypeAdapter

from mnemo import __version__
from mnemo.client.errors import MnemoAPIError
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
from mnemo.domain.ids import new_event_id
from mnemo.domain.memory import MemoryDraft, MemoryType, Scope

__all__ = ["Call", "RetryPolicy", "Wait"]

T = TypeVar("T")
Wait = Literal["none", "registered", "indexed"]
Json = Any

# Never sent: the request did not leave this process, so repeating it is always safe.
NOT_SENT = (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout)
# Configuration mistakes that a retry cannot fix.
FATAL = (httpx.UnsupportedProtocol, httpx.LocalProtocolError, httpx.ProxyError)
WAIT_MARGIN = 5.0  # seconds of HTTP timeout beyond a ?wait= timeout


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """When and how long to wait before repeating a call.

    A call is repeated on the statuses in `statuses` (429 and 503 by default), and on a
    transport error: always when the request never left (connect errors), and otherwise
    only for idempotent calls. The wait before retry n (0-based) is drawn uniformly from
    [0, min(max_delay, base_delay * 2**n)] ("full jitter"); a Retry-After header is a floor
    under that wait, capped at max_retry_after.
    """

    attempts: int = 4
    base_delay: float = 0.2
    max_delay: float = 5.0
    max_retry_after: float = 30.0
    statuses: frozenset[int] = frozenset({429, 503})

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be at least 1")

    def delay(self, retry: int, retry_after: float | None, rng: random.Random) -> float:
        backoff = rng.uniform(0.0, min(self.max_delay, self.base_delay * (2**retry)))
        if retry_after is None:
            return backoff
        return min(self.max_retry_after, max(retry_after, backoff))


NO_RETRY = RetryPolicy(attempts=1)


def retry_after_seconds(response: httpx.Response) -> float | None:
    """Retry-After as seconds: a number, or an HTTP date; None when absent or unreadable."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())


@dataclass(frozen=True, slots=True)
class Call(Generic[T]):
    """One API call: what to send, how to read the answer, whether it may be repeated."""

    method: str
    path: str
    parse: Callable[[Json], T]
    params: Mapping[str, Any] | None = None
    body: Json = None
    idempotent: bool = True
    wait_timeout: float | None = None  # a ?wait= that the HTTP timeout must outlast
    content: bytes | None = None  # a raw body (a document) instead of JSON
    content_type: str | None = None


def identity_headers(
    tenant: str | None,
    principal: str | None,
    api_key: str | None,
    extra: Mapping[str, str] | None = None,
) -> httpx.Headers:
    """The headers of every request. Values go out as UTF-8, so a principal such as 张三
    (printable UTF-8, as the API takes it) is sent rather than failing in the encoder. The
    key loses white space around it (a key file with a line end); a key that still holds
    a character no header can carry is refused here, without being shown."""
    headers = {"User-Agent": f"mnemo-client/{__version__}"}
    if tenant is not None:
        headers["X-Mnemo-Tenant"] = tenant
    if principal is not None:
        if not principal.isprintable():
            raise MnemoAPIError(
                0,
                "INVALID_PRINCIPAL",
                "the principal holds a line break or another control character: check "
                "MNEMO_PRINCIPAL (or --principal, or the principal given)",
                "principal",
            )
        headers["X-Mnemo-Principal"] = principal
    if api_key is not None:
        key = api_key.strip()
        if not (key.isascii() and key.isprintable()):
            raise MnemoAPIError(
                0,
                "INVALID_API_KEY",
                "the API key holds characters an HTTP header cannot carry: check "
                "MNEMO_API_KEY (or --api-key, or the api_key given)",
                "api_key",
            )
        headers["Authorization"] = f"Bearer {key}"
    return httpx.Headers({**headers, **(extra or {})}, encoding="utf-8")


def with_content_type(headers: httpx.Headers, content_type: str | None) -> httpx.Headers:
    if content_type is None:
        return headers
    merged = headers.copy()
    merged["Content-Type"] = content_type
    return merged


def decode(response: httpx.Response) -> Json:
    """The JSON body of a successful answer; anything else is not Mnemo speaking."""
    try:
        return response.json()
    except ValueError as exc:
        raise MnemoAPIError(
            response.status_code,
            "INVALID_RESPONSE",
            f"the answer is not JSON: {response.text[:200]!r}",
        ) from exc


def http_timeout(default: float, call: Call[Any]) -> float:
    if call.wait_timeout is None:
        return default
    return max(default, call.wait_timeout + WAIT_MARGIN)


def seg(value: str) -> str:
    """One path segment, escaped. A segment of dots is escaped too: '..' left as it is
    would be folded away by the URL, and name another route (the tenant's whole log)."""
    escaped = quote(value, safe=":@")
    return escaped.replace(".", "%2E") if set(escaped) <= {"."} else escaped


def shown_url(url: str) -> str:
    """The URL as errors show it: without a user and password written into it, nor its
    query or fragment (`?api_key=...`). One that cannot be read as http(s)://host, and
    holds an '@', is not shown at all: what stands before it may be a password."""
    try:
        parts = urlsplit(url)
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        if "@" in url:
            return "the URL given"
        return redact(url.split("?", 1)[0].split("#", 1)[0])
    host = parts.netloc.rsplit("@", 1)[-1]
    return redact(urlunsplit((parts.scheme, host, parts.path, "", "")))


def invalid_url(url: str, why: str = "is not a valid URL") -> MnemoAPIError:
    return MnemoAPIError(
        0,
        "INVALID_URL",
        f"{shown_url(url)} {why}: check MNEMO_URL (or --url, or the url given)",
        "url",
    )


def checked_url(url: str) -> str:
    """Mnemo's base URL, http(s)://host[:port][/path], without a trailing '/'. A user and
    password in it are refused: Mnemo takes the API key, and HTTP clients would send them
    instead of it."""
    base = url.rstrip("/")
    try:
        parts = urlsplit(base)
        port_ok = parts.port is None or parts.port > 0
    except ValueError:
        raise invalid_url(url) from None
    if parts.scheme not in ("http", "https") or not parts.hostname or not port_ok:
        raise invalid_url(url, "is not an http:// or https:// URL of a host")
    if "@" in parts.netloc:
        raise invalid_url(
            url, "holds a user or password, which Mnemo does not take (it takes the API key)"
        )
    return base


def _instant(value: datetime | str) -> str:
    """An instant for the API: a datetime as ISO 8601, or a string as the caller wrote it
    (the server checks it: a time without a UTC offset is refused)."""
    return value.isoformat() if isinstance(value, datetime) else value


def _params(**values: Any) -> dict[str, Any]:
    """Query parameters without the unset ones (None, False, empty)."""
    out: dict[str, Any] = {}
    for k, v in values.items():
        if v is None or v is False or (isinstance(v, list | tuple) and not v):
            continue
        out[k] = [str(x) for x in v] if isinstance(v, list | tuple) else v
    return out


def _model(model: type[BaseModel]) -> Callable[[Json], Any]:
    return model.model_validate


_OUTCOMES = TypeAdapter(list[Outcome])
_TEMPLATES = TypeAdapter(list[TemplateInfo])


def _items(body: Json) -> list[dict[str, Any]]:
    items = body.get("items") if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise ValueError("expected {'items': [...]}")
    return [dict(i) if isinstance(i, dict) else {"value": i} for i in items]


def strs(values: str | Iterable[str] | None) -> list[str]:
    """A list of strings; one string stays one item (never its characters), None is none.
    Anything else (bytes, a number, a list holding one) is a TypeError that says so: it
    was once sent as its characters or its digits and matched nothing, silently."""
    if values is None:
        return []
    if isinstance(values, str):
        return [values]
    if isinstance(values, bytes | bytearray | Mapping) or not isinstance(values, Iterable):
        raise TypeError(f"expected a string or a list of strings, not {type(values).__name__}")
    out = list(values)
    for v in out:
        if not isinstance(v, str):
            raise TypeError(f"expected a list of strings, holding a {type(v).__name__}")
    return out


# ---- events -------------------------------------------------------------------------------


def envelope(
    event_type: str,
    schema_version: int,
    stream: str,
    payload: Mapping[str, Any],
    *,
    event_id: str | None = None,
    correlation_id: str | None = None,
    traceparent: str | None = None,
    expected_seq: int | None = None,
) -> dict[str, Any]:
    """An event to publish; the client adds its event id when it lacks one."""
    event: dict[str, Any] = {
        "type": event_type,
        "schema_version": schema_version,
        "stream": stream,
        "payload": dict(payload),
    }
    if event_id is not None:
        event["event_id"] = event_id
    if correlation_id is not None:
        event["correlation_id"] = correlation_id
    if traceparent is not None:
        event["trace"] = {"traceparent": traceparent}
    if expected_seq is not None:
        event["expected_seq"] = expected_seq
    return event


def with_event_ids(events: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Copies of the events, each with an event id: the idempotency key that makes a
    repeated publish a duplicate rather than a second event."""
    now = datetime.now(UTC)
    out = []
    for event in events:
        copy = dict(event)
        if not copy.get("event_id"):
            copy["event_id"] = new_event_id(now)
        out.append(copy)
    return out


def draft(
    memory: MemoryDraft | Mapping[str, Any] | None = None,
    *,
    type: MemoryType | str | None = None,
    content: str | None = None,
    key: str | None = None,
    value: str | None = None,
    scope: Scope | str | None = None,
    tags: Iterable[str] = (),
    ttl_seconds: int | None = None,
    semantic_weight: float | None = None,
    timezone: str | None = None,
) -> dict[str, Any]:
    """A memory draft as JSON: `memory` as given, overlaid with the keyword fields set."""
    if isinstance(memory, MemoryDraft):
        out: dict[str, Any] = memory.model_dump(mode="json", exclude_unset=True)
    else:
        out = dict(memory or {})
    optional: dict[str, Any] = {
        "type": None if type is None else str(type),
        "content": content,
        "key": key,
        "value": value,
        "scope": None if scope is None else str(scope),
        "ttl_seconds": ttl_seconds,
        "semantic_weight": semantic_weight,
        "timezone": timezone,
    }
    out.update({k: v for k, v in optional.items() if v is not None})
    tag_list = strs(tags)
    if tag_list:
        out["tags"] = tag_list
    return out


# ---- calls --------------------------------------------------------------------------------


def publish(
    events: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    wait: Wait = "none",
    timeout: float | None = None,
) -> Call[PublishResult]:
    batch = [events] if isinstance(events, Mapping) else list(events)
    ready = with_event_ids(batch)
    body: Json = ready[0] if len(ready) == 1 else {"events": ready}
    params = _params(wait=wait if wait != "none" else None, timeout=timeout)
    # without a timeout the gateway waits up to its own cap (at most 120 s)
    wait_timeout = None if wait == "none" else (timeout or 120.0)
    return Call(
        "POST",
        "/v1/events",
        _model(PublishResult),
        params=params,
        body=body,
        idempotent=True,  # every event carries its id: a repeat is a duplicate
        wait_timeout=wait_timeout,
    )


def get(memory_id: str) -> Call[Memory]:
    return Call("GET", f"/v1/memories/{seg(memory_id)}", _model(Memory))


def list_memories(
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
) -> Call[MemoryPage]:
    params = _params(
        type=strs(types),
        scope=strs(scopes),
        tag=strs(tags),
        key=key,
        include_expired=include_expired,
        include_superseded=include_superseded,
        include_archived=include_archived,
        limit=limit,
        after=after,
    )
    return Call("GET", f"/v1/subjects/{seg(stream)}/memories", _model(MemoryPage), params=params)


def history(stream: str, key: str) -> Call[MemoryPage]:
    return Call("GET", f"/v1/subjects/{seg(stream)}/history/{seg(key)}", _model(MemoryPage))


def search(
    query: str,
    *,
    subjects: str | Iterable[str] = (),
    types: Iterable[MemoryType | str] = (),
    scopes: Iterable[Scope | str] = (),
    tags: Iterable[str] = (),
    limit: int = 10,
    timezone: str | None = None,
    include_archived: bool = False,
) -> Call[SearchResult]:
    body: dict[str, Any] = {
        "query": query,
        "subjects": strs(subjects),
        "types": strs(types),
        "scopes": strs(scopes),
        "tags": strs(tags),
        "limit": limit,
    }
    if timezone is not None:
        body["timezone"] = timezone
    if include_archived:
        body["include_archived"] = True
    return Call("POST", "/v1/search", _model(SearchResult), body=body)


def context(
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
) -> Call[ContextResponse]:
    body: dict[str, Any] = {
        "subjects": strs(subjects),
        "query": query,
        "budget": budget,
        "template": template,
        "include_history": include_history,
        "allow_constraint_drop": allow_constraint_drop,
    }
    if history != "facts":
        body["history"] = history
    if template_version is not None:
        body["template_version"] = template_version
    if tokenizer is not None:
        body["tokenizer"] = tokenizer
    if as_of is not None:
        body["as_of"] = _instant(as_of)
    if timezone is not None:
        body["timezone"] = timezone
    if where is not None:
        body["where"] = {name: [dict(c) for c in conds] for name, conds in where.items()}
    # each assembly is recorded in the log, so a blind repeat would record two
    return Call("POST", "/v1/context", _model(ContextResponse), body=body, idempotent=False)


def report(
    request_id: str,
    response: str,
    *,
    correction: str | None = None,
    corrected_memory_ids: Iterable[str] = (),
) -> Call[Feedback]:
    body: dict[str, Any] = {"response": response}
    if correction is not None:
        body["correction"] = correction
    corrected = strs(corrected_memory_ids)
    if corrected:
        body["corrected_memory_ids"] = corrected
    # citations move weights: a repeated report would move them twice
    return Call(
        "POST",
        f"/v1/context/{seg(request_id)}/response",
        _model(Feedback),
        body=body,
        idempotent=False,
    )


def outcome(event_id: str) -> Call[list[Outcome]]:
    return Call("GET", f"/v1/events/{seg(event_id)}/outcome", _OUTCOMES.validate_python)


def replay(stream: str, from_seq: int = 1, limit: int = 1_000) -> Call[EventPage]:
    params = {"from_seq": from_seq, "limit": limit}
    return Call("GET", f"/v1/subjects/{seg(stream)}/events", _model(EventPage), params=params)


def tail(after_offset: int = 0, limit: int = 100) -> Call[EventPage]:
    params = {"after_offset": after_offset, "limit": limit}
    return Call("GET", "/v1/events", _model(EventPage), params=params)


def templates() -> Call[list[TemplateInfo]]:
    return Call("GET", "/v1/templates", _TEMPLATES.validate_python)


def template(name: str, version: int | None = None) -> Call[TemplateInfo]:
    params = _params(version=version)
    return Call("GET", f"/v1/templates/{seg(name)}", _model(TemplateInfo), params=params)


def register_template(body: Mapping[str, Any]) -> Call[RegisteredTemplate]:
    # a version is immutable: registering the same content again answers created=false
    return Call("POST", "/v1/templates", _model(RegisteredTemplate), body=dict(body))


def due_verifications(subject: str) -> Call[list[dict[str, Any]]]:
    return Call("GET", f"/v1/subjects/{seg(subject)}/due-verifications", _items)


# ---- tool results and suggested tool calls ---------------------------------------------------


def record_tool_result(
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
) -> Call[ToolResultRecorded]:
    body: dict[str, Any] = {
        "stream": stream,
        "tool": tool,
        "arguments": dict(arguments or {}),
        "result": result,
        "source": source,
        "fresh_for_seconds": fresh_for_seconds,
        # the idempotency key, made once: a repeat after a lost answer is a duplicate
        "event_id": new_event_id(datetime.now(UTC)),
    }
    if fetched_at is not None:
        body["fetched_at"] = _instant(fetched_at)
    if key is not None:
        body["key"] = key
    if trust is not None:
        body["trust"] = trust
    if trigger is not None:
        body["trigger"] = dict(trigger)
    params = _params(wait=wait if wait != "none" else None, timeout=timeout)
    return Call(
        "POST",
        "/v1/tool-results",
        _model(ToolResultRecorded),
        params=params,
        body=body,
        idempotent=True,
        wait_timeout=None if wait == "none" else (timeout or 120.0),
    )


def suggestions(subject: str, as_of: datetime | str | None = None) -> Call[Suggestions]:
    params = _params(as_of=_instant(as_of) if as_of is not None else None)
    return Call(
        "GET", f"/v1/subjects/{seg(subject)}/suggestions", _model(Suggestions), params=params
    )


# ---- feedback events ------------------------------------------------------------------------


def cited(memory_id: str, stream: str, request_id: str, position: str | None) -> dict[str, Any]:
    payload: dict[str, Any] = {"memory_id": memory_id, "request_id": request_id}
    if position is not None:
        payload["position"] = position
    return envelope("MemoryCited", 1, stream, payload)


def corrected(
    memory_ids: str | Sequence[str], stream: str, reason: str, request_id: str | None
) -> dict[str, Any]:
    payload: dict[str, Any] = {"memory_ids": strs(memory_ids), "reason": reason}
    if request_id is not None:
        payload["request_id"] = request_id
    return envelope("MemoryCorrected", 1, stream, payload)


def verified(memory_id: str, stream: str) -> dict[str, Any]:
    return envelope("MemoryVerified", 1, stream, {"memory_id": memory_id})


def forgotten(stream: str, memory_id: str | None, reason: str | None) -> dict[str, Any]:
    payload: dict[str, Any] = {}
    if memory_id is not None:
        payload["memory_id"] = memory_id
    if reason is not None:
        payload["reason"] = reason
    return envelope("ForgetRequested", 1, stream, payload)


def observation(
    stream: str,
    text: str,
    *,
    kind: str = "utterance",
    timezone: str | None = None,
    language: str | None = None,
) -> dict[str, Any]:
    payload: dict[str, Any] = {"text": text}
    if kind != "utterance":
        payload["kind"] = kind
    if timezone is not None:
        payload["timezone"] = timezone
    if language is not None:
        payload["language"] = language
    return envelope("ObservationRecorded", 2, stream, payload)


def turn(
    stream: str,
    text: str,
    *,
    speaker: str | None = None,
    occurred_at: datetime | str | None = None,
    timezone: str | None = None,
    language: str | None = None,
) -> dict[str, Any]:
    """One turn of a conversation: kept as a history memory, and read by the rules."""
    payload: dict[str, Any] = {"text": text, "kind": "turn"}
    if speaker is not None:
        payload["speaker"] = speaker
    if timezone is not None:
        payload["timezone"] = timezone
    if language is not None:
        payload["language"] = language
    event = envelope("ObservationRecorded", 2, stream, payload)
    if occurred_at is not None:
        event["occurred_at"] = (
            occurred_at.isoformat() if isinstance(occurred_at, datetime) else occurred_at
        )
    return event


def declared(stream: str, memory: Mapping[str, Any]) -> dict[str, Any]:
    return envelope("MemoryDeclared", 1, stream, {"memory": dict(memory)})


@dataclass
class Grouped:
    """Memory ids grouped by the stream they live in, in first-seen order."""

    by_stream: dict[str, list[str]] = field(default_factory=dict)

    def add(self, stream: str, memory_id: str) -> None:
        ids = self.by_stream.setdefault(stream, [])
        if memory_id not in ids:
            ids.append(memory_id)


# ---- documents ------------------------------------------------------------------------------


def ingest_document(
    data: bytes,
    filename: str,
    *,
    subject: str = "tenant",
    content_type: str | None = None,
    wait: Wait = "none",
    timeout: float | None = None,
) -> Call[IngestedDocument]:
    params = _params(
        subject=subject,
        filename=filename,
        wait=wait if wait != "none" else None,
        timeout=timeout,
    )
    return Call(
        "POST",
        "/v1/documents",
        _model(IngestedDocument),
        params=params,
        idempotent=True,  # the same bytes in the same subject are the same document
        wait_timeout=None if wait == "none" else (timeout or 120.0),
        content=data,
        content_type=content_type or "application/octet-stream",
    )


def conditions(where: Mapping[str, Any] | Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """A query's conditions; one condition (a mapping) stays one condition. Anything else
    is a TypeError that says what is expected."""
    items = [where] if isinstance(where, Mapping) else where
    if isinstance(items, str | bytes) or not isinstance(items, Iterable):
        raise TypeError("where is a condition (a dict) or a list of them")
    out = []
    for item in items:
        if not isinstance(item, Mapping):
            raise TypeError(
                f"each condition of where is a dict such as {{'field': ..., 'op': ..., "
                f"'value': ...}}, not {type(item).__name__}"
            )
        out.append(dict(item))
    return out


def query(
    where: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    *,
    text: str | None = None,
    subjects: str | Sequence[str] = (),
    limit: int = 100,
    hits_limit: int = 100,
) -> Call[QueryResult]:
    body: dict[str, Any] = {
        "where": conditions(where),
        "limit": limit,
        "hits_limit": hits_limit,
    }
    if text is not None:
        body["query"] = text
    names = strs(subjects)
    if names:  # "" is sent as it is, and refused: it is no subject
        body["subjects"] = names
    return Call("POST", "/v1/query", _model(QueryResult), body=body, idempotent=True)
