"""Rotating a key online and rewrapping the data keys stored in the read models, over HTTP
and with the CLI, with the in-memory vault and with the real OpenBao: reads keep working
throughout, stored memories end under the new key version and still open, the log's own
events keep the version recorded with them and still replay opened, and a rebuild from the
log ends the same. The routes take the tenant from the API key and need the admin scope."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from tests.shred_support import plant_markers
from tests.support import ALL, headers_for, install_keys, missing, running_server
from tests.vault_support import vault_settings

from mnemo.adapters.memory_key_vault import InMemoryKeyVault
from mnemo.bootstrap import build_embedded
from mnemo.domain.ids import new_event_id
from mnemo.entrypoints.admin import rebuild_read_models
from mnemo.entrypoints.cli import cli
from mnemo.handlers import registration
from mnemo.ports import KeyVault
from mnemo.settings import MnemoSettings

H = headers_for("acme", "ops")


def declare(content: str, stream: str = "user:U1") -> dict[str, Any]:
    return {
        "event_id": new_event_id(datetime.now(UTC)),
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": stream,
        "payload": {"memory": {"type": "fact", "content": content}},
    }


@pytest.fixture(params=["memory", "openbao"])
def vault(request: pytest.FixtureRequest) -> Iterator[KeyVault]:
    if request.param == "memory":
        yield InMemoryKeyVault()
        return
    url, token = vault_settings()
    if token is None:
        missing("OpenBao", "no MNEMO_VAULT_TOKEN, no var/run/services.env")
    from mnemo.adapters.vault_key_vault import VaultKeyVault

    yield VaultKeyVault(url, token, prefix=f"rot{uuid.uuid4().hex[:10]}", timeout=10)


def _error(r: httpx.Response) -> tuple[int, str, str | None]:
    error = r.json()["error"]
    return r.status_code, error["code"], error.get("field")


def test_rotate_and_rewrap_online(tmp_path: Path, vault: KeyVault) -> None:
    m = plant_markers()
    with running_server(tmp_path / "data", vault=vault) as (url, platform):
        install_keys(
            platform, "acme", label="no-admin", scopes=tuple(s for s in ALL if s != "admin")
        )
        client = httpx.Client(base_url=url, headers=H, timeout=30)
        batch = [
            declare(f"my card is {m.card}"),
            declare(f"my mail is {m.email}"),
            declare(f"my phone is {m.phone}"),
            declare(f"the shared ID is {m.id_number}", stream="team:ops"),
        ]
        r = client.post("/v1/events?wait=registered", json={"events": batch})
        assert r.status_code == 202, r.text
        ids = [a["outcomes"][0]["memory_id"] for a in r.json()["accepted"]]
        users, team = ids[:3], ids[3]
        before = {i: platform.store.get("acme", i) for i in ids}
        assert all(b is not None and b.sealed is not None for b in before.values())
        assert {before[i].sealed.key_version for i in ids} == {1}  # type: ignore[union-attr]
        texts = {i: client.get(f"/v1/memories/{i}").json()["content"] for i in ids}
        assert texts[users[0]] == f"my card is {m.card}"

        userless = client.post("/v1/admin/keys/rotate", json={"stream": "user:"})
        assert userless.status_code == 400, userless.text
        assert userless.json()["error"]["code"] == "INVALID_STREAM"
        r = client.post("/v1/admin/keys/rotate", json={"stream": "user:U1"})
        assert r.status_code == 200, r.text
        assert r.json() == {"key_id": "acme/user:U1", "key_version": 2}
        assert client.get(f"/v1/memories/{users[1]}").json()["content"] == texts[users[1]]

        pages: list[dict[str, Any]] = []
        after = None
        while True:
            r = client.post(
                "/v1/admin/keys/rewrap", json={"stream": "user:U1", "after": after, "limit": 2}
            )
            assert r.status_code == 200, r.text
            pages.append(r.json())
            # reads go on between pages, whichever wrapped key a memory holds
            assert client.get(f"/v1/memories/{users[0]}").json()["content"] == texts[users[0]]
            after = r.json()["next"]
            if after is None:
                break
        assert [p["scanned"] for p in pages] == [2, 1]
        assert sum(p["rewrapped"] for p in pages) == 3
        assert {v for p in pages for v in p["key_versions"]} == {2}
        for marker in m.all():  # the answers hold no value (and no key)
            assert marker not in str(pages)
        assert platform.runner.wait_for(registration.CONSUMER, platform.log.head(), 60)

        def stored_state() -> dict[str, tuple[int, str | None]]:
            out = {}
            for i in ids:
                memory = platform.store.get("acme", i)
                assert memory is not None
                assert memory.sealed is not None
                out[i] = (memory.sealed.key_version, memory.sealed.wrapped_key)
            return out

        moved = stored_state()
        for i in users:
            assert moved[i][0] == 2
            assert moved[i][1] != before[i].sealed.wrapped_key  # type: ignore[union-attr]
            assert client.get(f"/v1/memories/{i}").json()["content"] == texts[i]
        assert moved[team] == (1, before[team].sealed.wrapped_key)  # type: ignore[union-attr]
        # the log's events keep the version that sealed them, and still open
        replayed = client.get("/v1/subjects/user:U1/events").json()["events"]
        declared = [e for e in replayed if e["type"] == "MemoryDeclared"]
        assert [e["encryption"]["key_version"] for e in declared] == [1, 1, 1]
        assert [e["payload"]["memory"]["content"] for e in declared] == [texts[i] for i in users]
        # a second run finds nothing left to move
        again = client.post("/v1/admin/keys/rewrap", json={"stream": "user:U1"}).json()
        assert (again["scanned"], again["rewrapped"], again["event_ids"]) == (3, 0, [])
        # the rewrap is in the log: a rebuild ends with the same keys
        rebuild_read_models(platform)
        assert stored_state() == moved
        assert client.get(f"/v1/memories/{users[2]}").json()["content"] == texts[users[2]]

        # the tenant's own key, for the memories of every other stream
        r = client.post("/v1/admin/keys/rotate", json={})
        assert r.json() == {"key_id": "acme", "key_version": 2}
        r = client.post("/v1/admin/keys/rewrap", json={})
        assert (r.json()["rewrapped"], r.json()["key_versions"]) == (1, [2])
        assert platform.runner.wait_for(registration.CONSUMER, platform.log.head(), 60)
        assert stored_state()[team][0] == 2
        assert client.get(f"/v1/memories/{team}").json()["content"] == texts[team]

        # refusals, in the error shape
        bad = {"stream": "team:ops"}
        r = client.post("/v1/admin/keys/rewrap", json=bad)
        assert _error(r) == (400, "NO_KEY_OF_ITS_OWN", "stream")
        assert client.post("/v1/admin/keys/rewrap", json={"limit": 0}).status_code == 422
        # a body that is not an object is no "no options": it rotated the tenant's key once
        for path in ("/v1/admin/keys/rotate", "/v1/admin/keys/rewrap"):
            for body in ("[]", "null", "1"):
                r = client.post(path, content=body, headers={"content-type": "application/json"})
                assert _error(r)[:2] == (422, "VALIDATION_ERROR"), (path, body)
        assert client.post("/v1/admin/keys/rotate", json={}).json()["key_version"] == 3
        assert client.post("/v1/admin/keys/rotate", json={"tenant": "globex"}).status_code == 422
        r = client.post("/v1/admin/keys/rotate", json={"stream": "bad stream"})
        assert _error(r) == (400, "INVALID_STREAM", "stream")
        for path in ("/v1/admin/keys/rotate", "/v1/admin/keys/rewrap"):
            r = httpx.post(f"{url}{path}", json={}, timeout=30)
            assert _error(r)[:2] == (401, "UNAUTHENTICATED")
            r = httpx.post(f"{url}{path}", json={}, headers=headers_for("acme", label="no-admin"))
            assert _error(r)[:2] == (403, "SCOPE_MISSING")
        # another tenant's key rotates and rewraps that tenant's keys only
        other = httpx.Client(base_url=url, headers=headers_for("globex", "ops"), timeout=30)
        r = other.post("/v1/admin/keys/rotate", json={"stream": "user:U1"})
        assert r.json()["key_id"] == "globex/user:U1"
        r = other.post("/v1/admin/keys/rewrap", json={"stream": "user:U1"})
        assert (r.json()["scanned"], r.json()["rewrapped"]) == (0, 0)
        assert stored_state() == {**moved, team: stored_state()[team]}
        # a forgotten user's key is gone: nothing to rotate
        forget = {**declare("x"), "type": "ForgetRequested", "payload": {}}
        assert client.post("/v1/events?wait=registered", json=forget).status_code == 202
        r = client.post("/v1/admin/keys/rotate", json={"stream": "user:U1"})
        assert _error(r)[:2] == (410, "KEY_DESTROYED")
        other.close()
        client.close()


def test_cli_rotates_and_rewraps_offline_and_through_the_server(tmp_path: Path) -> None:
    data = tmp_path / "data"
    runner = CliRunner()
    with running_server(data) as (url, platform):
        client = httpx.Client(base_url=url, headers=H, timeout=30)
        batch = [declare(f"mail {i}.x@example.com") for i in range(3)]
        r = client.post("/v1/events?wait=registered", json={"events": batch})
        assert r.status_code == 202, r.text
        ids = [a["outcomes"][0]["memory_id"] for a in r.json()["accepted"]]
        env = {"MNEMO_URL": url, "MNEMO_API_KEY": H["Authorization"].split()[1]}
        done = runner.invoke(cli, ["keys", "rotate", "--stream", "user:U1", "--rewrap"], env=env)
        assert done.exit_code == 0, done.output
        assert "key acme/user:U1 is now at version 2; 3 of 3 memories rewrapped" in done.output
        assert "rewrapping: 3 of 3 memories so far" in done.output
        assert platform.runner.wait_for(registration.CONSUMER, platform.log.head(), 60)
        for i in ids:
            memory = platform.store.get("acme", i)
            assert memory is not None
            assert memory.sealed is not None
            assert memory.sealed.key_version == 2
        client.close()
    # offline, on the data directory (no server on it)
    done = runner.invoke(
        cli,
        ["--tenant", "acme", "keys", "rotate", "--stream", "user:U1", "--rewrap",
         "--data-dir", str(data)],
        env={"MNEMO_EMBEDDER": "hashing"},
    )  # fmt: skip
    assert done.exit_code == 0, done.output
    assert "key acme/user:U1 is now at version 3; 3 of 3 memories rewrapped" in done.output
    offline = build_embedded(
        MnemoSettings(data_dir=data, embedder="hashing", sqlite_synchronous="NORMAL")
    )
    try:  # registration applied the rewrapped keys before the command closed the directory
        versions = [offline.store.get("acme", i) for i in ids]
        assert [m.sealed.key_version for m in versions if m and m.sealed] == [3, 3, 3]
    finally:
        offline.close()
    refused = runner.invoke(
        cli,
        ["--tenant", "acme", "keys", "rotate", "--stream", "team:ops", "--rewrap",
         "--data-dir", str(data)],
        env={"MNEMO_EMBEDDER": "hashing"},
    )  # fmt: skip
    assert refused.exit_code == 1
    assert "NO_KEY_OF_ITS_OWN" in refused.output
