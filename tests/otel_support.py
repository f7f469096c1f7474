"""Test support for telemetry: in-memory span and metric exporters installed as Mnemo's
providers (never the global ones, so other tests run untraced), JSON log capture, and a
search for planted secrets in everything telemetry emitted."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from mnemo import telemetry

__all__ = ["Captured", "captured_telemetry", "leaks", "metric_points", "wait_for_spans"]


class _Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []
        self.setFormatter(telemetry.JsonFormatter())

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(self.format(record))


@dataclass
class Captured:
    spans: InMemorySpanExporter
    metrics: InMemoryMetricReader
    logs: _Lines
    extra: list[str] = field(default_factory=list)

    def finished(self) -> list[ReadableSpan]:
        return list(self.spans.get_finished_spans())


@contextmanager
def captured_telemetry() -> Iterator[Captured]:
    """Mnemo's spans, metrics and every log line (DEBUG and up, as JSON) while inside."""
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider()
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    reader = InMemoryMetricReader()
    meter_provider = MeterProvider(metric_readers=[reader])
    telemetry.install(tracer_provider, meter_provider)
    lines = _Lines()
    root = logging.getLogger()
    level = root.level
    root.addHandler(lines)
    root.setLevel(logging.DEBUG)
    try:
        yield Captured(spans, reader, lines)
    finally:
        root.removeHandler(lines)
        root.setLevel(level)
        telemetry.reset()
        tracer_provider.shutdown()
        meter_provider.shutdown()


def wait_for_spans(
    captured: Captured, found: Callable[[list[ReadableSpan]], bool], timeout: float = 30.0
) -> list[ReadableSpan]:
    """Poll until `found(spans)` (consumers end their spans on their own threads)."""
    deadline = time.monotonic() + timeout
    while True:
        spans = captured.finished()
        if found(spans):
            return spans
        if time.monotonic() > deadline:
            names = sorted({s.name for s in spans})
            raise AssertionError(f"the expected spans did not arrive; got {names}")
        time.sleep(0.02)


def metric_points(captured: Captured, name: str) -> list[Any]:
    """Every data point of one metric in a fresh collection."""
    data = captured.metrics.get_metrics_data()
    out: list[Any] = []
    if data is None:
        return out
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for metric in sm.metrics:
                if metric.name == name:
                    out.extend(metric.data.data_points)
    return out


def _texts(span: ReadableSpan) -> Iterable[str]:
    yield span.name
    for value in (span.attributes or {}).values():
        yield str(value)
    for event in span.events:
        yield event.name
        for value in (event.attributes or {}).values():
            yield str(value)
    for link in span.links:
        for value in (link.attributes or {}).values():
            yield str(value)
    if span.status.description:
        yield span.status.description


def leaks(captured: Captured, secrets: Sequence[str]) -> list[str]:
    """Where any secret shows up: a span's name, attribute, event or status, or a log line."""
    found = []
    for span in captured.finished():
        for text in _texts(span):
            found.extend(f"span {span.name!r}: {text!r}" for s in secrets if s in text)
    for line in captured.logs.lines:
        found.extend(f"log line: {line!r}" for s in secrets if s in line)
    return found
