"""The blob store as the gateway and the consumers use it: every blob sealed before it is
stored, under the key its stream's events are sealed under (`Sealer.key_id`: a user's own
key on a `user:` stream when the tenant's policy gives users keys, the tenant's key
otherwise). Forgetting a user (or the tenant) destroys that key, so a copy of a blob that
outlives the delete (a backup, a Cassandra tombstone not yet compacted, a disk block)
cannot be read again.

A sealed blob reads `MNB1`, a 2-byte header length, a JSON header (key id, key version,
wrapped data key) and AES-256-GCM nonce and ciphertext, bound to the tenant, the key id,
the stream and the plaintext's digest. A blob is stored under a keyed hash of that digest
(HMAC-SHA256 under the search key of the key it is sealed under), not the digest itself:
a store's names, and the tombstones a delete leaves, then tell no one who holds a document
whether it is stored, and once the key is destroyed no one can tell at all. A blob is found
by the digest its event names; one stored before under the plain digest is still found
there. Nothing here logs a value or a key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from mnemo.domain.errors import InvalidInput, KeyDestroyed, Unavailable
from mnemo.ports import BlobStore
from mnemo.sealing import Sealer

__all__ = ["SealedBlobs", "digest_of"]

MAGIC = b"MNB1"
NONCE_BYTES = 12


def digest_of(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _aad(tenant: str, key_id: str, stream: str, digest: str) -> bytes:
    return f"mnemo-blob\x00{tenant}\x00{key_id}\x00{stream}\x00{digest}".encode()


class SealedBlobs:
    """Puts and gets of plaintext blobs over a BlobStore that only ever sees them sealed.
    The size limit is the store's, counted on the plaintext."""

    def __init__(self, store: BlobStore, sealer: Sealer) -> None:
        self.store = store
        self.sealer = sealer

    @property
    def max_bytes(self) -> int:
        return self.store.max_bytes

    def put(self, tenant: str, stream: str, data: bytes) -> str:
        """Seal and store `data`; its digest (the blob's name)."""
        if len(data) > self.store.max_bytes:
            raise InvalidInput(
                f"the document is {len(data)} bytes; the limit is {self.store.max_bytes}",
                code="DOCUMENT_TOO_LARGE",
                field="body",
            )
        digest = digest_of(data)
        name = self.name_of(tenant, stream, digest)
        if self.store.get(tenant, stream, name) is not None:
            return digest  # content-addressed: stored once
        key_id = self.sealer.key_id(tenant, stream)
        plain_key, wrapped, version = self.sealer.keys.data_key(key_id)
        nonce = os.urandom(NONCE_BYTES)
        sealed = AESGCM(plain_key).encrypt(nonce, data, _aad(tenant, key_id, stream, digest))
        header = json.dumps(
            {
                "key_id": key_id,
                "key_version": version,
                "wrapped_key": base64.b64encode(wrapped).decode("ascii"),
            },
            separators=(",", ":"),
        ).encode()
        blob = MAGIC + len(header).to_bytes(2, "big") + header + nonce + sealed
        self.store.put(tenant, stream, name, blob)
        return digest

    def name_of(self, tenant: str, stream: str, digest: str) -> str:
        """The name a blob of plaintext digest `digest` is stored under (64 hex digits).
        KeyDestroyed when the stream's key was destroyed, Unavailable when the vault cannot
        answer."""
        key = self.sealer.keys.search_key(self.sealer.key_id(tenant, stream))
        return hmac.new(key, f"blob\x00{digest}".encode(), hashlib.sha256).hexdigest()

    def get(self, tenant: str, stream: str, digest: str) -> bytes | None:
        """The plaintext, or None when the blob is gone or its key was destroyed."""
        try:
            name = self.name_of(tenant, stream, digest)
        except KeyDestroyed:
            return None
        blob = self.store.get(tenant, stream, name)
        if blob is None:
            # stored before blobs were named by a keyed hash (a digest is 64 hex digits;
            # a stand-in the log keeps for a forgotten one is not, and finds nothing)
            if len(digest) != 64:
                return None
            blob = self.store.get(tenant, stream, digest)
        if blob is None:
            return None
        try:
            if blob[:4] != MAGIC:
                raise ValueError("not a sealed blob")
            size = int.from_bytes(blob[4:6], "big")
            header = json.loads(blob[6 : 6 + size])
            rest = blob[6 + size :]
            key_id = str(header["key_id"])
            if key_id != tenant and not key_id.startswith(tenant + "/"):
                raise ValueError("a blob sealed under another tenant's key")
            wrapped = base64.b64decode(header["wrapped_key"], validate=True)
            plain_key = self.sealer.keys.unwrap(key_id, wrapped)
            data = AESGCM(plain_key).decrypt(
                rest[:NONCE_BYTES], rest[NONCE_BYTES:], _aad(tenant, key_id, stream, digest)
            )
        except KeyDestroyed:
            return None
        except (ValueError, KeyError, binascii.Error, InvalidTag, json.JSONDecodeError) as exc:
            raise Unavailable("a stored blob cannot be opened", code="BLOB_UNREADABLE") from exc
        return data
