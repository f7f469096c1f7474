"""Keyword terms for BM25: lowercase words for alphabetic scripts (English words stemmed),
character unigrams and bigrams for Chinese, Japanese and Korean, which are written without
spaces."""

from __future__ import annotations

import functools
import re
import unicodedata

import snowballstemmer

__all__ = ["STOP_TERMS", "keyword_terms", "mostly_cjk", "query_terms"]

_TOKEN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]+|[^\W_]+")
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]")
MAX_TERMS = 512
_ENGLISH = snowballstemmer.stemmer("english")


@functools.lru_cache(maxsize=65_536)
def _stem(word: str) -> str:
    """English words to their stem (seats, seat -> seat), so a query matches inflections."""
    return str(_ENGLISH.stemWord(word))


def mostly_cjk(text: str) -> bool:
    """Whether most of a text's letters are Chinese, Japanese or Korean characters (whose
    keyword terms are single characters and bigrams rather than words)."""
    cjk = other = 0
    for match in _TOKEN.finditer(unicodedata.normalize("NFKC", text)):
        run = match.group(0)
        if _CJK.match(run):
            cjk += len(run)
        else:
            other += len(run)
    return cjk > other


def keyword_terms(text: str) -> list[str]:
    """The terms of a text, in order, duplicates kept (BM25 counts them)."""
    terms: list[str] = []
    normalized = unicodedata.normalize("NFKC", text).lower()
    for match in _TOKEN.finditer(normalized):
        run = match.group(0)
        if _CJK.match(run):
            terms.extend(run)
            terms.extend(run[i : i + 2] for i in range(len(run) - 1))
        elif run.isascii() and run.isalpha():
            terms.append(_stem(run))
        else:
            terms.append(run)
        if len(terms) >= MAX_TERMS:
            break
    return terms[:MAX_TERMS]


# Words too common to tell memories apart: dropped from memories' keyword vectors, and
# from queries that have other terms.
STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "been",
        "by",
        "can",
        "could",
        "did",
        "do",
        "does",
        "for",
        "from",
        "had",
        "has",
        "have",
        "he",
        "her",
        "his",
        "how",
        "i",
        "if",
        "in",
        "into",
        "is",
        "it",
        "its",
        "me",
        "my",
        "no",
        "not",
        "of",
        "on",
        "or",
        "our",
        "she",
        "so",
        "that",
        "the",
        "their",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "to",
        "up",
        "was",
        "we",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "would",
        "you",
        "your",
        # ... and more English function words: in a tenant's memories they are in most
        # turns, so each matched one only adds noise (the engine's IDF never falls below
        # ln 2, where the SQLite BM25 before it let such words count for nothing)
        *[
            "about",
            "above",
            "after",
            "again",
            "against",
            "all",
            "also",
            "am",
            "any",
            "because",
            "before",
            "being",
            "below",
            "between",
            "both",
            "but",
            "cannot",
            "doing",
            "down",
            "during",
            "each",
            "few",
            "further",
            "having",
            "here",
            "hers",
            "herself",
            "him",
            "himself",
            "itself",
            "just",
            "let",
            "more",
            "most",
            "myself",
            "nor",
            "now",
            "off",
            "once",
            "only",
            "other",
            "ought",
            "ours",
            "ourselves",
            "out",
            "over",
            "own",
            "same",
            "should",
            "some",
            "such",
            "than",
            "theirs",
            "themselves",
            "through",
            "too",
            "under",
            "until",
            "very",
            "whom",
            "yours",
            "yourself",
            "yourselves",
        ],
        # the pieces contractions split into (don't -> don, t; she's -> she, s)
        *[
            "aren",
            "couldn",
            "doesn",
            "don",
            "hadn",
            "hasn",
            "haven",
            "mustn",
            "shan",
            "shouldn",
            "wasn",
            "weren",
            "won",
            "wouldn",
        ],
        *["s", "t", "ll", "re", "ve", "d", "m"],
        "的",
        "了",
        "是",
        "我",
        "你",
        "他",
        "她",
        "它",
        "在",
        "和",
        "有",
        "也",
        "就",
        "都",
        "而",
        "与",
        "着",
        "或",
        "一",
        "这",
        "那",
        "吗",
        "呢",
        "吧",
        "啊",
        "么",
        "什",
    ]
)
MAX_QUERY_TERMS = 32
# The stopwords as keyword_terms makes them: English words are stemmed ("why" -> "whi",
# "does" -> "doe"), so the plain list alone let those through into queries.
STOP_TERMS = STOPWORDS | frozenset(_stem(w) for w in STOPWORDS if w.isascii())


def query_terms(text: str) -> list[str]:
    """Distinct terms of a query, first occurrence first, without stopwords (unless the
    query has nothing else), at most MAX_QUERY_TERMS."""
    terms = list(dict.fromkeys(keyword_terms(text)))
    content = [t for t in terms if t not in STOP_TERMS]
    return (content or terms)[:MAX_QUERY_TERMS]
