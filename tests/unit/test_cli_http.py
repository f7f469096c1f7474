"""The CLI speaks the HTTP API through the SDK's client (one HTTP core): the SDK's
identity headers and User-Agent, the admin token, each call sent once (no retry behind
the user's back), and the gateway's coded errors shown as `error CODE: message`."""

from __future__ import annotations

import json

import httpx
import pytest

from mnemo import __version__
from mnemo.entrypoints.cli import Api, ApiError, Unreachable


def api(handler: httpx.MockTransport, **kw: object) -> Api:
    return Api(
        "http://mnemo.test",
        "acme",
        "ops",
        5.0,
        admin_token=kw.get("admin_token"),  # type: ignore[arg-type]
        api_key="k-123",
        transport=handler,
    )


def test_calls_carry_the_sdks_identity_and_the_admin_token() -> None:
    seen: list[httpx.Request] = []

    def handle(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json={"ok": True})

    a = api(httpx.MockTransport(handle), admin_token="op-token-for-tests")
    assert a.call("GET", "/v1/templates", params={"limit": 3}) == {"ok": True}
    request = seen[0]
    assert request.url == "http://mnemo.test/v1/templates?limit=3"
    assert request.headers["User-Agent"] == f"mnemo-client/{__version__}"
    assert request.headers["X-Mnemo-Tenant"] == "acme"
    assert request.headers["X-Mnemo-Principal"] == "ops"
    assert request.headers["Authorization"] == "Bearer k-123"
    assert request.headers["X-Mnemo-Admin-Token"] == "op-token-for-tests"


def test_a_busy_answer_is_shown_not_retried() -> None:
    calls = 0

    def handle(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        body = {"error": {"code": "RATE_LIMITED", "message": "slow down", "field": None}}
        return httpx.Response(429, json=body, headers={"Retry-After": "1"})

    with pytest.raises(ApiError) as caught:
        api(httpx.MockTransport(handle)).call("POST", "/v1/events", body={"events": []})
    assert calls == 1
    assert caught.value.code == "RATE_LIMITED"
    assert caught.value.format_message() == "error RATE_LIMITED: slow down"


def test_an_answer_without_json_or_no_answer_is_unreachable() -> None:
    def html(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, text="<html>a proxy</html>")

    with pytest.raises(Unreachable, match="answered 200 without JSON"):
        api(httpx.MockTransport(html)).call("GET", "/v1/templates")

    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with pytest.raises(Unreachable, match="is `mnemo serve` running"):
        api(httpx.MockTransport(refuse)).call("GET", "/v1/templates")

    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    with pytest.raises(Unreachable, match="did not answer within 5 s"):
        api(httpx.MockTransport(slow)).call("GET", "/v1/templates")


def test_search_and_context_send_the_time_zone_and_as_of_they_are_given() -> None:
    from click.testing import CliRunner

    from mnemo.entrypoints.cli import State, context, search

    bodies: list[dict[str, object]] = []

    def handle(request: httpx.Request) -> httpx.Response:
        bodies.append(json.loads(request.content))
        if request.url.path == "/v1/search":
            return httpx.Response(200, json={"hits": []})
        return httpx.Response(200, json={"context": "", "tokens": 0, "budget": 1000})

    state = State(api(httpx.MockTransport(handle)), as_json=True)
    runner = CliRunner()
    done = runner.invoke(search, ["cook yesterday", "--timezone", "America/Los_Angeles"], obj=state)
    assert done.exit_code == 0, done.output
    done = runner.invoke(
        context,
        ["cook yesterday", "--subject", "user:U1", "--as-of", "2025-03-01T23:30:00-08:00"],
        obj=state,
    )
    assert done.exit_code == 0, done.output
    done = runner.invoke(search, ["cook yesterday"], obj=state)
    assert done.exit_code == 0, done.output
    assert bodies[0]["timezone"] == "America/Los_Angeles"
    assert bodies[1]["as_of"] == "2025-03-01T23:30:00-08:00"
    assert "timezone" not in bodies[1]
    assert "timezone" not in bodies[2]


@pytest.mark.parametrize(
    "args",
    [
        ["remember", "hi", "--stream", "user:x", "--speaker", "Bob"],  # --speaker needs --turn
        ["remember", "--bogus"],
        ["no-such-command"],
    ],
)
def test_a_wrong_command_line_is_a_local_problem_exit_1(args: list[str]) -> None:
    """Exit 2 means that Mnemo refused a request (README): a command line that is wrong
    never reaches it."""
    from click.testing import CliRunner

    from mnemo.entrypoints.cli import cli

    done = CliRunner().invoke(cli, args)
    assert done.exit_code == 1, done.output
    assert "Error:" in done.output


@pytest.mark.parametrize(
    "args", [["admin", "rebuild"], ["admin", "checksum"]], ids=["rebuild", "checksum"]
)
def test_offline_admin_commands_in_the_distributed_mode_say_how_it_rebuilds(
    args: list[str], tmp_path: object, monkeypatch: pytest.MonkeyPatch
) -> None:
    """They work on an embedded data directory; with MNEMO_MODE=distributed they said `no
    Mnemo data in var/data`, as if the deployment had lost its data."""
    from click.testing import CliRunner

    from mnemo.entrypoints.cli import cli

    monkeypatch.chdir(str(tmp_path))
    done = CliRunner(env={"MNEMO_MODE": "distributed", "MNEMO_EMBEDDER": "hashing"}).invoke(
        cli, args
    )
    assert done.exit_code == 1, done.output
    assert "no Mnemo data" not in done.stderr
    assert "MNEMO_MODE" in done.stderr
    assert "Rebuilding read models" in done.stderr
