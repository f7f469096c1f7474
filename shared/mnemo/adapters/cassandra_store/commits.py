"""ProjectionStore: a transaction's mutations committed through a commit record (the redo
log), positions, and the claims that fence an older holder of one."""

from __future__ import annotations

import json
import time
import uuid
import zlib
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from typing import TYPE_CHECKING, Any, cast

from cassandra import ConsistencyLevel
from cassandra.query import BatchStatement, BatchType

from mnemo.adapters.cassandra_store.common import (
    _INTENT_CHUNK,
    _INTENT_ONE_BATCH,
    Mutation,
    Row,
    _translated,
    log,
)
from mnemo.adapters.cassandra_store.connection import _Connection
from mnemo.adapters.cassandra_store.rows import HeadMove, write_batched
from mnemo.adapters.cassandra_store.transaction import _Tx
from mnemo.domain.errors import ConflictError, FencedOff, Unavailable
from mnemo.ports import Claim, StoreTransaction

if TYPE_CHECKING:
    from mnemo.adapters.cassandra_store import CassandraMemoryStore


class _Commits(_Connection):
    def _bind_all(self, mutations: Sequence[Mutation], ts: int) -> list[Any]:
        bound = []
        with _translated():
            for ks, table, op, values in mutations:
                if op == "put":
                    params = [*values, ts]
                elif op == "purge":  # just below the commit: its own later writes survive
                    params = [ts - 1, *values]
                else:
                    params = [ts, *values]
                bound.append(self._prepare(ks, f"{table}:{op}").bind(params))
        return bound

    def _write_all(self, mutations: Sequence[Mutation], ts: int) -> None:
        write_batched(self._session, self._bind_all(mutations, ts))

    # -- commit: seal, apply, position

    @contextmanager
    def transaction(self) -> Iterator[StoreTransaction]:
        with self._lock:
            for owner in sorted(self._dirty):
                self._roll_forward(owner)
        tx = _Tx(cast("CassandraMemoryStore", self))
        yield tx
        # Transactions of different consumers (the registrar's partitions) run and commit
        # side by side: each writes its own rows, moves keys by compare-and-set and seals
        # under its own owner, and adds usage to its own partition's counter rows. Usage
        # counted outside a fenced partition is read-modify-write on a row others share,
        # and a purge names partitions from stored rows: those commits take the lock, one
        # at a time.
        shared_rows = bool(tx.stats) and tx.epoch is None
        with self._lock if (shared_rows or tx.purged) else nullcontext():
            self._commit(tx)

    def _commit(self, tx: _Tx) -> None:
        mutations, late, post, moves = tx.plan()
        fenced = tx.position is not None and tx.epoch is not None
        if tx.position is not None:  # remembered again once this commit is finished
            self._committed.pop(tx.position[0], None)
        if not mutations and not late and not post and not fenced:
            if tx.position is not None:
                ts = self._clock.next()
                self._write_all([[self.home, "positions", "put", [*tx.position, ts]]], ts)
            return
        if (
            tx.position is not None
            and not self._take_clean(tx.position[0])
            and self._unfinished(tx.position[0])
        ):
            # this batch was read from a position whose commit was not finished: finish that
            # one, and let the consumer read its batch again from the position it reaches
            self._roll_forward(tx.position[0])
            raise Unavailable(
                f"an earlier commit of {tx.position[0]} was unfinished; it is now complete, "
                "read the batch again from position()",
                code="STORE_UNAVAILABLE",
            )
        for move in moves:
            self._move_head(move)
        owner = (
            tx.position[0] if tx.position is not None else f"tx:{self._writer}:{uuid.uuid4().hex}"
        )
        ts = self._clock.next()
        record: dict[str, Any] = {
            "ts": ts,
            "mutations": mutations,
            "late": late,
            "post": post,
            "position": tx.position,
        }
        if fenced:
            assert tx.epoch is not None
            record["fenced"] = True
        self._inflight.add(owner)
        try:
            if fenced:
                assert tx.epoch is not None
                self._seal_fenced(owner, ts, record, tx.epoch)
            else:
                self._seal(owner, ts, record)
            self._apply(owner, record)
        except FencedOff:
            raise  # nothing was sealed: nothing to finish
        except BaseException:
            self._dirty.add(owner)  # a sealed record may exist: finish it before going on
            raise
        finally:
            self._inflight.discard(owner)
        self._dirty.discard(owner)
        if fenced and tx.position is not None:
            self._committed[owner] = int(tx.position[1])

    def _move_head(self, move: HeadMove) -> None:
        """Compare-and-set which memory is active for a key (a lightweight transaction):
        from the one this batch saw to the one it decided on. Finding the target already
        there is a repeat of this same batch; finding any other memory means another writer
        decided meanwhile, and nothing of this batch is written."""
        new_id = move.new.memory_id if move.new is not None else None
        version = move.new.version if move.new is not None else None
        params = [new_id, version, move.tenant, move.stream, move.key, move.old]
        row = next(iter(self._execute(self._keyspace(move.tenant), "head_move", params)))
        if row[0] or row[-1] == new_id:
            return
        raise ConflictError(
            f"key {move.key} of {move.stream} is held by {row[-1]}, not {move.old}, as this "
            "batch assumed: is another writer running this consumer?",
            code="KEY_HELD_ELSEWHERE",
        )

    def _seal(self, owner: str, ts: int, record: dict[str, Any]) -> None:
        data = zlib.compress(json.dumps(record, separators=(",", ":")).encode(), 6)
        txid = uuid.uuid4().hex
        pieces = [data[i : i + _INTENT_CHUNK] for i in range(0, len(data), _INTENT_CHUNK)]
        chunks = [
            (self.home, "commit_intents:put", [owner, n, txid, piece, ts])
            for n, piece in enumerate(pieces)
        ]
        seal = [ts, txid, ts, len(pieces), self._writer, owner]
        if len(data) <= _INTENT_ONE_BATCH:
            # the pieces and the seal are rows of one partition (the owner): one unlogged
            # batch writes them atomically, the commit point in a single round trip
            batch = BatchStatement(
                BatchType.UNLOGGED, consistency_level=ConsistencyLevel.LOCAL_QUORUM
            )
            for ks, name, params in chunks:
                batch.add(self._prepare(ks, name).bind(params))
            batch.add(self._prepare(self.home, "intent_seal").bind(seal))
            with _translated():
                self._session.execute(batch)
            return
        self._concurrently(chunks)
        # the commit point: from here on the batch is rolled forward, never redone
        self._execute(self.home, "intent_seal", seal)

    def claim(self, consumer: str) -> int:
        """Raise the epoch of `consumer` by one, by compare-and-set (a lightweight
        transaction on its `partition_commits` partition), and return it. A seal is itself
        a lightweight transaction on that partition conditioned on the epoch, so Paxos
        orders every seal before or after this claim: one sealed before it is finished by
        the `position()` that follows, one after it is refused. The position this process
        remembers of its own last commit under the name is forgotten first: after a claim,
        `position()` reads the store again."""
        self._committed.pop(consumer, None)
        head = next(iter(self._execute(self.home, "fence_head", [consumer])), None)
        seen = int(head[0]) if head is not None and head[0] is not None else None
        for _ in range(32):
            epoch = (seen or 0) + 1
            row = next(
                iter(self._execute(self.home, "fence_claim", [epoch, self._writer, consumer, seen]))
            )
            if row[0]:
                log.info("claimed %s under epoch %d", consumer, epoch)
                return epoch
            seen = int(row[1]) if len(row) > 1 and row[1] is not None else None
        raise Unavailable(
            f"could not claim {consumer}: its epoch kept moving", code="STORE_UNAVAILABLE"
        )

    def _seal_fenced(self, owner: str, ts: int, record: dict[str, Any], epoch: int) -> None:
        """The commit point of a fenced commit: a conditional batch on the owner's
        partition writes the record's chunks (clustered by `ts`), drops the chunks of
        earlier records and seals this one, only if `epoch` is still the owner's latest
        claim. Records over 4 MiB write their chunks first, then the conditional seal."""
        data = zlib.compress(json.dumps(record, separators=(",", ":")).encode(), 6)
        pieces = [data[i : i + _INTENT_CHUNK] for i in range(0, len(data), _INTENT_CHUNK)]
        chunks = [
            (self.home, "fence_chunk", [owner, ts, n, piece]) for n, piece in enumerate(pieces)
        ]
        batch = BatchStatement(
            BatchType.UNLOGGED,
            consistency_level=ConsistencyLevel.LOCAL_QUORUM,
            serial_consistency_level=self._serial,
        )
        if len(data) <= _INTENT_ONE_BATCH:
            for ks, name, params in chunks:
                batch.add(self._prepare(ks, name).bind(params))
        else:
            self._concurrently(chunks)
        batch.add(self._prepare(self.home, "fence_prune").bind([owner, ts]))
        batch.add(
            self._prepare(self.home, "fence_seal").bind(
                [ts, len(pieces), self._writer, owner, epoch]
            )
        )
        with _translated():
            row = next(iter(self._session.execute(batch)))
        if not row[0]:
            held = next((v for v in row[1:] if isinstance(v, int)), None)
            log.warning(
                "commit of %s refused: it holds epoch %d, the partition was claimed under %s",
                owner,
                epoch,
                held,
            )
            raise FencedOff(
                f"{owner} was claimed by another process (epoch {held}); this commit holds "
                f"epoch {epoch} and is not written",
                extra={"consumer": owner, "epoch": epoch, "held": held},
            )

    def _fenced_unfinished(self, owner: str, head: Row | None, pos: Row | None) -> int | None:
        """The timestamp of a fenced record sealed but not yet finished (its position not
        written), from the rows `fence_head` and `position` read."""
        if head is None or head[1] is None:
            return None
        sealed = int(head[1])
        self._clock.observe(sealed)
        done = int(pos[1]) if pos is not None and pos[1] is not None else 0
        return sealed if done < sealed else None

    def _unfinished(self, owner: str) -> bool:
        """Whether `owner` has a sealed commit record, plain or fenced, not yet applied."""
        plain, head, pos = self._concurrently(
            [
                (self.home, "intent_head", [owner]),
                (self.home, "fence_head", [owner]),
                (self.home, "position", [owner]),
            ]
        )
        if plain and plain[0][0] is not None:
            return True
        return (
            self._fenced_unfinished(owner, head[0] if head else None, pos[0] if pos else None)
            is not None
        )

    def _roll_forward_fenced(self, owner: str) -> None:
        head, pos = self._concurrently(
            [(self.home, "fence_head", [owner]), (self.home, "position", [owner])]
        )
        sealed = self._fenced_unfinished(owner, head[0] if head else None, pos[0] if pos else None)
        if sealed is None:
            return
        count = int(head[0][2])
        pieces = {
            int(r[0]): bytes(r[1])
            for r in self._execute(self.home, "fence_chunks", [owner, sealed])
        }
        if any(n not in pieces for n in range(count)):
            raise Unavailable(
                f"the sealed commit record of {owner} is incomplete", code="STORE_UNAVAILABLE"
            )
        record = json.loads(zlib.decompress(b"".join(pieces[n] for n in range(count))))
        log.info("rolling forward the sealed commit of %s (ts %d)", owner, sealed)
        self._apply(owner, record)

    def _apply(self, owner: str, record: dict[str, Any]) -> None:
        ts = int(record["ts"])
        self._write_all(record["mutations"], ts)
        if record.get("late"):  # rows that name others (the audit heads): once those are in
            self._write_all(record["late"], ts)
        # after the rows: the timer hours that point at them, with a timestamp taken now
        # (see Timers), and the position; neither needs the other first
        after = self._bind_all(record["post"], self._clock.next()) if record["post"] else []
        if record["position"] is not None:
            consumer, offset = record["position"]
            after += self._bind_all([[self.home, "positions", "put", [consumer, offset, ts]]], ts)
        write_batched(self._session, after)
        if not record.get("fenced"):
            self._execute(self.home, "intent_drop", [ts, owner])
        # a fenced record stays: it is finished once the position carries its timestamp

    def _sealed(self, owner: str) -> tuple[str, int, int] | None:
        row = next(iter(self._execute(self.home, "intent_head", [owner])), None)
        if row is None or row[0] is None:
            return None
        return str(row[0]), int(row[1]), int(row[2])

    def _roll_forward(self, owner: str) -> None:
        """Apply a sealed commit record again (its writes are idempotent) and drop it."""
        head = self._sealed(owner)
        if head is None:
            self._roll_forward_fenced(owner)
            self._dirty.discard(owner)
            return
        txid, ts, count = head
        pieces = {
            int(r[0]): bytes(r[2])
            for r in self._execute(self.home, "intent_chunks", [owner])
            if r[1] == txid and r[0] is not None and int(r[0]) < count
        }
        if len(pieces) != count:
            raise Unavailable(
                f"the commit record of {owner} is incomplete: a second writer under that "
                "consumer name, or a reset while it committed?",
                code="STORE_UNAVAILABLE",
            )
        record = json.loads(zlib.decompress(b"".join(pieces[n] for n in range(count))))
        self._clock.observe(ts)
        log.info("rolling forward the sealed commit of %s (ts %d)", owner, ts)
        self._apply(owner, record)
        self._dirty.discard(owner)

    def _finish_pending(self, owner: str) -> None:
        """Before a consumer's position is trusted: finish its sealed commit, if any, after
        giving a live writer `settle_seconds` to finish it itself."""
        if owner in self._inflight:
            return
        if not self._unfinished(owner):
            self._dirty.discard(owner)
            return
        if owner not in self._dirty:
            deadline = time.monotonic() + self.settle_seconds
            while time.monotonic() < deadline:
                time.sleep(0.05)
                if not self._unfinished(owner):
                    return
        self._roll_forward(owner)

    def recover(self) -> int:
        """Finish every sealed commit older than `settle_seconds` (left by a crash). Returns
        how many were finished."""
        cutoff = (time.time() - self.settle_seconds) * 1_000_000
        done = 0
        with self._lock:
            for owner, sealed, ts in list(self._iterate(self.home, "intent_owners", [])):
                if sealed is not None and ts is not None and int(ts) <= cutoff:
                    self._roll_forward(str(owner))
                    done += 1
        return done

    def position(self, consumer: str) -> int:
        """A consumer's stored position, with its unfinished commit record finished first.
        After a fenced commit this process made and finished, the position it wrote is the
        answer without a read: any other writer must claim the name first, which refuses
        this process's next commit (FencedOff), and this process's own claim forgets it."""
        known = self._committed.get(consumer)
        if known is not None and consumer not in self._inflight:
            self._clean.add(consumer)
            return known
        if consumer in self._inflight:
            rows = [tuple(r) for r in self._execute(self.home, "position", [consumer])]
        else:
            # the commit records and the position in one round trip; a sealed record is
            # finished first, and the position read again
            sealed, fence, rows = self._concurrently(
                [
                    (self.home, "intent_head", [consumer]),
                    (self.home, "fence_head", [consumer]),
                    (self.home, "position", [consumer]),
                ]
            )
            unfinished = self._fenced_unfinished(
                consumer, fence[0] if fence else None, rows[0] if rows else None
            )
            if (sealed and sealed[0][0] is not None) or unfinished is not None:
                self._finish_pending(consumer)
                rows = [tuple(r) for r in self._execute(self.home, "position", [consumer])]
            else:
                self._dirty.discard(consumer)
                self._clean.add(consumer)
        return self._position_of(rows[0] if rows else None)

    def _take_clean(self, owner: str) -> bool:
        """Whether `position(owner)` found no commit record since this process last
        committed under that name (a consumer's next commit then need not look again)."""
        if owner in self._clean:
            self._clean.discard(owner)
            return True
        return False

    def _position_of(self, row: Row | None) -> int:
        if row is None or row[0] is None:
            return 0
        if row[1] is not None:
            self._clock.observe(int(row[1]))
        return int(row[0])

    def claims(self, consumers: Sequence[str]) -> dict[str, Claim]:
        names = list(dict.fromkeys(consumers))
        if not names:
            return {}
        # one request for every name (the status asks for all of them at each call)
        rows = self._execute(self.home, "fence_claims", [names])
        return {
            str(owner): Claim(int(epoch), str(holder or ""))
            for owner, epoch, holder in rows
            if epoch is not None
        }

    def positions(self, consumers: Sequence[str]) -> dict[str, int]:
        """The positions rows as they are: a position is written after the rows of its
        commit, so it never runs ahead of what readers can see."""
        names = list(dict.fromkeys(consumers))
        results = self._concurrently([(self.home, "position", [c]) for c in names])
        return {
            c: int(rows[0][0]) if rows and rows[0][0] is not None else 0
            for c, rows in zip(names, results, strict=True)
        }

    # -- memories
