"""A checkpoint signer on Vault's (or OpenBao's) transit engine, through hvac.

One named transit key of type ed25519 (or ecdsa-p256) signs every audit checkpoint of the
deployment: `transit/sign/<key>` makes a signature (``vault:v<N>:...``) and
`transit/verify/<key>` checks one. The private key never leaves the vault: it is created
not exportable and without plaintext backup, and the audit consumer's policy needs only
`update` on those two paths (docs/security.md). Whoever can write the store but holds no
such token cannot make a signature that verifies.

The named key is created at first use when missing. A key of that name whose type cannot
sign (an encryption key, say) is refused: signing or verifying then raises Unavailable
with code AUDIT_SIGNING_KEY_INVALID rather than trusting something else. Transport and
token errors raise Unavailable (VAULT_UNAVAILABLE), with the key's name and the status
only, never the token. The vault plumbing (token file, error translation) is
`vault_connection`'s; the transit mount is made as `VaultKeyVault` makes it.
"""

from __future__ import annotations

import base64
import contextlib
import re
import threading
from collections.abc import Sequence
from typing import Any

import hvac

from mnemo.adapters.vault_connection import Missing, Refused, TokenFile, data_of
from mnemo.adapters.vault_key_vault import VaultKeyVault
from mnemo.domain.checkpoint import Signature
from mnemo.domain.errors import InvalidInput, Unavailable
from mnemo.ports import Signer

__all__ = ["KEY_TYPES", "VaultTransitSigner"]

KEY_TYPES = ("ed25519", "ecdsa-p256")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$")
# messages per transit request: OpenBao refuses a request of 500 batch items or more as too
# complex (a JSON input limit), so a larger batch goes in several requests
SIGN_BATCH = 250
_SIGNATURE = re.compile(r"^vault:v([1-9][0-9]{0,8}):[A-Za-z0-9+/]+=*$")


class VaultTransitSigner(Signer):
    """Signs with the named transit key `key_name`; see the module docstring."""

    def __init__(
        self,
        url: str,
        token: str | TokenFile,
        key_name: str,
        *,
        key_type: str = "ed25519",
        mount: str = "transit",
        timeout: float = 3.0,
        client: hvac.Client | None = None,
    ) -> None:
        if not _NAME.fullmatch(key_name):
            raise InvalidInput(
                "the audit signing key name must be 1-128 letters, digits, '_', '.' or '-'",
                code="INVALID_SETTING",
                field="audit_signing_key",
            )
        if key_type not in KEY_TYPES:
            raise InvalidInput(
                f"the audit signing key type must be one of {', '.join(KEY_TYPES)}",
                code="INVALID_SETTING",
                field="audit_signing_key_type",
            )
        self.key_name = key_name
        self.key_type = key_type
        self.name = f"vault transit key {key_name}"
        self._vault = VaultKeyVault(url, token, mount=mount, timeout=timeout, client=client)
        self._lock = threading.Lock()
        self._checked = False

    def sign(self, tenant: str, message: bytes) -> Signature:
        del tenant  # one key for the deployment; the message names the tenant
        self._ensure_key()
        data = self._signing(
            lambda: self._transit.sign_data(
                name=self.key_name, hash_input=_b64(message), mount_point=self._vault.mount
            )
        )
        return _signature(data)

    def sign_many(self, messages: Sequence[tuple[str, bytes]]) -> list[Signature]:
        """One transit request (`batch_input`) per SIGN_BATCH messages; an item the vault
        could not sign fails the whole call, as one failed `sign` would."""
        if len(messages) < 2:
            return [self.sign(tenant, message) for tenant, message in messages]
        self._ensure_key()
        signatures: list[Signature] = []
        for start in range(0, len(messages), SIGN_BATCH):
            chunk = messages[start : start + SIGN_BATCH]
            data = self._signing(
                lambda chunk=chunk: self._transit.sign_data(
                    name=self.key_name,
                    batch_input=[{"input": _b64(message)} for _, message in chunk],
                    mount_point=self._vault.mount,
                )
            )
            results = data.get("batch_results")
            if not isinstance(results, list) or len(results) != len(chunk):
                raise Unavailable(
                    "the vault answered a batch of signatures that does not match the request",
                    code="VAULT_UNAVAILABLE",
                )
            if any(not isinstance(r, dict) or r.get("error") for r in results):
                raise Unavailable(
                    f"the vault did not sign every checkpoint of a batch with {self.key_name!r}",
                    code="VAULT_UNAVAILABLE",
                )
            signatures.extend(_signature(r) for r in results)
        return signatures

    def _signing(self, call: Any) -> dict[str, Any]:
        """A signing request's answer; a request the vault refuses is Unavailable, like an
        unreachable vault: the checkpoints stay pending and are signed later."""
        try:
            data = data_of(self._call(call), f"audit signing key {self.key_name!r}")
        except Refused:
            raise Unavailable(
                f"the vault refused to sign with the audit signing key {self.key_name!r}",
                code="VAULT_UNAVAILABLE",
            ) from None
        return data

    def verify(self, tenant: str, message: bytes, signature: Signature) -> bool:
        del tenant
        found = _SIGNATURE.fullmatch(signature.value)
        if found is None or int(found.group(1)) != signature.key_version:
            return False
        self._ensure_key()
        try:
            answer = self._call(
                lambda: self._transit.verify_signed_data(
                    name=self.key_name,
                    hash_input=_b64(message),
                    signature=signature.value,
                    mount_point=self._vault.mount,
                )
            )
        except Refused:  # a signature the key cannot read (unknown version, bad encoding)
            return False
        return data_of(answer, f"audit signing key {self.key_name!r}").get("valid") is True

    # ---- helpers --------------------------------------------------------------------------

    @property
    def _transit(self) -> Any:
        return self._vault.connection.client.secrets.transit

    def _call(self, call: Any) -> Any:
        """One call with the current token; no mount listing, which the audit writers'
        policy does not allow."""
        try:
            return self._vault.connection.call(f"audit signing key {self.key_name!r}", call)
        except Missing:
            raise Unavailable(
                f"the audit signing key {self.key_name!r} is missing from the vault",
                code="AUDIT_SIGNING_KEY_MISSING",
            ) from None

    def _read_key(self) -> dict[str, Any]:
        what = f"audit signing key {self.key_name!r}"
        return data_of(
            self._vault.connection.call(
                what,
                lambda: self._transit.read_key(name=self.key_name, mount_point=self._vault.mount),
            ),
            what,
        )

    def _create_key(self) -> None:
        def create() -> Any:
            return self._transit.create_key(
                name=self.key_name,
                key_type=self.key_type,
                exportable=False,
                allow_plaintext_backup=False,
                mount_point=self._vault.mount,
            )

        what = f"audit signing key {self.key_name!r}"
        # Refused: another process created it meanwhile; it is read next
        with contextlib.suppress(Refused):
            try:
                self._vault.connection.call(what, create)
            except Missing:  # no transit mount yet (a fresh development vault)
                self._vault._ensure_mount()
                self._vault.connection.call(what, create)

    def _ensure_key(self) -> None:
        """The named key exists and can sign: created when missing (never exportable)."""
        if self._checked:
            return
        with self._lock:
            if self._checked:
                return
            try:
                data = self._read_key()
            except Missing:
                self._create_key()
                try:
                    data = self._read_key()
                except Missing:
                    raise Unavailable(
                        f"the audit signing key {self.key_name!r} cannot be created",
                        code="AUDIT_SIGNING_KEY_MISSING",
                    ) from None
            if data.get("type") not in KEY_TYPES or not data.get("supports_signing", True):
                raise Unavailable(
                    f"the vault key {self.key_name!r} is a {data.get('type')} key, which "
                    "cannot sign audit checkpoints",
                    code="AUDIT_SIGNING_KEY_INVALID",
                )
            if data.get("exportable") is True:
                raise Unavailable(
                    f"the vault key {self.key_name!r} is exportable: an audit signing key "
                    "must never leave the vault",
                    code="AUDIT_SIGNING_KEY_INVALID",
                )
            self._checked = True

    def __repr__(self) -> str:
        return f"VaultTransitSigner({self._vault.url!r}, key={self.key_name!r})"


def _signature(data: dict[str, Any]) -> Signature:
    value = str(data.get("signature"))
    found = _SIGNATURE.fullmatch(value)
    if found is None:
        raise Unavailable("the vault answered a malformed signature", code="VAULT_UNAVAILABLE")
    return Signature(int(data.get("key_version") or found.group(1)), value)


def _b64(message: bytes) -> str:
    return base64.b64encode(message).decode("ascii")
