"""The cyclic garbage collector's thresholds in a corpus-job worker process.

The job allocates millions of short-lived records (tuples, strings, Mentions), which reference counting
frees, while the process holds hundreds of thousands of live objects (the lookup store's cache, the
labeller's caches, Beam's and pyarrow's modules). With Python's default thresholds (700, 10, 10) every
10 young collections are a gen-1 pass and every 100 a full pass over all of them: ~30% of pass 2's CPU on
the x64 scale input's pages (the lookup-and-label harness, same pages, same store). Cycles are still
collected, less often: a young pass every 50,000 allocations, a full one every 5M at most.
"""
from __future__ import annotations

import gc

THRESHOLDS = (50_000, 10, 10)
_tuned = False


def tune_gc() -> None:
    """Raise the collector's thresholds for this process, once (never lowers thresholds already higher)."""
    global _tuned
    if _tuned:
        return
    _tuned = True
    current = gc.get_threshold()
    if current[0] and current[0] < THRESHOLDS[0]:  # 0: collection disabled by the user; keep it so
        gc.set_threshold(*(max(old, new) for old, new in zip(current, THRESHOLDS)))
