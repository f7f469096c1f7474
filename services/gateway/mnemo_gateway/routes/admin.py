"""Operating the platform: status and rebuilding read models."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from starlette.concurrency import run_in_threadpool

from mnemo.service.admin import rebuild_read_models
from mnemo_gateway.deps import Ctx, PlatformDep

router = APIRouter(tags=["admin"])


@router.post("/v1/admin/rebuild", summary="Drop the read models and rebuild them from the log")
async def rebuild(_: Ctx, platform: PlatformDep) -> dict[str, Any]:
    checksum = await run_in_threadpool(rebuild_read_models, platform)
    return {"checksum": checksum, "log_head": platform.log.head()}


@router.get("/v1/admin/status", summary="Consumers' positions and lag, read-model counts")
def status(_: Ctx, platform: PlatformDep) -> dict[str, Any]:
    return {
        "mode": "embedded",
        "log_head": platform.log.head(),
        "lag": platform.runner.lag(),
        "consumers_running": platform.runner.running,
        "counts": platform.store.counts(),
    }
