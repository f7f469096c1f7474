"""Contract of the BlobStore port: blobs read back byte for byte under their stream and
digest, stored once, listed and deleted by stream and by tenant, tenants kept apart, the
size limit enforced and bad names refused before they touch storage. Run against the local
directory (embedded) and Cassandra's chunked rows (distributed)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path
from typing import Any

import pytest

from mnemo.adapters.local_blobs import SEAL_OVERHEAD, LocalBlobStore
from mnemo.domain.errors import InvalidInput, Unavailable
from mnemo.ports import BlobStore

LIMIT = 3 * 1024 * 1024


def digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class BlobStoreContract:
    def make_store(self, tmp_path: Path) -> BlobStore:
        raise NotImplementedError

    @pytest.fixture
    def store(self, tmp_path: Path) -> BlobStore:
        return self.make_store(tmp_path)

    def test_a_blob_reads_back_exactly_in_its_own_stream_and_tenant(self, store: BlobStore) -> None:
        data = os.urandom(1_234_567)  # several Cassandra chunks, not a multiple of one
        store.put("acme", "user:U1", digest(data), data)
        assert store.get("acme", "user:U1", digest(data)) == data
        assert store.get("acme", "user:U2", digest(data)) is None
        assert store.get("globex", "user:U1", digest(data)) is None
        assert store.digests("acme", "user:U1") == [digest(data)]
        assert store.count("acme") == 1
        assert store.count("globex") == 0

    def test_a_put_is_idempotent_and_small_blobs_survive(self, store: BlobStore) -> None:
        small = "合同 §8.2".encode()
        store.put("acme", "tenant", digest(small), small)
        store.put("acme", "tenant", digest(small), small)
        assert store.get("acme", "tenant", digest(small)) == small
        assert store.count("acme") == 1

    def test_deletes_by_stream_and_by_tenant(self, store: BlobStore) -> None:
        blobs = {s: f"doc of {s}".encode() for s in ("user:U1", "user:U2", "session:S1")}
        for stream, data in blobs.items():
            store.put("acme", stream, digest(data), data)
        store.put("globex", "user:U1", digest(b"other"), b"other")
        assert store.delete_stream("acme", "user:U1") == 1
        assert store.get("acme", "user:U1", digest(blobs["user:U1"])) is None
        assert store.get("acme", "user:U2", digest(blobs["user:U2"])) == blobs["user:U2"]
        assert store.count("acme") == 2
        assert store.delete_tenant("acme") == 2
        assert store.count("acme") == 0
        assert store.digests("acme", "session:S1") == []
        assert store.get("globex", "user:U1", digest(b"other")) == b"other"

    def test_the_size_limit_refuses_before_storing(self, store: BlobStore) -> None:
        big = b"x" * (store.max_bytes + SEAL_OVERHEAD + 1)
        with pytest.raises(InvalidInput) as refused:
            store.put("acme", "user:U1", digest(big), big)
        assert refused.value.code == "DOCUMENT_TOO_LARGE"
        assert store.count("acme") == 0

    @pytest.mark.parametrize(
        ("tenant", "stream", "name", "code"),
        [
            ("../etc", "user:U1", "0" * 64, "INVALID_TENANT"),
            ("acme", "../../x", "0" * 64, "INVALID_STREAM"),
            ("acme", "user:U1", "../passwd", "INVALID_DIGEST"),
            ("acme", "user:U1", "A" * 64, "INVALID_DIGEST"),
        ],
    )
    def test_bad_names_are_refused(
        self, store: BlobStore, tenant: str, stream: str, name: str, code: str
    ) -> None:
        with pytest.raises(InvalidInput) as refused:
            store.put(tenant, stream, name, b"x")
        assert refused.value.code == code
        with pytest.raises(InvalidInput):
            store.get(tenant, stream, name)


class TestLocalBlobStore(BlobStoreContract):
    def make_store(self, tmp_path: Path) -> BlobStore:
        return LocalBlobStore(tmp_path / "blobs", LIMIT)

    def test_the_folders_are_private(self, tmp_path: Path) -> None:
        store = self.make_store(tmp_path)
        store.put("acme", "user:U1", digest(b"a"), b"a")
        assert (tmp_path / "blobs").stat().st_mode & 0o077 == 0
        assert not list((tmp_path / "blobs").rglob("*.part"))


class TestCassandraBlobStore(BlobStoreContract):
    @pytest.fixture
    def store(self, store_keyspace: tuple[Any, str]) -> BlobStore:
        from mnemo.adapters.cassandra_blobs import CassandraBlobStore

        session, keyspace = store_keyspace
        created = CassandraBlobStore(session, keyspace, LIMIT, chunk_bytes=256 * 1024)
        for tenant in ("acme", "globex"):
            created.delete_tenant(tenant)
        return created

    def test_a_blob_missing_chunks_is_unreadable_for_good(
        self, store: BlobStore, store_keyspace: tuple[Any, str]
    ) -> None:
        """Its index row is written last, so a blob whose chunks are gone is not one being
        written: BLOB_UNREADABLE (the registrar registers nothing of it), never a store
        outage that would hold the registrar back for ever."""
        session, keyspace = store_keyspace
        data = os.urandom(600_000)  # three chunks of 256 KiB
        store.put("acme", "user:U1", digest(data), data)
        session.execute(
            f"DELETE FROM {keyspace}.blob_chunks WHERE tenant = 'acme' AND stream = 'user:U1' "
            f"AND digest = '{digest(data)}' AND chunk = 1"
        )
        with pytest.raises(Unavailable) as refused:
            store.get("acme", "user:U1", digest(data))
        assert refused.value.code == "BLOB_UNREADABLE"
