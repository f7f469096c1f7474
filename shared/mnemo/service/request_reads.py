"""The read models as one context assembly sees them: each answer read once.

An assembly asks the store the same things more than once: every hit of a history section
that belongs to an episode reads that episode's turns (twenty hits of one conversation read
the same turns twenty times), and the subjects' constraints are listed by the constraint
section and again by the check that none is dropped. `RequestReads` keeps what one request
has read, so a repeated question costs no round trip and no opening of sealed bodies; and
within the request every step sees the same answer.

A query's answer also answers the same query with a smaller limit (its first memories:
stores answer in memory id order, so the first n of a longer answer are the answer to n),
and, when it came back shorter than its limit (complete), the same query with any limit,
and the same query with a validity instant (`live_at`), by the filter every store applies
(a memory whose validity ends at or before that instant is left out). So a history
section's episode, read to rank its turns, also gives the turns around each hit.

Kept for one request only: nothing here outlives it, so nothing goes stale.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import replace

from mnemo.domain.memory import Memory
from mnemo.domain.projection import Outcome
from mnemo.ports import MemoryQuery, MemoryReads

__all__ = ["RequestReads"]


class RequestReads(MemoryReads):
    """A per-request memo over `inner` (thread-safe: an assembly's sections read side by
    side)."""

    def __init__(self, inner: MemoryReads) -> None:
        self.inner = inner
        self._lock = threading.Lock()
        self._memories: dict[tuple[str, str], Memory] = {}
        self._missing: set[tuple[str, str]] = set()
        # (tenant, query without its limit) -> (the limit asked, the answer)
        self._queries: dict[tuple[str, MemoryQuery], tuple[int, list[Memory]]] = {}
        self._histories: dict[tuple[str, str, str], list[Memory]] = {}
        self.store_reads = 0  # questions that reached `inner` (for tests and profiles)

    def _remember(self, tenant: str, memories: Sequence[Memory]) -> None:
        for m in memories:
            self._memories[(tenant, m.memory_id)] = m

    def get(self, tenant: str, memory_id: str) -> Memory | None:
        found = self.get_many(tenant, [memory_id])
        return found[0] if found else None

    def get_many(self, tenant: str, memory_ids: Sequence[str]) -> list[Memory]:
        ids = list(dict.fromkeys(memory_ids))
        with self._lock:
            wanted = [
                i
                for i in ids
                if (tenant, i) not in self._memories and (tenant, i) not in self._missing
            ]
        if wanted:
            fetched = self.inner.get_many(tenant, wanted)
            with self._lock:
                self.store_reads += 1
                self._remember(tenant, fetched)
                got = {m.memory_id for m in fetched}
                self._missing.update((tenant, i) for i in wanted if i not in got)
        with self._lock:
            return [m for i in ids if (m := self._memories.get((tenant, i))) is not None]

    def query(self, tenant: str, query: MemoryQuery) -> list[Memory]:
        return self.query_each(tenant, [query])[0]

    def query_each(self, tenant: str, queries: Sequence[MemoryQuery]) -> list[list[Memory]]:
        """Each query's answer from this request's earlier answers when they hold it, the
        others asked of `inner` together."""
        answers: list[list[Memory] | None] = [self._held(tenant, q) for q in queries]
        asked = [i for i, found in enumerate(answers) if found is None]
        if asked:
            fetched = self.inner.query_each(tenant, [queries[i] for i in asked])
            with self._lock:
                self.store_reads += len(asked)
                for i, answer in zip(asked, fetched, strict=True):
                    self._remember(tenant, answer)
                    key = (tenant, replace(queries[i], limit=0))
                    held = self._queries.get(key)
                    if held is None or held[0] < queries[i].limit:
                        self._queries[key] = (queries[i].limit, answer)
                    answers[i] = list(answer)
        return [found if found is not None else [] for found in answers]

    def _held(self, tenant: str, query: MemoryQuery) -> list[Memory] | None:
        """The answer to `query` from this request's earlier answers, None when they do not
        hold it."""
        if query.limit <= 0:
            return []
        key = (tenant, replace(query, limit=0))
        with self._lock:
            held = self._queries.get(key)
            wider = (
                self._queries.get((tenant, replace(query, limit=0, live_at=None)))
                if query.live_at is not None
                else None
            )
        if held is not None:
            limit, answer = held
            if query.limit <= limit or len(answer) < limit:
                return answer[: query.limit]
        at = query.live_at
        if at is not None and wider is not None and len(wider[1]) < wider[0]:
            return [m for m in wider[1] if m.valid_until is None or at < m.valid_until][
                : query.limit
            ]
        return None

    def history(self, tenant: str, stream: str, key: str) -> list[Memory]:
        at = (tenant, stream, key)
        with self._lock:
            held = self._histories.get(at)
        if held is None:
            held = self.inner.history(tenant, stream, key)
            with self._lock:
                self.store_reads += 1
                self._histories[at] = held
        return list(held)

    def outcome(self, tenant: str, event_id: str) -> list[Outcome]:
        return self.inner.outcome(tenant, event_id)
