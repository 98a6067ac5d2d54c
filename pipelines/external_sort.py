"""Sort more items than fit in memory: sorted runs spilled to local disk, then merged.

The shard writers use it so that no worker holds a whole shard: items are
buffered up to ``buffer_items``, each full buffer is sorted and pickled to a
run file in a temporary folder, and ``sorted()`` merges the runs (and what is
still buffered) lazily. Memory: one buffer plus one item per run.
Deterministic when keys are unique: the merged order is the sort order,
whatever order the items arrived in.
"""
from __future__ import annotations

import heapq
import os
import pickle
import shutil
import tempfile
from typing import Callable, Iterator


class ExternalSorter:
    """``add`` items, then iterate ``sorted()`` once; use as a context manager (removes the runs)."""

    def __init__(self, key: Callable, buffer_items: int = 100_000, tmp_dir: str | None = None) -> None:
        if buffer_items < 1:
            raise ValueError(f"buffer_items must be >= 1, got {buffer_items}")
        self.key = key
        self.buffer_items = buffer_items
        self._tmp_parent = tmp_dir
        self._dir: str | None = None
        self._buffer: list = []
        self._weight = 0
        self._runs: list[str] = []
        self.items = 0

    @property
    def spilled_runs(self) -> int:
        return len(self._runs)

    def add(self, item, weight: int = 1) -> None:
        """Buffer ``item``; ``weight``: how many of ``buffer_items`` it counts for (a run of rows)."""
        self._buffer.append(item)
        self._weight += weight
        self.items += 1
        if self._weight >= self.buffer_items:
            self._spill()

    def _spill(self) -> None:
        if self._dir is None:
            self._dir = tempfile.mkdtemp(prefix="wikiedm-sort-", dir=self._tmp_parent)
        self._buffer.sort(key=self.key)
        path = os.path.join(self._dir, f"run-{len(self._runs):06d}.pickle")
        with open(path, "wb") as fh:
            pickler = pickle.Pickler(fh, protocol=pickle.HIGHEST_PROTOCOL)
            for item in self._buffer:
                pickler.dump(item)
                pickler.clear_memo()  # items are independent; the memo would grow with the run
        self._runs.append(path)
        self._buffer = []
        self._weight = 0

    def sorted(self) -> Iterator:
        self._buffer.sort(key=self.key)
        if not self._runs:
            yield from self._buffer
            return
        streams = [_read_run(path) for path in self._runs] + [iter(self._buffer)]
        yield from heapq.merge(*streams, key=self.key)

    def close(self) -> None:
        self._buffer = []
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        self._runs = []

    def __enter__(self) -> "ExternalSorter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _read_run(path: str) -> Iterator:
    with open(path, "rb", buffering=1 << 20) as fh:
        while True:
            try:
                # A fresh unpickler per item, as each was pickled with a cleared memo: one unpickler's memo
                # would outlive the item, and the next item's memo references would reach stale objects.
                yield pickle.load(fh)
            except EOFError:
                return
