"""The query parameters of the API are the ones its routes declare, each as often as it is
declared to come.

Starlette keeps every value of a repeated parameter and FastAPI hands a single-valued one
the last of them, so `?subject=a&subject=b` would silently mean `b` (and a proxy that
reads the first would disagree). Routes declare their list parameters by their type
(`list[...]`); every other parameter must appear at most once: 400 REPEATED_PARAMETER,
naming it.

A parameter that the route under /v1/ does not declare is refused too (400
UNKNOWN_PARAMETER, naming it, never its value): FastAPI would drop it without a word, so
`GET /v1/events?after=5000` (the parameter is `after_offset`) would page the log from its
start and `?types=fact` would answer unfiltered. A name or value shaped like a credential
is left to the credential check (CREDENTIAL_IN_URL).
"""

from __future__ import annotations

import types
from collections.abc import Iterator
from typing import Any, Union, get_args, get_origin

from fastapi import Request
from fastapi.dependencies.models import Dependant

from mnemo.domain.access import looks_like_key
from mnemo.domain.errors import InvalidInput
from mnemo_gateway.deps import CREDENTIAL_PARAMS

__all__ = ["single_valued_queries"]

# per route: the query parameters it declares, and those of them that take a list
_ROUTE_QUERIES: dict[int, tuple[frozenset[str], frozenset[str]]] = {}
_CHECKED_PREFIX = "/v1/"


def _query_fields(dependant: Dependant) -> Iterator[Any]:
    yield from dependant.query_params
    for sub in dependant.dependencies:
        yield from _query_fields(sub)


def _takes_many(annotation: Any) -> bool:
    """Whether a parameter's type is a list (or a tuple or set), through Optional."""
    origin = get_origin(annotation)
    if origin in (Union, types.UnionType):
        return any(_takes_many(arg) for arg in get_args(annotation) if arg is not type(None))
    return origin in (list, tuple, set, frozenset)


def _queries_of(route: Any) -> tuple[frozenset[str], frozenset[str]]:
    """The route's query parameters, and those that take a list (read once per route)."""
    known = _ROUTE_QUERIES.get(id(route))
    if known is None:
        dependant = getattr(route, "dependant", None)
        fields = list(_query_fields(dependant)) if dependant is not None else []
        known = (
            frozenset(f.alias for f in fields),
            frozenset(f.alias for f in fields if _takes_many(f.field_info.annotation)),
        )
        _ROUTE_QUERIES[id(route)] = known
    return known


def single_valued_queries(request: Request) -> None:
    """An app-wide dependency: refuses a query parameter the route under /v1/ does not
    declare, and a repeated one the route takes once."""
    params = request.query_params
    given = params.multi_items()
    route = request.scope.get("route")
    if given and route is not None and request.url.path.startswith(_CHECKED_PREFIX):
        declared = _queries_of(route)[0]
        for name, value in given:
            if name not in declared and not (
                name.lower() in CREDENTIAL_PARAMS or looks_like_key(value)
            ):
                raise InvalidInput(
                    "this route takes no such query parameter"
                    + (f"; it takes: {', '.join(sorted(declared))}" if declared else ""),
                    code="UNKNOWN_PARAMETER",
                    field=name[:64],
                )
    if len(given) == len(params):  # (the length counts each name once)
        return
    lists = _queries_of(request.scope.get("route"))[1]
    seen: set[str] = set()
    for name, _ in given:
        if name in seen and name not in lists:
            raise InvalidInput(
                "this query parameter takes one value and was given more than once",
                code="REPEATED_PARAMETER",
                field=name[:64],
            )
        seen.add(name)
