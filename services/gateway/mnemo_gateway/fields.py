"""Field types the routes' request bodies share."""

from __future__ import annotations

from typing import Annotated

from pydantic import AwareDatetime, BeforeValidator

__all__ = ["Instant"]


def _not_a_number(value: object) -> object:
    # JSON has no time type: a number could be seconds or milliseconds, so it is refused
    # rather than guessed at
    if isinstance(value, int | float) and not isinstance(value, bool):
        raise ValueError("a time is an ISO 8601 string with a UTC offset, not a number")
    return value


Instant = Annotated[AwareDatetime, BeforeValidator(_not_a_number)]
