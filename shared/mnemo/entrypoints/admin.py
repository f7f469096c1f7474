"""Operations on a whole platform: rebuild every read model from the log, checksums."""

from __future__ import annotations

import hashlib
import os
import ssl
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx

from mnemo.bootstrap import Platform
from mnemo.domain.errors import ConflictError, MnemoError
from mnemo.ports import PROBE_SECONDS
from mnemo.vault_identity import IdentityGuardedVault, VaultKeysMissing

__all__ = ["distributed_status", "platform_checksum", "rebuild_read_models"]

_REBUILDING = threading.Lock()
_PROBES: dict[tuple[str | None, str | None], httpx.Client] = {}
_PROBES_LOCK = threading.Lock()


def _probes(cafile: Path | str | None = None, capath: Path | str | None = None) -> httpx.Client:
    """One HTTP client for every health probe of the status page that trusts the same CAs
    (the system's, or a CA file or directory the settings name), made once: a client
    builds its TLS context when it is made (CA bundle loading, tens of milliseconds of
    CPU), and the page probes six services on every call, which monitors and `?wait`
    loops make several times a second. No connection is kept between probes, so each
    one still opens its own, as a client per probe did."""
    trust = (str(cafile) if cafile else None, str(capath) if capath else None)
    with _PROBES_LOCK:
        client = _PROBES.get(trust)
        if client is None:
            verify: ssl.SSLContext | bool = (
                ssl.create_default_context(cafile=trust[0], capath=trust[1]) if any(trust) else True
            )
            # a consumer's /readyz gives the brokers PROBE_SECONDS to answer, then says
            # why it is not ready: the probe waits for that answer
            client = httpx.Client(
                timeout=PROBE_SECONDS + 2.0,
                verify=verify,
                limits=httpx.Limits(max_keepalive_connections=0),
            )
            _PROBES[trust] = client
        return client


def platform_checksum(platform: Platform) -> str:
    """One digest over the memory store's read models and the vector index's contents."""
    digest = hashlib.sha256(platform.store.checksum().encode())
    for memory_id in platform.index.ids():
        digest.update(memory_id.encode())
    return digest.hexdigest()


def rebuild_read_models(
    platform: Platform, progress: Callable[[int, int], None] | None = None
) -> str:
    """Drop every read model and replay the whole log into empty ones; returns the new
    checksum. Consumers are paused meanwhile; the log is not touched. One rebuild at a
    time in a process: a second one while the first runs is refused."""
    if platform.distributed is not None:
        raise ConflictError(
            "in the distributed mode, rebuild by running the consumers as fresh groups into a "
            "fresh keyspace (docs/distributed.md, 'Rebuilding read models')",
            code="REBUILD_BY_CONSUMER_GROUPS",
        )
    if not _REBUILDING.acquire(blocking=False):
        raise ConflictError("a rebuild is already running", code="REBUILD_RUNNING")
    try:
        runner = platform.runner
        was_running = runner.running
        runner.stop()
        try:
            platform.store.reset()
            platform.index.clear()
            head = platform.log.head()
            while runner.run_once():
                if progress is not None:
                    progress(min(platform.store.position("indexer"), head), head)
            return platform_checksum(platform)
        finally:
            if was_running:
                runner.start()
    finally:
        _REBUILDING.release()


def _not_ready(answer: httpx.Response) -> str:
    """What a component's /readyz says is wrong: `fenced` (another process owns some of
    its partitions and refuses its commits), `failing` (its batch in flight cannot be
    written) or `not_ready`."""
    try:
        status = answer.json().get("status")
    except ValueError:
        return "not_ready"
    return status if status in ("fenced", "failing") else "not_ready"


def distributed_status(platform: Platform, components: str) -> dict[str, Any]:
    """What `mnemo status` shows of a distributed deployment: each component's health (its
    /readyz), each consumer's lag per partition, the processes holding its partitions
    (`holders`: process name to partitions), and the dead-letter count."""
    assert platform.distributed is not None
    d = platform.distributed
    body: dict[str, Any] = {"mode": "distributed", "topic": d.topic.name}
    body["lag"] = {}
    try:
        # the brokers within the probe's bound first: a log that is down is reported in
        # seconds, not after the client's own timeouts (the lag, the dead letters)
        d.topic.reachable()
        body["log_head"] = sum(d.topic.end_offsets().values())
    except MnemoError as exc:
        body["log_head"] = None  # unknown, not empty
        body["dead_letters"] = None
        body["error"] = exc.code
    else:
        try:
            partitions = d.progress.lag()
        except MnemoError as exc:  # the positions are in the store
            body["error"] = exc.code
        else:
            body["partitions"] = {
                c: {str(p): n for p, n in v.items()} for c, v in partitions.items()
            }
            body["lag"] = {c: sum(v.values()) for c, v in partitions.items()}
            # the processes holding each consumer's partitions: one per replica at work
            held = sorted({p for v in partitions.values() for p in v})
            try:
                body["holders"] = d.progress.holders(held)
            except MnemoError as exc:
                body["holders_error"] = exc.code
        try:
            body["dead_letters"] = d.topic.dead_letter_count()
        except MnemoError:
            body["dead_letters"] = None
    # each component's /readyz, side by side (one answers within its own probe bound)
    probed = [
        (name, url)
        for name, _, url in (item.strip().partition("=") for item in components.split(","))
        if name and url
    ]
    with ThreadPoolExecutor(max(1, len(probed)), thread_name_prefix="mnemo-status") as pool:
        states = list(pool.map(lambda item: _readiness(item[1]), probed))
    health = {name: state for (name, _), state in zip(probed, states, strict=True)}
    body["components"] = {"gateway": "ready", **health}
    body["consumers_running"] = all(v == "ready" for v in health.values())
    body["services"] = backing_services(platform)
    return body


def _readiness(url: str) -> str:
    try:
        answer = _probes().get(f"{url.rstrip('/')}/readyz")
    except httpx.HTTPError:
        return "unreachable"
    return "ready" if answer.status_code == 200 else _not_ready(answer)


def _http_state(url: str, states: dict[int, str], client: httpx.Client | None = None) -> str:
    try:
        answer = (client or _probes()).get(url)
    except httpx.HTTPError:
        return "unreachable"
    return states.get(answer.status_code, f"not_ready ({answer.status_code})")


def _trusted_state(
    url: str, states: dict[int, str], cafile: Path | str | None, capath: str | None = None
) -> str:
    """_http_state with a client that trusts `cafile` (or `capath`), when one is named."""
    try:
        client = _probes(cafile, capath)
    except OSError:  # ssl.SSLError included: the CA file is missing or not PEM
        return "tls_config_invalid"
    return _http_state(url, states, client)


def _vault_keys(platform: Platform) -> str:
    """`ready` while the vault that answers is the one the deployment's keys are in (asked
    now), else `keys_missing` (its requests answer 503 VAULT_KEY_MISSING) or the code of
    what failed."""
    guarded = platform.sealer.keys.vault if platform.sealer is not None else None
    if not isinstance(guarded, IdentityGuardedVault):
        return "ready"
    try:
        guarded.confirm(fresh=True)
    except VaultKeysMissing:
        return "keys_missing"
    except MnemoError as exc:
        return exc.code
    return "ready"


def backing_services(platform: Platform) -> dict[str, str]:
    """The state of each service the distributed mode runs on, as the gateway sees it:
    Kafka and Cassandra (answering, else the error code), the vault (OpenBao/Vault health:
    ready, sealed, not_initialized, unreachable; and keys_missing when it is not the vault
    the deployment's keys are in) and the Qdrant server (/readyz). Each is
    probed trusting the CAs Mnemo's own connections to it trust: MNEMO_QDRANT_CA_FILE for
    Qdrant, VAULT_CACERT (else VAULT_CAPATH) for the vault, as hvac reads them; a CA file
    that cannot be read is reported as `tls_config_invalid`."""
    from mnemo.service.distributed import position_name

    assert platform.distributed is not None
    settings = platform.settings
    out: dict[str, str] = {}
    try:
        platform.distributed.topic.reachable()  # a round trip, not cached metadata
        out["kafka"] = "ready"
    except MnemoError as exc:
        out["kafka"] = exc.code
    try:
        platform.store.positions([position_name("registrar", 0)])  # always a read
        out["cassandra"] = "ready"
    except MnemoError as exc:
        out["cassandra"] = exc.code
    if settings.vault_addr:
        cacert, capath = os.environ.get("VAULT_CACERT"), os.environ.get("VAULT_CAPATH")
        out["vault"] = _trusted_state(
            f"{settings.vault_addr.rstrip('/')}/v1/sys/health",
            {200: "ready", 429: "ready", 501: "not_initialized", 503: "sealed"},
            cacert,
            None if cacert else capath,
        )
        if out["vault"] == "ready":
            out["vault"] = _vault_keys(platform)
    else:
        out["vault"] = "development key file"
    if settings.qdrant_url:
        out["qdrant"] = _trusted_state(
            f"{settings.qdrant_url.rstrip('/')}/readyz", {200: "ready"}, settings.qdrant_ca_file
        )
    else:
        out["qdrant"] = "embedded (qdrant-edge)"
    return out
