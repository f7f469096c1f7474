"""Liveness and readiness."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import JSONResponse, Response

from mnemo.domain.errors import MnemoError
from mnemo_gateway.deps import PlatformDep

router = APIRouter(tags=["health"])


@router.get("/healthz", summary="Liveness: the process answers")
async def healthz() -> dict[str, str]:
    # on the event loop, never behind a busy worker pool: liveness is the process answering
    return {"status": "ok"}


@router.get("/readyz", summary="Readiness: storage answers and consumers run")
def readyz(platform: PlatformDep, request: Request) -> JSONResponse:
    checks: dict[str, Any] = {}
    ok = True
    try:
        # the log answers; its head is not shown here, where anyone may ask (it tells
        # when any tenant last wrote)
        platform.log.head()
        checks["log"] = "ok"
        checks["lag"] = platform.lag()
    except MnemoError as exc:
        ok = False
        checks["storage"] = exc.code
    if platform.distributed is None:
        # the embedded consumers run in this process (unless another one runs them)
        checks["consumers_running"] = platform.runner.running or not request.app.state.run_consumers
        ok = ok and checks["consumers_running"]
    # distributed: the consumers are processes of their own, which this gateway neither runs
    # nor probes here; each answers its own /readyz, and `mnemo status` gathers them
    return JSONResponse(
        {"status": "ready" if ok else "not_ready", "checks": checks},
        status_code=200 if ok else 503,
    )


# load balancers that probe with HEAD: the same status, no body (not in the schema: the
# GET routes document the answers)
@router.head("/healthz", include_in_schema=False)
async def healthz_head() -> Response:
    return Response(status_code=200)


@router.head("/readyz", include_in_schema=False)
def readyz_head(platform: PlatformDep, request: Request) -> Response:
    return Response(status_code=readyz(platform, request).status_code)
