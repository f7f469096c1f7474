"""Contract of the TemplateReads and UsageReads ports of the read models: registered context
templates by version, assembled contexts newest first, and each memory's timeline oldest
first, tenant by tenant. Every adapter runs these cases."""

from __future__ import annotations

import pytest
from pydantic import ValidationError
from tests.contract.store_support import T0, StoreContract, mem

from mnemo.domain.context import MAX_TEMPLATE_VERSION, ContextTemplate
from mnemo.domain.projection import (
    ContextRecord,
    PutContextRecord,
    PutTemplate,
    PutTimeline,
    TimelineEntry,
)
from mnemo.ports import MemoryStore


def template(name: str, version: int, budget: int = 100) -> ContextTemplate:
    return ContextTemplate.model_validate(
        {
            "name": name,
            "version": version,
            "sections": [{"name": "facts", "priority": 1, "budget": budget}],
        }
    )


class TestTemplatesAndUsage(StoreContract):
    def test_a_template_is_read_by_version_or_as_its_latest(self, store: MemoryStore) -> None:
        brief = [template("brief", 1), template("brief", 2, budget=200)]
        other = template("answer", 1)
        with store.transaction() as tx:
            tx.apply([PutTemplate("acme", t) for t in (brief[1], other, brief[0])])
            tx.apply([PutTemplate("globex", template("brief", 1, budget=50))])
        assert store.template("acme", "brief", 1) == brief[0]
        assert store.template("acme", "brief") == brief[1]
        assert store.template("acme", "brief", 3) is None
        assert store.template("acme", "missing") is None
        assert store.templates("acme") == [other, *brief]
        assert store.template("other", "brief") is None
        assert store.templates("other") == []

    def test_the_highest_version_a_template_may_have_is_kept_and_read(
        self, store: MemoryStore
    ) -> None:
        # every adapter stores a version in 32 bits; the model refuses one above that, so
        # an API caller gets a 4xx rather than a store that cannot bind the value
        highest = template("brief", MAX_TEMPLATE_VERSION)
        with store.transaction() as tx:
            tx.apply([PutTemplate("acme", template("brief", 1)), PutTemplate("acme", highest)])
        assert store.template("acme", "brief", MAX_TEMPLATE_VERSION) == highest
        assert store.template("acme", "brief") == highest
        with pytest.raises(ValidationError):
            template("brief", MAX_TEMPLATE_VERSION + 1)

    def test_context_records_page_newest_first_and_timelines_read_oldest_first(
        self, store: MemoryStore
    ) -> None:
        m = mem(1)
        records = [
            ContextRecord("acme", f"r{n}", m.stream, f"e{n}", "brief@1", (m.memory_id,), (), n)
            for n in (1, 2, 3)
        ]
        entries = [
            TimelineEntry(
                "acme", m.memory_id, n, f"e{n}", "MemoryRegistered", "registered", T0.isoformat()
            )
            for n in (7, 3, 5)
        ]
        with store.transaction() as tx:
            tx.apply([PutContextRecord(r) for r in records])
            tx.apply([PutTimeline(e) for e in entries])
            elsewhere = ContextRecord("globex", "r9", m.stream, "e9", "brief@1", (), (), 1)
            tx.apply([PutContextRecord(elsewhere)])
        assert store.context_record("acme", "r2") == records[1]
        assert store.context_record("globex", "r2") is None
        assert store.context_records("acme", 10) == records[::-1]
        assert store.context_records("acme", 1) == [records[2]]
        assert store.context_records("acme", 10, before="r3") == [records[1], records[0]]
        assert store.context_records("other", 10) == []
        assert [e.offset for e in store.timeline("acme", m.memory_id)] == [3, 5, 7]
        assert [e.offset for e in store.timeline("acme", m.memory_id, limit=2)] == [3, 5]
        assert store.timeline("globex", m.memory_id) == []
