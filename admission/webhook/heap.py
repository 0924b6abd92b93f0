"""Garbage-collector settings for the webhook's processes (the server and its decision workers).

A 50 KB review decodes into 10-20 thousand dicts, lists and strings, and a decision allocates as many
again. With CPython's default threshold (a young collection every 700 new container objects) each review
triggered 15-30 young collections; each promoted the half-built object tree a step towards the old
generation, and every few hundred reviews a full collection walked the whole heap: up to 200 ms on the
event loop of a loaded 2-core machine (measured with ``gc.callbacks`` during benchmarks/webhook_latency.py,
five full collections per thousand reviews in the server process, two per worker), which is where the
p99 went. None of that memory is cyclic: it is freed by reference counting as soon as the review is
answered, if no collection has moved it first.

So: a young collection only every :data:`YOUNG` new objects (a review's objects die before one sees
them), and everything loaded at start-up (imports, catalogs, the fork server's memos) frozen out of the
collector's walks, so a full collection looks only at what was made since.
"""

from __future__ import annotations

import gc

YOUNG = 50_000
"""Container objects allocated between young collections (CPython's default: 700)."""


def settle() -> None:
    """Collect what start-up left, freeze the rest, and raise the young threshold (call once, when ready)."""
    gc.collect()
    gc.freeze()
    tune()


def tune() -> None:
    """Only the young threshold (the older generations keep CPython's defaults)."""
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG, middle, old)
