"""The blob store as the gateway and the consumers use it: every blob sealed before it is
stored, under the key its stream's events are sealed under (`Sealer.key_id`: a user's own
key on a `user:` stream when the tenant's policy gives users keys, the tenant's key
otherwise). Forgetting a user (or the tenant) destroys that key, so a copy of a blob that
outlives the delete (a backup, a Cassandra tombstone not yet compacted, a disk block)
cannot be read again.

A sealed blob reads `MNB1`, a 2-byte header length, a JSON header (key id, key version,
wrapped data key) and AES-256-GCM nonce and ciphertext, bound to the tenant, the key id,
the stream and the plaintext's digest. The blob keeps its name (the plaintext's sha256):
a blob is found by the digest its event names. Nothing here logs a value or a key.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
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
        if self.store.get(tenant, stream, digest) is not None:
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
        self.store.put(tenant, stream, digest, blob)
        return digest

    def get(self, tenant: str, stream: str, digest: str) -> bytes | None:
        """The plaintext, or None when the blob is gone or its key was destroyed."""
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
