"""Indexing: which memories to embed into the vector index and which to remove.

The plan is pure; the runner embeds in batches and writes the vectors. Within one batch
only the last word on a memory counts (registered then expired: removed).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from mnemo.domain.events import (
    Envelope,
    ForgetRequested,
    MemoryExpired,
    MemoryForgotten,
    MemoryRegistered,
    MemorySuperseded,
    decode_payload,
)
from mnemo.domain.memory import Memory

__all__ = ["CONSUMER", "HANDLED", "IndexPlan", "plan"]

CONSUMER = "indexer"
# what removes a memory's vector
_ENDED = (MemorySuperseded.TYPE, MemoryExpired.TYPE, MemoryForgotten.TYPE)
# the event types the plan reads (handlers/registry.py lists them)
HANDLED = frozenset({MemoryRegistered.TYPE, ForgetRequested.TYPE, *_ENDED})


@dataclass
class IndexPlan:
    upserts: dict[str, Memory] = field(default_factory=dict)
    deletes: dict[str, str] = field(default_factory=dict)  # memory id -> tenant
    purges: set[str] = field(default_factory=set)  # tenants forgotten: every vector goes first

    def __len__(self) -> int:
        return len(self.upserts) + len(self.deletes) + len(self.purges)


def plan(events: Sequence[Envelope]) -> IndexPlan:
    result = IndexPlan()
    for event in events:
        if event.type == MemoryRegistered.TYPE:
            registered = decode_payload(event)
            assert isinstance(registered, MemoryRegistered)
            memory = registered.memory
            result.deletes.pop(memory.memory_id, None)
            result.upserts[memory.memory_id] = memory
        elif event.type == ForgetRequested.TYPE and event.payload.get("tenant") is True:
            result.purges.add(event.tenant)
            for memory_id, memory in list(result.upserts.items()):
                if memory.tenant == event.tenant:
                    del result.upserts[memory_id]
            for memory_id, tenant in list(result.deletes.items()):
                if tenant == event.tenant:
                    del result.deletes[memory_id]
        elif event.type in _ENDED:
            memory_id = str(event.payload["memory_id"])
            result.upserts.pop(memory_id, None)
            result.deletes[memory_id] = event.tenant
    return result
