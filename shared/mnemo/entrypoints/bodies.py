"""Reading an HTTP request's body within a size limit, for the routes that read it raw."""

from __future__ import annotations

import json
from typing import Any

from starlette.requests import Request

__all__ = ["body_within", "names_a_member_twice"]


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


class _TwiceNamed(Exception):
    pass


def _refuse_twice_named(pairs: list[tuple[str, Any]]) -> None:
    if len({name for name, _ in pairs}) != len(pairs):
        raise _TwiceNamed
    return None  # the values are not kept; this pass only looks at the names


def names_a_member_twice(body: bytes) -> bool:
    """Whether an object of the JSON body names one member twice ({"a": 1, "a": 2}: a
    proxy that reads the first would see another request than the one handled). A body
    that is not JSON is not this check's to refuse."""
    if b'"' not in body:
        return False
    try:
        json.loads(body, object_pairs_hook=_refuse_twice_named)
    except _TwiceNamed:
        return True
    except ValueError:
        return False
    return False
