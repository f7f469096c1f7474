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
        with pytest.raises(MnemoAPIError) as invalid:
            client.query([{"field": "nope", "op": "eq", "value": 1}])
        assert invalid.value.code == "QUERY_INVALID"
        assert invalid.value.field == "where[0].field"


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
