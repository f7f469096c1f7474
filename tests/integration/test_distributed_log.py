"""The distributed log on a real Kafka broker and a real Cassandra node: the registrar
sequences each partition into the archive, the other consumers follow it, and every
published event is projected exactly once, whatever arrives twice or arrives broken.

The consumers' partition processors are driven in-process here (tests/distributed_support
`Pump`); tests/e2e/test_distributed.py runs the same processors as faust workers."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from tests.distributed_support import (
    Pump,
    distributed_settings,
    running_distributed,
    table_digests,
)
from tests.support import audit_trails, verify_trails

from mnemo.bootstrap import Platform
from mnemo.domain.events import Actor, ActorKind, Envelope
from mnemo.domain.ids import new_event_id
from mnemo.domain.projection import OutcomeKind
from mnemo.ports import LogRecord, MemoryQuery, RecordStatus
from mnemo.records import record_key
from mnemo.service.app import RequestContext, Wait
from mnemo.service.distributed import NotReady, position_name

CTX = RequestContext("acme", "tester")


def obs(text: str, stream: str = "user:U1", **extra: Any) -> dict[str, Any]:
    return {
        "type": "ObservationRecorded",
        "schema_version": 2,
        "stream": stream,
        "payload": {"text": text},
        **extra,
    }


def declare(content: str, stream: str = "user:U1", **memory: Any) -> dict[str, Any]:
    return {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": stream,
        "payload": {"memory": {"type": "fact", "content": content, **memory}},
    }


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    with running_distributed(distributed_settings(tmp_path / "data")) as built:
        yield built


def seqs(platform: Platform, stream: str, tenant: str = "acme") -> list[int]:
    return [e.envelope.seq or 0 for e in platform.log.read_stream(tenant, stream, 1, 10_000)]


def test_published_events_are_sequenced_registered_searchable_and_replayable(
    platform: Platform,
) -> None:
    app = platform.app
    result = app.publish(
        CTX,
        [
            obs("记住我的尺码是L"),
            declare("the user is allergic to peanuts", stream="user:U2"),
            obs("remember my budget is 300 euros"),
        ],
    )
    assert all(a.seq == 0 for a in result.accepted)  # sequenced by the registrar, later
    Pump(platform).drain()
    outcomes = {a.event_id: app.outcome(CTX, a.event_id) for a in result.accepted}
    assert all(o and o[0].kind is OutcomeKind.REGISTERED for o in outcomes.values())
    # each stream has its own gapless sequence, the registrar's events included
    for stream in ("user:U1", "user:U2"):
        numbers = seqs(platform, stream)
        assert numbers == list(range(1, len(numbers) + 1))
    u1_types = [e.envelope.type for e in platform.log.read_stream("acme", "user:U1", 1, 100)]
    assert u1_types.count("MemoryRegistered") == 2
    hits = app.search(CTX, "peanuts allergy", streams=["user:U2"])
    assert hits
    assert "peanuts" in hits[0].memory.content
    # the registrar's events are found by their cause
    first = result.accepted[0].event_id
    caused = platform.log.caused_by("acme", first)
    assert [e.envelope.type for e in caused] == ["MemoryRegistered"]
    found = platform.log.get("acme", first)
    assert found is not None
    assert found.envelope.seq == 1
    assert platform.log.get("other", first) is None
    # the audit chain holds one link per archived event
    trails = audit_trails(platform.store, "acme")
    assert {s: len(t) for s, t in trails.items()} == {
        s: len(seqs(platform, s)) for s in ("user:U1", "user:U2")
    }


def test_the_audit_check_finds_a_chain_cut_short_of_its_head(platform: Platform) -> None:
    from mnemo.service.insights import Insights

    platform.app.publish(CTX, [declare(f"fact {i}") for i in range(3)])
    Pump(platform).drain()
    insights = Insights(platform.log, platform.store, platform.runner.clock)
    intact = insights.audit(CTX)
    assert (intact.status, intact.links, intact.streams, intact.pending) == ("intact", 6, 1, 0)
    # Cassandra keeps each stream's head in a row of its own: removing the last link (as a
    # tampered table would) leaves a shorter chain that verifies on its own
    ks = platform.settings.cassandra_keyspace
    platform.store.session.execute(  # type: ignore[attr-defined]
        f"DELETE FROM {ks}.audit_links WHERE tenant = %s AND stream = %s AND chunk = 0 AND n = 6",
        ("acme", "user:U1"),
    )
    broken = insights.audit(CTX)
    assert (broken.status, broken.stream, broken.first_broken) == ("broken", "user:U1", 6)
    assert "stops before its head link" in (broken.reason or "")


def test_a_repeated_event_id_is_archived_and_registered_once(platform: Platform) -> None:
    event = obs("remember my shoe size is 42")
    event["event_id"] = new_event_id(platform.runner.clock.now())
    platform.app.publish(CTX, [event])
    platform.app.publish(CTX, [event])  # a publisher's retry: a second Kafka record
    Pump(platform).drain()
    assert [e.envelope.type for e in platform.log.read_stream("acme", "user:U1", 1, 100)] == [
        "ObservationRecorded",
        "MemoryRegistered",
    ]
    assert len(platform.app.outcome(CTX, event["event_id"])) == 1
    assert len(platform.store.audit_trail("acme", "user:U1", 0, 100)) == 2


def test_another_event_under_an_archived_id_is_dead_lettered_and_answered_rejected(
    platform: Platform,
) -> None:
    event = obs("remember my shoe size is 42")
    event["event_id"] = new_event_id(platform.runner.clock.now())
    first = platform.app.publish(CTX, [event])
    Pump(platform).drain()
    [registered] = platform.app.outcome(CTX, event["event_id"])
    assert registered.kind is OutcomeKind.REGISTERED

    # the gateway stamps both with a digest of what the client sent; the sequencer finds
    # the second another event, not a retry: a waiting publish hears so
    other = {**event, "payload": {"text": "remember my shoe size is 39"}}
    done = threading.Event()

    def pump() -> None:
        while not done.is_set():
            Pump(platform).drain()

    pumping = threading.Thread(target=pump)
    pumping.start()
    try:
        waited = platform.app.publish(CTX, [other], Wait.REGISTERED, timeout=60)
        retried = platform.app.publish(CTX, [event], Wait.REGISTERED, timeout=60)
    finally:
        done.set()
        pumping.join()
    assert waited.complete
    [refused] = waited.outcomes[event["event_id"]]
    assert (refused.kind, refused.reason_code) == (OutcomeKind.REJECTED, "EVENT_ID_REUSED")
    assert retried.outcomes[event["event_id"]] == [registered]  # a retry: the first's
    assert platform.distributed is not None
    assert platform.distributed.progress.refused(first.accepted) == {}

    letters = platform.distributed.topic.fetch_dead_letters()  # type: ignore[attr-defined]
    assert [dict(r.headers)["mnemo-dlq-reason"] for r in letters] == [b"EVENT_ID_REUSED"]
    held = platform.log.get("acme", event["event_id"])
    assert held is not None
    assert platform.sealer is not None
    opened = platform.sealer.open_event(held)
    assert opened.envelope.payload == {"text": "remember my shoe size is 42"}
    assert platform.app.outcome(CTX, event["event_id"]) == [registered]
    assert [e.envelope.type for e in platform.log.read_stream("acme", "user:U1", 1, 100)] == [
        "ObservationRecorded",
        "MemoryRegistered",
    ]


def test_a_waiting_follower_names_where_the_registrar_must_get_to(platform: Platform) -> None:
    platform.app.publish(CTX, [declare(f"note {i}", stream=f"user:W{i}") for i in range(8)])
    topic = platform.distributed.topic  # type: ignore[union-attr]
    ends = {p: end for p, end in topic.end_offsets().items() if end}
    audit = Pump(platform, ("audit",)).processors["audit"]  # it reads every event
    records = [r for p in sorted(ends) for r in topic.fetch(p, 0, 100)]
    with pytest.raises(NotReady) as waiting:
        audit.process(records)
    assert waiting.value.waits == dict.fromkeys(ends, 0)  # nothing has a fate yet
    archive = platform.distributed.archive  # type: ignore[union-attr]
    assert not archive.decided(waiting.value.waits)
    Pump(platform, ("registrar",)).step()
    assert archive.decided(waiting.value.waits)  # worth handling again now
    assert not archive.decided({p: end + 5 for p, end in ends.items()})
    Pump(platform).drain()
    assert len(platform.store.audit_trail("acme", "user:W0", 0, 100)) == 2


def test_a_follower_passes_over_what_it_does_not_read_and_waits_for_what_it_does(
    platform: Platform,
) -> None:
    platform.app.publish(CTX, [declare(f"note {i}", stream=f"user:V{i}") for i in range(8)])
    store = platform.store
    topic = platform.distributed.topic  # type: ignore[union-attr]
    ends = {p: end for p, end in topic.end_offsets().items() if end}
    followers = Pump(platform, ("indexer", "decay")).processors
    # neither reads a declaration: both pass over them before the registrar has decided
    for name, follower in followers.items():
        follower.process([r for p in sorted(ends) for r in topic.fetch(p, 0, 100)])
        assert {p: store.position(position_name(name, p)) for p in ends} == ends
    Pump(platform, ("registrar",)).step()  # registers: a MemoryRegistered record each
    grown = {p: end for p, end in topic.end_offsets().items() if p in ends}
    assert all(grown[p] > ends[p] for p in ends)
    # the records of what they read wait for the registrar to decide on them
    for name, follower in followers.items():
        fresh = [r for p in sorted(ends) for r in topic.fetch(p, ends[p], 100)]
        with pytest.raises(NotReady) as waiting:
            follower.process(fresh)
        assert waiting.value.waits == ends
        assert {p: store.position(position_name(name, p)) for p in ends} == ends
    assert not platform.app.search(CTX, "note", streams=["user:V0"])
    Pump(platform).drain()
    assert [h.memory.content for h in platform.app.search(CTX, "note", streams=["user:V0"])] == [
        "note 0"
    ]


def test_a_stale_expected_sequence_is_refused_with_an_outcome(platform: Platform) -> None:
    platform.app.publish(CTX, [obs("first note", stream="user:U5")])
    Pump(platform).drain()
    head = platform.log.stream_head("acme", "user:U5")
    assert head == 1  # an observation no rule keeps: no MemoryRegistered
    stale = platform.app.publish(CTX, [obs("late writer", stream="user:U5", expected_seq=0)])
    fresh = platform.app.publish(CTX, [obs("in time", stream="user:U5", expected_seq=head)])
    Pump(platform).drain()
    [refused] = platform.app.outcome(CTX, stale.accepted[0].event_id)
    assert refused.kind is OutcomeKind.REJECTED
    assert refused.reason_code == "STALE_SEQUENCE"
    assert platform.log.get("acme", stale.accepted[0].event_id) is None
    assert platform.log.get("acme", fresh.accepted[0].event_id) is not None
    assert seqs(platform, "user:U5") == [1, 2]


def _raw(platform: Platform, key: bytes, value: bytes) -> None:
    assert platform.distributed is not None
    platform.distributed.topic.produce([(key, value, [])])


def _kcat(platform: Platform, kind: str, stream: str, payload: dict[str, Any]) -> Envelope:
    """An event as a plain Kafka client (kcat) would write it: unsealed, unchecked."""
    now = platform.runner.clock.now()
    return Envelope(
        event_id=new_event_id(now),
        type=kind,
        schema_version=1,
        tenant="acme",
        stream=stream,
        occurred_at=now,
        actor=Actor(kind=ActorKind.AGENT, id="kcat"),
        payload=payload,
    )


def test_poison_records_go_to_the_dead_letter_topic_and_the_consumers_go_on(
    platform: Platform,
) -> None:
    assert platform.distributed is not None
    now = platform.runner.clock.now()
    good = _kcat(
        platform,
        "MemoryDeclared",
        "user:U7",
        {"memory": {"type": "fact", "content": "the office is on floor 7"}},
    )
    body = good.model_dump(mode="json", exclude_none=True)
    key = record_key(good)
    poison = {
        "NOT_JSON": (key, b"\xff\xfe not json"),
        "UNKNOWN_EVENT_TYPE": (key, orjson.dumps({**body, "type": "Nope"})),
        "EMPTY_CONTENT": (key, orjson.dumps({**body, "payload": {"memory": {"type": "fact"}}})),
        "UNSUPPORTED_SCHEMA_VERSION": (key, orjson.dumps({**body, "schema_version": 9})),
        "RECORD_TOO_LARGE": (key, orjson.dumps({**body, "payload": {"pad": "x" * 1_060_000}})),
        "KEY_MISMATCH": (b"other:user:U7", orjson.dumps({**body, "event_id": new_event_id(now)})),
        "INVALID_ENVELOPE": (key, orjson.dumps({**body, "event_id": new_event_id(now), "seq": 4})),
    }
    for k, v in poison.values():
        _raw(platform, k, v)
    _raw(platform, key, orjson.dumps(body))  # a good record behind the bad ones
    Pump(platform).drain()
    letters = platform.distributed.topic.fetch_dead_letters()  # type: ignore[attr-defined]
    reasons = sorted(dict(r.headers)["mnemo-dlq-reason"].decode() for r in letters)
    assert reasons == sorted(poison)
    for record in letters:
        headers = dict(record.headers)
        assert headers["mnemo-dlq-source"].startswith(platform.settings.kafka_topic.encode())
    [outcome] = platform.app.outcome(CTX, good.event_id)
    assert outcome.kind is OutcomeKind.REGISTERED
    assert seqs(platform, "user:U7") == [1, 2]
    # every record has a fate; the dead ones stay out of the archive
    statuses = []
    for p in platform.distributed.topic.partitions():
        statuses.extend(f.status for f in platform.distributed.archive.fates(p, 0, 10_000).values())
    assert statuses.count(RecordStatus.DEAD) == len(poison)


def test_a_request_to_forget_produced_straight_to_the_topic_shreds_the_users_key(
    platform: Platform, caplog: pytest.LogCaptureFixture
) -> None:
    """A producer writing straight to the topic (kcat, any client) shreds no key before its
    `ForgetRequested` is in the log, as the gateway and the SDK's publisher do. The
    registrar does it when it registers the request, before it commits: the user's words
    read redacted in the log from then on, as after a forget through the gateway."""
    assert platform.distributed is not None
    assert platform.sealer is not None
    subject = "user:U8"
    words = "my locker code is 4471"
    platform.app.publish(CTX, [declare(words, stream=subject)], wait=Wait.REGISTERED)
    key_id = platform.sealer.key_id("acme", subject)
    assert platform.sealer.owns_key("acme", subject)
    assert not platform.sealer.keys.is_destroyed(key_id)
    forget = _kcat(platform, "ForgetRequested", subject, {})
    _raw(
        platform,
        record_key(forget),
        orjson.dumps(forget.model_dump(mode="json", exclude_none=True)),
    )
    with caplog.at_level("WARNING", logger="mnemo.sealing"):
        Pump(platform).drain()
    [outcome] = platform.app.outcome(CTX, forget.event_id)
    assert outcome.kind is OutcomeKind.APPLIED
    assert platform.sealer.keys.vault.is_destroyed(key_id)  # the vault's own answer
    assert any("keys alive" in r.getMessage() for r in caplog.records)
    logged = platform.log.read_stream("acme", subject, 1, 10)
    assert (
        words
        not in orjson.dumps(
            [platform.sealer.open_private_envelope(e.envelope).payload for e in logged]
        ).decode()
    )
    assert platform.app.list_memories(CTX, subject) == []


def test_each_stream_keeps_its_publishers_order_over_many_partitions(tmp_path: Path) -> None:
    settings = distributed_settings(tmp_path / "data", partitions=12)
    with running_distributed(settings) as platform:
        streams = [f"user:U{i}" for i in range(16)]

        def publish(worker: int) -> None:
            for i in range(12):
                batch = [
                    obs(f"w{worker} n{i}", stream=s, payload={"text": f"w{worker} n{i}"})
                    for s in streams[worker::4]
                ]
                platform.app.publish(RequestContext("acme", f"w{worker}"), batch)

        threads = [threading.Thread(target=publish, args=(w,)) for w in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        Pump(platform).drain(timeout=120)
        for s in streams:
            events = platform.log.read_stream("acme", s, 1, 1000)
            assert [e.envelope.seq for e in events] == list(range(1, len(events) + 1))
            # the log holds the user's words sealed: open them as the read ports do
            opened = [platform.sealer.open_private_envelope(e.envelope) for e in events]
            texts = [e.payload["text"] for e in opened]
            assert len(texts) == 12
            numbers = [int(t.split(" n")[1]) for t in texts]
            assert numbers == sorted(numbers)  # each publisher's order, kept
        # the streams really spread over the partitions
        assert platform.distributed is not None
        archive = platform.distributed.archive
        used = {
            p
            for p in platform.distributed.topic.partitions()
            if any(f.status is RecordStatus.ARCHIVED for f in archive.fates(p, 0, 10_000).values())
        }
        assert len(used) >= 6


def nine_declared(platform: Platform) -> tuple[Pump, Any, Any]:
    """Nine declarations published over three streams, not handled yet: a pump of every
    consumer, its registrar, and the topic."""
    assert platform.distributed is not None
    platform.app.publish(
        CTX, [declare(f"fact number {i}", stream=f"user:U{i % 3}") for i in range(9)]
    )
    pump = Pump(platform)
    return pump, pump.processors["registrar"], platform.distributed.topic


def test_redelivery_and_a_crash_between_archive_and_commit_change_nothing(
    platform: Platform,
) -> None:
    pump, registrar, topic = nine_declared(platform)
    original = platform.store.transaction
    calls = {"n": 0}

    def failing() -> Any:
        calls["n"] += 1
        raise ConnectionError("the store went away before the commit")

    platform.store.transaction = failing  # type: ignore[method-assign]
    for p in topic.partitions():
        records = topic.fetch(p, 0, 100)
        if records:
            with pytest.raises(ConnectionError):
                registrar.process(records)
    platform.store.transaction = original  # type: ignore[method-assign]
    assert calls["n"] > 0
    pump.drain()
    # and every record handed over again, as Kafka redelivers after a rebalance
    for processor in pump.processors.values():
        for p in topic.partitions():
            records: list[LogRecord] = topic.fetch(p, 0, 1000)
            if records:
                processor.process(records)
    for s in ("user:U0", "user:U1", "user:U2"):
        events = platform.log.read_stream("acme", s, 1, 100)
        assert [e.envelope.seq for e in events] == list(range(1, 7))
        assert [e.envelope.type for e in events].count("MemoryRegistered") == 3
    memories = platform.store.query("acme", MemoryQuery(limit=1000))
    assert len(memories) == 9
    assert sorted(platform.index.ids("acme")) == sorted(m.memory_id for m in memories)
    assert sum(len(t) for t in audit_trails(platform.store, "acme").values()) == 18


def test_a_crash_after_registration_emitted_is_redone_without_emitting_twice(
    platform: Platform,
) -> None:
    """The registrar dies after appending what registration emitted and before its commit:
    handled again, the events find what they emitted before, and nothing is emitted or
    registered twice."""
    pump, registrar, topic = nine_declared(platform)
    assert platform.distributed is not None
    archive = platform.distributed.archive
    log = registrar.runner.log
    real_append = log.append
    asked: list[list[tuple[str, str]]] = []
    real_caused = archive.causes

    def recording(keys: Any) -> Any:
        asked.append(list(keys))
        return real_caused(keys)

    def append_then_die(events: Any) -> Any:
        real_append(events)
        raise ConnectionError("the registrar died before its commit")

    archive.causes = recording  # type: ignore[method-assign]
    log.append = append_then_die  # type: ignore[method-assign]
    declared = 0
    for p in topic.partitions():
        records = topic.fetch(p, 0, 100)
        if records:
            declared += len(records)
            with pytest.raises(ConnectionError):
                registrar.process(records)
    log.append = real_append  # type: ignore[method-assign]
    assert declared == 9
    asked.clear()
    pump.drain()
    assert sum(len(keys) for keys in asked) >= 9  # the redo asks for each declaration
    for s in ("user:U0", "user:U1", "user:U2"):
        events = platform.log.read_stream("acme", s, 1, 100)
        assert [e.envelope.seq for e in events] == list(range(1, 7))
        assert [e.envelope.type for e in events].count("MemoryRegistered") == 3
    assert len(platform.store.query("acme", MemoryQuery(limit=1000))) == 9


def test_a_fresh_consumer_group_rebuilds_identical_read_models(tmp_path: Path) -> None:
    live_settings = distributed_settings(tmp_path / "live")
    with running_distributed(live_settings) as live:
        live.app.publish(
            CTX,
            [declare(f"fact {i}", stream=f"user:U{i % 4}", tags=["t"]) for i in range(12)]
            + [obs("记住我的尺码是L", stream="user:U1"), obs("remember my budget is 300 euros")],
        )
        Pump(live).drain()
        [forget_target] = [m.memory_id for m in live.app.list_memories(CTX, "user:U2")[:1]]
        live.app.publish(
            CTX,
            [
                {
                    "type": "ForgetRequested",
                    "schema_version": 1,
                    "stream": "user:U2",
                    "payload": {"memory_id": forget_target},
                }
            ],
        )
        Pump(live).drain()
        # the same topic, a fresh keyspace and fresh positions: a new consumer group
        rebuild_settings = live_settings.model_copy(
            update={
                "cassandra_keyspace": live_settings.cassandra_keyspace + "_r",
                "data_dir": tmp_path / "rebuild",
            }
        )
        with running_distributed(rebuild_settings) as rebuilt:
            Pump(rebuilt).drain()
            live_tables, rebuilt_tables = table_digests(live), table_digests(rebuilt)
            # every read model, the audit chains included, table by table and as one
            # checksum
            assert rebuilt_tables == live_tables
            assert {"audit_links", "audit_stream_heads", "memories"} <= set(live_tables)
            assert rebuilt.store.checksum() == live.store.checksum()
            assert rebuilt.store.counts() == live.store.counts()
            assert sorted(rebuilt.index.ids("acme")) == sorted(live.index.ids("acme"))
            live_trails = audit_trails(live.store, "acme")
            assert audit_trails(rebuilt.store, "acme") == live_trails
            assert len(live_trails) == 4
            for built in (live, rebuilt):
                logged = {
                    r.event_id: built.log.get("acme", r.event_id)
                    for trail in live_trails.values()
                    for r in trail
                }
                events = {k: v.envelope for k, v in logged.items() if v is not None}
                assert verify_trails(live_trails, events) == {}
            for s in ("user:U0", "user:U1", "user:U2", "user:U3"):
                assert rebuilt.log.read_stream_json(
                    "acme", s, 1, 1000
                ) == live.log.read_stream_json("acme", s, 1, 1000)


def test_a_gateway_on_a_rebuilt_keyspace_keeps_the_live_tenants_and_keys(
    tmp_path: Path,
) -> None:
    """Tenants and API keys are not in the log, so a rebuild does not make them again: the
    rebuilt keyspace has none. docs/distributed.md ('Rebuilding read models') keeps
    MNEMO_ACCESS_KEYSPACE on the live keyspace, and a gateway pointed at the rebuilt read
    models then still knows every key (without it, every request was 401)."""
    live_settings = distributed_settings(tmp_path / "live", key_pepper="pepper-0123456789abcdef")
    with running_distributed(live_settings) as live:
        live.access.create_tenant("acme", by="test")
        issued = live.access.issue_key("acme", "admin", ["admin"], by="test")
        live.app.publish(CTX, [declare("fact one")])
        Pump(live).drain()
        fresh = live_settings.cassandra_keyspace + "_r"
        rebuild_settings = live_settings.model_copy(
            update={
                "cassandra_keyspace": fresh,
                "access_keyspace": live_settings.cassandra_keyspace,
                "data_dir": tmp_path / "rebuild",
            }
        )
        with running_distributed(rebuild_settings) as rebuilt:
            Pump(rebuilt).drain()
            assert rebuilt.access.authenticate(issued.key).tenant == "acme"
            assert rebuilt.access.tenant("acme").tenant == "acme"
            # the rebuilt keyspace itself holds no access rows: they stay on the live one
            session = rebuilt.store.session  # type: ignore[attr-defined]
            assert list(session.execute(f"SELECT key_id FROM {fresh}.api_keys")) == []
        assert live.access.authenticate(issued.key).tenant == "acme"


def test_the_topic_is_reachable_only_while_a_broker_answers(platform: Platform) -> None:
    """Readiness and `mnemo status` ask the brokers (the partitions a client keeps from its
    metadata answered while Kafka was down); a broker that is not there fails the probe
    within its bound, with the log's code."""
    import socket
    import time

    from mnemo.adapters.kafka_topic import KafkaConfig, KafkaTopic
    from mnemo.domain.errors import Unavailable

    assert platform.distributed is not None
    platform.distributed.topic.reachable(5.0)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    nowhere = KafkaTopic(KafkaConfig(bootstrap=f"127.0.0.1:{port}"), "nowhere")
    try:
        started = time.monotonic()
        with pytest.raises(Unavailable) as caught:
            nowhere.reachable(1.0)
        assert caught.value.code == "LOG_UNAVAILABLE"
        assert time.monotonic() - started < 10
    finally:
        nowhere.close()
