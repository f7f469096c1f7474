"""Documents: ingest one (its raw bytes as the body) and ask exact structured questions of
their entities (docs/documents.md)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request, Response
from starlette.concurrency import run_in_threadpool

from mnemo.domain.documents import DocumentRejected
from mnemo.domain.errors import Unavailable
from mnemo.entrypoints.bodies import body_within
from mnemo.service.app import Mnemo, Wait
from mnemo.service.documents import Documents, checked_names
from mnemo_gateway.deps import App, Body, ReadCtx, WriteCtx, settings_of

router = APIRouter(tags=["documents"])


def _documents(mnemo: Mnemo) -> Documents:
    if mnemo.documents is None:
        raise Unavailable("documents are not set up in this process", code="NO_DOCUMENTS")
    return mnemo.documents


async def _raw_body(request: Request, limit: int) -> bytes:
    """The body, refused (413 DOCUMENT_TOO_LARGE) as soon as it passes `limit`."""
    body = await body_within(request, limit)
    if body is None:
        raise DocumentRejected("DOCUMENT_TOO_LARGE", f"the document is over {limit} bytes")
    return body


@router.post(
    "/v1/documents",
    summary="Ingest a document (PDF, DOCX, XLSX, Markdown or text; the raw bytes as the body)",
    description="Parses the document, stores its bytes sealed in the blob store and appends a "
    "DocumentIngested event; each section becomes a long_term memory and its entities go to "
    "the entity read model. A document that cannot be read is refused (413 "
    "DOCUMENT_TOO_LARGE, 415 UNSUPPORTED_DOCUMENT_TYPE, 400 DOCUMENT_MALFORMED, "
    "DOCUMENT_ENCRYPTED, DOCUMENT_BOMB, DOCUMENT_EMPTY) and nothing is stored. 202, or 200 "
    "with wait=registered once the sections are memories.",
    status_code=202,
    openapi_extra={
        "requestBody": {
            "required": True,
            "content": {"application/octet-stream": {"schema": {"type": "string"}}},
        }
    },
)
async def ingest_document(
    ctx: WriteCtx,
    mnemo: App,
    request: Request,
    response: Response,
    # checked by checked_names: 400 INVALID_STREAM / INVALID_FILENAME, as documented
    subject: Annotated[str, Query(description="stream or 'tenant'")],
    filename: Annotated[str, Query(description="1 to 256 characters, no control characters")],
    wait: Wait = Wait.NONE,
    timeout: Annotated[float | None, Query(gt=0, le=120)] = None,
) -> dict[str, Any]:
    documents = _documents(mnemo)
    checked_names(subject, filename)  # before the body is read
    data = await _raw_body(request, documents.source.limits.max_bytes)
    declared = request.headers.get("content-type")
    media_type = None
    if declared and declared.split(";")[0].strip() not in (
        "application/octet-stream",
        "application/x-www-form-urlencoded",
    ):
        media_type = declared.split(";")[0].strip()[:128]
    limit = settings_of(request).wait_timeout

    def run() -> Any:
        return documents.ingest(
            ctx,
            subject,
            filename,
            data,
            media_type,
            wait,
            min(timeout or limit, limit),
        )

    ingested = await run_in_threadpool(run)
    if wait is not Wait.NONE:
        response.status_code = 200
    return dict(ingested.as_dict())


@router.post(
    "/v1/query",
    summary="Exact structured query over the entities of the tenant's documents",
    description="Conditions on entity fields (party_a eq, penalty_rate gt, signed_at within, "
    "amount gte, ...), ANDed per document; an optional text ranks the exact result and never "
    "widens it. 400 QUERY_INVALID names the bad path (where[1].value).",
)
async def structured_query(ctx: ReadCtx, mnemo: App, body: Body) -> dict[str, Any]:
    documents = _documents(mnemo)
    return await run_in_threadpool(documents.query, ctx, body)
