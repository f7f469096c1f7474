"""The `mnemo` command: run the server, talk to it over HTTP, operate on a data directory.

Every command but `serve` and `admin` (offline) is a plain HTTP client of the gateway; the
use cases live in the service, never here. Exit codes: 0 done; 1 a local problem (an
unreadable file, malformed JSON, no data directory); 2 Mnemo rejected the request (or the
command line was wrong); 3 Mnemo could not be reached.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, NoReturn
from urllib.parse import quote

import click
import httpx
from rich.console import Console, Group
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from mnemo import __version__
from mnemo.client import MnemoClient, RetryPolicy
from mnemo.client._core import Call, shown_url
from mnemo.client.errors import MnemoAPIError, MnemoConnectionError
from mnemo.domain.access import MAX_KEY_SECONDS, redact
from mnemo.domain.errors import InvalidInput, KeyDestroyed, MnemoError, echoed
from mnemo.domain.ids import names_no_user, valid_stream
from mnemo.domain.memory import MemoryType, Scope
from mnemo.entrypoints import heap
from mnemo.settings import (
    MAX_CLIENT_TIMEOUT,
    GatewaySettings,
    MnemoSettings,
    check_client_values,
    check_embedded_environment,
    check_environment,
    check_setting_values,
)

if TYPE_CHECKING:
    from mnemo.bootstrap import Platform

__all__ = ["cli", "main"]

DEFAULT_URL = "http://127.0.0.1:8080"
EXIT_LOCAL = 1
EXIT_REJECTED = 2
EXIT_UNREACHABLE = 3
EXIT_AUDIT_BROKEN = 4
MAX_BATCH_BYTES = 512 * 1024  # keeps a batch well under the gateway's default body limit
TYPES = [t.value for t in MemoryType]
SCOPES = [s.value for s in Scope]
WAITS = ["none", "registered", "indexed"]
_BATCH_INDEX = re.compile(r"^events\[(\d+)\]")


# ---- errors ---------------------------------------------------------------------------------


class _Errors:
    """How this run shows its errors: as text, or with --json as one JSON object on stderr
    (set by the group's callback on every invocation)."""

    as_json = False


class CliError(click.ClickException):
    """A local problem for the user to read: printed as is on stderr, exit 1. With --json,
    stderr carries `{"error": {"code", "message", "field", "notes", "exit_code"}}` instead."""

    exit_code = EXIT_LOCAL
    code = "LOCAL_ERROR"
    field: str | None = None
    notes: tuple[str, ...] = ()

    def format_message(self) -> str:
        return "\n".join([self.message, *self.notes])

    def detail(self) -> str:
        """The message alone, without the code and field the text form puts around it."""
        return self.message

    def as_json(self) -> dict[str, Any]:
        return {
            "error": {
                "code": self.code,
                "message": self.detail(),
                "field": self.field,
                "notes": [n.strip() for n in self.notes],
                "exit_code": self.exit_code,
            }
        }

    def show(self, file: IO[Any] | None = None) -> None:
        if _Errors.as_json:
            text = json.dumps(self.as_json(), ensure_ascii=False)
            click.echo(text, file=file, err=file is None)
            return
        click.echo(self.format_message(), file=file, err=file is None)

    def extend(self, *notes: str) -> None:
        """More lines to show under the message."""
        self.notes = (*self.notes, *notes)


class BadUsage(CliError):
    """A wrong command line, shown as JSON with --json (click shows it as text): exit 1."""

    code = "USAGE_ERROR"


class Unreachable(CliError):
    """Mnemo could not be reached, or did not answer: exit 3."""

    exit_code = EXIT_UNREACHABLE
    code = "UNREACHABLE"


class ApiError(CliError):
    """Mnemo answered with an error: `error CODE: message (field)`, exit 2."""

    exit_code = EXIT_REJECTED

    def __init__(self, code: str, message: str, field: str | None = None) -> None:
        suffix = f" ({field})" if field else ""
        super().__init__(f"error {code}: {message}{suffix}")
        self.code = code
        self.field = field
        self._detail = message

    def detail(self) -> str:
        return self._detail


class LocalRefusal(ApiError):
    """A setting the client refused before sending anything (a URL, a key, a principal
    that cannot be sent): `error CODE: message`, exit 1."""

    exit_code = EXIT_LOCAL


# the setting that mends an error about the caller's own credentials
_SETTING_TO_CHECK = {
    "UNAUTHENTICATED": "MNEMO_API_KEY or --api-key",
    "ADMIN_ONLY": "MNEMO_ADMIN_TOKEN or --admin-token",
}


def api_error(error: MnemoAPIError) -> ApiError:
    """The SDK's error for the gateway's {"error": {"code", "message", "field"}} (or the
    bare HTTP status), as the CLI shows it; one about the caller's credentials names the
    setting that holds them."""
    message = error.message
    if error.code in _SETTING_TO_CHECK:
        message = f"{message} (check {_SETTING_TO_CHECK[error.code]})"
    if error.status == 0:  # refused by the client before anything was sent: a local problem
        return LocalRefusal(error.code, message, error.field)
    return ApiError(error.code, message, error.field)


# ---- the HTTP client ------------------------------------------------------------------------


@dataclass
class Api:
    """Mnemo's HTTP API as one tenant and principal see it: the SDK's client (one HTTP
    core for the SDK, the CLI and the sync client), sending each call once; the CLI shows
    what went wrong and exits rather than retrying behind the user's back."""

    url: str
    tenant: str | None
    principal: str | None
    timeout: float
    admin_token: str | None = None
    api_key: str | None = None
    transport: httpx.BaseTransport | None = None  # replaces the network (tests)
    _sdk: MnemoClient | None = None

    def client(self) -> MnemoClient:
        if self._sdk is None:
            extra = {"X-Mnemo-Admin-Token": self.admin_token} if self.admin_token else {}
            self._sdk = MnemoClient(
                self.url,
                tenant=self.tenant or None,
                principal=self.principal or None,
                api_key=self.api_key or None,
                headers=extra,
                timeout=self.timeout,
                retry=RetryPolicy(attempts=1),
                transport=self.transport,
            )
        return self._sdk

    def close(self) -> None:
        if self._sdk is not None:
            self._sdk.close()
            self._sdk = None

    def call(
        self,
        method: str,
        path: str,
        *,
        params: Mapping[str, Any] | None = None,
        body: Any = None,
        content: bytes | None = None,
    ) -> Any:
        """The decoded JSON answer; raises Unreachable (exit 3) or ApiError (exit 2).
        `content`: a raw body (a document) instead of JSON."""
        call: Call[Any] = Call(
            method,
            path,
            _as_is,
            params=params,
            body=body,
            content=content,
            content_type=None if content is None else "application/octet-stream",
        )
        try:
            return self.client().call(call)
        except MnemoConnectionError as exc:
            raise self._unreachable(exc.__cause__) from exc
        except MnemoAPIError as exc:
            if exc.code == "INVALID_RESPONSE":
                raise Unreachable(
                    f"{shown_url(self.url)} answered {exc.status} without JSON: is it Mnemo?"
                ) from exc
            raise api_error(exc) from exc

    def _unreachable(self, cause: BaseException | None) -> Unreachable:
        url = shown_url(self.url)  # never a password written into the URL
        if isinstance(cause, httpx.ConnectError | httpx.ConnectTimeout):
            return Unreachable(
                f"cannot reach Mnemo at {url} (is `mnemo serve` running? the address is "
                "MNEMO_URL or --url)"
            )
        if isinstance(cause, httpx.TimeoutException):
            return Unreachable(f"Mnemo at {url} did not answer within {self.timeout:g} s")
        return Unreachable(f"cannot talk to Mnemo at {url}: {redact(str(cause))}")


def _as_is(body: Any) -> Any:
    return body


def seg(value: str) -> str:
    """One path segment, escaped."""
    return quote(value, safe=":@")


def query_params(**values: Any) -> dict[str, Any]:
    """Query parameters without the ones left unset (None, False or empty)."""
    return {k: v for k, v in values.items() if v is not None and v is not False and v != ()}


# ---- output ---------------------------------------------------------------------------------


def make_console(*, stderr: bool = False) -> Console:
    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        console.width = 200  # piped: keep ids and values on one line
    return console


@dataclass
class State:
    """What every command gets: the API, the output mode and the consoles."""

    api: Api
    as_json: bool
    out: Console = field(default_factory=make_console)
    err: Console = field(default_factory=lambda: make_console(stderr=True))

    def emit_json(self, value: Any) -> None:
        click.echo(json.dumps(value, ensure_ascii=False, indent=2))

    def show(self, value: Any, render: Callable[[Any], Any]) -> None:
        """The raw JSON with --json, else what `render` makes of it (printed if not None)."""
        if self.as_json:
            self.emit_json(value)
            return
        rendered = render(value)
        if rendered is not None:
            self.out.print(rendered)


pass_state = click.make_pass_decorator(State)


def dumps(value: Any) -> str:
    """Compact JSON, non-ASCII text kept readable."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def echo_jsonl(value: Any) -> None:
    click.echo(dumps(value))


def table(*columns: str) -> Table:
    return Table(*columns, header_style="bold", show_lines=False)


# what a terminal would act on rather than show: C0 controls but line breaks and tabs, DEL,
# C1 controls (U+009B is a CSI of its own) and the bidirectional controls
_UNSHOWN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def shown(text: str) -> str:
    """Stored text as the terminal may print it: a control character (ESC starting an
    escape sequence that recolours, retitles or clears the terminal, a carriage return
    that overwrites the line) is written out as its escape (\\x1b), never sent as is."""
    return _UNSHOWN.sub(
        lambda m: (
            f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}"
        ),
        text,
    )


def add_row(target: Table, *values: Any) -> None:
    """A row of plain text: values are never read as rich markup, nor reach the terminal
    with control characters."""
    target.add_row(*(Text("" if v is None else shown(str(v))) for v in values))


def key_value(memory: Mapping[str, Any]) -> str:
    return f"{memory['key']}={memory['value']}" if memory.get("key") else ""


def memory_table(memories: Iterable[Mapping[str, Any]]) -> Table:
    t = table("memory", "type", "v", "status", "key=value", "content", "weight", "valid until")
    for m in memories:
        add_row(
            t,
            m["memory_id"],
            m["type"],
            m["version"],
            m["status"],
            key_value(m),
            m["content"],
            f"{m['semantic_weight']:.2f}",
            m.get("valid_until"),
        )
    return t


def fields_table(record: Mapping[str, Any]) -> Table:
    t = table("field", "value")
    for name, value in record.items():
        shown = value if value is None or isinstance(value, str) else dumps(value)
        add_row(t, name, shown)
    return t


def describe_outcome(outcome: Mapping[str, Any]) -> str:
    """`registered memory ID v1`, `ignored NO_RULE — detail`, ..."""
    parts = [str(outcome["outcome"])]
    if outcome.get("memory_id"):
        parts.append(f"memory {outcome['memory_id']}")
    if outcome.get("version") is not None:
        parts.append(f"v{outcome['version']}")
    if outcome.get("reason_code"):
        parts.append(str(outcome["reason_code"]))
    if outcome.get("detail"):
        parts.append(f"— {shown(str(outcome['detail']))}")
    return " ".join(parts)


def progress_bar(console: Console) -> Progress:
    """A progress bar on `console`, drawn only when it is a terminal."""
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not console.is_terminal,
    )


# ---- the command group -------------------------------------------------------------------


class _Mnemo(click.Group):
    """The command group, with the exit statuses the README gives: a command line that is
    wrong (an unknown option, options that do not go together) is a local problem, exit 1,
    not click's 2, which here means that Mnemo refused the request."""

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            exc.exit_code = EXIT_LOCAL
            # an unknown command is found before the group's own options take effect
            if _Errors.as_json or ctx.params.get("as_json"):
                _Errors.as_json = True
                raise BadUsage(exc.format_message()) from exc
            raise

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        _Errors.as_json = False  # until this invocation's --json is read
        given = list(args)  # the parser consumes the list it is handed
        try:
            return super().parse_args(ctx, args)
        except click.UsageError as exc:
            exc.exit_code = EXIT_LOCAL
            if "--json" in given:
                _Errors.as_json = True
                raise BadUsage(exc.format_message()) from exc
            raise


@click.group(
    cls=_Mnemo,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="mnemo")
@click.option(
    "--url", envvar="MNEMO_URL", default=DEFAULT_URL, show_default=True, help="Mnemo's address."
)
@click.option(
    "--api-key",
    envvar="MNEMO_API_KEY",
    default=None,
    help="The API key to send (Authorization: Bearer); it decides the tenant.",
)
@click.option(
    "--tenant",
    envvar="MNEMO_TENANT",
    default=None,
    help="Whose data; must be the API key's tenant (checked by the server) [default: the key's].",
)
@click.option(
    "--principal",
    envvar="MNEMO_PRINCIPAL",
    default=None,
    help="Who asks [default: the key's name].",
)
@click.option(
    "--timeout",
    envvar="MNEMO_TIMEOUT",
    type=click.FloatRange(min=0.1, max=MAX_CLIENT_TIMEOUT),
    default=60.0,
    show_default=True,
    help="Seconds to wait for an answer.",
)
@click.option(
    "--admin-token",
    envvar="MNEMO_ADMIN_TOKEN",
    default=None,
    help="The operator token, for online rebuilds and platform-wide counts.",
)
@click.option("--json", "as_json", is_flag=True, help="Print machine-readable JSON.")
@click.pass_context
def cli(
    ctx: click.Context,
    url: str,
    api_key: str | None,
    tenant: str | None,
    principal: str | None,
    timeout: float,
    admin_token: str | None,
    as_json: bool,
) -> None:
    """Mnemo: durable, governed, shared memory for AI agents.

    `mnemo serve` runs the server; the other commands talk to it over HTTP (MNEMO_URL).
    Exit codes: 1 local problem, 2 rejected by Mnemo, 3 Mnemo unreachable, 4 audit chain
    broken.
    """
    _Errors.as_json = as_json
    if as_json:  # what the commands log (an offline command's warnings) is JSON lines too
        configure_logging(_log_level() or "WARNING", "json")
        # at INFO httpx logs each request's URL: keys and a document's name cut out of it
        from mnemo.log_redaction import install_log_redaction

        install_log_redaction()
    api = Api(url.rstrip("/"), tenant, principal, timeout, admin_token, api_key)
    ctx.call_on_close(api.close)
    ctx.obj = State(api, as_json)


def main(args: Sequence[str] | None = None) -> None:
    """The console script's entry point; `args` defaults to the command line. A `MNEMO_*`
    variable that no setting reads, or a setting with a value it cannot take, stops it
    before anything starts, as every configuration error does (exit status 78, EX_CONFIG)."""
    try:
        check_environment()
        check_setting_values()
        check_client_values()
    except InvalidInput as exc:  # an unknown name, one set twice, or a value it cannot take
        given = list(args) if args is not None else sys.argv[1:]
        if "--json" in given:
            error = {"code": exc.code, "message": exc.message, "field": exc.field}
            click.echo(json.dumps({"error": {**error, "notes": [], "exit_code": 78}}), err=True)
        else:
            click.echo(
                f"Error: cannot start: configuration error {exc.code}: {exc.message}", err=True
            )
        sys.exit(78)
    cli.main(args=list(args) if args is not None else None, prog_name="mnemo")


# ---- serve ----------------------------------------------------------------------------------


def mnemo_settings(data_dir: Path | None) -> MnemoSettings:
    """The shared settings from the environment, with --data-dir over MNEMO_DATA_DIR."""
    return MnemoSettings() if data_dir is None else MnemoSettings(data_dir=data_dir)


def configure_logging(level: str, fmt: str = "text") -> None:
    from mnemo import telemetry

    try:
        telemetry.configure_logging(level, fmt)
    except ValueError as exc:
        raise CliError(f"invalid log level {level!r} (MNEMO_LOG_LEVEL)") from exc


def http_base(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """SIGTERM (docker stop, systemd) shuts the server down like Ctrl-C does."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


DATA_DIR_OPTION = click.option(
    "--data-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Embedded storage directory [default: MNEMO_DATA_DIR or var/data].",
)


def _log_level() -> str | None:
    """MNEMO_LOG_LEVEL for the client commands, its name in any case (as the settings read
    it; check_environment has refused it set twice)."""
    for name, value in os.environ.items():
        if name.upper() == "MNEMO_LOG_LEVEL":
            return value
    return None


def _cannot_start(exc: MnemoError) -> NoReturn:
    """A start refused. An error naming a setting is a configuration error: exit status 78
    (EX_CONFIG), as for the checks of main(), with the setting's name; anything else is a
    local problem (exit 1)."""
    if exc.field:
        click.echo(
            f"Error: cannot start: configuration error {exc.code} "
            f"(setting MNEMO_{exc.field.upper()}): {exc.message}",
            err=True,
        )
        sys.exit(78)
    raise CliError(f"cannot start: {exc.code}: {exc.message}") from exc


@cli.command()
@click.option("--host", default=None, help="Address [default: MNEMO_GATEWAY_HOST or 127.0.0.1].")
@click.option("--port", type=click.IntRange(1, 65_535), default=None, help="[default: 8080 or env]")
@DATA_DIR_OPTION
def serve(host: str | None, port: int | None, data_dir: Path | None) -> None:
    """Run Mnemo: the HTTP API and its consumers, on embedded storage. Ctrl-C stops it."""
    import uvicorn
    from mnemo_gateway.app import create_app

    from mnemo import telemetry
    from mnemo.bootstrap import build_embedded, check_setting_files

    settings = mnemo_settings(data_dir)
    gateway = GatewaySettings().model_copy(update=query_params(host=host, port=port))
    configure_logging(settings.log_level, settings.log_format)
    if settings.mode == "distributed":
        from mnemo.entrypoints.workers import run_gateway

        try:
            run_gateway(settings, gateway)
        except MnemoError as exc:
            raise CliError(f"cannot start: {exc.code}: {exc.message}") from exc
        return
    try:
        check_embedded_environment()
        check_setting_files(settings)
        platform = build_embedded(settings)
    except MnemoError as exc:
        _cannot_start(exc)
    except (ValueError, OSError) as exc:  # an unusable data directory
        raise CliError(f"cannot start: {exc}") from exc
    try:
        try:
            issued = platform.access.first_start()
        except MnemoError as exc:
            raise CliError(f"cannot start: {exc.code}: {exc.message}") from exc
        if issued is not None:
            # to the terminal only, never to a logger: the one time this key is shown
            click.echo(
                f"First start: created tenant {issued.record.tenant!r} and its admin API key "
                "(shown once, stored only hashed):\n\n"
                f"    {issued.key}\n\n"
                "Send it as `Authorization: Bearer <key>` (the CLI and SDK read MNEMO_API_KEY)."
            )
        telemetry.configure(
            "gateway", prometheus_port=settings.prometheus_port, prometheus_host=gateway.host
        )
        telemetry.watch_lag(lambda: {c: {0: n} for c, n in platform.runner.lag().items()})
        app = create_app(platform, gateway)
        base = http_base(gateway.host, gateway.port)
        click.echo(
            f"Mnemo listening on {base} — API docs at {base}/docs — console at "
            f"{base}/console — data in {settings.data_dir.resolve()}"
        )
        heap.settle()
        with sigterm_as_interrupt():
            uvicorn.run(
                app,
                host=gateway.host,
                port=gateway.port,
                log_level=settings.log_level.lower(),
                log_config=None if settings.log_format == "json" else uvicorn.config.LOGGING_CONFIG,
            )
    finally:
        telemetry.shutdown()
        platform.close()


# ---- publish ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SourcedEvent:
    """An event as read from a file, with where it came from (`file:line`)."""

    event: Any
    origin: str


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not valid JSON")


def _loads(text: str) -> Any:
    return json.loads(text, parse_constant=_reject_constant)


def parse_lines(text: str, name: str) -> list[SourcedEvent]:
    """JSON Lines: one event per line; blank lines are skipped."""
    events = []
    for lineno, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            events.append(SourcedEvent(_loads(line), f"{name}:{lineno}"))
        except ValueError as exc:
            raise CliError(f"{name}:{lineno}: not valid JSON: {exc}") from exc
    return events


def parse_document(text: str, name: str) -> list[SourcedEvent]:
    """One JSON document: an event, a list of events or {"events": [...]}."""
    try:
        value = _loads(text)
    except ValueError as exc:
        raise CliError(f"{name}: not valid JSON: {exc}") from exc
    if isinstance(value, dict) and isinstance(value.get("events"), list):
        value = value["events"]
    if isinstance(value, list):
        return [SourcedEvent(e, f"{name} (event {i})") for i, e in enumerate(value, 1)]
    if isinstance(value, dict):
        return [SourcedEvent(value, name)]
    raise CliError(f'{name}: expected an event object, a list of events or {{"events": [...]}}')


def parse_events(text: str, name: str) -> list[SourcedEvent]:
    if name.endswith(".jsonl"):
        return parse_lines(text, name)
    if name.endswith(".json"):
        return parse_document(text, name)
    try:  # stdin or another extension: one JSON document, else JSON Lines
        return parse_document(text, name)
    except CliError:
        return parse_lines(text, name)


def read_events(path: str, stream: str | None) -> list[SourcedEvent]:
    """The events of one file ("-" is stdin), `stream` filled in where one lacks it."""
    name = "<stdin>" if path == "-" else path
    try:
        with click.open_file(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise CliError(f"cannot read {name}: {exc}") from exc
    events = parse_events(text, name)
    if stream is None:
        return events
    return [
        SourcedEvent({**e.event, "stream": stream}, e.origin)
        if isinstance(e.event, dict) and e.event.get("stream") is None
        else e
        for e in events
    ]


def batches(events: Sequence[SourcedEvent], size: int) -> Iterator[list[SourcedEvent]]:
    """Consecutive batches of at most `size` events and about MAX_BATCH_BYTES."""
    batch: list[SourcedEvent] = []
    nbytes = 0
    for item in events:
        item_bytes = len(dumps(item.event).encode())
        if batch and (len(batch) >= size or nbytes + item_bytes > MAX_BATCH_BYTES):
            yield batch
            batch, nbytes = [], 0
        batch.append(item)
        nbytes += item_bytes
    if batch:
        yield batch


@dataclass
class Tally:
    """What publishing has achieved so far."""

    accepted: int = 0
    duplicates: int = 0
    outcomes: Counter[str] = field(default_factory=Counter)
    timed_out: int = 0  # batches whose wait ended before the consumers caught up
    results: list[dict[str, Any]] = field(default_factory=list)

    @property
    def sent(self) -> int:
        return self.accepted + self.duplicates

    def add(self, answer: Mapping[str, Any]) -> None:
        for item in answer["accepted"]:
            if item["duplicate"]:
                self.duplicates += 1
            else:
                self.accepted += 1
            self.outcomes.update(o["outcome"] for o in item.get("outcomes") or ())
            self.results.append(item)
        if not answer.get("complete", True):
            self.timed_out += 1

    def rejected(self) -> list[str]:
        """A line for each outcome registration rejected: the event and the reason."""
        lines = []
        for item in self.results:
            for o in item.get("outcomes") or ():
                if o["outcome"] == "rejected":
                    why = " ".join(x for x in (o.get("reason_code"), o.get("detail")) if x)
                    lines.append(f"  {item['event_id']}: {why or 'rejected'}")
        return lines

    def summary(self, wait: str) -> dict[str, Any]:
        body: dict[str, Any] = {"accepted": self.accepted, "duplicates": self.duplicates}
        if wait != "none":
            body["outcomes"] = dict(sorted(self.outcomes.items()))
            body["complete"] = self.timed_out == 0
        body["events"] = self.results
        return body


def where(batch: Sequence[SourcedEvent], field_path: str | None) -> str | None:
    """The file:line of the event an error's field names (`events[3].payload`)."""
    match = _BATCH_INDEX.match(field_path or "")
    if match is None or int(match.group(1)) >= len(batch):
        return None
    return batch[int(match.group(1))].origin


def send_batch(api: Api, batch: list[SourcedEvent], wait: str, tally: Tally) -> None:
    body = {"events": [e.event for e in batch]}
    try:
        tally.add(api.call("POST", "/v1/events", params={"wait": wait}, body=body))
    except ApiError as exc:
        origin = where(batch, exc.field)
        at = f"  at {origin}" if origin else f"  in the batch starting at {batch[0].origin}"
        exc.extend(at, accepted_before(tally))
        raise
    except CliError as exc:
        exc.extend(accepted_before(tally))
        raise


def accepted_before(tally: Tally) -> str:
    return f"  {tally.sent} events accepted before this batch stay accepted"


def show_tally(state: State, tally: Tally, wait: str) -> None:
    if state.as_json:
        state.emit_json(tally.summary(wait))
        return
    click.echo(
        f"published {tally.sent} events: {tally.accepted} accepted, {tally.duplicates} duplicates"
    )
    if wait != "none":
        counts = ", ".join(f"{k} {n}" for k, n in sorted(tally.outcomes.items()))
        click.echo(f"outcomes: {counts or 'none yet'}")
    if tally.timed_out:
        click.echo(
            f"the wait timed out for {tally.timed_out} batches; see `mnemo outcome EVENT_ID` later",
            err=True,
        )


@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(allow_dash=True))
@click.option("--stream", default=None, help="Stream for events that name none.")
@click.option("--wait", type=click.Choice(WAITS), default="none", show_default=True)
@click.option("--batch-size", type=click.IntRange(1, 1_000), default=100, show_default=True)
@pass_state
def publish(
    state: State, files: tuple[str, ...], stream: str | None, wait: str, batch_size: int
) -> None:
    """Publish the events of .json / .jsonl FILES ("-" reads stdin), in batches.

    With --wait registered or indexed, an accepted event that registration rejected makes
    it exit 2 (EVENTS_REJECTED, each such event named with its reason)."""
    events = [e for path in files for e in read_events(path, stream)]
    if not events:
        raise CliError("no events to publish")
    tally = Tally()
    try:
        with progress_bar(state.err) as bar:
            task = bar.add_task("publishing", total=len(events))
            for batch in batches(events, batch_size):
                send_batch(state.api, batch, wait, tally)
                bar.advance(task, len(batch))
    except KeyboardInterrupt:
        raise CliError(
            f"interrupted: {tally.sent} events were accepted (and maybe the batch in flight)"
        ) from None
    show_tally(state, tally, wait)
    refused = tally.rejected()
    if refused:
        # the events are in the log (publishing them again changes nothing); what a script
        # checks is that registration took them, so a rejection is Mnemo's refusal, exit 2
        error = ApiError(
            "EVENTS_REJECTED",
            f"{len(refused)} of the accepted events were rejected by registration; they stay "
            "in the log, see `mnemo outcome EVENT_ID`",
        )
        error.extend(*refused[:20])
        if len(refused) > 20:
            error.extend(f"  and {len(refused) - 20} more")
        raise error


@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--subject", default="tenant", show_default=True, help="The stream, or tenant-wide.")
@click.option("--wait", type=click.Choice(["none", "registered"]), default="registered")
@pass_state
def ingest(state: State, files: tuple[str, ...], subject: str, wait: str) -> None:
    """Ingest documents (PDF, DOCX, XLSX, Markdown, text): each section becomes a long_term
    memory and its entities answer `POST /v1/query` (docs/documents.md). A refused file
    stops the run; the files before it stay ingested."""
    done: list[dict[str, Any]] = []
    sizes = {path: Path(path).stat().st_size for path in files}
    try:
        with progress_bar(state.err) as bar:
            task = bar.add_task("ingesting", total=sum(sizes.values()) or 1)
            for path in files:
                data = Path(path).read_bytes()
                params = query_params(
                    subject=subject,
                    filename=Path(path).name,
                    wait=wait if wait != "none" else None,
                )
                try:
                    answer = state.api.call("POST", "/v1/documents", params=params, content=data)
                except ApiError as exc:
                    exc.extend(f"  in {path}", f"  {len(done)} files ingested before it")
                    raise
                done.append({"file": path, **answer})
                bar.advance(task, sizes[path])
    except KeyboardInterrupt:
        raise CliError(f"interrupted: {len(done)} files were ingested") from None
    if state.as_json:
        state.emit_json({"documents": done})
        return
    out = table("file", "document", "sections", "status")
    for d in done:
        add_row(out, d["file"], d["document_id"], d["sections"], d["status"])
    state.out.print(out)


def _json_argument(text: str, what: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise CliError(f"{what} is not JSON: {exc.msg} at character {exc.pos}") from None


def _conditions(values: tuple[str, ...], what: str) -> list[Any]:
    """Each value a JSON condition object or a JSON list of them, in the order given."""
    out: list[Any] = []
    for text in values:
        found = _json_argument(text, what)
        out.extend(found if isinstance(found, list) else [found])
    return out


@cli.command("query")
@click.argument("text", default="")
@click.option(
    "--where",
    "where",
    multiple=True,
    required=True,
    help='A condition as JSON, e.g. \'{"field": "party_a", "op": "eq", "value": "XX科技"}\', '
    "or a JSON list of them. Repeatable; conditions are ANDed per document.",
)
@click.option("--subject", "subjects", multiple=True, help="Repeatable; default: every document.")
@click.option("--limit", type=click.IntRange(1, 1_000), default=100, show_default=True)
@click.option(
    "--hits-limit",
    type=click.IntRange(1, 1_000),
    default=100,
    show_default=True,
    help="Sections shown per document (the answer's hits_total counts them all).",
)
@pass_state
def query_documents(
    state: State,
    text: str,
    where: tuple[str, ...],
    subjects: tuple[str, ...],
    limit: int,
    hits_limit: int,
) -> None:
    """Exact structured questions over ingested documents (`POST /v1/query`,
    docs/documents.md); TEXT, if given, ranks the exact result and never widens it."""
    body: dict[str, Any] = {
        "where": _conditions(where, "--where"),
        "limit": limit,
        "hits_limit": hits_limit,
    }
    if text:
        body["query"] = text
    if subjects:
        body["subjects"] = list(subjects)
    answer = state.api.call("POST", "/v1/query", body=body)
    if state.as_json:
        state.emit_json(answer)
        return
    out = table("document", "file", "place", "text")
    for d in answer["documents"]:
        for h in d["hits"]:
            place = " ".join(
                part
                for part in (
                    f"p.{h['page']}" if h.get("page") else "",
                    f"§{h['clause']}" if h.get("clause") else "",
                )
                if part
            )
            add_row(out, d["document_id"], d["filename"], place or "-", h["text"][:120])
    state.out.print(out)
    state.err.print(f"{answer['total']} documents match")


# ---- remember / declare -----------------------------------------------------------------


def declared_event(stream: str, memory: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": stream,
        "payload": {"memory": dict(memory)},
    }


def turn_event(
    stream: str, text: str, *, speaker: str | None, occurred_at: str | None
) -> dict[str, Any]:
    payload: dict[str, Any] = {"text": text, "kind": "turn"}
    if speaker is not None:
        payload["speaker"] = speaker
    event: dict[str, Any] = {
        "type": "ObservationRecorded",
        "schema_version": 2,
        "stream": stream,
        "payload": payload,
    }
    if occurred_at is not None:
        event["occurred_at"] = occurred_at
    return event


def publish_one(state: State, event: Mapping[str, Any]) -> None:
    """Publish one event, wait for its registration, print what became of it."""
    answer = state.api.call("POST", "/v1/events", params={"wait": "registered"}, body=event)
    state.show(answer, render_one)


def render_one(answer: Mapping[str, Any]) -> None:
    item = answer["accepted"][0]
    note = " (a duplicate)" if item["duplicate"] else ""
    click.echo(f"event {item['event_id']} at seq {item['seq']}{note}")
    for outcome in item.get("outcomes") or ():
        click.echo(f"  {describe_outcome(outcome)}")
    if not item.get("outcomes"):
        click.echo(f"  not registered yet; see `mnemo outcome {item['event_id']}`")


@cli.command()
@click.argument("text")
@click.option("--stream", required=True, help="The subject stream, e.g. user:U7892.")
@click.option(
    "--type",
    "memory_type",
    type=click.Choice(TYPES),
    default=None,
    help="Declare a memory of this type with TEXT as its content, instead of letting the "
    "registration rules read TEXT as an observation.",
)
@click.option(
    "--turn",
    is_flag=True,
    help="TEXT is a turn of a conversation: always kept as a history memory, and read by "
    "the rules too.",
)
@click.option("--speaker", default=None, help="With --turn: who said it.")
@click.option(
    "--at",
    "occurred_at",
    default=None,
    help="With --turn: when it was said (ISO 8601 with an offset), for imported conversations.",
)
@pass_state
def remember(
    state: State,
    text: str,
    stream: str,
    memory_type: str | None,
    turn: bool,
    speaker: str | None,
    occurred_at: str | None,
) -> None:
    """Record TEXT as an observation (or declare it with --type, or record a conversation
    turn with --turn) and show the outcome."""
    if (speaker is not None or occurred_at is not None) and not turn:
        raise click.UsageError("--speaker and --at go with --turn")
    if turn and memory_type is not None:
        raise click.UsageError("--turn and --type do not go together")
    if turn:
        event = turn_event(stream, text, speaker=speaker, occurred_at=occurred_at)
    elif memory_type is not None:
        event = declared_event(stream, {"type": memory_type, "content": text})
    else:
        event = {
            "type": "ObservationRecorded",
            "schema_version": 2,
            "stream": stream,
            "payload": {"text": text},
        }
    publish_one(state, event)


@cli.command()
@click.option("--stream", required=True, help="The subject stream, e.g. user:U7892.")
@click.option("--type", "memory_type", type=click.Choice(TYPES), required=True)
@click.option("--content", default="", help="What the memory says.")
@click.option("--key", default=None, help="A key; a newer value of a key supersedes the older.")
@click.option("--value", default=None, help="The key's value.")
@click.option("--scope", type=click.Choice(SCOPES), default=None)
@click.option("--ttl", type=click.IntRange(min=1), default=None, help="Seconds it stays valid.")
@click.option("--tag", "tags", multiple=True, help="A tag (repeatable).")
@click.option("--weight", type=float, default=None, help="Semantic weight, 0 to 0.99.")
@pass_state
def declare(
    state: State,
    stream: str,
    memory_type: str,
    content: str,
    key: str | None,
    value: str | None,
    scope: str | None,
    ttl: int | None,
    tags: tuple[str, ...],
    weight: float | None,
) -> None:
    """Declare a memory explicitly (a MemoryDeclared event) and show the outcome."""
    optional = {"key": key, "value": value, "scope": scope, "ttl_seconds": ttl}
    memory: dict[str, Any] = {"type": memory_type, "content": content}
    memory.update(query_params(**optional, semantic_weight=weight, tags=list(tags) or None))
    publish_one(state, declared_event(stream, memory))


# ---- reads ----------------------------------------------------------------------------------


@cli.command()
@click.argument("memory_id")
@pass_state
def get(state: State, memory_id: str) -> None:
    """One memory, every field."""
    state.show(state.api.call("GET", f"/v1/memories/{seg(memory_id)}"), fields_table)


def render_memories(answer: Mapping[str, Any]) -> Table | None:
    if not answer["memories"]:
        click.echo("no memories")
        return None
    return memory_table(answer["memories"])


@cli.command("list")
@click.argument("stream")
@click.option("--type", "types", multiple=True, type=click.Choice(TYPES))
@click.option("--scope", "scopes", multiple=True, type=click.Choice(SCOPES))
@click.option("--tag", "tags", multiple=True)
@click.option("--key", default=None)
@click.option("--include-expired", is_flag=True)
@click.option("--include-superseded", is_flag=True)
@click.option("--include-archived", is_flag=True, help="Also memories archived as unused.")
@click.option("--limit", type=click.IntRange(1, 1_000), default=100, show_default=True)
@click.option("--after", default=None, help="Cursor: the last memory id of the previous page.")
@pass_state
def list_memories(
    state: State,
    stream: str,
    types: tuple[str, ...],
    scopes: tuple[str, ...],
    tags: tuple[str, ...],
    key: str | None,
    include_expired: bool,
    include_superseded: bool,
    include_archived: bool,
    limit: int,
    after: str | None,
) -> None:
    """A subject stream's memories (live ones unless told otherwise)."""
    params = query_params(
        type=types,
        scope=scopes,
        tag=tags,
        key=key,
        include_expired=include_expired,
        include_superseded=include_superseded,
        include_archived=include_archived,
        limit=limit,
        after=after,
    )
    answer = state.api.call("GET", f"/v1/subjects/{seg(stream)}/memories", params=params)
    state.show(answer, render_memories)
    if not state.as_json and answer.get("next_after"):
        click.echo(f"more: mnemo list {stream} --after {answer['next_after']}", err=True)


@cli.command()
@click.argument("stream")
@click.argument("key")
@pass_state
def history(state: State, stream: str, key: str) -> None:
    """Every version of KEY in STREAM."""
    answer = state.api.call("GET", f"/v1/subjects/{seg(stream)}/history/{seg(key)}")
    state.show(answer, render_memories)


def render_hits(answer: Mapping[str, Any]) -> Table | None:
    if not answer["hits"]:
        click.echo("no hits")
        return None
    t = table("#", "score", "memory", "stream", "type", "key=value", "content")
    for rank, hit in enumerate(answer["hits"], 1):
        m = hit["memory"]
        row = (m["memory_id"], m["stream"], m["type"], key_value(m), m["content"])
        add_row(t, rank, f"{hit['score']:.4f}", *row)
    return t


@cli.command()
@click.argument("query")
@click.option("--subject", "subjects", multiple=True, help="A stream to search (repeatable).")
@click.option("--type", "types", multiple=True, type=click.Choice(TYPES))
@click.option("--scope", "scopes", multiple=True, type=click.Choice(SCOPES))
@click.option("--tag", "tags", multiple=True)
@click.option("--limit", type=click.IntRange(1, 100), default=10, show_default=True)
@click.option(
    "--timezone",
    default=None,
    help="IANA zone (e.g. Asia/Shanghai) the query's 'yesterday' is read in [default: UTC].",
)
@pass_state
def search(
    state: State,
    query: str,
    subjects: tuple[str, ...],
    types: tuple[str, ...],
    scopes: tuple[str, ...],
    tags: tuple[str, ...],
    limit: int,
    timezone: str | None,
) -> None:
    """Hybrid (semantic + keyword) search over memories."""
    body: dict[str, Any] = {
        "query": query,
        "subjects": list(subjects),
        "types": list(types),
        "scopes": list(scopes),
        "tags": list(tags),
        "limit": limit,
    }
    if timezone is not None:
        body["timezone"] = timezone
    state.show(state.api.call("POST", "/v1/search", body=body), render_hits)


def render_context(answer: Mapping[str, Any]) -> None:
    click.echo(answer["context"])
    click.echo(
        f"{answer['tokens']} of {answer['budget']} tokens, {len(answer['included'])} memories, "
        f"{len(answer['left_out'])} left out",
        err=True,
    )
    for conflict in answer.get("conflicts") or []:
        kept = conflict.get("kept_text") or conflict.get("kept")
        dropped = conflict.get("dropped_text") or conflict.get("dropped")
        click.echo(
            f"conflict: kept {kept!r} over {dropped!r} ({conflict.get('why') or 'incompatible'}; "
            f"by {conflict.get('decided_by') or 'rule'})",
            err=True,
        )


@cli.command()
@click.argument("query", default="")
@click.option("--subject", "subjects", multiple=True, required=True, help="Repeatable.")
@click.option("--budget", type=click.IntRange(16, 200_000), default=1_000, show_default=True)
@click.option("--template", default="default", show_default=True, help="name of a template")
@click.option("--template-version", type=click.IntRange(1), default=None, help="latest if absent")
@click.option("--tokenizer", default=None, help="an encoding or a model name")
@click.option(
    "--allow-constraint-drop", is_flag=True, help="else a constraint that does not fit fails"
)
@click.option("--include-history", is_flag=True, help="also render superseded versions")
@click.option(
    "--history",
    type=click.Choice(["facts", "facts_only", "raw"]),
    default="facts",
    show_default=True,
    help="typed facts in place of the turns they summarise, the facts alone, or the raw turns",
)
@click.option(
    "--as-of",
    type=click.DateTime(["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S.%f%z"]),
    default=None,
    help="ISO 8601 with an offset, e.g. 2025-03-01T23:30:00+08:00 [default: now].",
)
@click.option(
    "--timezone",
    default=None,
    help="IANA zone (e.g. Asia/Shanghai) the query's 'yesterday' is read in "
    "[default: --as-of's offset, else UTC].",
)
@click.option(
    "--where",
    "where",
    multiple=True,
    metavar="SECTION=JSON",
    help="Conditions (a JSON condition or list, as `mnemo query --where`) for a template "
    "section filled from a structured query, replacing the template's own. Repeatable.",
)
@pass_state
def context(
    state: State,
    query: str,
    subjects: tuple[str, ...],
    budget: int,
    template: str,
    template_version: int | None,
    tokenizer: str | None,
    allow_constraint_drop: bool,
    include_history: bool,
    history: str,
    as_of: datetime.datetime | None,
    timezone: str | None,
    where: tuple[str, ...],
) -> None:
    """The context for an LLM call within a token budget (--json: the whole answer)."""
    body: dict[str, Any] = {
        "subjects": list(subjects),
        "query": query,
        "budget": budget,
        "template": template,
        "allow_constraint_drop": allow_constraint_drop,
        "include_history": include_history,
        "history": history,
    }
    if template_version is not None:
        body["template_version"] = template_version
    if tokenizer is not None:
        body["tokenizer"] = tokenizer
    if as_of is not None:
        body["as_of"] = as_of.isoformat()
    if timezone is not None:
        body["timezone"] = timezone
    if where:
        sections: dict[str, list[Any]] = {}
        for item in where:
            name, sep, text = item.partition("=")
            if not sep or not name.strip():
                raise CliError(f"--where {item!r}: expected SECTION=JSON")
            sections.setdefault(name.strip(), []).extend(
                _conditions((text,), f"--where {name.strip()}")
            )
        body["where"] = sections
    state.show(state.api.call("POST", "/v1/context", body=body), render_context)


# ---- events ---------------------------------------------------------------------------------


@cli.command()
@click.argument("stream")
@click.option("--from-seq", type=click.IntRange(min=1), default=1, show_default=True)
@click.option("--limit", type=click.IntRange(1, 10_000), default=1_000, show_default=True)
@click.option("--all", "all_pages", is_flag=True, help="Page on until the end of the stream.")
@pass_state
def replay(state: State, stream: str, from_seq: int, limit: int, all_pages: bool) -> None:
    """A stream's events from a sequence number, as JSON Lines."""
    path = f"/v1/subjects/{seg(stream)}/events"
    seq = from_seq
    while True:
        page = state.api.call("GET", path, params={"from_seq": seq, "limit": limit})
        for event in page["events"]:
            echo_jsonl(event)
        if not all_pages or len(page["events"]) < limit:
            return
        seq = int(page["next"])


def pause(seconds: float) -> None:
    time.sleep(seconds)


@cli.command()
@click.option("--after-offset", type=click.IntRange(min=0), default=0, show_default=True)
@click.option("--follow", "-f", is_flag=True, help="Keep polling for new events; Ctrl-C stops.")
@click.option("--limit", type=click.IntRange(1, 1_000), default=100, show_default=True)
@click.option("--interval", type=click.FloatRange(min=0.05), default=0.5, show_default=True)
@pass_state
def tail(state: State, after_offset: int, follow: bool, limit: int, interval: float) -> None:
    """The tenant's events after a log offset, as JSON Lines."""
    offset = after_offset
    try:
        while True:
            page = state.api.call(
                "GET", "/v1/events", params={"after_offset": offset, "limit": limit}
            )
            for event in page["events"]:
                echo_jsonl(event)
            offset = int(page["next"])
            if len(page["events"]) < limit:
                if not follow:
                    return
                pause(interval)
    except KeyboardInterrupt:
        return


def render_outcomes(outcomes: Sequence[Mapping[str, Any]]) -> None:
    if not outcomes:
        click.echo("no outcome yet (the event is unknown, or not registered yet)")
    for outcome in outcomes:
        click.echo(describe_outcome(outcome))


@cli.command()
@click.argument("event_id")
@pass_state
def outcome(state: State, event_id: str) -> None:
    """What registration made of an event."""
    state.show(state.api.call("GET", f"/v1/events/{seg(event_id)}/outcome"), render_outcomes)


def render_status(status: Mapping[str, Any]) -> Group:
    if status["mode"] == "distributed":
        return render_distributed_status(status)
    head = int(status["log_head"])
    running = "running" if status["consumers_running"] else "STOPPED"
    click.echo(f"Mnemo ({status['mode']}): log head {head}, consumers {running}")
    consumers = table("consumer", "position", "lag")
    for name, lag in sorted(status["lag"].items()):
        add_row(consumers, name, head - int(lag), lag)
    if "counts" not in status:  # platform-wide counts are for operators (--admin-token)
        return Group(consumers)
    counts = table("read model", "rows")
    for name, count in sorted(status["counts"].items()):
        add_row(counts, name, count)
    return Group(consumers, counts)


def render_distributed_status(status: Mapping[str, Any]) -> Group:
    def known(value: Any) -> Any:
        return "unknown" if value is None else value

    if "log_head" in status:
        click.echo(
            f"Mnemo (distributed): topic {status.get('topic')}, {known(status.get('log_head'))} "
            f"records, {known(status.get('dead_letters'))} dead letters"
        )
    else:  # the log's size and the processes are for operators (--admin-token)
        click.echo("Mnemo (distributed)")
    if status.get("error"):
        click.echo(f"the lag could not be read: {status['error']}")
    if status.get("holders_error"):
        click.echo(f"the partitions' holders could not be read: {status['holders_error']}")
    if status.get("counts_error"):
        click.echo(f"the read-model counts could not be read: {status['counts_error']}")
    components = table("component", "health", "lag", "behind partitions")
    lag = status.get("lag", {})
    partitions = status.get("partitions", {})
    for name, health in status.get("components", {}).items():
        behind = sorted(p for p, n in partitions.get(name, {}).items() if int(n) > 0)
        add_row(components, name, health, lag.get(name, "-"), ",".join(behind) or "-")
    shown: list[Table] = [components]
    if status.get("holders"):
        # one row per process holding partitions of a consumer: its replicas at work
        holders = table("consumer", "process (host/pid)", "partitions")
        for name, held in status["holders"].items():
            for process, parts in sorted(held.items(), key=lambda kv: kv[1]):
                add_row(holders, name, process, ",".join(str(p) for p in parts))
        shown.append(holders)
    if status.get("services"):
        services = table("service", "state")
        for name, state in status["services"].items():
            add_row(services, name, state)
        shown.append(services)
    if "counts" in status:
        counts = table("read model", "rows")
        for name, count in sorted(status["counts"].items()):
            add_row(counts, name, count)
        shown.append(counts)
    return Group(*shown)


@cli.command()
@pass_state
def status(state: State) -> None:
    """Consumers' positions and lag, read-model counts."""
    state.show(state.api.call("GET", "/v1/admin/status"), render_status)


# ---- tool results and suggested tool calls ---------------------------------------------------


def json_option(text: str | None, name: str) -> Any:
    if text is None:
        return None
    try:
        return _loads(text)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}", param_hint=name) from None


@cli.group()
def tool() -> None:
    """Tool results as memories, and the tool calls memories suggest."""


@tool.command("record")
@click.option("--stream", required=True, help="The subject stream, e.g. user:C42.")
@click.option("--tool", "tool_name", required=True, help="The tool's name, e.g. crm.get_deal.")
@click.option("--result", "result", required=True, help="The tool's result, as JSON.")
@click.option("--source", required=True, help="The system the result came from.")
@click.option(
    "--fresh-for", type=click.IntRange(min=1), required=True, help="Seconds it stays fresh."
)
@click.option("--arguments", default=None, help="The call's arguments, a JSON object.")
@click.option("--fetched-at", default=None, help="ISO 8601 with an offset [default: now].")
@click.option("--key", default=None, help="The memory key [default: tool.<name>.<digest>].")
@click.option("--trigger-id", default=None, help="The suggestion's trigger id it answers.")
@click.option("--trigger-memory", default=None, help="The suggestion's memory id it answers.")
@pass_state
def tool_record(
    state: State,
    stream: str,
    tool_name: str,
    result: str,
    source: str,
    fresh_for: int,
    arguments: str | None,
    fetched_at: str | None,
    key: str | None,
    trigger_id: str | None,
    trigger_memory: str | None,
) -> None:
    """Record a tool call's result (POST /v1/tool-results) and show what became of it."""
    if (trigger_id is None) != (trigger_memory is None):
        raise click.UsageError("--trigger-id and --trigger-memory go together")
    body: dict[str, Any] = {
        "stream": stream,
        "tool": tool_name,
        "result": json_option(result, "--result"),
        "source": source,
        "fresh_for_seconds": fresh_for,
        "arguments": json_option(arguments, "--arguments") or {},
    }
    body.update(query_params(fetched_at=fetched_at, key=key))
    if trigger_id is not None:
        body["trigger"] = {"trigger_id": trigger_id, "memory_id": trigger_memory}
    answer = state.api.call("POST", "/v1/tool-results", params={"wait": "registered"}, body=body)

    def render(found: Mapping[str, Any]) -> None:
        click.echo(f"event {found['event_id']}")
        for outcome in found.get("outcomes") or ():
            click.echo(f"  {describe_outcome(outcome)}")

    state.show(answer, render)


@tool.command("suggestions")
@click.argument("stream")
@click.option("--as-of", default=None, help="ISO 8601 with an offset [default: now].")
@pass_state
def tool_suggestions(state: State, stream: str, as_of: str | None) -> None:
    """The tool calls the operators' triggers suggest for STREAM's memories."""
    answer = state.api.call(
        "GET", f"/v1/subjects/{seg(stream)}/suggestions", params=query_params(as_of=as_of)
    )

    def render(found: Mapping[str, Any]) -> Table | None:
        if not found["suggestions"]:
            click.echo("no suggested tool calls")
            return None
        rows = table("trigger", "tool", "arguments", "memory", "age (s)")
        for s in found["suggestions"]:
            memory = f"{s['memory_id']} v{s['memory_version']}"
            add_row(rows, s["trigger_id"], s["tool"], dumps(s["arguments"]), memory,
                    s["age_seconds"])  # fmt: skip
        return rows

    state.show(answer, render)


# ---- mcp ------------------------------------------------------------------------------------


@cli.command("mcp")
@click.pass_context
def mcp_stdio(ctx: click.Context) -> None:
    """Serve Mnemo to an MCP client over stdio, as --tenant and --principal (default: mcp).

    A thin adapter: every tool call is a request to the Mnemo at --url. MNEMO_API_KEY, when
    set, is sent as a bearer token. Logs go to stderr (MNEMO_LOG_LEVEL, default WARNING).
    """
    import anyio

    from mnemo.entrypoints.mcp_server import Identity, run_stdio
    from mnemo.log_redaction import install_log_redaction

    api = ctx.ensure_object(State).api
    group = ctx.parent
    defaulted = group is not None and group.get_parameter_source("principal") in (
        click.core.ParameterSource.DEFAULT,
        None,
    )
    key = api.api_key
    identity = Identity(
        tenant=api.tenant,
        principal="mcp" if defaulted else api.principal,
        authorization=f"Bearer {key}" if key else None,
    )
    configure_logging(_log_level() or "WARNING")
    # httpx logs each API call's URL (a document's file name, a key pasted as an id)
    install_log_redaction()
    anyio.run(lambda: run_stdio(api.url, identity, timeout=api.timeout))


# ---- admin ----------------------------------------------------------------------------------


@contextmanager
def offline_platform(data_dir: Path | None) -> Iterator[Platform]:
    """The embedded platform on a data directory no server is running on, closed after."""
    from mnemo.bootstrap import build_embedded

    settings = mnemo_settings(data_dir)
    if settings.mode == "distributed" and data_dir is None:
        # the deployment's data is in Kafka and Cassandra, not under MNEMO_DATA_DIR
        raise CliError(
            "MNEMO_MODE is distributed, and this command works offline on an embedded data "
            "directory (--data-dir). The distributed read models are rebuilt by running the "
            "consumers as fresh groups into a fresh keyspace (docs/distributed.md, "
            "'Rebuilding read models')"
        )
    if not (settings.data_dir / "log.sqlite3").is_file():
        raise CliError(f"no Mnemo data in {settings.data_dir} (see --data-dir, MNEMO_DATA_DIR)")
    try:
        platform = build_embedded(settings)
    except MnemoError as exc:
        hint = " (is a server running on it?)" if exc.code.endswith("UNAVAILABLE") else ""
        raise CliError(f"cannot open {settings.data_dir}: {exc.code}: {exc.message}{hint}") from exc
    try:
        yield platform
    finally:
        platform.close()


def rebuild_offline(platform: Platform, console: Console) -> str:
    from mnemo.entrypoints.admin import rebuild_read_models

    with progress_bar(console) as bar:
        task = bar.add_task("rebuilding", total=platform.log.head() or None)

        def advance(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        return rebuild_read_models(platform, advance)


@cli.group()
def admin() -> None:
    """Operations on a whole platform."""


@admin.command("rebuild")
@DATA_DIR_OPTION
@click.option("--online", is_flag=True, help="Ask the running server (--url) to rebuild.")
@pass_state
def admin_rebuild(state: State, data_dir: Path | None, online: bool) -> None:
    """Drop the read models and rebuild them from the log.

    Offline (the default) on a data directory the server must not be running on; with
    --online, by the server itself.
    """
    if online and data_dir is not None:
        raise click.UsageError("--data-dir is for offline rebuilds; --online uses --url")
    started = time.perf_counter()
    if online:
        answer = state.api.call("POST", "/v1/admin/rebuild")
        checksum, head = str(answer["checksum"]), int(answer["log_head"])
    else:
        with offline_platform(data_dir) as platform:
            checksum, head = rebuild_offline(platform, state.err), platform.log.head()
    seconds = round(time.perf_counter() - started, 3)
    if state.as_json:
        state.emit_json({"checksum": checksum, "log_head": head, "seconds": seconds})
        return
    click.echo(f"rebuilt the read models from {head} events in {seconds:.2f} s")
    click.echo(f"checksum {checksum}")


@admin.command("migrate")
@pass_state
def admin_migrate(state: State) -> None:
    """Distributed mode: create the Cassandra keyspace when missing and apply the versioned
    CQL migrations of schemas/cql (idempotent; run it from one process, before the rest)."""
    from mnemo.adapters.cassandra_store import migrate
    from mnemo.bootstrap import connect_store, tenant_keyspaces

    settings = MnemoSettings()
    configure_logging(settings.log_level, "json" if state.as_json else "text")
    try:
        store = connect_store(settings)
    except MnemoError as exc:
        raise CliError(f"cannot migrate: {exc.code}: {exc.message}") from exc
    try:
        keyspaces = [store.home]
        own = tenant_keyspaces(settings)
        for tenant in filter(
            None, (t.strip() for t in settings.cassandra_tenant_keyspaces.split(","))
        ):
            if own is not None:
                keyspaces.append(store.keyspace_of(tenant))
        # connecting (and naming a tenant's keyspace) applied what a keyspace lacked: all
        # of it, to one that was new
        applied = {
            ks: sorted({*store.applied.get(ks, []), *migrate(store.session, ks)})
            for ks in dict.fromkeys(keyspaces)
        }
    finally:
        store.close()
    if state.as_json:
        state.emit_json({"keyspaces": applied})
    else:
        for ks, versions in applied.items():
            click.echo(f"{ks}: {'applied ' + str(versions) if versions else 'up to date'}")


@admin.command("create-topics")
@pass_state
def admin_create_topics(state: State) -> None:
    """Distributed mode: create the event log topic (kept forever) and its dead-letter
    topic with the configured partitions, when missing (idempotent)."""
    from mnemo.bootstrap import dead_letter_topic
    from mnemo.entrypoints.workers import ensure_topics_from

    settings = MnemoSettings()
    try:
        created = ensure_topics_from(settings)
    except MnemoError as exc:
        if exc.field:  # a configuration error: exit 78 with the setting's name
            _cannot_start(exc)
        raise CliError(f"cannot create the topics: {exc.code}: {exc.message}") from exc
    except RuntimeError as exc:
        raise CliError(str(exc)) from exc
    names = [settings.kafka_topic, dead_letter_topic(settings)]
    if state.as_json:
        state.emit_json({"topics": names, "created": created})
    else:
        for name in names:
            click.echo(f"{name}: {'created' if name in created else 'exists'}")


@admin.group("tenant")
def admin_tenant() -> None:
    """Tenants: created by an operator, each with its first admin key."""


def show_issued(state: State, answer: Mapping[str, Any]) -> None:
    """A key just made: its secret is in this output and nowhere else."""
    if state.as_json:
        state.emit_json(answer)
        return
    click.echo(f"key {answer['key']}")
    click.echo(
        f"  id {answer['key_id']} of tenant {answer['tenant']}, name {answer['name']}, "
        f"scopes {' '.join(answer['scopes'])}, expires {answer['expires_at'] or 'never'}"
    )
    click.echo("  shown once: Mnemo keeps only a hash of it")


def _admin_key_options(key_name: str, verb: str) -> Callable[[Any], Any]:
    """The options of a command that issues a tenant's admin key: its name, its lifetime,
    and the data directory to write to instead of asking over HTTP."""

    def apply(command: Any) -> Any:
        for option in reversed(
            (
                click.option("--key-name", default="admin", show_default=True, help=key_name),
                click.option(
                    "--ttl",
                    type=click.IntRange(min=60, max=MAX_KEY_SECONDS),
                    default=None,
                    help="Seconds the key is valid.",
                ),
                click.option(
                    "--data-dir",
                    type=click.Path(file_okay=False, path_type=Path),
                    default=None,
                    help=f"{verb} in this data directory instead of over HTTP (no operator "
                    "token needed).",
                ),
            )
        ):
            command = option(command)
        return command

    return apply


@admin_tenant.command("create")
@click.argument("tenant")
@_admin_key_options("Name of its admin key.", "Create it")
@pass_state
def admin_tenant_create(
    state: State, tenant: str, key_name: str, ttl: int | None, data_dir: Path | None
) -> None:
    """Create TENANT and its first admin key (every scope).

    Over HTTP this needs the operator token (--admin-token); with --data-dir it writes to
    the embedded data directory directly (a running server sees it at once)."""
    if data_dir is None:
        body: dict[str, Any] = {"tenant": tenant, "admin_key_name": key_name}
        if ttl is not None:
            body["ttl_seconds"] = ttl
        show_issued(state, state.api.call("POST", "/v1/admin/tenants", body=body))
        return
    from datetime import timedelta

    from mnemo.bootstrap import open_access
    from mnemo.domain.access import ALL_SCOPES

    if not data_dir.is_dir():
        raise CliError(f"no Mnemo data in {data_dir} (see --data-dir)")
    access = open_access(mnemo_settings(data_dir))
    try:
        access.create_tenant(tenant, by="cli")
        expires = access.clock.now() + timedelta(seconds=ttl) if ttl else None
        issued = access.issue_key(
            tenant, key_name, [s.value for s in ALL_SCOPES], by="cli", expires_at=expires
        )
    except MnemoError as exc:
        raise ApiError(exc.code, exc.message, exc.field) from exc
    finally:
        access.store.close()
    show_issued(state, {**issued.record.public(), "key": issued.key})


@admin_tenant.command("key")
@click.argument("tenant")
@_admin_key_options("Name of the new key.", "Issue it")
@pass_state
def admin_tenant_key(
    state: State, tenant: str, key_name: str, ttl: int | None, data_dir: Path | None
) -> None:
    """Issue a new admin key (every scope) of an existing TENANT.

    The way back for a tenant whose admin keys were all revoked or expired. Over HTTP this
    needs the operator token (--admin-token); with --data-dir it writes to the embedded data
    directory directly."""
    if data_dir is None:
        body: dict[str, Any] = {"name": key_name}
        if ttl is not None:
            body["ttl_seconds"] = ttl
        show_issued(
            state, state.api.call("POST", f"/v1/admin/tenants/{seg(tenant)}/keys", body=body)
        )
        return
    from datetime import timedelta

    from mnemo.bootstrap import make_key_vault, open_access

    if not data_dir.is_dir():
        raise CliError(f"no Mnemo data in {data_dir} (see --data-dir)")
    settings = mnemo_settings(data_dir)
    access = open_access(settings)
    try:
        # as over HTTP: a forgotten tenant gets no key, since every use of it answers 410
        if make_key_vault(settings).is_destroyed(tenant):
            raise KeyDestroyed(
                f"tenant {tenant!r} was forgotten (its keys destroyed); it is issued no key"
            )
        expires = access.clock.now() + timedelta(seconds=ttl) if ttl else None
        issued = access.recovery_key(tenant, key_name, by="cli", expires_at=expires)
    except MnemoError as exc:
        raise ApiError(exc.code, exc.message, exc.field) from exc
    finally:
        access.store.close()
    show_issued(state, {**issued.record.public(), "key": issued.key})


@admin.group("key")
def admin_key() -> None:
    """A tenant's API keys, managed with an admin key (--api-key)."""


def key_tenant(state: State) -> str:
    """--tenant, or the tenant of the API key in use."""
    if state.api.tenant:
        return state.api.tenant
    return str(state.api.call("GET", "/v1/whoami")["tenant"])


def render_keys(answer: Mapping[str, Any]) -> Table:
    t = table("key id", "name", "scopes", "created", "expires", "revoked")
    for k in answer["keys"]:
        add_row(
            t,
            k["key_id"],
            k["name"],
            " ".join(k["scopes"]),
            k["created_at"],
            k["expires_at"] or "never",
            k["revoked_at"] or "",
        )
    return t


@admin_key.command("create")
@click.option("--name", required=True, help="Who will use it; the default actor of its events.")
@click.option(
    "--scope",
    "scopes",
    multiple=True,
    required=True,
    type=click.Choice(["memory:write", "memory:read", "context", "audit:read", "admin"]),
    help="A scope (repeatable).",
)
@click.option(
    "--ttl",
    type=click.IntRange(min=60, max=MAX_KEY_SECONDS),
    default=None,
    help="Seconds it is valid.",
)
@click.option(
    "--tool",
    "tools",
    multiple=True,
    help="Limit the key to recording results of this tool (repeatable; absent: any tool).",
)
@pass_state
def admin_key_create(
    state: State, name: str, scopes: tuple[str, ...], ttl: int | None, tools: tuple[str, ...]
) -> None:
    """Issue a key of the tenant; it is printed once."""
    body: dict[str, Any] = {"name": name, "scopes": list(scopes)}
    if ttl is not None:
        body["ttl_seconds"] = ttl
    if tools:
        body["tools"] = list(tools)
    tenant = key_tenant(state)
    show_issued(state, state.api.call("POST", f"/v1/tenants/{seg(tenant)}/keys", body=body))


@admin_key.command("list")
@pass_state
def admin_key_list(state: State) -> None:
    """The tenant's keys (ids, names, scopes, expiry, revocation; never a secret)."""
    tenant = key_tenant(state)
    state.show(state.api.call("GET", f"/v1/tenants/{seg(tenant)}/keys"), render_keys)


@admin_key.command("revoke")
@click.argument("key_id")
@pass_state
def admin_key_revoke(state: State, key_id: str) -> None:
    """Revoke a key of the tenant, at once."""
    tenant = key_tenant(state)
    answer = state.api.call("DELETE", f"/v1/tenants/{seg(tenant)}/keys/{seg(key_id)}")
    if state.as_json:
        state.emit_json(answer)
    else:
        click.echo(f"revoked key {answer['key_id']} ({answer['name']}) at {answer['revoked_at']}")
        if answer.get("issued_active"):
            click.echo(
                "  keys it issued are still active (revoke them too if they should stop): "
                + " ".join(answer["issued_active"])
            )


@admin.command("checksum")
@DATA_DIR_OPTION
@pass_state
def admin_checksum(state: State, data_dir: Path | None) -> None:
    """The digest of every read model and the vector index, computed offline."""
    from mnemo.entrypoints.admin import platform_checksum

    with offline_platform(data_dir) as platform:
        checksum = platform_checksum(platform)
    if state.as_json:
        state.emit_json({"checksum": checksum})
    else:
        click.echo(checksum)


# ---- audit ----------------------------------------------------------------------------------


class AuditBroken(CliError):
    """The audit hash chain is broken: exit 4."""

    exit_code = EXIT_AUDIT_BROKEN
    code = "AUDIT_BROKEN"


@cli.group()
def audit() -> None:
    """The tenant's hash-chained audit trail."""


@audit.command("verify")
@DATA_DIR_OPTION
@pass_state
def audit_verify(state: State, data_dir: Path | None) -> None:
    """Check the tenant's audit chains (one per stream) against the log, and the chains
    against their signed checkpoints; print OK, or what is wrong with its code.

    With --data-dir, offline on a data directory no server runs on; else the running
    server (--url) checks it. Exit code 4 when the trail is broken or its signatures
    cannot be checked (AUDIT_SIGNER_UNAVAILABLE): only a verified trail passes.
    """
    if data_dir is not None:
        from mnemo.service.app import RequestContext
        from mnemo.service.insights import Insights

        if state.api.tenant is None:
            raise CliError("--tenant (or MNEMO_TENANT) names whose audit trail to verify")
        with offline_platform(data_dir) as platform:
            status = Insights(
                platform.log,
                platform.store,
                platform.app.clock,
                checkpoints=platform.checkpoints,
                signer=platform.signer,
                anchors=platform.anchors,
            ).audit(RequestContext(state.api.tenant, state.api.principal or "cli"))
            answer: dict[str, Any] = {
                "status": status.status,
                "code": status.code,
                "links": status.links,
                "pending": status.pending,
                "first_broken": status.first_broken,
                "stream": status.stream,
                "streams": status.streams,
                "reason": status.reason,
                "head_hash": status.head_hash,
                "checkpoints": status.checkpoints,
                "signed": status.signed,
                "unsigned": status.unsigned,
                "anchored": status.anchored,
            }
    else:
        answer = state.api.call("GET", "/v1/insights/audit")
    passed = answer["status"] in ("intact", "empty")
    if state.as_json:
        state.emit_json(answer)
    elif passed:
        links = int(answer["links"])
        # over HTTP the key says whose trail it is, and --tenant may be left out
        whose = f"tenant {state.api.tenant}" if state.api.tenant else "the key's tenant"
        head = answer.get("head_hash") or "-"
        streams = int(answer.get("streams") or 0)
        click.echo(
            f"OK: {links} links in {streams} stream chains intact for "
            f"{whose} (heads digest {head}); {int(answer.get('signed') or 0)} "
            f"links under {int(answer.get('checkpoints') or 0)} signed checkpoints, "
            f"{int(answer.get('unsigned') or 0)} not yet signed"
        )
    if not passed:
        where = answer.get("first_broken")
        code = answer.get("code") or "AUDIT_CHAIN_BROKEN"
        if answer["status"] == "broken":
            raise AuditBroken(
                f"BROKEN: first broken link {where if where is not None else '?'} ({code}): "
                f"{answer.get('reason')}"
            )
        raise AuditBroken(f"UNVERIFIED ({code}): {answer.get('reason')}")


# ---- keys -----------------------------------------------------------------------------------


@cli.group()
def keys() -> None:
    """The tenant's encryption keys in the vault."""


@keys.command("rotate")
@click.option("--stream", default=None, help="A user stream with a key of its own (user:<id>).")
@click.option(
    "--rewrap",
    is_flag=True,
    help="Also move the data keys stored in the read models to the new version.",
)
@DATA_DIR_OPTION
@pass_state
def keys_rotate(state: State, stream: str | None, rewrap: bool, data_dir: Path | None) -> None:
    """Start a new version of the tenant's key (or a user's): new values are sealed with it,
    everything sealed before still opens, so nothing stops. Servers pick it up when their
    cached data key expires (MNEMO_DATA_KEY_TTL).

    Uses MNEMO_VAULT_ADDR and MNEMO_VAULT_TOKEN; without them, the development key file of
    the data directory (a server running on it keeps its keys: every change to the file is
    made under a lock, on the file as it is then).

    With --rewrap, the memories' stored data keys are then rewrapped under the new version,
    page by page (progress on stderr), while reads go on: through the server (an admin
    key: POST /v1/admin/keys/rotate, then /v1/admin/keys/rewrap), or, with --data-dir, on
    that data directory with no server running on it. Events in the log keep their version.
    """
    if rewrap:
        _rotate_and_rewrap(state, stream, data_dir)
        return
    from mnemo.bootstrap import load_security_policy, make_key_vault
    from mnemo.sealing import KeyCache, Sealer

    settings = mnemo_settings(data_dir)
    tenant = state.api.tenant
    if tenant is None:
        raise CliError("--tenant (or MNEMO_TENANT) names whose key to rotate")
    if not settings.vault_addr and not settings.data_dir.is_dir():
        # the development key file lives in a data directory: never make one here
        raise CliError(
            f"no Mnemo data in {settings.data_dir} (see --data-dir or MNEMO_DATA_DIR, or "
            "MNEMO_VAULT_ADDR for a vault)"
        )
    if stream is not None and (not valid_stream(stream) or names_no_user(stream)):
        raise ApiError("INVALID_STREAM", f"{echoed(stream)} is not a user stream", "stream")
    try:
        vault = make_key_vault(settings)
        sealer = Sealer(KeyCache(vault, 0.0), load_security_policy(settings.pii_policy_file))
        key_id = sealer.key_id(tenant, stream) if stream else tenant
        if stream and key_id == tenant:
            raise CliError(f"{stream} has no key of its own: rotate the tenant's key instead")
        if vault.is_destroyed(key_id):
            raise KeyDestroyed(f"key {key_id} was destroyed (forgotten): it has no new version")
        if not vault.has_key(key_id):  # rotating makes no key for a tenant or user unknown here
            raise ApiError(
                "KEY_NOT_FOUND",
                f"there is no key {echoed(key_id)}: nothing is sealed under it yet",
                "stream" if stream else "tenant",
            )
        version = sealer.keys.rotate(key_id)
    except KeyDestroyed as exc:
        raise ApiError(exc.code, exc.message) from exc
    except MnemoError as exc:
        raise CliError(f"cannot rotate: {exc.code}: {exc.message}") from exc
    if state.as_json:
        state.emit_json({"key_id": key_id, "key_version": version})
    else:
        click.echo(f"key {key_id} is now at version {version}")


def _rotate_and_rewrap(state: State, stream: str | None, data_dir: Path | None) -> None:
    """Rotate, then rewrap every page, offline (data_dir) or through the server."""
    from mnemo.service import keys

    body: dict[str, Any] = {"stream": stream} if stream else {}
    if data_dir is not None:
        tenant = state.api.tenant
        if tenant is None:
            raise CliError("--tenant (or MNEMO_TENANT) names whose key to rotate")
        with offline_platform(data_dir) as platform:
            app = platform.app
            principal = state.api.principal or "cli"

            def rotate() -> dict[str, Any]:
                key_id, version = keys.rotate(app, tenant, stream)
                return {"key_id": key_id, "key_version": version}

            def page(after: str | None) -> dict[str, Any]:
                done = keys.rewrap_page(app, tenant, principal, stream, after)
                return {"rewrapped": done.rewrapped, "scanned": done.scanned, "next": done.next}

            try:
                answer = _rewrap_all(rotate, page)
            except MnemoError as exc:
                raise CliError(f"cannot rotate: {exc.code}: {exc.message}") from exc
            platform.runner.drain()  # registration applies the rewrapped keys before closing
    else:
        answer = _rewrap_all(
            lambda: state.api.call("POST", "/v1/admin/keys/rotate", body=body),
            lambda after: state.api.call(
                "POST", "/v1/admin/keys/rewrap", body={**body, "after": after}
            ),
        )
    if state.as_json:
        state.emit_json(answer)
    else:
        click.echo(
            f"key {answer['key_id']} is now at version {answer['key_version']}; "
            f"{answer['rewrapped']} of {answer['scanned']} memories rewrapped"
        )


def _rewrap_all(
    rotate: Callable[[], dict[str, Any]], page: Callable[[str | None], dict[str, Any]]
) -> dict[str, Any]:
    rotated = rotate()
    rewrapped = scanned = 0
    after: str | None = None
    while True:
        done = page(after)
        rewrapped += int(done["rewrapped"])
        scanned += int(done["scanned"])
        click.echo(f"rewrapping: {rewrapped} of {scanned} memories so far", err=True)
        after = done.get("next")
        if not after:
            break
    return {**rotated, "rewrapped": rewrapped, "scanned": scanned}


# ---- toolchains (docs/toolchains.md) ----------------------------------------------------


def render_toolchain(state: Mapping[str, Any]) -> Group:
    click.echo(
        f"toolchain {state['toolchain_id']} ({state['subject']}): {state['status']}, "
        f"next step: {state['next_step'] or '-'}, expires {state['expires_at']}"
    )
    steps: Table = table("step", "status", "output or error")
    done = {d["step_id"]: d for d in state["done"]}
    failed = state.get("failed") or {}
    for step_id in state["steps"]:
        if step_id in done:
            add_row(steps, step_id, "done", json.dumps(done[step_id]["output"], ensure_ascii=False))
        elif failed.get("step_id") == step_id:
            error = failed["error"]
            retry = "retryable" if error["retryable"] else "not retryable"
            why = f"{error['type']}: {error['reason']} ({retry}, attempt {failed['attempts']})"
            add_row(steps, step_id, "failed", why)
        else:
            add_row(steps, step_id, "next" if step_id == state["next_step"] else "pending", "")
    return Group(steps)


def _json_value(text: str) -> Any:
    raw = sys.stdin.read() if text == "-" else text
    try:
        return json.loads(raw, parse_constant=_no_constant)
    except ValueError as exc:
        raise CliError(f"the output is not JSON: {exc}") from exc


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


@cli.group()
def toolchain() -> None:
    """Toolchains: planned tool calls that resume where they stopped."""


@toolchain.command("start")
@click.argument("toolchain_id")
@click.option("--subject", required=True, help="The stream it acts for, e.g. user:U7892.")
@click.option("--step", "steps", multiple=True, required=True, help="A planned step, in order.")
@click.option("--ttl", type=click.IntRange(min=1), default=None, help="Seconds [default: a day].")
@pass_state
def toolchain_start(
    state: State, toolchain_id: str, subject: str, steps: tuple[str, ...], ttl: int | None
) -> None:
    """Start a toolchain of planned steps."""
    body: dict[str, Any] = {"toolchain_id": toolchain_id, "subject": subject, "steps": list(steps)}
    if ttl is not None:
        body["ttl_seconds"] = ttl
    state.show(state.api.call("POST", "/v1/toolchains", body=body), render_toolchain)


@toolchain.command("done")
@click.argument("toolchain_id")
@click.argument("step_id")
@click.argument("output")
@pass_state
def toolchain_done(state: State, toolchain_id: str, step_id: str, output: str) -> None:
    """Record that a step completed with OUTPUT (JSON; `-` reads it from stdin)."""
    body = {"status": "completed", "output": _json_value(output)}
    path = f"/v1/toolchains/{seg(toolchain_id)}/steps/{seg(step_id)}"
    state.show(state.api.call("POST", path, body=body), render_toolchain)


@toolchain.command("failed")
@click.argument("toolchain_id")
@click.argument("step_id")
@click.option("--type", "error_type", required=True, help="A code: timeout, validation...")
@click.option("--reason", required=True)
@click.option("--field", default=None, help="The input at fault.")
@click.option("--retryable/--not-retryable", default=True, show_default=True)
@pass_state
def toolchain_failed(
    state: State,
    toolchain_id: str,
    step_id: str,
    error_type: str,
    reason: str,
    field: str | None,
    retryable: bool,
) -> None:
    """Record that a step failed, and why."""
    error: dict[str, Any] = {"type": error_type, "reason": reason, "retryable": retryable}
    if field is not None:
        error["field"] = field
    path = f"/v1/toolchains/{seg(toolchain_id)}/steps/{seg(step_id)}"
    state.show(
        state.api.call("POST", path, body={"status": "failed", "error": error}), render_toolchain
    )


@toolchain.command("show")
@click.argument("toolchain_id")
@click.option(
    "--as-of",
    type=click.DateTime(["%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%dT%H:%M:%S.%f%z"]),
    default=None,
    help="Judge expiry at this instant (with its UTC offset).",
)
@pass_state
def toolchain_show(state: State, toolchain_id: str, as_of: datetime.datetime | None) -> None:
    """A toolchain's state: steps done, the failed step, what to run next."""
    params = {"as_of": as_of.isoformat()} if as_of is not None else None
    answer = state.api.call("GET", f"/v1/toolchains/{seg(toolchain_id)}", params=params)
    state.show(answer, render_toolchain)


if __name__ == "__main__":
    main()
