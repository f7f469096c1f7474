"""Planted plaintext markers and a raw scan for them: the crypto-shredding check.

The scan reads every byte of every file under the given paths (SQLite databases with their
WAL and journal files, vector shards, key files, log files; Kafka log segments and
Cassandra SSTables when pointed at their data directories) and reports which markers
appear, in UTF-8 and in the digits-only form a normaliser could produce.
"""

from __future__ import annotations

import random
import re
import uuid
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mnemo.domain.pii import cn_id_check_char, luhn_valid

__all__ = [
    "Markers",
    "Words",
    "feedback_events",
    "plant_markers",
    "refuse_zones",
    "scan",
    "word_events",
    "zone_events",
]


@dataclass(frozen=True)
class Markers:
    id_number: str
    card: str
    phone: str
    email: str
    password: str

    def all(self) -> list[str]:
        return [self.id_number, self.card, self.phone, self.email, self.password]


def plant_markers(seed: int | None = None) -> Markers:
    """Fresh values no test data or library holds: a valid resident ID, a Luhn card, a
    mobile number, an e-mail address and a password."""
    rng = random.Random(seed if seed is not None else uuid.uuid4().int)
    body = (
        str(rng.randint(110000, 659999))
        + f"{rng.randint(1950, 2005)}{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}"
        + f"{rng.randint(0, 999):03d}"
    )
    card_body = "62" + "".join(str(rng.randint(0, 9)) for _ in range(15))
    check = next(d for d in "0123456789" if luhn_valid(card_body + d))
    tag = uuid.uuid4().hex[:10]
    return Markers(
        id_number=body + cn_id_check_char(body),
        card=card_body + check,
        phone="1" + str(rng.choice([3, 5, 7, 8, 9])) + f"{rng.randint(0, 999_999_999):09d}",
        email=f"shred.{tag}@example.org",
        password=f"Pw{tag}x9",
    )


@dataclass(frozen=True)
class Words:
    """One marker word per field that can carry a person's words (none of them a value the
    PII detector would find: these are sealed because they are a user's, not because they
    look sensitive)."""

    observation: str
    speaker: str
    content: str
    value: str
    key: str
    tag: str
    source_id: str
    source_location: str
    correlation: str
    actor: str
    principal: str
    correction: str  # a correction's reason
    contradiction: str  # a contradiction's reason
    causation: str  # the envelope's causation id
    tracestate: str  # the W3C trace state, copied onto derived events
    rule: str  # a constraint's guard: its rule id
    pattern: str  # and its pattern
    language: str  # an observation's language (at most 16 characters)
    zone: str  # an observation's time zone (an unknown one: the refusal must not quote it)
    memory_zone: str  # a memory's time zone (likewise)
    corrected_request: str  # a correction's request id

    @classmethod
    def fresh(cls) -> Words:
        return cls(*(f"w{name[:3]}{uuid.uuid4().hex[:12]}" for name in cls.__dataclass_fields__))

    def all(self) -> list[str]:
        return [getattr(self, name) for name in self.__dataclass_fields__]

    def stored(self) -> list[str]:
        """The markers a read model keeps while the user is not forgotten."""
        return [
            self.content,
            self.value,
            self.key,
            self.tag,
            self.source_id,
            self.source_location,
            self.rule,
            self.pattern,
        ]


def _event(event_type: str, stream: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": event_type,
        "schema_version": 2 if event_type == "ObservationRecorded" else 1,
        "stream": stream,
        "payload": payload,
    }


def word_events(stream: str, w: Words) -> list[dict[str, Any]]:
    """Events that put someone's words in every free-text field, for one stream: a turn
    (with the actor, correlation and causation ids and a trace state), a memory declared
    with its key, value, tag and provenance, a constraint whose guard has a rule id and a
    pattern, and an observation with a language. Index 1 is the memory the feedback of
    `feedback_events` is about."""
    turn = _event(
        "ObservationRecorded",
        stream,
        {"text": f"we spoke about {w.observation} today", "kind": "turn", "speaker": w.speaker},
    )
    trace = {
        "traceparent": f"00-{uuid.uuid4().hex}-{uuid.uuid4().hex[:16]}-01",
        "tracestate": f"vendor={w.tracestate}",
    }
    turn["actor"] = {"kind": "agent", "id": w.actor}
    turn["correlation_id"] = w.correlation
    turn["causation_id"] = w.causation
    turn["trace"] = trace
    memory = {
        "type": "preference",
        "content": f"likes {w.content} tea",
        "key": w.key,
        "value": w.value,
        "tags": [w.tag],
        "provenance": {"source_id": w.source_id, "source_location": w.source_location},
    }
    declared = _event("MemoryDeclared", stream, {"memory": memory})
    declared["correlation_id"] = w.correlation
    declared["causation_id"] = w.causation
    declared["trace"] = trace  # copied onto the MemoryRegistered derived from it
    guard = {"rule_id": w.rule, "patterns": [w.pattern]}
    constraint = {"type": "constraint", "content": "never call after nine", "guard": guard}
    guarded = _event("MemoryDeclared", stream, {"memory": constraint})
    spoken = _event(
        "ObservationRecorded",
        stream,
        {"text": "call me tomorrow at 9", "language": w.language},
    )
    return [turn, declared, guarded, spoken]


def zone_events(stream: str, w: Words) -> list[dict[str, Any]]:
    """An observation and a memory in unknown time zones (the markers): each is refused
    when it is published (INVALID_TIMEZONE), and the refusal must not quote it."""
    spoken = _event("ObservationRecorded", stream, {"text": "call me at 9", "timezone": w.zone})
    zoned = _event(
        "MemoryDeclared",
        stream,
        {"memory": {"type": "fact", "content": "works nights", "timezone": w.memory_zone}},
    )
    return [spoken, zoned]


def refuse_zones(
    publish: Callable[[dict[str, Any]], tuple[str, str]], stream: str, w: Words
) -> None:
    """Each of `zone_events` is refused with INVALID_TIMEZONE by `publish` (which returns the
    code and the whole text of the refusal), without the zone in the refusal."""
    for event in zone_events(stream, w):
        code, text = publish(event)
        assert code == "INVALID_TIMEZONE", text
        assert w.zone not in text
        assert w.memory_zone not in text


def feedback_events(stream: str, w: Words, memory_id: str) -> list[dict[str, Any]]:
    """Reasons in someone's words about a memory (a correction with its request id, a
    contradiction: the timeline, the decay decisions), and a stale write of its key (a
    VERSION_CONFLICT, whose detail once named it)."""
    stale = {"type": "preference", "key": w.key, "value": "x", "expected_version": 7}
    correction = {"memory_ids": [memory_id], "reason": w.correction}
    return [
        _event("MemoryCorrected", stream, {**correction, "request_id": w.corrected_request}),
        _event("MemoryContradicted", stream, {"memory_id": memory_id, "reason": w.contradiction}),
        _event("MemoryDeclared", stream, {"memory": stale}),
    ]


def _forms(marker: str) -> set[bytes]:
    forms = {marker.encode("utf-8"), marker.encode("utf-16-le")}
    digits = "".join(ch for ch in marker if ch.isdigit())
    if len(digits) >= 11:
        forms.add(digits.encode())
    return forms


def _files(paths: list[Path]) -> list[Path]:
    files: list[Path] = []
    for path in paths:
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files.extend(p for p in sorted(path.rglob("*")) if p.is_file())
    return files


def scan(markers: Iterable[str], paths: Iterable[Path], texts: Iterable[str] = ()) -> list[str]:
    """'marker in place' for every marker found in the files under `paths` (recursively)
    or in the given texts (captured log lines); empty when none is anywhere."""
    wanted = {m: _forms(m) for m in markers}
    owner = {form: m for m, forms in wanted.items() for form in forms}
    pattern = re.compile(b"|".join(re.escape(f) for f in sorted(owner, key=len, reverse=True)))
    paths = list(paths)

    def hits(data: bytes) -> list[str]:  # one pass over the bytes for every marker
        return sorted({owner[m.group()] for m in pattern.finditer(data)}) if owner else []

    # A live service replaces files while they are read: a compaction writes its new
    # SSTable, then deletes the ones it merged; Kafka recycles a segment. A file listed and
    # gone before it was read may have handed its bytes to one the listing missed, so a
    # pass that lost a file is done again from a fresh listing.
    for _ in range(20):
        found: list[str] = []
        lost = False
        try:
            files = _files(paths)
        except FileNotFoundError:  # a directory went while it was listed
            continue
        for file in files:
            try:
                data = file.read_bytes()
            except FileNotFoundError:
                lost = True
                continue
            found += [f"{marker} in {file}" for marker in hits(data)]
        if not lost:
            break
    for i, text in enumerate(texts):
        found += [f"{marker} in log text {i}" for marker in hits(text.encode("utf-8"))]
    return found
