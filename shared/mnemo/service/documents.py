"""Documents: ingesting one (parsed, its bytes sealed into the blob store, then a
DocumentIngested event), what the registrar reads of it (`BlobDocuments`), and the
structured query over the entity read model (docs/documents.md).

A document that cannot be read is refused before anything is stored: it is parsed first,
and only a document that parsed is stored and logged.
"""

from __future__ import annotations

import logging
import threading
import unicodedata
import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from mnemo.domain.document_index import (
    DocumentRecord,
    EntityRow,
    decode,
    parse_location,
    parse_query,
    row_filter,
    row_matches,
    text_value,
)
from mnemo.domain.documents import (
    Condition,
    DocumentLimits,
    DocumentRejected,
    Entity,
    EntityRules,
    ParsedDocument,
    extract_entities,
)
from mnemo.domain.errors import InvalidInput, NotFound, Unavailable, echoed
from mnemo.domain.events import DocumentIngested, Envelope, MemoryDeclared
from mnemo.domain.ids import names_no_user, valid_stream
from mnemo.domain.memory import MAX_CONTENT_CHARS, MemoryStatus, MemoryType
from mnemo.domain.pii import mask_by_policy
from mnemo.domain.sealed import EncryptionBlock
from mnemo.ports import DocumentReads, EventLog, MemoryReads, VectorFilter
from mnemo.service.app import Mnemo, RequestContext, Wait
from mnemo.service.blobs import SealedBlobs, digest_of

__all__ = ["BlobDocuments", "Documents", "Parser", "document_id_of"]

# bytes, filename, declared media type (None: detect), limits -> the parsed document
Parser = Callable[[bytes, str, str | None, DocumentLimits], ParsedDocument]

log = logging.getLogger("mnemo.documents")

_NAMESPACE = uuid.UUID("6f1c1d2e-5b7a-4c1e-9a49-0d6f3a0e2b11")
TENANT_SUBJECT = "tenant"  # the stream of a tenant-wide document


def document_id_of(tenant: str, stream: str, keyed: str) -> str:
    """A document's id: the same bytes in the same subject are the same document. `keyed`
    is a keyed hash of the bytes' sha256 (`Sealer.derived_digest`), not the sha256 itself:
    the id stands in clear in the log and the read models, and one derived from the plain
    digest would let anyone who holds a document test whether it was ingested."""
    return str(uuid.uuid5(_NAMESPACE, f"{tenant}\x00{stream}\x00{keyed}"))


# the parsed documents a process keeps between its gateway's parse and its registrar's
# read, counted in characters of section text (a few thousand contracts)
PARSED_CACHE_CHARS = 8_000_000


class _ParsedCache:
    """Documents this process parsed on ingest, until its registrar reads them: the
    embedded mode's gateway and registrar share one process, and parsing is the costliest
    step of both. Keyed by tenant, stream, digest and filename (what the parse depends
    on besides the bytes, which the digest names); bounded by characters, least recently
    used first out. It never answers for bytes the blob store no longer gives: `read`
    opens the blob first, and a forget drops the stream's entries."""

    def __init__(self, max_chars: int) -> None:
        self.max_chars = max_chars
        self._entries: OrderedDict[tuple[str, str, str, str], tuple[ParsedDocument, int]] = (
            OrderedDict()
        )
        self._chars = 0
        self._lock = threading.Lock()

    def put(self, key: tuple[str, str, str, str], parsed: ParsedDocument) -> None:
        size = sum(len(s.text) for s in parsed.sections) + 1
        if size > self.max_chars:
            return
        with self._lock:
            old = self._entries.pop(key, None)
            if old is not None:
                self._chars -= old[1]
            self._entries[key] = (parsed, size)
            self._chars += size
            while self._chars > self.max_chars:
                _, (_, dropped) = self._entries.popitem(last=False)
                self._chars -= dropped

    def take(self, key: tuple[str, str, str, str]) -> ParsedDocument | None:
        """The entry, removed: the registrar reads a document once (a redelivery parses)."""
        with self._lock:
            found = self._entries.pop(key, None)
            if found is None:
                return None
            self._chars -= found[1]
            return found[0]

    def drop(self, tenant: str, stream: str | None) -> None:
        with self._lock:
            for key in [k for k in self._entries if k[0] == tenant and stream in (None, k[1])]:
                self._chars -= self._entries.pop(key)[1]

    def __len__(self) -> int:
        return len(self._entries)


class BlobDocuments:
    """The registrar's view of documents (handlers.registration.DocumentSource): a
    document's sections parsed again from its blob (or, in the process that ingested it,
    as parsed then: the same bytes parse the same), and a section's entities."""

    def __init__(
        self,
        blobs: SealedBlobs,
        parse: Parser,
        limits: DocumentLimits,
        rules: EntityRules,
        cache_chars: int = PARSED_CACHE_CHARS,
    ) -> None:
        self.blobs = blobs
        self.parse = parse
        self.limits = limits
        self.rules = rules
        self.parsed = _ParsedCache(cache_chars)

    def parse_ingested(
        self,
        tenant: str,
        stream: str,
        sha256: str,
        data: bytes,
        filename: str,
        media_type: str | None,
    ) -> ParsedDocument:
        """Parse a document being ingested (DocumentRejected when it cannot be), and keep
        the result for this process' registrar. The parse depends on the bytes and, for
        text, on whether the name or the declared type says Markdown; the registrar asks
        with the type detected here, which says the same."""
        parsed = self.parse(data, filename, media_type, self.limits)
        self.parsed.put((tenant, stream, sha256, filename), parsed)
        return parsed

    def read(self, event: Envelope, ingested: DocumentIngested) -> ParsedDocument | None:
        """The document's sections as they become memories: their text through the same
        PII detector and tenant policy as any other memory's content, so a value the policy
        masks is masked (before the entities are read). Values the policy encrypts stay
        here; registration puts placeholders in their place (`seal`), as in any memory's
        content (docs/documents.md)."""
        kept = self.parsed.take((event.tenant, event.stream, ingested.sha256, ingested.filename))
        try:
            data = self.blobs.get(event.tenant, event.stream, ingested.sha256)
        except Unavailable as exc:
            if exc.code != "BLOB_UNREADABLE":
                raise  # the vault or the store away: the registrar tries again
            # altered or sealed elsewhere: no section of it can be trusted, for good
            log.warning("document %s: its stored blob cannot be opened", ingested.document_id)
            return None
        if data is None:
            return None  # gone or its key destroyed: the kept parse goes with it
        if kept is not None and kept.media_type == ingested.media_type:
            parsed = kept
        else:
            try:
                parsed = self.parse(data, ingested.filename, ingested.media_type, self.limits)
            except DocumentRejected:
                return None
        policy = self.blobs.sealer.policy.for_tenant(event.tenant)
        sections = tuple(replace(s, text=mask_by_policy(s.text, policy)) for s in parsed.sections)
        return replace(parsed, sections=sections)

    def entities(self, text: str, language: str) -> tuple[Entity, ...]:
        return extract_entities(text, language=language, rules=self.rules)

    def seal(self, event: Envelope, text: str) -> tuple[str, EncryptionBlock | None]:
        """A section's text as its memory holds it: every value the tenant's policy
        encrypts replaced by its placeholder, as in any memory's content, with the block of
        their ciphertexts (None when it holds none). The memory's content, its embedding and
        its keyword terms then never hold those values; reads open them."""
        draft = event.model_copy(
            update={
                "type": MemoryDeclared.TYPE,
                "schema_version": MemoryDeclared.VERSION,
                "payload": {"memory": {"type": MemoryType.LONG_TERM.value, "content": text}},
                "encryption": None,
            }
        )
        sealer = self.blobs.sealer
        try:
            sealed = sealer.seal_found(draft, strict=False)
        except InvalidInput:  # more distinct values than a block holds: masked, not kept
            return sealer.mask_text(text), None
        if sealed.encryption is None:
            return text, None
        content = str(sealed.payload["memory"]["content"])
        if len(content) > MAX_CONTENT_CHARS:  # placeholders longer than the values they hide
            return sealer.mask_text(text), None
        return content, sealed.encryption

    def opened(self, tenant: str, text: str, sealed: EncryptionBlock | None) -> str:
        """A section's text with its placeholders opened (the entities are read from it)."""
        sealer = self.blobs.sealer
        return sealer.open_text(text, sealer.open_block(tenant, sealed))

    def forget(self, tenant: str, stream: str | None) -> int:
        """Delete the blobs of a forgotten stream (None: of the whole tenant)."""
        self.parsed.drop(tenant, stream)
        store = self.blobs.store
        return (
            store.delete_tenant(tenant) if stream is None else store.delete_stream(tenant, stream)
        )


@dataclass(frozen=True, slots=True)
class Ingested:
    document_id: str
    event_id: str
    sha256: str
    pages: int
    sections: int
    # accepted | registered | duplicate (ingested before) | pending (the wait ran out) |
    # rejected
    status: str

    def as_dict(self) -> dict[str, Any]:
        return {
            "document_id": self.document_id,
            "event_id": self.event_id,
            "sha256": self.sha256,
            "pages": self.pages,
            "sections": self.sections,
            "status": self.status,
        }


# bidirectional marks and overrides: `\u202egpj.exe` shows as `exe.jpg` wherever the name
# is printed (the CLI, the console, a log)
_BIDI_CONTROLS = frozenset(
    "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
)


def _unfit(c: str) -> bool:
    """A character a file name may not hold: C0 and C1 controls and DEL (a C1 CSI starts
    a terminal escape sequence), surrogates, line and paragraph separators, bidi controls."""
    return c in _BIDI_CONTROLS or unicodedata.category(c) in ("Cc", "Cs", "Zl", "Zp")


def _filename(name: str) -> str:
    name = name.strip()
    if not name or len(name) > 256 or any(_unfit(c) for c in name):
        raise InvalidInput(
            "filename is 1 to 256 characters, no control characters",
            code="INVALID_FILENAME",
            field="filename",
        )
    return name


def checked_names(subject: str, filename: str) -> str:
    """The filename a document is ingested under (trimmed), once the subject is a stream
    (INVALID_STREAM) and the filename fit (INVALID_FILENAME); the gateway asks before it
    reads the body."""
    if not valid_stream(subject) or names_no_user(subject):
        raise InvalidInput(
            "subject is a stream (user:U1, session:S1, ...) or 'tenant'; a user stream "
            "names its user",
            code="INVALID_STREAM",
            field="subject",
        )
    return _filename(filename)


class Documents:
    """The document use cases: ingest and structured query."""

    def __init__(
        self,
        app: Mnemo,
        source: BlobDocuments,
        reads: DocumentReads,
        memories: MemoryReads,
        events: EventLog,
    ) -> None:
        self.app = app
        self.source = source
        self.reads = reads
        self.memories = memories  # opened: a user's sections read in clear
        self.events = events  # opened: a document's filename is sealed in its event
        # context sections filled from a structured query ask these use cases for the hits
        app.contexts.documents = self

    # ---- ingest -------------------------------------------------------------------------

    def ingest(
        self,
        ctx: RequestContext,
        subject: str,
        filename: str,
        data: bytes,
        media_type: str | None = None,
        wait: Wait = Wait.NONE,
        timeout: float = 10.0,
    ) -> Ingested:
        """Parse, store, log. A bad document raises DocumentRejected and nothing is kept."""
        filename = checked_names(subject, filename)
        # a forgotten tenant stores no new document (the blob would outlive its keys)
        self.source.blobs.sealer.refuse_forgotten_tenant(ctx.tenant)
        limits = self.source.limits
        if len(data) > min(limits.max_bytes, self.source.blobs.max_bytes):
            raise DocumentRejected(
                "DOCUMENT_TOO_LARGE",
                f"the document is {len(data)} bytes; the limit is "
                f"{min(limits.max_bytes, self.source.blobs.max_bytes)}",
            )
        sha = digest_of(data)
        parsed = self.source.parse_ingested(ctx.tenant, subject, sha, data, filename, media_type)
        if not parsed.sections:
            raise DocumentRejected("DOCUMENT_EMPTY", "no text could be read from the document")
        sealer = self.source.blobs.sealer
        document_id = document_id_of(
            ctx.tenant, subject, sealer.derived_digest(ctx.tenant, subject, f"document\x00{sha}")
        )
        self.source.blobs.put(ctx.tenant, subject, data)
        payload = DocumentIngested(
            document_id=document_id,
            sha256=sha,
            filename=filename,
            media_type=parsed.media_type,
            size=len(data),
            pages=parsed.pages,
            sections=len(parsed.sections),
            language=parsed.language,
            title=(parsed.title or None) and parsed.title[:512],
        )
        result = self.app.append_own(ctx, subject, payload, wait, timeout)
        accepted = result.accepted[0]
        status = "accepted"
        if wait is not Wait.NONE:
            outcomes = result.outcomes.get(accepted.event_id, [])
            if not result.complete:
                status = "pending"
            elif any(o.kind.value == "rejected" for o in outcomes):
                status = "rejected"
            elif outcomes and all(o.kind.value == "duplicate" for o in outcomes):
                status = "duplicate"  # the same bytes in the same subject, ingested before
            else:
                status = "registered"
        return Ingested(
            document_id, accepted.event_id, sha, parsed.pages, len(parsed.sections), status
        )

    # ---- query --------------------------------------------------------------------------

    def query(self, ctx: RequestContext, body: Any) -> dict[str, Any]:
        """The documents of the tenant meeting every condition (docs/documents.md)."""
        q = parse_query(body, self.source.rules)
        matched, records = self._matching(ctx.tenant, q.conditions, q.subjects)
        order = list(records)
        if q.query:
            order = self._ranked(ctx.tenant, q.query, order, q.subjects)
        return {
            "documents": [
                self._answer(ctx.tenant, records[d], matched[d], q.hits_limit)
                for d in order[: q.limit]
            ],
            "total": len(order),
        }

    def conditions(self, where: Any, path: str) -> tuple[Condition, ...]:
        """A context section's conditions checked against the entity rules in force, with
        QUERY_INVALID naming `path` (`sections.2.where[0].value`)."""
        try:
            return parse_query({"where": list(where)}, self.source.rules).conditions
        except InvalidInput as exc:
            if exc.field and exc.field.startswith("where"):
                exc.field = path + exc.field.removeprefix("where")
            raise

    def section_hits(
        self, tenant: str, conditions: Sequence[Condition], subjects: Sequence[str]
    ) -> list[str]:
        """The memory ids of the sections holding the entities that met the conditions,
        documents newest first, each document's in section order (what POST /v1/query's
        hits are), for a context section filled from a structured query."""
        matched, records = self._matching(tenant, conditions, subjects)
        found: list[str] = []
        for d in records:
            for row in sorted(matched[d], key=lambda r: (r.section, r.ordinal)):
                found.append(row.memory_id)
        return list(dict.fromkeys(found))

    def _matching(
        self, tenant: str, conditions: Sequence[Condition], subjects: Sequence[str]
    ) -> tuple[dict[str, list[EntityRow]], dict[str, DocumentRecord]]:
        """The rows that met each condition by document, and the matching documents'
        records, newest first. Conditions are ANDed per document."""
        matched: dict[str, list[EntityRow]] | None = None
        for condition in conditions:
            rows = self.reads.entity_rows(tenant, row_filter(condition, tuple(subjects)))
            rows = self._with_values(tenant, rows)
            found: dict[str, list[EntityRow]] = {}
            for row in rows:
                if row_matches(condition, row):
                    found.setdefault(row.document_id, []).append(row)
            if matched is None:
                matched = found
            else:
                matched = {d: [*matched[d], *found[d]] for d in matched.keys() & found.keys()}
            if not matched:
                break
        matched = matched or {}
        records = {d: r for d in matched if (r := self.reads.document(tenant, d)) is not None}
        order = sorted(records, key=lambda d: (records[d].ingested_at, d), reverse=True)
        return matched, {d: records[d] for d in order}

    def _with_values(self, tenant: str, rows: list[EntityRow]) -> list[EntityRow]:
        """Text rows a store returned without their value (it keeps keyed hashes of text:
        Cassandra, for `ne` and `contains`) with the value read again from the section's
        text; a row whose section is gone or reads as no value is left out."""
        blind = {r.memory_id for r in rows if r.kind == "text" and r.key is None}
        if not blind:
            return rows
        sections = {
            m.memory_id: m
            for m in self.memories.get_many(tenant, sorted(blind))
            if m.status is not MemoryStatus.FORGOTTEN
        }
        out: list[EntityRow] = []
        for row in rows:
            if row.kind == "text" and row.key is None:
                memory = sections.get(row.memory_id)
                if memory is None:
                    continue
                value = text_value(
                    self.source.rules, row.field, memory.content[row.start : row.end]
                )
                if value is None:
                    continue
                row = replace(row, key=value)
            out.append(row)
        return out

    def _ranked(
        self, tenant: str, text: str, order: list[str], subjects: Sequence[str]
    ) -> list[str]:
        """The exact result reordered by how close its sections are to `text` (the best
        section counts); never a document outside it."""
        if not order:
            return order
        app = self.app
        vector = app.query_embedder.embed_query(text)
        flt = VectorFilter(
            streams=tuple(subjects),
            types=(MemoryType.LONG_TERM.value,),
            tags=tuple(f"document:{d}" for d in order),
        )
        best: dict[str, float] = {}
        wanted = set(order)
        for memory_id, score in app.index.search(tenant, vector, min(1_000, 20 * len(order)), flt):
            memory = self.memories.get(tenant, memory_id)
            if memory is None:
                continue
            for tag in memory.tags:
                d = tag.removeprefix("document:")
                if tag.startswith("document:") and d in wanted:
                    best[d] = max(best.get(d, -1.0), score)
        rank = {d: i for i, d in enumerate(order)}
        return sorted(order, key=lambda d: (-best.get(d, -2.0), rank[d]))

    def _answer(
        self, tenant: str, record: DocumentRecord, rows: Sequence[EntityRow], hits_limit: int
    ) -> dict[str, Any]:
        """A matching document with its first `hits_limit` sections that met the
        conditions, in section order; `hits_total` counts them all."""
        by_memory: dict[str, list[EntityRow]] = {}
        for row in sorted(rows, key=lambda r: (r.section, r.ordinal)):
            seen = by_memory.setdefault(row.memory_id, [])
            if row not in seen:
                seen.append(row)
        hits_total = len(by_memory)
        by_memory = dict(list(by_memory.items())[:hits_limit])
        memories = {m.memory_id: m for m in self.memories.get_many(tenant, list(by_memory))}
        hits: list[dict[str, Any]] = []
        for memory_id, found in by_memory.items():
            memory = memories.get(memory_id)
            if memory is None or memory.status is MemoryStatus.FORGOTTEN:
                continue
            page, clause = parse_location(memory.provenance.source_location)
            hits.append(
                {
                    "memory_id": memory_id,
                    "section": found[0].section,
                    "page": page,
                    "clause": clause,
                    "text": memory.content,
                    "entities": [
                        {
                            "field": r.field,
                            "value": decode(r),
                            "text": memory.content[r.start : r.end],
                        }
                        for r in found
                    ],
                }
            )
        hits.sort(key=lambda h: h["section"])
        return {
            "document_id": record.document_id,
            "filename": self._filename(tenant, record),
            "subject": record.stream,
            "media_type": record.media_type,
            "hits": hits,
            "hits_total": hits_total,
        }

    def _filename(self, tenant: str, record: DocumentRecord) -> str | None:
        logged = self.events.get(tenant, record.event_id)
        if logged is None:
            return None
        name = logged.envelope.payload.get("filename")
        return name if isinstance(name, str) else None

    def document(self, ctx: RequestContext, document_id: str) -> DocumentRecord:
        found = self.reads.document(ctx.tenant, document_id)
        if found is None:
            raise NotFound(f"no document {echoed(document_id)}", code="DOCUMENT_NOT_FOUND")
        return found
