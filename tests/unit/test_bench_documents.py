"""The documents benchmark's scoring and plumbing (bench/documents.py), against an HTTP
double of the documents API that answers from the ground truth: exact answers score 1.0,
a document the server loses is named as a miss, a wrong clause or page is named, and the
vector baseline reads the documents of the memories found."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from bench import documents
from bench.common import Results
from bench.contract_questions import matches
from bench.contracts import write_corpus
from bench.distributed import Server
from bench.documents import (
    LATENCY_WARMUP,
    Checkpoints,
    Unsupported,
    _corpus,
    document_of,
    ingest_corpus,
    locate_check,
    retry_after,
    returned_files,
    run_quality,
    run_scale,
    send_retrying,
)


class DocumentsDouble:
    """Answers /v1/documents, /v1/query and /v1/search from the truth of the files posted."""

    def __init__(self, truth: list[dict[str, Any]], lose: str | None = None) -> None:
        self.truth = {t["filename"]: t for t in truth}
        self.lose = lose  # a file the "server" forgets: its queries miss it
        self.docs: dict[str, str] = {}  # id -> filename
        self.wrong_clause = False
        self.searches: list[str] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/v1/admin/tenants":
            return httpx.Response(201, json={"key": "k"})
        if path == "/v1/admin/status":
            return httpx.Response(200, json={"lag": {"registrar": 0, "indexer": 0}})
        if path == "/v1/documents":
            name = request.url.params["filename"]
            assert request.url.params["subject"] == "tenant"
            assert request.content  # the raw bytes
            doc_id = f"d{len(self.docs):04d}"
            self.docs[doc_id] = name
            t = self.truth[name]
            return httpx.Response(
                202,
                json={
                    "document_id": doc_id,
                    "event_id": "e",
                    "sha256": "0" * 64,
                    "pages": t["pages"] or 1,
                    "sections": len(t["clause_numbers"]),
                    "status": "accepted",
                },
            )
        if path == "/v1/query":
            where = json.loads(request.content)["where"]
            found = []
            for doc_id, name in self.docs.items():
                t = self.truth[name]
                if name == self.lose or not matches(t, where):
                    continue
                clause = t["penalty_clause"]
                if self.wrong_clause:
                    clause = "1"
                hit = {
                    "memory_id": "m",
                    "section": 3,
                    "page": t["penalty_page"],
                    "clause": clause,
                    "text": f"... {t['penalty_text']} ...",
                    "entities": [],
                }
                found.append(
                    {"document_id": doc_id, "filename": name, "subject": "tenant", "hits": [hit]}
                )
            return httpx.Response(200, json={"documents": found, "total": len(found)})
        if path == "/v1/search":
            self.searches.append(json.loads(request.content)["query"])
            # the first two documents ingested, each twice (two sections)
            hits = [
                {"memory": {"provenance": {"source_id": f"document:{doc_id}"}}, "score": 1.0}
                for doc_id in list(self.docs)[:2]
                for _ in range(2)
            ]
            return httpx.Response(200, json={"hits": hits})
        return httpx.Response(404, json={"code": "NOT_FOUND"})


def _server(double: DocumentsDouble) -> Server:
    server = Server("embedded", "http://bench.test")
    server.http = httpx.Client(base_url=server.url, transport=httpx.MockTransport(double))
    return server


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], list[dict[str, Any]]]:
    root = tmp_path_factory.mktemp("contracts")
    truth = write_corpus(root, 60, seed=5)
    return [root / t["filename"] for t in truth], truth


def test_exact_answers_score_one_and_vector_baseline_is_measured(
    corpus: tuple[list[Path], list[dict[str, Any]]],
) -> None:
    files, truth = corpus
    double = DocumentsDouble(truth)
    results = Results()
    facts = run_quality(results, _server(double), files, truth, seed=5)
    assert facts["ingest"]["accepted"] == 60
    assert facts["ingest"]["pages"] == sum(t["pages"] or 1 for t in truth)
    assert facts["structured"]["precision"] == 1.0
    assert facts["structured"]["recall"] == 1.0
    assert facts["structured"]["misses"] == []
    assert facts["clause_located"]["checked"] > 0
    assert facts["clause_located"]["failures"] == []
    # every question was also asked in words
    assert len(double.searches) == len(facts["questions"])
    vector = facts["vector_at_10"]
    assert vector["recall"] < 1.0  # the double's search finds only two documents
    found = {m.name: m.value for m in results.measurements}
    assert found["documents.quality.structured.recall"] == 1.0
    assert "documents.quality.ingest.pages_per_second.embedded" in found
    assert "documents.quality.query.latency.p99" in found


def test_scale_part_times_queries_and_checks_them(
    corpus: tuple[list[Path], list[dict[str, Any]]],
) -> None:
    files, truth = corpus
    results = Results()
    facts = run_scale(results, _server(DocumentsDouble(truth)), files, truth, seed=5, samples=30)
    assert facts["structured"]["recall"] == 1.0
    assert facts["totals_right"] == facts["questions"]
    found = {m.name: m for m in results.measurements}
    latency = found["documents.scale.query.latency.embedded.p99"]
    # every question once, the first LATENCY_WARMUP untimed
    assert latency.params["samples"] == max(30, facts["questions"] - LATENCY_WARMUP)
    assert latency.params["limit"] == 1_000
    assert found["documents.scale.ingest.pages_per_second.embedded"].value > 0


def test_a_lost_document_is_named(corpus: tuple[list[Path], list[dict[str, Any]]]) -> None:
    files, truth = corpus
    questions_with = {}
    double = DocumentsDouble(truth, lose=truth[7]["filename"])
    facts = run_quality(Results(), _server(double), files, truth, seed=5)
    for q in facts["questions"]:
        if truth[7]["filename"] in q["answer"]:
            questions_with[q["id"]] = q
    assert questions_with  # the lost document is in some answer
    misses = facts["structured"]["misses"]
    assert {m["document"] for m in misses} == {truth[7]["filename"]}
    assert {m["question"] for m in misses} == set(questions_with)
    assert facts["structured"]["recall"] < 1.0
    assert facts["structured"]["precision"] == 1.0


def test_wrong_clause_is_named(corpus: tuple[list[Path], list[dict[str, Any]]]) -> None:
    files, truth = corpus
    double = DocumentsDouble(truth)
    double.wrong_clause = True
    facts = run_quality(Results(), _server(double), files, truth, seed=5)
    failures = facts["clause_located"]["failures"]
    assert failures
    assert len(failures) == facts["clause_located"]["checked"]
    assert all("expected" in f["why"] for f in failures)


def test_a_server_without_the_api_stops_the_section(
    corpus: tuple[list[Path], list[dict[str, Any]]],
) -> None:
    files, _ = corpus

    def none(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/admin/tenants":
            return httpx.Response(201, json={"key": "k"})
        return httpx.Response(404)

    server = Server("embedded", "http://bench.test")
    server.http = httpx.Client(base_url=server.url, transport=httpx.MockTransport(none))
    with pytest.raises(Unsupported):
        ingest_corpus(server, files[:3], "x")


def test_documents_of_answers_and_memories() -> None:
    ids = {"abc": "a.pdf", "def": "b.docx"}
    body = {"documents": [{"document_id": "def"}, {"document_id": "abc", "filename": "a.pdf"}]}
    assert returned_files(body, ids) == ["b.docx", "a.pdf"]
    assert document_of({"provenance": {"source_id": "document:abc"}}, ids) == "a.pdf"
    assert document_of({"provenance": {"source_id": "def"}}, ids) == "b.docx"
    assert document_of({"tags": ["doc:def"]}, ids) == "b.docx"
    assert document_of({"provenance": {"source_id": "tool:crm"}}, ids) is None


def test_locate_check_reads_clause_and_page() -> None:
    from bench.contract_questions import Question

    q = Question(
        "q1",
        "penalty_clause",
        [],
        "",
        "en",
        ["a.pdf"],
        {"a.pdf": {"clauses": ["8", "8.1"], "pages": [2], "text": "5%"}},
    )
    ok = {
        "documents": [{"filename": "a.pdf", "hits": [{"clause": "8.1", "page": 2, "text": "5%"}]}]
    }
    assert locate_check(q, ok, {}) == []
    page = {
        "documents": [{"filename": "a.pdf", "hits": [{"clause": "8", "page": 1, "text": "5%"}]}]
    }
    assert locate_check(q, page, {})[0]["why"].startswith("clause/page")
    none = {"documents": [{"filename": "a.pdf", "hits": [{"clause": "8", "page": 2, "text": "x"}]}]}
    assert "no hit" in locate_check(q, none, {})[0]["why"]
    assert locate_check(q, {"documents": []}, {})[0]["why"] == "not returned"


def test_scale_corpus_is_reused_when_it_matches(tmp_path: Path) -> None:
    root = tmp_path / "kept"
    files, truth = _corpus(root, 6, seed=4)
    assert [f.name for f in files] == [t["filename"] for t in truth]
    stamp = {f.name: f.stat().st_mtime_ns for f in files}
    again_files, again_truth = _corpus(root, 6, seed=4)  # the same count and seed: reused
    assert again_truth == truth
    assert again_files == files
    assert {f.name: f.stat().st_mtime_ns for f in again_files} == stamp
    fewer_files, fewer_truth = _corpus(root, 4, seed=4)  # fewer: the first ones, reused
    assert fewer_truth == truth[:4]
    assert fewer_files == files[:4]
    other_files, other_truth = _corpus(root, 7, seed=4)  # more: written again
    assert len(other_truth) == 7
    assert all(f.is_file() for f in other_files)
    assert json.loads((root / "truth.json").read_text(encoding="utf-8"))["count"] == 7


class Refusing(DocumentsDouble):
    """Refuses the first posts (429 with a Retry-After, then 503), drops one connection,
    and answers the status with a lag that falls to zero."""

    def __init__(self, truth: list[dict[str, Any]]) -> None:
        super().__init__(truth)
        self.refusals = [
            httpx.Response(429, headers={"Retry-After": "7"}, json={"error": {}}),
            httpx.Response(503, headers={"Retry-After": "1"}, json={"error": {}}),
            httpx.Response(429, headers={"Retry-After": "999"}, json={"error": {}}),
        ]
        self.dropped = False
        self.lags = [{"registrar": 5, "indexer": 9}, {"registrar": 0, "indexer": 2}]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/documents":
            if self.refusals:
                return self.refusals.pop(0)
            if not self.dropped:
                self.dropped = True
                raise httpx.ConnectError("refused", request=request)
        if request.url.path == "/v1/admin/status" and self.lags:
            return httpx.Response(200, json={"lag": self.lags.pop(0)})
        return super().__call__(request)


def test_refused_posts_are_retried_and_progress_is_written(
    corpus: tuple[list[Path], list[dict[str, Any]]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    files, truth = corpus
    slept: list[float] = []
    monkeypatch.setattr(documents, "_sleep", slept.append)
    double = Refusing(truth[:12])
    path = tmp_path / "progress.json"
    ing = ingest_corpus(_server(double), files[:12], "test", Checkpoints(path, every=0))
    assert len(ing.ids) == 12  # nothing refused is lost
    assert not ing.rejected
    assert ing.retries == 4
    # the server's Retry-After (capped), and 1 s after the dropped connection
    assert sorted(slept[:4]) == sorted([7.0, 1.0, documents.RETRY_WAIT_CAP, 1.0])
    written = json.loads(path.read_text(encoding="utf-8"))
    latest = written["latest"]
    assert latest["stage"] == "test: caught up"
    assert latest["accepted"] == 12
    assert latest["pages"] == ing.pages
    stages = [h["stage"] for h in written["history"]]
    assert "test: posting" in stages
    assert "test: waiting for the consumers" in stages
    lags = [h["lag"] for h in written["history"] if h["stage"].endswith("consumers")]
    assert {"registrar": 5, "indexer": 9} in lags


def test_retries_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    slept: list[float] = []
    monkeypatch.setattr(documents, "_sleep", slept.append)
    refused = httpx.Response(503, headers={"Retry-After": "2"})
    answer, retries, _ = send_retrying(lambda: refused)
    assert answer.status_code == 503  # handed back, so that it is recorded as rejected
    assert retries == documents.RETRIES
    assert slept == [2.0] * documents.RETRIES
    slept.clear()

    def broken() -> httpx.Response:
        raise httpx.ReadTimeout("slow")

    with pytest.raises(httpx.ReadTimeout):
        send_retrying(broken)
    assert slept == [min(documents.RETRY_WAIT_CAP, 2.0**n) for n in range(documents.RETRIES)]
    assert retry_after(httpx.Response(429, headers={"Retry-After": "soon"})) == 1.0


def test_a_silent_server_stops_the_wait_with_the_progress_kept(
    corpus: tuple[list[Path], list[dict[str, Any]]],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    files, truth = corpus
    monkeypatch.setattr(documents, "_sleep", lambda s: None)
    monkeypatch.setattr(documents, "SILENT_SERVER_LIMIT", 0.0)
    double = DocumentsDouble(truth[:5])

    def gone(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/admin/status":
            raise httpx.ConnectError("refused", request=request)
        return double(request)

    server = Server("embedded", "http://bench.test")
    server.http = httpx.Client(base_url=server.url, transport=httpx.MockTransport(gone))
    path = tmp_path / "progress.json"
    with pytest.raises(documents.ServerGone):
        ingest_corpus(server, files[:5], "test", Checkpoints(path, every=3600))
    latest = json.loads(path.read_text(encoding="utf-8"))["latest"]
    assert latest["stage"].startswith("test: stopped by ServerGone")
    assert latest["accepted"] == 5
