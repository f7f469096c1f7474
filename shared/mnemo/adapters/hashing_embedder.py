"""A deterministic, dependency-light embedder for tests: feature hashing, no model.

Features are lowercase words and character 1-3-grams inside each word (so scripts
written without spaces, such as Chinese, still share features). Each feature lands in
one of `dim` buckets with a sign, both taken from a BLAKE2b digest of the feature: unlike
Python's `hash()` this does not change between processes. The bucket counts are
weighted and L2-normalized, so the dot product of two vectors is their cosine, and texts
that share words or characters score higher than texts that share nothing.

It is a real embedder (same input, same vector, on every machine) but has no notion of
meaning beyond shared surface forms. Queries and passages are embedded the same way.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

from mnemo.ports import Embedder

__all__ = ["HashingEmbedder"]

# Runs of Chinese, Japanese or Korean characters, or runs of other letters and digits.
_CJK = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\u3040-\u30ff\uac00-\ud7af"
_TOKEN = re.compile(f"[{_CJK}]+|[^\\W_{_CJK}]+")
_CJK_CHAR = re.compile(f"[{_CJK}]")
_EMPTY = "\x00empty"  # the one feature of a text that has none, so it still gets a unit vector

# Feature weights by kind (the feature's first character). Words: a shared word says
# more than a shared 3-gram, which says more than a shared letter (every English text
# shares letters). Scripts without spaces: a character is close to a word, a character
# pair (the usual Chinese word length) even more so.
_WEIGHTS = {
    "w": 2.0,  # word
    "1": 0.3,  # character n-grams inside a word
    "2": 0.7,
    "3": 1.0,
    "c": 1.0,  # character n-grams inside a CJK run
    "d": 1.5,
    "t": 1.0,
    "e": 1.0,  # the empty-text marker
}
_CJK_KINDS = {1: "c", 2: "d", 3: "t"}


@lru_cache(maxsize=65536)
def _slot(feature: str, dim: int) -> tuple[int, float]:
    digest = hashlib.blake2b(feature.encode("utf-8"), digest_size=8, person=b"mnemo-hash").digest()
    value = int.from_bytes(digest, "little")
    return (value >> 1) % dim, (1.0 if value & 1 else -1.0)


def _features(text: str) -> list[str]:
    normalized = unicodedata.normalize("NFKC", text).casefold()
    features: list[str] = []
    for match in _TOKEN.finditer(normalized):
        run = match.group(0)
        cjk = _CJK_CHAR.match(run) is not None
        if not cjk:
            features.append("w:" + run)
        for n in (1, 2, 3):
            kind = _CJK_KINDS[n] if cjk else str(n)
            features.extend(f"{kind}:{run[i : i + n]}" for i in range(len(run) - n + 1))
    return features or ["e:" + _EMPTY]


class HashingEmbedder(Embedder):
    """Signed feature hashing of words and character n-grams into `dim` buckets."""

    def __init__(self, dim: int = 256) -> None:
        if dim < 8:
            raise ValueError("dim must be at least 8")
        self.dim = dim
        self.name = f"hashing-{dim}"

    def embed_passages(self, texts: Sequence[str]) -> list[list[float]]:
        return [self._embed(text) for text in texts]

    def embed_query(self, text: str) -> list[float]:
        return self._embed(text)

    def _embed(self, text: str) -> list[float]:
        vector = np.zeros(self.dim, dtype=np.float64)
        for feature in _features(text):
            bucket, sign = _slot(feature, self.dim)
            vector[bucket] += sign * _WEIGHTS[feature[0]]
        norm = float(np.linalg.norm(vector))
        if norm == 0.0:  # every feature cancelled out (very unlikely); fall back to the marker
            bucket, sign = _slot("e:" + _EMPTY, self.dim)
            vector[bucket] = sign
            norm = 1.0
        result: list[float] = (vector / norm).tolist()
        return result
