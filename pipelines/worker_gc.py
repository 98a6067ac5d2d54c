"""The cyclic garbage collector in a corpus-job worker process: its thresholds, and the heap it skips.

The job allocates millions of short-lived records (tuples, strings, Mentions), which reference counting
frees, while the process holds hundreds of thousands of live objects (the lookup store's cache, the
labeller's caches, Beam's and pyarrow's modules). With Python's default thresholds (700, 10, 10) every
10 young collections are a gen-1 pass and every 100 a full pass over all of them: ~30% of pass 2's CPU on
the x64 scale input's pages (the lookup-and-label harness, same pages, same store). Cycles are still
collected, less often: a young pass every 200,000 allocations, a full one every 20M at most. A young pass
scans the objects made since the last one that are still alive, so the fewer passes, the more of a page's
records are freed before one sees them: on the x8 scale input the collector's CPU after pipeline
construction was 0.11-0.15 s with 200,000 against 0.37-0.52 s with 50,000, the heap frozen in both (the young
generation holds at most 200,000 objects, ~20-30 MB, before its garbage cycles are collected).

At its first bundle the process also freezes its heap (``gc.freeze``): the modules, the pipeline and the
runner (~210,000 objects on the DirectRunner), made before any record and kept to its end. Full passes
then skip them (a pass over them cost ~0.1-0.2 s). Frozen objects are still freed by reference counting;
only a reference cycle among them is never collected, and they are frozen once per process, so what this
can hold is bounded by the heap at that moment.
"""
from __future__ import annotations

import gc

THRESHOLDS = (200_000, 10, 10)
_tuned = False
_froze = False


def tune_gc() -> None:
    """Raise the collector's thresholds for this process and freeze the heap made so far, once (never lowers
    thresholds already higher; a disabled collector, or a heap someone already froze, is left as it is)."""
    global _tuned, _froze
    if _tuned:
        return
    _tuned = True
    current = gc.get_threshold()
    if current[0] and current[0] < THRESHOLDS[0]:  # 0: collection disabled by the user; keep it so
        gc.set_threshold(*(max(old, new) for old, new in zip(current, THRESHOLDS)))
    if current[0] and gc.isenabled() and not gc.get_freeze_count():
        gc.freeze()
        _froze = True


def froze_heap() -> bool:
    """Whether :func:`tune_gc` froze this process's heap: a constant-time test, where ``gc.get_freeze_count``
    walks every frozen object (~20 ms for a worker's ~200,000)."""
    return _froze
