"""An Ed25519 checkpoint signer with its private key in a local file: DEVELOPMENT ONLY.

Used by the embedded mode when no OpenBao/Vault is configured (like the development key
file of `local_key_vault`). The key sits in a 0600 file next to the data, so anyone who can
write the store can usually read it too and sign a forged checkpoint: it shows how signed
checkpoints work and catches accidents, but it is no defence against someone with the data
directory. Production signs with OpenBao's transit engine (`vault_signer`), whose key
never leaves the vault.

The signature is `local:v1:<base64>` (one key version); the library signs and verifies,
nothing is computed by hand here.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import os
import re
import tempfile
from pathlib import Path

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from mnemo.domain.checkpoint import Signature
from mnemo.domain.errors import Unavailable
from mnemo.ports import Signer

__all__ = ["LocalFileSigner"]

log = logging.getLogger("mnemo.signer")

FORMAT = 1
FILE_MODE = 0o600
_VALUE = re.compile(r"^local:v1:([A-Za-z0-9+/]{86}==)$")


class LocalFileSigner(Signer):
    """One Ed25519 key for the whole data directory, created on first use."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.name = "local development key file"
        log.warning(
            "development only: audit checkpoints are signed with a key kept in a local file "
            "(%s); set MNEMO_VAULT_ADDR to sign with OpenBao/Vault transit",
            self.path,
        )
        self._key = self._load() if self.path.exists() else self._create()
        self._public = self._key.public_key()

    def sign(self, tenant: str, message: bytes) -> Signature:
        del tenant  # one key for the data directory; the message names the tenant
        raw = self._key.sign(message)
        return Signature(1, "local:v1:" + base64.b64encode(raw).decode("ascii"))

    def verify(self, tenant: str, message: bytes, signature: Signature) -> bool:
        del tenant
        found = _VALUE.fullmatch(signature.value)
        if found is None or signature.key_version != 1:
            return False
        try:
            self._public.verify(base64.b64decode(found.group(1)), message)
        except InvalidSignature:
            return False
        return True

    def _load(self) -> Ed25519PrivateKey:
        try:
            raw = json.loads(self.path.read_bytes())
            if raw.get("format") != FORMAT:
                raise ValueError("unsupported format")
            seed = base64.b64decode(raw["ed25519"], validate=True)
            return Ed25519PrivateKey.from_private_bytes(seed)
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            # never the file's content in the message: it is key material
            raise Unavailable(
                f"the audit signing key file {self.path} is unreadable or malformed "
                f"({type(exc).__name__})",
                code="AUDIT_SIGNER_UNAVAILABLE",
            ) from None

    def _create(self) -> Ed25519PrivateKey:
        key = Ed25519PrivateKey.generate()
        from cryptography.hazmat.primitives import serialization

        seed = key.private_bytes(
            serialization.Encoding.Raw,
            serialization.PrivateFormat.Raw,
            serialization.NoEncryption(),
        )
        body = json.dumps({"format": FORMAT, "ed25519": base64.b64encode(seed).decode("ascii")})
        directory = self.path.parent
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, "wb") as out:
                os.fchmod(out.fileno(), FILE_MODE)
                out.write(body.encode("ascii"))
                out.flush()
                os.fsync(out.fileno())
            os.link(tmp, self.path)  # fails when another process created it meanwhile
        except FileExistsError:
            return self._load()
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        return key

    def __repr__(self) -> str:
        return f"LocalFileSigner({str(self.path)!r})"
