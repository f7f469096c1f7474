"""Field types the routes' request bodies share."""

from __future__ import annotations

from typing import Annotated

from pydantic import AwareDatetime, BeforeValidator

from mnemo.domain.memory import is_number_as_time

__all__ = ["ID_CURSOR", "Instant"]


def _not_a_number(value: object) -> object:
    # JSON has no time type: a number could be seconds or milliseconds, so it is refused
    # rather than guessed at, and so is a string holding one
    if is_number_as_time(value):
        raise ValueError("a time is an ISO 8601 string with a UTC offset, not a number")
    return value


Instant = Annotated[AwareDatetime, BeforeValidator(_not_a_number)]

# a page cursor that is an id Mnemo gave (a memory's, a context's request_id): a lowercase
# UUID, so a forged or mistyped cursor is refused rather than read as a place in the order
ID_CURSOR = r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$"
