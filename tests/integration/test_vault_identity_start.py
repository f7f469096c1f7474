"""A process does not start on a vault that lost the deployment's keys: with them gone,
every value sealed before would read as `⟦redacted⟧`, as if every user had been
forgotten, and new values would be sealed under unrelated keys (mnemo.vault_identity).

The development key file of the embedded mode and Vault's transit keys of the distributed
mode are refused alike; tests/e2e/test_vault_outages.py wipes a real OpenBao."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pytest
from tests.distributed_support import (
    distributed_settings,
    drop_keyspace,
    require_services,
    running_distributed,
)
from tests.support import headers_for, refused_start, running_server

from mnemo.bootstrap import build_distributed
from mnemo.domain.errors import InvalidInput
from mnemo.domain.ids import new_event_id

PHONE = "+1 415 555 0199"


def test_the_embedded_server_refuses_a_data_directory_whose_key_file_was_lost(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    with (
        running_server(data) as (url, _platform),
        httpx.Client(base_url=url, headers=headers_for("acme", "agent-1"), timeout=60) as client,
    ):
        event = {
            "event_id": new_event_id(datetime.now(UTC)),
            "type": "MemoryDeclared",
            "schema_version": 1,
            "stream": "user:U1",
            "payload": {"memory": {"type": "fact", "content": f"my phone is {PHONE}"}},
        }
        answer = client.post("/v1/events?wait=registered", json=event)
        assert answer.status_code == 202, answer.text
    key_file = data / "keys" / "vault.json"
    assert key_file.is_file()
    key_file.unlink()  # as a lost volume or a mistaken clean-up would

    env = {"PATH": "/usr/bin:/bin", "MNEMO_DATA_DIR": str(data), "MNEMO_EMBEDDER": "hashing"}
    output = refused_start("mnemo", "serve", "--port", "1", env=env, timeout=120)
    assert "VAULT_KEY_MISSING" in output
    assert "MNEMO_KEY_FILE" in output
    # a consumer run as a process of its own on the data directory, the same
    output = refused_start("mnemo_registrar", env=env, timeout=120)
    assert "VAULT_KEY_MISSING" in output
    assert "MNEMO_KEY_FILE" in output
    # no key made behind the operator's back (the file opened empty holds none)
    assert not key_file.exists() or json.loads(key_file.read_bytes())["keys"] == {}


def test_a_distributed_process_refuses_a_vault_without_the_deployments_keys(
    tmp_path: Path,
) -> None:
    require_services()
    settings = distributed_settings(tmp_path / "data")
    first = build_distributed(settings, "first")
    try:
        recorded = first.access.store.vault_identity()
        assert recorded is not None
        assert len(recorded) == 32
        # the same vault and keyspace: starts
        build_distributed(settings, "again", with_index=False).close()
        # the same keyspace, but keys that are not there (as a wiped vault, or another)
        other = settings.model_copy(update={"vault_key_prefix": f"t{uuid.uuid4().hex[:10]}"})
        with pytest.raises(InvalidInput) as refused:
            build_distributed(other, "other", with_index=False)
        assert (refused.value.code, refused.value.field) == ("VAULT_KEY_MISSING", "vault_addr")
        assert "MNEMO_VAULT_ADDR" in refused.value.message
        assert first.access.store.vault_identity() == recorded
    finally:
        drop_keyspace(first)
        first.close()


def test_the_status_shows_a_vault_without_the_deployments_keys(tmp_path: Path) -> None:
    from mnemo.adapters.vault_key_vault import VaultKeyVault
    from mnemo.entrypoints.admin import backing_services
    from mnemo.vault_identity import IdentityGuardedVault

    settings = distributed_settings(tmp_path / "data")
    with running_distributed(settings) as platform:
        assert backing_services(platform)["vault"] == "ready"
        assert platform.sealer is not None
        guarded = platform.sealer.keys.vault
        assert isinstance(guarded, IdentityGuardedVault)
        # the address now answered by a vault without the keys (here: the same server
        # under other key names, as a wiped one has none of them)
        assert settings.vault_addr is not None
        assert settings.vault_token is not None
        guarded.inner = VaultKeyVault(
            settings.vault_addr,
            settings.vault_token.get_secret_value(),
            prefix=f"t{uuid.uuid4().hex[:10]}",
            timeout=3,
        )
        assert backing_services(platform)["vault"] == "keys_missing"
