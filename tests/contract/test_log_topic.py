"""Contract of the LogTopic port, on a real Kafka broker (the only adapter): records with
one key keep their order in one partition, offsets and ends agree, dead letters keep the
record and carry the reason, and topic creation is idempotent and refuses a partition
count that would move streams."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest
from tests.distributed_support import KAFKA, require_services

from mnemo.adapters.kafka_topic import KafkaConfig, KafkaTopic, ensure_topics
from mnemo.domain.errors import InvalidInput


@pytest.fixture
def topic() -> Iterator[KafkaTopic]:
    require_services()
    name = f"contract.{uuid.uuid4().hex[:10]}"
    config = KafkaConfig(bootstrap=KAFKA)
    assert ensure_topics(config, name, 4, f"{name}.dlq") == [name, f"{name}.dlq"]
    made = KafkaTopic(config, name)
    yield made
    made.close()


def test_one_key_keeps_its_order_in_one_partition(topic: KafkaTopic) -> None:
    records = [
        (f"acme:user:U{i % 3}".encode(), f"value {i}".encode(), [("n", str(i).encode())])
        for i in range(30)
    ]
    placed = topic.produce(records)
    assert len(placed) == 30
    by_key: dict[bytes, set[int]] = {}
    for (key, _, _), where in zip(records, placed, strict=True):
        by_key.setdefault(key, set()).add(where.partition)
    assert all(len(parts) == 1 for parts in by_key.values())
    assert topic.partitions() == [0, 1, 2, 3]
    ends = topic.end_offsets()
    assert sum(ends.values()) == 30
    for partition in topic.partitions():
        got = topic.fetch(partition, 0, 100)
        assert [r.offset for r in got] == list(range(ends[partition]))
        numbers = [int(dict(r.headers)["n"]) for r in got]
        assert numbers == sorted(numbers)  # production order, per partition
        if got:
            middle = got[len(got) // 2].offset
            assert [r.offset for r in topic.fetch(partition, middle, 2)] == [
                middle,
                middle + 1,
            ][: ends[partition] - middle]
    assert topic.fetch(0, ends[0], 10) == []


def test_dead_letters_keep_the_record_and_carry_the_reason(topic: KafkaTopic) -> None:
    [where] = topic.produce([(b"acme:user:U1", b"\xff broken", [("origin", b"test")])])
    [record] = topic.fetch(where.partition, where.offset, 1)
    assert topic.dead_letter_count() == 0
    topic.dead_letter([(record, "NOT_JSON", "the record is not UTF-8 JSON")])
    [letter] = topic.fetch_dead_letters()
    assert (letter.key, letter.value) == (b"acme:user:U1", b"\xff broken")
    headers = dict(letter.headers)
    assert headers["origin"] == b"test"
    assert headers["mnemo-dlq-reason"] == b"NOT_JSON"
    assert headers["mnemo-dlq-source"] == f"{topic.name}/{where.partition}/{where.offset}".encode()
    assert topic.dead_letter_count() == 1


def test_creating_topics_is_idempotent_and_refuses_another_partition_count(
    topic: KafkaTopic,
) -> None:
    config = KafkaConfig(bootstrap=KAFKA)
    assert ensure_topics(config, topic.name, 4, topic.dead_letters) == []
    with pytest.raises(InvalidInput, match="partitions") as refused:
        ensure_topics(config, topic.name, 8, topic.dead_letters)
    # a configuration error, coded and naming the setting, so a process stops at once
    assert refused.value.code == "PARTITIONS_MISMATCH"
    assert refused.value.field == "kafka_partitions"
