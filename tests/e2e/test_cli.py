"""The `mnemo` command against a real Mnemo server running in this process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from tests.support import fixed_key, free_port, install_keys, running_server, wait_healthy

from mnemo.bootstrap import Platform, build_embedded
from mnemo.client import MnemoAPIError, MnemoClient
from mnemo.domain.ids import new_event_id
from mnemo.entrypoints import cli as cli_module
from mnemo.entrypoints.admin import platform_checksum
from mnemo.entrypoints.cli import cli
from mnemo.service.app import RequestContext, Wait
from mnemo.service.runner import CONSUMERS
from mnemo.settings import GatewaySettings, MnemoSettings

Invoke = Callable[..., Result]


# ---- helpers ----------------------------------------------------------------------------


def unused_port() -> int:
    """A port nothing listens on (for a refused connection)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def event_id() -> str:
    return new_event_id(datetime.now(UTC))


def observation(text: str, **extra: Any) -> dict[str, Any]:
    return {
        "event_id": event_id(),
        "type": "ObservationRecorded",
        "schema_version": 2,
        "payload": {"text": text},
        **extra,
    }


def declared(memory: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "event_id": event_id(),
        "type": "MemoryDeclared",
        "schema_version": 1,
        "payload": {"memory": memory},
        **extra,
    }


def write_jsonl(path: Path, lines: list[dict[str, Any] | None]) -> Path:
    """One event a line; None writes a blank line."""
    text = "\n".join("" if e is None else json.dumps(e, ensure_ascii=False) for e in lines)
    path.write_text(text + "\n", encoding="utf-8")
    return path


def jsonl(output: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in output.splitlines() if line.strip()]


# ---- fixtures -------------------------------------------------------------------------------


ADMIN_TOKEN = "operator-secret-for-tests"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Platform]]:
    """A real server (embedded platform, gateway, uvicorn) on a free port, in a thread."""
    with running_server(
        tmp_path_factory.mktemp("server"), GatewaySettings(admin_token=ADMIN_TOKEN)
    ) as (url, platform):
        yield url, platform


@pytest.fixture(scope="module")
def server_url(server: tuple[str, Platform]) -> str:
    return server[0]


@pytest.fixture
def tenant() -> str:
    return f"t{uuid.uuid4().hex[:16]}"


@pytest.fixture
def stream() -> str:
    return f"user:U{uuid.uuid4().hex[:8]}"


@pytest.fixture
def mnemo(server: tuple[str, Platform], tenant: str) -> Invoke:
    """`mnemo --url SERVER --api-key KEY ARGS...` in this process, KEY a key of TENANT."""
    runner = CliRunner()
    server_url, platform = server

    def invoke(*args: str, input: str | None = None, tenant_: str = tenant) -> Result:
        install_keys(platform, tenant_)
        key = fixed_key(tenant_)
        return runner.invoke(cli, ["--url", server_url, "--api-key", key, *args], input=input)

    return invoke


@dataclass
class Published:
    file: Path
    event_ids: list[str]
    result: Result


@pytest.fixture
def published(mnemo: Invoke, stream: str, tmp_path: Path) -> Published:
    """A JSONL file (a Chinese and two English observations, a declared constraint) published
    with --wait indexed (the search and the context with a query read the index); the events
    name no stream, --stream fills it in."""
    events = [
        observation("记住我的尺码是L"),
        observation("remember my favourite colour is blue"),
        declared({"type": "constraint", "content": "never ship on Fridays"}),
        observation("hello there, nice weather"),
    ]
    file = write_jsonl(tmp_path / "events.jsonl", [events[0], None, *events[1:]])
    result = mnemo("publish", str(file), "--stream", stream, "--wait", "indexed")
    assert result.exit_code == 0, result.output
    assert "the wait timed out" not in result.output
    return Published(file, [e["event_id"] for e in events], result)


# ---- publish ------------------------------------------------------------------------------


def test_publish_jsonl_reports_what_was_accepted_and_registered(
    published: Published, mnemo: Invoke, stream: str
) -> None:
    out = published.result.stdout
    assert "published 4 events: 4 accepted, 0 duplicates" in out
    assert "outcomes: ignored 1, registered 3" in out

    again = mnemo("--json", "publish", str(published.file), "--stream", stream, "--wait", "none")
    assert again.exit_code == 0, again.output
    summary = json.loads(again.stdout)
    assert (summary["accepted"], summary["duplicates"]) == (0, 4)
    assert [e["event_id"] for e in summary["events"]] == published.event_ids
    assert all(e["duplicate"] for e in summary["events"])


def test_publish_reads_a_json_document_from_stdin_and_keeps_explicit_streams(
    mnemo: Invoke, stream: str
) -> None:
    other = f"{stream}-other"
    events = [observation("my budget is 500 dollars"), observation("hi", stream=other)]
    empty = mnemo("publish", "-", "--stream", stream, input="\n")
    assert empty.exit_code == 1
    assert "no events to publish" in empty.stderr
    result = mnemo(
        "--json",
        "publish",
        "-",
        "--stream",
        stream,
        "--wait",
        "registered",
        "--batch-size",
        "1",
        input=json.dumps({"events": events}),
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["accepted"] == 2
    assert summary["outcomes"] == {"ignored": 1, "registered": 1}
    assert summary["complete"] is True
    listed = json.loads(mnemo("--json", "list", stream, "--key", "budget").stdout)
    assert [m["value"] for m in listed["memories"]] == ["500 dollars"]
    replayed = jsonl(mnemo("replay", other).stdout)
    assert [e["event_id"] for e in replayed] == [events[1]["event_id"]]


def test_an_event_registration_rejects_makes_publish_exit_2(mnemo: Invoke, stream: str) -> None:
    good = {
        "event_id": event_id(),
        "type": "MemoryDeclared",
        "schema_version": 1,
        "payload": {"memory": {"type": "preference", "key": "seat", "value": "aisle"}},
    }
    stale = {
        "event_id": event_id(),
        "type": "MemoryDeclared",
        "schema_version": 1,
        "payload": {
            "memory": {"type": "preference", "key": "meal", "value": "veg", "expected_version": 3}
        },
    }
    body = "\n".join(json.dumps(e) for e in (good, stale))
    waited = mnemo("publish", "-", "--stream", stream, "--wait", "registered", input=body)
    assert waited.exit_code == 2, waited.output
    assert "published 2 events: 2 accepted" in waited.stdout
    assert "error EVENTS_REJECTED: 1 of the accepted events" in waited.stderr
    assert f"{stale['event_id']}: VERSION_CONFLICT" in waited.stderr
    assert good["event_id"] not in waited.stderr
    as_json = mnemo("--json", "publish", "-", "--stream", stream, "--wait", "registered",
                    input=body)  # fmt: skip
    assert as_json.exit_code == 2
    assert json.loads(as_json.stdout)["duplicates"] == 2
    assert json.loads(as_json.stderr)["error"]["code"] == "EVENTS_REJECTED"
    # without a wait the outcomes are not known yet: the publish itself succeeded
    fresh = {**stale, "event_id": event_id()}
    unwaited = mnemo("publish", "-", "--stream", stream, input=json.dumps(fresh))
    assert unwaited.exit_code == 0, unwaited.output
    # and every event registration took exits 0
    fine = {**good, "event_id": event_id()}
    ok = mnemo("publish", "-", "--stream", stream, "--wait", "registered", input=json.dumps(fine))
    assert ok.exit_code == 0, ok.output


def test_a_bad_event_fails_with_its_code_and_line_and_earlier_batches_stay(
    mnemo: Invoke, stream: str, tmp_path: Path
) -> None:
    good = [observation("remember my city is Lyon"), observation("hello")]
    bad = {"type": "NoSuchEvent", "schema_version": 1, "payload": {}}
    file = write_jsonl(tmp_path / "bad.jsonl", [good[0], None, good[1], bad])

    result = mnemo("publish", str(file), "--stream", stream, "--batch-size", "2")

    assert result.exit_code == 2
    assert "error UNKNOWN_EVENT_TYPE" in result.stderr
    assert f"at {file}:4" in result.stderr
    assert "2 events accepted before this batch stay accepted" in result.stderr
    replayed = [e["event_id"] for e in jsonl(mnemo("replay", stream).stdout)]
    assert replayed[:2] == [e["event_id"] for e in good]


def test_a_bad_event_in_the_only_batch_appends_nothing(
    mnemo: Invoke, stream: str, tmp_path: Path
) -> None:
    bad = observation("x")
    bad["schema_version"] = 9
    file = write_jsonl(tmp_path / "bad.jsonl", [observation("hello"), bad])

    result = mnemo("publish", str(file), "--stream", stream)

    assert result.exit_code == 2
    assert "error UNSUPPORTED_SCHEMA_VERSION" in result.stderr
    assert f"at {file}:2" in result.stderr
    assert "0 events accepted" in result.stderr
    assert mnemo("replay", stream).stdout == ""


def test_malformed_json_is_a_local_error_with_its_line(
    mnemo: Invoke, stream: str, tmp_path: Path
) -> None:
    file = tmp_path / "broken.jsonl"
    file.write_text(json.dumps(observation("hello")) + "\n{not json\n", encoding="utf-8")

    result = mnemo("publish", str(file), "--stream", stream)

    assert result.exit_code == 1
    assert f"{file}:2: not valid JSON" in result.stderr
    assert mnemo("replay", stream).stdout == ""  # nothing was sent


# ---- reads --------------------------------------------------------------------------------


def test_list_shows_the_registered_size(published: Published, mnemo: Invoke, stream: str) -> None:
    result = mnemo("list", stream)
    assert result.exit_code == 0, result.output
    assert "size=L" in result.stdout
    assert "favourite_colour=blue" in result.stdout
    assert "never ship on Fridays" in result.stdout

    constraints = json.loads(mnemo("--json", "list", stream, "--type", "constraint").stdout)
    assert [m["content"] for m in constraints["memories"]] == ["never ship on Fridays"]


def test_remember_supersedes_and_history_keeps_every_version(
    published: Published, mnemo: Invoke, stream: str
) -> None:
    result = mnemo("remember", "记住我的尺码是XL", "--stream", stream)
    assert result.exit_code == 0, result.output
    assert "superseded memory" in result.stdout
    assert "v2" in result.stdout

    history = json.loads(mnemo("--json", "history", stream, "size").stdout)["memories"]
    assert [(m["value"], m["status"]) for m in history] == [
        ("L", "superseded"),
        ("XL", "active"),
    ]
    memory_id = history[1]["memory_id"]
    got = mnemo("--json", "get", memory_id)
    assert json.loads(got.stdout)["value"] == "XL"


def test_remember_turn_keeps_the_turn_as_history_with_its_time(mnemo: Invoke, stream: str) -> None:
    said = "2026-05-01T09:00:00+00:00"
    result = mnemo(
        "--json",
        "remember",
        "I usually wear a medium",
        "--stream",
        stream,
        "--turn",
        "--speaker",
        "Ana",
        "--at",
        said,
    )
    assert result.exit_code == 0, result.output
    outcomes = json.loads(result.stdout)["accepted"][0]["outcomes"]
    assert outcomes[0]["outcome"] == "registered"
    turn = json.loads(mnemo("--json", "get", outcomes[0]["memory_id"]).stdout)
    assert (turn["type"], turn["content"]) == ("history", "Ana: I usually wear a medium")
    assert turn["created_at"].startswith("2026-05-01T09:00:00")
    refused = mnemo("remember", "hello", "--stream", stream, "--speaker", "Ana")
    assert refused.exit_code != 0
    assert "--turn" in refused.output


def test_declare_registers_a_memory_with_its_options(mnemo: Invoke, stream: str) -> None:
    result = mnemo(
        "--json",
        "declare",
        "--stream",
        stream,
        "--type",
        "fact",
        "--key",
        "city",
        "--value",
        "Lyon",
        "--tag",
        "geo",
        "--ttl",
        "3600",
        "--weight",
        "0.8",
    )
    assert result.exit_code == 0, result.output
    outcome = json.loads(result.stdout)["accepted"][0]["outcomes"][0]
    assert outcome["outcome"] == "registered"
    memory = json.loads(mnemo("--json", "get", outcome["memory_id"]).stdout)
    assert (memory["key"], memory["value"], memory["tags"]) == ("city", "Lyon", ["geo"])
    assert memory["semantic_weight"] == 0.8
    assert memory["valid_until"] is not None


def test_search_finds_the_size_only_in_its_tenant(
    published: Published, mnemo: Invoke, stream: str
) -> None:
    result = mnemo("--json", "search", "size", "--subject", stream)
    assert result.exit_code == 0, result.output
    top = json.loads(result.stdout)["hits"][0]["memory"]
    assert (top["key"], top["value"]) == ("size", "L")
    assert "size=L" in mnemo("search", "size", "--subject", stream).stdout

    elsewhere = mnemo("--json", "search", "size", tenant_=f"x{uuid.uuid4().hex[:12]}")
    assert json.loads(elsewhere.stdout)["hits"] == []


def test_context_renders_the_protocol_header_constraints_and_memories(
    published: Published, mnemo: Invoke, stream: str
) -> None:
    result = mnemo("context", "what size do I wear", "--subject", stream, "--budget", "1000")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("[MNEMO-CONTEXT v1")
    assert "## Constraints\n- never ship on Fridays" in result.stdout
    assert "尺码：L" in result.stdout

    whole = json.loads(mnemo("--json", "context", "size", "--subject", stream).stdout)
    assert whole["context"].startswith("[MNEMO-CONTEXT v1")
    assert 0 < whole["tokens"] <= whole["budget"] == 1000


def test_replay_prints_the_stream_gapless_paging_with_all(
    published: Published, mnemo: Invoke, stream: str
) -> None:
    result = mnemo("replay", stream, "--all", "--limit", "2")
    assert result.exit_code == 0, result.output
    events = jsonl(result.stdout)
    assert [e["seq"] for e in events] == list(range(1, len(events) + 1))
    assert len(events) >= 4 + 3  # the published events and what registration emitted
    assert {e["stream"] for e in events} == {stream}
    assert [e["event_id"] for e in events[:4]] == published.event_ids

    one_page = jsonl(mnemo("replay", stream, "--limit", "2").stdout)
    assert [e["seq"] for e in one_page] == [1, 2]
    from_three = jsonl(mnemo("replay", stream, "--from-seq", "3", "--all").stdout)
    assert from_three == events[2:]


def test_tail_prints_the_tenants_events_and_follow_stops_on_ctrl_c(
    published: Published, mnemo: Invoke, stream: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    everything = jsonl(mnemo("tail", "--limit", "3").stdout)
    assert [e["event_id"] for e in everything] == [
        e["event_id"] for e in jsonl(mnemo("replay", stream, "--all").stdout)
    ]
    offsets = [e["offset"] for e in everything]
    assert offsets == sorted(offsets)

    def ctrl_c(_: float) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cli_module, "pause", ctrl_c)
    followed = mnemo("tail", "--follow", "--after-offset", str(offsets[1]))
    assert followed.exit_code == 0
    assert jsonl(followed.stdout) == everything[2:]


def test_outcome_of_a_published_event(published: Published, mnemo: Invoke) -> None:
    result = mnemo("outcome", published.event_ids[0])
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("registered memory ")
    ignored = json.loads(mnemo("--json", "outcome", published.event_ids[3]).stdout)
    assert [o["outcome"] for o in ignored] == ["ignored"]


def test_status_json_has_every_consumer(published: Published, mnemo: Invoke) -> None:
    result = mnemo("--json", "status")
    assert result.exit_code == 0, result.output
    status = json.loads(result.stdout)
    assert set(status["lag"]) == set(CONSUMERS)
    assert status["consumers_running"] is True
    assert status["log_head"] >= 7
    assert "counts" not in status  # counts span tenants: operators only
    operator = json.loads(mnemo("--json", "--admin-token", ADMIN_TOKEN, "status").stdout)
    assert operator["counts"]["memories"] >= 3
    human = mnemo("status").stdout
    assert all(name in human for name in CONSUMERS)


# ---- errors ---------------------------------------------------------------------------------


def test_an_error_answer_exits_2_with_its_code(mnemo: Invoke) -> None:
    result = mnemo("get", "no-such-memory")
    assert result.exit_code == 2
    assert result.stderr.strip() == ("error MEMORY_NOT_FOUND: no memory no-such-memory (memory_id)")


def test_with_json_an_error_is_one_json_object_on_stderr(mnemo: Invoke, tmp_path: Path) -> None:
    rejected = mnemo("--json", "get", "no-such-memory")
    assert rejected.exit_code == 2
    assert json.loads(rejected.stderr) == {
        "error": {
            "code": "MEMORY_NOT_FOUND",
            "message": "no memory no-such-memory",
            "field": "memory_id",
            "notes": [],
            "exit_code": 2,
        }
    }
    assert rejected.stdout == ""
    url = f"http://127.0.0.1:{unused_port()}"
    unreachable = CliRunner().invoke(cli, ["--json", "--url", url, "status"])
    assert unreachable.exit_code == 3
    error = json.loads(unreachable.stderr)["error"]
    assert error["code"] == "UNREACHABLE"
    assert error["exit_code"] == 3
    assert url in error["message"]
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"type": "MemoryDeclared"}\nnot json\n')
    local = mnemo("--json", "publish", str(bad), "--stream", "user:U1")
    assert local.exit_code == 1
    error = json.loads(local.stderr)["error"]
    assert error["code"] == "LOCAL_ERROR"
    assert "bad.jsonl" in error["message"]
    # a wrong command line too, at the top level and in a command
    for wrong in (["--json", "--no-such-option", "status"], ["--json", "search", "--nope"]):
        usage = mnemo(*wrong)
        assert usage.exit_code == 1, usage.output
        error = json.loads(usage.stderr)["error"]
        assert error["code"] == "USAGE_ERROR"
        assert "no such option" in error["message"].lower()
    # an unknown command, found before the group's options take effect
    unknown = mnemo("--json", "no-such-command")
    assert unknown.exit_code == 1, unknown.output
    error = json.loads(unknown.stderr)["error"]
    assert (error["code"], error["exit_code"]) == ("USAGE_ERROR", 1)
    assert "no-such-command" in error["message"]
    # the same run without --json shows text again (the mode is the invocation's own)
    text = mnemo("get", "no-such-memory")
    assert text.stderr.startswith("error MEMORY_NOT_FOUND")


def test_connection_refused_exits_3() -> None:
    url = f"http://127.0.0.1:{unused_port()}"
    result = CliRunner().invoke(cli, ["--url", url, "status"])
    assert result.exit_code == 3
    assert f"cannot reach Mnemo at {url} (is `mnemo serve` running?" in result.stderr
    assert "MNEMO_URL or --url" in result.stderr  # the setting to check


def test_refused_credentials_name_the_setting_that_holds_them(mnemo: Invoke) -> None:
    bad = mnemo("--api-key", "mnemo_0123456789abcdef_" + "A" * 43, "get", "m")
    assert bad.exit_code == 2
    assert "UNAUTHENTICATED" in bad.stderr
    assert "MNEMO_API_KEY or --api-key" in bad.stderr
    operator = mnemo("admin", "tenant", "create", "nope")
    assert "ADMIN_ONLY" in operator.stderr
    assert "MNEMO_ADMIN_TOKEN or --admin-token" in operator.stderr


def test_a_password_in_the_url_is_refused_and_never_printed() -> None:
    """A user and password in the URL were sent by the HTTP library as Basic credentials
    in place of the API key (UNAUTHENTICATED); they are refused before anything is sent,
    and never printed, whatever the URL's shape."""
    port = unused_port()
    for url in (
        f"http://user:S3cretPW@127.0.0.1:{port}",
        f"user:S3cretPW@127.0.0.1:{port}",
        "ht!tp://u:S3cretPW@x",
    ):
        result = CliRunner().invoke(cli, ["--url", url, "status"])
        assert result.exit_code == 1, result.output
        assert "INVALID_URL" in result.stderr
        assert "S3cretPW" not in result.stderr + result.output
        with pytest.raises(MnemoAPIError) as caught:
            MnemoClient(url, api_key="x")
        assert caught.value.code == "INVALID_URL"
        assert "S3cretPW" not in str(caught.value)
    # a key written into the path is not printed either
    key = "mnemo_0123456789abcdef_" + "Z" * 43
    result = CliRunner().invoke(cli, ["--url", f"http://127.0.0.1:{port}/{key}", "status"])
    assert result.exit_code == 3
    assert "Z" * 43 not in result.stderr + result.output


def test_what_the_client_refuses_before_sending_is_a_local_problem() -> None:
    port = unused_port()
    for args, code in (
        (["--api-key", "k\n1x"], "INVALID_API_KEY"),
        (["--principal", "a\nb"], "INVALID_PRINCIPAL"),
        (["--url", "notaurl"], "INVALID_URL"),
    ):
        result = CliRunner().invoke(cli, ["--url", f"http://127.0.0.1:{port}", *args, "status"])
        assert result.exit_code == 1, (args, result.output)
        assert f"error {code}:" in result.stderr


def test_a_key_or_url_the_client_cannot_send_is_named_never_shown() -> None:
    """A key read from a file with a Windows line end was printed whole in the error the
    HTTP library raised for the header; a query string (?api_key=) was printed with the
    URL; a URL with a bad port ended in a traceback."""
    port = unused_port()
    secret = "Q" * 43
    key = f"mnemo_0123456789abcdef_{secret}"
    runner = CliRunner()
    # white space around the key is dropped: the call is made (nothing listens: exit 3)
    sent = runner.invoke(
        cli, ["--url", f"http://127.0.0.1:{port}", "--api-key", key + "\r\n", "status"]
    )
    assert sent.exit_code == 3, sent.output
    bad = runner.invoke(
        cli, ["--url", f"http://127.0.0.1:{port}", "--api-key", key + "\x01", "status"]
    )
    assert "INVALID_API_KEY" in bad.stderr
    query = runner.invoke(cli, ["--url", f"http://127.0.0.1:{port}/?api_key={key}", "status"])
    assert query.exit_code == 3
    unusable = runner.invoke(cli, ["--url", "http://u:S3cretPW@127.0.0.1:notaport", "status"])
    assert "INVALID_URL" in unusable.stderr
    assert unusable.exception is None or isinstance(unusable.exception, SystemExit)
    for result in (sent, bad, query, unusable):
        assert secret not in result.stderr + result.output
        assert "S3cretPW" not in result.stderr + result.output


# ---- admin ----------------------------------------------------------------------------------


def test_admin_rebuild_offline_restores_the_checksum(tmp_path: Path) -> None:
    data = tmp_path / "data"
    platform = build_embedded(MnemoSettings(data_dir=data, embedder="hashing"))
    ctx = RequestContext(tenant="acme", principal="test")
    events = [
        observation("记住我的尺码是L", stream="user:U1"),
        observation("I want to buy coffee today", stream="user:U1"),
        declared({"type": "constraint", "content": "no nuts"}, stream="user:U2"),
    ]
    platform.app.publish(ctx, events, Wait.NONE)
    platform.runner.drain()
    before = platform_checksum(platform)
    head = platform.log.head()
    platform.store.reset()  # lose every read model
    platform.index.clear()
    platform.close()

    runner = CliRunner(env={"MNEMO_EMBEDDER": "hashing"})
    damaged = runner.invoke(cli, ["admin", "checksum", "--data-dir", str(data)])
    assert damaged.exit_code == 0, damaged.output
    assert damaged.stdout.strip() != before

    rebuilt = runner.invoke(cli, ["admin", "rebuild", "--data-dir", str(data)])
    assert rebuilt.exit_code == 0, rebuilt.output
    assert f"checksum {before}" in rebuilt.stdout
    assert f"from {head} events" in rebuilt.stdout

    checked = runner.invoke(cli, ["--json", "admin", "checksum", "--data-dir", str(data)])
    assert json.loads(checked.stdout) == {"checksum": before}


def test_offline_commands_leave_a_data_directory_in_use_untouched(tmp_path: Path) -> None:
    """An offline checksum or rebuild beside a server on the same data directory was
    refused by the vector shard's own lock only after opening it had written to the shard,
    and the server's indexer then failed on every batch until it was restarted."""
    data = tmp_path / "data"
    live = build_embedded(MnemoSettings(data_dir=data, embedder="hashing"))
    ctx = RequestContext(tenant="acme", principal="test")
    try:
        first = declared({"type": "fact", "content": "likes coffee"}, stream="user:U1")
        live.app.publish(ctx, [first], Wait.NONE)
        live.runner.drain()

        def files() -> dict[str, tuple[int, int]]:
            return {
                str(p.relative_to(data)): (p.stat().st_mtime_ns, p.stat().st_size)
                for p in (data / "vectors").rglob("*")
                if p.is_file()
            }

        before = files()
        runner = CliRunner(env={"MNEMO_EMBEDDER": "hashing"})
        refused = [
            runner.invoke(cli, [*command, "--data-dir", str(data)])
            for command in (["admin", "checksum"], ["admin", "rebuild"])
        ]
        assert files() == before
        for answer in refused:
            assert answer.exit_code == 1, answer.output
            assert "DATA_DIR_IN_USE" in answer.stderr
        # the live one goes on indexing
        then = declared({"type": "fact", "content": "likes green tea"}, stream="user:U1")
        live.app.publish(ctx, [then], Wait.NONE)
        live.runner.drain()
        assert live.lag() == dict.fromkeys(live.lag(), 0)
        assert live.app.search(ctx, "tea", limit=1)
    finally:
        live.close()
    # once it stops, the directory is free
    freed = CliRunner(env={"MNEMO_EMBEDDER": "hashing"}).invoke(
        cli, ["admin", "checksum", "--data-dir", str(data)]
    )
    assert freed.exit_code == 0, freed.output


def test_admin_refuses_a_directory_without_data(tmp_path: Path) -> None:
    result = CliRunner(env={"MNEMO_EMBEDDER": "hashing"}).invoke(
        cli, ["admin", "rebuild", "--data-dir", str(tmp_path / "nothing")]
    )
    assert result.exit_code == 1
    assert "no Mnemo data in" in result.stderr
    assert not (tmp_path / "nothing").exists()


def test_admin_rebuild_online_answers_the_servers_checksum(
    published: Published, mnemo: Invoke
) -> None:
    refused = mnemo("--json", "admin", "rebuild", "--online")
    assert refused.exit_code == 2
    assert "ADMIN_ONLY" in refused.output
    first = mnemo("--json", "--admin-token", ADMIN_TOKEN, "admin", "rebuild", "--online")
    assert first.exit_code == 0, first.output
    second = mnemo("--json", "--admin-token", ADMIN_TOKEN, "admin", "rebuild", "--online")
    assert json.loads(first.stdout)["checksum"] == json.loads(second.stdout)["checksum"]
    assert len(json.loads(first.stdout)["checksum"]) == 64


# ---- serve ----------------------------------------------------------------------------------


def start_serve(data: Path, port: int) -> subprocess.Popen[str]:
    env = {**os.environ, "MNEMO_EMBEDDER": "hashing", "MNEMO_LOG_LEVEL": "WARNING"}
    command = [sys.executable, "-m", "mnemo", "serve", "--port", str(port)]
    return subprocess.Popen(
        [*command, "--data-dir", str(data)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def stop_serve(process: subprocess.Popen[str]) -> tuple[int, str]:
    process.send_signal(signal.SIGINT)
    out, _ = process.communicate(timeout=60)
    return process.returncode, out


def first_key(process: subprocess.Popen[str]) -> tuple[str, list[str]]:
    """The admin key a first start prints (read line by line until the listening line)."""
    assert process.stdout is not None
    lines: list[str] = []
    for line in process.stdout:
        lines.append(line)
        if line.startswith("Mnemo listening"):
            break
    keys = [w for line in lines for w in line.split() if w.startswith("mnemo_")]
    assert len(keys) == 1, lines
    return keys[0], lines


@pytest.mark.slow
def test_serve_stops_cleanly_on_ctrl_c_and_a_restart_finds_everything(tmp_path: Path) -> None:
    data, port = tmp_path / "data", free_port()  # the restart below reuses it
    url = f"http://127.0.0.1:{port}"
    runner = CliRunner()
    process = start_serve(data, port)
    try:
        key, shown = first_key(process)
        assert "tenant 'default'" in shown[0]
        wait_healthy(url, lambda: process.poll() is None)
        keyless = runner.invoke(
            cli, ["--url", url, "remember", "记住我的尺码是L", "--stream", "user:U1"]
        )
        assert keyless.exit_code == 2
        assert "UNAUTHENTICATED" in keyless.stderr
        remembered = runner.invoke(
            cli,
            ["--url", url, "--api-key", key, "remember", "记住我的尺码是L", "--stream", "user:U1"],
        )
        assert remembered.exit_code == 0, remembered.output
    finally:
        code, out = stop_serve(process)
    assert code == 0
    assert shown[-1].startswith(
        f"Mnemo listening on {url} — API docs at {url}/docs — console at {url}/console — data in "
    )
    assert key not in (data / "access.sqlite3").read_bytes().decode("latin-1")  # only a hash

    process = start_serve(data, port)
    try:
        wait_healthy(url, lambda: process.poll() is None)
        listed = runner.invoke(cli, ["--url", url, "--api-key", key, "list", "user:U1"])
        assert "size=L" in listed.stdout
    finally:
        code, out = stop_serve(process)
    assert code == 0
    assert out.startswith("Mnemo listening")  # no second key on a later start
    assert "mnemo_" not in out


# ---- tenants and keys -------------------------------------------------------------------------


def _printed_key(result: Result) -> str:
    assert result.exit_code == 0, result.output
    keys = [w for w in result.stdout.split() if w.startswith("mnemo_")]
    assert len(keys) == 1, result.stdout
    return keys[0]


def test_admin_tenant_and_key_commands_over_http(server_url: str, tenant: str) -> None:
    runner = CliRunner()
    base = ["--url", server_url]
    refused = runner.invoke(cli, [*base, "admin", "tenant", "create", tenant])
    assert refused.exit_code == 2
    assert "ADMIN_ONLY" in refused.stderr
    created = runner.invoke(
        cli, [*base, "--admin-token", ADMIN_TOKEN, "admin", "tenant", "create", tenant]
    )
    admin_key = _printed_key(created)
    assert "shown once" in created.stdout
    as_admin = [*base, "--api-key", admin_key]
    create = ["admin", "key", "create", "--name", "reader", "--scope", "memory:read"]
    made = runner.invoke(cli, [*as_admin, *create, "--ttl", "3600"])
    reader = _printed_key(made)
    listed = runner.invoke(cli, [*as_admin, "--json", "admin", "key", "list"])
    assert listed.exit_code == 0, listed.output
    keys = json.loads(listed.stdout)["keys"]
    assert sorted(k["name"] for k in keys) == ["admin", "reader"]
    assert reader not in listed.stdout
    assert admin_key not in listed.stdout
    as_reader = [*base, "--api-key", reader]
    assert runner.invoke(cli, [*as_reader, "list", "user:U1"]).exit_code == 0
    write = runner.invoke(cli, [*as_reader, "remember", "hello", "--stream", "user:U1"])
    assert write.exit_code == 2
    assert "SCOPE_MISSING" in write.stderr
    reader_id = next(k["key_id"] for k in keys if k["name"] == "reader")
    revoked = runner.invoke(cli, [*as_admin, "admin", "key", "revoke", reader_id])
    assert revoked.exit_code == 0, revoked.output
    assert f"revoked key {reader_id}" in revoked.stdout
    gone = runner.invoke(cli, [*as_reader, "list", "user:U1"])
    assert gone.exit_code == 2
    assert "KEY_REVOKED" in gone.stderr
    other = runner.invoke(cli, [*as_admin, "--tenant", "acme", "admin", "key", "list"])
    assert other.exit_code == 2
    assert "TENANT_MISMATCH" in other.stderr
    # a key limited to one tool records that tool's results only
    crm_only = ["admin", "key", "create", "--name", "crm", "--scope", "memory:write"]
    crm_key = _printed_key(runner.invoke(cli, [*as_admin, *crm_only, "--tool", "crm.get_deal"]))
    record = ["tool", "record", "--stream", "user:U1", "--source", "x", "--result", "1"]
    as_crm = [*base, "--api-key", crm_key]
    fx = runner.invoke(cli, [*as_crm, *record, "--tool", "fx.rate", "--fresh-for", "60"])
    assert fx.exit_code == 2
    assert "TOOL_NOT_ALLOWED" in fx.stderr
    crm = runner.invoke(cli, [*as_crm, *record, "--tool", "crm.get_deal", "--fresh-for", "60"])
    assert crm.exit_code == 0, crm.output
    # the tenant's last admin key stays; the operator gives an existing tenant a new one
    admin_id = next(k["key_id"] for k in keys if k["name"] == "admin")
    last = runner.invoke(cli, [*as_admin, "admin", "key", "revoke", admin_id])
    assert last.exit_code == 2
    assert "LAST_ADMIN_KEY" in last.stderr
    no_token = runner.invoke(cli, [*base, "admin", "tenant", "key", tenant])
    assert no_token.exit_code == 2
    assert "ADMIN_ONLY" in no_token.stderr
    rescue = runner.invoke(
        cli,
        [*base, "--admin-token", ADMIN_TOKEN, "admin", "tenant", "key", tenant, "--ttl", "600"],
    )
    rescue_key = _printed_key(rescue)
    as_rescue = [*base, "--api-key", rescue_key]
    outlives = runner.invoke(cli, [*as_rescue, "admin", "key", "revoke", admin_id])
    assert outlives.exit_code == 2  # a key for ten minutes cannot end one without an end
    assert "REVOKE_NOT_ALLOWED" in outlives.stderr
    lasting = _printed_key(
        runner.invoke(cli, [*base, "--admin-token", ADMIN_TOKEN, "admin", "tenant", "key", tenant])
    )
    revoke_admin = ["admin", "key", "revoke", admin_id]
    gone_admin = runner.invoke(cli, [*base, "--api-key", lasting, *revoke_admin])
    assert gone_admin.exit_code == 0, gone_admin.output


def test_admin_tenant_create_offline_on_a_data_directory(tmp_path: Path) -> None:
    from mnemo.bootstrap import make_key_vault, open_access
    from mnemo.domain.access import ALL_SCOPES

    data = tmp_path / "data"
    data.mkdir()
    runner = CliRunner()
    made = runner.invoke(cli, ["admin", "tenant", "create", "offco", "--data-dir", str(data)])
    key = _printed_key(made)
    again = runner.invoke(cli, ["admin", "tenant", "create", "offco", "--data-dir", str(data)])
    assert again.exit_code == 2
    assert "TENANT_EXISTS" in again.stderr
    second = _printed_key(
        runner.invoke(cli, ["admin", "tenant", "key", "offco", "--data-dir", str(data)])
    )
    unknown = runner.invoke(cli, ["admin", "tenant", "key", "noco", "--data-dir", str(data)])
    assert unknown.exit_code == 2
    assert "TENANT_NOT_FOUND" in unknown.stderr
    access = open_access(MnemoSettings(data_dir=data))
    try:
        assert access.authenticate(key).tenant == "offco"
        assert access.authenticate(second).scopes == frozenset(ALL_SCOPES)
        # a forgotten tenant (its key shredded) is issued no key offline either
        made_co = runner.invoke(
            cli, ["admin", "tenant", "create", "goneco", "--data-dir", str(data)]
        )
        _printed_key(made_co)
        vault = make_key_vault(MnemoSettings(data_dir=data))
        vault.data_key("goneco")
        vault.destroy("goneco")
        keys_before = len(access.keys("goneco"))
        refused = runner.invoke(cli, ["admin", "tenant", "key", "goneco", "--data-dir", str(data)])
        assert refused.exit_code == 2, refused.output
        assert "KEY_DESTROYED" in refused.stderr
        assert "mnemo_" not in refused.output
        assert len(access.keys("goneco")) == keys_before
    finally:
        access.store.close()
    missing = runner.invoke(
        cli, ["admin", "tenant", "create", "x", "--data-dir", str(tmp_path / "nothing")]
    )
    assert missing.exit_code == 1
    # a life past what the HTTP API allows is a wrong command line, not a crash
    for command in (["create", "longco"], ["key", "offco"]):
        too_long = runner.invoke(
            cli, ["admin", "tenant", *command, "--data-dir", str(data), "--ttl", "999999999999"]
        )
        assert too_long.exit_code == 1, too_long.output
        assert "--ttl" in too_long.stderr
        assert "Traceback" not in too_long.output


def test_tool_record_and_suggestions(mnemo: Invoke, stream: str) -> None:
    recorded = mnemo(
        "tool", "record", "--stream", stream, "--tool", "fx.rate", "--source", "ecb",
        "--result", '{"rate": 1.08}', "--arguments", '{"pair": "EUR/USD"}', "--fresh-for", "60",
    )  # fmt: skip
    assert recorded.exit_code == 0, recorded.output
    assert "registered" in recorded.output
    listed = mnemo("--json", "list", stream)
    [memory] = json.loads(listed.output)["memories"]
    assert memory["provenance"]["source_id"] == "tool:fx.rate"
    assert memory["fetched_at"] is not None
    none = mnemo("tool", "suggestions", stream)
    assert none.exit_code == 0
    assert "no suggested tool calls" in none.output
    bad = mnemo(
        "tool", "record", "--stream", stream, "--tool", "fx.rate", "--source", "ecb",
        "--result", "{nope", "--fresh-for", "60",
    )  # fmt: skip
    assert bad.exit_code == 1  # a local problem: the CLI reads the JSON itself
    assert "--result" in bad.output
    large = mnemo(
        "tool", "record", "--stream", stream, "--tool", "fx.rate", "--source", "ecb",
        "--result", json.dumps("x" * 6_000), "--fresh-for", "60",
    )  # fmt: skip
    assert large.exit_code == 2
    assert "error TOOL_RESULT_TOO_LARGE" in large.stderr


def test_context_names_the_constraint_it_kept_of_two_that_contradict(mnemo: Invoke) -> None:
    stream = "user:cli-conflict"
    for text in ("单笔转账上限为2万元", "单笔转账不得超过5万元"):
        said = mnemo("remember", text, "--stream", stream, "--type", "constraint")
        assert said.exit_code == 0, said.output
    shown = mnemo("context", "转账", "--subject", stream)
    assert shown.exit_code == 0, shown.output
    assert "1 left out" in shown.output
    [line] = [x for x in shown.output.splitlines() if x.startswith("conflict: ")]
    assert "单笔转账不得超过5万元" in line  # the later one: equal trust and scope, recency
    assert "单笔转账上限为2万元" in line
    assert "by recency" in line


def test_with_json_an_offline_command_writes_only_json_lines(tmp_path: Path) -> None:
    """An offline admin command's warnings (the development key files) came on stderr as
    plain text before the JSON: with --json each of them is a JSON line, stdout one JSON
    document."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MNEMO_") or k in ("MNEMO_RUN_DIR", "MNEMO_HELM")
    }
    env["MNEMO_EMBEDDER"] = "hashing"
    data = tmp_path / "data"
    build_embedded(MnemoSettings(data_dir=data, embedder="hashing")).close()
    for args, code in (
        (["admin", "checksum", "--data-dir", str(data)], 0),
        (["admin", "checksum", "--data-dir", str(tmp_path / "none")], 1),
    ):
        done = subprocess.run(
            [sys.executable, "-m", "mnemo", "--json", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == code, done.stderr
        said = [json.loads(x) for x in done.stderr.splitlines() if x.strip()]  # JSON, or fail
        if code == 0:
            assert set(json.loads(done.stdout)) == {"checksum"}
            warned = [p["message"] for p in said if p.get("level") == "WARNING"]
            assert len(warned) == 3, said
            assert all(w.startswith("development only") for w in warned), said
        else:
            assert done.stdout == ""
            assert said[-1]["error"]["exit_code"] == 1, said


def test_with_json_at_info_the_request_lines_are_redacted(
    server: tuple[str, Platform], tenant: str
) -> None:
    """With --json the CLI configures logging, so at MNEMO_LOG_LEVEL=INFO httpx prints each
    request line: a key pasted where an id goes is cut out of it, as the gateway's and the
    MCP server's logs cut it."""
    url, platform = server
    install_keys(platform, tenant)
    pasted = fixed_key(f"{tenant}x")
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("MNEMO_") or k in ("MNEMO_RUN_DIR", "MNEMO_HELM")
    }
    env["MNEMO_LOG_LEVEL"] = "INFO"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mnemo",
            "--json",
            "--url",
            url,
            "--api-key",
            fixed_key(tenant),
            "get",
            pasted,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0  # no such memory
    lines = [json.loads(x) for x in done.stderr.splitlines() if x.strip()]
    requests = [x["message"] for x in lines if "HTTP Request" in x.get("message", "")]
    assert requests, lines
    assert pasted not in done.stderr
    assert "_[redacted]" in requests[0]
