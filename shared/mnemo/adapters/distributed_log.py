"""The event log of the distributed mode: appends go to the topic (the LogTopic port), reads
come from the archive the sequencer keeps (the EventArchive port)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import orjson

from mnemo import telemetry
from mnemo.domain.events import Envelope, LoggedEvent
from mnemo.ports import Appended, EventArchive, EventLog, LogRecord, LogTopic
from mnemo.records import encode_offset, record_headers, record_key, record_key_ids

__all__ = ["DistributedEventLog"]


def _records(topic: LogTopic, partition: int, end: int, page: int = 1_000) -> Iterator[LogRecord]:
    """Every record of a partition up to an end offset, page by page."""
    offset = 0
    while offset < end:
        records = topic.fetch(partition, offset, min(page, end - offset))
        if not records:
            return
        yield from records
        offset = records[-1].offset + 1


class DistributedEventLog(EventLog):
    """EventLog over a LogTopic (appends) and an EventArchive (reads).

    `append` produces and returns once every in-sync replica has the records. The events
    get their stream sequences when the sequencer reaches them, so `Appended.seq` is 0,
    and `expected_seq` is checked then: a stale one ends as a rejected outcome
    (STALE_SEQUENCE), not as an error of the append. Duplicates are dropped the same way.
    """

    def __init__(self, topic: LogTopic, archive: EventArchive) -> None:
        self.topic = topic
        self.archive = archive

    def append(self, events: Sequence[Envelope]) -> list[Appended]:
        with telemetry.sending(events, system="kafka", destination=self.topic.name) as stamped:
            records = [
                (
                    record_key(e),
                    orjson.dumps(e.model_dump(mode="json", exclude_none=True)),
                    record_headers(e),
                )
                for e in stamped
            ]
            placed = self.topic.produce(records)
        return [
            Appended(e.event_id, encode_offset(c.partition, c.offset), 0, False)
            for e, c in zip(events, placed, strict=True)
        ]

    def read(self, after_offset: int, limit: int) -> list[LoggedEvent]:
        return self.archive.read(after_offset, limit)

    def read_stream(self, tenant: str, stream: str, from_seq: int, limit: int) -> list[LoggedEvent]:
        out = []
        for body in self.archive.read_stream(tenant, stream, from_seq, limit):
            env = Envelope.model_validate_json(body)
            out.append(LoggedEvent(offset=env.seq or 0, envelope=env))
        return out

    def read_stream_json(self, tenant: str, stream: str, from_seq: int, limit: int) -> list[bytes]:
        return self.archive.read_stream(tenant, stream, from_seq, limit)

    def read_tenant(self, tenant: str, after_offset: int, limit: int) -> list[LoggedEvent]:
        return self.archive.read(after_offset, limit, tenant)

    def read_tenant_back(
        self, tenant: str, before_offset: int | None, limit: int
    ) -> list[LoggedEvent]:
        return self.archive.read_back(before_offset, limit, tenant)

    def sealed_key_ids(self, tenant: str) -> set[str]:
        """The archive's reads lag the topic (unsequenced and unsettled events are not
        there yet), so the topic's records keyed by the tenant are read as well: every
        acknowledged append is there. Both are read whole (forgetting a tenant is rare)."""
        found = super().sealed_key_ids(tenant)
        found |= record_key_ids(
            tenant,
            (
                r.value
                for partition, end in sorted(self.topic.end_offsets().items())
                for r in _records(self.topic, partition, end)
                if r.key is not None and r.key.startswith(f"{tenant}:".encode())
            ),
        )
        return found

    def head(self) -> int:
        return self.archive.head()

    def stream_head(self, tenant: str, stream: str) -> int:
        return self.archive.stream_head(tenant, stream)

    def get(self, tenant: str, event_id: str) -> LoggedEvent | None:
        return self.archive.get(tenant, event_id)

    def caused_by(self, tenant: str, event_id: str) -> list[LoggedEvent]:
        return self.archive.caused_by(tenant, event_id)

    def close(self) -> None:
        self.topic.close()
        self.archive.close()
