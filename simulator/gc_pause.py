"""The cyclic garbage collector paused while a run executes (issue 17: CPU per simulated request)."""
from __future__ import annotations

import gc
from contextlib import contextmanager


@contextmanager
def paused_gc():
    """Disable Python's cyclic garbage collector inside the block; restore its state after.

    Why: a run allocates millions of short-lived tuples and lists, so the collector runs every
    few hundred steps, and its full passes walk every live object (the trace's requests, the
    running sequences, every imported module): on the full Azure conv trace (19,366 requests,
    `benchmarks/bench_full_trace.py`) about 0.15–0.2 CPU-s of a 2.5–3 CPU-s point, two full
    passes of ~0.05 s each among them (timed with `gc.callbacks`). A run makes almost no cyclic
    garbage (~1,000 objects over that trace; a `Sequence` holds no reference to itself), and
    reference counting still frees everything else at once, so
    memory is unchanged; what cyclic garbage there is waits for the first collection after the
    block. Nested blocks keep the outermost state. Results never depend on it.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
