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
    raw = blobs.store.get("acme", "user:U1", blobs.name_of("acme", "user:U1", digest))
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
    name = blobs.name_of("acme", "session:S1", digest)
    raw = blobs.store.get("acme", "session:S1", name)
    assert raw is not None
    blobs.store.put("acme", "session:S2", blobs.name_of("acme", "session:S2", digest), raw)
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


def test_the_store_names_a_blob_by_a_keyed_hash_not_the_documents_digest(
    blobs: SealedBlobs,
) -> None:
    """Whoever holds a document and the store (its names, or the tombstones a delete
    leaves) cannot tell whether that document is stored: the name is a keyed hash of the
    digest under the stream's key, different for each user, and nobody's once the user's
    key is destroyed."""
    digest = blobs.put("acme", "user:U1", DOCUMENT)
    blobs.put("acme", "user:U2", DOCUMENT)
    blobs.put("acme", "tenant", DOCUMENT)
    names = {s: blobs.store.digests("acme", s) for s in ("user:U1", "user:U2", "tenant")}
    assert all(len(n) == 1 for n in names.values()), names
    assert digest not in {n for found in names.values() for n in found}
    assert len({found[0] for found in names.values()}) == 3  # a name per key
    assert names["user:U1"] == [blobs.name_of("acme", "user:U1", digest)]
    blobs.sealer.keys.destroy(blobs.sealer.key_id("acme", "user:U1"))
    assert blobs.get("acme", "user:U1", digest) is None


def test_a_blob_stored_under_its_plain_digest_before_is_still_read(blobs: SealedBlobs) -> None:
    digest = blobs.put("acme", "session:S1", DOCUMENT)
    sealed = blobs.store.get("acme", "session:S1", blobs.name_of("acme", "session:S1", digest))
    assert sealed is not None
    blobs.store.delete_stream("acme", "session:S1")
    blobs.store.put("acme", "session:S1", digest, sealed)  # as stored before
    assert blobs.get("acme", "session:S1", digest) == DOCUMENT
    # the stand-in the log keeps for a forgotten document's digest finds nothing
    assert blobs.get("acme", "session:S1", "h" + "0" * 16) is None
