"""Where tests find the real OpenBao: MNEMO_VAULT_ADDR / MNEMO_VAULT_TOKEN, else the file
infra/services.py writes (var/run/services.env) when it starts the services."""

from __future__ import annotations

import os
from pathlib import Path

__all__ = ["vault_settings"]

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
