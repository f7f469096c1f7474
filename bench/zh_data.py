"""The Chinese retrieval set in tests/data/zh_retrieval: loading and the overlap statistic.

Kept apart from bench/zh_retrieval.py so the unit test can check the files without
loading Mnemo or a model. README.md beside the files says how they were written.
"""

from __future__ import annotations

import re
import statistics
import unicodedata
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "DATA",
    "KINDS",
    "MAX_MEAN_OVERLAP",
    "MAX_QUERY_OVERLAP",
    "MemoryItem",
    "Query",
    "ZhSet",
    "bigrams",
    "load",
    "overlap",
    "overlap_stats",
    "score",
    "verdict",
]

DATA = Path(__file__).resolve().parent.parent / "tests" / "data" / "zh_retrieval"
KINDS = ("paraphrase", "inference")
KS = (1, 3, 10)  # the R@k reported
DOMAINS = ("cs", "co")
TYPES = ("constraint", "context", "history", "external", "preference", "fact", "episode")
SCOPES = ("user", "tenant")
# The paraphrase bounds README.md states; the unit test holds the files to them.
MAX_MEAN_OVERLAP = 0.10
MAX_QUERY_OVERLAP = 0.30
# Another embedder is "clearly better" than the default when its hybrid MRR and R@3 are
# both this much above the default's, and it embeds queries at least this fast on one
# thread (a search waits for its query's embedding).
CLEARLY_BETTER = 0.03
MIN_QUERY_RATE = 20.0

_CJK_RUN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff]+")
_WORD = re.compile(r"[a-z0-9]+")
_ID = re.compile(r"^(cs|co)\d{3}$")


@dataclass(frozen=True)
class MemoryItem:
    id: str
    domain: str
    stream: str
    type: str
    scope: str
    content: str


@dataclass(frozen=True)
class Query:
    qid: str  # q001 ... in file order
    kind: str
    text: str
    relevant: tuple[str, ...]
    line: int

    def domain(self, memories: dict[str, MemoryItem]) -> str:
        return memories[self.relevant[0]].domain


@dataclass(frozen=True)
class ZhSet:
    memories: dict[str, MemoryItem]  # by id, in file order
    queries: list[Query]


def _rows(path: Path, fields: int) -> Iterable[tuple[int, list[str]]]:
    for number, raw in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not raw.strip() or raw.startswith("#"):
            continue
        parts = raw.split("|")
        if len(parts) != fields:
            raise ValueError(f"{path.name}:{number}: {len(parts)} fields, expected {fields}")
        yield number, [p.strip() for p in parts]


def load(folder: Path = DATA) -> ZhSet:
    """Both files, checked: known fields, unique ids, and queries that name existing ids."""
    memories: dict[str, MemoryItem] = {}
    for number, (mid, domain, stream, mtype, scope, content) in _rows(folder / "memories.txt", 6):
        where = f"memories.txt:{number}"
        if not _ID.match(mid) or mid[:2] != domain:
            raise ValueError(f"{where}: id {mid!r} must be <domain><3 digits>")
        if mid in memories:
            raise ValueError(f"{where}: duplicate id {mid}")
        if domain not in DOMAINS or mtype not in TYPES or scope not in SCOPES or not content:
            raise ValueError(f"{where}: bad domain, type, scope or empty content")
        memories[mid] = MemoryItem(mid, domain, stream, mtype, scope, content)
    queries: list[Query] = []
    seen: set[str] = set()
    for number, (kind, text, relevant) in _rows(folder / "queries.txt", 3):
        where = f"queries.txt:{number}"
        ids = tuple(r.strip() for r in relevant.split(",") if r.strip())
        if kind not in KINDS or not text or not ids:
            raise ValueError(f"{where}: bad kind, empty query or no relevant id")
        unknown = [i for i in ids if i not in memories]
        if unknown:
            raise ValueError(f"{where}: unknown memory ids {unknown}")
        if text in seen:
            raise ValueError(f"{where}: duplicate query {text!r}")
        seen.add(text)
        queries.append(Query(f"q{len(queries) + 1:03d}", kind, text, ids, number))
    return ZhSet(memories, queries)


def bigrams(text: str) -> set[str]:
    """Character bigrams inside runs of Chinese characters, plus Latin words and numbers
    (a bigram is the usual length of a Chinese word, so this counts shared words)."""
    normalized = unicodedata.normalize("NFKC", text).lower()
    terms = {run[i : i + 2] for run in _CJK_RUN.findall(normalized) for i in range(len(run) - 1)}
    terms.update(_WORD.findall(normalized))
    return terms


def _chars(text: str) -> set[str]:
    return {c for run in _CJK_RUN.findall(unicodedata.normalize("NFKC", text)) for c in run}


def overlap(query: str, relevant: Sequence[str]) -> float:
    """The share of the query's bigrams (and Latin words) found in its relevant memories."""
    q = bigrams(query)
    if not q:
        return 0.0
    target: set[str] = set().union(*(bigrams(r) for r in relevant))
    return len(q & target) / len(q)


def char_overlap(query: str, relevant: Sequence[str]) -> float:
    """The share of the query's distinct Chinese characters found in its relevant memories."""
    q = _chars(query)
    if not q:
        return 0.0
    target: set[str] = set().union(*(_chars(r) for r in relevant))
    return len(q & target) / len(q)


def overlap_stats(data: ZhSet) -> dict[str, Any]:
    """Mean, median and max of both overlaps over the queries, and the share of queries
    with no shared bigram at all."""
    big, char = [], []
    for q in data.queries:
        texts = [data.memories[r].content for r in q.relevant]
        big.append(overlap(q.text, texts))
        char.append(char_overlap(q.text, texts))

    def describe(values: list[float]) -> dict[str, float]:
        return {
            "mean": round(statistics.fmean(values), 4),
            "median": round(statistics.median(values), 4),
            "max": round(max(values), 4),
        }

    return {
        "bigram": describe(big),
        "bigram_zero_share": round(sum(1 for v in big if v == 0.0) / len(big), 4),
        "character": describe(char),
        "bounds": {
            "bigram_mean_at_most": MAX_MEAN_OVERLAP,
            "bigram_max_at_most": MAX_QUERY_OVERLAP,
        },
    }


def score(rankings: Sequence[Sequence[str]], data: ZhSet) -> dict[str, Any]:
    """R@k and MRR, overall, per kind and per domain, of rankings given in query order
    (each a list of the set's memory ids, best first)."""
    groups: dict[str, list[tuple[float, ...]]] = {"overall": []}
    for q, ranked in zip(data.queries, rankings, strict=True):
        relevant = set(q.relevant)
        row = [len(relevant & set(ranked[:k])) / len(relevant) for k in KS]
        first = next((i for i, mid in enumerate(ranked) if mid in relevant), None)
        row.append(0.0 if first is None else 1.0 / (first + 1))
        for group in ("overall", f"kind:{q.kind}", f"domain:{q.domain(data.memories)}"):
            groups.setdefault(group, []).append(tuple(row))
    names = [f"R@{k}" for k in KS] + ["MRR"]
    return {
        group: {
            "queries": len(rows),
            **{n: round(statistics.fmean(r[i] for r in rows), 4) for i, n in enumerate(names)},
        }
        for group, rows in sorted(groups.items(), key=lambda g: g[0] != "overall")
    }


def verdict(quality: dict[str, Any], speed: dict[str, Any], default: str) -> dict[str, Any]:
    """Whether another embedder is clearly better than the default, by the stated rule:
    `quality` is the benchmark's per-embedder results, `speed` its rates by "<name>@1"."""
    if default not in quality:
        return {"default": default, "compared": False}
    base = quality[default]["retrievers"]["hybrid"]["metrics"]["overall"]
    rows = {}
    for name, q in quality.items():
        if name == default:
            continue
        m = q["retrievers"]["hybrid"]["metrics"]["overall"]
        rate = speed.get(f"{name}@1", {}).get("queries_per_s")
        better = (
            m["MRR"] - base["MRR"] >= CLEARLY_BETTER
            and m["R@3"] - base["R@3"] >= CLEARLY_BETTER
            and rate is not None
            and rate >= MIN_QUERY_RATE
        )
        rows[name] = {
            "hybrid_mrr_minus_default": round(m["MRR"] - base["MRR"], 4),
            "hybrid_r3_minus_default": round(m["R@3"] - base["R@3"], 4),
            "queries_per_s_1thread": rate,
            "clearly_better": better,
        }
    return {
        "default": default,
        "rule": f"hybrid MRR and R@3 both at least {CLEARLY_BETTER} above the default's, "
        f"and at least {MIN_QUERY_RATE:g} queries/s on one thread",
        "others": rows,
        "adopt": sorted(n for n, r in rows.items() if r["clearly_better"]),
    }
