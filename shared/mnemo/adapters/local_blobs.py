"""Blobs in a local directory (embedded mode): `<root>/<tenant>/<stream, hex>/<digest>`.

A blob is written to a temporary file in its folder, flushed to disk and renamed into
place, so a reader sees the whole blob or none; the folders are private to the process's
user (0700). Names are checked before they touch a path (a tenant, a stream and 64 hex
digits), so nothing a caller sends can reach outside the root."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from mnemo.domain.errors import InvalidInput, Unavailable
from mnemo.domain.ids import valid_stream, valid_tenant
from mnemo.ports import BlobStore

__all__ = ["LocalBlobStore", "check_blob"]

DIGEST = re.compile(r"^[0-9a-f]{64}$")
# the limit is the plaintext's; a sealed blob carries a header, a nonce and a tag on top
SEAL_OVERHEAD = 4_096


def check_blob(tenant: str, stream: str, digest: str, size: int | None, max_bytes: int) -> None:
    """The checks every adapter makes before a put (or a read: `size` None)."""
    if not valid_tenant(tenant):
        raise InvalidInput("invalid tenant", code="INVALID_TENANT", field="tenant")
    if not valid_stream(stream):
        raise InvalidInput("invalid subject stream", code="INVALID_STREAM", field="subject")
    if not DIGEST.fullmatch(digest):
        raise InvalidInput("a blob digest is 64 hex digits", code="INVALID_DIGEST", field="sha256")
    if size is not None and size > max_bytes + SEAL_OVERHEAD:
        raise InvalidInput(
            f"the document is {size} bytes; the limit is {max_bytes}",
            code="DOCUMENT_TOO_LARGE",
            field="body",
        )


class LocalBlobStore(BlobStore):
    def __init__(self, root: Path, max_bytes: int) -> None:
        self.root = root
        self.max_bytes = max_bytes
        try:
            root.mkdir(parents=True, exist_ok=True, mode=0o700)
        except OSError as exc:
            raise Unavailable(
                f"the blob store cannot be opened: {type(exc).__name__}", code="STORE_UNAVAILABLE"
            ) from exc

    def _folder(self, tenant: str, stream: str) -> Path:
        return self.root / tenant / stream.encode().hex()

    def put(self, tenant: str, stream: str, digest: str, data: bytes) -> None:
        check_blob(tenant, stream, digest, len(data), self.max_bytes)
        folder = self._folder(tenant, stream)
        target = folder / digest
        try:
            if target.exists():
                return
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            temporary = folder / f".{digest}.{os.getpid()}.part"
            with open(temporary, "wb") as out:
                out.write(data)
                out.flush()
                os.fsync(out.fileno())
            os.replace(temporary, target)
            descriptor = os.open(folder, os.O_RDONLY)
            try:
                os.fsync(descriptor)
            finally:
                os.close(descriptor)
        except OSError as exc:
            raise Unavailable(
                f"the blob store cannot write: {type(exc).__name__}", code="STORE_UNAVAILABLE"
            ) from exc

    def get(self, tenant: str, stream: str, digest: str) -> bytes | None:
        check_blob(tenant, stream, digest, None, self.max_bytes)
        try:
            return (self._folder(tenant, stream) / digest).read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise Unavailable(
                f"the blob store cannot read: {type(exc).__name__}", code="STORE_UNAVAILABLE"
            ) from exc

    def digests(self, tenant: str, stream: str) -> list[str]:
        check_blob(tenant, stream, "0" * 64, None, self.max_bytes)
        folder = self._folder(tenant, stream)
        if not folder.is_dir():
            return []
        return sorted(p.name for p in folder.iterdir() if DIGEST.fullmatch(p.name))

    def delete_stream(self, tenant: str, stream: str) -> int:
        found = len(self.digests(tenant, stream))
        shutil.rmtree(self._folder(tenant, stream), ignore_errors=True)
        return found

    def delete_tenant(self, tenant: str) -> int:
        found = self.count(tenant)
        shutil.rmtree(self.root / tenant, ignore_errors=True)
        return found

    def count(self, tenant: str) -> int:
        if not valid_tenant(tenant):
            raise InvalidInput("invalid tenant", code="INVALID_TENANT", field="tenant")
        folder = self.root / tenant
        if not folder.is_dir():
            return 0
        return sum(1 for s in folder.iterdir() for p in s.iterdir() if DIGEST.fullmatch(p.name))
