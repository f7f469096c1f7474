"""What signing every committed audit batch costs: `python -m bench.audit_signing --out DIR`.

Two embedded platforms, side by side in many short rounds whose order alternates, sign
their audit checkpoints with OpenBao's transit engine and anchor them in its KV engine
(the services infra/services.py starts; the bench stops with a message when none runs):

* limits:     a stream's head is signed every 1,000 links or after 60 s only (what Mnemo did
              before each batch was signed);
* each_batch: the same, and the head of every stream a committed batch extended is signed
              and anchored after the commit, at most once a second per stream (the
              defaults: MNEMO_AUDIT_CHECKPOINT_EACH_BATCH, _BATCH_SECONDS 1);
* every_batch: every committed batch signed, however close together (_BATCH_SECONDS 0).

Each round publishes its events in requests of `--batch` events over `--streams` user
streams with the hashing embedder (so the embedder does not hide the vault's cost), and
drains the consumers; the rate counts events per second from the first publish to the last
projection. The overhead is the median of per-round ratios (rounds ran seconds apart, under
nearly the same load), with quartiles, next to the pooled figure and the checkpoints signed.
Writes DIR/audit_signing.json.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from bench.common import Results, load_average, progress, ratio_summary
from mnemo.bootstrap import Platform, build_embedded
from mnemo.service.app import RequestContext
from mnemo.settings import MnemoSettings

__all__ = ["main", "run_audit_signing"]

TENANT = "bench-audit"
SIDES = ("limits", "each_batch", "every_batch")
BATCH_SECONDS = {"limits": 1.0, "each_batch": 1.0, "every_batch": 0.0}


def _vault() -> tuple[str, str] | None:
    """OpenBao's address and token: MNEMO_VAULT_ADDR / MNEMO_VAULT_TOKEN, else the file
    infra/services.py writes when it starts the services."""
    url = os.environ.get("MNEMO_VAULT_ADDR")
    token = os.environ.get("MNEMO_VAULT_TOKEN")
    env_file = Path(__file__).resolve().parent.parent / "var" / "run" / "services.env"
    if (url is None or token is None) and env_file.exists():
        for line in env_file.read_text(encoding="utf-8").splitlines():
            name, _, value = line.partition("=")
            if name == "MNEMO_VAULT_ADDR" and url is None:
                url = value.strip()
            elif name == "MNEMO_VAULT_TOKEN" and token is None:
                token = value.strip()
    return (url, token) if url and token else None


def _events(n: int, first: int, streams: int) -> list[dict[str, Any]]:
    return [
        {
            "type": "ObservationRecorded",
            "schema_version": 2,
            "stream": f"user:U{i % streams:03d}",
            "payload": {"text": f"the customer said something worth keeping, number {i}"},
        }
        for i in range(first, first + n)
    ]


def _ingest(platform: Platform, events: list[dict[str, Any]], batch: int) -> float:
    ctx = RequestContext(TENANT, "bench")
    t0 = time.perf_counter()
    for start in range(0, len(events), batch):
        platform.app.publish(ctx, events[start : start + batch])
        platform.runner.drain()
    return time.perf_counter() - t0


def run_audit_signing(
    results: Results, data_dir: Path, *, rounds: int, events: int, batch: int, streams: int
) -> dict[str, Any]:
    vault = _vault()
    if vault is None:
        raise SystemExit("no OpenBao: start the services (infra/services.py) first")
    url, token = vault
    prefix = f"bench{uuid.uuid4().hex[:8]}"
    platforms = {
        side: build_embedded(
            MnemoSettings(
                data_dir=data_dir / side,
                embedder="hashing",
                vault_addr=url,
                vault_token=token,
                vault_key_prefix=f"{prefix}{n}",
                audit_signing_key=f"{prefix}-audit",
                audit_checkpoint_each_batch=side != "limits",
                audit_checkpoint_batch_seconds=BATCH_SECONDS[side],
            )
        )
        for n, side in enumerate(SIDES)
    }
    rates: dict[str, list[float]] = {side: [] for side in SIDES}
    spent = dict.fromkeys(SIDES, 0.0)
    try:
        for side in SIDES:  # warm-up: the users' keys, the signing key, the anchors mount
            _ingest(platforms[side], _events(streams, 10_000_000, streams), batch)
        for r in range(rounds):
            order = SIDES[r % 3 :] + SIDES[: r % 3]
            for side in order:
                took = _ingest(platforms[side], _events(events, r * events, streams), batch)
                rates[side].append(events / took)
                spent[side] += took
            progress("audit_signing", f"round {r + 1}/{rounds}")
        signed = {side: platforms[side].runner.checkpointer.signed for side in SIDES}  # type: ignore[union-attr]
    finally:
        for platform in platforms.values():
            platform.close()
    params = {"events_per_round": events, "rounds": rounds, "batch": batch, "streams": streams}
    for side in SIDES:
        results.add(
            "audit_signing.ingest_rate",
            "events/s",
            rounds * events / spent[side],
            {**params, "side": side, "checkpoints_signed": signed[side]},
        )
    for side in SIDES[1:]:
        summary = ratio_summary(rates[side], rates["limits"])
        results.add(
            f"audit_signing.ingest_overhead.{side}",
            "fraction",
            1 - summary["median"],
            {
                **params,
                "compared": f"{side} vs limits: rate lost",
                "method": "median of per-round ratios",
                "p25": round(1 - summary["p75"], 4),
                "p75": round(1 - summary["p25"], 4),
                "pooled": round(1 - spent["limits"] / spent[side], 4),
                "per_round": [round(1 - x, 4) for x in summary["per_round"]],
            },
        )
    return {"signed": signed}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.audit_signing", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--out", type=Path, default=Path("bench/results"), help="results directory")
    ap.add_argument("--rounds", type=int, default=10, help="alternating rounds (10)")
    ap.add_argument("--events", type=int, default=200, help="events per round and side (200)")
    ap.add_argument("--batch", type=int, default=20, help="events per request (20)")
    ap.add_argument("--streams", type=int, default=10, help="user streams written (10)")
    args = ap.parse_args(argv)
    started = datetime.now(UTC)
    load_start = load_average()
    results = Results()
    with tempfile.TemporaryDirectory(prefix="mnemo-bench-audit-") as tmp:
        facts = run_audit_signing(
            results,
            Path(tmp),
            rounds=args.rounds,
            events=args.events,
            batch=args.batch,
            streams=args.streams,
        )
    report = {
        "suite": "audit_signing",
        "format": 1,
        "started_at": started.isoformat(),
        "finished_at": datetime.now(UTC).isoformat(),
        "command": " ".join(
            [Path(sys.executable).name, "-m", "bench.audit_signing", *sys.argv[1:]]
        ),
        "options": vars(args) | {"out": str(args.out)},
        "machine": {"load_average_start": load_start, "load_average_end": load_average()},
        **facts,
        "measurements": [m.as_json() for m in results.measurements],
    }
    args.out.mkdir(parents=True, exist_ok=True)
    out = args.out / "audit_signing.json"
    out.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    for m in results.measurements:
        print(json.dumps(m.as_json()))
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
