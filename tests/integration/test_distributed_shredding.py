"""Crypto-shredding in the distributed mode: Kafka for the log, Cassandra for the read
models, OpenBao for the keys. Markers published through the gateway's use case are read
back in plaintext, yet no raw Kafka segment of the topic and no Cassandra file (commit
log, SSTables) holds them, before or after the user is forgotten; a control value that
is not sensitive is found in both, so the scan does see the bytes the services wrote."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from tests.distributed_support import (
    Pump,
    distributed_settings,
    jmx_missing,
    nodetool,
    running_distributed,
)
from tests.shred_support import (
    Words,
    feedback_events,
    plant_markers,
    refuse_zones,
    scan,
    word_events,
)
from tests.support import missing, qdrant_server_url
from tests.vault_support import vault_settings

from mnemo.domain.errors import InvalidInput, NotFound
from mnemo.domain.pii import REDACTED
from mnemo.service.app import RequestContext
from mnemo.service.insights import Insights
from mnemo.settings import MnemoSettings

CTX = RequestContext("acme", "tester")
OTHER = RequestContext("globex", "tester")
# the read models a tenant purge empties (the event archive, templates and audit stay)
READ_MODELS = (
    "memories", "memories_by_stream", "memory_keys", "memory_hashes", "memory_tags",
    "outcomes", "outcome_events", "timers", "timers_by_due", "context_records",
    "memory_usage", "decay_weights", "timeline",
    "documents", "documents_by_stream", "document_entities", "document_sections",
    "entities_by_key", "entities_by_field",
)  # fmt: skip
# the documents' entity read model (a document's id is in each of its rows, in clear)
DOCUMENT_TABLES = READ_MODELS[-6:]


# the tables whose rows carry what a memory says (their SSTables are scanned after compaction)
BODIES = (
    "memories", "context_records", "timeline", "commit_intents", "events_by_stream",
    "events_by_id",
)  # fmt: skip


def _run_dir() -> Path:
    default = Path(__file__).resolve().parents[2] / "var" / "run"
    return Path(os.environ.get("MNEMO_RUN_DIR", default))


def _shredding_setup(tmp_path: Path, **overrides: object) -> tuple[MnemoSettings, Path, Path]:
    """Settings on the real OpenBao (a key prefix of the test's own), and the Kafka and
    Cassandra data directories to scan."""
    url, token = vault_settings()
    if token is None:
        missing("OpenBao", "no MNEMO_VAULT_TOKEN, no var/run/services.env")
    kafka_data = _run_dir() / "kafka" / "data"
    cassandra_data = _run_dir() / "cassandra" / "data"
    if not (kafka_data.is_dir() and cassandra_data.is_dir()):
        missing("the services' data directories", f"not under {_run_dir()} (MNEMO_RUN_DIR)")
    settings = distributed_settings(
        tmp_path / "data",
        partitions=1,
        vault_addr=url,
        vault_token=token,
        vault_key_prefix=f"dist{uuid.uuid4().hex[:10]}",
        **overrides,
    )
    return settings, kafka_data, cassandra_data


def _qdrant_setup() -> tuple[dict[str, object], Path]:
    """Settings that put the vectors on the shared Qdrant server, in collections of the
    test's own, and that server's storage directory (infra/services.py starts it with
    QDRANT__STORAGE__STORAGE_PATH=<run>/qdrant/storage)."""
    url = qdrant_server_url()
    storage = _run_dir() / "qdrant" / "storage"
    if not (storage / "collections").is_dir():
        missing("the Qdrant server's storage", f"not under {_run_dir()} (MNEMO_RUN_DIR)")
    return {"qdrant_url": url, "qdrant_collection": f"shred{uuid.uuid4().hex[:10]}"}, storage


# what a point's payload holds: ids, routing and filter fields, tags as keyed hashes; never
# a person's words (the index is not sealed: a text field here would outlive a forget in
# the server's segments and write-ahead log until they are compacted)
PAYLOAD_FIELDS = {"tenant", "stream", "type", "scope", "tags", "memory_id"}


def event(event_type: str, stream: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": event_type,
        "schema_version": 2 if event_type == "ObservationRecorded" else 1,
        "stream": stream,
        "payload": payload,
    }


def test_distributed_shredding_leaves_no_plaintext_in_kafka_or_cassandra(
    tmp_path: Path,
) -> None:
    """...nor in the Qdrant server's storage, nor in any table of the keyspace (tombstones
    included) once flushed and compacted: the user's words in every free-text field
    (tests.shred_support.word_events: content, key, tags, provenance, the actor,
    correlation and causation ids, the trace state, a guard's rule id and pattern, a
    language, time zones, reasons and request ids), and a party's name in an ingested
    document (the entity tables keep it as a keyed hash)."""
    qdrant, qdrant_storage = _qdrant_setup()
    settings, kafka_data, cassandra_data = _shredding_setup(tmp_path, **qdrant)
    m = plant_markers()
    alice, bob = Words.fresh(), Words.fresh()
    control = f"ctrl{uuid.uuid4().hex}"  # a team stream's name, and its memory's content
    party = f"Shred{uuid.uuid4().hex[:12]}"  # a party's name in alice's document
    parties = [party, party.lower()]  # as written, and as the entity's normalised value
    asked = {"where": [{"field": "party_a", "op": "eq", "value": party}]}
    with running_distributed(settings) as platform, _collections_dropped(platform):
        session = platform.store.session  # type: ignore[attr-defined]
        ks = settings.cassandra_keyspace
        # SSTables are LZ4-compressed by default, which can cut a value into pieces a raw
        # scan misses: every table of this keyspace stores its rows uncompressed
        names = session.execute(
            "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", (ks,)
        )
        for (table,) in list(names):
            session.execute(
                f"ALTER TABLE {ks}.{table} WITH compression = {{'enabled': 'false'}}", timeout=120
            )
        app = platform.app
        app.publish(
            CTX,
            [
                event(
                    "ObservationRecorded", "user:alice", {"text": f"remember my phone is {m.phone}"}
                ),
                event(
                    "MemoryDeclared",
                    "user:alice",
                    {
                        "memory": {
                            "type": "fact",
                            "content": f"ID {m.id_number}, card {m.card}, mail {m.email}, "
                            f"password: {m.password}",
                        }
                    },
                ),
                # a team's stream: its words are sealed under the tenant's key, its name is not
                event(
                    "MemoryDeclared",
                    f"team:{control}",
                    {"memory": {"type": "fact", "content": control}},
                ),
            ],
        )
        # a document of alice's: its party's name is her word, which the entity tables keep
        # only as a keyed hash (the blob, the event and the section are sealed)
        documents = app.documents
        assert documents is not None
        contract = f"Party A: {party} Ltd.\n\nClause 8.2 A penalty of 6% applies.\n"
        documents.ingest(CTX, "user:alice", "deal.txt", contract.encode())
        declared_ids: dict[str, str] = {}
        for user, w in (("user:alice", alice), ("user:bob", bob)):
            as_user = RequestContext("acme", w.principal)
            published = app.publish(as_user, word_events(user, w)).accepted
            Pump(platform).drain()
            [memory_id] = [
                o.memory_id for o in platform.store.outcome("acme", published[1].event_id)
            ]
            assert memory_id is not None

            def publish(event: dict[str, Any], who: RequestContext = as_user) -> tuple[str, str]:
                with pytest.raises(InvalidInput) as refused:
                    app.publish(who, [event])
                return refused.value.code, str(refused.value)

            refuse_zones(publish, user, w)
            app.publish(as_user, feedback_events(user, w, memory_id))
            declared_ids[user] = memory_id
        Pump(platform).drain()
        life = str(_insights(platform).life(CTX, declared_ids["user:alice"]))
        assert alice.correction in life  # opened from the log
        assert alice.contradiction in life
        memories = app.list_memories(CTX, "user:alice")
        assert {(x.key, x.value) for x in memories if x.key} == {
            ("phone", m.phone),
            (alice.key, alice.value),
        }
        assert any(m.id_number in x.content and m.email in x.content for x in memories)
        assert documents.query(CTX, asked)["total"] == 1

        segments = sorted(kafka_data.glob(f"{settings.kafka_topic}*"))
        assert segments, "no Kafka segment for the topic"
        assert scan([control], segments) != []  # the segments hold what was produced (a name)
        assert scan([control], [cassandra_data]) != []  # and Cassandra's files what it stored
        assert scan(m.all(), [*segments, cassandra_data, tmp_path / "data"]) == []
        # no user's words at all reach the log: Kafka's segments hold none of them
        assert scan(alice.all() + bob.all(), segments) == []
        # the log never holds the party's name (the event, the blob and the section are
        # sealed); the section's memory holds it in clear in the memories read model, like
        # every memory's content, until the forget purges it (the SSTable scan below)
        assert scan(parties, segments) == []
        collections = sorted(
            (qdrant_storage / "collections").glob(f"{qdrant['qdrant_collection']}_*")
        )
        assert collections, "no Qdrant collection of the test's"
        # the points' payloads carry no word of anyone's: the fields are known, the tags hashed
        client = platform.index.inner._client  # type: ignore[attr-defined]
        points, _ = client.scroll(
            f"{qdrant['qdrant_collection']}_acme", limit=100, with_payload=True
        )
        assert len(points) >= 4
        assert all(set(p.payload) == PAYLOAD_FIELDS for p in points)
        assert not [w for w in alice.all() + bob.all() if w in str([p.payload for p in points])]

        app.publish(CTX, [event("ForgetRequested", "user:alice", {"reason": "asked"})])
        Pump(platform).drain()
        assert app.list_memories(CTX, "user:alice") == []
        assert documents.query(CTX, asked)["total"] == 0
        for before in memories:
            after = app.get(CTX, before.memory_id)
            assert after.status.value == "forgotten"
            assert (after.content, after.value, after.key, after.tags) == ("", None, None, ())
        replayed = app.replay(CTX, "user:alice", 1, 100)
        texts = [e.envelope.payload.get("text") for e in replayed if e.envelope.payload.get("text")]
        assert len(texts) >= 3
        assert set(texts) == {REDACTED}  # sealed whole, under a destroyed key
        shown = str([e.envelope.model_dump() for e in replayed])
        assert [w for w in alice.all() if w in shown] == []
        assert bob.content in str(app.list_memories(CTX, "user:bob"))
        assert scan(m.all() + alice.all(), [*segments, tmp_path / "data"]) == []
        life = str(_insights(platform).life(CTX, declared_ids["user:alice"]))
        assert not [w for w in alice.all() if w in life]
        assert bob.correction in str(_insights(platform).life(CTX, declared_ids["user:bob"]))
        # the Qdrant server's files (segments, payload storage, write-ahead log) hold none of
        # alice's words, nor anyone's: the scan reads them, since it finds the control
        # stream's name, which the payload keeps in clear
        assert scan(alice.all() + bob.all(), collections) == []
        assert scan(["user:bob"], collections) != []

        no_jmx = jmx_missing()
        if no_jmx is not None:
            missing("Cassandra JMX", f"the SSTable scan needs a flush: {no_jmx}")
        nodetool("flush", ks)
        nodetool("compact", ks)
        tables = sorted(d for d in (cassandra_data / "data" / ks).glob("*-*") if d.is_dir())
        assert len(tables) > len(BODIES), f"no SSTable directory for the tables of {ks}"
        # no table of the keyspace keeps anything of alice once compacted (the bodies,
        # outcomes, timelines, commit records, the event archive...), tombstones included:
        # the lookup tables keyed by a memory's key, tags or content hash (memory_keys,
        # memory_tags, memory_hashes, whose tombstones live until gc_grace_seconds, and
        # memory_key_heads, never deleted) hold keyed hashes, not the words
        assert scan(alice.all() + parties, tables) == []
        assert scan([bob.content], _table_dirs(cassandra_data, ks, ("memories",))) != []


@contextmanager
def _collections_dropped(platform: Any) -> Iterator[None]:
    """Drop the test's own Qdrant collections (its prefix) from the shared server after it."""
    try:
        yield
    finally:
        platform.index.clear()


def _insights(platform: Any) -> Insights:
    """The console's views, on the app's read ports (as the gateway builds them)."""
    app = platform.app
    return Insights(app.log, app.store, app.clock, logged=platform.log)


def _table_dirs(cassandra_data: Path, keyspace: str, tables: tuple[str, ...]) -> list[Path]:
    """The SSTable directories of some tables of a keyspace (data/<ks>/<table>-<id>)."""
    root = cassandra_data / "data" / keyspace
    return sorted(d for t in tables for d in root.glob(f"{t}-*") if d.is_dir())


def test_forgetting_a_tenant_deletes_its_rows_from_cassandras_files(tmp_path: Path) -> None:
    """Forgetting a tenant in the distributed mode destroys its keys and deletes its
    read-model rows in Cassandra, down to the files.

    Where Cassandra keeps what it was written: every mutation goes to the commit log
    (shared by all tables, recycled once its data is flushed) and to a memtable, which is
    flushed to immutable SSTables; a DELETE is a tombstone written the same way, and the
    deleted cells stay in the older SSTables until a compaction merges them with the
    tombstone. So the test flushes the memtables (nodetool flush), then compacts the read
    models (nodetool compact), and scans their SSTable directories. SSTables are compressed
    by default (LZ4), which may cut a value into pieces the raw scan cannot see; this test's
    keyspace stores its read models uncompressed, so the scan reads their bytes as written.

    What the scan proves: (1) no sensitive marker is in any Kafka segment or Cassandra file
    (commit log included), before or after, since they were sealed before the log; (2) a
    plain value held only in the purged tenant's memory bodies is on disk before the purge
    (the scan does see the SSTables) and in no read-model SSTable after flush and
    compaction, while the other tenant's value stays. It does not prove that the tombstones
    are gone: until gc_grace_seconds (3 hours, migration 0005) they still name the deleted
    partitions (the tenant, its streams, and keyed hashes of keys and tags), and the event
    archive keeps the events themselves, sealed under destroyed keys. Likewise a document's
    id, in clear in each of its entity rows: in the entity tables' SSTables before, and
    after in none but `document_entities`, whose partition tombstone names it.

    (3) A shared stream's words (a session's, in every free-text field) are sealed under
    the tenant's key: never in a Kafka segment, and after the forget in no table of the
    keyspace (the archive included) once flushed and compacted, while another tenant's
    session words are still in its memories' SSTables."""
    settings, kafka_data, cassandra_data = _shredding_setup(tmp_path)
    ks = settings.cassandra_keyspace
    m = plant_markers()
    # letters only: a random hex id can hold a run of digits the detector takes for a
    # bank card number, which is then sealed and never in clear (the scan found no `kept`)
    letters = str.maketrans("0123456789", "ghijklmnop")
    gone = f"gone{uuid.uuid4().hex.translate(letters)}"
    kept = f"kept{uuid.uuid4().hex.translate(letters)}"
    shared, control = Words.fresh(), Words.fresh()  # session words: acme's, globex's

    def declare(stream: str, content: str, where: str) -> dict[str, Any]:
        memory = {"type": "fact", "content": content, "provenance": {"source_location": where}}
        return event("MemoryDeclared", stream, {"memory": memory})

    with running_distributed(settings) as platform:
        session = platform.store.session  # type: ignore[attr-defined]
        names = session.execute(
            "SELECT table_name FROM system_schema.tables WHERE keyspace_name = %s", (ks,)
        )
        for (table,) in list(names):  # SSTables are compressed (LZ4) by default: see above
            session.execute(
                f"ALTER TABLE {ks}.{table} WITH compression = {{'enabled': 'false'}}", timeout=120
            )
        app = platform.app
        app.publish(
            CTX,
            [
                declare("user:alice", f"card {m.card}, mail {m.email}", gone),
                declare("user:bob", f"phone {m.phone}, ID {m.id_number}", gone),
                declare("team:ops", f"password: {m.password}", gone),
            ],
        )
        published = app.publish(OTHER, [declare("user:carol", "likes tea", kept)])
        documents = app.documents
        assert documents is not None
        deal = b"Party A: Acme Ltd.\n\nClause 8.2 A penalty of 6% of CNY 500,000 applies.\n"
        document_id = documents.ingest(CTX, "user:dana", "deal.txt", deal).document_id
        for tenant, w in (("acme", shared), ("globex", control)):
            as_agent = RequestContext(tenant, w.principal)
            said = app.publish(as_agent, word_events("session:s1", w)).accepted
            Pump(platform).drain()
            [memory_id] = [o.memory_id for o in platform.store.outcome(tenant, said[1].event_id)]
            assert memory_id is not None
            app.publish(as_agent, feedback_events("session:s1", w, memory_id))
        Pump(platform).drain()
        sessions = str(app.list_memories(CTX, "session:s1"))
        assert shared.content in sessions
        assert shared.value in sessions
        segments = sorted(kafka_data.glob(f"{settings.kafka_topic}*"))
        assert segments, "no Kafka segment for the topic"
        assert scan(["session:s1"], segments) != []  # the scan reads what was produced
        # a shared stream's words are sealed before the log, like a user's
        assert scan(shared.all() + control.all(), segments) == []
        before = [
            x for s in ("user:alice", "user:bob", "team:ops") for x in app.list_memories(CTX, s)
        ]
        assert len(before) == 3
        assert any(m.card in x.content for x in before)
        assert app.list_memories(OTHER, "user:carol") != []
        penalty = {"where": [{"field": "penalty_rate", "op": "gt", "value": "5%"}]}
        assert documents.query(CTX, penalty)["total"] == 1
        assert platform.store.counts()["entities"] > 0

        no_jmx = jmx_missing()  # locally: check the reads, skip the file checks at the end
        if no_jmx is None:
            nodetool("flush", ks)
            read_models = _table_dirs(cassandra_data, ks, READ_MODELS)
            assert read_models, f"no SSTable directory for the read models of {ks}"
            assert scan([gone, kept], _table_dirs(cassandra_data, ks, ("memories",))) != []
            assert scan([document_id], _table_dirs(cassandra_data, ks, DOCUMENT_TABLES)) != []

        forget = event("ForgetRequested", "user:alice", {"tenant": True, "reason": "closed"})
        app.publish(CTX, [forget])
        Pump(platform).drain()
        for stream in ("user:alice", "user:bob", "team:ops", "session:s1", "user:dana"):
            assert app.list_memories(CTX, stream) == []
        assert documents.query(CTX, penalty)["total"] == 0
        assert (platform.store.counts()["documents"], platform.store.counts()["entities"]) == (0, 0)
        for memory in before:
            with pytest.raises(NotFound):
                app.get(CTX, memory.memory_id)
        assert app.replay(CTX, "user:bob", 1, 100) == []  # a forgotten tenant answers nothing
        raw_log = getattr(app.log, "inner", app.log)  # as stored, under the opening wrapper
        replayed = raw_log.read_stream(CTX.tenant, "user:bob", 1, 100)
        assert replayed, "the log keeps the events"
        assert all(m.phone not in str(e.envelope.payload) for e in replayed)
        logged = raw_log.read_stream(CTX.tenant, "session:s1", 1, 100)
        assert logged, "the log keeps the shared stream's events"
        assert not [w for w in shared.all() if w in str([e.envelope for e in logged])]
        assert platform.sealer is not None
        opened = str(
            [platform.sealer.open_json(e.envelope.model_dump(mode="json")) for e in logged]
        )
        assert not [w for w in shared.all() if w in opened]  # its key is gone with the tenant
        assert control.content in str(app.list_memories(OTHER, "session:s1"))
        carol = app.list_memories(OTHER, "user:carol")
        assert [x.content for x in carol] == ["likes tea"]
        assert platform.store.outcome("globex", published.accepted[0].event_id) != []

        paths = [*sorted(kafka_data.glob(f"{settings.kafka_topic}*")), cassandra_data]
        assert scan(m.all(), [*paths, tmp_path / "data"]) == []
        if no_jmx is not None:
            missing("Cassandra JMX", f"the file scan needs a flush: {no_jmx}")
        nodetool("flush", ks)
        nodetool("compact", ks)
        read_models = _table_dirs(cassandra_data, ks, READ_MODELS)
        assert scan([gone], read_models) == []
        # document_entities is partitioned by (tenant, document id): its partition's
        # tombstone names the id until gc_grace_seconds; the other tables' rows are gone
        rows_gone = tuple(t for t in DOCUMENT_TABLES if t != "document_entities")
        assert scan([document_id], _table_dirs(cassandra_data, ks, rows_gone)) == []
        assert scan([kept], _table_dirs(cassandra_data, ks, ("memories",))) != []
        assert scan(m.all(), [*paths, tmp_path / "data"]) == []
        # no table of the keyspace (read models, tombstones, the event archive, the audit
        # chain) nor any Kafka segment keeps a word of the forgotten tenant's session; the
        # other tenant's, not forgotten, are still in its memories
        tables = sorted(d for d in (cassandra_data / "data" / ks).glob("*-*") if d.is_dir())
        assert scan(shared.all(), [*tables, *paths[:-1]]) == []
        found = scan(control.stored(), _table_dirs(cassandra_data, ks, ("memories",)))
        for word in control.stored():
            assert any(hit.startswith(word) for hit in found), (word, found)
