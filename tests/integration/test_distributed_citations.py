"""Citations in the distributed mode, on a real Kafka broker and a real Cassandra node: one
context credits a memory once, whatever event ids its citations carry (a trusted producer
writing to the topic picks its own), and a citation sent right after the context was
assembled counts, though the registrar had not recorded the context yet.

The consumers' partition processors are driven in-process (tests/distributed_support)."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.distributed_support import Pump, distributed_settings, running_distributed

from mnemo.bootstrap import Platform
from mnemo.domain.errors import MnemoError, NotFound
from mnemo.domain.events import Actor, ActorKind, Envelope
from mnemo.domain.ids import new_event_id
from mnemo.domain.projection import OutcomeKind
from mnemo.service.app import RequestContext
from mnemo.service.context import ContextRequest, Feedback

CTX = RequestContext("acme", "agent")
S = "user:C1"


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    with running_distributed(distributed_settings(tmp_path / "data", partitions=2)) as built:
        yield built


def declared(platform: Platform, pump: Pump, content: str) -> str:
    result = platform.app.publish(
        CTX,
        [
            {
                "type": "MemoryDeclared",
                "schema_version": 1,
                "stream": S,
                "payload": {"memory": {"type": "fact", "content": content}},
            }
        ],
    )
    pump.drain()
    [outcome] = platform.app.outcome(CTX, result.accepted[0].event_id)
    assert outcome.memory_id is not None
    return outcome.memory_id


def assembled(platform: Platform, memory_id: str) -> str:
    ctx = platform.app.context(CTX, ContextRequest(subjects=(S,), budget=2_000))
    assert memory_id in [i.candidate.memory.memory_id for i in ctx.assembly.included]
    return ctx.request_id


def citation(request_id: str, memory_id: str, **extra: object) -> dict[str, object]:
    return {
        "type": "MemoryCited",
        "schema_version": 1,
        "stream": S,
        "payload": {"memory_id": memory_id, "request_id": request_id, "position": "beginning"},
        **extra,
    }


def cited(platform: Platform, memory_id: str) -> int:
    [stats] = platform.store.memory_stats("acme", [memory_id])
    return stats.cited


def weight(platform: Platform, memory_id: str) -> tuple[float, float]:
    memory = platform.store.get("acme", memory_id)
    assert memory is not None
    return memory.semantic_weight, memory.provenance.trust


def test_a_producer_repeating_a_citation_under_new_event_ids_credits_it_once(
    platform: Platform,
) -> None:
    pump = Pump(platform)
    memory_id = declared(platform, pump, "the customer's account manager is Li Na")
    request_id = assembled(platform, memory_id)
    pump.drain()
    before = weight(platform, memory_id)
    # a trusted producer writes straight to the topic: no gateway, its own event ids
    now = platform.runner.clock.now()
    envelopes = [
        Envelope(
            event_id=new_event_id(now),
            type="MemoryCited",
            schema_version=1,
            tenant="acme",
            stream=S,
            occurred_at=now,
            actor=Actor(kind=ActorKind.AGENT, id="ingest"),
            payload={"memory_id": memory_id, "request_id": request_id, "position": "beginning"},
        )
        for _ in range(4)
    ]
    assert len({e.event_id for e in envelopes}) == 4
    platform.log.append(envelopes)
    pump.drain()
    assert cited(platform, memory_id) == 1
    once = weight(platform, memory_id)
    assert once[0] > before[0]
    assert once[1] > before[1]
    outcomes = [platform.app.outcome(CTX, e.event_id) for e in envelopes]
    assert [[o.kind for o in found] for found in outcomes] == [
        [OutcomeKind.APPLIED],
        *[[OutcomeKind.DUPLICATE]] * 3,
    ]
    assert {o.reason_code for found in outcomes[1:] for o in found} == {"ALREADY_CITED"}
    # the gateway's path changes nothing more
    platform.app.publish(CTX, [citation(request_id, memory_id)])
    pump.drain()
    assert cited(platform, memory_id) == 1
    assert weight(platform, memory_id) == once


def test_a_citation_sent_right_after_assembly_counts(platform: Platform) -> None:
    pump = Pump(platform)
    memory_id = declared(platform, pump, "the customer prefers calls after 6 pm")
    request_id = assembled(platform, memory_id)
    # the registrar has not read the context yet
    assert platform.store.context_record("acme", request_id) is None
    sent = platform.app.publish(CTX, [citation(request_id, memory_id)])
    pump.drain()
    [outcome] = platform.app.outcome(CTX, sent.accepted[0].event_id)
    assert (outcome.kind, outcome.memory_id) == (OutcomeKind.APPLIED, memory_id)
    assert cited(platform, memory_id) == 1
    record = platform.store.context_record("acme", request_id)
    assert record is not None
    assert record.credited_by(memory_id) == sent.accepted[0].event_id
    # before the registrar reads the context, a citation of a memory it did not include,
    # or of no context at all, is taken and then refused with its reason
    other = declared(platform, pump, "the customer's second phone line is for work")
    request_2 = platform.app.context(
        CTX, ContextRequest(subjects=(S,), budget=2_000, query="account manager")
    ).request_id
    unknown = "019ad4f0-8000-7000-8000-0000000000c9"
    wrong = platform.app.publish(
        CTX, [citation(request_2, "019ad4f0-8000-7000-8000-000000000099"), citation(unknown, other)]
    )
    pump.drain()
    reasons = [
        [o.reason_code for o in platform.app.outcome(CTX, a.event_id)] for a in wrong.accepted
    ]
    assert reasons == [["CITATION_NOT_IN_CONTEXT"], ["CONTEXT_NOT_FOUND"]]
    assert cited(platform, other) == 0


def test_an_answer_reported_right_after_assembly_finds_its_context(platform: Platform) -> None:
    """The consumers record a context after the gateway assembled it: a report that comes
    before them waits, within its budget, for the registrar to pass what the log held
    when it came, instead of answering CONTEXT_NOT_FOUND for a context the log holds."""
    pump = Pump(platform)
    memory_id = declared(platform, pump, "the customer's invoices go to the Shanghai office")
    request_id = assembled(platform, memory_id)
    assert platform.store.context_record("acme", request_id) is None
    answers: list[object] = []

    def report() -> None:
        try:
            answers.append(
                platform.app.report(
                    CTX, request_id, f'Shanghai <memory_ref id="{memory_id}"/>', timeout=120
                )
            )
        except MnemoError as exc:
            answers.append(exc)

    reporter = threading.Thread(target=report)
    reporter.start()
    pump.drain()  # the consumers catch up while the report waits (or before it looks)
    reporter.join(180)
    assert not reporter.is_alive()
    [answer] = answers
    assert isinstance(answer, Feedback), answer
    assert answer.cited == [(memory_id, "end")]
    pump.drain()
    assert cited(platform, memory_id) == 1


def test_a_report_on_an_unknown_context_is_not_found_in_its_tenant(platform: Platform) -> None:
    pump = Pump(platform)
    memory_id = declared(platform, pump, "the customer renews in March")
    request_id = assembled(platform, memory_id)
    pump.drain()
    # another tenant's context, and ids no context was assembled under: 404 once the
    # registrar has passed what the log held (a recent id), or at once (an old one)
    waits: list[float] = []
    progress = platform.app.progress
    assert progress is not None
    caught_up = progress.caught_up

    def counted(timeout: float) -> bool:
        waits.append(timeout)
        return caught_up(timeout)

    progress.caught_up = counted  # type: ignore[method-assign]
    other = RequestContext("globex", "agent")
    recent = new_event_id(platform.runner.clock.now())
    old = "019ad4f0-8000-7000-8000-0000000000c9"  # 2025: recorded long ago, or never
    for ctx, rid in ((other, request_id), (CTX, recent), (CTX, old), (CTX, "not-an-id")):
        with pytest.raises(NotFound) as caught:
            platform.app.report(ctx, rid, "an answer")
        assert caught.value.code == "CONTEXT_NOT_FOUND"
    assert len(waits) == 2  # the recent ids waited for the registrar; the others did not
