"""Contract of the documents' entity read model: DocumentReads and the projection writes
that fill it (PutDocument, DropDocuments, PurgeTenant); every adapter runs these cases.

A store may serve a filter coarsely (the query engine checks each row exactly), so the
cases check that every row a filter must find is returned, that rows of other fields,
tenants, streams, currencies and ranges are not, and that a text row read by its value
carries that value. A text row read from a field's whole partition (`ne`, `contains`)
carries its value, or None when the store keeps only a keyed hash of it."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date

from tests.contract.store_support import StoreContract

from mnemo.domain.document_index import DocumentRecord, EntityFilter, EntityRow, entity_rows
from mnemo.domain.documents import Entity
from mnemo.domain.projection import DropDocuments, PurgeTenant, PutDocument, Write
from mnemo.ports import DocumentReads, MemoryStore

DAY_2023_07_01 = float(date(2023, 7, 1).toordinal())
DAY_2023_09_30 = float(date(2023, 9, 30).toordinal())


def reads(store: MemoryStore) -> DocumentReads:
    """The store as the documents' read port: every adapter implements it."""
    assert isinstance(store, DocumentReads)
    return store


def record(document_id: str, *, tenant: str = "acme", stream: str = "user:U1") -> DocumentRecord:
    return DocumentRecord(
        tenant=tenant,
        document_id=document_id,
        stream=stream,
        event_id=f"event-{document_id}",
        sha256=f"sha-{document_id}",
        media_type="application/pdf",
        pages=2,
        sections=2,
        language="en",
        ingested_at="2026-11-30T00:00:00+00:00",
    )


def contract(
    document_id: str,
    party: str,
    penalty: float,
    amount: float,
    *,
    currency: str = "CNY",
    signed: str = "2023-08-15",
    tenant: str = "acme",
    stream: str = "user:U1",
) -> PutDocument:
    """A two-section contract: section 0 names the party and the signing date, section 1
    the amount, the penalty rate and the quarter it covers."""
    first = (
        Entity("party_a", "text", party, party, 9, 9 + len(party)),
        Entity("signed_at", "date", signed, signed, 40, 50),
    )
    second = (
        Entity("amount", "money", {"amount": amount, "currency": currency}, "x", 0, 5),
        Entity("penalty_rate", "percent", penalty, "x", 10, 12),
        Entity("period", "period", {"start": "2023-07-01", "end": "2023-09-30"}, "x", 20, 27),
    )
    rows = [
        *entity_rows(tenant, document_id, stream, f"{document_id}-m0", 0, first),
        *entity_rows(tenant, document_id, stream, f"{document_id}-m1", 1, second),
    ]
    return PutDocument(record(document_id, tenant=tenant, stream=stream), tuple(rows))


def places(rows: Sequence[EntityRow]) -> set[tuple[str, int, int]]:
    return {(r.document_id, r.section, r.ordinal) for r in rows}


class TestDocumentStore(StoreContract):
    def apply(self, store: MemoryStore, *writes: Write) -> None:
        with store.transaction() as tx:
            tx.apply(list(writes))

    def corpus(self, store: MemoryStore) -> None:
        self.apply(
            store,
            contract("d1", "xx科技", 0.06, 500_000.0),
            contract("d2", "acme", 0.04, 1_200_000.0, currency="USD", stream="user:U2"),
            contract("d3", "xx科技", 0.05, 200_000.0, signed="2024-01-02"),
            contract("d9", "xx科技", 0.09, 900_000.0, tenant="globex"),
        )

    def test_documents_read_back_by_id_and_by_stream_in_their_tenant(
        self, store: MemoryStore
    ) -> None:
        self.corpus(store)
        assert reads(store).document("acme", "d1") == record("d1")
        assert reads(store).document("acme", "d9") is None
        assert reads(store).document("globex", "d9") == record("d9", tenant="globex")
        listed = reads(store).stream_documents("acme", "user:U1")
        assert [d.document_id for d in listed] == ["d1", "d3"]
        assert reads(store).stream_documents("acme", "user:U9") == []

    def test_text_equality_reads_the_rows_of_that_value_with_the_value(
        self, store: MemoryStore
    ) -> None:
        self.corpus(store)
        found = reads(store).entity_rows(
            "acme", EntityFilter(("party_a",), ("xx科技",), kind="text")
        )
        assert places(found) == {("d1", 0, 0), ("d3", 0, 0)}
        assert {r.key for r in found} == {"xx科技"}
        assert all(r.memory_id == f"{r.document_id}-m0" and r.document_level for r in found)
        both = reads(store).entity_rows(
            "acme", EntityFilter(("party_a", "party_b"), ("acme", "xx科技"), kind="text")
        )
        assert places(both) == {("d1", 0, 0), ("d2", 0, 0), ("d3", 0, 0)}
        assert {r.document_id: r.key for r in both}["d2"] == "acme"
        nobody = EntityFilter(("party_a",), ("nobody",), kind="text")
        assert reads(store).entity_rows("acme", nobody) == []

    def test_ne_and_contains_read_the_fields_rows(self, store: MemoryStore) -> None:
        self.corpus(store)
        found = reads(store).entity_rows("acme", EntityFilter(("party_a",), kind="text"))
        assert places(found) == {("d1", 0, 0), ("d2", 0, 0), ("d3", 0, 0)}
        assert all(r.field == "party_a" for r in found)
        assert all(r.key in (None, "xx科技" if r.document_id != "d2" else "acme") for r in found)
        assert all((r.start, r.end) == (9, 9 + len("xx科技" if r.document_id != "d2" else "acme"))
                   for r in found)  # fmt: skip

    def test_comparisons_read_a_range_of_one_field(self, store: MemoryStore) -> None:
        self.corpus(store)
        above = reads(store).entity_rows(
            "acme", EntityFilter(("penalty_rate",), None, 0.05, kind="percent")
        )
        assert {"d1", "d3"} <= {r.document_id for r in above}
        assert "d2" not in {r.document_id for r in above}
        assert all(r.field == "penalty_rate" and r.low is not None for r in above)
        assert {r.low for r in above if r.document_id == "d1"} == {0.06}
        below = reads(store).entity_rows(
            "acme", EntityFilter(("penalty_rate",), None, None, 0.045, kind="percent")
        )
        assert {r.document_id for r in below} == {"d2"}
        signed_q3 = reads(store).entity_rows(
            "acme",
            EntityFilter(("signed_at",), None, DAY_2023_07_01, DAY_2023_09_30, kind="date"),
        )
        assert {r.document_id for r in signed_q3} == {"d1", "d2"}

    def test_amounts_compare_within_their_currency(self, store: MemoryStore) -> None:
        self.corpus(store)
        cny = reads(store).entity_rows(
            "acme", EntityFilter(("amount",), ("CNY",), 400_000.0, kind="money")
        )
        assert {r.document_id for r in cny} == {"d1"}
        assert [(r.key, r.low, r.high) for r in cny] == [("CNY", 500_000.0, 500_000.0)]
        usd = reads(store).entity_rows(
            "acme", EntityFilter(("amount",), ("USD",), 400_000.0, kind="money")
        )
        assert {r.document_id for r in usd} == {"d2"}
        every = reads(store).entity_rows(
            "acme", EntityFilter(("amount",), ("CNY", "USD"), kind="money")
        )
        assert {r.document_id for r in every} == {"d1", "d2", "d3"}

    def test_periods_filter_on_their_last_day_too(self, store: MemoryStore) -> None:
        self.corpus(store)
        within = EntityFilter(
            ("period",), None, DAY_2023_07_01, DAY_2023_09_30, DAY_2023_09_30, kind="period"
        )
        found = reads(store).entity_rows("acme", within)
        assert {r.document_id for r in found} == {"d1", "d2", "d3"}
        assert all((r.low, r.high) == (DAY_2023_07_01, DAY_2023_09_30) for r in found)
        shorter = EntityFilter(
            ("period",), None, DAY_2023_07_01, DAY_2023_09_30, DAY_2023_09_30 - 1, kind="period"
        )
        assert reads(store).entity_rows("acme", shorter) == []

    def test_subjects_narrow_the_rows_to_their_streams(self, store: MemoryStore) -> None:
        self.corpus(store)
        wanted = EntityFilter(("penalty_rate",), None, 0.0, streams=("user:U2",), kind="percent")
        found = reads(store).entity_rows("acme", wanted)
        assert {(r.document_id, r.stream) for r in found} == {("d2", "user:U2")}

    def test_a_document_written_again_replaces_its_rows_in_every_index(
        self, store: MemoryStore
    ) -> None:
        self.corpus(store)
        again = contract("d1", "globex", 0.01, 10.0)
        self.apply(store, PutDocument(again.record, again.rows[:1]))
        old = EntityFilter(("party_a",), ("xx科技",), kind="text")
        assert {r.document_id for r in reads(store).entity_rows("acme", old)} == {"d3"}
        new = EntityFilter(("party_a",), ("globex",), kind="text")
        assert places(reads(store).entity_rows("acme", new)) == {("d1", 0, 0)}
        rates = EntityFilter(("penalty_rate",), None, 0.0, kind="percent")
        assert {r.document_id for r in reads(store).entity_rows("acme", rates)} == {"d2", "d3"}
        assert store.counts()["entities"] == 1 + 5 + 5 + 5

    def test_forgetting_a_section_drops_its_rows_only(self, store: MemoryStore) -> None:
        self.corpus(store)
        self.apply(store, DropDocuments("acme", "user:U1", "d1-m1"))
        rates = EntityFilter(("penalty_rate",), None, 0.0, kind="percent")
        assert {r.document_id for r in reads(store).entity_rows("acme", rates)} == {"d2", "d3"}
        party = EntityFilter(("party_a",), ("xx科技",), kind="text")
        assert {r.document_id for r in reads(store).entity_rows("acme", party)} == {"d1", "d3"}
        assert reads(store).document("acme", "d1") is not None
        # a section of another stream is not touched by this stream's forget
        self.apply(store, DropDocuments("acme", "user:U1", "d2-m1"))
        assert {r.document_id for r in reads(store).entity_rows("acme", rates)} == {"d2", "d3"}

    def test_forgetting_a_stream_drops_its_documents_and_rows(self, store: MemoryStore) -> None:
        self.corpus(store)
        self.apply(store, DropDocuments("acme", "user:U1"))
        assert reads(store).stream_documents("acme", "user:U1") == []
        assert reads(store).document("acme", "d1") is None
        for wanted in (
            EntityFilter(("party_a",), kind="text"),
            EntityFilter(("penalty_rate",), None, 0.0, kind="percent"),
            EntityFilter(("amount",), ("CNY", "USD"), kind="money"),
            EntityFilter(("signed_at",), None, 0.0, kind="date"),
        ):
            found = reads(store).entity_rows("acme", wanted)
            assert {r.document_id for r in found} == {"d2"}, wanted
        assert store.counts()["documents"] == 2  # d2 and globex's d9
        assert store.counts()["entities"] == 10

    def test_a_tenant_purge_drops_its_documents_and_no_others(self, store: MemoryStore) -> None:
        self.corpus(store)
        self.apply(store, PurgeTenant("acme"))
        assert reads(store).document("acme", "d2") is None
        assert reads(store).stream_documents("acme", "user:U2") == []
        for wanted in (
            EntityFilter(("party_a",), ("xx科技",), kind="text"),
            EntityFilter(("party_a",), kind="text"),
            EntityFilter(("penalty_rate",), None, 0.0, kind="percent"),
        ):
            assert reads(store).entity_rows("acme", wanted) == []
            assert len(reads(store).entity_rows("globex", wanted)) == 1
        assert store.counts()["documents"] == 1
        assert store.counts()["entities"] == 5

    def test_a_batch_sees_its_own_order_of_writes(self, store: MemoryStore) -> None:
        self.corpus(store)
        # written and forgotten in one batch: nothing stays
        self.apply(store, contract("d4", "initech", 0.02, 1.0), DropDocuments("acme", "user:U1"))
        assert reads(store).stream_documents("acme", "user:U1") == []
        # purged, then written in the same batch: the new document stays, alone
        self.apply(store, PurgeTenant("acme"), contract("d5", "initech", 0.02, 1.0))
        assert [d.document_id for d in reads(store).stream_documents("acme", "user:U1")] == ["d5"]
        party = EntityFilter(("party_a",), kind="text")
        assert {r.document_id for r in reads(store).entity_rows("acme", party)} == {"d5"}
        assert store.counts()["entities"] == 5 + 5

    def test_the_checksum_covers_the_rows_and_a_rebuild_gives_it_again(
        self, store: MemoryStore
    ) -> None:
        empty = store.checksum()
        self.corpus(store)
        full = store.checksum()
        assert full != empty
        self.apply(store, DropDocuments("acme", "user:U1", "d1-m1"))
        assert store.checksum() not in (full, empty)
        store.reset()
        assert store.checksum() == empty
        self.corpus(store)
        assert store.checksum() == full
