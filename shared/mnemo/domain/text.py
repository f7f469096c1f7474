"""Keyword terms for BM25: lowercase words for alphabetic scripts, character unigrams and
bigrams for Chinese, Japanese and Korean, which are written without spaces."""

from __future__ import annotations

import re
import unicodedata

__all__ = ["keyword_terms"]

_TOKEN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]+|[^\W_]+")
_CJK = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af]")
MAX_TERMS = 512


def keyword_terms(text: str) -> list[str]:
    """The terms of a text, in order, duplicates kept (BM25 counts them)."""
    terms: list[str] = []
    normalized = unicodedata.normalize("NFKC", text).lower()
    for match in _TOKEN.finditer(normalized):
        run = match.group(0)
        if _CJK.match(run):
            terms.extend(run)
            terms.extend(run[i : i + 2] for i in range(len(run) - 1))
        else:
            terms.append(run)
        if len(terms) >= MAX_TERMS:
            break
    return terms[:MAX_TERMS]


def query_terms(text: str) -> list[str]:
    """Distinct terms of a query, first occurrence first."""
    return list(dict.fromkeys(keyword_terms(text)))
