"""What the client raises."""

from __future__ import annotations

from typing import Any

import httpx

__all__ = ["MnemoAPIError", "MnemoConnectionError", "api_error"]


class MnemoAPIError(Exception):
    """Mnemo answered with an error: its HTTP status, machine-readable code, message and the
    field it concerns (None when it concerns the whole request). `extra` holds any other
    fields of the error body (for example `rule_ids` of CONSTRAINT_VIOLATION)."""

    def __init__(
        self,
        status: int,
        code: str,
        message: str,
        field: str | None = None,
        *,
        extra: dict[str, Any] | None = None,
        retry_after: float | None = None,
    ) -> None:
        suffix = f" ({field})" if field else ""
        super().__init__(f"{code}: {message}{suffix}")
        self.status = status
        self.code = code
        self.message = message
        self.field = field
        self.extra = extra or {}
        self.retry_after = retry_after


class MnemoConnectionError(MnemoAPIError):
    """Mnemo could not be reached, or the connection broke before it answered (status 0)."""

    def __init__(self, message: str) -> None:
        super().__init__(0, "UNREACHABLE", message)


def api_error(response: httpx.Response, retry_after: float | None = None) -> MnemoAPIError:
    """The gateway's {"error": {"code", "message", "field", ...}} as an exception; a body of
    another shape becomes HTTP_<status> with the start of the text."""
    try:
        body = response.json()["error"]
        code, message = str(body["code"]), str(body["message"])
    except (ValueError, KeyError, TypeError):
        text = response.text.strip()[:200] or response.reason_phrase
        return MnemoAPIError(
            response.status_code, f"HTTP_{response.status_code}", text, retry_after=retry_after
        )
    field = body.get("field")
    extra = {k: v for k, v in body.items() if k not in ("code", "message", "field")}
    return MnemoAPIError(
        response.status_code,
        code,
        message,
        None if field is None else str(field),
        extra=extra,
        retry_after=retry_after,
    )
