"""Reading an HTTP request's body within a size limit, for the routes that read it raw."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

__all__ = ["body_within", "names_a_member_twice", "read_json"]


async def body_within(request: Request, limit: int) -> bytes | None:
    """The request's body, or None as soon as it is over `limit` bytes: declared so in
    Content-Length, or sent so (a chunked body is counted as it arrives)."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        return None
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


def read_json(body: bytes) -> tuple[Any, bool] | None:
    """The body as JSON, and whether one of its objects names a member twice ({"a": 1,
    "a": 2}: a proxy that read the first would see another request than the one handled);
    None when it is not JSON. One pass for both."""
    twice = False

    def pairs(found: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal twice
        built = dict(found)
        twice = twice or len(built) != len(found)
        return built

    try:
        value = json.loads(body, object_pairs_hook=pairs)
    except ValueError:
        return None
    return value, twice


def names_a_member_twice(body: bytes) -> bool:
    """Whether an object of the JSON body names one member twice. A body that is not JSON
    is not this check's to refuse."""
    if b'"' not in body:
        return False
    read = read_json(body)
    return read is not None and read[1]
