"""Audit anchors in Vault's (or OpenBao's) KV version 2 engine, through hvac.

Each (tenant, stream) with a signed checkpoint has one secret,
`<prefix>/<tenant>/<stream as hex>` in the mount `MNEMO_AUDIT_ANCHOR_MOUNT`, holding the
stream's newest stored checkpoint with its transit signature (ADR 0017). Whoever can write
the store (SQLite files, Cassandra tables) cannot write here, so a store rolled back to an
older checkpoint no longer matches its anchor.

An anchor only moves forward, along one chain, by KV v2 check-and-set: the writer reads
the secret and its version, decides with `anchor_moves` (the next checkpoint after the
anchor moves it; one at its index or below leaves it; one further ahead or not descended
from it is refused), and writes with `cas` set to the version it read (0: only when there
is none yet). A writer
that lost a race sees the vault refuse its write, reads again and decides again, so two
audit consumers never move an anchor back. A process remembers the version and anchor it
wrote last for each stream (up to WRITTEN_KEPT streams) and decides from them without a
read; when another writer moved the anchor since, the vault refuses the write (or the
decision says the anchor is out of step) and the process reads and decides again. Before
its first write a process makes sure the mount requires check-and-set of every writer
(`cas_required`), creating the mount as KV v2 when it is missing (a fresh development
vault). The audit consumer's policy needs
`create`, `update` and `read` on `<mount>/data/<prefix>/*` and `read` (and `update`, until
it is set) on `<mount>/config`; whoever verifies needs `read` on `<mount>/data/<prefix>/*`
and `list` on `<mount>/metadata/<prefix>/*`; nobody needs `delete` or `destroy`
(docs/security.md).

Errors: an unreachable vault or a refused token raise Unavailable (VAULT_UNAVAILABLE), an
anchor that is not a checkpoint record raises Unavailable (AUDIT_ANCHOR_UNREADABLE);
messages name the path and the status, never the token. The vault plumbing (token file,
error translation) is `vault_connection`'s.
"""

from __future__ import annotations

import contextlib
import re
import threading
import time
from collections import OrderedDict
from typing import Any

import hvac

from mnemo.adapters.vault_connection import Missing, Refused, TokenFile, VaultConnection
from mnemo.domain.checkpoint import (
    Checkpoint,
    anchor_moves,
    checkpoint_from_record,
    checkpoint_record,
)
from mnemo.domain.errors import ConflictError, InvalidInput, Unavailable
from mnemo.ports import CheckpointAnchors

__all__ = ["VaultKvAnchors"]

ATTEMPTS = 8  # check-and-set rounds before a contended write gives up (Unavailable)
WRITTEN_KEPT = 10_000  # anchors whose written version is remembered (a read saved each)
_MOUNT = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_/-]{0,63}$")
_HEX = re.compile(r"^(?:[0-9a-f]{2})+$")


class VaultKvAnchors(CheckpointAnchors):
    """Anchors under `prefix` in the KV v2 mount `mount`; see the module docstring."""

    def __init__(
        self,
        url: str,
        token: str | TokenFile,
        *,
        mount: str = "mnemo-anchors",
        prefix: str = "mnemo",
        timeout: float = 3.0,
        client: hvac.Client | None = None,
    ) -> None:
        if not _MOUNT.fullmatch(mount):
            raise InvalidInput(
                "the audit anchor mount must be 1-64 letters, digits, '_', '-' or '/'",
                code="INVALID_SETTING",
                field="audit_anchor_mount",
            )
        self._vault = VaultConnection(url, token, mount=mount, timeout=timeout, client=client)
        self.mount = self._vault.mount
        self.prefix = prefix
        self.name = f"vault kv {self.mount}/{prefix}"
        self._lock = threading.Lock()
        self._mount_ready = False
        # path -> (version, anchor) of the anchors this process wrote last, newest last
        self._written: OrderedDict[str, tuple[int, Checkpoint]] = OrderedDict()
        self._written_lock = threading.Lock()

    # ---- the port -------------------------------------------------------------------------

    def advance(self, checkpoint: Checkpoint) -> bool:
        path = self._path(checkpoint.tenant, checkpoint.stream)
        record = checkpoint_record(checkpoint)
        self._ensure_mount()
        for attempt in range(ATTEMPTS):
            # the anchor this process wrote last, if any, stands in for a read: anchors only
            # move forward and the write is checked against its version, so a stale one is
            # refused by the vault, or by anchor_moves, and the anchor is read after all
            known = self._written_get(path)
            version, current = known if known is not None else self._read(path)
            try:
                moves = anchor_moves(current, checkpoint)
            except ConflictError:
                if known is None:
                    raise
                self._written_drop(path)
                continue
            if not moves:
                return False
            try:
                written = self._write(path, record, version)
            except Refused:  # another writer moved it since it was read: decide again
                self._written_drop(path)
                if known is None:
                    time.sleep(0.02 * attempt)
                continue
            if written is not None:
                self._written_put(path, (written, checkpoint))
            else:  # the vault did not say which version it wrote: read it next time
                self._written_drop(path)
            return True
        raise Unavailable(
            f"the audit anchor {path} kept changing while it was written",
            code="VAULT_UNAVAILABLE",
        )

    def of_tenant(self, tenant: str) -> list[Checkpoint]:
        folder = f"{self.prefix}/{_segment(tenant)}"
        try:
            listed = self._call(
                f"the audit anchors of {tenant!r}",
                lambda: self._kv.list_secrets(path=folder, mount_point=self.mount),
            )
        except Missing:  # nothing anchored yet (or no mount yet)
            return []
        names = sorted(str(k) for k in (listed.get("data") or {}).get("keys") or [])
        out = []
        for name in names:
            if not _HEX.fullmatch(name):
                continue  # a folder or another tool's entry: not an anchor of this layout
            _, anchor = self._read(f"{folder}/{name}")
            if anchor is None:
                continue
            if (anchor.tenant, anchor.stream.encode("utf-8").hex()) != (tenant, name):
                raise Unavailable(
                    f"the audit anchor {folder}/{name} names another stream",
                    code="AUDIT_ANCHOR_UNREADABLE",
                )
            out.append(anchor)
        return sorted(out, key=lambda c: c.stream)

    # ---- helpers --------------------------------------------------------------------------

    @property
    def _kv(self) -> Any:
        return self._vault.client.secrets.kv.v2

    def _call(self, what: str, call: Any) -> Any:
        return self._vault.call(what, call)

    def _path(self, tenant: str, stream: str) -> str:
        return f"{self.prefix}/{_segment(tenant)}/{stream.encode('utf-8').hex()}"

    def _read(self, path: str) -> tuple[int, Checkpoint | None]:
        """(version, anchor) of a path; (0, None) when nothing was written there."""
        try:
            answer = self._call(
                f"the audit anchor {path}",
                lambda: self._kv.read_secret_version(
                    path=path, mount_point=self.mount, raise_on_deleted_version=True
                ),
            )
        except Missing:
            return 0, None
        except Refused:  # a mount still being set up answers 400 for a moment
            raise Unavailable(
                f"the vault refused to read the audit anchor {path}", code="VAULT_UNAVAILABLE"
            ) from None
        data = answer.get("data") or {}
        version = (data.get("metadata") or {}).get("version")
        try:
            if type(version) is not int or version < 1:
                raise ValueError("no version")
            return version, checkpoint_from_record(data.get("data"))
        except ValueError:
            raise Unavailable(
                f"the audit anchor {path} is not a checkpoint record",
                code="AUDIT_ANCHOR_UNREADABLE",
            ) from None

    def _write(self, path: str, record: dict[str, Any], version: int) -> int | None:
        """Write by check-and-set on `version`; the version written (None if the vault
        did not say)."""
        answer = self._call(
            f"the audit anchor {path}",
            lambda: self._kv.create_or_update_secret(
                path=path, secret=record, cas=version, mount_point=self.mount
            ),
        )
        written = ((answer or {}).get("data") or {}).get("version")
        return written if type(written) is int and written > version else None

    def _written_get(self, path: str) -> tuple[int, Checkpoint] | None:
        with self._written_lock:
            return self._written.get(path)

    def _written_put(self, path: str, known: tuple[int, Checkpoint]) -> None:
        with self._written_lock:
            self._written[path] = known
            self._written.move_to_end(path)
            while len(self._written) > WRITTEN_KEPT:
                self._written.popitem(last=False)

    def _written_drop(self, path: str) -> None:
        with self._written_lock:
            self._written.pop(path, None)

    def _ensure_mount(self) -> None:
        """Before this process's first write: the KV v2 mount exists (made when missing, on
        a fresh development vault) and takes only check-and-set writes (`cas_required`)."""
        if self._mount_ready:
            return
        what = f"the audit anchor mount {self.mount!r}"
        with self._lock:
            if self._mount_ready:
                return
            try:
                config = self._call(
                    what, lambda: self._kv.read_configuration(mount_point=self.mount)
                )
                required = (config.get("data") or {}).get("cas_required") is True
            except Missing:
                # Refused: someone else enabled it meanwhile ("path is already in use")
                with contextlib.suppress(Refused):
                    self._call(
                        what,
                        lambda: self._vault.client.sys.enable_secrets_engine(
                            "kv", path=self.mount, options={"version": "2"}
                        ),
                    )
                required = False
            for attempt in range(ATTEMPTS * 4):
                if required:
                    break
                try:
                    self._call(
                        what, lambda: self._kv.configure(cas_required=True, mount_point=self.mount)
                    )
                    required = True
                except (Refused, Missing):  # a new mount is ready after a moment
                    time.sleep(0.05 * (attempt + 1))
            if not required:
                raise Unavailable(
                    f"{what} cannot be set to require check-and-set", code="VAULT_UNAVAILABLE"
                )
            self._mount_ready = True

    def __repr__(self) -> str:
        return f"VaultKvAnchors({self._vault.url!r}, {self.mount}/{self.prefix})"


def _segment(tenant: str) -> str:
    if not tenant or "/" in tenant or tenant in (".", ".."):
        raise InvalidInput("not a tenant name", code="INVALID_TENANT", field="tenant")
    return tenant
