"""Reading an HTTP request's body within a size limit, for the routes that read it raw."""

from __future__ import annotations

from starlette.requests import Request

__all__ = ["body_within"]


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
