"""Operating the platform: status and rebuilding read models. Rebuilds, and the counts that
span tenants, need the operator token; a key with the admin scope sees consumer health and
lag."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Header, Request
from starlette.concurrency import run_in_threadpool

from mnemo.service.admin import distributed_status, rebuild_read_models
from mnemo_gateway.deps import Admin, AdminCtx, PlatformDep, is_admin

router = APIRouter(tags=["admin"])


@router.post("/v1/admin/rebuild", summary="Drop the read models and rebuild them from the log")
async def rebuild(_: Admin, platform: PlatformDep) -> dict[str, Any]:
    checksum = await run_in_threadpool(rebuild_read_models, platform)
    return {"checksum": checksum, "log_head": platform.log.head()}


@router.get(
    "/v1/admin/status",
    summary="Consumers' positions and lag; read-model counts for operators",
)
def status(
    _: AdminCtx,
    platform: PlatformDep,
    request: Request,
    x_mnemo_admin_token: Annotated[str | None, Header()] = None,
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
    if is_admin(request, x_mnemo_admin_token):
        body["counts"] = platform.store.counts()
    return body
