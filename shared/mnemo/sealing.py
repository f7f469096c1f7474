"""Envelope encryption of sensitive values, before events reach the log, and their opening
on authorized reads.

* `KeyCache` sits in front of a KeyVault: a data key (and a search key) per key_id is kept
  in memory for `ttl` seconds, then dropped. While Vault is down, sealing and opening work
  from the cache until the TTL runs out, then fail closed with Unavailable (503). A key
  used in the second half of its life is fetched again in the background (refresh ahead),
  so a busy subject's key never makes a caller wait for Vault; the TTL still counts from
  the last time Vault answered, and a refresh that finds the key destroyed drops it.
* `Sealer.seal` runs the PII detector over an event's free-text fields (the payload model's
  SCANNED paths); what the tenant's policy says to encrypt is replaced by a placeholder
  ``⟦kind:token⟧`` (token: a keyed hash of the normalised value) and its AES-256-GCM
  ciphertext goes into the envelope's encryption block, with the wrapped data key, key id
  and key version. Masked values are replaced by their masks; a value the policy rejects
  refuses the whole event (SENSITIVE_VALUE_REJECTED).
* `Sealer.open_*` put plaintext back for authorized reads; values under a destroyed key
  read as ``⟦redacted⟧``.

Nothing here logs a value, a key or a ciphertext.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import contextvars
import copy
import hashlib
import hmac
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from mnemo.domain import pii
from mnemo.domain.errors import InvalidInput, KeyDestroyed, Unavailable
from mnemo.domain.events import (
    CATALOG,
    ActorKind,
    Envelope,
    ForgetRequested,
    LoggedEvent,
    decode_payload,
)
from mnemo.domain.memory import Memory
from mnemo.domain.pii import (
    PLACEHOLDER,
    REDACTED,
    Action,
    Finding,
    PiiKind,
    SecurityPolicy,
    detect,
    mask,
    normalize,
    placeholder,
)
from mnemo.domain.sealed import EncryptionBlock
from mnemo.ports import (
    KeyVault,
)

log = logging.getLogger("mnemo.sealing")

__all__ = [
    "SEALED_TEXT",
    "KeyCache",
    "Sealer",
    "is_private_stream",
    "is_sealed",
    "replace_envelope",
]

NONCE_BYTES = 12
MAX_SEALED_VALUES = 512  # EncryptionBlock.values holds at most this many
_T = TypeVar("_T")


class KeyCache:
    """Short-lived plaintext keys in front of a KeyVault (see the module docstring).

    `refresher` runs a background refresh (a callable taking a job); by default a small
    thread pool of this cache's own. Tests pass one that runs the job at once."""

    def __init__(
        self,
        vault: KeyVault,
        ttl: float,
        now: Callable[[], float] = time.monotonic,
        refresher: Callable[[Callable[[], None]], object] | None = None,
    ) -> None:
        self.vault = vault
        self.ttl = ttl
        self._now = now
        self._lock = threading.Lock()
        self._data: dict[str, tuple[float, tuple[bytes, bytes, int]]] = {}
        self._unwrapped: dict[tuple[str, bytes], tuple[float, bytes]] = {}
        self._search: dict[str, tuple[float, bytes]] = {}
        self._destroyed: set[str] = set()
        self._exists: dict[str, tuple[float, bool]] = {}  # keys seen to exist, until when
        self._alive: dict[str, float] = {}  # keys the vault said were not destroyed, until
        # bumped by forget(): a fetch that began before it must not put the key back
        self._generation: dict[str, int] = {}
        self._refreshing: set[tuple[int, Any]] = set()
        self._refresher = refresher
        self._pool: ThreadPoolExecutor | None = None

    def data_key(self, key_id: str) -> tuple[bytes, bytes, int]:
        """(plaintext, wrapped, version): one data key per key_id for the TTL."""
        return self._cached(self._data, key_id, key_id, lambda: self.vault.data_key(key_id))

    def unwrap(self, key_id: str, wrapped: bytes) -> bytes:
        return self._cached(
            self._unwrapped,
            (key_id, wrapped),
            key_id,
            lambda: self.vault.unwrap(key_id, wrapped),
        )

    def holds(self, key_id: str, wrapped: bytes) -> bool:
        """Whether `unwrap(key_id, wrapped)` would be answered from the cache now."""
        with self._lock:
            hit = self._unwrapped.get((key_id, wrapped))
            return hit is not None and hit[0] > self._now()

    def search_key(self, key_id: str) -> bytes:
        return self._cached(self._search, key_id, key_id, lambda: self.vault.search_key(key_id))

    def has_key(self, key_id: str) -> bool:
        """Whether the key exists; a key this cache holds a live entry of, or saw exist
        within the TTL, counts as existing without asking the vault (a destroyed or
        forgotten key leaves the cache at once)."""
        now = self._now()
        with self._lock:
            for table in (self._data, self._search, self._exists):
                hit = table.get(key_id)
                if hit is not None and hit[0] > now:
                    return True
        found = self.vault.has_key(key_id)
        if found and self.ttl > 0:
            with self._lock:
                self._exists[key_id] = (now + self.ttl, True)
        return found

    def is_destroyed(self, key_id: str, *, reuse_no: bool = False) -> bool:
        """Whether the key was shredded; a yes is kept (it is for good). A no is asked again
        each time, so a forget in another process shows at once; with `reuse_no`, a no the
        vault gave within the TTL is reused (a forget in this process still shows at once,
        one in another within the TTL, as a cached data key would be used that long)."""
        now = self._now()
        with self._lock:
            if key_id in self._destroyed:
                return True
            seen = self._alive.get(key_id)
            if reuse_no and seen is not None and seen > now:
                return False
            generation = self._generation.get(key_id, 0)
        gone = self.vault.is_destroyed(key_id)
        with self._lock:
            if gone:
                self._destroyed.add(key_id)
                self._alive.pop(key_id, None)
            elif self.ttl > 0 and self._generation.get(key_id, 0) == generation:
                self._sweep(now)
                self._alive[key_id] = now + self.ttl
        return gone

    def rewrap(self, key_id: str, wrapped: bytes) -> tuple[bytes, int]:
        """A stored wrapped data key moved to the key's current version (never cached)."""
        return self.vault.rewrap(key_id, wrapped)

    def rotate(self, key_id: str) -> int:
        """A new key version; new seals use it at once, old ones keep opening."""
        version = self.vault.rotate(key_id)
        with self._lock:
            self._generation[key_id] = self._generation.get(key_id, 0) + 1
            self._data.pop(key_id, None)
        return version

    def destroy(self, key_id: str) -> None:
        """Crypto-shred a key and drop everything cached from it."""
        self.forget(key_id)
        self.vault.destroy(key_id)
        self.forget(key_id)
        with self._lock:
            self._destroyed.add(key_id)

    def forget(self, key_id: str) -> None:
        with self._lock:
            self._generation[key_id] = self._generation.get(key_id, 0) + 1
            self._data.pop(key_id, None)
            self._search.pop(key_id, None)
            self._exists.pop(key_id, None)
            self._alive.pop(key_id, None)
            for entry in [k for k in self._unwrapped if k[0] == key_id]:
                del self._unwrapped[entry]

    def _cached(
        self,
        table: dict[Any, tuple[float, _T]],
        key: Any,
        key_id: str,
        load: Callable[[], _T],
    ) -> _T:
        now = self._now()
        with self._lock:
            hit = table.get(key)
            fresh = hit is not None and hit[0] > now
            job = (
                self._refresh_job(table, key, key_id, load)
                if hit is not None and fresh and hit[0] - now < self.ttl / 2
                else None
            )
            if hit is not None and not fresh:
                del table[key]
            generation = self._generation.get(key_id, 0)
        if hit is not None and fresh:
            if job is not None:
                self._submit(job)
            return hit[1]
        value = load()  # outside the lock: a slow Vault must not hold every other caller
        if self.ttl > 0:
            with self._lock:
                self._sweep(now)
                if self._generation.get(key_id, 0) == generation:
                    table[key] = (now + self.ttl, value)
        return value

    def _refresh_job(
        self,
        table: dict[Any, tuple[float, _T]],
        key: Any,
        key_id: str,
        load: Callable[[], _T],
    ) -> Callable[[], None] | None:
        """A background fetch of a cached key (planned with the lock held; None when one
        is under way). On success the key's TTL starts again from just before the call; a
        destroyed key is forgotten; any other failure leaves the entry to run out at its
        own time, so a vault that stays away fails closed exactly as without the refresh."""
        slot = (id(table), key)
        if slot in self._refreshing:
            return None
        self._refreshing.add(slot)
        generation = self._generation.get(key_id, 0)

        def job() -> None:
            started = self._now()
            try:
                value = load()
            except KeyDestroyed:
                self.forget(key_id)
            except Exception:
                log.debug("refreshing a cached key failed; it keeps its expiry")
            else:
                with self._lock:
                    if self._generation.get(key_id, 0) == generation:
                        table[key] = (started + self.ttl, value)
            finally:
                with self._lock:
                    self._refreshing.discard(slot)

        return job

    def _submit(self, job: Callable[[], None]) -> None:
        if self._refresher is not None:
            self._refresher(job)
            return
        with self._lock:
            if self._pool is None:
                self._pool = ThreadPoolExecutor(2, thread_name_prefix="mnemo-key-refresh")
            pool = self._pool
        try:
            pool.submit(job)
        except RuntimeError:  # the pool is shut down (interpreter exit): no refresh
            with self._lock:
                self._refreshing.clear()

    def _sweep(self, now: float) -> None:
        tables: tuple[dict[Any, tuple[float, Any]], ...] = (
            self._data,
            self._unwrapped,
            self._search,
            self._exists,
        )
        for table in tables:
            if len(table) > 4_096:
                for k in [k for k, (until, _) in table.items() if until <= now]:
                    del table[k]
        if len(self._alive) > 4_096:
            for k in [k for k, until in self._alive.items() if until <= now]:
                del self._alive[k]


def _aad(tenant: str, key_id: str, ref: str) -> bytes:
    return f"mnemo-value\x00{tenant}\x00{key_id}\x00{ref}".encode()


def _b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode("ascii")


def _unb64(text: str) -> bytes:
    return base64.b64decode(text.encode("ascii"), validate=True)


def _locate(payload: dict[str, Any], path: str) -> tuple[dict[str, Any], str] | None:
    parts = path.split(".")
    node: Any = payload
    for part in parts[:-1]:
        node = node.get(part) if isinstance(node, dict) else None
    if not isinstance(node, dict):
        return None
    return node, parts[-1]


def _map_strings(value: Any, change: Callable[[str], str]) -> Any:
    if isinstance(value, str):
        return change(value)
    if isinstance(value, list):
        return [_map_strings(v, change) for v in value]
    if isinstance(value, dict):
        return {k: _map_strings(v, change) for k, v in value.items()}
    return value


def _detect_in(text: str, context: str | None = None) -> list[Finding]:
    """The detector's findings in one string of a JSON document. The member name it sits
    under is read in front of it (`"password": "hunter2"` is a password, as
    `password: hunter2` is), and findings that reach into that name are left out."""
    if not context:
        return detect(text)
    lead = f"{context}: "
    found = [
        Finding(f.kind, f.start - len(lead), f.end - len(lead), f.value)
        for f in detect(lead + text)
        if f.start >= len(lead)
    ]
    for alone in detect(text):  # never fewer than the string read on its own
        if not any(alone.start < f.end and f.start < alone.end for f in found):
            found.append(alone)
    return sorted(found, key=lambda f: f.start)


def _json_escaped(value: str) -> str:
    """A string as a JSON string literal holds it, without the quotes."""
    return orjson.dumps(value).decode()[1:-1]


def _json_rewritten(text: str, visit: Callable[[str, str | None], object | None]) -> str | None:
    """JSON text with each string, member name and number passed to `visit` (with the
    name of the member it is the value of); None when `visit` changed nothing. A number
    `visit` changes becomes a string. Text that is not JSON is read as one string."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        changed = visit(text, None)
        return changed if isinstance(changed, str) else None
    touched = False

    def walk(node: Any, context: str | None) -> Any:
        nonlocal touched
        if isinstance(node, bool) or node is None:
            return node
        if isinstance(node, str | int | float):
            plain = node if isinstance(node, str) else orjson.dumps(node).decode()
            changed = visit(plain, context)
            if changed is None:
                return node
            touched = True
            return changed if isinstance(changed, str) else plain
        if isinstance(node, list):
            return [walk(item, context) for item in node]
        if isinstance(node, dict):
            out: dict[str, Any] = {}
            for name, item in node.items():
                renamed = visit(name, None)
                if renamed is not None:
                    touched = True
                out[renamed if isinstance(renamed, str) else name] = walk(item, name)
            return out
        return node

    rebuilt = walk(value, None)
    return orjson.dumps(rebuilt).decode() if touched else None


class Sealer:
    """Seals events before the log and opens them for authorized reads."""

    def __init__(self, keys: KeyCache, policy: SecurityPolicy | None = None) -> None:
        self.keys = keys
        self.policy = policy or SecurityPolicy()
        # seal a user stream's words whole (ADR 0010); off only where a benchmark measures
        # what it costs against detector-only sealing
        self.seal_whole = True
        # the vector index's keyword dimensions permuted under the tenant's search key
        # (BlindTagIndex); off only where a benchmark measures what that costs
        self.permute_terms = True

    # ---- keys -------------------------------------------------------------------------

    def key_id(self, tenant: str, stream: str) -> str:
        """The tenant's key, or the user's own key for a `user:` stream when the tenant's
        policy gives users keys of their own."""
        if self.policy.for_tenant(tenant).user_keys and stream.startswith("user:"):
            return f"{tenant}/{stream}"
        return tenant

    def tenant_forgotten(self, tenant: str) -> bool:
        """Whether the tenant was forgotten (its key shredded: `shred_forgotten`). Cheap:
        a yes is kept for good, a no reused for the key cache's TTL (`KeyCache.is_destroyed`).
        A vault that cannot answer raises Unavailable (the caller fails closed)."""
        return self.keys.is_destroyed(tenant, reuse_no=True)

    def refuse_forgotten_tenant(self, tenant: str) -> None:
        """Raise KeyDestroyed (410) when the tenant was forgotten: it takes no new event,
        on any stream, a user's new stream included."""
        if self.tenant_forgotten(tenant):
            raise KeyDestroyed(
                f"tenant {tenant!r} was forgotten (its keys destroyed); it takes no new events"
            )

    def publication_key(self, tenant: str, stream: str) -> bytes | None:
        """The key of a published event's digest (`acceptance.publication_digest`): the
        search key of the key its stream is sealed under, so a forgotten subject's digests
        go with the subject. None when that key is destroyed or the vault cannot answer:
        the event then carries no digest (and the check of a reused id is skipped; sealing
        refuses what it must on its own)."""
        try:
            return self.keys.search_key(self.key_id(tenant, stream))
        except (KeyDestroyed, Unavailable):
            return None

    def keyed_digest(self, tenant: str, stream: str, text: str) -> str | None:
        """A keyed hash of `text` under the search key of the key `stream` is sealed under,
        for ids Mnemo derives from a person's words (they stand in clear in the log); None
        when that key is destroyed or the vault cannot answer."""
        try:
            return self.derived_digest(tenant, stream, text)
        except (KeyDestroyed, Unavailable):
            return None

    def derived_digest(self, tenant: str, stream: str, text: str) -> str:
        """`keyed_digest`, for a caller that must not go on without it: KeyDestroyed when
        the stream's key was destroyed, Unavailable when the vault cannot answer."""
        key = self.keys.search_key(self.key_id(tenant, stream))
        return hmac.new(key, f"derived\x00{text}".encode(), hashlib.sha256).hexdigest()

    def makes_key(self, tenant: str, stream: str) -> bool:
        """Whether sealing into `stream` would make a new key in the vault: a stream with a
        key of its own that does not exist yet."""
        key_id = self.key_id(tenant, stream)
        return key_id != tenant and not self.keys.has_key(key_id)

    def owns_key(self, tenant: str, stream: str) -> bool:
        """Whether a stream is sealed under a key of its own (forgetting it shreds that key)."""
        return self.key_id(tenant, stream) != tenant

    def shred_forgotten(
        self,
        tenant: str,
        envelopes: Iterable[Envelope],
        tenant_key_ids: Callable[[], Iterable[str]],
    ) -> list[str]:
        """Crypto-shred before the log records a request to forget (the gateway and the SDK's
        Kafka publisher both call this): forgetting a user stream that has its own key
        destroys that key; forgetting the tenant destroys the tenant's key and every key
        `tenant_key_ids()` names (those its events in the log were sealed under). Returns
        the key ids destroyed. A vault that is down raises Unavailable: nothing may then be
        appended."""
        destroyed: list[str] = []
        for envelope in envelopes:
            if envelope.type != ForgetRequested.TYPE:
                continue
            request = decode_payload(envelope)
            assert isinstance(request, ForgetRequested)
            if request.tenant:
                doomed = {tenant} | {
                    k for k in tenant_key_ids() if k == tenant or k.startswith(tenant + "/")
                }
            elif request.memory_id is None and self.owns_key(tenant, envelope.stream):
                doomed = {self.key_id(tenant, envelope.stream)}
            else:
                continue
            # the users' keys before the tenant's: a shred cut short leaves the tenant's
            # key alive, so the registrar, which asks about it first, finishes the lot
            for key_id in sorted(doomed, key=lambda k: (k == tenant, k)):
                self.keys.destroy(key_id)
                destroyed.append(key_id)
        return destroyed

    def shred_unshredded(
        self,
        tenant: str,
        envelope: Envelope,
        tenant_key_ids: Callable[[], Iterable[str]],
        stream_sealed_under: Callable[[str], bool],
    ) -> list[str]:
        """For the registrar, once it registers a request to forget: the keys
        `shred_forgotten` destroys, each destroyed now unless it is already. The gateway and
        the SDK's publisher shred before the record is produced, so this finds them gone
        (one vault question a key); a producer writing straight to the topic shreds
        nothing, and without this the forgotten words would stay readable in the log.

        A stream's own key is destroyed only when `stream_sealed_under(key_id)` (whether an
        event of the stream before the request was sealed under it) says so: a replay of an
        old request then never destroys a key the stream was given after it (a tenant's
        policy that gave users keys of their own later). For a tenant, whose key every
        shred destroys last, a destroyed tenant's key ends the question; otherwise every key
        `tenant_key_ids()` names is asked about, the users' before the tenant's. The key
        ids destroyed. A vault that cannot answer raises
        Unavailable (the batch is tried again: no forget is registered with its keys
        alive)."""
        if envelope.type != ForgetRequested.TYPE:
            return []
        request = decode_payload(envelope)
        assert isinstance(request, ForgetRequested)
        if request.tenant:
            if self.keys.is_destroyed(tenant):
                return []  # destroyed last, by whoever shredded (`shred_forgotten` too)
            named = {k for k in tenant_key_ids() if k == tenant or k.startswith(tenant + "/")}
            doomed = [*sorted(named - {tenant}), tenant]
        elif request.memory_id is None and self.owns_key(tenant, envelope.stream):
            own = self.key_id(tenant, envelope.stream)
            if self.keys.is_destroyed(own) or not stream_sealed_under(own):
                return []
            doomed = [own]
        else:
            return []
        destroyed = []
        for key_id in doomed:
            if not self.keys.is_destroyed(key_id):
                self.keys.destroy(key_id)
                destroyed.append(key_id)
        if destroyed:
            log.warning(
                "a request to forget reached the log with keys alive (a producer writing "
                "straight to the topic?): %d destroyed now",
                len(destroyed),
            )
        return destroyed

    def _standing(self, key_id: str, found: Finding, action: Action) -> tuple[str, str | None]:
        """What stands in the log for a value the detector found (a mask, or a placeholder
        of its keyed hash), and the placeholder's ref (None for a mask)."""
        if action is Action.MASK:
            return mask(found.kind, found.value), None
        token = self.token(key_id, found.kind, found.value)
        return placeholder(found.kind, token), f"{found.kind.value}:{token}"

    def stand_ins(self, tenant: str, stream: str, names: Sequence[str]) -> list[str]:
        """Those of `names` in which the detector finds a value, as an event of `stream`
        holds them (each value a placeholder or a mask, as the tenant's policy says; a name
        whose value the policy rejects is left out, since no event can hold it). A vault
        that cannot answer, or a destroyed key, gives none."""
        policy = self.policy.for_tenant(tenant)
        key_id = self.key_id(tenant, stream)
        out: list[str] = []
        for name in names:
            findings = detect(name)
            if not findings or any(policy.action(f.kind) is Action.REJECT for f in findings):
                continue
            parts: list[str] = []
            pos = 0
            try:
                for found in findings:
                    stand_in, _ = self._standing(key_id, found, policy.action(found.kind))
                    parts += [name[pos : found.start], stand_in]
                    pos = found.end
            except (KeyDestroyed, Unavailable):
                return []
            out.append("".join([*parts, name[pos:]]))
        return out

    def token(self, key_id: str, kind: PiiKind, value: str) -> str:
        """The keyed hash standing for a value in placeholders and exact-match search."""
        digest = hmac.new(
            self.keys.search_key(key_id),
            f"{kind.value}\x00{normalize(kind, value)}".encode(),
            hashlib.sha256,
        ).hexdigest()
        return "h" + digest[:16]

    # ---- sealing ------------------------------------------------------------------------

    def seal(self, envelope: Envelope, *, strict: bool = True) -> Envelope:
        """The event as the log may hold it (itself when nothing needs sealing): the
        detector's values replaced by placeholders (or masks), then, on every stream, every
        field that may carry a person's words sealed whole (`seal_private`): under the
        user's key on a user stream, under the tenant's on the tenant's shared streams
        (`session:`, `agent:`, a team's), so forgetting the tenant shreds those too.

        Raises InvalidInput (SENSITIVE_VALUE_REJECTED) when the policy rejects a value,
        Unavailable when Vault cannot be reached (nothing may then be logged), KeyDestroyed
        when the subject's key was shredded. Mnemo's own events (`strict` False) are never
        refused: a rejected value is masked, and on a shredded key the private fields are
        blanked (nothing can open them again anyway). A forgotten tenant's event is refused
        when `strict` (KeyDestroyed)."""
        if strict:
            self.refuse_forgotten_tenant(envelope.tenant)
        if self.seal_whole:
            if _has_private(envelope.encryption):
                return envelope  # sealed already (by the publish path)
            return self.seal_private(self.seal_found(envelope, strict), strict=strict)
        return self.seal_found(envelope, strict)

    def seals_whole(self, envelope: Envelope) -> bool:
        """Whether `seal` seals this event's private fields whole (not sealed so
        already)."""
        return self.seal_whole and not _has_private(envelope.encryption)

    def seal_found(self, envelope: Envelope, strict: bool = True) -> Envelope:
        """The detector's part of `seal`: its values replaced by placeholders (sealed) or
        masks; a rejected value refuses the event when `strict`."""
        model = CATALOG.models.get((envelope.type, envelope.schema_version))
        paths = model.SCANNED if model is not None else ()
        json_paths = model.SCANNED_JSON if model is not None else ()
        if not paths and not json_paths:
            return envelope
        memory = envelope.payload.get("memory")
        whole = isinstance(memory, dict) and memory.get("sensitive") is True
        found_in: list[tuple[str, list[Finding]]] = []  # read-only first: most events hold none
        for path in paths:
            spot = _locate(envelope.payload, path)
            text = spot[0].get(spot[1]) if spot is not None else None
            if not isinstance(text, str) or not text:
                continue
            if whole and path in ("memory.content", "memory.value"):
                findings = [Finding(PiiKind.SENSITIVE, 0, len(text), text)]
            else:
                findings = detect(text)
            if findings:
                found_in.append((path, findings))
        json_found: list[str] = []  # JSON text fields (a tool's arguments and result)
        for path in json_paths:
            spot = _locate(envelope.payload, path)
            text = spot[0].get(spot[1]) if spot is not None else None
            if (
                isinstance(text, str)
                and text
                and _json_rewritten(text, lambda t, c: _detect_in(t, c) or None) is not None
            ):
                json_found.append(path)
        if not found_in and not json_found:
            return envelope
        payload = copy.deepcopy(envelope.payload)
        policy = self.policy.for_tenant(envelope.tenant)
        key_id = self.key_id(envelope.tenant, envelope.stream)
        plan: dict[str, str] = {}
        fields: list[str] = []

        def swapped(path: str, text: str, findings: Sequence[Finding], in_json: bool) -> str:
            out: list[str] = []
            pos = 0
            for found in findings:
                action = policy.action(found.kind)
                if action is Action.REJECT and not strict:
                    action = Action.MASK
                if action is Action.REJECT:
                    raise InvalidInput(
                        f"payload.{path} holds a {found.kind.value} value, which this tenant's "
                        "policy rejects",
                        code="SENSITIVE_VALUE_REJECTED",
                        field=f"payload.{path}",
                        extra={"kind": found.kind.value},
                    )
                stand_in, ref = self._standing(key_id, found, action)
                if ref is not None:
                    # inside JSON text the placeholder sits in a string literal: what opens
                    # there is the value as that literal holds it (escaped), so the opened
                    # text is JSON again
                    plan[ref] = _json_escaped(found.value) if in_json else found.value
                out += [text[pos : found.start], stand_in]
                pos = found.end
            out.append(text[pos:])
            return "".join(out)

        for path, findings in found_in:
            spot = _locate(payload, path)
            assert spot is not None
            parent, leaf = spot
            parent[leaf] = swapped(path, parent[leaf], findings, False)
            fields.append(path)
        for path in json_found:
            spot = _locate(payload, path)
            assert spot is not None
            parent, leaf = spot

            def visit(text: str, context: str | None, path: str = path) -> str | None:
                findings = _detect_in(text, context)
                return swapped(path, text, findings, True) if findings else None

            rewritten = _json_rewritten(parent[leaf], visit)
            if rewritten is not None:
                parent[leaf] = rewritten
                fields.append(path)
        if not fields:
            return envelope
        if not plan:
            return envelope.model_copy(update={"payload": payload})
        return envelope.model_copy(
            update={
                "payload": payload,
                "encryption": self._block(envelope, key_id, plan, fields),
            }
        )

    def seal_private(self, envelope: Envelope, *, strict: bool = True) -> Envelope:
        """Seal whole every field of a user stream's event that may carry a person's words:
        the payload's PRIVATE paths, the actor id (unless Mnemo's own), the correlation id,
        the causation id (unless an event id) and the trace state. Each is AES-256-GCM
        sealed under the subject's data key, bound to the event id and its path (ref
        ``f:<path>``), and stands in the event as SEALED_TEXT, or, where a field's format is
        checked (keys, tags, ids, a rule id) or it travels in headers (the trace state), as
        a keyed hash of its value under the subject's search key: a blind index, equal for
        equal values of one subject."""
        fields = _private_fields(envelope)
        if not fields:
            return envelope
        key_id = self.key_id(envelope.tenant, envelope.stream)
        try:
            search = self.keys.search_key(key_id)
            stand_ins = {ref: _stand_in(ref, value, search) for ref, value in fields.items()}
            block = self._private_block(envelope, key_id, fields)
        except KeyDestroyed:
            if strict:
                raise
            # Mnemo's own event about a shredded subject: nothing may open it again
            noise = os.urandom(32)
            blank = {ref: _stand_in(ref, v, noise, REDACTED) for ref, v in fields.items()}
            return _with_fields(envelope, blank, envelope.encryption)
        return _with_fields(envelope, stand_ins, block)

    def _private_block(
        self, envelope: Envelope, key_id: str, fields: Mapping[str, str]
    ) -> EncryptionBlock:
        prior = envelope.encryption
        values: dict[str, str] = {}
        sealed_fields: tuple[str, ...] = ()
        if prior is not None and prior.wrapped_key is not None:
            if prior.key_id != key_id:
                raise InvalidInput(
                    f"the event is sealed under key {prior.key_id!r}, not {key_id!r}",
                    code="INVALID_ENCRYPTION",
                    field="encryption.key_id",
                )
            wrapped = self._wrapped(prior)
            data_key = self.keys.unwrap(key_id, wrapped)
            version = prior.key_version
            values.update(prior.values)
            sealed_fields = prior.fields
        else:
            data_key, wrapped, version = self.keys.data_key(key_id)
        if len(values) + len(fields) > MAX_SEALED_VALUES:
            raise InvalidInput(
                f"an event may hold at most {MAX_SEALED_VALUES} sealed values",
                code="TOO_MANY_SENSITIVE_VALUES",
                field="payload",
            )
        aead = AESGCM(data_key)
        for ref, value in fields.items():
            nonce = os.urandom(NONCE_BYTES)
            aad = _field_aad(envelope.tenant, key_id, envelope.event_id, ref)
            values[ref] = _b64(nonce + aead.encrypt(nonce, value.encode(), aad))
        return EncryptionBlock(
            key_id=key_id,
            key_version=version,
            fields=sealed_fields,
            wrapped_key=_b64(wrapped),
            values=values,
        )

    def _block(
        self, envelope: Envelope, key_id: str, plan: Mapping[str, str], fields: Iterable[str]
    ) -> EncryptionBlock:
        prior = envelope.encryption
        values: dict[str, str] = {}
        if prior is not None and prior.wrapped_key is not None:
            # sealed before (an SDK with a vault): add to it, under the same data key
            if prior.key_id != key_id:
                raise InvalidInput(
                    f"the event is sealed under key {prior.key_id!r}, not {key_id!r}",
                    code="INVALID_ENCRYPTION",
                    field="encryption.key_id",
                )
            wrapped = self._wrapped(prior)
            data_key = self.keys.unwrap(key_id, wrapped)
            version = prior.key_version
            values.update(prior.values)
            fields = (*prior.fields, *fields)
        else:
            data_key, wrapped, version = self.keys.data_key(key_id)
        if len(values) + len(plan) > MAX_SEALED_VALUES:
            raise InvalidInput(
                f"an event may hold at most {MAX_SEALED_VALUES} distinct sensitive values",
                code="TOO_MANY_SENSITIVE_VALUES",
                field="payload",
            )
        aead = AESGCM(data_key)
        for ref, value in plan.items():
            nonce = os.urandom(NONCE_BYTES)
            sealed = aead.encrypt(nonce, value.encode(), _aad(envelope.tenant, key_id, ref))
            values[ref] = _b64(nonce + sealed)
        return EncryptionBlock(
            key_id=key_id,
            key_version=version,
            fields=tuple(sorted(set(fields))),
            wrapped_key=_b64(wrapped),
            values=values,
        )

    def reseal(
        self, tenant: str, into: EncryptionBlock, source: EncryptionBlock, refs: Sequence[str]
    ) -> dict[str, str]:
        """The detector's values `refs` of `source` sealed again under the data key of
        `into` (a history fact's next version keeps a field of its previous one, sealed
        under another data key of the same subject's key): ref -> ciphertext. Nothing for
        values under another key id, or under a destroyed key (forgotten stays forgotten)."""
        if source.key_id != into.key_id:
            return {}
        try:
            opened = AESGCM(self.keys.unwrap(source.key_id, self._wrapped(source)))
            target = AESGCM(self.keys.unwrap(into.key_id, self._wrapped(into)))
        except (KeyDestroyed, InvalidInput):
            return {}
        values: dict[str, str] = {}
        for ref in refs:
            text = source.values.get(ref)
            if text is None:
                continue
            aad = _aad(tenant, source.key_id, ref)
            try:
                raw = _unb64(text)
                plain = opened.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], aad)
            except (InvalidTag, binascii.Error, ValueError):
                continue
            nonce = os.urandom(NONCE_BYTES)
            values[ref] = _b64(nonce + target.encrypt(nonce, plain, aad))
        return values

    @staticmethod
    def _wrapped(block: EncryptionBlock) -> bytes:
        try:
            return _unb64(block.wrapped_key or "")
        except (binascii.Error, ValueError):
            raise InvalidInput(
                "encryption.wrapped_key is not base64", code="INVALID_ENCRYPTION"
            ) from None

    @staticmethod
    def mask_text(text: str) -> str:
        """Every sensitive value of a text replaced by its mask (for texts Mnemo logs on its
        own, such as a reported correction: nothing there can be opened again)."""
        out: list[str] = []
        pos = 0
        for found in detect(text):
            out += [text[pos : found.start], mask(found.kind, found.value)]
            pos = found.end
        out.append(text[pos:])
        return "".join(out)

    def query_text(self, tenant: str, streams: Iterable[str], text: str) -> str:
        """A search text with its sensitive values swapped for their placeholders (under the
        tenant's key and each named stream's key that exists), so queries match sealed
        values exactly and plaintext never reaches the embedder."""
        findings = detect(text)
        if not findings:
            return text
        # a stream whose key does not exist has nothing sealed to match: a read never makes
        # a key (a query naming many users who never wrote would make one for each)
        own = {self.key_id(tenant, s) for s in streams} - {tenant}
        key_ids = sorted({tenant} | {k for k in own if self.keys.has_key(k)})
        out: list[str] = []
        pos = 0
        for found in findings:
            stand_ins = []
            for key_id in key_ids:
                try:
                    stand_ins.append(
                        placeholder(found.kind, self.token(key_id, found.kind, found.value))
                    )
                except KeyDestroyed:
                    continue
            out += [text[pos : found.start], " ".join(stand_ins)]
            pos = found.end
        out.append(text[pos:])
        return "".join(out)

    # ---- opening ------------------------------------------------------------------------

    def open_block(self, tenant: str, block: EncryptionBlock | None) -> dict[str, str]:
        """ref -> plaintext; every ref reads REDACTED when its key was destroyed."""
        if block is None or not block.values:
            return {}
        try:
            data_key = self.keys.unwrap(block.key_id, self._wrapped(block))
        except (KeyDestroyed, InvalidInput):
            return dict.fromkeys(block.values, REDACTED)
        aead = AESGCM(data_key)
        opened: dict[str, str] = {}
        for ref, text in block.values.items():
            try:
                raw = _unb64(text)
                opened[ref] = aead.decrypt(
                    raw[:NONCE_BYTES], raw[NONCE_BYTES:], _aad(tenant, block.key_id, ref)
                ).decode()
            except (InvalidTag, binascii.Error, ValueError):
                opened[ref] = REDACTED
        return opened

    @staticmethod
    def open_text(text: str, opened: Mapping[str, str]) -> str:
        if not opened or "⟦" not in text:
            return text
        return PLACEHOLDER.sub(lambda m: opened.get(f"{m.group(1)}:{m.group(2)}", m.group(0)), text)

    def open_memory(self, memory: Memory) -> Memory:
        if memory.sealed is None:
            return memory
        opened = self.open_block(memory.tenant, memory.sealed)
        source = memory.provenance
        if (source.source_id and "⟦" in source.source_id) or (
            source.source_location and "⟦" in source.source_location
        ):
            source = source.model_copy(
                update={
                    "source_id": source.source_id and self.open_text(source.source_id, opened),
                    "source_location": source.source_location
                    and self.open_text(source.source_location, opened),
                }
            )
        return memory.model_copy(
            update={
                "content": self.open_text(memory.content, opened),
                "value": self.open_text(memory.value, opened) if memory.value else memory.value,
                "provenance": source,
                "sealed": None,
            }
        )

    def open_private(
        self,
        event: dict[str, Any],
        *,
        redact: bool = False,
        drop_empty: bool = False,
        kept: Iterable[str] = (),
    ) -> dict[str, Any]:
        """An event as JSON with its whole-sealed fields put back (or, with `redact` or
        under a shredded key, free text as the redaction marker and checked fields left as
        their keyed hashes) and their ciphertexts taken out of the block; the detector's
        placeholders stay as they are."""
        block_raw = event.get("encryption")
        if not isinstance(block_raw, dict):
            return event
        values = block_raw.get("values")
        if not isinstance(values, dict) or not any(str(r).startswith(PRIVATE_REF) for r in values):
            return event
        block = EncryptionBlock.model_validate(block_raw)
        tenant, event_id = str(event.get("tenant", "")), str(event.get("event_id", ""))
        aead: AESGCM | None = None
        if not redact:
            try:
                aead = AESGCM(self.keys.unwrap(block.key_id, self._wrapped(block)))
            except (KeyDestroyed, InvalidInput):
                aead = None
        opened: dict[str, str | None] = {}
        left = {PRIVATE_REF + path for path in kept}
        for ref, text in block.values.items():
            if not ref.startswith(PRIVATE_REF) or ref in left:
                continue
            opened[ref] = None
            if aead is None:
                continue
            try:
                raw = _unb64(text)
                aad = _field_aad(tenant, block.key_id, event_id, ref)
                opened[ref] = aead.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], aad).decode()
            except (InvalidTag, binascii.Error, ValueError):
                continue
        event = copy.deepcopy(event)
        for ref, value in opened.items():
            if value is None and _leaf(ref) in _TOKEN_LEAVES:
                continue  # a checked field keeps its keyed hash
            _put(event, ref[len(PRIVATE_REF) :], REDACTED if value is None else value)
        rest = {r: v for r, v in block.values.items() if r not in opened}
        if rest:
            event["encryption"] = {**block_raw, "values": rest}
        elif drop_empty:
            event["encryption"] = None
        else:  # views show which key sealed the event, never a wrapped key
            event["encryption"] = {**block_raw, "values": {}, "wrapped_key": None}
        return event

    def open_private_envelopes(self, envelopes: Sequence[Envelope]) -> list[Envelope]:
        """`open_private_envelope` over a batch. The data keys the batch needs that are
        not cached yet are unwrapped first, side by side (one vault call per key, not one
        after the other); a key that cannot be unwrapped then is left to the opening
        itself, which answers as it always does (redacted, or Unavailable)."""
        wanted: dict[tuple[str, bytes], None] = {}
        for envelope in envelopes:
            block = envelope.encryption
            if _has_private(block):
                assert block is not None
                with contextlib.suppress(InvalidInput, ValueError):
                    wanted[(block.key_id, self._wrapped(block))] = None
        missing = [k for k in wanted if not self.keys.holds(*k)]
        if len(missing) > 1:
            with ThreadPoolExecutor(min(8, len(missing))) as pool:
                # in copies of this thread's context: the vault calls' spans keep their parent
                for future in [
                    pool.submit(contextvars.copy_context().run, self._try_unwrap, k)
                    for k in missing
                ]:
                    future.result()
        return [self.open_private_envelope(e) for e in envelopes]

    def _try_unwrap(self, key: tuple[str, bytes]) -> None:
        with contextlib.suppress(Exception):
            self.keys.unwrap(*key)

    def open_private_envelope(self, envelope: Envelope) -> Envelope:
        """An event as Mnemo's consumers read it: whole-sealed fields opened, the
        detector's placeholders (and their ciphertexts) kept."""
        if not _has_private(envelope.encryption):
            return envelope
        model = CATALOG.models.get((envelope.type, envelope.schema_version))
        kept = model.UNOPENED if model is not None else ()
        opened = self.open_private(envelope.model_dump(mode="json"), drop_empty=True, kept=kept)
        return Envelope.model_validate(opened)

    def open_json(self, event: dict[str, Any], *, redact: bool = False) -> dict[str, Any]:
        """An event as JSON (a dict) with its values opened (or, with `redact`, replaced by
        the redaction marker); the encryption block keeps its key id and version but no
        ciphertext."""
        event = self.open_private(event, redact=redact)
        tenant = str(event.get("tenant", ""))
        block_raw = event.get("encryption")
        payload = event.get("payload")
        if isinstance(block_raw, dict) and block_raw.get("values") and isinstance(payload, dict):
            block = EncryptionBlock.model_validate(block_raw)
            opened = (
                dict.fromkeys(block.values, REDACTED) if redact else self.open_block(tenant, block)
            )
            payload = _map_strings(payload, lambda s: self.open_text(s, opened))
            event = {**event, "encryption": {**block_raw, "values": {}, "wrapped_key": None}}
        memory = payload.get("memory") if isinstance(payload, dict) else None
        if isinstance(memory, dict) and isinstance(memory.get("sealed"), dict):
            sealed = EncryptionBlock.model_validate(memory["sealed"])
            opened = (
                dict.fromkeys(sealed.values, REDACTED)
                if redact
                else self.open_block(tenant, sealed)
            )
            memory = {
                **memory,
                "content": self.open_text(str(memory.get("content", "")), opened),
                "value": self.open_text(memory["value"], opened)
                if isinstance(memory.get("value"), str)
                else memory.get("value"),
                "sealed": None,
            }
            source = memory.get("provenance")
            if isinstance(source, dict):
                memory["provenance"] = {
                    **source,
                    **{
                        name: self.open_text(source[name], opened)
                        for name in ("source_id", "source_location")
                        if isinstance(source.get(name), str)
                    },
                }
            payload = {**(payload if isinstance(payload, dict) else {}), "memory": memory}
        if payload is not event.get("payload"):
            event = {**event, "payload": payload}
        return event

    def open_event(self, logged: LoggedEvent, *, redact: bool = False) -> LoggedEvent:
        env = logged.envelope
        if not is_sealed(env):
            return logged
        opened = self.open_json(env.model_dump(mode="json"), redact=redact)
        return replace_envelope(logged, Envelope.model_validate(opened))


# ---- fields sealed whole (every stream: a user's under its key, others the tenant's) -----

SEALED_TEXT = pii.SEALED_TEXT  # what a whole-sealed free-text field reads in the log
PRIVATE_REF = "f:"  # refs of whole-sealed fields: f:<payload path>, f:@actor.id, ...
# fields whose format is checked (keys, tags, ids, a guard's rule id) or that travel in
# headers (the trace state): they stand in as a keyed hash, which still validates there and
# is kept when the field cannot be opened any more
_TOKEN_LEAVES = frozenset(
    {
        "key",
        "tags",
        "source_id",
        "speaker",
        "rule_id",
        "request_id",
        # hashes of a person's words (a memory's, a context's query, an answer): a keyed
        # hash of a hash is as good for equality, and tests no guess without the key
        "content_hash",
        "query_hash",
        "response_hash",
        "sha256",  # an ingested document's bytes
        "@actor.id",
        "@correlation_id",
        "@causation_id",
        "@trace.tracestate",
    }
)
# an event id (what Mnemo's own events name as their cause): hex digits, no one's words
_EVENT_ID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[78][0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}")


def is_private_stream(stream: str) -> bool:
    """Whether a stream is a person's (sealed under a key of its own when the policy gives
    users keys, and taking no record of use once that key is shredded; ADR 0010)."""
    return stream.startswith("user:")


def _has_private(block: EncryptionBlock | None) -> bool:
    return block is not None and any(r.startswith(PRIVATE_REF) for r in block.values)


def _private_fields(envelope: Envelope) -> dict[str, str]:
    """ref -> plaintext of every non-empty field of the event to seal whole."""
    model = CATALOG.models.get((envelope.type, envelope.schema_version))
    found: dict[str, str] = {}
    for path in model.PRIVATE if model is not None else ():
        spot = _locate(envelope.payload, path)
        value = spot[0].get(spot[1]) if spot is not None else None
        if isinstance(value, str) and value:
            found[PRIVATE_REF + path] = value
        elif isinstance(value, list | tuple):
            for i, item in enumerate(value):
                if isinstance(item, str) and item:
                    found[f"{PRIVATE_REF}{path}.{i}"] = item
    if envelope.actor.kind is not ActorKind.SYSTEM:
        found[PRIVATE_REF + "@actor.id"] = envelope.actor.id
    if envelope.correlation_id:
        found[PRIVATE_REF + "@correlation_id"] = envelope.correlation_id
    # a cause named by its event id stays in clear (the log finds derived events by it);
    # any other causation id is the caller's own text
    if envelope.causation_id and not _EVENT_ID.fullmatch(envelope.causation_id):
        found[PRIVATE_REF + "@causation_id"] = envelope.causation_id
    if envelope.trace is not None and envelope.trace.tracestate:
        found[PRIVATE_REF + "@trace.tracestate"] = envelope.trace.tracestate
    return found


def _leaf(ref: str) -> str:
    path = ref[len(PRIVATE_REF) :]
    if path.startswith("@"):
        return path
    names = [p for p in path.split(".") if not p.isdigit()]
    return names[-1] if names else path


def _stand_in(ref: str, value: str, search_key: bytes, text: str = SEALED_TEXT) -> str:
    if _leaf(ref) not in _TOKEN_LEAVES:
        return text
    digest = hmac.new(search_key, f"field\x00{value}".encode(), hashlib.sha256).hexdigest()
    return "h" + digest[:16]


def _field_aad(tenant: str, key_id: str, event_id: str, ref: str) -> bytes:
    return f"mnemo-field\x00{tenant}\x00{key_id}\x00{event_id}\x00{ref}".encode()


def _put(event: dict[str, Any], path: str, value: str) -> None:
    """Set a field of an event's JSON: `@actor.id`, `@correlation_id`, `@causation_id`,
    `@trace.tracestate`, or a payload path whose numeric parts index lists."""
    parts: list[str] = (
        path[1:].split(".") if path.startswith("@") else ["payload", *path.split(".")]
    )
    node: Any = event
    try:  # a ref naming no such place (a malformed block) changes nothing
        for part in parts[:-1]:
            node = node[int(part)] if isinstance(node, list) else node.get(part)
            if node is None:
                return
        last = parts[-1]
        if isinstance(node, list):
            node[int(last)] = value
        elif isinstance(node, dict):
            node[last] = value
    except (ValueError, IndexError, AttributeError):
        return


def _with_fields(
    envelope: Envelope,
    stand_ins: Mapping[str, str],
    block: EncryptionBlock | None,
) -> Envelope:
    """The event with its private fields replaced by their stand-ins (each valid where the
    field was: `⟦sealed⟧` for free text, a short keyed hash for checked fields)."""
    trace = envelope.trace
    event: dict[str, Any] = {
        "payload": copy.deepcopy(envelope.payload),
        "actor": {"id": envelope.actor.id},
        "correlation_id": envelope.correlation_id,
        "causation_id": envelope.causation_id,
        "trace": {"tracestate": trace.tracestate if trace is not None else None},
    }
    for ref, value in stand_ins.items():
        _put(event, ref[len(PRIVATE_REF) :], value)
    return envelope.model_copy(
        update={
            "payload": event["payload"],
            "actor": envelope.actor.model_copy(update={"id": event["actor"]["id"]}),
            "correlation_id": event["correlation_id"],
            "causation_id": event["causation_id"],
            "trace": None
            if trace is None
            else trace.model_copy(update={"tracestate": event["trace"]["tracestate"]}),
            "encryption": block,
        }
    )


def replace_envelope(logged: LoggedEvent, envelope: Envelope) -> LoggedEvent:
    return LoggedEvent(offset=logged.offset, envelope=envelope)


def is_sealed(envelope: Envelope) -> bool:
    """Whether an event carries sealed values (its own, or its memory's)."""
    memory = envelope.payload.get("memory")
    return (envelope.encryption is not None and bool(envelope.encryption.values)) or (
        isinstance(memory, dict) and bool(memory.get("sealed"))
    )
