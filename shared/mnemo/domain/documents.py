"""Documents: what a parsed document is, the entities found in its sections, and the typed
values structured queries compare them with.

A parser (`mnemo.adapters.document_parsers`) turns a document's bytes into a
`ParsedDocument`: its sections in reading order, each with the page (PDF), sheet (XLSX) and
clause number it came from. `extract_entities` then reads each section with the entity
rules (`mnemo/rules/entities.yaml`, extended by the operator's file named by
`MNEMO_ENTITY_RULES_FILE`): parties, organisations, people, contract and clause numbers,
dates, periods, amounts, rates and durations, each normalised to a typed value so that a
query compares values, not spellings ("50万元" equals "人民币500,000元", "5%" equals "百分之五").

Everything here is pure: the same text and rules give the same entities. The patterns run
on the linear-time engine (`mnemo.domain.patterns`), the operator's as well as Mnemo's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from mnemo.domain.errors import InvalidInput

__all__ = [
    "DOCUMENT_FIELDS",
    "FIELD_KINDS",
    "KINDS",
    "OPS_BY_KIND",
    "DocumentLimits",
    "DocumentRejected",
    "Entity",
    "EntityKind",
    "EntityValue",
    "Language",
    "ParsedDocument",
    "Section",
]

EntityKind = Literal["text", "number", "percent", "money", "date", "period", "duration"]
Language = Literal["zh", "en", "mixed"]
# text: normalised string; number/percent/duration: float (percent as a fraction, duration
# in days); money: {"amount": float, "currency": "CNY"}; date: "YYYY-MM-DD"; period:
# {"start": "YYYY-MM-DD", "end": "YYYY-MM-DD"}
EntityValue = str | float | dict[str, Any]

KINDS: tuple[str, ...] = ("text", "number", "percent", "money", "date", "period", "duration")

# the fields Mnemo's own rules fill, with their kinds; `party` is a query-side alias that
# matches party_a or party_b. An operator's rules may add fields.
FIELD_KINDS: dict[str, str] = {
    "party_a": "text",
    "party_b": "text",
    "party": "text",
    "organisation": "text",
    "person": "text",
    "contract_no": "text",
    "clause_no": "text",
    "signed_at": "date",
    "date": "date",
    "period": "period",
    "amount": "money",
    "penalty_rate": "percent",
    "rate": "percent",
    "duration": "duration",
}

# fields found in any section that hold for the whole document
DOCUMENT_FIELDS: frozenset[str] = frozenset({"party_a", "party_b", "contract_no", "signed_at"})

_ORDERED = ("eq", "ne", "in", "gt", "gte", "lt", "lte", "between")
OPS_BY_KIND: dict[str, frozenset[str]] = {
    "text": frozenset({"eq", "ne", "in", "contains"}),
    "number": frozenset(_ORDERED),
    "percent": frozenset(_ORDERED),
    "money": frozenset(_ORDERED),
    "duration": frozenset(_ORDERED),
    "date": frozenset({*_ORDERED, "within"}),
    # a period is within a query period when it lies inside it, and contains a date or a
    # period inside it; the order compares starts
    "period": frozenset({*_ORDERED, "within", "contains"}),
}


class DocumentRejected(InvalidInput):
    """A document Mnemo will not store; nothing of it is kept. `status` is the HTTP status
    its code answers with."""

    code = "DOCUMENT_MALFORMED"
    STATUS: dict[str, int] = {  # noqa: RUF012 (a constant table)
        "DOCUMENT_TOO_LARGE": 413,
        "UNSUPPORTED_DOCUMENT_TYPE": 415,
        "DOCUMENT_MALFORMED": 400,
        "DOCUMENT_ENCRYPTED": 400,
        "DOCUMENT_BOMB": 400,
        "DOCUMENT_EMPTY": 400,
    }

    def __init__(self, code: str, message: str) -> None:
        if code not in self.STATUS:
            raise ValueError(f"unknown document error code {code}")
        super().__init__(message, code=code)

    @property
    def status(self) -> int:
        return self.STATUS[self.code]


@dataclass(frozen=True, slots=True)
class DocumentLimits:
    """What a parser accepts; the settings fill it. Zip containers (DOCX, XLSX) are checked
    from their central directory before any member is inflated."""

    max_bytes: int = 20 * 1024 * 1024
    max_pages: int = 2_000  # PDF pages, XLSX sheets, estimated pages of the other formats
    max_zip_members: int = 2_000
    max_expanded_bytes: int = 200 * 1024 * 1024  # the members' declared sizes, added up
    max_compression_ratio: float = 100.0  # a member's declared size over its packed size
    max_sections: int = 20_000
    section_chars: int = 4_000  # the longest a section's text may be

    def __post_init__(self) -> None:
        for name in ("max_bytes", "max_pages", "max_zip_members", "max_expanded_bytes"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive")
        if self.max_compression_ratio < 1:
            raise ValueError("max_compression_ratio must be at least 1")
        if not 200 <= self.section_chars <= 4_000:
            raise ValueError("section_chars must be between 200 and 4000")


@dataclass(frozen=True, slots=True)
class Section:
    index: int  # 0.. in reading order, stable for the same bytes
    text: str  # one clause, paragraph group or block of sheet rows; at most 4,000 chars
    page: int | None  # 1-based page (PDF), sheet index + 1 (XLSX), None otherwise
    clause: str | None  # the clause number, normalised: "5.2"; "第八条" -> "8"
    heading: str | None


@dataclass(frozen=True, slots=True)
class ParsedDocument:
    media_type: str
    pages: int
    language: Language
    title: str | None
    sections: tuple[Section, ...] = field(default_factory=tuple)


@dataclass(frozen=True, slots=True)
class Entity:
    field: str  # the role: party_a, amount, signed_at, ... (FIELD_KINDS and the operator's)
    kind: str  # one of KINDS
    value: EntityValue
    text: str  # the span as written
    start: int  # offsets of that span in the section's text
    end: int
