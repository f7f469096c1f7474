"""How a store names the process that holds its claims (ProjectionStore.claims)."""

from __future__ import annotations

import os
import socket
import uuid

__all__ = ["holder_name"]


def holder_name() -> str:
    """The host (a pod's name on Kubernetes), the process id, and six random characters
    that tell two stores of one process apart."""
    return f"{socket.gethostname()}/{os.getpid()}/{uuid.uuid4().hex[:6]}"
