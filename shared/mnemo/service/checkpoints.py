"""The audit consumer's signed checkpoints: after the links it writes, it signs each
stream's chain head every `every` links and at least `seconds` after a link was left
unsigned, and stores the checkpoint where a rebuild does not reach (ADR 0017). With
`each_batch` (the default) it also signs the head of every stream a batch extended once
that batch is committed (`batch_committed`), so the links no checkpoint covers yet are
those of the batch in flight: a tail deleted from the log after a batch is reported
against the checkpoint that batch left. `batch_seconds` bounds what that costs: a stream
whose last checkpoint is younger is signed at a later batch or tick, once it is that old,
so a busy stream costs at most one signature (and one anchor write) per `batch_seconds`.

A checkpoint is signed only once the batch holding its links is committed, so the store
never holds a checkpoint past its stream's chain head (a verifier reading while the
consumer works sees no missing tail); a batch that fails is discarded and redone, and a
redone batch computes the same links (the chain is a pure function of the log).
Checkpoints are only ever added past a stream's last one, under the next index, never
rewritten; a rebuild therefore re-signs nothing it signed before. When a replayed chain
reaches the link a checkpoint signed and finds another hash there, the stream is left
unsigned from then on (logged as AUDIT_CHECKPOINT_MISMATCH): the process never signs over a
changed log, and `mnemo audit verify` reports the mismatch.

Signing failures never stop the audit consumer: the links are still written, the stream's
head stays pending and is signed at a later link or tick, and verification shows the links
past the last checkpoint as unsigned meanwhile.

Each stored checkpoint then becomes its stream's anchor, outside the store (the vault's
KV engine, by check-and-set, only ever forward along one chain), so a store rolled back to
an older checkpoint is seen; a chain signed again after such a rollback does not move the
anchor (logged as AUDIT_CHECKPOINT_ROLLBACK). An anchor that cannot be written is tried
again at the next tick; so is the store's newest checkpoint of each stream this process
reads first (a crash between storing a checkpoint and anchoring it leaves nothing behind).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime

from mnemo.domain.checkpoint import FIRST, Checkpoint, checkpoint_digest, checkpoint_message
from mnemo.domain.errors import ConflictError, MnemoError
from mnemo.domain.projection import AuditRecord
from mnemo.handlers import audit
from mnemo.ports import AuditCheckpoints, CheckpointAnchors, Clock, Signer

__all__ = ["AuditCheckpointer"]

log = logging.getLogger("mnemo.audit")

RETRY_SECONDS = 5.0  # after a failed signature, wait this long before the next attempt

_Key = tuple[str, str]


class AuditCheckpointer:
    """Signs and stores checkpoints of the chains the audit consumer extends."""

    def __init__(
        self,
        signer: Signer,
        checkpoints: AuditCheckpoints,
        clock: Clock,
        *,
        every: int = 1_000,
        seconds: float = 60.0,
        anchors: CheckpointAnchors | None = None,
        each_batch: bool = True,
        batch_seconds: float = 0.0,
    ) -> None:
        self.signer = signer
        self.checkpoints = checkpoints
        self.anchors = anchors
        self.clock = clock
        self.every = every
        self.seconds = seconds
        self.each_batch = each_batch
        self.batch_seconds = batch_seconds
        self._lock = threading.RLock()
        self._last: dict[_Key, Checkpoint | None] = {}
        self._pending: dict[_Key, tuple[AuditRecord, datetime]] = {}
        self._staged: list[AuditRecord] = []
        self._diverged: set[_Key] = set()
        self._retry_at = 0.0
        self._unanchored: dict[_Key, Checkpoint] = {}
        self._anchor_retry_at = 0.0
        self.signed = 0
        self.failures = 0
        self.anchored = 0

    def observe(self, record: AuditRecord) -> None:
        """A link the audit consumer is writing: kept until its batch is committed
        (`batch_committed`), so that no checkpoint is ever stored ahead of the links it
        signs and a verifier reading meanwhile sees no missing tail."""
        with self._lock:
            self._staged.append(record)

    def settle(self, stored: Callable[[AuditRecord], bool]) -> None:
        """Links observed in a batch that did not report its commit (it raised, before or
        after committing; a store may have finished the commit later): those the store
        holds (`stored`) are taken as committed, the others forgotten (a redone batch
        observes them again). The consumer calls this before each batch and when idle."""
        with self._lock:
            while self._staged:
                # a store that cannot answer raises here and the rest stays staged for the
                # next call (the batch that called waits: it would observe them again)
                if stored(self._staged[0]):
                    self._take(self._staged[0])
                self._staged.pop(0)

    def _committed(self) -> None:
        staged, self._staged = self._staged, []
        for record in staged:  # in order: a head due every `every` links is signed there
            self._take(record)

    def _take(self, record: AuditRecord) -> None:
        """A committed link: its stream's head is pending, and signed when it is due."""
        key = (record.tenant, record.stream)
        with self._lock:
            try:
                last = self._last_of(key)
            except MnemoError as exc:
                self._failed([key], exc.code)
                return
            if key in self._diverged:
                return
            if last is not None and record.n <= last.n:
                if record.n == last.n and record.hash != last.hash:
                    self._diverged.add(key)
                    self._pending.pop(key, None)
                    log.error(
                        "AUDIT_CHECKPOINT_MISMATCH: %s/%s link %d differs from checkpoint %d; "
                        "no further checkpoints are signed for this stream",
                        record.tenant,
                        record.stream,
                        record.n,
                        last.index,
                    )
                return
            pending = self._pending.get(key)
            since = pending[1] if pending is not None else self.clock.now()
            self._pending[key] = (record, since)
            self._sign_if_due(key)

    def tick(self) -> int:
        """Sign the pending heads whose time has come (a consumer calls this when idle);
        how many checkpoints were signed."""
        with self._lock:
            before = self.signed
            self._sign_due(list(self._pending), now=self.each_batch)
            if time.monotonic() >= self._anchor_retry_at:
                for key in list(self._unanchored):
                    if not self._anchor(key):
                        break
            return self.signed - before

    def batch_committed(self) -> int:
        """The audit consumer committed a batch: with `each_batch`, sign the head of every
        stream it left unsigned, whatever `every` and `seconds` say (but not twice within
        `batch_seconds`); how many were signed."""
        with self._lock:
            before = self.signed
            self._committed()
            if self.each_batch:
                self._sign_due(list(self._pending), now=True)
            return self.signed - before

    def reset(self) -> None:
        """Forget what this process knows (a rebuild starts the chains again)."""
        with self._lock:
            self._last.clear()
            self._pending.clear()
            self._staged.clear()
            self._diverged.clear()
            self._unanchored.clear()

    # ---- helpers ----------------------------------------------------------------------------

    def _last_of(self, key: _Key) -> Checkpoint | None:
        if key not in self._last:
            last = self._last[key] = self.checkpoints.last(*key)
            if last is not None and self.anchors is not None:
                self._unanchored.setdefault(key, last)  # anchored at the next tick
        return self._last[key]

    def _sign_if_due(self, key: _Key, *, now: bool = False) -> None:
        """Sign the stream's pending head when it is due, or at once with `now`."""
        self._sign_due([key], now=now)

    def _sign_due(self, keys: list[_Key], *, now: bool = False) -> None:
        """Sign the pending heads of `keys` that are due (all of them at once with `now`)
        in one request to the signer, then store and anchor each checkpoint in turn."""
        due: list[tuple[_Key, AuditRecord, Checkpoint | None, datetime]] = []
        for key in keys:
            pending = self._pending.get(key)
            if pending is None or time.monotonic() < self._retry_at:
                continue
            record, since = pending
            last = self._last.get(key)
            at = self.clock.now()
            if audit.checkpoint_due(
                last.n if last else 0, record.n, since, at, self.every, self.seconds
            ) or (now and self._batch_due(last, record, at)):
                due.append((key, record, last, at))
        if not due:
            return
        # each checkpoint's place in its stream's chain: (index, prev)
        places = [
            (last.index + 1, checkpoint_digest(last)) if last else (1, FIRST)
            for _, _, last, _ in due
        ]
        messages = [
            (r.tenant, checkpoint_message(r.tenant, r.stream, index, r.n, r.hash, prev, at))
            for (_, r, _, at), (index, prev) in zip(due, places, strict=True)
        ]
        try:
            signatures = self.signer.sign_many(messages)
        except MnemoError as exc:
            self._failed([key for key, *_ in due], exc.code)
            return
        except Exception as exc:  # a signer's fault never stops the audit consumer
            self._failed([key for key, *_ in due], type(exc).__name__)
            return
        for (key, r, _, at), (index, prev), signature in zip(due, places, signatures, strict=True):
            if time.monotonic() < self._retry_at:
                break  # the store failed meanwhile: the rest stay pending
            checkpoint = Checkpoint(r.tenant, r.stream, index, r.n, r.hash, prev, at, signature)
            self._store(key, r, checkpoint)

    def _store(self, key: _Key, record: AuditRecord, checkpoint: Checkpoint) -> None:
        """Store a signed checkpoint of the stream's pending head, then anchor it."""
        try:
            stored = self.checkpoints.add(checkpoint)
            if not stored:  # another writer took the index: start again from its checkpoint
                self._last[key] = self.checkpoints.last(*key)
                fresh = self._last[key]
                if fresh is not None and fresh.n >= record.n:
                    self._pending.pop(key, None)
                return
        except MnemoError as exc:
            self._failed([key], exc.code)
            return
        self._last[key] = checkpoint
        self._pending.pop(key, None)
        self.signed += 1
        if self.anchors is not None:
            self._unanchored[key] = checkpoint
            if time.monotonic() >= self._anchor_retry_at:
                self._anchor(key)

    def _batch_due(self, last: Checkpoint | None, record: AuditRecord, at: datetime) -> bool:
        """Whether a committed batch's head is signed now: past the last checkpoint, and
        that checkpoint at least `batch_seconds` old."""
        if last is None:
            return True
        if record.n <= last.n:
            return False
        return (at - last.signed_at).total_seconds() >= self.batch_seconds

    def _anchor(self, key: _Key) -> bool:
        """Move the stream's anchor to its newest stored checkpoint; False when the anchors
        cannot be reached (tried again at a later tick)."""
        checkpoint = self._unanchored.get(key)
        if checkpoint is None or self.anchors is None:
            return True
        try:
            try:
                self._advance(checkpoint)
            except ConflictError as exc:
                if exc.code != "AUDIT_ANCHOR_GAP":
                    raise
                # anchoring failed before: the checkpoints in between first, in order
                for stored in sorted(
                    (
                        c
                        for c in self.checkpoints.of_tenant(key[0])
                        if c.stream == key[1] and c.index <= checkpoint.index
                    ),
                    key=lambda c: c.index,
                ):
                    self._advance(stored)
        except ConflictError as exc:  # the store's chain does not extend the anchor
            del self._unanchored[key]
            log.error(
                "%s: %s/%s checkpoint %d does not descend from the stream's anchor; the "
                "anchor stays where it is",
                exc.code,
                key[0],
                key[1],
                checkpoint.index,
            )
            return True
        except MnemoError as exc:
            self._anchor_retry_at = time.monotonic() + RETRY_SECONDS
            log.warning(
                "audit checkpoint %d of %s/%s not anchored (%s); tried again later",
                checkpoint.index,
                key[0],
                key[1],
                exc.code,
            )
            return False
        if self._unanchored.get(key) is checkpoint:
            del self._unanchored[key]
        return True

    def _advance(self, checkpoint: Checkpoint) -> None:
        assert self.anchors is not None
        if self.anchors.advance(checkpoint):
            self.anchored += 1

    def _failed(self, keys: list[_Key], code: str) -> None:
        self.failures += 1
        self._retry_at = time.monotonic() + RETRY_SECONDS
        tenant, stream = keys[0]
        log.warning(
            "audit checkpoint of %s/%s%s not signed (%s); links stay unsigned until it is",
            tenant,
            stream,
            f" and {len(keys) - 1} other stream(s)" if len(keys) > 1 else "",
            code,
        )
