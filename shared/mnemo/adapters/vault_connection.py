"""One connection to Vault (or OpenBao) through hvac, shared by the vault adapters (the key
vault, the audit signer, the audit anchors): the client, its token and the translation of
every failure.

The token is a string, or a `TokenFile`: the file Vault Agent keeps the current token in.
The file is read again whenever it changes (checked before each call, at the cost of one
stat) and whenever Vault refuses the token, so a renewed or rotated token is picked up
without a restart, and a call refused with the old token is tried once more with the new.

Connection failures, timeouts, a sealed or uninitialised vault and a refused token raise
Unavailable (VAULT_UNAVAILABLE); a path that does not exist raises `Missing`, a request
Vault refuses raises `Refused`, for the adapter to decide what they mean. Messages name
what was asked and the status, never the token or Vault's own message text.
"""

from __future__ import annotations

import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import hvac
import requests
from hvac import exceptions as vault_errors

from mnemo.domain.errors import InvalidInput, Unavailable

__all__ = ["Missing", "Refused", "TokenFile", "TokenRefused", "VaultConnection", "data_of"]

log = logging.getLogger("mnemo.keyvault")

_T = TypeVar("_T")


class TokenFile:
    """A Vault token kept in a file that another process renews (Vault Agent's sink).

    The file must hold a token when this is built; later, while it is missing or empty for
    a moment (an agent replacing it), the last token read stays in use."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        self._stamp: tuple[int, int, int, int] | None = None
        token = self._read()
        if token is None:
            raise InvalidInput(
                f"the Vault token file {path} is missing, unreadable or empty",
                code="VAULT_TOKEN_MISSING",
                field="vault_token_file",
            )
        self._token = token

    def current(self) -> str:
        """The token, read again when the file changed since the last read."""
        stamp = self._stat()
        if stamp is not None and stamp != self._stamp:
            self._load()
        return self._token

    def reload(self) -> bool:
        """Read the file again whatever its stamp says; True when the token changed."""
        return self._load()

    def _load(self) -> bool:
        with self._lock:
            before = self._token
            token = self._read()
            if token is not None:
                self._token = token
            if token is not None and token != before:
                log.info("Vault token file %s changed: using the new token", self.path)
            return token is not None and token != before

    def _stat(self) -> tuple[int, int, int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_ino, st.st_dev, st.st_mtime_ns, st.st_size)

    def _read(self) -> str | None:
        stamp = self._stat()
        try:
            token = self.path.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError):
            return None
        if not token or any(c.isspace() for c in token):
            return None
        self._stamp = stamp
        return token

    def __repr__(self) -> str:  # the path only, never the token
        return f"TokenFile({str(self.path)!r})"


class VaultConnection:
    """An hvac client on `url` with a token (or a token file), for the engine mounted at
    `mount`."""

    def __init__(
        self,
        url: str,
        token: str | TokenFile,
        *,
        mount: str,
        timeout: float = 3.0,
        client: hvac.Client | None = None,
    ) -> None:
        self.url = url
        self.mount = mount.strip("/")
        self._tokens = token if isinstance(token, TokenFile) else None
        first = token.current() if isinstance(token, TokenFile) else token
        self.client = client or hvac.Client(url=url, token=first, timeout=timeout)

    def call(self, what: str, call: Callable[[], _T]) -> _T:
        """One Vault call with the current token; refused, it is tried once more when the
        token file holds another token by then."""
        if self._tokens is not None:
            self.client.token = self._tokens.current()
        try:
            return _guard(what, call)
        except _Denied as denied:
            if self._tokens is None or not self._tokens.reload():
                raise TokenRefused(what, denied.kind) from None
        self.client.token = self._tokens.current()
        try:
            return _guard(what, call)
        except _Denied as denied:
            raise TokenRefused(what, denied.kind) from None

    def token_accepted(self) -> None:
        """Returns when the vault takes the token, asked as a process starts: the token's
        own lookup (Vault's default policy allows it), else the mount list (every process
        reads it before its first key). TokenRefused when the vault refuses both,
        Unavailable when it does not answer, NotAVault when what answers at the address
        does not answer as Vault does (no such path, a refused request, or a page that
        is not Vault's JSON)."""
        try:
            try:
                data_of(
                    self.call("the token's lookup", self.client.auth.token.lookup_self),
                    "the token's lookup",
                )
            except TokenRefused:
                data_of(
                    self.call("the mount list", self.client.sys.list_mounted_secrets_engines),
                    "the mount list",
                )
        except (Missing, Refused, NotAVault) as exc:
            raise NotAVault(f"the token's lookup ({type(exc).__name__})") from None

    def close(self) -> None:
        self.client.adapter.close()


class TokenRefused(Unavailable):
    """Vault refused the token (expired, revoked, mistyped, or without the needed policy).
    Answered like an unreachable vault (VAULT_UNAVAILABLE, 503) while a process runs; at
    its start, a configuration error (bootstrap.check_vault_token)."""

    def __init__(self, what: str, kind: str) -> None:
        super().__init__(
            f"Vault refused Mnemo's token for {what} ({kind})", code="VAULT_UNAVAILABLE"
        )


class NotAVault(Unavailable):
    """What answered is not Vault's API: a 200 that is not JSON, or an answer without the
    `data` every Vault answer of that call carries (a proxy's login page, another
    service on the port). Answered like an unreachable vault (503) while a process runs;
    at its start, a configuration error naming MNEMO_VAULT_ADDR."""

    def __init__(self, what: str) -> None:
        super().__init__(
            f"what answers at the vault's address is not Vault's API ({what})",
            code="VAULT_UNAVAILABLE",
        )


def data_of(answer: object, what: str) -> dict[str, Any]:
    """The `data` of a Vault answer; NotAVault when the answer has none (see NotAVault)."""
    data = answer.get("data") if isinstance(answer, dict) else None
    if not isinstance(data, dict):
        raise NotAVault(what)
    return data


class Missing(Exception):
    """Vault says the key (or path) does not exist."""


class Refused(Exception):
    """Vault refused the request (bad ciphertext, wrong key, a taken path)."""


class _Denied(Exception):
    """Vault refused the token (expired, revoked, or without the needed policy)."""

    def __init__(self, kind: str) -> None:
        super().__init__(kind)
        self.kind = kind


def _guard(what: str, call: Callable[[], _T]) -> _T:
    """Run one Vault call, translating hvac and transport errors. Messages carry the
    status only: Vault's text can echo request details."""
    try:
        answer = call()
    except (requests.ConnectionError, requests.Timeout, vault_errors.VaultDown) as exc:
        raise Unavailable(
            f"Vault is unreachable ({type(exc).__name__}) for {what}", code="VAULT_UNAVAILABLE"
        ) from None
    except vault_errors.InvalidPath:
        raise Missing() from None
    except vault_errors.InvalidRequest as exc:
        text = " ".join(str(e) for e in (exc.errors or [])).lower()
        if "not found" in text or "could be found" in text:
            raise Missing() from None
        raise Refused() from None
    except (vault_errors.Unauthorized, vault_errors.Forbidden) as exc:
        raise _Denied(type(exc).__name__) from None
    except vault_errors.VaultError as exc:
        raise Unavailable(
            f"Vault failed on {what} ({type(exc).__name__})", code="VAULT_UNAVAILABLE"
        ) from None
    except requests.RequestException as exc:
        raise Unavailable(
            f"Vault call failed for {what} ({type(exc).__name__})", code="VAULT_UNAVAILABLE"
        ) from None
    except OSError as exc:  # a CA bundle (VAULT_CACERT) that cannot be read, and the like
        raise Unavailable(
            f"Vault call failed for {what} ({type(exc).__name__})", code="VAULT_UNAVAILABLE"
        ) from None
    # hvac hands back the HTTP response itself for a 200 it could not read as JSON: not
    # Vault's answer (a 204 is, for the calls that answer nothing)
    if isinstance(answer, requests.Response) and answer.status_code != 204:
        raise NotAVault(f"{what}: HTTP {answer.status_code}, not JSON")
    return answer
