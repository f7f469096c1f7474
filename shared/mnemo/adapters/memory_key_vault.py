"""Envelope-encryption key vaults with AES-256-GCM (package `cryptography`).

`VersionedKeyVault` holds the semantics every local vault shares; `InMemoryKeyVault`
keeps the master keys in process memory only (tests, throwaway runs) and
`mnemo.adapters.local_key_vault.LocalKeyFileVault` also keeps them in a file.

Semantics:

* Each key_id has master keys by version 1, 2, ...; the highest is current. The first
  `data_key` (or `rotate`) of a key_id creates version 1.
* A data key is 32 random bytes, wrapped with AES-256-GCM under the current master
  key. The wrapped form is ``b"v<version>:" + nonce(12) + ciphertext+tag(48)``; the key_id
  and version are bound in as associated data, so a wrapped key only unwraps under the
  key_id and version it was made for.
* `rotate` adds a version; keys wrapped under older versions still unwrap.
* `rewrap` re-wraps a data key under the current version; `search_key` derives (HKDF) a
  stable secret from the first version, for keyed hashes.
* `destroy` forgets every version and leaves a tombstone: afterwards `unwrap`,
  `data_key` and `rotate` for that key_id raise KeyDestroyed, so nothing new is ever
  encrypted for an erased key_id. `unwrap` of a key_id never created also raises it.

Python cannot guarantee key bytes are wiped from memory; master keys are held in
bytearrays that are zeroed on destroy, which is best effort only.
"""

from __future__ import annotations

import contextlib
import os
import re
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TypeVar

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.ciphers.aead import AESGCM
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from mnemo.domain.errors import InvalidInput, KeyDestroyed
from mnemo.ports import KeyVault

__all__ = ["InMemoryKeyVault", "KeyState", "VersionedKeyVault"]

KEY_BYTES = 32
NONCE_BYTES = 12
_WRAPPED = re.compile(rb"v([1-9][0-9]{0,8}):", re.DOTALL)
_T = TypeVar("_T")


@dataclass
class KeyState:
    """Every master key by key_id and version, and the key_ids destroyed."""

    keys: dict[str, dict[int, bytearray]] = field(default_factory=dict)
    destroyed: set[str] = field(default_factory=set)

    def copy(self) -> KeyState:
        return KeyState(
            keys={key_id: dict(versions) for key_id, versions in self.keys.items()},
            destroyed=set(self.destroyed),
        )


class VersionedKeyVault(KeyVault):
    """The shared vault logic; subclasses persist the state by overriding `_persist`."""

    def __init__(self, state: KeyState | None = None) -> None:
        self._lock = threading.RLock()
        self._state = state if state is not None else KeyState()

    def _known(self, key_id: str) -> dict[int, bytearray] | None:
        """A key's versions; for one not held, the state is reloaded first (`_reload`)."""
        versions = self._state.keys.get(key_id)
        if versions is None and key_id not in self._state.destroyed:
            self._reload()
            versions = self._state.keys.get(key_id)
        return versions

    def _reload(self) -> None:
        """Take in keys another process added meanwhile (a shared development file)."""

    def _refresh(self) -> None:
        """Before each read: take in what another process changed since (a rotation, a
        destroyed key), when that is cheap to tell (the shared file's own stat)."""

    # ---- the port -------------------------------------------------------------------

    def data_key(self, key_id: str) -> tuple[bytes, bytes, int]:
        _check_key_id(key_id)
        with self._lock:
            self._refresh()
            versions = self._known(key_id)
            if versions is None:
                self._refuse_destroyed(key_id)
                self._mutate(lambda state: _first_version(state, key_id))
                versions = self._state.keys[key_id]
            version = max(versions)
            master = bytes(versions[version])
        plaintext = os.urandom(KEY_BYTES)
        nonce = os.urandom(NONCE_BYTES)
        sealed = AESGCM(master).encrypt(nonce, plaintext, _aad(key_id, version))
        return plaintext, b"v%d:" % version + nonce + sealed, version

    def unwrap(self, key_id: str, wrapped: bytes) -> bytes:
        _check_key_id(key_id)
        match = _WRAPPED.match(wrapped)
        if match is None or len(wrapped) != match.end() + NONCE_BYTES + KEY_BYTES + 16:
            raise InvalidInput("not a wrapped data key", code="BAD_WRAPPED_KEY")
        version = int(match.group(1))
        with self._lock:
            self._refresh()
            versions = self._known(key_id)
            if versions is None:
                raise KeyDestroyed(f"key {key_id!r} was destroyed or never existed")
            master = versions.get(version)
            if master is None:
                raise InvalidInput(
                    f"key {key_id!r} has no version {version}", code="BAD_WRAPPED_KEY"
                )
            material = bytes(master)
        body = wrapped[match.end() :]
        try:
            return AESGCM(material).decrypt(
                body[:NONCE_BYTES], body[NONCE_BYTES:], _aad(key_id, version)
            )
        except InvalidTag:
            raise InvalidInput(
                f"wrapped key does not belong to key {key_id!r} (or was altered)",
                code="BAD_WRAPPED_KEY",
            ) from None

    def rewrap(self, key_id: str, wrapped: bytes) -> tuple[bytes, int]:
        plaintext = self.unwrap(key_id, wrapped)
        with self._lock:
            self._refuse_destroyed(key_id)
            versions = self._state.keys[key_id]
            version = max(versions)
            master = bytes(versions[version])
        nonce = os.urandom(NONCE_BYTES)
        sealed = AESGCM(master).encrypt(nonce, plaintext, _aad(key_id, version))
        return b"v%d:" % version + nonce + sealed, version

    def search_key(self, key_id: str) -> bytes:
        _check_key_id(key_id)
        with self._lock:
            self._refresh()
            versions = self._known(key_id)
            if versions is None:
                self._refuse_destroyed(key_id)
                self._mutate(lambda state: _first_version(state, key_id))
                versions = self._state.keys[key_id]
            first = bytes(versions[min(versions)])
        info = b"mnemo-search-key\x00" + key_id.encode()
        return HKDF(algorithm=hashes.SHA256(), length=32, salt=None, info=info).derive(first)

    def rotate(self, key_id: str) -> int:
        _check_key_id(key_id)
        with self._lock:
            self._refuse_destroyed(key_id)
            return self._mutate(lambda state: _next_version(state, key_id))

    def destroy(self, key_id: str) -> None:
        _check_key_id(key_id)
        with self._lock:
            doomed: list[bytearray] = []

            def forget(state: KeyState) -> None:
                # the versions as the (reloaded) state holds them, to be zeroed after
                doomed.extend(state.keys.pop(key_id, {}).values())
                state.destroyed.add(key_id)

            self._mutate(forget)
            for material in doomed:  # best effort: Python may hold other copies
                material[:] = bytes(len(material))

    def has_key(self, key_id: str) -> bool:
        _check_key_id(key_id)
        with self._lock:
            return self._known(key_id) is not None

    def is_destroyed(self, key_id: str) -> bool:
        _check_key_id(key_id)
        with self._lock:
            if key_id not in self._state.destroyed:
                self._reload()  # another process may have destroyed it meanwhile
            return key_id in self._state.destroyed

    # ---- for subclasses and tests ----------------------------------------------------

    def versions(self, key_id: str) -> list[int]:
        """The versions a key_id has, oldest first ([] when none or destroyed)."""
        with self._lock:
            return sorted(self._state.keys.get(key_id, {}))

    def _persist(self, state: KeyState) -> None:
        """Make `state` durable before it becomes current; raising aborts the change."""

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        """Held around a change: a store shared by processes locks it here, and `_mutate`
        then reloads the state before changing it, so no process's change is lost."""
        yield

    def _mutate(self, change: Callable[[KeyState], _T]) -> _T:
        """Apply a change to a copy of the current state (reloaded under `_exclusive`),
        persist the copy, then make it current."""
        with self._lock, self._exclusive():
            self._reload()
            draft = self._state.copy()
            result = change(draft)
            self._persist(draft)
            self._state = draft
            return result

    def _refuse_destroyed(self, key_id: str) -> None:
        if key_id in self._state.destroyed:
            raise KeyDestroyed(f"key {key_id!r} was destroyed")

    def __repr__(self) -> str:
        return f"{type(self).__name__}({len(self._state.keys)} keys)"


class InMemoryKeyVault(VersionedKeyVault):
    """Master keys in process memory only: lost when the process ends. For tests."""


def _first_version(state: KeyState, key_id: str) -> int:
    """A key's first version, unless another process made it meanwhile."""
    if key_id in state.destroyed:
        raise KeyDestroyed(f"key {key_id!r} was destroyed")
    if state.keys.get(key_id):
        return max(state.keys[key_id])
    return _add_version(state, key_id)


def _next_version(state: KeyState, key_id: str) -> int:
    if key_id in state.destroyed:  # by another process meanwhile
        raise KeyDestroyed(f"key {key_id!r} was destroyed")
    return _add_version(state, key_id)


def _add_version(state: KeyState, key_id: str) -> int:
    versions = state.keys.setdefault(key_id, {})
    version = max(versions, default=0) + 1
    versions[version] = bytearray(AESGCM.generate_key(bit_length=256))
    return version


def _aad(key_id: str, version: int) -> bytes:
    return f"mnemo-data-key\x00{key_id}\x00v{version}".encode()


def _check_key_id(key_id: str) -> None:
    if not isinstance(key_id, str) or not key_id:
        raise InvalidInput("key_id must be a non-empty string", field="key_id")
