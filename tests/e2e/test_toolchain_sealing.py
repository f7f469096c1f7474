"""A toolchain step's output and a failed step's reason and field go through the PII
detector and the tenant's policy like a tool result's: the toolchain read model holds
placeholders (never the values), reads open them for the caller, a value the policy
rejects refuses the step and one it masks stays masked, a step sent again is still a
duplicate, and forgetting the subject leaves nothing readable."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mnemo_gateway.app import create_app
from tests.support import gateway_client, headers_for, install_keys

from mnemo.adapters.clocks import FixedClock
from mnemo.bootstrap import Platform, build_embedded
from mnemo.settings import GatewaySettings, MnemoSettings

H = headers_for("acme")
CARD = "4111 1111 1111 1111"
CARD_DIGITS = "4111111111111111"
EMAIL = "bob.quill@example.org"
PHONE = "13812345678"
PLAN = ["lookup", "charge"]


def _platform(tmp_path: Path, clock: FixedClock, policy: str | None) -> Platform:
    policy_file = None
    if policy is not None:
        policy_file = tmp_path / "pii.yaml"
        policy_file.write_text(policy, encoding="utf-8")
    settings = MnemoSettings(
        data_dir=tmp_path / "data",
        embedder="hashing",
        sqlite_synchronous="NORMAL",
        pii_policy_file=policy_file,
    )
    platform = build_embedded(settings, clock=clock)
    install_keys(platform, "acme")
    return platform


@pytest.fixture
def made(tmp_path: Path, clock: FixedClock) -> Iterator[tuple[TestClient, Platform]]:
    platform = _platform(tmp_path, clock, None)
    with gateway_client(platform) as c:
        yield c, platform


def _stored(platform: Platform) -> str:
    """Every toolchain row of the store, as the bytes of its body hold it."""
    path = platform.settings.data_dir / "store.sqlite3"
    with sqlite3.connect(path) as db:
        return "\n".join(str(body) for (body,) in db.execute("SELECT body FROM toolchains"))


def _start(client: TestClient, subject: str, toolchain_id: str = "tc-1") -> None:
    body = {"toolchain_id": toolchain_id, "subject": subject, "steps": PLAN}
    started = client.post("/v1/toolchains", json=body, headers=H)
    assert started.status_code == 201, started.text


def _step(client: TestClient, step_id: str, body: Any, toolchain_id: str = "tc-1") -> Any:
    return client.post(f"/v1/toolchains/{toolchain_id}/steps/{step_id}", json=body, headers=H)


OUTPUT = {"card": CARD, "contact": {"email": EMAIL}, "amount": 12}
FAILED = {
    "status": "failed",
    "error": {
        "type": "declined",
        "field": f"phone {PHONE}",
        "reason": f"card {CARD_DIGITS} declined for {EMAIL}",
        "retryable": False,
    },
}


@pytest.mark.parametrize("subject", ["user:U7", "session:S7"])
def test_step_outputs_and_errors_are_stored_as_placeholders_and_read_opened(
    made: tuple[TestClient, Platform], subject: str
) -> None:
    client, platform = made
    _start(client, subject)
    recorded = _step(client, "lookup", {"status": "completed", "output": OUTPUT})
    assert recorded.status_code == 201, recorded.text
    assert recorded.json()["done"][0]["output"] == OUTPUT
    failed = _step(client, "charge", FAILED)
    assert failed.status_code == 201, failed.text
    assert failed.json()["failed"]["error"] == FAILED["error"]

    stored = _stored(platform)
    for kind in ("bank_card", "email", "phone"):
        assert f"⟦{kind}:" in stored, kind
    for value in (CARD, CARD_DIGITS, EMAIL, PHONE):
        assert value not in stored, value

    # a read opens them for the caller
    read = client.get("/v1/toolchains/tc-1", headers=H).json()
    assert read["done"][0]["output"] == OUTPUT
    assert read["failed"]["error"] == FAILED["error"]
    # the same outcome sent again is a duplicate, not a conflict
    again = _step(client, "lookup", {"status": "completed", "output": OUTPUT})
    assert again.status_code == 200, again.text
    assert again.json()["duplicate"] is True
    retried = _step(client, "charge", FAILED)
    assert retried.status_code == 200, retried.text  # the same failure, recorded once
    assert retried.json()["duplicate"] is True
    assert retried.json()["failed"]["attempts"] == 1
    other = _step(client, "lookup", {"status": "completed", "output": {**OUTPUT, "amount": 13}})
    assert other.status_code == 409, other.text


def test_forgetting_the_user_leaves_no_step_value_in_the_store(
    made: tuple[TestClient, Platform],
) -> None:
    client, platform = made
    _start(client, "user:U8")
    assert _step(client, "lookup", {"status": "completed", "output": OUTPUT}).status_code == 201
    forget = {"type": "ForgetRequested", "schema_version": 1, "stream": "user:U8", "payload": {}}
    answer = client.post("/v1/events?wait=registered", json=forget, headers=H)
    assert answer.status_code in (200, 202), answer.text
    assert client.get("/v1/toolchains/tc-1", headers=H).status_code == 404
    data = platform.settings.data_dir
    for file in sorted(data.glob("*.sqlite3*")):
        raw = file.read_bytes()
        for value in (CARD, CARD_DIGITS, EMAIL):
            assert value.encode() not in raw, (value, file.name)


POLICY = """
tenants:
  acme:
    actions: {bank_card: reject, email: mask}
"""


def test_the_tenant_policy_holds_for_step_outputs_and_errors(
    tmp_path: Path, clock: FixedClock
) -> None:
    platform = _platform(tmp_path, clock, POLICY)
    try:
        with TestClient(create_app(platform, GatewaySettings(wait_timeout=60))) as client:
            _start(client, "user:U9")
            refused = _step(client, "lookup", {"status": "completed", "output": OUTPUT})
            assert refused.status_code == 422, refused.text
            assert refused.json()["error"]["code"] == "SENSITIVE_VALUE_REJECTED"
            assert CARD not in refused.text
            refused = _step(client, "charge", FAILED)
            assert refused.status_code == 422, refused.text

            masked_output = {"contact": {"email": EMAIL}, "n": 1}
            recorded = _step(client, "lookup", {"status": "completed", "output": masked_output})
            assert recorded.status_code == 201, recorded.text
            shown = recorded.json()["done"][0]["output"]
            assert EMAIL not in str(shown)
            assert shown["contact"]["email"].endswith("@example.org")
            assert EMAIL not in _stored(platform)
            # the same outcome again: masked alike, so a duplicate
            again = _step(client, "lookup", {"status": "completed", "output": masked_output})
            assert again.status_code == 200, again.text
            assert again.json()["duplicate"] is True
            other = _step(client, "lookup", {"status": "completed", "output": {"n": 2}})
            assert other.status_code == 409, other.text
    finally:
        platform.close()
