"""Envelope encryption in the service layer: sealing, opening, policies, the data-key
cache and its TTL while the vault is down."""

from __future__ import annotations

import base64
import typing
import uuid
from collections.abc import Iterable, Iterator, Sequence
from datetime import UTC, datetime
from enum import Enum
from pathlib import Path
from typing import Any

import orjson
import pytest
from tests.vault_support import SwitchableVault

from mnemo.domain.errors import InvalidInput, KeyDestroyed, Unavailable
from mnemo.domain.events import Envelope, validate_envelope
from mnemo.domain.ids import new_event_id
from mnemo.domain.pii import REDACTED, SecurityPolicy
from mnemo.sealing import SEALED_TEXT, KeyCache, Sealer

ID = "11010519491231002X"
PHONE = "13800138000"


class Ticker:
    def __init__(self) -> None:
        self.t = 1_000.0

    def __call__(self) -> float:
        return self.t


def observation(text: str, stream: str = "user:U1", tenant: str = "acme") -> Envelope:
    return validate_envelope(
        {
            "event_id": new_event_id(datetime.now(UTC)),
            "type": "ObservationRecorded",
            "schema_version": 2,
            "tenant": tenant,
            "stream": stream,
            "occurred_at": datetime.now(UTC).isoformat(),
            "actor": {"kind": "agent", "id": "a1"},
            "payload": {"text": text},
        }
    )


def declared(memory: dict[str, Any], stream: str = "user:U1") -> Envelope:
    return validate_envelope(
        {
            "event_id": new_event_id(datetime.now(UTC)),
            "type": "MemoryDeclared",
            "schema_version": 1,
            "tenant": "acme",
            "stream": stream,
            "occurred_at": datetime.now(UTC).isoformat(),
            "actor": {"kind": "agent", "id": "a1"},
            "payload": {"memory": memory},
        }
    )


@pytest.fixture
def vault() -> SwitchableVault:
    return SwitchableVault()


@pytest.fixture
def ticker() -> Ticker:
    return Ticker()


@pytest.fixture
def sealer(vault: SwitchableVault, ticker: Ticker) -> Sealer:
    return Sealer(KeyCache(vault, ttl=30.0, now=ticker))


def detected(sealer: Sealer, event: Envelope) -> Envelope:
    """What the detector made of an event: sealed, then its whole-sealed fields opened (as
    Mnemo's consumers read a user stream's events)."""
    return sealer.open_private_envelope(sealer.seal(event))


def test_sealed_event_holds_no_plaintext_and_opens(sealer: Sealer) -> None:
    event = observation(f"remember my id is {ID} and my phone is {PHONE}")
    sealed = sealer.seal(event)
    raw = sealed.model_dump_json()
    assert ID not in raw
    assert PHONE not in raw
    assert "remember" not in raw  # a user stream's text is sealed whole
    assert sealed.payload["text"] == SEALED_TEXT
    sealed = sealer.open_private_envelope(sealed)
    block = sealed.encryption
    assert block is not None
    assert block.key_id == "acme/user:U1"  # users get their own key by default
    assert block.key_version == 1
    assert block.fields == ("text",)
    assert len(block.values) == 2
    text = sealed.payload["text"]
    assert text.startswith("remember my id is ⟦id_number:h")
    opened = sealer.open_json(sealed.model_dump(mode="json"))
    assert opened["payload"]["text"] == event.payload["text"]
    assert opened["encryption"]["values"] == {}
    assert opened["encryption"]["key_version"] == 1


def test_placeholders_are_stable_per_key_and_differ_across_keys(sealer: Sealer) -> None:
    a = detected(sealer, observation(f"call {PHONE}")).payload["text"]
    b = detected(sealer, observation("call +86 138-0013-8000")).payload["text"]
    other_user = detected(sealer, observation(f"call {PHONE}", stream="user:U2")).payload["text"]
    assert a == b  # the same number, normalised
    assert a != other_user  # another key, another keyed hash


def test_nothing_sensitive_is_sealed_whole_all_the_same(sealer: Sealer) -> None:
    """The detector does not decide what is sealed: a user stream's words are sealed whole
    under the user's key, a shared stream's (an agent's, a session's) under the tenant's,
    so forgetting the tenant leaves those unreadable too."""
    event = observation("remember my size is L", stream="agent:A1")
    assert sealer.seal_found(event) is event  # the detector finds nothing
    shared = sealer.seal(event)
    mine = sealer.seal(observation("remember my size is L"))
    for sealed, key_id in ((shared, "acme"), (mine, "acme/user:U1")):
        assert "size" not in sealed.model_dump_json()
        assert sealed.encryption is not None
        assert sealed.encryption.key_id == key_id
        assert sealer.open_json(sealed.model_dump(mode="json"))["payload"]["text"] == (
            "remember my size is L"
        )
    sealer.keys.destroy("acme")  # the tenant forgotten: its shared streams' words are gone
    assert sealer.open_json(shared.model_dump(mode="json"))["payload"]["text"] == REDACTED


def test_policy_mask_and_reject(vault: SwitchableVault, ticker: Ticker) -> None:
    policy = SecurityPolicy.model_validate(
        {"default": {"actions": {"phone": "mask", "bank_card": "reject"}}}
    )
    sealer = Sealer(KeyCache(vault, 30.0, now=ticker), policy)
    masked = detected(sealer, observation(f"call {PHONE}"))
    assert masked.payload["text"] == "call 138****8000"
    assert masked.encryption is None
    with pytest.raises(InvalidInput) as info:
        sealer.seal(observation("card 4111 1111 1111 1111"))
    assert info.value.code == "SENSITIVE_VALUE_REJECTED"
    assert "4111" not in info.value.message


def test_sensitive_draft_is_sealed_whole(sealer: Sealer) -> None:
    draft = {"type": "fact", "key": "locker_code", "value": "left 12, right 7", "sensitive": True}
    assert "left 12" not in sealer.seal(declared(draft)).model_dump_json()
    sealed = detected(sealer, declared(draft))
    assert "left 12" not in sealed.model_dump_json()
    assert sealed.payload["memory"]["value"].startswith("⟦sensitive:h")


def test_destroyed_key_reads_redacted(sealer: Sealer) -> None:
    sealed = sealer.seal(observation(f"my id is {ID}"))
    sealer.keys.destroy("acme/user:U1")
    opened = sealer.open_json(sealed.model_dump(mode="json"))
    assert opened["payload"]["text"] == REDACTED  # all of it: it was sealed whole
    assert opened["actor"]["id"].startswith("h")  # a checked field keeps its keyed hash
    assert '"a1"' not in orjson.dumps(opened).decode()


def test_tampered_ciphertext_reads_redacted(sealer: Sealer) -> None:
    sealed = sealer.seal(observation(f"my id is {ID}"))
    assert sealed.encryption is not None
    ((ref, ct),) = ((r, c) for r, c in sealed.encryption.values.items() if ":h" in r)
    raw = bytearray(base64.b64decode(ct))
    raw[-1] ^= 1
    bad = sealed.model_dump(mode="json")
    bad["encryption"]["values"][ref] = base64.b64encode(bytes(raw)).decode()
    assert sealer.open_json(bad)["payload"]["text"] == f"my id is {REDACTED}"


def test_vault_down_fails_closed(sealer: Sealer, vault: SwitchableVault) -> None:
    vault.down = True
    with pytest.raises(Unavailable) as info:
        sealer.seal(observation(f"my id is {ID}"))
    assert info.value.code == "VAULT_UNAVAILABLE"


def test_cached_keys_work_only_for_their_ttl(
    sealer: Sealer, vault: SwitchableVault, ticker: Ticker
) -> None:
    first = sealer.seal(observation(f"my id is {ID}"))
    sealer.open_json(first.model_dump(mode="json"))  # caches the unwrapped key too
    vault.down = True
    ticker.t += 29.0  # within the TTL: sealing and opening work from the cache
    second = sealer.seal(observation(f"call {PHONE}"))
    assert second.encryption is not None
    assert first.encryption is not None
    assert second.encryption.wrapped_key == first.encryption.wrapped_key
    assert sealer.open_json(first.model_dump(mode="json"))["payload"]["text"].endswith(ID)
    ticker.t += 2.0  # past the TTL: nothing works without the vault
    with pytest.raises(Unavailable):
        sealer.seal(observation(f"call {PHONE}"))
    with pytest.raises(Unavailable):
        sealer.open_json(first.model_dump(mode="json"))
    vault.down = False  # back: everything works again, nothing was lost
    third = sealer.seal(observation(f"call {PHONE}"))
    assert sealer.open_json(third.model_dump(mode="json"))["payload"]["text"] == f"call {PHONE}"


def _at_once(job: Any) -> None:
    job()


def test_a_busy_key_is_fetched_again_before_it_runs_out(
    vault: SwitchableVault, ticker: Ticker
) -> None:
    keys = KeyCache(vault, 30.0, now=ticker, refresher=_at_once)
    first = keys.data_key("acme/user:U1")
    calls = vault.calls
    ticker.t += 10.0  # first half of its life: from the cache, no refresh
    assert keys.data_key("acme/user:U1") == first
    assert vault.calls == calls
    ticker.t += 10.0  # second half: still the cached key, and a refresh behind it
    assert keys.data_key("acme/user:U1") == first
    assert vault.calls == calls + 1
    vault.down = True
    ticker.t += 15.0  # past the first fetch's TTL, within the refresh's
    refreshed = keys.data_key("acme/user:U1")
    assert refreshed != first  # a data key refreshed is a fresh data key
    ticker.t += 16.0  # past the refresh's TTL too: the vault is away, fail closed
    with pytest.raises(Unavailable):
        keys.data_key("acme/user:U1")


def test_a_failed_refresh_leaves_the_key_its_own_expiry(
    vault: SwitchableVault, ticker: Ticker
) -> None:
    keys = KeyCache(vault, 30.0, now=ticker, refresher=_at_once)
    search = keys.search_key("acme/user:U1")
    vault.down = True
    ticker.t += 20.0
    assert keys.search_key("acme/user:U1") == search  # the refresh behind it failed
    ticker.t += 9.0
    assert keys.search_key("acme/user:U1") == search
    ticker.t += 2.0
    with pytest.raises(Unavailable):
        keys.search_key("acme/user:U1")


def test_a_refresh_that_finds_the_key_destroyed_forgets_it(
    vault: SwitchableVault, ticker: Ticker
) -> None:
    keys = KeyCache(vault, 30.0, now=ticker, refresher=_at_once)
    _, wrapped, _ = keys.data_key("acme/user:U1")
    keys.unwrap("acme/user:U1", wrapped)
    vault.inner.destroy("acme/user:U1")  # another process forgot the subject
    ticker.t += 20.0
    keys.unwrap("acme/user:U1", wrapped)  # still cached; the refresh behind it fails
    with pytest.raises(KeyDestroyed):  # everything cached from the key is gone at once
        keys.unwrap("acme/user:U1", wrapped)
    with pytest.raises(KeyDestroyed):
        keys.data_key("acme/user:U1")


def test_a_key_forgotten_during_its_fetch_is_not_cached(
    vault: SwitchableVault, ticker: Ticker
) -> None:
    keys = KeyCache(vault, 30.0, now=ticker, refresher=_at_once)
    fetch = vault.data_key

    def forgotten_meanwhile(key_id: str) -> tuple[bytes, bytes, int]:
        found = fetch(key_id)
        keys.forget(key_id)  # a destroy or rotation lands while the fetch is on its way
        return found

    vault.data_key = forgotten_meanwhile  # type: ignore[method-assign]
    keys.data_key("acme/user:U1")
    calls = vault.calls
    keys.data_key("acme/user:U1")
    assert vault.calls == calls + 1  # fetched again: the stale answer was not kept


def test_rotation_seals_with_the_new_version_and_opens_the_old(sealer: Sealer) -> None:
    old = sealer.seal(observation(f"my id is {ID}"))
    assert sealer.keys.rotate("acme/user:U1") == 2
    new = sealer.seal(observation(f"my id is {ID}"))
    assert new.encryption is not None
    assert new.encryption.key_version == 2
    assert new.payload["text"] == old.payload["text"]  # search tokens survive rotation
    for event in (old, new):
        assert sealer.open_json(event.model_dump(mode="json"))["payload"]["text"].endswith(ID)


def test_query_text_matches_the_placeholder(sealer: Sealer) -> None:
    sealed = detected(sealer, observation(f"call {PHONE}")).payload["text"]
    query = sealer.query_text("acme", ["user:U1"], f"who has +86 {PHONE}?")
    assert PHONE not in query
    assert sealed.split()[-1] in query


def test_tenant_policy_without_user_keys(vault: SwitchableVault, ticker: Ticker) -> None:
    sealer = Sealer(
        KeyCache(vault, 30.0, now=ticker),
        SecurityPolicy.model_validate({"default": {"user_keys": False}}),
    )
    sealed = sealer.seal(observation(f"my id is {ID}"))
    assert sealed.encryption is not None
    assert sealed.encryption.key_id == "acme"
    assert not sealer.owns_key("acme", "user:U1")


def test_too_many_sensitive_values_are_refused_not_crashed(sealer: Sealer) -> None:
    mails = " ".join(f"u{i}@x.io" for i in range(520))
    with pytest.raises(InvalidInput) as info:
        sealer.seal(observation(mails))
    assert info.value.code == "TOO_MANY_SENSITIVE_VALUES"
    assert "u1@x.io" not in info.value.message


def test_mask_text_leaves_nothing_to_open() -> None:
    text = f"no, my phone is {PHONE} and my id {ID}"
    masked = Sealer.mask_text(text)
    assert PHONE not in masked
    assert ID not in masked
    assert masked == "no, my phone is 138****8000 and my id 11************002X"


@pytest.mark.parametrize(
    ("text", "secret"),
    [
        ("记住我的邮箱是zhang.san@example.org", "zhang.san@example.org"),
        ("我的电话+14155550199", "+14155550199"),
        ("my passphrase is correct horse battery staple", "horse battery staple"),
        ("身份证11010519491231002Y", None),  # not a check character at all: left alone
        ("身份证110105194912310021", "110105194912310021"),  # a wrong check character
    ],
)
def test_values_the_review_found_in_plaintext_are_sealed(
    sealer: Sealer, text: str, secret: str | None
) -> None:
    """Finding 5, end to end through the sealer: none of these reaches the log in clear."""
    assert text not in sealer.seal(observation(text)).model_dump_json()
    sealed = detected(sealer, observation(text))
    if secret is None:
        assert sealed.encryption is None
        return
    assert secret not in sealed.model_dump_json()
    assert sealer.open_json(sealed.model_dump(mode="json"))["payload"]["text"] == text


def test_every_field_with_a_persons_words_is_sealed_whole_on_a_user_stream(
    sealer: Sealer,
) -> None:
    """Finding 6: nothing here is a detected value, yet none of it reaches the log in clear
    on a user stream; the key and tags stand in as keyed hashes (equal keys, equal hashes)."""
    words = {
        "content": "likes oolong tea",
        "key": "favourite_tea",
        "value": "oolong",
        "tags": ["drinks"],
        "provenance": {"source_id": "crm-77", "source_location": "call notes"},
    }
    event = declared({"type": "preference", **words}).model_copy(
        update={"correlation_id": "ticket-4711"}
    )
    sealed = sealer.seal(event)
    raw = sealed.model_dump_json()
    plain = ("oolong", "favourite_tea", "drinks", "crm-77", "call notes", "ticket-4711", '"a1"')
    assert [text for text in plain if text in raw] == []
    again = sealer.seal(declared({"type": "preference", **words}))
    assert again.payload["memory"]["key"] == sealed.payload["memory"]["key"]  # blind index
    assert (
        sealer.seal(declared({"type": "preference", **words}, stream="user:U2")).payload["memory"][
            "key"
        ]
        != sealed.payload["memory"]["key"]
    )  # another subject, another key
    opened = sealer.open_private_envelope(sealed)
    assert opened.payload["memory"] == words | {"type": "preference"}
    assert (opened.actor.id, opened.correlation_id) == ("a1", "ticket-4711")
    # moved onto another event, a ciphertext does not open: each is bound to its event
    moved = again.model_copy(update={"encryption": sealed.encryption})
    assert sealer.open_private_envelope(moved).payload["memory"]["content"] == REDACTED


def test_envelope_and_nested_fields_the_review_found_are_sealed_whole(sealer: Sealer) -> None:
    """The second review: the causation id, the trace state, a constraint's guard, the
    memory's and the observation's time zone and language, and a feedback event's request
    id reach the log sealed on a user stream, and Mnemo's consumers read them back whole."""
    words = {
        "cause": "wcause-ticket-981",
        "state": "vendor=wstate-user-442",
        "rule": "wrule-no-peanuts",
        "pattern": "wpattern-peanut",
        "zone": "Asia/Shanghai",
        "lang": "wlang-x1",
        "request": "wrequest-call-77",
    }
    trace = {"traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01", "tracestate": words["state"]}
    base = {
        "tenant": "acme",
        "stream": "user:U1",
        "occurred_at": datetime.now(UTC).isoformat(),
        "actor": {"kind": "agent", "id": "a1"},
        "causation_id": words["cause"],
        "trace": trace,
    }
    events = [
        {
            "type": "MemoryDeclared",
            "schema_version": 1,
            "payload": {
                "memory": {
                    "type": "constraint",
                    "content": "no peanuts",
                    "timezone": words["zone"],
                    "guard": {"rule_id": words["rule"], "patterns": [words["pattern"]]},
                }
            },
        },
        {
            "type": "ObservationRecorded",
            "schema_version": 2,
            "payload": {"text": "hello", "timezone": words["zone"], "language": words["lang"]},
        },
        {
            "type": "MemoryCited",
            "schema_version": 1,
            "payload": {"memory_id": str(uuid.uuid4()), "request_id": words["request"]},
        },
        {
            "type": "MemoryCorrected",
            "schema_version": 1,
            "payload": {
                "memory_ids": [str(uuid.uuid4())],
                "reason": "wrong",
                "request_id": words["request"],
            },
        },
    ]
    for raw in events:
        event = validate_envelope({**base, **raw, "event_id": new_event_id(datetime.now(UTC))})
        sealed = sealer.seal(event)
        text = sealed.model_dump_json()
        assert [w for w in words.values() if w in text] == [], raw["type"]
        # a sealed event still validates as the log reads it (checked ids stand in as hashes)
        again = validate_envelope(sealed.model_dump(mode="json"))
        assert again.causation_id is not None
        assert again.causation_id.startswith("h")
        opened = sealer.open_private_envelope(again)
        assert opened.payload == event.payload, raw["type"]
        assert (opened.causation_id, opened.trace) == (event.causation_id, event.trace)
    # a cause named by its event id (Mnemo's own events) stays in clear: the log finds
    # derived events by it
    cause = new_event_id(datetime.now(UTC))
    own = observation("hello").model_copy(update={"causation_id": cause})
    assert sealer.seal(own).causation_id == cause


def test_a_forgotten_stream_takes_no_record_of_use(sealer: Sealer, tmp_path: Path) -> None:
    """After a user's key is shredded, Mnemo's records of use (an assembled context, relayed
    feedback) are not appended to their stream; other streams, and other events, still are."""
    from mnemo.adapters.sqlite_log import SqliteEventLog
    from mnemo.service.sealing import SealingEventLog

    inner = SqliteEventLog(tmp_path / "log.sqlite3")
    log = SealingEventLog(inner, sealer)

    def relayed(stream: str) -> Envelope:
        return validate_envelope(
            {
                "event_id": new_event_id(datetime.now(UTC)),
                "type": "FeedbackRelayed",
                "schema_version": 1,
                "tenant": "acme",
                "stream": stream,
                "occurred_at": datetime.now(UTC).isoformat(),
                "actor": {"kind": "system", "id": "decay"},
                "payload": {"feedback": "MemoryCited", "memory_ids": [str(uuid.uuid4())]},
            },
            public=False,
        )

    sealer.seal(observation("hello"))  # the user's key exists
    sealer.keys.destroy(sealer.key_id("acme", "user:U1"))
    log.append([relayed("user:U1"), relayed("user:U2"), observation("x", stream="team:T")])
    logged = [(e.envelope.type, e.envelope.stream) for e in inner.read(0, 100)]
    assert logged == [("FeedbackRelayed", "user:U2"), ("ObservationRecorded", "team:T")]
    inner.close()


# Text fields of event payloads (nested models included, by dotted path) and of the
# envelope that hold no person's words: identifiers Mnemo assigns, codes, hashes, names of
# templates and tokenizers, and labels Mnemo itself writes. Every other text field must be
# PRIVATE (sealed on a user stream): a new field is classified here or there. A path
# names a nested model whole when all of it is classified at once.
NOT_PERSONAL = {
    ("ObservationRecorded", "kind"),
    # a trigger reference names a trigger id and a memory id
    ("ToolResultRecorded", "trigger"),
    # a document's detected type: no one's words
    ("DocumentIngested", "media_type"),
    ("MemoriesRewrapped", "key_id"),
    ("MemoriesRewrapped", "memories"),  # memory ids and wrapped keys
    # templates are the tenant's, registered with the admin scope, never a user stream's
    ("TemplateRegistered", "template"),
    ("ContextAssembled", "request_id"),
    ("ContextAssembled", "subjects"),  # stream names, which every envelope holds in clear
    ("ContextAssembled", "template"),
    ("ContextAssembled", "template_fingerprint"),
    ("ContextAssembled", "protocol"),
    ("ContextAssembled", "memory_ids"),
    ("ContextAssembled", "memory_types"),
    ("ContextAssembled", "sections"),
    ("ContextAssembled", "tokenizer"),
    ("ContextAssembled", "truncated"),
    ("ContextAssembled", "left_out"),
    ("ContextAssembled", "conflicts"),
    ("ContextResponseReported", "request_id"),
    ("ContextResponseReported", "cited"),
    ("ContextResponseReported", "violations"),
    ("MemoryRegistered", "memory.memory_id"),
    ("MemoryRegistered", "memory.tenant"),
    ("MemoryRegistered", "memory.stream"),
    ("MemoryRegistered", "memory.supersedes"),
    ("MemoryRegistered", "memory.source_event_id"),
    ("MemoryRegistered", "memory.rule_id"),  # the registration rule's id, an operator's
    ("MemoryRegistered", "memory.sealed"),  # ciphertexts and key ids
    ("MemorySuperseded", "memory_id"),
    ("MemorySuperseded", "superseded_by"),
    ("MemoryRejected", "reason_code"),
    ("MemoryRejected", "rejected_event_id"),
    ("MemoryRejected", "current_memory_id"),
    ("MemoryExpired", "memory_id"),
    ("MemoryDecayed", "memory_id"),
    ("FeedbackRelayed", "memory_ids"),
    ("VerificationDue", "memory_id"),
    ("MemoryArchived", "memory_id"),
    ("MemoryForgotten", "memory_id"),
    ("@", "type"),
    ("@", "tenant"),
    ("@", "stream"),
    ("@", "encryption"),  # ciphertexts and key ids
    ("@", "payload"),  # classified per event type above
}
# envelope fields sealed whole on a user stream (Sealer.seal_private)
ENVELOPE_PRIVATE = {"actor.id", "correlation_id", "causation_id", "trace.tracestate"}


def _text_fields(model: type, prefix: str = "") -> Iterator[str]:
    """Dotted paths of every text field of a model, nested models walked; a field whose
    every text is held to a pattern (ids, enumerations) carries no words and is left out."""
    from pydantic import BaseModel

    def texts(tp: Any, metadata: Sequence[Any]) -> tuple[bool, list[type]]:
        """(whether it holds free text, the nested models in it)"""
        if any(getattr(m, "pattern", None) for m in metadata):
            return False, []
        origin = typing.get_origin(tp)
        if origin is typing.Annotated:
            inner, *more = typing.get_args(tp)
            extra = [x for m in more for x in (getattr(m, "metadata", None) or [m])]
            return texts(inner, [*metadata, *more, *extra])
        if tp is str:
            return True, []
        if isinstance(tp, type) and issubclass(tp, BaseModel):
            return False, [tp]
        if isinstance(tp, type) and issubclass(tp, Enum):
            return False, []
        free, models = False, []
        for arg in typing.get_args(tp):
            if arg is Ellipsis:
                continue
            f, m = texts(arg, [])
            free, models = free or f, models + m
        if tp is typing.Any or (origin is dict):
            return True, models
        return free, models

    for name, info in model.model_fields.items():
        path = prefix + name
        free, nested = texts(info.annotation, info.metadata)
        if free:
            yield path
        for sub in nested:
            yield path  # the model as a whole, to classify it at once
            yield from _text_fields(sub, path + ".")


def test_every_free_text_field_of_every_event_is_sealed_or_known_not_personal() -> None:
    from mnemo.domain import events

    def kinds(cls: type) -> Iterator[type]:
        for sub in cls.__subclasses__():
            yield sub
            yield from kinds(sub)

    def classified(owner: str, path: str, private: Iterable[str]) -> bool:
        parts = path.split(".")
        prefixes = {".".join(parts[: i + 1]) for i in range(len(parts))}
        whole = {(owner, p) for p in prefixes}
        return (
            path in private
            or bool(whole & NOT_PERSONAL)
            or (
                # a nested model's own entry is classified by its fields
                any(p.startswith(path + ".") for p in private)
                or any(o == owner and n.startswith(path + ".") for o, n in NOT_PERSONAL)
            )
        )

    unclassified = []
    seen: set[tuple[str, str]] = set()
    for cls in kinds(events.EventPayload):
        if not hasattr(cls, "TYPE"):
            continue
        for path in _text_fields(cls):
            seen.add((cls.TYPE, path))
            if not classified(cls.TYPE, path, cls.PRIVATE):
                unclassified.append((cls.TYPE, path))
    for path in _text_fields(Envelope):
        seen.add(("@", path))
        if not classified("@", path, ENVELOPE_PRIVATE):
            unclassified.append(("@", path))
    assert NOT_PERSONAL - seen == set()  # every entry names a field that is there
    assert sorted(set(unclassified)) == [], sorted(set(unclassified))


def test_a_batch_opens_as_one_at_a_time_with_each_key_fetched_once(
    vault: SwitchableVault, ticker: Ticker
) -> None:
    writer = Sealer(KeyCache(vault, 30.0, now=ticker))
    sealed = [
        writer.seal(observation(f"note {i} for {stream}", stream=stream))
        for i, stream in enumerate(["user:A", "user:B", "user:A", "user:C", "user:B"])
    ]
    sealed.append(observation("a team note", stream="team:T"))  # nothing sealed whole
    vault.inner.destroy("acme/user:C")  # forgotten: its event reads redacted
    one_by_one = [
        Sealer(KeyCache(vault, 30.0, now=ticker)).open_private_envelope(e) for e in sealed
    ]
    reader = Sealer(KeyCache(vault, 30.0, now=ticker))
    calls = vault.calls
    batch = reader.open_private_envelopes(sealed)
    assert batch == one_by_one
    assert [e.payload["text"] for e in batch[:3]] == [
        "note 0 for user:A",
        "note 1 for user:B",
        "note 2 for user:A",
    ]
    assert batch[3].payload["text"] != "note 3 for user:C"
    # A, B and C once each side by side; C (destroyed) once more when its event is opened
    assert vault.calls - calls == 4
    vault.down = True
    with pytest.raises(Unavailable):  # nothing cached for a new reader: fail closed
        Sealer(KeyCache(vault, 30.0, now=ticker)).open_private_envelopes(sealed)


def test_a_key_seen_to_exist_is_not_asked_for_again_within_the_ttl(
    vault: SwitchableVault, ticker: Ticker
) -> None:
    """The per-request new-key cap asks whether each user's key exists: a busy tenant's
    requests must not each cost a vault call per user."""
    keys = KeyCache(vault, 30.0, now=ticker)
    vault.inner.data_key("acme/user:A")
    assert keys.has_key("acme/user:A")
    calls = vault.calls
    assert keys.has_key("acme/user:A")
    assert vault.calls == calls  # from the cache
    assert not keys.has_key("acme/user:new")
    assert not keys.has_key("acme/user:new")  # a no is asked again: it may exist by now
    assert vault.calls == calls + 2
    keys.destroy("acme/user:A")
    assert not keys.has_key("acme/user:A")  # a destroyed key leaves the cache at once


def tool_result(
    arguments: dict[str, Any], result: Any, stream: str = "user:U1", source: str = "crm"
) -> Envelope:
    return validate_envelope(
        {
            "event_id": new_event_id(datetime.now(UTC)),
            "type": "ToolResultRecorded",
            "schema_version": 1,
            "tenant": "acme",
            "stream": stream,
            "occurred_at": datetime.now(UTC).isoformat(),
            "actor": {"kind": "agent", "id": "a1"},
            "payload": {
                "tool": "crm.lookup",
                "arguments": orjson.dumps(arguments).decode(),
                "result": orjson.dumps(result).decode(),
                "source": source,
                "fetched_at": datetime.now(UTC).isoformat(),
                "fresh_for_seconds": 600,
            },
        }
    )


@pytest.mark.parametrize("stream", ["user:U1", "session:S1"])
def test_a_tool_results_sensitive_values_are_placeholders_for_the_consumers(
    sealer: Sealer, stream: str
) -> None:
    """A tool's arguments and result become a memory's content and value, which the
    indexer embeds and the keyword index reads: their sensitive values must reach the
    consumers as placeholders, as a declared memory's do, not in plaintext."""
    event = tool_result(
        {"q": f"customer {PHONE}", "password": "hunter22x"},
        {"card": "4111 1111 1111 1111", "id": int("4012888888881881"), "ok": True, "n": 3},
        stream=stream,
        source=f"crm of {PHONE}",
    )
    seen = detected(sealer, event)
    consumed = seen.model_dump_json()
    for plain in (PHONE, "4111 1111 1111 1111", "4012888888881881", "hunter22x"):
        assert plain not in consumed
    arguments = orjson.loads(seen.payload["arguments"])  # still JSON
    result = orjson.loads(seen.payload["result"])
    assert arguments["q"].startswith("customer ⟦phone:h")
    assert arguments["password"].startswith("⟦password:h")
    assert result["card"].startswith("⟦bank_card:h")
    assert result["id"].startswith("⟦bank_card:h")  # a number that is a card: a string now
    assert (result["ok"], result["n"]) == (True, 3)
    assert seen.payload["source"].startswith("crm of ⟦phone:h")
    # an authorized read gets the values back, and JSON still
    opened = sealer.open_json(seen.model_dump(mode="json"))["payload"]
    assert orjson.loads(opened["arguments"]) == {"q": f"customer {PHONE}", "password": "hunter22x"}
    assert orjson.loads(opened["result"])["card"] == "4111 1111 1111 1111"
    assert orjson.loads(opened["result"])["id"] == "4012888888881881"


def test_a_tool_results_value_needing_escapes_opens_as_json(sealer: Sealer) -> None:
    event = tool_result({}, {"password": 'pa"ss\\word9'})
    opened = sealer.open_json(detected(sealer, event).model_dump(mode="json"))["payload"]
    assert orjson.loads(opened["result"]) == {"password": 'pa"ss\\word9'}


def test_a_tenants_policy_holds_for_tool_results(vault: SwitchableVault, ticker: Ticker) -> None:
    policy = SecurityPolicy.model_validate(
        {"default": {"actions": {"phone": "mask", "bank_card": "reject"}}}
    )
    sealer = Sealer(KeyCache(vault, 30.0, now=ticker), policy)
    masked = detected(sealer, tool_result({}, {"phone": PHONE}))
    assert orjson.loads(masked.payload["result"]) == {"phone": "138****8000"}
    with pytest.raises(InvalidInput) as info:
        sealer.seal(tool_result({}, {"card": "4111 1111 1111 1111"}))
    assert info.value.code == "SENSITIVE_VALUE_REJECTED"
    assert info.value.field == "payload.result"


def test_a_tool_result_with_nothing_sensitive_is_left_as_it_was(sealer: Sealer) -> None:
    event = tool_result({"city": "Paris"}, {"temp": 21.5, "sky": "clear"}, stream="agent:A1")
    assert sealer.seal_found(event) is event


def test_hashes_of_a_persons_words_reach_the_log_keyed(sealer: Sealer) -> None:
    """A memory's content hash, a context's query hash and an answer's response hash are
    SHA-256 of a person's words: in clear in the log they let anyone holding it test a guess
    (a name, an address, a size) for ever, forgotten subject or not. They reach the log as
    keyed hashes under the stream's search key and open whole for Mnemo's consumers."""
    import hashlib

    from mnemo.domain.memory import MemoryDraft, content_hash

    draft = MemoryDraft.model_validate(
        {"type": "fact", "key": "preferred_name", "value": "Zyxwvuta Quirkmeister"}
    )
    guessable = content_hash(draft)
    query = hashlib.sha256(b"what about Zyxwvuta Quirkmeister").hexdigest()
    answer = hashlib.sha256(b"Zyxwvuta Quirkmeister lives in Wangjing").hexdigest()
    memory_id = str(uuid.uuid4())
    base = {
        "tenant": "acme",
        "occurred_at": datetime.now(UTC).isoformat(),
        "actor": {"kind": "system", "id": "registrar"},
    }
    memory = {
        "memory_id": memory_id,
        "tenant": "acme",
        "stream": "user:U1",
        "type": "fact",
        "scope": "user",
        "content": "",
        "key": "preferred_name",
        "value": "Zyxwvuta Quirkmeister",
        "created_at": datetime.now(UTC).isoformat(),
        "content_hash": guessable,
        "source_event_id": new_event_id(datetime.now(UTC)),
    }
    context = {
        "request_id": str(uuid.uuid4()),
        "template": "default@1",
        "template_fingerprint": "f" * 16,
        "protocol": "v1",
        "subjects": ["user:U1"],
        "query_hash": query,
        "memory_ids": [memory_id],
        "memory_types": ["fact"],
        "sections": ["facts"],
        "rendered_tokens": 10,
        "budget": 100,
        "tokenizer": "cl100k_base",
        "response_hash": answer,
    }
    reported = {"request_id": context["request_id"], "response_hash": answer, "cited": []}
    for stream in ("user:U1", "session:S1"):
        for kind, payload in (
            ("MemoryRegistered", {"memory": {**memory, "stream": stream}}),
            ("ContextAssembled", context),
            ("ContextResponseReported", reported),
        ):
            event = validate_envelope(
                {
                    **base,
                    "event_id": new_event_id(datetime.now(UTC)),
                    "type": kind,
                    "schema_version": 1,
                    "stream": stream,
                    "payload": payload,
                },
                public=False,
            )
            sealed = sealer.seal(event, strict=False)
            text = sealed.model_dump_json()
            assert [h for h in (guessable, query, answer) if h in text] == [], (stream, kind)
            # the log still reads it, and Mnemo's consumers get the hashes back whole
            again = validate_envelope(sealed.model_dump(mode="json"), public=False)
            assert sealer.open_json(again.model_dump(mode="json"))["payload"] == event.payload
            if kind != "ContextResponseReported":  # its record keeps the stand-in (below)
                assert sealer.open_private_envelope(again).payload == event.payload, kind


def test_an_answers_hash_stays_keyed_in_the_context_record(sealer: Sealer) -> None:
    """The registrar files a reported answer's hash on the context's record, which a user's
    forget leaves in place (citations and the inspector read it): it keeps the keyed stand-in
    the log holds, so the read model holds no SHA-256 of the answer either; the views still
    open the logged event whole."""
    import hashlib

    answer = hashlib.sha256(b"Zyxwvuta Quirkmeister lives in Wangjing").hexdigest()
    event = validate_envelope(
        {
            "event_id": new_event_id(datetime.now(UTC)),
            "type": "ContextResponseReported",
            "schema_version": 1,
            "tenant": "acme",
            "stream": "user:U1",
            "occurred_at": datetime.now(UTC).isoformat(),
            "actor": {"kind": "agent", "id": "a1"},
            "payload": {"request_id": str(uuid.uuid4()), "response_hash": answer, "cited": []},
        },
        public=False,
    )
    sealed = sealer.seal(event, strict=False)
    consumed = sealer.open_private_envelope(sealed)
    assert consumed.payload["response_hash"] == sealed.payload["response_hash"] != answer
    assert consumed.payload["response_hash"].startswith("h")
    viewed = sealer.open_json(sealed.model_dump(mode="json"))
    assert viewed["payload"]["response_hash"] == answer


def test_a_documents_digest_reaches_the_log_keyed_and_reads_after_a_forget(
    sealer: Sealer,
) -> None:
    """An ingested document's sha256 would tell whoever holds the log and the document that
    it was ingested: it reaches the log as a keyed stand-in, opens whole for the registrar,
    and the stand-in still validates once the user's key is destroyed (a rebuild reads it)."""
    import hashlib

    from mnemo.domain.events import DocumentIngested, decode_payload

    digest = hashlib.sha256(b"a contract between two parties").hexdigest()
    event = validate_envelope(
        {
            "event_id": new_event_id(datetime.now(UTC)),
            "tenant": "acme",
            "occurred_at": datetime.now(UTC).isoformat(),
            "actor": {"kind": "system", "id": "gateway"},
            "type": "DocumentIngested",
            "schema_version": 1,
            "stream": "user:U1",
            "payload": {
                "document_id": str(uuid.uuid4()),
                "sha256": digest,
                "filename": "c.txt",
                "media_type": "text/plain",
                "size": 30,
                "pages": 0,
                "sections": 1,
            },
        },
        public=False,
    )
    sealed = sealer.seal(event, strict=False)
    assert digest not in sealed.model_dump_json()
    logged = validate_envelope(sealed.model_dump(mode="json"), public=False)
    opened = decode_payload(sealer.open_private_envelope(logged))
    assert isinstance(opened, DocumentIngested)
    assert opened.sha256 == digest
    sealer.keys.destroy(sealer.key_id("acme", "user:U1"))
    after = decode_payload(sealer.open_private_envelope(logged))
    assert isinstance(after, DocumentIngested)
    assert after.sha256 != digest


def _forget(stream: str, **payload: Any) -> Envelope:
    return validate_envelope(
        {
            "event_id": new_event_id(datetime.now(UTC)),
            "tenant": "acme",
            "occurred_at": datetime.now(UTC).isoformat(),
            "actor": {"kind": "agent", "id": "kcat"},
            "type": "ForgetRequested",
            "schema_version": 1,
            "stream": stream,
            "payload": payload,
        }
    )


def test_the_registrar_shreds_what_a_request_to_forget_left_alive(
    sealer: Sealer, vault: SwitchableVault
) -> None:
    """`shred_unshredded`, which the registrar calls once it registers a request to forget:
    the keys a producer writing straight to the topic left alive are destroyed; those the
    gateway destroyed already cost one question; a request that names one memory, or a
    stream sealed under the tenant's key, destroys nothing."""
    sealer.seal(observation("remember my phone is 13812345678", stream="user:U1"))
    sealer.seal(observation("remember my phone is 13812345679", stream="user:U2"))
    user = sealer.key_id("acme", "user:U1")
    other = sealer.key_id("acme", "user:U2")

    def shred(envelope: Envelope, tenant_keys: Iterable[str] = ()) -> list[str]:
        return sealer.shred_unshredded(
            "acme", envelope, lambda: tenant_keys, lambda key_id: key_id in {user, other}
        )

    assert shred(_forget("user:U1")) == [user]
    assert vault.is_destroyed(user)
    calls = vault.calls
    assert shred(_forget("user:U1")) == []
    assert vault.calls == calls  # known destroyed: not asked again
    assert shred(_forget("user:U2", memory_id=str(uuid.uuid4()))) == []
    assert shred(_forget("session:S1")) == []
    assert not vault.is_destroyed(other)
    assert not vault.is_destroyed("acme")
    vault.down = True
    with pytest.raises(Unavailable):
        shred(_forget("user:U2"))
    vault.down = False
    tenant = _forget("user:U2", tenant=True)
    assert shred(tenant, [other, user, "acme"]) == [other, "acme"]
    assert vault.is_destroyed("acme")
    assert vault.is_destroyed(other)
    assert shred(tenant, [other, user, "acme"]) == []

    def unread() -> list[str]:
        raise AssertionError("a shredded tenant's log need not be read again")

    assert sealer.shred_unshredded("acme", tenant, unread, lambda _: True) == []


def test_the_gateways_shred_destroys_the_tenants_key_last(
    sealer: Sealer, vault: SwitchableVault
) -> None:
    """The registrar takes a destroyed tenant's key to mean the shred is done, so the
    gateway's (and the SDK's) shred must destroy it after every user's key."""
    order: list[str] = []
    destroy = vault.destroy

    def recorded(key_id: str) -> None:
        order.append(key_id)
        destroy(key_id)

    vault.destroy = recorded  # type: ignore[method-assign]
    keys = ["acme/user:a", "acme/user:b", "acme/user:z"]
    sealer.shred_forgotten("acme", [_forget("user:a", tenant=True)], lambda: keys)
    assert order == [*keys, "acme"]


def test_a_tenant_shred_cut_short_is_finished_when_the_batch_is_tried_again(
    sealer: Sealer, vault: SwitchableVault
) -> None:
    """The users' keys go before the tenant's, and every key is asked about on each try: a
    vault that fails half-way leaves no key alive once the retry passes."""
    for user in ("user:U1", "user:U2", "user:U3"):
        sealer.seal(observation("remember my phone is 13812345678", stream=user))
    keys = [sealer.key_id("acme", u) for u in ("user:U1", "user:U2", "user:U3")]
    destroy = vault.destroy
    done: list[str] = []

    def failing(key_id: str) -> None:
        if len(done) == 2:
            raise Unavailable("vault down", code="VAULT_UNAVAILABLE")
        done.append(key_id)
        destroy(key_id)

    vault.destroy = failing  # type: ignore[method-assign]
    tenant = _forget("user:U1", tenant=True)
    with pytest.raises(Unavailable):
        sealer.shred_unshredded("acme", tenant, lambda: [*keys, "acme"], lambda _: False)
    assert not vault.is_destroyed("acme")  # the tenant's key, the marker, goes last
    vault.destroy = destroy  # type: ignore[method-assign]
    again = sealer.shred_unshredded("acme", tenant, lambda: [*keys, "acme"], lambda _: False)
    assert again == [keys[2], "acme"]
    assert all(vault.is_destroyed(k) for k in [*keys, "acme"])


def test_a_replayed_forget_spares_a_key_the_stream_was_given_after_it(
    vault: SwitchableVault, ticker: Ticker
) -> None:
    """A tenant whose policy gave users keys of their own only after a user was forgotten:
    the user's events before the request were sealed under the tenant's key, and replaying
    the request (a rebuild) leaves the key the user has now alone."""
    sealer = Sealer(KeyCache(vault, ttl=30.0, now=ticker))
    own = sealer.key_id("acme", "user:U1")
    assert sealer.owns_key("acme", "user:U1")
    sealer.seal(observation("remember my phone is 13812345678", stream="user:U1"))
    before = {"acme"}  # what the stream's events before the request were sealed under
    forget = _forget("user:U1")
    assert sealer.shred_unshredded("acme", forget, lambda: (), lambda k: k in before) == []
    assert not vault.is_destroyed(own)
