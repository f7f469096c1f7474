"""Keyword dimensions under a tenant's key.

A term's dimension (`keywords.term_id`) is an unkeyed hash: anyone who holds the vector
index's files could hash a guessed word and look for its dimension among a forgotten
user's deleted points. So the index never receives those dimensions: each one goes through
a keyed permutation of the 32-bit space first, a Feistel network of `ROUNDS` rounds whose
round function is keyed BLAKE2b (the construction of format-preserving encryption, FF1, on
a 2^32 domain). Being a permutation, it maps distinct dimensions to distinct dimensions, so
keyword scores and rankings are exactly those of the unkeyed dimensions; without the key,
a guessed word's dimension cannot be computed. Queries go through the same permutation.
"""

from __future__ import annotations

import hashlib

from mnemo.domain.keywords import SparseVector

__all__ = ["ROUNDS", "KeyedDimensions", "keyed_dimension", "keyed_vector"]

ROUNDS = 10
_HALF = 0xFFFF


def _rounds(key: bytes) -> list[hashlib.blake2b]:
    """One keyed BLAKE2b per round, copied for each input (cheaper than keying again)."""
    return [
        hashlib.blake2b(key=key, digest_size=2, person=b"mnemo-terms" + bytes((i,)))
        for i in range(ROUNDS)
    ]


def _permute(dim: int, rounds: list[hashlib.blake2b]) -> int:
    left, right = dim >> 16, dim & _HALF
    for keyed in rounds:
        f = keyed.copy()
        f.update(right.to_bytes(2, "big"))
        left, right = right, left ^ int.from_bytes(f.digest(), "big")
    return (left << 16) | right


def keyed_dimension(dim: int, key: bytes) -> int:
    """The dimension `dim` (an unsigned 32-bit number) under `key` (up to 64 bytes)."""
    return _permute(dim, _rounds(key))


class KeyedDimensions:
    """`keyed_dimension` under one key, remembering up to `size` dimensions it has mapped
    (terms repeat: a few thousand make most of any text)."""

    def __init__(self, key: bytes, size: int = 50_000) -> None:
        self._rounds = _rounds(key)
        self._seen: dict[int, int] = {}
        self._size = size

    def __call__(self, dim: int) -> int:
        keyed = self._seen.get(dim)
        if keyed is None:
            keyed = _permute(dim, self._rounds)
            if len(self._seen) >= self._size:
                self._seen.clear()
            self._seen[dim] = keyed
        return keyed

    def vector(self, vector: SparseVector) -> SparseVector:
        """`vector` with every dimension permuted, in ascending order."""
        if not vector:
            return vector
        pairs = sorted(zip(map(self, vector.indices), vector.values, strict=True))
        return SparseVector(tuple(d for d, _ in pairs), tuple(v for _, v in pairs))


def keyed_vector(vector: SparseVector, key: bytes) -> SparseVector:
    """A sparse vector with every dimension permuted under `key`, in ascending order."""
    return KeyedDimensions(key).vector(vector)
