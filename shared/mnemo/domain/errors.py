"""One error hierarchy for Mnemo. Every error carries a stable, machine-readable code."""

from __future__ import annotations

from typing import Any

__all__ = [
    "ConflictError",
    "FencedOff",
    "InvalidInput",
    "KeyDestroyed",
    "MnemoError",
    "NotFound",
    "Unavailable",
]


class MnemoError(Exception):
    """Base of every error Mnemo raises on purpose."""

    code = "MNEMO_ERROR"

    def __init__(
        self,
        message: str,
        *,
        code: str | None = None,
        field: str | None = None,
        extra: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        if code is not None:
            self.code = code
        self.field = field
        self.extra = extra or {}

    def as_dict(self) -> dict[str, Any]:
        body: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.field is not None:
            body["field"] = self.field
        body.update(self.extra)
        return body


class InvalidInput(MnemoError):
    """The caller sent something Mnemo will not accept."""

    code = "INVALID_INPUT"


class NotFound(MnemoError):
    """The named thing does not exist within the caller's tenant."""

    code = "NOT_FOUND"


class ConflictError(MnemoError):
    """An optimistic-concurrency check failed (for example a stale expected sequence)."""

    code = "CONFLICT"


class FencedOff(ConflictError):
    """A consumer committed for a partition another process has claimed since: its batch
    is not written, and the new owner handles those records again."""

    code = "PARTITION_FENCED"


class Unavailable(MnemoError):
    """A dependency is down; the request may be retried."""

    code = "UNAVAILABLE"


class KeyDestroyed(MnemoError):
    """The encryption key was destroyed (crypto-shredded) or never existed."""

    code = "KEY_DESTROYED"


def echoed(value: str) -> str:
    """A caller's id as an error message may repeat it: an id shaped like an API key (one
    pasted in the wrong place) is not repeated, and a long one is cut short."""
    if value.startswith("mnemo_"):
        return "with that id (it has the form of an API key, which is not repeated here)"
    return value if len(value) <= 80 else f"{value[:40]}… ({len(value)} characters)"
