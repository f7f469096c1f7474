"""A committed batch's checkpoints are signed with one call to the signer, each signature
checked on its own; a batch answer that is not whole (an item failed, one missing, one
malformed) stores no checkpoint at all, and the heads are signed again later."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from tests.unit.test_audit import chain, events

from mnemo.adapters.clocks import FixedClock
from mnemo.adapters.local_signer import LocalFileSigner
from mnemo.adapters.sqlite_anchors import SqliteCheckpointAnchors
from mnemo.adapters.sqlite_checkpoints import SqliteAuditCheckpoints
from mnemo.adapters.vault_signer import MAX_BATCH, VaultTransitSigner
from mnemo.domain.checkpoint import Signature
from mnemo.domain.errors import Unavailable
from mnemo.ports import Signer
from mnemo.service import checkpoints as checkpointing
from mnemo.service.checkpoints import AuditCheckpointer

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)


class CountingSigner(Signer):
    """A real signer that counts its calls, and can fail or answer short on demand."""

    def __init__(self, inner: Signer) -> None:
        self.inner = inner
        self.name = inner.name
        self.calls: list[int] = []  # the batch size of each call
        self.fail = False
        self.short = False

    def sign_batch(self, items: Sequence[tuple[str, bytes]]) -> list[Signature]:
        self.calls.append(len(items))
        if self.fail:
            raise Unavailable("signer down", code="VAULT_UNAVAILABLE")
        signatures = self.inner.sign_batch(items)
        return signatures[:-1] if self.short else signatures

    def verify(self, tenant: str, message: bytes, signature: Signature) -> bool:
        return self.inner.verify(tenant, message, signature)


@pytest.fixture(autouse=True)
def _no_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(checkpointing, "RETRY_SECONDS", 0.0)


def make(tmp_path: Path) -> tuple[AuditCheckpointer, CountingSigner]:
    signer = CountingSigner(LocalFileSigner(tmp_path / "keys" / "audit-signing.json"))
    c = AuditCheckpointer(
        signer,
        SqliteAuditCheckpoints(tmp_path / "checkpoints.sqlite3", "NORMAL"),
        FixedClock(T0),
        every=1_000,
        seconds=600,
        anchors=SqliteCheckpointAnchors(tmp_path / "anchors.sqlite3", "NORMAL"),
    )
    return c, signer


def observe_streams(c: AuditCheckpointer, streams: int, links: int = 3) -> None:
    for s in range(streams):
        for record in chain(events(links, stream=f"user:U{s}")):
            c.observe(record)


def test_a_committed_batch_of_many_streams_is_one_signing_call(tmp_path: Path) -> None:
    c, signer = make(tmp_path)
    observe_streams(c, 7)
    assert signer.calls == []  # no limit reached while the batch was written
    assert c.batch_committed() == 7
    assert signer.calls == [7]
    stored = c.checkpoints.of_tenant("acme")
    assert sorted(cp.stream for cp in stored) == [f"user:U{s}" for s in range(7)]
    for cp in stored:  # each signature over its own checkpoint, and no other's
        assert signer.verify("acme", cp.message(), cp.signature)
        for other in stored:
            if other is not cp:
                assert not signer.verify("acme", cp.message(), other.signature)
    assert c.checkpoints.of_tenant("acme") == sorted(
        c.anchors.of_tenant("acme"),  # type: ignore[union-attr]
        key=lambda cp: (cp.stream, cp.index),
    )


@pytest.mark.parametrize("failure", ["unavailable", "short answer"])
def test_a_batch_not_signed_whole_stores_nothing_and_is_signed_later(
    tmp_path: Path, failure: str
) -> None:
    c, signer = make(tmp_path)
    observe_streams(c, 4)
    signer.fail = failure == "unavailable"
    signer.short = failure == "short answer"
    assert c.batch_committed() == 0
    assert signer.calls == [4]
    assert c.checkpoints.of_tenant("acme") == []  # none stored half-signed
    assert c.anchors.of_tenant("acme") == []  # type: ignore[union-attr]
    assert c.failures == 1
    signer.fail = signer.short = False
    assert c.batch_committed() == 4  # every head still pending, all in the next call
    assert signer.calls == [4, 4]
    assert len(c.checkpoints.of_tenant("acme")) == 4


# ---- the transit adapter's reading of a batch answer, on a stand-in for hvac -----------------


class FakeTransit:
    """What hvac's transit client answers; `answer(inputs)` makes `batch_results`."""

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.requests: list[list[dict[str, str]]] = []

    def read_key(self, **_: Any) -> dict[str, Any]:
        return {"data": {"type": "ed25519", "exportable": False, "supports_signing": True}}

    def sign_data(self, *, batch_input: list[dict[str, str]], **_: Any) -> dict[str, Any]:
        self.requests.append(batch_input)
        return {"data": {"batch_results": self.answer(batch_input)}}


class FakeClient:
    def __init__(self, transit: FakeTransit) -> None:
        self.token = "s.unused"
        self.secrets = type("Secrets", (), {"transit": transit})()


def good(inputs: list[dict[str, str]]) -> list[dict[str, Any]]:
    return [{"signature": f"vault:v2:c2ln{i:04d}", "key_version": 2} for i in range(len(inputs))]


def transit_signer(answer: Any) -> tuple[VaultTransitSigner, FakeTransit]:
    transit = FakeTransit(answer)
    client: Any = FakeClient(transit)
    return VaultTransitSigner("http://vault.invalid", "s.unused", "audit", client=client), transit


ITEMS = [("acme", b"one"), ("acme", b"two"), ("globex", b"three")]


def test_a_whole_batch_answer_gives_one_signature_per_item_in_order() -> None:
    signer, transit = transit_signer(good)
    assert signer.sign_batch(ITEMS) == [Signature(2, f"vault:v2:c2ln{i:04d}") for i in range(3)]
    assert len(transit.requests) == 1
    assert [item["input"] for item in transit.requests[0]] == ["b25l", "dHdv", "dGhyZWU="]
    assert signer.sign_batch([]) == []
    assert len(transit.requests) == 1  # nothing to sign: no request


def test_a_large_batch_takes_as_few_requests_as_the_limit_allows() -> None:
    signer, transit = transit_signer(good)
    items = [("acme", str(i).encode()) for i in range(MAX_BATCH * 2 + 1)]
    assert len(signer.sign_batch(items)) == len(items)
    assert [len(r) for r in transit.requests] == [MAX_BATCH, MAX_BATCH, 1]


@pytest.mark.parametrize(
    "answer",
    [
        pytest.param(
            lambda inputs: [*good(inputs)[:1], {"error": "bad input"}, *good(inputs)[2:]],
            id="one item failed",
        ),
        pytest.param(lambda inputs: good(inputs)[:-1], id="one item missing"),
        pytest.param(lambda inputs: good(inputs) + good(inputs)[:1], id="one item too many"),
        pytest.param(
            lambda inputs: [*good(inputs)[:2], {"signature": "vault:v2:not base64!"}],
            id="a malformed signature",
        ),
        pytest.param(
            lambda inputs: [*good(inputs)[:2], {"signature": "vault:v2:c2ln", "key_version": 3}],
            id="a key version the signature does not carry",
        ),
        pytest.param(
            lambda inputs: [*good(inputs)[:2], {"signature": None, "error": ""}],
            id="an item without a signature",
        ),
        pytest.param(lambda inputs: None, id="no results"),
    ],
)
def test_a_batch_answer_that_is_not_whole_fails_closed(answer: Any) -> None:
    signer, _ = transit_signer(answer)
    with pytest.raises(Unavailable) as info:
        signer.sign_batch(ITEMS)
    assert info.value.code == "AUDIT_SIGNING_FAILED"
    assert "bad input" not in info.value.message
