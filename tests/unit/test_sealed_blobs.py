"""Blobs sealed before the blob store sees them: under the user's own key on a user stream
(shredded with the user), under the tenant's key elsewhere, bound to where they belong."""

from __future__ import annotations

from pathlib import Path

import pytest
from tests.vault_support import SwitchableVault

from mnemo.adapters.local_blobs import LocalBlobStore
from mnemo.domain.errors import InvalidInput, Unavailable
from mnemo.sealing import KeyCache, Sealer
from mnemo.service.blobs import SealedBlobs, digest_of

DOCUMENT = "甲方：XX科技有限公司\n第八条 违约金为合同金额的5%。".encode() * 50


@pytest.fixture
def blobs(tmp_path: Path) -> SealedBlobs:
    store = LocalBlobStore(tmp_path / "blobs", 64 * 1024)
    return SealedBlobs(store, Sealer(KeyCache(SwitchableVault(), ttl=30.0)))


def test_the_store_holds_ciphertext_and_the_plaintext_reads_back(blobs: SealedBlobs) -> None:
    digest = blobs.put("acme", "user:U1", DOCUMENT)
    assert digest == digest_of(DOCUMENT)
    raw = blobs.store.get("acme", "user:U1", digest)
    assert raw is not None
    # phrases long enough that random ciphertext never holds them by chance
    assert "XX科技有限公司".encode() not in raw
    assert "违约金为合同金额的5%".encode() not in raw
    assert blobs.get("acme", "user:U1", digest) == DOCUMENT
    assert blobs.put("acme", "user:U1", DOCUMENT) == digest  # content-addressed: once
    assert blobs.store.count("acme") == 1


def test_shredding_the_users_key_leaves_the_blob_unreadable(blobs: SealedBlobs) -> None:
    mine = blobs.put("acme", "user:U1", DOCUMENT)
    shared = blobs.put("acme", "session:S1", DOCUMENT)
    blobs.sealer.keys.destroy(blobs.sealer.key_id("acme", "user:U1"))
    assert blobs.get("acme", "user:U1", mine) is None
    assert blobs.get("acme", "session:S1", shared) == DOCUMENT  # the tenant's key lives
    blobs.sealer.keys.destroy("acme")
    assert blobs.get("acme", "session:S1", shared) is None


def test_a_blob_moved_to_another_stream_does_not_open(blobs: SealedBlobs, tmp_path: Path) -> None:
    digest = blobs.put("acme", "session:S1", DOCUMENT)
    raw = blobs.store.get("acme", "session:S1", digest)
    assert raw is not None
    blobs.store.put("acme", "session:S2", digest, raw)
    with pytest.raises(Unavailable) as refused:
        blobs.get("acme", "session:S2", digest)
    assert refused.value.code == "BLOB_UNREADABLE"


def test_the_limit_counts_the_plaintext(blobs: SealedBlobs) -> None:
    exactly = b"a" * blobs.max_bytes
    blobs.put("acme", "tenant", exactly)  # the seal's header does not push it over
    with pytest.raises(InvalidInput) as refused:
        blobs.put("acme", "tenant", exactly + b"a")
    assert refused.value.code == "DOCUMENT_TOO_LARGE"
    assert blobs.store.count("acme") == 1
