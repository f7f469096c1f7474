"""A device's local replica of a subject's memories, kept in SQLite and converged with the
server by replaying the stream's events.

- `pull()` replays from the last sequence number the replica holds, page by page; each
  page and the new position commit together, so an interrupted pull resumes with no gap
  and no duplicate (a gap raises SyncGap rather than being skipped).
- `write()` queues a key/value memory with the version of that key the device last saw.
  `push()` publishes the queue with fixed event ids, so a retry after a lost answer is
  deduplicated by the server. A write the server finds stale (someone changed the key
  meanwhile) comes back as a conflict carrying both versions, never a silent overwrite.
- `load_snapshot()` starts a replica from a server snapshot, then `pull()` tails on.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from mnemo.client import MnemoAPIError, MnemoClient, MnemoConnectionError
from mnemo.client._core import Call, publish
from mnemo.domain import replica
from mnemo.domain.acceptance import accept
from mnemo.domain.ids import new_event_id
from mnemo.domain.memory import Memory, MemoryStatus

__all__ = ["Conflict", "SyncClient", "SyncError", "SyncGap"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (k TEXT PRIMARY KEY, v TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS memories (memory_id TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS pending (n INTEGER PRIMARY KEY AUTOINCREMENT, event_id TEXT UNIQUE,
                                    body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS sent (event_id TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS conflicts (event_id TEXT PRIMARY KEY, body TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS settled (event_id TEXT PRIMARY KEY);
-- a queued write that expects the version an earlier write of this device would make
CREATE TABLE IF NOT EXISTS chained (event_id TEXT PRIMARY KEY, on_event_id TEXT NOT NULL);
"""

# the tenant a write is checked under before it is queued (the server puts its key's)
_CHECKED_AS = "device"

# what a write's outcome is when it made a new version of its key
_MADE_A_VERSION = frozenset({"registered", "superseded"})


class SyncError(Exception):
    """The server refused something for a reason other than being unreachable. `code` is
    machine-readable: the server's error code (with its HTTP `status` and `field`), or the
    replica's own (`SYNC_GAP`, `SNAPSHOT_CHECKSUM_MISMATCH`, status 0). `event_id` names the
    queued write a push could not send (None otherwise)."""

    def __init__(
        self,
        message: str,
        *,
        code: str,
        status: int = 0,
        field: str | None = None,
        event_id: str | None = None,
    ) -> None:
        super().__init__(message)
        self.code = code
        self.status = status
        self.field = field
        self.event_id = event_id

    @classmethod
    def answered(cls, message: str, exc: MnemoAPIError, event_id: str | None = None) -> SyncError:
        return cls(
            f"{message}: {exc}",
            code=exc.code,
            status=exc.status,
            field=exc.field,
            event_id=event_id,
        )


class SyncGap(SyncError):
    """The server skipped a sequence number: the replica refuses to go on."""

    def __init__(self, message: str) -> None:
        super().__init__(message, code="SYNC_GAP")


@dataclass(frozen=True, slots=True)
class Conflict:
    """A stale write: what this device proposed and what the server holds."""

    event_id: str
    key: str
    proposed: dict[str, Any]
    current: Memory | None
    detail: str


class SyncClient:
    """One device's replica of one subject stream."""

    def __init__(self, path: Path, client: MnemoClient, stream: str, device_id: str) -> None:
        """`client` is the SDK's client with the device's identity (its retry policy
        applies to every request the replica makes)."""
        self.client = client
        self.stream = stream
        self.device_id = device_id
        self._db = sqlite3.connect(path, isolation_level=None)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA)

    def close(self) -> None:
        self._db.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Cursor]:
        cur = self._db.cursor()
        cur.execute("BEGIN IMMEDIATE")
        try:
            yield cur
            cur.execute("COMMIT")
        except BaseException:
            cur.execute("ROLLBACK")
            raise

    # ---- local state ------------------------------------------------------------------

    @property
    def seq(self) -> int:
        row = self._db.execute("SELECT v FROM meta WHERE k = 'seq'").fetchone()
        return int(row[0]) if row else 0

    def _raw(self) -> dict[str, dict[str, Any]]:
        rows = self._db.execute("SELECT memory_id, body FROM memories")
        return {r[0]: orjson.loads(r[1]) for r in rows}

    def memories(self) -> dict[str, Memory]:
        return {mid: Memory.model_validate(body) for mid, body in self._raw().items()}

    def current(self, key: str) -> Memory | None:
        return self._current_in(self.memories(), key)

    @staticmethod
    def _current_in(memories: dict[str, Memory], key: str) -> Memory | None:
        live = [m for m in memories.values() if m.key == key and m.status is MemoryStatus.ACTIVE]
        return max(live, key=lambda m: m.version, default=None)

    def checksum(self) -> str:
        return replica.checksum(self._raw())

    def pending(self) -> int:
        return int(self._db.execute("SELECT COUNT(*) FROM pending").fetchone()[0])

    def conflicts(self) -> list[Conflict]:
        found = []
        memories = self.memories()
        for (body,) in self._db.execute("SELECT body FROM conflicts ORDER BY event_id"):
            data = json.loads(body)
            if data["current_memory_id"]:
                current = memories.get(data["current_memory_id"])
            else:  # known from the push's answer only: the key's version in the replica
                current = self._current_in(memories, data["key"])
            found.append(
                Conflict(data["event_id"], data["key"], data["proposed"], current, data["detail"])
            )
        return found

    # ---- writing offline ----------------------------------------------------------------

    def write(self, key: str, value: str, *, type_: str = "preference", content: str = "") -> str:
        """Queue a new value for a key, stamped with the version it will replace: the one this
        device last saw or, when the device already queued or sent a write for the key that
        it has not seen back yet, the version that write makes (offline writes chain).
        A write the gateway would refuse (a value too long, a bad stream name) raises
        InvalidInput with the gateway's code, and nothing is queued."""
        seen = self.current(key)
        expected, on = self._next_expected(key, seen.version if seen else 0)
        memory: dict[str, Any] = {
            "type": type_,
            "key": key,
            "value": value,
            "expected_version": expected,
        }
        if content:
            memory["content"] = content
        now = datetime.now(UTC)
        event_id = new_event_id(now)
        event = {
            "event_id": event_id,
            "type": "MemoryDeclared",
            "schema_version": 1,
            "stream": self.stream,
            "actor": {"kind": "device", "id": self.device_id},
            "payload": {"memory": memory},
        }
        # the gateway's own acceptance rule, before anything is queued: a write it would
        # refuse would otherwise stay at the head of the queue and hold back every later one
        accept(event, tenant=_CHECKED_AS, principal=None, now=now, trusted=False)
        with self._tx() as cur:
            cur.execute(
                "INSERT INTO pending (event_id, body) VALUES (?, ?)", (event_id, json.dumps(event))
            )
            if on is not None:
                cur.execute("INSERT INTO chained VALUES (?, ?)", (event_id, on))
        return event_id

    def _next_expected(self, key: str, seen: int) -> tuple[int, str | None]:
        """The version a new write for `key` replaces. A write of this device that expects
        version v makes v + 1 once registered; while the replica has not pulled it back (it
        still shows a version at or below v), the next write builds on it, not on what the
        replica shows. Sent writes are kept, and one the replica has passed no longer counts;
        nor does one that made no version (settled: refused, or a duplicate of a memory the
        key holds already). Also the write it builds on, if any."""
        expected, on = seen, None
        for event_id, body in self._db.execute(
            "SELECT event_id, body FROM pending UNION ALL SELECT event_id, body FROM sent"
            " WHERE event_id NOT IN (SELECT event_id FROM settled)"
        ):
            memory = json.loads(body)["payload"]["memory"]
            if memory.get("key") == key and int(memory.get("expected_version", 0)) >= expected:
                expected, on = int(memory["expected_version"]) + 1, event_id
        return expected, on

    def push(self) -> int:
        """Publish queued writes in order; stops at the first that cannot be sent. A write
        whose outcome the wait did not bring stays queued, and the push stops after it:
        the next push sends it again (the server answers a retry with the first outcome)
        before the writes that may build on it."""
        sent = 0
        for n, event_id in self._db.execute(
            "SELECT n, event_id FROM pending ORDER BY n"
        ).fetchall():
            # read again: an earlier write of this push may have re-based it
            (body,) = self._db.execute("SELECT body FROM pending WHERE n = ?", (n,)).fetchone()
            try:
                # waits for registration, so that a pull right after (sync()) finds what the
                # registrar made of the write: its version, or its conflict
                result = self.client.call(publish(json.loads(body), wait="registered"))
            except MnemoConnectionError:
                break
            except MnemoAPIError as exc:
                if exc.status >= 500 or exc.status == 429:  # busy or down: try again later
                    break
                raise SyncError.answered(f"the server refused {event_id}", exc, event_id) from exc
            with self._tx() as cur:
                cur.execute("INSERT OR REPLACE INTO sent VALUES (?, ?)", (event_id, body))
                if result.complete and not any(
                    o.outcome in _MADE_A_VERSION for o in result.outcomes
                ):
                    cur.execute("INSERT OR IGNORE INTO settled VALUES (?)", (event_id,))
                    self._rebase_after(cur, event_id)
                for o in result.outcomes:
                    if o.outcome == "rejected" and o.reason_code == "VERSION_CONFLICT":
                        # kept now: a snapshot loaded before the next pull folds the
                        # MemoryRejected in, and no pull would see it (the pull that does
                        # adds the current memory's id)
                        record = _conflict(event_id, body, None, o.detail or "")
                        cur.execute("INSERT OR IGNORE INTO conflicts VALUES (?, ?)", record)
                if result.complete:
                    cur.execute("DELETE FROM pending WHERE n = ?", (n,))
            sent += 1
            if not result.complete:
                break
        return sent

    def discard(self, event_id: str) -> bool:
        """Drop a queued write the server will never take (the `event_id` of the SyncError
        a push raised: a stream forgotten, a scope the key lacks), so the writes after it
        can go. The writes built on it expect one version less, as after a refusal.
        Returns whether it was queued."""
        with self._tx() as cur:
            removed = cur.execute("DELETE FROM pending WHERE event_id = ?", (event_id,)).rowcount
            if removed:
                self._rebase_after(cur, event_id)
                cur.execute("DELETE FROM chained WHERE event_id = ?", (event_id,))
        return bool(removed)

    def _rebase_after(self, cur: sqlite3.Cursor, event_id: str) -> None:
        """A write of this device made no version (refused, or a duplicate). The queued
        writes built on it, directly or through one another, expected a version it did not
        make: each now expects one less. Without this, the write after a refused one would
        expect the version another device's change made, and silently replace it; a write
        of the key based on what the replica showed is left as it is."""
        built_on = [event_id]
        while built_on:
            marks = ",".join("?" * len(built_on))
            rows = cur.execute(
                "SELECT p.n, p.event_id, p.body FROM chained c JOIN pending p"
                f" ON p.event_id = c.event_id WHERE c.on_event_id IN ({marks})",
                built_on,
            ).fetchall()
            built_on = []
            for n, queued_id, queued in rows:
                event = json.loads(queued)
                memory = event["payload"]["memory"]
                memory["expected_version"] = int(memory["expected_version"]) - 1
                cur.execute("UPDATE pending SET body = ? WHERE n = ?", (json.dumps(event), n))
                built_on.append(queued_id)

    # ---- catching up -----------------------------------------------------------------------

    def pull(self, page_size: int = 2_000) -> int:
        """Apply every event after the replica's sequence number. Returns how many."""
        applied = 0
        while True:
            page = Call(
                "GET",
                f"/v1/subjects/{self.stream}/events",
                _as_is,
                params={"from_seq": self.seq + 1, "limit": page_size},
            )
            try:
                events: list[dict[str, Any]] = self.client.call(page)["events"]
            except MnemoConnectionError:
                return applied
            except MnemoAPIError as exc:
                raise SyncError.answered("replay failed", exc) from exc
            if not events:
                return applied
            self._apply_page(events)
            applied += len(events)

    def _load(self, memory_ids: set[str]) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        ids = sorted(memory_ids)
        for start in range(0, len(ids), 500):
            chunk = ids[start : start + 500]
            marks = ",".join("?" * len(chunk))
            rows = self._db.execute(
                f"SELECT memory_id, body FROM memories WHERE memory_id IN ({marks})", chunk
            )
            found.update((r[0], orjson.loads(r[1])) for r in rows)
        return found

    def _apply_page(self, events: list[dict[str, Any]]) -> None:
        """Fold a page into the replica, touching only the memories the page names."""
        touched = {mid for e in events for mid in _named(e)}
        state = self._load(touched)
        expected = self.seq + 1
        conflicts: list[tuple[str, str]] = []
        refused: list[tuple[str]] = []
        changed: set[str] = set()
        sent = self._sent(
            [
                str(e["payload"].get("rejected_event_id"))
                for e in events
                if e["type"] == "MemoryRejected"
            ]
        )
        for event in events:
            if event.get("seq") != expected:
                raise SyncGap(f"expected sequence {expected}, got {event.get('seq')}")
            expected += 1
            replica.apply(state, event)
            p = event["payload"]
            if event["type"] == "MemoryRegistered":
                changed.add(p["memory"]["memory_id"])
            else:
                changed.update(_named(event))
            if event["type"] == "MemoryRejected" and p.get("rejected_event_id") in sent:
                refused.append((p["rejected_event_id"],))  # it made no version
            if (
                event["type"] == "MemoryRejected"
                and p.get("reason_code") == "VERSION_CONFLICT"
                and p.get("rejected_event_id") in sent
            ):
                conflicts.append(
                    _conflict(
                        p["rejected_event_id"],
                        sent[p["rejected_event_id"]],
                        p.get("current_memory_id"),
                        p.get("detail", ""),
                    )
                )
        with self._tx() as cur:
            cur.executemany(
                "INSERT OR REPLACE INTO memories VALUES (?, ?)",
                [(mid, orjson.dumps(state[mid])) for mid in sorted(changed) if mid in state],
            )
            cur.executemany("INSERT OR REPLACE INTO conflicts VALUES (?, ?)", conflicts)
            cur.executemany("INSERT OR IGNORE INTO settled VALUES (?)", refused)
            cur.execute(
                "INSERT INTO meta VALUES ('seq', ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v",
                (str(expected - 1),),
            )

    def _sent(self, event_ids: list[str]) -> dict[str, str]:
        if not event_ids:
            return {}
        marks = ",".join("?" * len(event_ids))
        rows = self._db.execute(
            f"SELECT event_id, body FROM sent WHERE event_id IN ({marks})", event_ids
        )
        return {r[0]: r[1] for r in rows}

    def load_snapshot(self) -> int:
        """Replace the replica with the server's snapshot; returns its sequence number."""
        try:
            body = self.client.call(Call("GET", f"/v1/subjects/{self.stream}/snapshot", _as_is))
        except MnemoConnectionError:
            raise
        except MnemoAPIError as exc:
            raise SyncError.answered("snapshot failed", exc) from exc
        memories = {m["memory_id"]: m for m in body["memories"]}
        if replica.checksum(memories) != body["checksum"]:
            raise SyncError(
                "the snapshot does not match its checksum", code="SNAPSHOT_CHECKSUM_MISMATCH"
            )
        with self._tx() as cur:
            cur.execute("DELETE FROM memories")
            cur.executemany(
                "INSERT INTO memories VALUES (?, ?)",
                [(mid, orjson.dumps(m)) for mid, m in memories.items()],
            )
            cur.execute(
                "INSERT INTO meta VALUES ('seq', ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v",
                (str(body["seq"]),),
            )
        return int(body["seq"])

    def sync(self) -> tuple[int, int]:
        """Push what is queued, then pull: (sent, applied)."""
        return self.push(), self.pull()


def _as_is(body: Any) -> Any:
    return body


def _conflict(
    event_id: str, sent_body: str, current_memory_id: str | None, detail: str
) -> tuple[str, str]:
    """A conflicts row for a sent write the server refused with VERSION_CONFLICT."""
    proposed = json.loads(sent_body)["payload"]["memory"]
    record = {
        "event_id": event_id,
        "key": proposed["key"],
        "proposed": proposed,
        "current_memory_id": current_memory_id,
        "detail": detail,
    }
    return event_id, json.dumps(record)


def _named(event: dict[str, Any]) -> list[str]:
    """The ids of the memories already in the replica that an event may change: its
    `memory_id`, or the `memory_ids` a relayed feedback lists (a verification published on
    another stream renews the memory here)."""
    p = event["payload"]
    if isinstance(p.get("memory_id"), str):
        return [p["memory_id"]]
    if event["type"] == "FeedbackRelayed" and isinstance(p.get("memory_ids"), list):
        return [str(m) for m in p["memory_ids"] if isinstance(m, str)]
    return []
