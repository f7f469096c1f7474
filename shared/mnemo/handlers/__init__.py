"""Pure handlers: (state, event) -> events to emit and projection writes. No I/O here."""

from __future__ import annotations

from dataclasses import dataclass, field

from mnemo.domain.events import Actor, ActorKind, Envelope, EventPayload
from mnemo.domain.ids import derived_id
from mnemo.domain.projection import Write

__all__ = ["Decision", "emit"]


@dataclass
class Decision:
    """What a handler decided: events to append to the log and writes to project."""

    events: list[Envelope] = field(default_factory=list)
    writes: list[Write] = field(default_factory=list)

    def extend(self, other: Decision) -> None:
        self.events.extend(other.events)
        self.writes.extend(other.writes)


def emit(
    cause: Envelope,
    payload: EventPayload,
    consumer: str,
    *parts: str,
    stream: str | None = None,
) -> Envelope:
    """An event caused by `cause`, with an id derived from it so redelivery emits the same id.

    Event time is the cause's: a derived event happened when its cause did. It goes to the
    cause's stream unless `stream` names another one of the tenant (the id then derives
    from that stream too).
    """
    target = cause.stream if stream is None else stream
    extra = () if stream is None else (stream,)
    return Envelope(
        event_id=derived_id(
            cause.occurred_at, consumer, cause.event_id, payload.TYPE, *parts, *extra
        ),
        type=payload.TYPE,
        schema_version=payload.VERSION,
        tenant=cause.tenant,
        stream=target,
        occurred_at=cause.occurred_at,
        actor=Actor(kind=ActorKind.SYSTEM, id=consumer),
        causation_id=cause.event_id,
        correlation_id=cause.correlation_id or cause.event_id,
        trace=cause.trace,
        payload=payload.model_dump(mode="json"),
    )
