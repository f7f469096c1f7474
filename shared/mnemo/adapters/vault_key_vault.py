"""A key vault on Vault's (or OpenBao's) transit engine, through hvac.

Every key_id is one named transit key (type aes256-gcm96). The master keys never leave
Vault:

* `data_key` asks transit's datakey endpoint for a fresh 256-bit key: the plaintext comes
  back once, with its copy wrapped by the named key (``vault:v<N>:...``). Callers keep the
  wrapped copy and drop the plaintext as soon as they can.
* `unwrap` is transit decrypt; `rewrap` is transit rewrap (the plaintext never leaves
  Vault), so stored wrapped keys move to the newest version while every old version still
  decrypts: rotation needs no downtime.
* `search_key` is transit HMAC of a fixed label under version 1 of the named key: stable
  across rotations, and gone with the key.
* `destroy` first leaves a tombstone (a second, empty named key ``<name>.shredded``), then
  allows deletion and deletes the key: its material is gone from Vault, nothing wrapped
  under it can be unwrapped again, and the tombstone stops the name being re-created.

The token is a string, or a `TokenFile`: the file Vault Agent keeps the current token in
(the connection, its token and its error translation are `vault_connection`'s, shared with
the audit signer and anchors).

Connection failures, timeouts, a sealed or uninitialised vault and a refused token raise
Unavailable (code VAULT_UNAVAILABLE, 503). A missing key raises KeyDestroyed when Mnemo
destroyed it or it never existed; a transit mount that is missing although this process
saw it means the vault lost its keys, and raises Unavailable with code VAULT_KEY_MISSING
(503), never a stray internal error. Error
messages name the key and the HTTP status, never the token, the ciphertext or Vault's own
message text.
"""

from __future__ import annotations

import base64
import contextlib
import functools
import hashlib
import logging
import re
import threading
from collections.abc import Callable
from typing import Any, ParamSpec, TypeVar

import hvac

from mnemo.adapters.vault_connection import (
    Missing,
    Refused,
    TokenFile,
    VaultConnection,
    data_of,
)
from mnemo.domain.errors import InvalidInput, KeyDestroyed, MnemoError, Unavailable
from mnemo.ports import IDENTITY_KEY_ID, IDENTITY_LABEL, KeyVault

__all__ = ["TokenFile", "VaultKeyVault"]

log = logging.getLogger("mnemo.keyvault")

KEY_TYPE = "aes256-gcm96"
TOMBSTONE = ".shredded"
SEARCH_LABEL = b"mnemo-search-key\x00"
_WRAPPED = re.compile(r"^vault:v([1-9][0-9]{0,8}):[A-Za-z0-9+/]+=*$")
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_T = TypeVar("_T")
_P = ParamSpec("_P")


def _coded(method: Callable[_P, _T]) -> Callable[_P, _T]:
    """A port method whose every failure is coded: a `Missing` or `Refused` the method does
    not give a meaning to (a mount list, a key read or a rotation the vault answers with
    an unexpected 404 or 400) is the vault failing, VAULT_UNAVAILABLE, never a stray
    internal error."""

    @functools.wraps(method)
    def call(*args: _P.args, **kwargs: _P.kwargs) -> _T:
        try:
            return method(*args, **kwargs)
        except (Missing, Refused) as exc:
            raise Unavailable(
                f"the vault answered {method.__name__} unexpectedly ({type(exc).__name__})",
                code="VAULT_UNAVAILABLE",
            ) from None

    return call


def _shown(key_id: str) -> str:
    """A key as messages (and so logs and tracebacks) name it: a user's key names the
    tenant, not the user, whom a forget is for."""
    tenant, _, rest = key_id.partition("/")
    return repr(tenant) if not rest else f"of a user of {tenant!r}"


class VaultKeyVault(KeyVault):
    """Per-key_id named keys in a transit mount; see the module docstring."""

    def __init__(
        self,
        url: str,
        token: str | TokenFile,
        *,
        mount: str = "transit",
        prefix: str = "mnemo",
        timeout: float = 3.0,
        client: hvac.Client | None = None,
    ) -> None:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_-]{0,63}", prefix):
            raise InvalidInput("vault key prefix must be 1-64 letters, digits, '_' or '-'")
        self.connection = VaultConnection(url, token, mount=mount, timeout=timeout, client=client)
        self.url = url
        self.mount = self.connection.mount
        self.prefix = prefix
        self._client = self.connection.client
        self._lock = threading.Lock()
        self._mount_ready = False
        self._mount_seen = False

    # ---- the port -----------------------------------------------------------------------

    @_coded
    def data_key(self, key_id: str) -> tuple[bytes, bytes, int]:
        name = self.name_of(key_id)
        data = data_of(
            self._with_key(
                key_id,
                lambda: self._transit.generate_data_key(
                    name=name, key_type="plaintext", bits=256, mount_point=self.mount
                ),
            ),
            f"key {_shown(key_id)}",
        )
        plaintext = base64.b64decode(data["plaintext"])
        wrapped = str(data["ciphertext"]).encode("ascii")
        return plaintext, wrapped, int(data["key_version"])

    @_coded
    def unwrap(self, key_id: str, wrapped: bytes) -> bytes:
        data = self._on_wrapped(key_id, wrapped, self._transit.decrypt_data)
        plaintext = base64.b64decode(data["plaintext"])
        if len(plaintext) != 32:
            raise InvalidInput("not a wrapped data key", code="BAD_WRAPPED_KEY")
        return plaintext

    @_coded
    def rewrap(self, key_id: str, wrapped: bytes) -> tuple[bytes, int]:
        data = self._on_wrapped(key_id, wrapped, self._transit.rewrap_data)
        rewrapped = str(data["ciphertext"])
        found = _WRAPPED.fullmatch(rewrapped)
        version = data.get("key_version") or (found.group(1) if found else 0)
        return rewrapped.encode("ascii"), int(version)

    @_coded
    def rotate(self, key_id: str) -> int:
        name = self.name_of(key_id)
        try:
            self._call(key_id, lambda: self._transit.rotate_key(name=name, mount_point=self.mount))
        except Missing:
            self._create(key_id)
            return 1
        return self._latest_version(key_id)

    @_coded
    def search_key(self, key_id: str) -> bytes:
        return self._search_key(key_id, self._with_key)

    def _search_key(self, key_id: str, run: Callable[[str, Callable[[], Any]], Any]) -> bytes:
        """The search key of key_id, its HMAC call made by `run` (which may make the key
        first, or not)."""
        name = self.name_of(key_id)
        label = base64.b64encode(SEARCH_LABEL + key_id.encode()).decode("ascii")
        data = data_of(
            run(
                key_id,
                lambda: self._transit.generate_hmac(
                    name=name, hash_input=label, key_version=1, mount_point=self.mount
                ),
            ),
            f"key {_shown(key_id)}",
        )
        return hashlib.sha256(str(data["hmac"]).encode("ascii")).digest()

    @_coded
    def destroy(self, key_id: str) -> None:
        name = self.name_of(key_id)
        self._ensure_mount()
        # the tombstone first: a crash between the two steps leaves the key refused anyway
        try:
            self._call(
                key_id,
                lambda: self._transit.create_key(
                    name=name + TOMBSTONE, key_type=KEY_TYPE, mount_point=self.mount
                ),
            )
        except Missing:  # no mount to write it in
            raise self._gone(key_id) from None
        try:
            self._call(
                key_id,
                lambda: self._transit.update_key_configuration(
                    name=name, deletion_allowed=True, mount_point=self.mount
                ),
            )
            self._call(key_id, lambda: self._transit.delete_key(name=name, mount_point=self.mount))
        except Missing:
            pass  # never created, or already destroyed
        # the tenant only: a user's key id names the user, whom the forget is for
        log.info("a key of tenant %s destroyed (crypto-shredded)", key_id.split("/", 1)[0])

    @_coded
    def has_key(self, key_id: str) -> bool:
        return self._exists(key_id, self.name_of(key_id))

    @_coded
    def is_destroyed(self, key_id: str) -> bool:
        return self._exists(key_id, self.name_of(key_id) + TOMBSTONE)

    @_coded
    def identity(self, *, create: bool) -> bytes | None:
        if create:
            return super().identity(create=True)
        # asked without `create`, nothing is made: not the mount, not the key
        with self._lock:
            if not self._mount_ready and not self._mounted():
                return None  # a vault without the transit mount has no identity
            self._mount_ready = self._mount_seen = True
        try:
            found = self._search_key(IDENTITY_KEY_ID, self._vault_on_key)
        except Missing:
            return None
        return hashlib.sha256(IDENTITY_LABEL + found).digest()

    def _vault_on_key(self, key_id: str, call: Callable[[], _T]) -> _T:
        return self._vault(f"key {_shown(key_id)}", call)

    # ---- helpers --------------------------------------------------------------------------

    def name_of(self, key_id: str) -> str:
        """The transit key name of a key_id: readable, and unique through a short hash."""
        if not isinstance(key_id, str) or not key_id:
            raise InvalidInput("key_id must be a non-empty string", field="key_id")
        readable = _UNSAFE.sub("_", key_id)[:80]
        digest = hashlib.sha256(key_id.encode()).hexdigest()[:10]
        return f"{self.prefix}-{readable}-{digest}"

    @property
    def _transit(self) -> Any:
        return self._client.secrets.transit

    def _mounted(self) -> bool:
        try:
            mounts = self._vault("the mount list", self._client.sys.list_mounted_secrets_engines)
        except (Missing, Refused) as exc:
            # Vault lists its mounts for a token it takes: a 404 or 400 here is no Vault,
            # and must not read as a key missing or a wrapped key refused
            raise Unavailable(
                f"the vault answered the mount list unexpectedly ({type(exc).__name__})",
                code="VAULT_UNAVAILABLE",
            ) from None
        return f"{self.mount}/" in data_of(mounts, "the mount list")

    def _ensure_mount(self) -> None:
        """Enable the transit mount at first use when it is missing, never after: a mount
        this process has seen that disappears means the vault lost its keys (a wiped or
        re-initialised server), and enabling it again would seal new values under keys
        that have nothing to do with the old ones. That is answered with VAULT_KEY_MISSING
        until an operator restores the vault."""
        if self._mount_ready:
            return
        with self._lock:
            if self._mount_ready:
                return
            if not self._mounted():
                if self._mount_seen:
                    raise Unavailable(
                        f"the vault's transit mount {self.mount!r} is gone: the vault lost its "
                        "keys; restore it from a backup",
                        code="VAULT_KEY_MISSING",
                    )
                # Refused: someone else enabled it meanwhile ("path is already in use")
                with contextlib.suppress(Refused):
                    self._vault(
                        "the transit mount",
                        lambda: self._client.sys.enable_secrets_engine("transit", path=self.mount),
                    )
            self._mount_ready = True
            self._mount_seen = True

    def _gone(self, key_id: str) -> MnemoError:
        """The error for a key the vault does not have. With the transit mount in place the
        key was destroyed or never existed (KeyDestroyed). Without it, the vault lost its
        keys (a wiped or re-initialised server): VAULT_KEY_MISSING, a 503, so that a read
        never passes lost keys off as forgotten ones and nothing is sealed under new keys
        (this process never enables a mount it has seen disappear)."""
        with self._lock:
            mounted = self._mounted()
            if not mounted:
                self._mount_ready = False
        if mounted:
            return KeyDestroyed(f"key {_shown(key_id)} was destroyed or never existed")
        return Unavailable(
            f"the vault has no transit mount {self.mount!r} for key {_shown(key_id)}: the vault "
            "lost its keys; restore it from a backup",
            code="VAULT_KEY_MISSING",
        )

    def _call(self, key_id: str, call: Callable[[], _T]) -> _T:
        self._ensure_mount()
        return self._vault(f"key {_shown(key_id)}", call)

    def _vault(self, what: str, call: Callable[[], _T]) -> _T:
        return self.connection.call(what, call)

    def _on_wrapped(self, key_id: str, wrapped: bytes, endpoint: Any) -> dict[str, Any]:
        """A transit call (decrypt, rewrap) on a wrapped data key of the key: its answer's
        data; a key the vault lacks is `_gone`, a wrapped key it refuses BAD_WRAPPED_KEY."""
        name = self.name_of(key_id)
        ciphertext = _wrapped_text(wrapped)
        try:
            answer = self._call(
                key_id, lambda: endpoint(name=name, ciphertext=ciphertext, mount_point=self.mount)
            )
        except Missing:
            raise self._gone(key_id) from None
        except Refused:
            raise InvalidInput(
                f"wrapped key does not belong to key {_shown(key_id)} (or was altered)",
                code="BAD_WRAPPED_KEY",
            ) from None
        return data_of(answer, f"key {_shown(key_id)}")

    def _with_key(self, key_id: str, call: Callable[[], _T]) -> _T:
        """Run a call that needs the key, creating the key on first use (never after it was
        destroyed)."""
        try:
            return self._call(key_id, call)
        except Missing:
            self._create(key_id)
        try:
            return self._call(key_id, call)
        except Missing:
            raise self._gone(key_id) from None

    def _create(self, key_id: str) -> None:
        name = self.name_of(key_id)
        if self._exists(key_id, name + TOMBSTONE):
            raise KeyDestroyed(f"key {_shown(key_id)} was destroyed")
        try:
            self._call(
                key_id,
                lambda: self._transit.create_key(
                    name=name, key_type=KEY_TYPE, mount_point=self.mount
                ),
            )
        except Missing:  # no mount to create it in
            raise self._gone(key_id) from None

    def _exists(self, key_id: str, name: str) -> bool:
        try:
            self._call(key_id, lambda: self._transit.read_key(name=name, mount_point=self.mount))
        except Missing:
            return False
        return True

    def _latest_version(self, key_id: str) -> int:
        name = self.name_of(key_id)
        try:
            answer = self._call(
                key_id, lambda: self._transit.read_key(name=name, mount_point=self.mount)
            )
        except Missing:
            raise self._gone(key_id) from None
        return int(data_of(answer, f"key {_shown(key_id)}")["latest_version"])

    def __repr__(self) -> str:
        return f"VaultKeyVault({self.url!r}, mount={self.mount!r}, prefix={self.prefix!r})"


def _wrapped_text(wrapped: bytes) -> str:
    try:
        text = wrapped.decode("ascii")
    except UnicodeDecodeError:
        raise InvalidInput("not a wrapped data key", code="BAD_WRAPPED_KEY") from None
    if not _WRAPPED.fullmatch(text):
        raise InvalidInput("not a wrapped data key", code="BAD_WRAPPED_KEY")
    return text
