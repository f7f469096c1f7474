"""Whether the key vault is the one this deployment's values were sealed in.

A vault that lost its keys (its storage wiped, re-initialised, restored from the wrong
backup, or another server answering at the same address) holds none of the keys the
deployment sealed under. Asked for one of them, it answers as for a key that was
destroyed, and a process would then show every sealed value as `⟦redacted⟧`, as if every
user had been forgotten, and seal new values under new, unrelated keys.

So the access store (not a read model: a rebuild leaves it alone) records the vault's
identity (`KeyVault.identity`, a digest of one reserved key's keyed hash, never key
material) the first time a process starts, and:

* `check_vault_identity` runs at every process's start: a vault that gives another
  identity, or none, is refused (`VAULT_KEY_MISSING`, naming the vault's setting); the
  start of a deployment with no recorded identity records the vault's.
* `IdentityGuardedVault` wraps the vault a running process seals with: before a key is
  reported destroyed (a forgotten subject) the vault's identity is compared again, and
  before a call that makes a missing key (a data key, a search key, a rotation) too, a
  match then being reused for `recheck` seconds; and a vault that is no longer the recorded one
  answers 503 `VAULT_KEY_MISSING` instead of a forgotten key or a new, unrelated one.

A record that names a key the vault never had (a forged or mistaken key id) still reads
as destroyed in the recorded vault: it cannot hold a consumer's partition back.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TypeVar

from mnemo.domain.errors import InvalidInput, KeyDestroyed, MnemoError, Unavailable
from mnemo.ports import AccessStore, KeyVault

__all__ = ["IdentityGuardedVault", "VaultKeysMissing", "check_vault_identity"]

_T = TypeVar("_T")
_GONE_KEPT = 65_536


class VaultKeysMissing(Unavailable):
    """The vault is not the one the deployment's keys are in."""

    code = "VAULT_KEY_MISSING"


def check_vault_identity(vault: KeyVault, access: AccessStore, *, setting: str) -> bytes:
    """At a process's start: the identity of `vault`, recorded in `access` when none is yet.
    Raises InvalidInput (VAULT_KEY_MISSING, field `setting`: a start refused as a
    configuration error) when the vault is not the recorded one. A vault that does not
    answer raises Unavailable, which a start waits for."""
    recorded = access.vault_identity()
    # made only for a deployment with none recorded: a vault without the identity key is
    # not the recorded one
    found = vault.identity(create=recorded is None)
    if recorded is None and found is not None:
        recorded = access.record_vault_identity(found)
    if found is None or found != recorded:
        raise InvalidInput(
            f"the vault at MNEMO_{setting.upper()} does not hold this deployment's keys "
            "(it was wiped or re-initialised, or it is another vault): every value sealed "
            "before would read as forgotten. Restore the vault from a backup, or point "
            "the setting at the vault the keys are in",
            code="VAULT_KEY_MISSING",
            field=setting,
        )
    return recorded


class IdentityGuardedVault(KeyVault):
    """`inner`, whose destroyed keys are believed only while it is the recorded vault.

    Unbound (`expected` None) it passes everything through: a process binds it once its
    start check has passed (`bind`), or attaches the access store (`attach`) when the
    vault did not answer at its start, and the check then runs before the first call."""

    def __init__(
        self,
        inner: KeyVault,
        expected: bytes | None = None,
        *,
        recheck: float = 10.0,
        now: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner = inner
        self.expected = expected
        self.recheck = recheck
        self._now = now
        self._confirmed_until = 0.0
        self._lock = threading.Lock()
        self._pending: tuple[AccessStore, str] | None = None
        self._gone: set[str] = set()  # keys the recorded vault holds the tombstone of
        self._binding = threading.Lock()

    def bind(self, expected: bytes) -> None:
        self.expected = expected
        self._confirmed_until = 0.0

    def attach(self, access: AccessStore, *, setting: str) -> None:
        """Run the start check (`check_vault_identity`) before the first call instead."""
        self._pending = (access, setting)

    def _checked(self) -> None:
        if self._pending is None:
            return
        with self._binding:
            if self._pending is None:
                return
            access, setting = self._pending
            try:
                expected = check_vault_identity(self.inner, access, setting=setting)
            except InvalidInput as exc:
                raise VaultKeysMissing(exc.message) from None
            self.bind(expected)
            self._pending = None

    def confirm(self, *, fresh: bool = False) -> None:
        """Raise VaultKeysMissing (503) unless the vault still gives the recorded identity;
        a yes is reused for `recheck` seconds, unless `fresh`."""
        self._checked()
        if self.expected is None:
            return
        now = self._now()
        with self._lock:
            if now < self._confirmed_until and not fresh:
                return
        if self.inner.identity(create=False) != self.expected:
            with self._lock:
                self._confirmed_until = 0.0  # no call goes on with an earlier match
            raise VaultKeysMissing(
                "the vault does not hold this deployment's keys (it was wiped or "
                "re-initialised, or it is another vault); restore it from a backup"
            )
        with self._lock:
            self._confirmed_until = now + self.recheck

    def _destroyed(self, key_id: str, exc: MnemoError) -> MnemoError:
        # asked again whatever an earlier match: a key reads as forgotten for good (the key
        # cache keeps a destroyed key so), and only the recorded vault can say it is; a
        # wrapped key it no longer takes may be one a key made since in another vault
        if isinstance(exc, KeyDestroyed) and self._shredded(key_id):
            return exc
        self.confirm(fresh=True)
        if isinstance(exc, KeyDestroyed) and self.inner.is_destroyed(key_id):
            self._remember_shredded(key_id)
        return exc

    def _shredded(self, key_id: str) -> bool:
        """Whether the recorded vault said so: its tombstone is for good (a destroyed key
        is never made again), so this is not asked again."""
        with self._lock:
            return key_id in self._gone

    def _remember_shredded(self, key_id: str) -> None:
        with self._lock:
            if len(self._gone) >= _GONE_KEPT:
                self._gone.clear()
            self._gone.add(key_id)

    def _making(self, key_id: str, call: Callable[[], _T]) -> _T:
        """A call that makes its key when it is missing: never in another vault."""
        self.confirm()
        try:
            return call()
        except KeyDestroyed as exc:
            raise self._destroyed(key_id, exc) from None

    def _opening(self, key_id: str, call: Callable[[], _T]) -> _T:
        """A call on a wrapped data key: a key gone, or a wrapped key refused, is believed
        only from the recorded vault."""
        self._checked()
        try:
            return call()
        except KeyDestroyed as exc:
            raise self._destroyed(key_id, exc) from None
        except InvalidInput as exc:
            if exc.code != "BAD_WRAPPED_KEY":
                raise
            raise self._destroyed(key_id, exc) from None

    def data_key(self, key_id: str) -> tuple[bytes, bytes, int]:
        return self._making(key_id, lambda: self.inner.data_key(key_id))

    def unwrap(self, key_id: str, wrapped: bytes) -> bytes:
        return self._opening(key_id, lambda: self.inner.unwrap(key_id, wrapped))

    def rewrap(self, key_id: str, wrapped: bytes) -> tuple[bytes, int]:
        return self._opening(key_id, lambda: self.inner.rewrap(key_id, wrapped))

    def rotate(self, key_id: str) -> int:
        return self._making(key_id, lambda: self.inner.rotate(key_id))

    def search_key(self, key_id: str) -> bytes:
        return self._making(key_id, lambda: self.inner.search_key(key_id))

    def destroy(self, key_id: str) -> None:
        # a forget shreds keys only in the recorded vault: asked now, not from a match
        self.confirm(fresh=True)
        self.inner.destroy(key_id)

    def is_destroyed(self, key_id: str) -> bool:
        self._checked()
        gone = self.inner.is_destroyed(key_id)
        if gone and not self._shredded(key_id):
            self.confirm(fresh=True)
            self._remember_shredded(key_id)
        return gone

    def has_key(self, key_id: str) -> bool:
        self._checked()
        return self.inner.has_key(key_id)

    def identity(self, *, create: bool) -> bytes | None:
        return self.inner.identity(create=create)
