"""A server process's heap once it is wired, before it serves.

CPython's cyclic collector walks every tracked object of the generations it collects, and
a full collection walks them all: in a gateway, about 150,000 objects that start-up made
(modules, classes, schemas, drivers' state) and that live as long as the process. Each
full collection then pauses whichever request thread triggered it for tens to hundreds of
milliseconds on a busy machine, which is what a latency tail is made of. Once the process
is wired, `settle` collects what start-up left as garbage and moves every object alive at
that moment to the collector's permanent generation (gc.freeze), so later collections walk
only what requests and batches allocate. Objects frozen are still freed by reference
counting; only a cycle among them would stay, and start-up's cycles were collected first.
"""

from __future__ import annotations

import gc
import logging

log = logging.getLogger("mnemo.heap")


def settle() -> int:
    """Collect start-up's garbage, then freeze what is alive. Returns the objects frozen."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    log.info("start-up heap settled: %d objects out of the collector's walks", frozen)
    return frozen
