"""Envelope encryption of sensitive values, before events reach the log, and their opening
on authorized reads.

* `KeyCache` sits in front of a KeyVault: a data key (and a search key) per key_id is kept
  in memory for `ttl` seconds, then dropped. While Vault is down, sealing and opening work
  from the cache until the TTL runs out, then fail closed with Unavailable (503).
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
import copy
import hashlib
import hmac
import os
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any, TypeVar

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from mnemo.domain.context import neutral_text
from mnemo.domain.errors import InvalidInput, KeyDestroyed
from mnemo.domain.events import CATALOG, Envelope, ForgetRequested, LoggedEvent, decode_payload
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
from mnemo.ports import KeyVault
from mnemo.service.context import ContextResponse

__all__ = ["KeyCache", "Sealer", "is_sealed", "replace_envelope"]

NONCE_BYTES = 12
MAX_SEALED_VALUES = 512  # EncryptionBlock.values holds at most this many
_T = TypeVar("_T")


class KeyCache:
    """Short-lived plaintext keys in front of a KeyVault (see the module docstring)."""

    def __init__(
        self, vault: KeyVault, ttl: float, now: Callable[[], float] = time.monotonic
    ) -> None:
        self.vault = vault
        self.ttl = ttl
        self._now = now
        self._lock = threading.Lock()
        self._data: dict[str, tuple[float, tuple[bytes, bytes, int]]] = {}
        self._unwrapped: dict[tuple[str, bytes], tuple[float, bytes]] = {}
        self._search: dict[str, tuple[float, bytes]] = {}

    def data_key(self, key_id: str) -> tuple[bytes, bytes, int]:
        """(plaintext, wrapped, version): one data key per key_id for the TTL."""
        return self._cached(self._data, key_id, lambda: self.vault.data_key(key_id))

    def unwrap(self, key_id: str, wrapped: bytes) -> bytes:
        return self._cached(
            self._unwrapped, (key_id, wrapped), lambda: self.vault.unwrap(key_id, wrapped)
        )

    def search_key(self, key_id: str) -> bytes:
        return self._cached(self._search, key_id, lambda: self.vault.search_key(key_id))

    def rewrap(self, key_id: str, wrapped: bytes) -> tuple[bytes, int]:
        """A stored wrapped data key moved to the key's current version (never cached)."""
        return self.vault.rewrap(key_id, wrapped)

    def rotate(self, key_id: str) -> int:
        """A new key version; new seals use it at once, old ones keep opening."""
        version = self.vault.rotate(key_id)
        with self._lock:
            self._data.pop(key_id, None)
        return version

    def destroy(self, key_id: str) -> None:
        """Crypto-shred a key and drop everything cached from it."""
        self.forget(key_id)
        self.vault.destroy(key_id)
        self.forget(key_id)

    def forget(self, key_id: str) -> None:
        with self._lock:
            self._data.pop(key_id, None)
            self._search.pop(key_id, None)
            for entry in [k for k in self._unwrapped if k[0] == key_id]:
                del self._unwrapped[entry]

    def _cached(self, table: dict[Any, tuple[float, _T]], key: Any, load: Callable[[], _T]) -> _T:
        now = self._now()
        with self._lock:
            hit = table.get(key)
            if hit is not None and hit[0] > now:
                return hit[1]
            if hit is not None:
                del table[key]
        value = load()  # outside the lock: a slow Vault must not hold every other caller
        if self.ttl > 0:
            with self._lock:
                self._sweep(now)
                table[key] = (now + self.ttl, value)
        return value

    def _sweep(self, now: float) -> None:
        tables: tuple[dict[Any, tuple[float, Any]], ...] = (
            self._data,
            self._unwrapped,
            self._search,
        )
        for table in tables:
            if len(table) > 4_096:
                for k in [k for k, (until, _) in table.items() if until <= now]:
                    del table[k]


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


class Sealer:
    """Seals events before the log and opens them for authorized reads."""

    def __init__(self, keys: KeyCache, policy: SecurityPolicy | None = None) -> None:
        self.keys = keys
        self.policy = policy or SecurityPolicy()

    # ---- keys -------------------------------------------------------------------------

    def key_id(self, tenant: str, stream: str) -> str:
        """The tenant's key, or the user's own key for a `user:` stream when the tenant's
        policy gives users keys of their own."""
        if self.policy.for_tenant(tenant).user_keys and stream.startswith("user:"):
            return f"{tenant}/{stream}"
        return tenant

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
            for key_id in sorted(doomed):
                self.keys.destroy(key_id)
                destroyed.append(key_id)
        return destroyed

    def token(self, key_id: str, kind: PiiKind, value: str) -> str:
        """The keyed hash standing for a value in placeholders and exact-match search."""
        digest = hmac.new(
            self.keys.search_key(key_id),
            f"{kind.value}\x00{normalize(kind, value)}".encode(),
            hashlib.sha256,
        ).hexdigest()
        return "h" + digest[:16]

    # ---- sealing ------------------------------------------------------------------------

    def seal(self, envelope: Envelope) -> Envelope:
        """The event with its sensitive values replaced and sealed (itself when it has none).

        Raises InvalidInput (SENSITIVE_VALUE_REJECTED) when the policy rejects a value,
        Unavailable when Vault cannot be reached (nothing may then be logged), KeyDestroyed
        when the subject's key was shredded."""
        model = CATALOG.models.get((envelope.type, envelope.schema_version))
        paths = model.SCANNED if model is not None else ()
        if not paths:
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
        if not found_in:
            return envelope
        payload = copy.deepcopy(envelope.payload)
        policy = self.policy.for_tenant(envelope.tenant)
        key_id = self.key_id(envelope.tenant, envelope.stream)
        plan: dict[str, str] = {}
        fields: list[str] = []
        for path, findings in found_in:
            spot = _locate(payload, path)
            assert spot is not None
            parent, leaf = spot
            text = parent[leaf]
            out: list[str] = []
            pos = 0
            for found in findings:
                action = policy.action(found.kind)
                if action is Action.REJECT:
                    raise InvalidInput(
                        f"payload.{path} holds a {found.kind.value} value, which this tenant's "
                        "policy rejects",
                        code="SENSITIVE_VALUE_REJECTED",
                        field=f"payload.{path}",
                        extra={"kind": found.kind.value},
                    )
                if action is Action.MASK:
                    stand_in = mask(found.kind, found.value)
                else:
                    token = self.token(key_id, found.kind, found.value)
                    plan[f"{found.kind.value}:{token}"] = found.value
                    stand_in = placeholder(found.kind, token)
                out += [text[pos : found.start], stand_in]
                pos = found.end
            out.append(text[pos:])
            parent[leaf] = "".join(out)
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
        tenant's key and each named stream's key), so queries match sealed values exactly
        and plaintext never reaches the embedder."""
        findings = detect(text)
        if not findings:
            return text
        key_ids = sorted({tenant} | {self.key_id(tenant, s) for s in streams})
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
        return memory.model_copy(
            update={
                "content": self.open_text(memory.content, opened),
                "value": self.open_text(memory.value, opened) if memory.value else memory.value,
                "sealed": None,
            }
        )

    def open_json(self, event: dict[str, Any], *, redact: bool = False) -> dict[str, Any]:
        """An event as JSON (a dict) with its values opened (or, with `redact`, replaced by
        the redaction marker); the encryption block keeps its key id and version but no
        ciphertext."""
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

    def open_context(self, response: ContextResponse) -> ContextResponse:
        """An assembled context with its values opened: the rendered text (the audit record
        in the log keeps the placeholders) and every included memory."""
        opened: dict[str, str] = {}
        for item in response.assembly.included:
            memory = item.candidate.memory
            opened.update(self.open_block(memory.tenant, memory.sealed))
        if not opened:
            return response
        included = [
            replace(i, candidate=replace(i.candidate, memory=self.open_memory(i.candidate.memory)))
            for i in response.assembly.included
        ]
        # an opened value goes into a rendered line: it is neutralized like stored text
        shown = {ref: neutral_text(value) for ref, value in opened.items()}
        assembly = replace(
            response.assembly,
            text=self.open_text(response.assembly.text, shown),
            included=included,
        )
        return replace(response, assembly=assembly)


def replace_envelope(logged: LoggedEvent, envelope: Envelope) -> LoggedEvent:
    return LoggedEvent(offset=logged.offset, envelope=envelope)


def is_sealed(envelope: Envelope) -> bool:
    """Whether an event carries sealed values (its own, or its memory's)."""
    memory = envelope.payload.get("memory")
    return (envelope.encryption is not None and bool(envelope.encryption.values)) or (
        isinstance(memory, dict) and bool(memory.get("sealed"))
    )
