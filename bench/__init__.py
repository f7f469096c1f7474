"""Mnemo's benchmark suite. Run it with `make bench` or `python -m bench.run --out DIR`.

Import nothing heavy here: `bench.run` must set the environment (OPENBLAS_NUM_THREADS)
before numpy is first imported, and this package's `__init__` runs before it.
"""
