"""Sorted runs in files: how pass 1 of the two-pass job hands its small records from one step to the next.

A step's records are ``(key, tag, value)`` tuples (the key a title, an alias or an entity). A producer
partitions them by :func:`stable_shard` of the key, buffers at most ``buffer_records`` of them, and writes
each partition's buffer, sorted by (key, tag), as one run file ``FOLDER/{shard:05d}/{producer}-{seq:04d}.run``
(:class:`RunWriter`). The consumer of a shard merges every run of that shard (:func:`grouped`): all the
records of one key arrive together, in tag order, so a step puts its table side (a title's kinds, an
entity's link counts) on smaller tags than its requests and streams the requests, however many a hub has.

Only the run paths cross Beam's shuffles. So the DirectRunner, which holds every shuffled collection in
memory, holds paths, not records, and a Dataflow job's workers find the runs under the job's output
folder (any filesystem of :mod:`wikiedm.storage`). Memory: one buffer per producer, and one batch per
run being merged (at most :data:`MAX_OPEN_RUNS` open at once; more are merged in rounds on local disk).
"""
from __future__ import annotations

import gc
import hashlib
import heapq
import itertools
import os
import pickle
import shutil
import tempfile
from operator import itemgetter
from typing import Callable, Iterable, Iterator

BATCH_RECORDS = 4096  # records per pickle in a run file: one pickle call per batch, not per record
MAX_OPEN_RUNS = 128  # runs merged at once; beyond that, merged in rounds through local temporary runs
RECORD_ORDER = itemgetter(0, 1)  # (key, tag): a run's order, and the merge's
_KEY, _TAG = itemgetter(0), itemgetter(1)


def stable_shard(key: str, count: int) -> int:
    """The partition of ``key`` among ``count`` (BLAKE2b: the same in every process and on every runner).
    The one shard function of the job: the lookup store and the Parquet shard writers use it too, so a
    title's records and its store row share a shard."""
    if count == 1:
        return 0
    digest = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big") % count


def sort_by_record_order(records: list) -> None:
    """Sort ``records`` in place by (key, tag), ties in their order (stable): two stable sorts on one
    field each (tag, then key) compare plain strings and ints, faster than (key, tag) tuples; the tag
    sort is skipped when all records have one tag (most buffers)."""
    if len(set(map(_TAG, records))) > 1:
        records.sort(key=_TAG)
    records.sort(key=_KEY)


def run_name(folder: str, shard: int, producer: str, seq: int, join: Callable = os.path.join) -> str:
    return join(folder, f"{shard:05d}", f"{producer}-{seq:04d}.run")


def write_run(records: list, fh) -> int:
    """Sorted records -> a run file's bytes, in batches; returns the bytes written."""
    written = 0
    for i in range(0, len(records), BATCH_RECORDS):
        data = pickle.dumps(records[i:i + BATCH_RECORDS], protocol=pickle.HIGHEST_PROTOCOL)
        fh.write(data)
        written += len(data)
    return written


def read_batches(fh) -> Iterator[list]:
    """A run file's batches of records (lists, in order). The cyclic garbage collector is off while a batch
    is unpickled: its thousands of new tuples would start a collection every few hundred (each a walk of the
    young objects, now and then of the whole heap: loads took 2x (1M objects alive) to 4x (3M) longer), and
    they hold no cycles to find."""
    while True:
        enabled = gc.isenabled()
        gc.disable()
        try:
            batch = pickle.load(fh)
        except EOFError:
            return
        finally:
            if enabled:
                gc.enable()
        yield batch


def read_run(fh) -> Iterator[tuple]:
    for batch in read_batches(fh):
        yield from batch


class RunWriter:
    """Records of one producer -> sorted run files, one per partition and spill.

    ``create(path)`` opens a binary writer (``wikiedm.storage.create``: parent folders made, any
    filesystem); ``join`` builds paths. :meth:`close` returns ``[(shard, path), ...]`` of the runs written.
    """

    def __init__(self, folder: str, shards: int, producer: str, create: Callable, join: Callable = os.path.join,
                 buffer_records: int = 200_000) -> None:
        if shards < 1:
            raise ValueError(f"shards must be >= 1, got {shards}")
        self.folder = folder
        self.shards = shards
        self.producer = producer
        self.buffer_records = max(1, buffer_records)
        self._create = create
        self._join = join
        self._buffer: list = []
        self._seq = 0
        self.runs: list[tuple[int, str]] = []
        self.records = 0
        self.bytes = 0

    def add(self, key: str, tag: int, value) -> None:
        buffer = self._buffer
        buffer.append((key, tag, value))
        if len(buffer) >= self.buffer_records:
            self.spill()

    def spill(self) -> None:
        """Sort the buffer once by (key, tag), then cut it into partitions: one :func:`stable_shard` per
        distinct key, not per record (a title's records, a target's links share one)."""
        records, self._buffer = self._buffer, []
        if not records:
            return
        sort_by_record_order(records)
        partitions: dict[int, list] = {}
        for key, group in itertools.groupby(records, _KEY):
            shard = stable_shard(key, self.shards)
            part = partitions.get(shard)
            if part is None:
                partitions[shard] = list(group)
            else:
                part.extend(group)
        for shard in sorted(partitions):
            part = partitions[shard]
            path = run_name(self.folder, shard, self.producer, self._seq, self._join)
            with self._create(path) as fh:
                self.bytes += write_run(part, fh)
            self.runs.append((shard, path))
            self.records += len(part)
        self._seq += 1

    def close(self) -> list[tuple[int, str]]:
        self.spill()
        return self.runs


def merged(paths: Iterable[str], open_read: Callable, tmp_dir: str | None = None) -> Iterator[tuple]:
    """Every record of the runs at ``paths``, in (key, tag) order."""
    paths = sorted(paths)
    if len(paths) <= MAX_OPEN_RUNS:
        yield from _merge_open(paths, open_read)
        return
    tmp = tempfile.mkdtemp(prefix="wikiedm-runs-", dir=tmp_dir)
    try:  # merge in rounds: each group of MAX_OPEN_RUNS runs into one local run
        round_paths = paths
        level = 0
        while len(round_paths) > MAX_OPEN_RUNS:
            next_paths = []
            for i in range(0, len(round_paths), MAX_OPEN_RUNS):
                out = os.path.join(tmp, f"merge-{level}-{i // MAX_OPEN_RUNS:06d}.run")
                reader = open_read if level == 0 else _open_local
                with open(out, "wb") as fh:
                    batch = []
                    for record in _merge_open(round_paths[i:i + MAX_OPEN_RUNS], reader):
                        batch.append(record)
                        if len(batch) >= BATCH_RECORDS:
                            write_run(batch, fh)
                            batch = []
                    write_run(batch, fh)
                next_paths.append(out)
            round_paths = next_paths
            level += 1
        yield from _merge_open(round_paths, _open_local)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _open_local(path: str):
    return open(path, "rb", buffering=1 << 20)


def _merge_open(paths: list[str], open_read: Callable) -> Iterator[tuple]:
    handles = [open_read(p) for p in paths]
    try:
        streams = [read_run(h) for h in handles]
        if len(streams) == 1:
            yield from streams[0]
        else:
            yield from heapq.merge(*streams, key=RECORD_ORDER)
    finally:
        for h in handles:
            h.close()


def grouped(paths: Iterable[str], open_read: Callable, tmp_dir: str | None = None) -> Iterator[tuple[str, Iterator]]:
    """(key, its records in tag order) for every key of the runs, in key order. Read each key's records
    before asking for the next key (they are streamed, not held)."""
    return itertools.groupby(merged(paths, open_read, tmp_dir), key=_KEY)
