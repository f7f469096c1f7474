"""Mnemo's Python SDK: `MnemoClient` (blocking) and `AsyncMnemoClient` (asyncio) over the
HTTP API, with typed answers, retries and idempotent publishing. docs/sdk.md has the guide;
`mnemo.client.kafka` publishes the same envelopes straight to a Kafka topic."""

from mnemo.client._async import AsyncMnemoClient
from mnemo.client._core import RetryPolicy, Wait
from mnemo.client._sync import MnemoClient
from mnemo.client._toolchain import Toolchain
from mnemo.client.errors import MnemoAPIError, MnemoConnectionError
from mnemo.client.models import (
    Accepted,
    Citation,
    ContextResponse,
    Event,
    EventPage,
    Feedback,
    IncludedMemory,
    IngestedDocument,
    LeftOut,
    Memory,
    MemoryPage,
    Outcome,
    PublishResult,
    QueryResult,
    RegisteredTemplate,
    SearchHit,
    SearchResult,
    Suggestion,
    Suggestions,
    TemplateInfo,
    ToolResultRecorded,
)

__all__ = [
    "Accepted",
    "AsyncMnemoClient",
    "Citation",
    "ContextResponse",
    "Event",
    "EventPage",
    "Feedback",
    "IncludedMemory",
    "IngestedDocument",
    "LeftOut",
    "Memory",
    "MemoryPage",
    "MnemoAPIError",
    "MnemoClient",
    "MnemoConnectionError",
    "Outcome",
    "PublishResult",
    "QueryResult",
    "RegisteredTemplate",
    "RetryPolicy",
    "SearchHit",
    "SearchResult",
    "Suggestion",
    "Suggestions",
    "TemplateInfo",
    "ToolResultRecorded",
    "Toolchain",
    "Wait",
]
