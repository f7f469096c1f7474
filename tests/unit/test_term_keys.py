"""Keyword dimensions under the tenant's key: a permutation, so rankings do not move, and
the index never holds the dimension a guessed word hashes to."""

from __future__ import annotations

import random
import uuid

from mnemo.adapters.memory_index import InMemoryVectorIndex
from mnemo.adapters.memory_key_vault import InMemoryKeyVault
from mnemo.domain.keywords import passage_vector, query_vector, term_id
from mnemo.domain.term_keys import _permute, _rounds, keyed_dimension, keyed_vector
from mnemo.ports import VectorPoint
from mnemo.service.sealing import BlindTagIndex, KeyCache, Sealer

KEY = bytes(range(32))


def _inverse(dim: int, key: bytes) -> int:
    """The Feistel network run backwards: a permutation has one."""
    rounds = _rounds(key)
    left, right = dim >> 16, dim & 0xFFFF
    for keyed in reversed(rounds):
        f = keyed.copy()
        f.update(left.to_bytes(2, "big"))
        left, right = right ^ int.from_bytes(f.digest(), "big"), left
    return (left << 16) | right


def test_keyed_dimensions_are_a_permutation_of_the_32_bit_space() -> None:
    rng = random.Random(7)
    dims = [0, 1, 0xFFFF, 0x10000, 0xFFFFFFFF, *(rng.getrandbits(32) for _ in range(20_000))]
    keyed = [keyed_dimension(d, KEY) for d in dims]
    assert all(0 <= k < 2**32 for k in keyed)
    assert [_inverse(k, KEY) for k in keyed] == dims  # one-to-one: no new collision
    assert keyed == [_permute(d, _rounds(KEY)) for d in dims]  # the same each time
    other = [keyed_dimension(d, bytes(32)) for d in dims[:1000]]
    assert sum(a == b for a, b in zip(keyed, other, strict=False)) < 5  # another key, others


def test_a_words_dimension_cannot_be_found_without_the_key() -> None:
    vector = passage_vector("Caroline adopted a puppy named Oscar")
    keyed = keyed_vector(vector, KEY)
    assert list(keyed.indices) == sorted(keyed.indices)
    assert sorted(keyed.values) == sorted(vector.values)
    assert term_id("oscar") in vector.indices
    assert not set(vector.indices) & set(keyed.indices)


def test_rankings_under_keyed_dimensions_are_the_unkeyed_ones() -> None:
    """The same corpus and queries, in a plain index and through BlindTagIndex: the same
    memories, in the same order, with the same scores; the inner index holds no term id
    of the plain vectors."""
    rng = random.Random(11)
    words = [f"w{i}" for i in range(400)] + ["tea", "puppy", "oscar", "hiking", "lake"]
    plain, inner = InMemoryVectorIndex(4), InMemoryVectorIndex(4)
    blind = BlindTagIndex(inner, Sealer(KeyCache(InMemoryKeyVault(), ttl=60.0)))
    for _ in range(300):
        text = " ".join(rng.choices(words, k=rng.randint(3, 30)))
        point = VectorPoint(
            str(uuid.UUID(int=rng.getrandbits(128), version=4)),
            "acme",
            "user:u",
            "fact",
            "user",
            (),
            [1.0, 0, 0, 0],
            passage_vector(text),
        )
        plain.upsert([point])
        blind.upsert([point])
    queries = ["tea with oscar", "hiking by the lake", "puppy", "w1 w2 w3 w300", "nothing"]
    for query in queries:
        want = plain.keyword_search("acme", query_vector(query), 50)
        got = blind.keyword_search("acme", query_vector(query), 50)
        assert [m for m, _ in got] == [m for m, _ in want], query
        assert [round(s, 9) for _, s in got] == [round(s, 9) for _, s in want], query
        hybrid = blind.hybrid_search("acme", [1.0, 0, 0, 0], query_vector(query), 20)
        assert hybrid == plain.hybrid_search("acme", [1.0, 0, 0, 0], query_vector(query), 20)
    stored = {d for rows in inner._rows.values() for r in rows.values() for d in r.keywords}
    assert stored
    assert not stored & {term_id(w) for w in words}
    # another tenant's key permutes differently: its queries find nothing of acme's
    assert blind._terms("globex", query_vector("tea")) != blind._terms("acme", query_vector("tea"))
