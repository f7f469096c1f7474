"""Where tests find the real OpenBao: MNEMO_VAULT_ADDR / MNEMO_VAULT_TOKEN, else the file
infra/services.py writes (var/run/services.env) when it starts the services."""

from __future__ import annotations

import os
from pathlib import Path

from mnemo.adapters.memory_key_vault import InMemoryKeyVault
from mnemo.domain.errors import Unavailable
from mnemo.ports import KeyVault

__all__ = ["SwitchableVault", "vault_settings"]

SERVICES_ENV = Path(__file__).resolve().parent.parent / "var" / "run" / "services.env"


def vault_settings() -> tuple[str, str | None]:
    """(address, token); the token is None when nothing says where OpenBao is."""
    url = os.environ.get("MNEMO_VAULT_ADDR", "http://127.0.0.1:8200")
    token = os.environ.get("MNEMO_VAULT_TOKEN")
    if token is None and SERVICES_ENV.exists():
        for line in SERVICES_ENV.read_text(encoding="utf-8").splitlines():
            name, _, value = line.partition("=")
            if name.strip() == "MNEMO_VAULT_TOKEN" and value.strip():
                token = value.strip()
            elif name.strip() == "MNEMO_VAULT_ADDR" and value.strip():
                url = os.environ.get("MNEMO_VAULT_ADDR", value.strip())
    return url, token


class SwitchableVault(KeyVault):
    """A real in-memory vault that can be switched off, and counts its calls."""

    def __init__(self) -> None:
        self.inner = InMemoryKeyVault()
        self.down = False
        self.calls = 0

    def _gate(self) -> None:
        self.calls += 1
        if self.down:
            raise Unavailable("vault down", code="VAULT_UNAVAILABLE")

    def data_key(self, key_id: str) -> tuple[bytes, bytes, int]:
        self._gate()
        return self.inner.data_key(key_id)

    def unwrap(self, key_id: str, wrapped: bytes) -> bytes:
        self._gate()
        return self.inner.unwrap(key_id, wrapped)

    def rewrap(self, key_id: str, wrapped: bytes) -> tuple[bytes, int]:
        self._gate()
        return self.inner.rewrap(key_id, wrapped)

    def rotate(self, key_id: str) -> int:
        self._gate()
        return self.inner.rotate(key_id)

    def search_key(self, key_id: str) -> bytes:
        self._gate()
        return self.inner.search_key(key_id)

    def destroy(self, key_id: str) -> None:
        self._gate()
        self.inner.destroy(key_id)

    def has_key(self, key_id: str) -> bool:
        self._gate()
        return self.inner.has_key(key_id)

    def is_destroyed(self, key_id: str) -> bool:
        self._gate()
        return self.inner.is_destroyed(key_id)
