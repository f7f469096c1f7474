"""Operating the platform: status, rebuilding read models, rotating keys. Rebuilds, and the
counts that span tenants, need the operator token (and, in the distributed mode, the log's
size, its dead letters and the processes holding partitions); a key with the admin scope
sees consumer health and lag, and rotates its own tenant's vault keys (the tenant comes
from the key)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Request
from pydantic import BaseModel, ConfigDict, Field, StrictInt
from starlette.concurrency import run_in_threadpool

from mnemo.domain.errors import Unavailable
from mnemo.entrypoints.admin import distributed_status, rebuild_read_models
from mnemo.service import keys
from mnemo_gateway.deps import (
    Admin,
    AdminCtx,
    Body,
    OperatorOrAdminCtx,
    PlatformDep,
    is_admin,
)

router = APIRouter(tags=["admin"])


@router.post("/v1/admin/rebuild", summary="Drop the read models and rebuild them from the log")
async def rebuild(_: Admin, platform: PlatformDep) -> dict[str, Any]:
    checksum = await run_in_threadpool(rebuild_read_models, platform)
    return {"checksum": checksum, "log_head": platform.log.head()}


# the distributed status's fields only the operator token reads
PLATFORM_ONLY = ("topic", "log_head", "dead_letters", "holders", "holders_error")


@router.get(
    "/v1/admin/status",
    summary="Consumers' positions and lag; read-model counts for operators",
)
def status(
    _: OperatorOrAdminCtx,
    platform: PlatformDep,
    request: Request,
    x_mnemo_admin_token: Annotated[str | None, Header(description="operator token")] = None,
) -> dict[str, Any]:
    if platform.distributed is not None:
        body = distributed_status(platform, request.app.state.gateway_settings.components)
    else:
        body = {
            "mode": "embedded",
            "log_head": platform.log.head(),
            "lag": platform.runner.lag(),
            "consumers_running": platform.runner.running,
        }
    operator = is_admin(request)
    if platform.distributed is not None and not operator:
        # a tenant's admin key sees the consumers' health and lag; what tells of the
        # platform's other tenants (the log's size, the dead letters) or of its machines
        # (the processes holding partitions) is the operator's
        for field in PLATFORM_ONLY:
            body.pop(field, None)
    if operator:
        try:
            body["counts"] = platform.store.counts()
        except Unavailable as exc:  # the store is down: the rest of the status still holds
            body["counts_error"] = exc.code
    return body


class RotateIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    stream: str | None = Field(
        default=None, max_length=128, description="a user stream with a key of its own"
    )


class RotateOut(BaseModel):
    key_id: str
    key_version: int


class RewrapIn(RotateIn):
    after: str | None = Field(default=None, max_length=64, description="the cursor `next` gave")
    limit: StrictInt = Field(default=keys.MAX_PAGE, ge=1, le=keys.MAX_PAGE)


class RewrapOut(BaseModel):
    key_id: str
    scanned: int = Field(description="memories looked at in this page")
    rewrapped: int = Field(description="memories whose data key moves to a newer version")
    key_versions: list[int]
    event_ids: list[str] = Field(description="the MemoriesRewrapped events appended")
    next: str | None = Field(description="the cursor of the next page; null: done")


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    return {"requestBody": {"content": {"application/json": {"schema": model.model_json_schema()}}}}


@router.post(
    "/v1/admin/keys/rotate",
    summary="Start a new version of your tenant's vault key (or a user's); nothing stops",
    openapi_extra=_schema(RotateIn),
)
async def rotate_key(ctx: AdminCtx, platform: PlatformDep, body: Body) -> RotateOut:
    req = RotateIn.model_validate(body)
    key_id, version = await run_in_threadpool(keys.rotate, platform.app, ctx.tenant, req.stream)
    return RotateOut(key_id=key_id, key_version=version)


@router.post(
    "/v1/admin/keys/rewrap",
    summary="Move one page of stored data keys to the key's current version (repeat with next)",
    openapi_extra=_schema(RewrapIn),
)
async def rewrap_keys(ctx: AdminCtx, platform: PlatformDep, body: Body) -> RewrapOut:
    req = RewrapIn.model_validate(body)
    page = await run_in_threadpool(
        keys.rewrap_page, platform.app, ctx.tenant, ctx.principal, req.stream, req.after, req.limit
    )
    return RewrapOut(
        key_id=page.key_id,
        scanned=page.scanned,
        rewrapped=page.rewrapped,
        key_versions=page.key_versions,
        event_ids=page.event_ids,
        next=page.next,
    )
