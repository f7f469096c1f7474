"""The documents' entity read model (mnemo.domain.document_index) on Cassandra: the twin of
`sqlite_documents`, tables in schemas/cql/0010_documents.cql.

Every filter of a structured query reads one partition per field it names (and per value or
currency), never a tenant's rows:

- text `eq` / `in`: `entities_by_key` ((tenant, field, ekey)), one partition per value;
- comparisons (`gt`, `gte`, `lt`, `lte`, `between`, `within`, and `eq` / `in` / `ne` of
  numbers, amounts, dates and periods): `entities_by_field` ((tenant, field, unit)), one
  clustering range of `low` (unit: the currency of money, '' otherwise);
- text `ne` / `contains`: the field's whole partition of `entities_by_field` (unit '',
  low 0). That is the bound of those two ops: they read every row of the field.
Streams (a query's `subjects`) and a period's `high` are checked on the rows read.

Text values are kept as keyed hashes (`ekey`: the store's blinder over the field and the
normalised value), like memory keys and tags: the tables, and the tombstones a forget
leaves, name no word. A lookup by value hashes what it looks for and returns its rows with
the value it was asked for; rows read whole from a field's partition come back with `key`
None, and the query engine reads the value from the section's (opened) text. Numbers,
amounts, day numbers and currencies are kept as they are: a range needs them sortable.

The transaction (`transaction.py`) keeps an overlay of documents (record and entity rows,
text keys hashed) and diffs it against the stored rows at commit; `document_entities`
lists a document's rows so that a re-ingest, a forget and a purge delete every index row,
and `document_sections` the documents of a section's rows, so that forgetting one memory
reads only those.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterable, Sequence
from dataclasses import replace
from typing import Any

from mnemo.adapters.cassandra_store.common import Row
from mnemo.adapters.cassandra_store.connection import _Connection
from mnemo.adapters.cassandra_store.rows import RowSet, _chunks
from mnemo.domain.document_index import DocumentRecord, EntityFilter, EntityRow

_TOP = sys.float_info.max  # the open ends of a clustering range

Blind = Callable[[str, str, str], str]
Stored = tuple[DocumentRecord, tuple[EntityRow, ...]]  # text keys hashed


def entity_key(blind: Blind, tenant: str, field: str, value: str) -> str:
    """The keyed hash a text value of `field` is stored and looked up as."""
    return blind(tenant, "entity", f"{field}\x00{value}")


def hashed(rows: Iterable[EntityRow], blind: Blind) -> tuple[EntityRow, ...]:
    """Rows as they are stored: each text value replaced by its keyed hash."""
    return tuple(
        replace(r, key=entity_key(blind, r.tenant, r.field, r.key))
        if r.kind == "text" and r.key is not None
        else r
        for r in rows
    )


def document_rows(ks: str, document: Stored | None) -> RowSet:
    """Every row a document owns (its entity rows already hashed), by (keyspace, table)."""
    if document is None:
        return {}
    record, entities = document
    t, d = record.tenant, record.document_id
    rows: RowSet = {
        (ks, "documents"): {
            (t, d): (
                record.stream,
                record.event_id,
                record.sha256,
                record.media_type,
                record.pages,
                record.sections,
                record.language,
                record.ingested_at,
            )
        },
        (ks, "documents_by_stream"): {(t, record.stream, d): ()},
        (ks, "document_entities"): {},
        (ks, "document_sections"): {},
        (ks, "entities_by_key"): {},
        (ks, "entities_by_field"): {},
    }
    for e in entities:
        span = (e.start, e.end, e.document_level)
        place = (d, e.section, e.ordinal)
        rows[(ks, "document_entities")][(t, *place)] = (
            e.stream,
            e.memory_id,
            e.field,
            e.kind,
            e.key,
            e.low,
            e.high,
            *span,
        )
        rows[(ks, "document_sections")][(t, e.memory_id, d)] = ()
        if e.kind == "text":
            rows[(ks, "entities_by_key")][(t, e.field, e.key, *place)] = (
                e.stream,
                e.memory_id,
                e.kind,
                e.low,
                e.high,
                *span,
            )
        unit = (e.key or "") if e.kind == "money" else ""
        low = e.low if e.low is not None else 0.0
        rows[(ks, "entities_by_field")][(t, e.field, unit, low, *place)] = (
            e.stream,
            e.memory_id,
            e.kind,
            e.key,
            e.high,
            *span,
        )
    return rows


def _record(tenant: str, row: Row) -> DocumentRecord:
    d, stream, event_id, sha, media_type, pages, sections, language, at = row
    return DocumentRecord(
        tenant=tenant,
        document_id=str(d),
        stream=str(stream),
        event_id=str(event_id),
        sha256=str(sha),
        media_type=str(media_type),
        pages=int(pages),
        sections=int(sections),
        language=str(language),
        ingested_at=str(at),
    )


def _float(value: Any) -> float | None:
    return float(value) if value is not None else None


class _Documents(_Connection):
    """DocumentReads (the store declares the port), and the stored rows the transaction
    diffs against."""

    def document(self, tenant: str, document_id: str) -> DocumentRecord | None:
        row = self._one(tenant, "doc_get", [tenant, document_id])
        return _record(tenant, row) if row is not None else None

    def _documents(self, tenant: str, document_ids: Sequence[str]) -> list[DocumentRecord]:
        ks = self._keyspace(tenant)
        ids = sorted(set(document_ids))
        found = self._concurrently([(ks, "docs_get", [tenant, chunk]) for chunk in _chunks(ids)])
        return sorted(
            (_record(tenant, row) for rows in found for row in rows),
            key=lambda r: r.document_id,
        )

    def _stream_document_ids(self, tenant: str, stream: str) -> list[str]:
        return [str(r[0]) for r in self._rows(tenant, "doc_ids_of_stream", [tenant, stream])]

    def _section_document_ids(self, tenant: str, memory_id: str) -> list[str]:
        return [str(r[0]) for r in self._rows(tenant, "doc_ids_of_section", [tenant, memory_id])]

    def stream_documents(self, tenant: str, stream: str) -> list[DocumentRecord]:
        return self._documents(tenant, self._stream_document_ids(tenant, stream))

    def _stored_document(self, tenant: str, document_id: str) -> Stored | None:
        record = self.document(tenant, document_id)
        if record is None:
            return None
        ks = self._keyspace(tenant)
        rows = tuple(
            EntityRow(
                tenant,
                document_id,
                str(stream),
                str(memory_id),
                int(section),
                int(ordinal),
                str(field),
                str(kind),
                ekey,
                _float(low),
                _float(high),
                int(start),
                int(end),
                bool(level),
            )
            for (
                section,
                ordinal,
                stream,
                memory_id,
                field,
                kind,
                ekey,
                low,
                high,
                start,
                end,
                level,
            ) in self._iterate(ks, "doc_entities", [tenant, document_id], 5_000)
        )
        return record, rows

    def entity_rows(self, tenant: str, wanted: EntityFilter) -> list[EntityRow]:
        """The rows of one filter: one partition per field (and value or currency), a
        clustering range of `low` for comparisons (see the module doc)."""
        ks = self._keyspace(tenant)
        text = wanted.kind == "text"
        reads: list[tuple[str, list[Any], str | None]] = []
        for field in wanted.fields:
            if text and wanted.keys is not None:
                for key in dict.fromkeys(wanted.keys):
                    ekey = entity_key(self._blind, tenant, field, key)
                    reads.append(("ent_key", [tenant, field, ekey], key))
                continue
            units: Sequence[str] = ("",) if text or wanted.keys is None else wanted.keys
            low = wanted.low_min if wanted.low_min is not None and not text else -_TOP
            high = wanted.low_max if wanted.low_max is not None and not text else _TOP
            for unit in dict.fromkeys(units):
                reads.append(("ent_range", [tenant, field, unit, low, high], None))
        found = self._concurrently([(ks, name, params) for name, params, _ in reads])
        streams = set(wanted.streams)
        out: list[EntityRow] = []
        for (name, params, asked), rows in zip(reads, found, strict=True):
            field = params[1]
            for row in rows:
                if name == "ent_key":
                    d, section, ordinal, stream, memory_id, kind, low_, high_ = row[:8]
                    start, end, level = row[8:]
                    value: str | None = asked
                else:
                    low_, d, section, ordinal, stream, memory_id, kind, ekey, high_ = row[:9]
                    start, end, level = row[9:]
                    value = ekey if kind == "money" else None
                    if kind == "text":
                        low_ = None
                if streams and stream not in streams:
                    continue
                if wanted.high_max is not None and (high_ is None or high_ > wanted.high_max):
                    continue
                out.append(
                    EntityRow(
                        tenant,
                        str(d),
                        str(stream),
                        str(memory_id),
                        int(section),
                        int(ordinal),
                        field,
                        str(kind),
                        value,
                        _float(low_),
                        _float(high_),
                        int(start),
                        int(end),
                        bool(level),
                    )
                )
        out.sort(key=lambda r: (r.document_id, r.section, r.ordinal, r.field))
        return out

    def _document_partitions(self, tenant: str) -> set[tuple[str, tuple[Any, ...]]]:
        """Every partition of the entity tables a purge of `tenant` must delete, named from
        the stored documents and their entity rows."""
        ks = self._keyspace(tenant)
        partitions: set[tuple[str, tuple[Any, ...]]] = set()
        for document_id, stream in self._iterate(ks, "purge:documents", [tenant], 5_000):
            partitions.add(("documents_by_stream", (tenant, stream)))
            partitions.add(("document_entities", (tenant, document_id)))
            for row in self._iterate(ks, "doc_entities", [tenant, document_id], 5_000):
                partitions.add(("document_sections", (tenant, row[3])))
                field, kind, ekey = row[4], row[5], row[6]
                if kind == "text":
                    partitions.add(("entities_by_key", (tenant, field, ekey)))
                unit = (ekey or "") if kind == "money" else ""
                partitions.add(("entities_by_field", (tenant, field, unit)))
        return partitions
