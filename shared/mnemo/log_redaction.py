"""Log redaction: API keys, and the values of credential-named or user-worded query
parameters, cut out of the records of the loggers that print request lines or a caller's
input. The gateway installs it, and so does the stdio MCP server (whose API calls httpx
logs)."""

from __future__ import annotations

import logging
import re
from typing import Any

from mnemo.domain.access import redact

__all__ = ["RedactCredentials", "install_log_redaction"]

# a credential-named query parameter's value, in a logged URL, and that of a parameter
# that carries the user's words (a document's file name and title, a memory's key and
# tags: each is sealed in the log or kept as a keyed hash, so none may stand in clear in
# a request line either)
_CREDENTIAL_QUERY = re.compile(
    r"((?:api_?key|access_token|admin_token|authorization|x-mnemo-key|filename|title"
    r"|(?<![A-Za-z0-9_-])(?:key|tag))=)"
    r"[^&\s\"]*",
    re.IGNORECASE,
)
# a memory's key in a path (GET /v1/subjects/{stream}/history/{key})
_KEY_PATH = re.compile(r"(/history/)[^/?#\s\"]+")


def _clean(value: Any) -> Any:
    if isinstance(value, str):
        return _KEY_PATH.sub(r"\1[redacted]", _CREDENTIAL_QUERY.sub(r"\1[redacted]", redact(value)))
    if value is None or isinstance(value, int | float):
        return value
    # an object formatted as text (httpx logs its URL objects): replaced by its cleaned
    # text when that differs, left as it is otherwise
    text = str(value)
    cleaned = _clean(text)
    return cleaned if cleaned != text else value


class RedactCredentials(logging.Filter):
    """Cuts API keys, and the values of credential-named query parameters, out of a log
    record's message and arguments."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.msg, str):
            record.msg = _clean(record.msg)
        if isinstance(record.args, tuple):
            record.args = tuple(_clean(a) for a in record.args)
        elif isinstance(record.args, dict):
            record.args = {k: _clean(v) for k, v in record.args.items()}
        return True


_FILTER = RedactCredentials()


# the loggers that print request lines or a caller's input: uvicorn's; httpx's, which
# logs each URL the MCP endpoint calls the API with (a document's file name, a memory id
# that is a pasted key); and the MCP server's, which logs a failed tool's or resource's
# name and URI (a filter applies to the records of its own logger only, so each is named)
_REDACTED_LOGGERS = (
    "uvicorn.access",
    "uvicorn.error",
    "mnemo",
    "mnemo.gateway",
    "httpx",
    "mcp.server.mcpserver.server",
)


def install_log_redaction() -> None:
    """On the loggers that print request lines or a caller's input, once per process."""
    for name in _REDACTED_LOGGERS:
        logger = logging.getLogger(name)
        if _FILTER not in logger.filters:
            logger.addFilter(_FILTER)
