"""Documents from the clients, against a real server: `mnemo ingest` (a refused file
named with its code), and the SDK's ingest_document and query, blocking and async."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from click.testing import CliRunner
from tests.e2e.test_documents_http import CONTRACTS, QUESTION
from tests.support import fixed_key, running_server

from mnemo.client import AsyncMnemoClient, MnemoAPIError, MnemoClient
from mnemo.entrypoints.cli import cli

TENANT = "acme"


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with running_server(tmp_path_factory.mktemp("server")) as (url, _platform):
        yield url


def test_the_cli_ingests_files_then_the_sdk_asks(server_url: str, tmp_path: Path) -> None:
    files = []
    for name, data in CONTRACTS.items():
        path = tmp_path / name
        path.write_bytes(data)
        files.append(str(path))
    runner = CliRunner()
    base = ["--url", server_url, "--api-key", fixed_key(TENANT), "--json"]
    done = runner.invoke(cli, [*base, "ingest", *files, "--subject", "user:CLI1"])
    assert done.exit_code == 0, done.output
    answer = json.loads(done.stdout)
    assert [d["status"] for d in answer["documents"]] == ["registered"] * 4
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"%PDF-1.7 not really")
    refused = runner.invoke(cli, [*base, "ingest", str(bad)])
    assert refused.exit_code == 2
    assert "DOCUMENT_MALFORMED" in refused.output
    with MnemoClient(server_url, tenant=TENANT, api_key=fixed_key(TENANT)) as client:
        found = client.query(QUESTION["where"], subjects=["user:CLI1"])
        assert found.total == 1
        assert found.documents[0].filename == "a.txt"
        assert any(h.clause == "8" for h in found.documents[0].hits)
        one = client.query(QUESTION["where"], subjects=["user:CLI1"], hits_limit=1)
        assert len(one.documents[0].hits) == 1
        assert one.documents[0].hits_total == len(found.documents[0].hits) > 1
        with pytest.raises(MnemoAPIError) as invalid:
            client.query([{"field": "nope", "op": "eq", "value": 1}])
        assert invalid.value.code == "QUERY_INVALID"
        assert invalid.value.field == "where[0].field"
        # one condition alone, and one subject alone, are taken as they are meant
        condition = QUESTION["where"][0]
        listed = client.query([condition], subjects=["user:CLI1"])
        alone = client.query(condition, subjects="user:CLI1")
        assert listed.total >= 1
        assert [d.filename for d in alone.documents] == [d.filename for d in listed.documents]
        for wrong in ("party_a = x", [("party_a", "eq", "x")], 7):
            with pytest.raises(TypeError, match="condition"):
                client.query(wrong)  # type: ignore[arg-type]
        # subjects that are no strings are refused, not sent as characters or digits
        for subjects in (b"user:CLI1", [1], 5, {"user:CLI1": 1}):
            with pytest.raises(TypeError, match="string"):
                client.query(condition, subjects=subjects)  # type: ignore[arg-type]
        # and an empty name is no subject: refused by Mnemo, not taken for "any subject"
        with pytest.raises(MnemoAPIError):
            client.query(condition, subjects="")


def test_the_async_sdk_ingests_and_asks(server_url: str) -> None:
    async def run() -> tuple[str, int]:
        async with AsyncMnemoClient(server_url, tenant=TENANT, api_key=fixed_key(TENANT)) as client:
            ingested = await client.ingest_document(
                CONTRACTS["d.txt"], "d.txt", subject="user:ASYNC1", wait="registered"
            )
            found = await client.query(
                [{"field": "party_a", "op": "eq", "value": "ZZ"}], subjects=["user:ASYNC1"]
            )
            return ingested.status, found.total

    assert asyncio.run(run()) == ("registered", 1)


def test_the_cli_asks_structured_questions_and_fills_a_context_section(
    server_url: str, tmp_path: Path
) -> None:
    from tests.e2e.test_documents_context import CLAUSES

    runner = CliRunner()
    base = ["--url", server_url, "--api-key", fixed_key(TENANT), "--json"]
    path = tmp_path / "a.txt"
    path.write_bytes(CONTRACTS["a.txt"])
    done = runner.invoke(cli, [*base, "ingest", str(path), "--subject", "user:CLI2"])
    assert done.exit_code == 0, done.output
    # each condition its own --where, or all in one list: the same answer as the SDK's
    one_by_one = [a for c in QUESTION["where"] for a in ("--where", json.dumps(c))]
    asked = runner.invoke(cli, [*base, "query", *one_by_one, "--subject", "user:CLI2"])
    assert asked.exit_code == 0, asked.output
    answer = json.loads(asked.stdout)
    listed = runner.invoke(
        cli,
        [*base, "query", "--where", json.dumps(QUESTION["where"]), "--subject", "user:CLI2"],
    )
    assert json.loads(listed.stdout) == answer
    with MnemoClient(server_url, tenant=TENANT, api_key=fixed_key(TENANT)) as client:
        found = client.query(QUESTION["where"], subjects=["user:CLI2"])
    assert answer["total"] == found.total == 1
    assert [d["document_id"] for d in answer["documents"]] == [
        d.document_id for d in found.documents
    ]
    # the table shows the place of each hit
    shown = runner.invoke(
        cli,
        [
            "--url",
            server_url,
            "--api-key",
            fixed_key(TENANT),
            "query",
            "--where",
            json.dumps(QUESTION["where"]),
            "--subject",
            "user:CLI2",
        ],
    )
    assert shown.exit_code == 0, shown.output
    assert "§8" in shown.stdout
    assert "a.txt" in shown.stdout
    # a condition the grammar refuses: the server's code and the path it names
    bad = json.dumps({"field": "nope", "op": "eq", "value": 1})
    refused = runner.invoke(cli, [*base, "query", "--where", bad])
    assert refused.exit_code == 2
    assert "QUERY_INVALID" in refused.output
    not_json = runner.invoke(cli, [*base, "query", "--where", "{party_a: x}"])
    assert not_json.exit_code != 0
    assert "not JSON" in not_json.output
    # a context whose query section is filled from the CLI's conditions
    with MnemoClient(server_url, tenant=TENANT, api_key=fixed_key(TENANT)) as client:
        client.register_template({**CLAUSES, "name": "cli-contracts"})
    zz = json.dumps([{"field": "party_a", "op": "eq", "value": "ZZ集团"}])
    ctx_base = [*base, "context", "--subject", "user:CLI2", "--template", "cli-contracts"]
    own = runner.invoke(cli, [*ctx_base])
    assert own.exit_code == 0, own.output
    hits = {
        i["memory"]["memory_id"]
        for i in json.loads(own.stdout)["included"]
        if i["section"] == "clauses"
    }
    assert hits  # the template's own conditions find a.txt's clause
    replaced = runner.invoke(cli, [*ctx_base, "--where", f"clauses={zz}"])
    assert replaced.exit_code == 0, replaced.output
    assert not [
        i for i in json.loads(replaced.stdout)["included"] if i["section"] == "clauses"
    ]  # user:CLI2 holds no ZZ集团 contract
    wrong = runner.invoke(cli, [*ctx_base, "--where", f"rules={zz}"])
    assert wrong.exit_code == 2
    assert "QUERY_INVALID" in wrong.output
    shapeless = runner.invoke(cli, [*ctx_base, "--where", zz])
    assert shapeless.exit_code != 0
    assert "SECTION=JSON" in shapeless.output
