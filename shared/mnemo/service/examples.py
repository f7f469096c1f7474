"""Which registration rules an utterance is close to, measured with the platform's embedder.

Registration stays a pure handler: it receives this selector and reads only its ranking.
The rules' examples (and the utterances that must select nothing) are embedded once, on
first use, the same way as the utterance (as queries: the comparison is symmetric).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from mnemo.domain.rules import RuleSet
from mnemo.ports import Embedder

__all__ = ["EmbeddingSelector"]


class EmbeddingSelector:
    """Ranks rules by their nearest example. A rule is selected when that similarity
    reaches the rule set's threshold for this embedder and beats the nearest example of
    `ignore_examples` (utterances that look like memories and are not)."""

    def __init__(self, rules: RuleSet, embedder: Embedder) -> None:
        self.rules = rules
        self.embedder = embedder
        self.threshold = rules.threshold_for(embedder.name)
        self._labels: list[str | None] = []
        self._matrix: np.ndarray | None = None
        self._lock = threading.Lock()

    def _examples(self) -> np.ndarray:
        with self._lock:
            if self._matrix is None:
                pairs = self.rules.examples()
                self._labels = [label for label, _ in pairs]
                vectors = [self.embedder.embed_query(text) for _, text in pairs]
                self._matrix = (
                    np.asarray(vectors, dtype=np.float32)
                    if vectors
                    else np.zeros((0, self.embedder.dim), dtype=np.float32)
                )
            return self._matrix

    def scores(self, text: str) -> dict[str | None, float]:
        """Each rule's (and None: the ignore examples') best similarity to `text`."""
        matrix = self._examples()
        if matrix.shape[0] == 0:
            return {}
        query = np.asarray(self.embedder.embed_query(text), dtype=np.float32)
        sims = matrix @ query
        best: dict[str | None, float] = {}
        for label, sim in zip(self._labels, sims.tolist(), strict=True):
            if sim > best.get(label, -2.0):
                best[label] = float(sim)
        return best

    def select(self, text: str) -> Sequence[str]:
        if not any(r.examples for r in self.rules.rules):
            return ()
        best = self.scores(text)
        floor = max(self.threshold, best.get(None, -2.0))
        ranked = sorted(
            ((sim, label) for label, sim in best.items() if label is not None and sim >= floor),
            reverse=True,
        )
        return [label for _, label in ranked]
