"""A key vault in a local JSON file, for embedded and development mode only.

The master keys sit in plain (base64) form in one file, readable by its owner only
(mode 0600). Every change rewrites the whole file atomically: a temporary file in the
same directory, fsync, `os.replace`, fsync of the directory. `destroy` rewrites the file
without the key_id's versions, so the new file no longer holds that material; the old
file's blocks may survive on disk until reused, so this is not a forensic-grade shred.

Processes may share the file (a server and `mnemo keys rotate` on its data directory):
each change takes an exclusive lock on `<file>.lock`, reads the file again, and writes it
back with its change, so no process's key version is lost or replaced. Semantics are those
of `mnemo.adapters.memory_key_vault.VersionedKeyVault`.

File format::

    {"format": 1,
     "keys": {"<key_id>": {"1": "<base64 master key>", "2": "..."}},
     "destroyed": ["<key_id>", ...]}
"""

from __future__ import annotations

import base64
import contextlib
import fcntl
import json
import logging
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from mnemo.adapters.memory_key_vault import KEY_BYTES, KeyState, VersionedKeyVault

__all__ = ["LocalKeyFileVault"]

log = logging.getLogger("mnemo.keyvault")

FORMAT = 1
FILE_MODE = 0o600


class LocalKeyFileVault(VersionedKeyVault):
    """Versioned master keys per key_id in a 0600 JSON file; AES-256-GCM wrapping."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        log.warning(
            "development only: keys are stored in a local file (%s), unencrypted and "
            "readable by its owner; use a managed KMS in production",
            self.path,
        )
        if not self.path.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            # only if still absent: a process starting beside one that already made keys
            # must not replace its file with an empty one
            _write(self.path, KeyState(), replace=False)
        self._seen = _stamp(self.path)
        state = _load(self.path)
        self._tighten_mode()
        super().__init__(state)

    def _persist(self, state: KeyState) -> None:
        _write(self.path, state)
        self._seen = _stamp(self.path)

    def _refresh(self) -> None:
        # every change replaces the file: another inode, size or time says another
        # process rotated or destroyed a key since this one last read it
        if _stamp(self.path) != self._seen:
            self._reload()

    @contextlib.contextmanager
    def _exclusive(self) -> Iterator[None]:
        fd = os.open(self.path.with_name(self.path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)  # releases the lock

    def _reload(self) -> None:
        # a consumer process opens what the gateway sealed under keys it made after this
        # process loaded the file (users' streams are sealed whole, ADR 0010)
        if self.path.exists():
            self._seen = _stamp(self.path)
            self._state = _load(self.path)

    def _tighten_mode(self) -> None:
        mode = stat.S_IMODE(self.path.stat().st_mode)
        if mode != FILE_MODE:
            log.warning("key file %s had mode %o; setting it to 0600", self.path, mode)
            os.chmod(self.path, FILE_MODE)

    def __repr__(self) -> str:
        return f"LocalKeyFileVault({str(self.path)!r})"


def _stamp(path: Path) -> tuple[int, int, int] | None:
    """What tells one version of the file from the next (each is written anew)."""
    try:
        found = path.stat()
    except FileNotFoundError:
        return None
    return (found.st_ino, found.st_size, found.st_mtime_ns)


def _load(path: Path) -> KeyState:
    try:
        raw: Any = json.loads(path.read_bytes())
        if raw.get("format") != FORMAT:
            raise ValueError(f"unsupported format {raw.get('format')!r}")
        keys: dict[str, dict[int, bytearray]] = {}
        for key_id, versions in raw["keys"].items():
            keys[str(key_id)] = {
                int(version): bytearray(base64.b64decode(material, validate=True))
                for version, material in versions.items()
            }
        destroyed = {str(key_id) for key_id in raw.get("destroyed", [])}
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        # never include the file content in the message: it is key material
        raise ValueError(f"key file {path} is not a valid Mnemo key file ({exc})") from None
    for versions in keys.values():
        if not versions or any(len(m) != KEY_BYTES for m in versions.values()):
            raise ValueError(f"key file {path} holds a malformed master key")
    return KeyState(keys=keys, destroyed=destroyed)


def _encode(state: KeyState) -> bytes:
    body = {
        "format": FORMAT,
        "keys": {
            key_id: {
                str(version): base64.b64encode(bytes(material)).decode("ascii")
                for version, material in sorted(versions.items())
            }
            for key_id, versions in sorted(state.keys.items())
        },
        "destroyed": sorted(state.destroyed),
    }
    return json.dumps(body, indent=1).encode("utf-8")


def _write(path: Path, state: KeyState, *, replace: bool = True) -> None:
    """Replace the file atomically (or, without `replace`, create it only if it is still
    absent); the temporary file is 0600 from the start."""
    data = _encode(state)
    directory = path.parent
    fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as tmp:
            os.fchmod(tmp.fileno(), FILE_MODE)  # mkstemp already uses 0600; make sure
            tmp.write(data)
            tmp.flush()
            os.fsync(tmp.fileno())
        if replace:
            os.replace(tmp_name, path)
        else:
            with contextlib.suppress(FileExistsError):  # another made it first: theirs stays
                os.link(tmp_name, path)
            os.unlink(tmp_name)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp_name)
        raise
    _fsync_dir(directory)


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:  # some platforms cannot open a directory
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
