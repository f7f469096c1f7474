"""What is checked only where input enters Mnemo (an HTTP request, a topic record), and not
again when the log or a read model is read back.

Input validated with `EDGE` as its pydantic context is held to the strict rules: booleans
are JSON booleans (`"true"`, `1` or `"yes"` are refused, where pydantic's lax mode would
take them as true), numbers are JSON numbers (`"100"` or `true` are refused, and a count
is a JSON integer, not `100.0`), and client patterns must run on the linear-time engine.
Events already in the log are decoded without it, so whatever was once accepted still
reads the same way (a rebuild gives the same read models).
"""

from __future__ import annotations

import unicodedata
from typing import Annotated, Any

from pydantic import BeforeValidator, ValidationInfo
from pydantic_core import PydanticCustomError

__all__ = ["EDGE", "JsonBool", "at_edge", "blank", "json_int", "json_number"]

EDGE: dict[str, Any] = {"edge": True}


def blank(text: str) -> bool:
    """Whether a text shows nothing: only white space, invisible format characters
    (zero-width spaces and joiners, word joiners, byte-order marks: Unicode's Cf), control
    characters (NUL and the rest of Cc) and noncharacters (U+FDD0 to U+FDEF, and the last
    two code points of every plane)."""
    return all(
        ch.isspace() or unicodedata.category(ch) in ("Cf", "Cc") or _noncharacter(ch) for ch in text
    )


def _noncharacter(ch: str) -> bool:
    point = ord(ch)
    return 0xFDD0 <= point <= 0xFDEF or (point & 0xFFFE) == 0xFFFE


def at_edge(info: ValidationInfo) -> bool:
    """Whether this validation checks new input (see the module docstring)."""
    context = info.context
    return isinstance(context, dict) and context.get("edge") is True


def _json_bool(value: Any, info: ValidationInfo) -> Any:
    if at_edge(info) and not isinstance(value, bool):
        raise PydanticCustomError("strict_boolean", "must be a JSON boolean, true or false")
    return value


JsonBool = Annotated[bool, BeforeValidator(_json_bool)]
"""A boolean that, at the edge, only a JSON `true` or `false` gives."""


def json_int(value: Any, info: ValidationInfo) -> Any:
    """A before-validator: at the edge, only a JSON integer (not "100", 100.0 or true).
    Used as `field_validator(..., mode="before")(json_int)`, so the field's own bounds stay
    in its schema."""
    if (
        at_edge(info)
        and value is not None
        and (isinstance(value, bool) or not isinstance(value, int))
    ):
        if isinstance(value, float) and value.is_integer() and abs(value) >= 2**63:
            # the JSON reader gives an integer beyond 64 bits as a float: it was one
            raise PydanticCustomError(
                "strict_number", "is out of range (a JSON integer below 2**63 at most)"
            )
        raise PydanticCustomError("strict_number", "must be a JSON integer")
    return value


def json_number(value: Any, info: ValidationInfo) -> Any:
    """A before-validator: at the edge, only a JSON number (not "0.5" or true)."""
    if (
        at_edge(info)
        and value is not None
        and (isinstance(value, bool) or not isinstance(value, int | float))
    ):
        raise PydanticCustomError("strict_number", "must be a JSON number")
    return value
