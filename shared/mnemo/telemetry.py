"""Traces, metrics and structured logs (OpenTelemetry), kept out of the domain.

One event can be followed through the whole system: the gateway's request span, the
`send` span that appends it to the log (its context rides in the envelope's `trace`, and
so in the Kafka record's `traceparent` header), then each consumer's `process` spans with
their Cassandra, Qdrant and Vault calls as children.

- `configure(settings, role)` installs the providers of a process from the standard
  `OTEL_*` variables: OTLP export when `OTEL_EXPORTER_OTLP_ENDPOINT` (or a per-signal
  endpoint) is set, a Prometheus scrape port when `MNEMO_PROMETHEUS_PORT` is, and nothing
  at all otherwise (every span and instrument is then a no-op).
- `install(...)` puts given providers in place (tests hand in in-memory exporters);
  Mnemo's code asks this module, not the global API, for its tracer and meter.
- Helpers for the service layer and the adapters: `sending` (producer side), `consuming`
  and `handling` (consumer side), `committed` (events out and freshness),
  `instrument_cassandra`, `TracedVectorIndex`, `traced_vault`, `context_assembled`.

No span attribute, event or log field carries a payload value, a statement parameter, a
record key, a token or key material: only names, counts, offsets, ids and error types.
"""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, TypeVar

from opentelemetry import context as otel_context
from opentelemetry import metrics, trace
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.trace import Link, Span, SpanKind, StatusCode
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from mnemo import __version__
from mnemo.domain.events import Envelope, TraceContext
from mnemo.ports import Fusion, SparseVector, VectorFilter, VectorIndex, VectorPoint

if TYPE_CHECKING:
    from fastapi.telemetry import TelemetryConfig

__all__ = [
    "EMBEDDED_LOG",
    "JsonFormatter",
    "Parent",
    "TracedVectorIndex",
    "committed",
    "configure",
    "configure_logging",
    "consuming",
    "context_assembled",
    "context_assembly",
    "dead_lettered",
    "fastapi_config",
    "handling",
    "install",
    "instrument_cassandra",
    "instruments",
    "logging_config",
    "reset",
    "sending",
    "traced_vault",
    "tracer",
    "watch_lag",
]

SCOPE = "mnemo"
EMBEDDED_LOG = "log.sqlite3"  # how spans name the embedded mode's log
Parent = otel_context.Context  # a record's producer context, as `parent_of` gives it
_PROPAGATOR = TraceContextTextMapPropagator()
_MAX_LINKS = 128
_EVERYTHING = VectorFilter()
_FUSION = Fusion()
_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)
_TOKENS = (64, 128, 256, 512, 1_000, 2_000, 4_000, 8_000, 16_000, 32_000, 128_000)

log = logging.getLogger("mnemo.telemetry")

T = TypeVar("T")


# ---- providers ------------------------------------------------------------------------------


@dataclass
class Instruments:
    """Mnemo's metric instruments, made once per meter provider."""

    events_in: metrics.Counter
    events_out: metrics.Counter
    freshness: metrics.Histogram
    context_duration: metrics.Histogram
    context_tokens: metrics.Histogram
    context_truncated: metrics.Counter
    dead_letters: metrics.Counter
    vault_duration: metrics.Histogram


class _State:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.tracer_provider: trace.TracerProvider | None = None
        self.meter_provider: metrics.MeterProvider | None = None
        self.instruments: Instruments | None = None
        self.made_for: metrics.MeterProvider | None = None
        self.lag_sources: list[Callable[[], Mapping[str, Mapping[int, int]]]] = []
        self.owned: list[Any] = []


_state = _State()


def install(
    tracer_provider: trace.TracerProvider | None = None,
    meter_provider: metrics.MeterProvider | None = None,
) -> None:
    """Use these providers for Mnemo's spans and instruments (None: the global ones)."""
    with _state.lock:
        _state.tracer_provider = tracer_provider
        _state.meter_provider = meter_provider
        _state.instruments = None
        _state.made_for = None


def reset() -> None:
    """Back to the global providers, with no lag sources (tests)."""
    install(None, None)
    with _state.lock:
        _state.lag_sources.clear()


def _tracer_provider() -> trace.TracerProvider:
    return _state.tracer_provider or trace.get_tracer_provider()


def _meter_provider() -> metrics.MeterProvider:
    return _state.meter_provider or metrics.get_meter_provider()


def tracer() -> trace.Tracer:
    return _tracer_provider().get_tracer(SCOPE, __version__)


def fastapi_config() -> TelemetryConfig | None:
    """FastAPI's `telemetry=` argument: Mnemo's providers when installed here, else None
    (FastAPI then uses the global providers, which `configure` also sets)."""
    if _state.tracer_provider is None and _state.meter_provider is None:
        return None
    config: TelemetryConfig = {}
    if _state.tracer_provider is not None:
        config["tracer_provider"] = _state.tracer_provider
    if _state.meter_provider is not None:
        config["meter_provider"] = _state.meter_provider
    return config


def instruments() -> Instruments:
    provider = _meter_provider()
    with _state.lock:
        if _state.instruments is not None and _state.made_for is provider:
            return _state.instruments
        meter = provider.get_meter(SCOPE, __version__)
        made = Instruments(
            events_in=meter.create_counter(
                "mnemo.events.in", unit="{event}", description="Events appended to the log"
            ),
            events_out=meter.create_counter(
                "mnemo.events.out",
                unit="{event}",
                description="Events a consumer handled and committed",
            ),
            freshness=meter.create_histogram(
                "mnemo.freshness",
                unit="s",
                description="From an event's acceptance (or occurred_at) to the commit of "
                "its projection",
                explicit_bucket_boundaries_advisory=_SECONDS,
            ),
            context_duration=meter.create_histogram(
                "mnemo.context.duration",
                unit="s",
                description="Context assembly latency",
                explicit_bucket_boundaries_advisory=_SECONDS,
            ),
            context_tokens=meter.create_histogram(
                "mnemo.context.tokens",
                unit="{token}",
                description="Tokens of an assembled context",
                explicit_bucket_boundaries_advisory=_TOKENS,
            ),
            context_truncated=meter.create_counter(
                "mnemo.context.truncated",
                unit="{memory}",
                description="Memories cut or shortened to fit a context's budget",
            ),
            dead_letters=meter.create_counter(
                "mnemo.dead_letters",
                unit="{record}",
                description="Records sent to the dead-letter topic",
            ),
            vault_duration=meter.create_histogram(
                "mnemo.vault.duration",
                unit="s",
                description="Key vault call latency",
                explicit_bucket_boundaries_advisory=_SECONDS,
            ),
        )
        meter.create_observable_gauge(
            "mnemo.consumer.lag",
            callbacks=[_observe_lag],
            unit="{record}",
            description="Records a consumer still has to read, per partition",
        )
        _state.instruments = made
        _state.made_for = provider
        return made


def watch_lag(source: Callable[[], Mapping[str, Mapping[int, int]]]) -> Callable[[], None]:
    """Report `source()` ({consumer: {partition: records behind}}) as mnemo.consumer.lag;
    returns the call that stops it."""
    with _state.lock:
        _state.lag_sources.append(source)
    instruments()  # the gauge exists from now on

    def stop() -> None:
        with _state.lock:
            if source in _state.lag_sources:
                _state.lag_sources.remove(source)

    return stop


def _observe_lag(options: CallbackOptions) -> Iterator[Observation]:
    with _state.lock:
        sources = list(_state.lag_sources)
    for source in sources:
        try:
            lag = source()
        except Exception as exc:  # storage away: no observation this round
            log.debug("consumer lag not observed (%s)", type(exc).__name__)
            continue
        for consumer, partitions in sorted(lag.items()):
            for partition, behind in sorted(partitions.items()):
                yield Observation(
                    behind,
                    {
                        "mnemo.consumer": consumer,
                        "messaging.destination.partition.id": str(partition),
                    },
                )


# ---- configuration from the environment -----------------------------------------------------


def _endpoint(signal: str) -> bool:
    exporter = os.environ.get(f"OTEL_{signal}_EXPORTER", "otlp").strip().lower()
    if exporter == "none":
        return False
    return bool(
        os.environ.get(f"OTEL_EXPORTER_OTLP_{signal}_ENDPOINT")
        or os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT")
    )


def _grpc(signal: str) -> bool:
    protocol = os.environ.get(f"OTEL_EXPORTER_OTLP_{signal}_PROTOCOL") or os.environ.get(
        "OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf"
    )
    return protocol.strip().lower() == "grpc"


def configure(role: str, *, prometheus_port: int = 0, prometheus_host: str = "127.0.0.1") -> bool:
    """Install this process's providers from the environment; True when anything exports.

    Traces and metrics go by OTLP when an endpoint is set (`OTEL_EXPORTER_OTLP_ENDPOINT`,
    protocol `OTEL_EXPORTER_OTLP_PROTOCOL`, http/protobuf unless grpc); metrics are also
    served for Prometheus on `prometheus_port` when it is not 0. `OTEL_SDK_DISABLED=true`
    turns everything off. The service name is `OTEL_SERVICE_NAME` or `mnemo-<role>`."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return False
    traces, metric_export = _endpoint("TRACES"), _endpoint("METRICS")
    if not (traces or metric_export or prometheus_port):
        return False
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import MetricReader, PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import SERVICE_NAME, SERVICE_VERSION, Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    attributes: dict[str, str] = {SERVICE_VERSION: __version__, "mnemo.role": role}
    if not os.environ.get("OTEL_SERVICE_NAME"):
        attributes[SERVICE_NAME] = f"mnemo-{role}"
    resource = Resource.create(attributes)
    tracer_provider: TracerProvider | None = None
    if traces:
        if _grpc("TRACES"):
            from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
                OTLPSpanExporter as GrpcSpans,
            )

            span_exporter: Any = GrpcSpans()
        else:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

            span_exporter = OTLPSpanExporter()
        tracer_provider = TracerProvider(resource=resource)
        tracer_provider.add_span_processor(BatchSpanProcessor(span_exporter))
        trace.set_tracer_provider(tracer_provider)
    readers: list[MetricReader] = []
    if metric_export:
        if _grpc("METRICS"):
            from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import (
                OTLPMetricExporter as GrpcMetrics,
            )

            metric_exporter: Any = GrpcMetrics()
        else:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
                OTLPMetricExporter,
            )

            metric_exporter = OTLPMetricExporter()
        readers.append(PeriodicExportingMetricReader(metric_exporter))
    if prometheus_port:
        from opentelemetry.exporter.prometheus import PrometheusMetricReader
        from prometheus_client import start_http_server

        readers.append(PrometheusMetricReader())
        start_http_server(prometheus_port, prometheus_host)
    meter_provider: MeterProvider | None = None
    if readers:
        meter_provider = MeterProvider(metric_readers=readers, resource=resource)
        metrics.set_meter_provider(meter_provider)
    install(tracer_provider, meter_provider)
    _state.owned = [p for p in (tracer_provider, meter_provider) if p is not None]
    log.info(
        "telemetry: traces %s, metrics %s",
        "exported" if traces else "off",
        "exported" if readers else "off",
    )
    return True


def shutdown() -> None:
    """Flush and stop what `configure` started."""
    owned, _state.owned = _state.owned, []
    for provider in owned:
        try:
            provider.shutdown()
        except Exception:
            log.debug("telemetry shutdown failed", exc_info=True)


# ---- logs -----------------------------------------------------------------------------------


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the current trace and span
    ids when a span is recording, the event id, error code and setting a record carries,
    the exception's type and traceback when there is one."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "ts": datetime.fromtimestamp(record.created)
            .astimezone()
            .isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        span = trace.get_current_span().get_span_context()
        if span.is_valid:
            out["trace_id"] = format(span.trace_id, "032x")
            out["span_id"] = format(span.span_id, "016x")
        for field in ("event_id", "error_code", "setting"):
            value = getattr(record, field, None)
            if isinstance(value, str):
                out[field] = value
        if record.exc_info:
            out["exception"] = self.formatException(record.exc_info)
        return json.dumps(out, ensure_ascii=False)


class QuietRepeats(logging.Filter):
    """Lets one of a run of identical records through per `window` seconds, for the
    loggers of the Kafka client, which logs each failed reconnection (ten a second per
    connection while a broker is down). The next one let through says how many were held
    back since the one before it. Every other logger's records pass as they are."""

    PREFIXES = ("aiokafka",)

    def __init__(self, window: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.window = window
        self._clock = clock
        self._seen: dict[tuple[str, int, str], tuple[float, int]] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.name.startswith(self.PREFIXES):
            return True
        key = (record.name, record.levelno, record.getMessage())
        now = self._clock()
        with self._lock:
            if len(self._seen) > 1_000:
                self._seen.clear()
            last, held = self._seen.get(key, (float("-inf"), 0))
            if now - last < self.window:
                self._seen[key] = (last, held + 1)
                return False
            self._seen[key] = (now, 0)
        if held:
            record.msg = f"{record.msg} ({held} more like it held back since it was last logged)"
        return True


def logging_config(level: str, fmt: str = "json") -> dict[str, Any]:
    """A `logging.config.dictConfig` for the root logger at `level`, on stderr, as JSON
    lines (fmt="json") or plain text; faust's worker takes it too."""
    formatter: dict[str, Any] = (
        {"()": JsonFormatter}
        if fmt == "json"
        else {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}
    )
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"mnemo": formatter},
        "filters": {"repeats": {"()": QuietRepeats}},
        "handlers": {
            "stderr": {
                "class": "logging.StreamHandler",
                "formatter": "mnemo",
                "filters": ["repeats"],
            }
        },
        "root": {"level": level.upper(), "handlers": ["stderr"]},
        "loggers": {"cassandra": {"level": "ERROR"}},
    }


def configure_logging(level: str, fmt: str = "json") -> None:
    """The root logger at `level`, JSON lines (fmt="json") or plain text, on stderr."""
    import logging.config

    logging.config.dictConfig(logging_config(level, fmt))


# ---- the producer side ----------------------------------------------------------------------


def _trace_of(context: otel_context.Context | None = None) -> TraceContext | None:
    carrier: dict[str, str] = {}
    _PROPAGATOR.inject(carrier, context=context)
    parent = carrier.get("traceparent")
    if parent is None:
        return None
    return TraceContext(traceparent=parent, tracestate=carrier.get("tracestate") or None)


def _messaging(system: str, destination: str, operation: str) -> dict[str, Any]:
    return {
        "messaging.system": system,
        "messaging.destination.name": destination,
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
    }


@contextmanager
def sending(
    envelopes: Sequence[Envelope], *, system: str, destination: str
) -> Iterator[list[Envelope]]:
    """A PRODUCER span over appending `envelopes`; yields them with the span's context in
    `trace` where they carried none, so the consumers continue this trace. Counts
    mnemo.events.in by type once the append returned."""
    with tracer().start_as_current_span(
        f"send {destination}",
        kind=SpanKind.PRODUCER,
        attributes={
            **_messaging(system, destination, "send"),
            "messaging.batch.message_count": len(envelopes),
        },
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        stamp = _trace_of() if span.get_span_context().is_valid else None
        stamped = [
            e.model_copy(update={"trace": stamp}) if e.trace is None and stamp else e
            for e in envelopes
        ]
        try:
            yield stamped
        except BaseException as exc:
            _failed(span, exc)
            raise
    counter = instruments().events_in
    for kind, n in _by_type(envelopes).items():
        counter.add(n, {"mnemo.event.type": kind, "messaging.destination.name": destination})


def _by_type(envelopes: Sequence[Envelope]) -> dict[str, int]:
    out: dict[str, int] = {}
    for e in envelopes:
        out[e.type] = out.get(e.type, 0) + 1
    return out


def _failed(span: Span, exc: BaseException) -> None:
    """Mark a span failed by the exception's type only: its message may quote input."""
    span.set_attribute("error.type", type(exc).__qualname__)
    span.set_status(StatusCode.ERROR)


# ---- the consumer side ----------------------------------------------------------------------


def parent_of(
    trace_context: TraceContext | None = None, headers: Sequence[tuple[str, bytes]] = ()
) -> otel_context.Context | None:
    """The context a record or an envelope was produced in (W3C headers first, then the
    envelope's `trace`), or None when it carries none or an invalid one."""
    carrier: dict[str, str] = {}
    for name, value in headers:
        if name in ("traceparent", "tracestate"):
            carrier[name] = value.decode("ascii", "replace")
    if "traceparent" not in carrier and trace_context is not None:
        carrier["traceparent"] = trace_context.traceparent
        if trace_context.tracestate:
            carrier["tracestate"] = trace_context.tracestate
    if "traceparent" not in carrier:
        return None
    found = _PROPAGATOR.extract(carrier)
    if not trace.get_current_span(found).get_span_context().is_valid:
        return None
    return found


@dataclass
class Consumed:
    """A batch span and what its records' spans need to know."""

    span: Span
    base: dict[str, Any]


@contextmanager
def consuming(
    consumer: str,
    parents: Sequence[otel_context.Context | None],
    *,
    system: str,
    destination: str,
    partition: int | None = None,
    group: str | None = None,
) -> Iterator[Consumed]:
    """A CONSUMER span over one batch of records. It links every record's producer
    context; when all of them belong to one trace, it continues that trace (so a quiet
    system shows one event's path as one tree), else it starts its own."""
    base: dict[str, Any] = {
        **_messaging(system, destination, "process"),
        "mnemo.consumer": consumer,
    }
    if partition is not None:
        base["messaging.destination.partition.id"] = str(partition)
    if group is not None:
        base["messaging.consumer.group.name"] = group
    contexts = [trace.get_current_span(p).get_span_context() for p in parents if p is not None]
    links: list[Link] = []
    seen: set[tuple[int, int]] = set()
    for sc in contexts:
        if (sc.trace_id, sc.span_id) not in seen and len(links) < _MAX_LINKS:
            seen.add((sc.trace_id, sc.span_id))
            links.append(Link(sc))
    traces = {sc.trace_id for sc in contexts}
    common = (
        next(p for p in parents if p is not None)
        if len(traces) == 1 and (len(contexts) == len(parents))
        else otel_context.Context()
    )
    with tracer().start_as_current_span(
        f"process {destination}",
        context=common,
        kind=SpanKind.CONSUMER,
        links=links,
        attributes={**base, "messaging.batch.message_count": len(parents)},
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield Consumed(span, base)
        except BaseException as exc:
            if type(exc).__name__ != "NotReady":  # waiting for the registrar is no failure
                _failed(span, exc)
            raise


@contextmanager
def handling(
    batch: Consumed,
    envelope: Envelope,
    parent: otel_context.Context | None,
    *,
    offset: int | None = None,
) -> Iterator[Span]:
    """A span over one record's handling, a child of its producer's context: of the batch
    span when that continues the same trace, else of the record's own (with a link back
    to the batch)."""
    batch_context = batch.span.get_span_context()
    own = trace.get_current_span(parent).get_span_context() if parent is not None else None
    links: list[Link] = []
    if own is None or own.trace_id == batch_context.trace_id:
        context = None  # the batch span is current
    else:
        context = parent
        links.append(Link(batch_context))
    attributes: dict[str, Any] = {
        **batch.base,
        "messaging.message.id": envelope.event_id,
        "mnemo.event.type": envelope.type,
    }
    if offset is not None:
        attributes["messaging.kafka.offset"] = offset
    with tracer().start_as_current_span(
        f"process {batch.base['messaging.destination.name']}",
        context=context,
        kind=SpanKind.CONSUMER,
        links=links,
        attributes=attributes,
        record_exception=False,
        set_status_on_exception=False,
    ) as span:
        try:
            yield span
        except BaseException as exc:
            _failed(span, exc)
            raise


def committed(
    consumer: str,
    envelopes: Sequence[Envelope],
    accepted_at: Sequence[float | None] = (),
) -> None:
    """Count events a consumer committed (mnemo.events.out) and how long after their
    acceptance (the log's timestamp when known, else occurred_at) they were projected."""
    ins = instruments()
    now = time.time()
    for kind, n in _by_type(envelopes).items():
        ins.events_out.add(n, {"mnemo.consumer": consumer, "mnemo.event.type": kind})
    for i, e in enumerate(envelopes):
        at = accepted_at[i] if i < len(accepted_at) else None
        start = at if at is not None else e.occurred_at.timestamp()
        ins.freshness.record(
            max(0.0, now - start), {"mnemo.consumer": consumer, "mnemo.event.type": e.type}
        )


def dead_lettered(reasons: Sequence[str], destination: str) -> None:
    counter = instruments().dead_letters
    for reason in reasons:
        counter.add(1, {"error.type": reason, "messaging.destination.name": destination})


# ---- context assembly -----------------------------------------------------------------------


@contextmanager
def context_assembly() -> Iterator[Callable[[int, int], None]]:
    """A span and the latency of one context assembly; the caller reports tokens and
    truncations through the yielded function. (Template names are the tenant's words:
    they are not recorded.)"""
    started = time.perf_counter()
    with tracer().start_as_current_span(
        "mnemo.context.assemble",
        record_exception=False,
        set_status_on_exception=False,
    ) as span:

        def done(tokens: int, truncated: int) -> None:
            context_assembled(time.perf_counter() - started, tokens, truncated)
            span.set_attribute("mnemo.context.tokens", tokens)
            span.set_attribute("mnemo.context.truncated", truncated)

        try:
            yield done
        except BaseException as exc:
            _failed(span, exc)
            raise


def context_assembled(seconds: float, tokens: int, truncated: int) -> None:
    ins = instruments()
    ins.context_duration.record(seconds)
    ins.context_tokens.record(tokens)
    if truncated:
        ins.context_truncated.add(truncated)


# ---- Cassandra ------------------------------------------------------------------------------

_CQL = (
    (re.compile(r"^\s*SELECT\b.*?\bFROM\s+([\w.\"]+)", re.I | re.S), "SELECT"),
    (re.compile(r"^\s*INSERT\s+INTO\s+([\w.\"]+)", re.I), "INSERT"),
    (re.compile(r"^\s*UPDATE\s+([\w.\"]+)", re.I), "UPDATE"),
    (re.compile(r"^\s*DELETE\b.*?\bFROM\s+([\w.\"]+)", re.I | re.S), "DELETE"),
    (re.compile(r"^\s*TRUNCATE\s+(?:TABLE\s+)?([\w.\"]+)", re.I), "TRUNCATE"),
)
_CQL_VERB = re.compile(r"^\s*(BEGIN\s+\w*\s*BATCH|[A-Za-z]+)", re.I)


def cql_summary(text: str, keyspace: str | None = None) -> dict[str, str]:
    """db.operation.name, db.collection.name and db.namespace of a CQL statement, read
    from its text only (bound values are never looked at)."""
    for pattern, operation in _CQL:
        found = pattern.match(text)
        if found:
            name = found.group(1).replace('"', "")
            namespace, _, table = name.rpartition(".")
            out = {"db.operation.name": operation, "db.collection.name": table}
            if namespace or keyspace:
                out["db.namespace"] = namespace or keyspace or ""
            return out
    verb = _CQL_VERB.match(text)
    operation = " ".join(verb.group(1).upper().split()) if verb else "CQL"
    out = {"db.operation.name": "BATCH" if operation.endswith("BATCH") else operation}
    if keyspace:
        out["db.namespace"] = keyspace
    return out


def instrument_cassandra(session: Any) -> None:
    """CLIENT spans for every request a driver session sends inside a traced operation
    (requests with no current span, such as the driver's own follow-ups, are left out).
    Uses the driver's request-init hook; never records bound values."""
    session.add_request_init_listener(_cassandra_request)


def _statement(query: Any) -> tuple[str, str | None]:
    prepared = getattr(query, "prepared_statement", None)
    if prepared is not None:
        return str(getattr(prepared, "query_string", "") or ""), getattr(query, "keyspace", None)
    text = getattr(query, "query_string", None)
    if text is None and type(query).__name__ == "BatchStatement":
        return "BEGIN BATCH", getattr(query, "keyspace", None)
    return str(text or ""), getattr(query, "keyspace", None)


def _cassandra_request(future: Any, *_: Any) -> None:
    if not trace.get_current_span().get_span_context().is_valid:
        return
    text, keyspace = _statement(getattr(future, "query", None))
    attributes: dict[str, Any] = {
        "db.system.name": "cassandra",
        "db.system": "cassandra",
        **cql_summary(text, keyspace),
    }
    name = attributes["db.operation.name"]
    target = attributes.get("db.collection.name") or attributes.get("db.namespace")
    span = tracer().start_span(
        f"{name} {target}" if target else name, kind=SpanKind.CLIENT, attributes=attributes
    )
    ended = threading.Event()

    def finish(error: BaseException | None) -> None:
        if ended.is_set():  # later pages call back again
            return
        ended.set()
        host = getattr(future, "coordinator_host", None)
        if host:
            address, _, port = str(host).rpartition(":")
            span.set_attribute("server.address", address or str(host))
            if port.isdigit():
                span.set_attribute("server.port", int(port))
        if error is not None:
            _failed(span, error)
        span.end()

    future.add_callbacks(callback=lambda *_: finish(None), errback=finish)


# ---- Qdrant ---------------------------------------------------------------------------------


class TracedVectorIndex(VectorIndex):
    """A VectorIndex whose every call is a span: CLIENT for a Qdrant server, INTERNAL for
    the embedded shard. Attributes name the operation, collection and point counts; never
    vectors, tenants' memory ids or filters' values."""

    def __init__(self, inner: VectorIndex, *, collection: str, remote: bool) -> None:
        self.inner = inner
        self.collection = collection
        self.kind = SpanKind.CLIENT if remote else SpanKind.INTERNAL

    @contextmanager
    def _span(self, operation: str, **extra: Any) -> Iterator[None]:
        with tracer().start_as_current_span(
            f"{operation} {self.collection}",
            kind=self.kind,
            attributes={
                "db.system.name": "qdrant",
                "db.operation.name": operation,
                "db.collection.name": self.collection,
                **extra,
            },
            record_exception=False,
            set_status_on_exception=False,
        ) as span:
            try:
                yield
            except BaseException as exc:
                _failed(span, exc)
                raise

    def upsert(self, points: Sequence[VectorPoint]) -> None:
        with self._span("upsert", **{"db.operation.batch.size": len(points)}):
            self.inner.upsert(points)

    def delete(self, tenant: str, memory_ids: Sequence[str]) -> None:
        with self._span("delete", **{"db.operation.batch.size": len(memory_ids)}):
            self.inner.delete(tenant, memory_ids)

    def search(
        self, tenant: str, vector: list[float], limit: int, flt: VectorFilter = _EVERYTHING
    ) -> list[tuple[str, float]]:
        with self._span("query", **{"mnemo.limit": limit}):
            return self.inner.search(tenant, vector, limit, flt)

    def keyword_search(
        self, tenant: str, keywords: SparseVector, limit: int, flt: VectorFilter = _EVERYTHING
    ) -> list[tuple[str, float]]:
        with self._span("query", **{"mnemo.limit": limit, "mnemo.search": "keyword"}):
            return self.inner.keyword_search(tenant, keywords, limit, flt)

    def hybrid_search(
        self,
        tenant: str,
        vector: list[float] | None,
        keywords: SparseVector,
        limit: int,
        flt: VectorFilter = _EVERYTHING,
        fusion: Fusion = _FUSION,
    ) -> list[tuple[str, float]]:
        with self._span("query", **{"mnemo.limit": limit, "mnemo.search": "hybrid"}):
            return self.inner.hybrid_search(tenant, vector, keywords, limit, flt, fusion)

    def ids(self, tenant: str | None = None) -> list[str]:
        with self._span("scroll"):
            return self.inner.ids(tenant)

    def flush(self) -> None:
        with self._span("flush"):
            self.inner.flush()

    def optimize(self) -> None:
        with self._span("optimize"):
            self.inner.optimize()

    def clear(self) -> None:
        with self._span("clear"):
            self.inner.clear()

    def close(self) -> None:
        self.inner.close()


# ---- Vault ----------------------------------------------------------------------------------


class _TracedVault:
    """Times and traces every public call of a key vault; no argument or result (key ids,
    wrapped or plain keys, tokens) is ever recorded."""

    def __init__(self, inner: Any, system: str) -> None:
        self._inner = inner
        self._system = system

    def __getattr__(self, name: str) -> Any:
        found = getattr(self._inner, name)
        if name.startswith("_") or not callable(found):
            return found

        def call(*args: Any, **kwargs: Any) -> Any:
            attributes = {"mnemo.vault.system": self._system, "mnemo.vault.operation": name}
            started = time.perf_counter()
            outcome = "ok"
            with tracer().start_as_current_span(
                f"vault {name}",
                kind=SpanKind.CLIENT,
                attributes=attributes,
                record_exception=False,
                set_status_on_exception=False,
            ) as span:
                try:
                    return found(*args, **kwargs)
                except BaseException as exc:
                    outcome = type(exc).__qualname__
                    _failed(span, exc)
                    raise
                finally:
                    instruments().vault_duration.record(
                        time.perf_counter() - started, {**attributes, "mnemo.outcome": outcome}
                    )

        return call


def traced_vault(vault: T, system: str = "vault") -> T:
    """`vault` with every call traced and timed (mnemo.vault.duration)."""
    return _TracedVault(vault, system)  # type: ignore[return-value]
