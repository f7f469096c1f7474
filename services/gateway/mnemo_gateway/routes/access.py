"""Tenants and API keys over HTTP.

Operators (the operator token) create tenants, each with its first admin key, and can give
an existing tenant a new admin key (the way back when it has none left). A tenant's admin
key (scope `admin`) issues, lists and revokes the tenant's keys under
/v1/tenants/{tenant}/keys; naming another tenant there is 403 FORBIDDEN. A key revokes
itself or keys it could have issued, never the tenant's last active admin key. A key's
secret is in exactly one answer: the one that made it (sent with Cache-Control: no-store)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Annotated, Any

from fastapi import APIRouter, Path, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, Field, StrictInt
from starlette.concurrency import run_in_threadpool

from mnemo.domain.access import ALL_SCOPES, MAX_KEY_SECONDS, ApiKey, Caller, Scope
from mnemo.domain.errors import InvalidInput, MnemoError, Unavailable
from mnemo.service.access import IssuedKey
from mnemo.service.app import RequestContext
from mnemo_gateway.deps import Admin, AdminCtx, Body, CallerDep, PlatformDep
from mnemo_gateway.fields import Instant

__all__ = ["router"]

router = APIRouter(tags=["access"])

TenantPath = Annotated[str, Path(max_length=63, description="the tenant id")]
KeyIdPath = Annotated[str, Path(max_length=16, description="the key id (16 hex digits)")]


class KeyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(
        min_length=1, max_length=64, description="who will use it; the default actor of events"
    )
    scopes: list[Scope] = Field(min_length=1, max_length=len(ALL_SCOPES))
    expires_at: Instant | None = Field(default=None, description="with a UTC offset")
    ttl_seconds: StrictInt | None = Field(
        default=None, ge=60, le=MAX_KEY_SECONDS, description="instead of expires_at"
    )
    tools: list[str] | None = Field(
        default=None,
        max_length=64,
        description="limit the key to recording results of these tools (absent: any tool)",
    )


class TenantIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    tenant: str = Field(min_length=1, max_length=63, pattern=r"^[a-z0-9][a-z0-9_-]{0,62}$")
    admin_key_name: str = Field(default="admin", min_length=1, max_length=64)
    ttl_seconds: StrictInt | None = Field(default=None, ge=60, le=MAX_KEY_SECONDS)


class RecoveryKeyIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(default="admin", min_length=1, max_length=64)
    ttl_seconds: StrictInt | None = Field(default=None, ge=60, le=MAX_KEY_SECONDS)


class KeyOut(BaseModel):
    key_id: str
    tenant: str
    name: str
    scopes: list[str]
    created_at: datetime
    created_by: str
    expires_at: datetime | None
    revoked_at: datetime | None
    tools: list[str] | None = None

    @classmethod
    def of(cls, key: ApiKey) -> KeyOut:
        return cls.model_validate(key.public())


class IssuedOut(KeyOut):
    key: str = Field(description="the API key itself: shown this once, stored only hashed")


class RevokedOut(KeyOut):
    issued_active: list[str] = Field(
        description="ids of keys this key issued (or keys they issued) that are still "
        "active: revoking a key leaves them working; revoke them too if they should stop"
    )


class KeysOut(BaseModel):
    keys: list[KeyOut]


class WhoAmIOut(BaseModel):
    tenant: str
    key_id: str
    name: str
    scopes: list[str]
    tools: list[str] | None = Field(
        default=None, description="the tools whose results it may record; absent: any"
    )


def _issued(issued: IssuedKey, status: int) -> JSONResponse:
    body = IssuedOut(**KeyOut.of(issued.record).model_dump(), key=issued.key)
    return JSONResponse(
        body.model_dump(mode="json"), status_code=status, headers={"Cache-Control": "no-store"}
    )


def _own_tenant(ctx: RequestContext, tenant: str) -> None:
    if tenant != ctx.tenant:
        raise MnemoError("that is another tenant's", code="FORBIDDEN", field="tenant")


def _expiry(now: datetime, expires_at: datetime | None, ttl: int | None) -> datetime | None:
    if expires_at is not None and ttl is not None:
        raise InvalidInput(
            "give expires_at or ttl_seconds, not both", code="INVALID_EXPIRY", field="ttl_seconds"
        )
    if expires_at is not None and expires_at > now + timedelta(seconds=MAX_KEY_SECONDS):
        raise InvalidInput(
            f"a key is issued for at most {MAX_KEY_SECONDS // 86_400} days",
            code="INVALID_EXPIRY",
            field="expires_at",
        )
    return now + timedelta(seconds=ttl) if ttl is not None else expires_at


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    return {"requestBody": {"content": {"application/json": {"schema": model.model_json_schema()}}}}


@router.get("/v1/whoami", summary="The tenant, name and scopes of the calling API key")
def whoami(caller: CallerDep, platform: PlatformDep) -> WhoAmIOut:
    # a forgotten tenant is gone for every route: its keys still authenticate (so that a
    # client learns why), but nothing of it is answered, its keys' names and scopes included
    if platform.sealer is not None:
        platform.sealer.refuse_forgotten_tenant(caller.tenant)
    return WhoAmIOut(
        tenant=caller.tenant,
        key_id=caller.key_id,
        name=caller.name,
        scopes=sorted(s.value for s in caller.scopes),
        tools=sorted(caller.tools) if caller.tools is not None else None,
    )


@router.post(
    "/v1/admin/tenants",
    summary="Create a tenant and its first admin key (operator token)",
    status_code=201,
    response_model=IssuedOut,
    openapi_extra=_schema(TenantIn),
)
async def create_tenant(_: Admin, platform: PlatformDep, body: Body) -> JSONResponse:
    req = TenantIn.model_validate(body)
    access = platform.access

    def run() -> IssuedKey:
        access.create_tenant(req.tenant, by="operator")
        return access.issue_key(
            req.tenant,
            req.admin_key_name,
            [s.value for s in ALL_SCOPES],
            by="operator",
            expires_at=_expiry(access.clock.now(), None, req.ttl_seconds),
        )

    return _issued(await run_in_threadpool(run), 201)


@router.post(
    "/v1/admin/tenants/{tenant}/keys",
    summary="Issue a new admin key of an existing tenant (operator token)",
    status_code=201,
    response_model=IssuedOut,
    openapi_extra=_schema(RecoveryKeyIn),
)
async def issue_recovery_key(
    _: Admin, platform: PlatformDep, tenant: TenantPath, body: Body
) -> JSONResponse:
    req = RecoveryKeyIn.model_validate(body)
    if platform.sealer is not None:
        # a forgotten tenant gets no key to come back with: every use of it answered 410
        platform.sealer.refuse_forgotten_tenant(tenant)
    access = platform.access
    issued = await run_in_threadpool(
        lambda: access.recovery_key(
            tenant, req.name, expires_at=_expiry(access.clock.now(), None, req.ttl_seconds)
        )
    )
    return _issued(issued, 201)


@router.get("/v1/admin/tenants", summary="Every tenant (operator token)")
def list_tenants(_: Admin, platform: PlatformDep) -> dict[str, list[dict[str, Any]]]:
    """Each tenant, and whether it was forgotten (its keys destroyed: it takes nothing more
    and reads as nothing; the vault says, as every route asks it). While the vault cannot
    answer, `forgotten` is null and the listing is still served."""
    sealer = platform.sealer

    def forgotten(tenant: str) -> bool | None:
        if sealer is None:
            return False
        try:
            return sealer.tenant_forgotten(tenant)
        except Unavailable:
            return None

    return {
        "tenants": [
            {**t.model_dump(mode="json"), "forgotten": forgotten(t.tenant)}
            for t in platform.access.store.tenants()
        ]
    }


@router.post(
    "/v1/tenants/{tenant}/keys",
    summary="Issue an API key of your tenant (admin scope); the answer holds it once",
    status_code=201,
    response_model=IssuedOut,
    openapi_extra=_schema(KeyIn),
)
async def issue_key(
    ctx: AdminCtx, platform: PlatformDep, tenant: TenantPath, body: Body, request: Request
) -> JSONResponse:
    _own_tenant(ctx, tenant)
    req = KeyIn.model_validate(body)
    if platform.sealer is not None:
        # a forgotten tenant's old keys issue no new one (every use of it answers 410)
        platform.sealer.refuse_forgotten_tenant(tenant)
    access = platform.access
    caller: Caller = request.state.caller
    beyond = sorted(s.value for s in set(req.scopes) - caller.scopes)
    if beyond:  # a key hands on only what it holds
        raise MnemoError(
            f"a key cannot issue scopes it does not hold: {', '.join(beyond)}",
            code="SCOPE_MISSING",
            field="scopes",
            extra={"scope": beyond[0]},
        )
    tools = req.tools
    if caller.tools is not None:
        # a key limited to some tools hands on no more than those
        tools = sorted(caller.tools) if tools is None else tools
        wider = sorted(set(tools) - caller.tools)
        if wider:
            raise MnemoError(
                f"a key cannot issue tools it does not hold: {', '.join(wider)[:200]}",
                code="TOOL_NOT_ALLOWED",
                field="tools",
            )
    expires_at = _expiry(access.clock.now(), req.expires_at, req.ttl_seconds)
    if caller.expires_at is not None:
        # a key that expires hands on no longer a life than its own (absent: the same end),
        # or a key lent for an hour could leave behind one that never expires
        if expires_at is None:
            expires_at = caller.expires_at
        elif expires_at > caller.expires_at:
            raise InvalidInput(
                f"a key cannot issue a key that outlives it (it expires at "
                f"{caller.expires_at.isoformat()})",
                code="INVALID_EXPIRY",
                field="ttl_seconds" if req.ttl_seconds is not None else "expires_at",
            )
    issued = await run_in_threadpool(
        lambda: access.issue_key(
            tenant,
            req.name,
            [s.value for s in req.scopes],
            by=f"key:{caller.key_id}",
            expires_at=expires_at,
            tools=tools,
        )
    )
    return _issued(issued, 201)


@router.get("/v1/tenants/{tenant}/keys", summary="Your tenant's keys, never their secrets")
def list_keys(ctx: AdminCtx, platform: PlatformDep, tenant: TenantPath) -> KeysOut:
    _own_tenant(ctx, tenant)
    if platform.sealer is not None:  # as whoami: nothing of a forgotten tenant is answered
        platform.sealer.refuse_forgotten_tenant(tenant)
    return KeysOut(keys=[KeyOut.of(k) for k in platform.access.keys(tenant)])


@router.delete("/v1/tenants/{tenant}/keys/{key_id}", summary="Revoke a key of your tenant")
def revoke_key(
    ctx: AdminCtx, platform: PlatformDep, tenant: TenantPath, key_id: KeyIdPath, request: Request
) -> RevokedOut:
    _own_tenant(ctx, tenant)
    caller: Caller = request.state.caller
    revoked = platform.access.revoke(tenant, key_id, by=caller)
    return RevokedOut(**KeyOut.of(revoked.record).model_dump(), issued_active=revoked.issued_active)
