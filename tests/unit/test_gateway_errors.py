"""The gateway's validation errors name the field that failed, whatever its name: a body
field called `query` (search, context) is a field, not the query string's location."""

from __future__ import annotations

import pytest
from fastapi import FastAPI, Query, Request
from fastapi.testclient import TestClient
from mnemo_gateway.errors import install_error_handlers
from pydantic import BaseModel, Field


class _Body(BaseModel):
    query: str = Field(min_length=1, max_length=10)
    path: str = "p"
    header: int = 0


def _app() -> FastAPI:
    app = FastAPI()
    install_error_handlers(app)

    @app.post("/probe")
    def probe(body: _Body, limit: int = Query(default=1, ge=1)) -> dict[str, str]:
        return {"ok": body.query}

    @app.post("/manual")
    def manual(raw: dict[str, object]) -> dict[str, str]:
        return {"ok": _Body.model_validate(raw).query}

    @app.post("/model")
    async def model(request: Request) -> dict[str, str]:
        return {"ok": _Body.model_validate(await request.json()).query}

    return app


def _error(client: TestClient, url: str, body: object) -> dict[str, str]:
    response = client.post(url, json=body)
    assert response.status_code == 422, response.text
    error: dict[str, str] = response.json()["error"]
    assert error["code"] == "VALIDATION_ERROR"
    return error


def test_a_body_field_named_like_a_location_is_named_in_the_error() -> None:
    with TestClient(_app()) as client:
        assert _error(client, "/probe", {"query": ""}).get("field") == "query"
        assert _error(client, "/probe", {"query": "x" * 11}).get("field") == "query"
        assert _error(client, "/probe", {"query": "x", "path": 1}).get("field") == "path"
        assert _error(client, "/probe", {"query": "x", "header": "h"}).get("field") == "header"
        # a model validated by the handler itself carries no location in front
        assert _error(client, "/manual", {"query": ""}).get("field") == "query"


def test_a_query_string_parameter_is_named_without_its_location() -> None:
    with TestClient(_app()) as client:
        assert _error(client, "/probe?limit=0", {"query": "x"}).get("field") == "limit"


def test_a_client_that_leaves_mid_body_is_no_server_error() -> None:
    """A caller that declared 5,000 bytes and hung up after 13 once cost a traceback at
    ERROR per request: the body reader now answers it as the caller's doing."""
    import asyncio
    from types import SimpleNamespace

    from mnemo_gateway.deps import json_body
    from starlette.requests import Request

    from mnemo.domain.errors import InvalidInput
    from mnemo.settings import GatewaySettings

    messages = iter(
        [
            {"type": "http.request", "body": b'{"stream": "u', "more_body": True},
            {"type": "http.disconnect"},
        ]
    )

    async def receive() -> dict[str, object]:
        return next(messages)

    app = SimpleNamespace(state=SimpleNamespace(gateway_settings=GatewaySettings()))
    scope = {
        "type": "http",
        "method": "POST",
        "path": "/v1/events",
        "headers": [(b"content-length", b"5000")],
        "app": app,
    }
    with pytest.raises(InvalidInput) as cut_short:
        asyncio.run(json_body(Request(scope, receive)))
    assert cut_short.value.code == "CLIENT_DISCONNECTED"


def test_a_body_that_is_no_object_is_not_named_by_its_model() -> None:
    error = _error(TestClient(_app()), "/model", [])
    assert "_Body" not in error["message"]
    assert "a JSON object" in error["message"]
