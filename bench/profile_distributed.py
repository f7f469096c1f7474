"""Where a distributed event's time goes: `python -m bench.profile_distributed [--events N]`.

Drives the registrar's and the followers' partition processors in this process (as the
faust workers do, without the group), on a fresh topic and keyspace of the Kafka and
Cassandra already running, over N MemoryDeclared events on 50 streams. It times the steps
of each processor (wall clock, summed over the batches) and counts the Cassandra requests
by statement, then prints the table and writes it as JSON. The topic's records are read
with the LogTopic's own fetch; the keyspace is dropped at the end.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
import uuid
from collections import Counter, defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

from bench.common import load_average
from bench.corpus import memory_texts

__all__ = ["main"]


class Timings:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: Counter[str] = Counter()
        self.statements: Counter[str] = Counter()
        self._depth: list[str] = []

    def wrap(self, owner: Any, name: str, label: str) -> None:
        inner = getattr(owner, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                self.seconds[label] += time.perf_counter() - t0
                self.calls[label] += 1

        setattr(owner, name, timed)

    def count_statements(self, session: Any) -> None:
        inner = session.execute_async

        def counted(query: Any, *args: Any, **kwargs: Any) -> Any:
            inside = getattr(query, "_statements_and_parameters", None)
            if inside is not None:
                self.statements["BATCH requests"] += 1
                self.statements["BATCH rows"] += len(inside)
                return inner(query, *args, **kwargs)
            text = getattr(query, "query_string", None) or getattr(
                getattr(query, "prepared_statement", None), "query_string", str(query)
            )
            words = str(text).split()
            head = " ".join(words[:4]) if words else "?"
            self.statements[head] += 1
            return inner(query, *args, **kwargs)

        session.execute_async = counted


@contextmanager
def _platform(partitions: int) -> Iterator[Any]:
    from bench.distributed import _vault_address
    from mnemo.adapters.kafka_topic import ensure_topics
    from mnemo.bootstrap import build_distributed, dead_letter_topic, kafka_config
    from mnemo.settings import MnemoSettings

    tag = uuid.uuid4().hex[:10]
    data = Path(tempfile.mkdtemp(prefix="mnemo-profile-"))
    vault = _vault_address()
    if vault is None:  # the distributed mode does not start without a vault
        raise SystemExit("the profile needs OpenBao: MNEMO_VAULT_ADDR and MNEMO_VAULT_TOKEN")
    settings = MnemoSettings(  # type: ignore[call-arg]
        mode="distributed",
        data_dir=data,
        embedder="hashing",
        kafka_topic=f"profile.{tag}",
        kafka_partitions=partitions,
        cassandra_keyspace=f"mnemo_prof_{tag}",
        vault_addr=vault[0],
        vault_token=vault[1],
        vault_key_prefix=f"prof-{tag}",
    )
    ensure_topics(
        kafka_config(settings),
        settings.kafka_topic,
        partitions,
        dead_letter_topic(settings),
    )
    platform = build_distributed(settings, "profile")
    try:
        yield platform
    finally:
        store = platform.store
        for ks in {settings.cassandra_keyspace, *store._keyspaces()}:
            with suppress(Exception):
                store.session.execute(f"DROP KEYSPACE IF EXISTS {ks}", timeout=120)
        platform.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--events", type=int, default=1_200)
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--batch", type=int, default=256, help="records per processor call")
    ap.add_argument("--out", type=Path, default=Path("bench/results"))
    ap.add_argument(
        "--unfenced",
        action="store_true",
        help="commit without partition epochs (the protocol before ADR 0014), to compare",
    )
    args = ap.parse_args(argv)

    from mnemo.adapters import cassandra_archive, cassandra_store, kafka_topic
    from mnemo.service import distributed as dist
    from mnemo.service import runner
    from mnemo.service.app import RequestContext

    raw_position = cassandra_store.CassandraMemoryStore.position  # the driver loop's own
    t = Timings()
    for owner, name, label in (
        (cassandra_archive.CassandraEventArchive, "fates", "archive.fates"),
        (cassandra_archive.CassandraEventArchive, "locate", "archive.locate"),
        (cassandra_archive.CassandraEventArchive, "stream_head", "archive.stream_head"),
        (cassandra_archive.CassandraEventArchive, "stream_heads", "archive.stream_heads"),
        (cassandra_archive.CassandraEventArchive, "record", "archive.record"),
        (cassandra_archive.CassandraEventArchive, "caused_by", "archive.caused_by"),
        (cassandra_store.CassandraMemoryStore, "position", "store.position"),
        (cassandra_store.CassandraMemoryStore, "_commit", "store.commit"),
        (cassandra_store.transaction._Tx, "plan", "store.commit.plan"),
        (cassandra_store.CassandraMemoryStore, "_move_head", "store.commit.key_head_lwt"),
        (cassandra_store.CassandraMemoryStore, "_seal", "store.commit.seal"),
        (cassandra_store.CassandraMemoryStore, "_seal_fenced", "store.commit.seal_fenced_lwt"),
        (cassandra_store.CassandraMemoryStore, "claim", "store.claim_lwt"),
        (cassandra_store.CassandraMemoryStore, "_unfinished", "store.unfinished_check"),
        (cassandra_store.CassandraMemoryStore, "_apply", "store.commit.apply"),
        (cassandra_store.CassandraMemoryStore, "_sealed", "store.sealed_check"),
        (runner.EmbeddedRunner, "decide_registrar", "registrar.handlers"),
        (runner.EmbeddedRunner, "decide_audit", "audit.handlers"),
        (runner.EmbeddedRunner, "decide_decay", "decay.handlers"),
        (runner.EmbeddedRunner, "index_events", "indexer.embed_upsert"),
        (kafka_topic.KafkaTopic, "produce", "kafka.produce"),
        (dist.Sequencer, "process", "registrar.total"),
        (dist.Follower, "process", "follower.total"),
    ):
        if hasattr(owner, name):
            t.wrap(owner, name, label)

    texts = memory_texts(min(args.events, 5_000))
    per: dict[str, float] = defaultdict(float)
    with _platform(args.partitions) as platform:
        t.count_statements(platform.store.session)
        d = platform.distributed
        ctx = RequestContext("acme", "profiler")
        for start in range(0, args.events, 200):
            events = [
                {
                    "type": "MemoryDeclared",
                    "schema_version": 1,
                    "stream": f"user:P{i % 50:04d}",
                    "payload": {
                        "memory": {"type": "fact", "content": f"{texts[i % len(texts)]} #{i}"}
                    },
                }
                for i in range(start, min(args.events, start + 200))
            ]
            # one request may make at most 32 new subject keys: the first requests name
            # fewer streams
            step = 25 if start < 50 else len(events)
            for i in range(0, len(events), step):
                platform.app.publish(ctx, events[i : i + step])
        sequencer = dist.Sequencer(
            platform.runner, platform.store, d.topic, d.archive, platform.runner.clock,
            d.next_position,
        )  # fmt: skip
        followers = {
            n: dist.Follower(platform.runner, platform.store, d.archive, n)
            for n in ("indexer", "decay", "audit")
        }
        if not args.unfenced:  # as the workers do: every partition claimed, commits fenced
            for processor in (sequencer, *followers.values()):
                processor.ownership = dist.Ownership(platform.store, processor.consumer)
                processor.ownership.assign(sorted(d.topic.end_offsets()))
        processors: dict[str, Callable[[list[Any]], int]] = {"registrar": sequencer.process}
        processors.update({n: f.process for n, f in followers.items()})
        t.seconds.clear()
        t.calls.clear()
        t.statements.clear()
        handled: Counter[str] = Counter()
        deadline = time.monotonic() + 1_800
        while time.monotonic() < deadline:
            ends = d.topic.end_offsets()
            behind = False
            for name, process in processors.items():
                for partition, end in ends.items():
                    at = raw_position(platform.store, dist.position_name(name, partition))
                    if at >= end:
                        continue
                    behind = True
                    records = d.topic.fetch(partition, at, args.batch)
                    t0 = time.perf_counter()
                    with suppress(dist.NotReady):
                        handled[name] += process(records)
                    per[name] += time.perf_counter() - t0
            if not behind:
                break
        archived = sequencer.counters.archived

    rows = sorted(t.seconds.items(), key=lambda kv: -kv[1])
    report = {
        "events_published": args.events,
        "fenced": not args.unfenced,
        "records_archived": archived,
        "handled": dict(handled),
        "processor_seconds": {k: round(v, 3) for k, v in per.items()},
        "ms_per_archived_record": {
            k: round(1000 * v / max(1, archived), 2) for k, v in per.items()
        },
        "steps": {k: {"seconds": round(v, 3), "calls": t.calls[k]} for k, v in rows},
        "cassandra_requests": dict(t.statements.most_common()),
        "load_average": load_average(),
    }
    print(json.dumps(report, indent=2))
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / f"profile-distributed-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
