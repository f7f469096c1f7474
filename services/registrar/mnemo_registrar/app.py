"""The registrar's faust-streaming app for the distributed mode (consumer group mnemo-registrar).

`python -m mnemo_registrar` runs it when MNEMO_MODE=distributed; see mnemo.entrypoints.workers.
"""

from mnemo.entrypoints.workers import Worker, make_worker

__all__ = ["worker"]


def worker() -> Worker:
    """Build the worker (connects to Cassandra and Kafka)."""
    return make_worker("registrar")
