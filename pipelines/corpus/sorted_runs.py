"""Sorted runs in files: how pass 1 of the two-pass job hands its small records from one step to the next.

A step's records are ``(key, tag, value)`` tuples (the key a title, an alias or an entity). A producer
partitions them by :func:`stable_shard` of the key, buffers at most ``buffer_records`` of them, and writes
each partition's buffer, sorted by (key, tag), as one run file ``FOLDER/{shard:05d}/{producer}-{seq:04d}.run``
(:class:`RunWriter`). The consumer of a shard merges every run of that shard (:func:`grouped`): all the
records of one key arrive together, in tag order, so a step puts its table side (a title's kinds, an
entity's link counts) on smaller tags than its requests and iterates the requests, however many a hub has.

Only the run paths cross Beam's shuffles. So the DirectRunner, which holds every shuffled collection in
memory, holds paths, not records, and a Dataflow job's workers find the runs under the job's output
folder (any filesystem of :mod:`wikiedm.storage`). Memory: one buffer per producer, and one batch per
run being merged (at most :data:`MAX_OPEN_RUNS` open at once; the smallest excess runs are merged first on
local disk),
plus the records of one key that a run holds over more than one batch (:func:`merge_batches`; a run is
at most one buffer).
"""
from __future__ import annotations

import bisect
import hashlib
import itertools
import marshal
import os
import shutil
import struct
import tempfile
from operator import itemgetter
from typing import Callable, Iterable, Iterator

BATCH_RECORDS = 4096  # records per marshal frame in a run file: one call per batch, not per record
MARSHAL_VERSION = 4
_FRAME = struct.Struct("<I")  # a frame's length
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
    """Sorted records -> a run file's bytes, in batches; returns the bytes written. A batch is one frame: its
    length (4 bytes, little-endian), then the batch (a list of record tuples) as :mod:`marshal` data
    (:data:`MARSHAL_VERSION`). marshal writes and reads plain tuples, strings and numbers several times faster
    than pickle; its format may change between Python versions, which is fine for runs: the job's own steps
    write and read them, all on one Python (a Dataflow job's workers run one container image). A value
    marshal cannot write (an instance of a class, a str subclass) raises ValueError when it is written."""
    written = 0
    for i in range(0, len(records), BATCH_RECORDS):
        data = marshal.dumps(records[i:i + BATCH_RECORDS], MARSHAL_VERSION)
        fh.write(_FRAME.pack(len(data)))
        fh.write(data)
        written += _FRAME.size + len(data)
    return written


def read_batches(fh) -> Iterator[list]:
    """A run file's batches of records (lists, in order)."""
    while True:
        head = _read_exactly(fh, _FRAME.size)
        if not head:
            return
        size = _FRAME.unpack(head)[0] if len(head) == _FRAME.size else -1
        data = _read_exactly(fh, size) if size >= 0 else b""
        if len(data) != size:
            raise ValueError(f"truncated run file ({getattr(fh, 'name', fh)!r}): a batch frame is cut short")
        yield marshal.loads(data)


def _read_exactly(fh, size: int) -> bytes:
    """``size`` bytes, fewer only at the end of the file (a raw reader may return less per read)."""
    data = fh.read(size)
    if len(data) < size:
        parts = [data]
        while size > (got := sum(map(len, parts))):
            more = fh.read(size - got)
            if not more:
                break
            parts.append(more)
        data = b"".join(parts)
    return data


def read_run(fh) -> Iterator[tuple]:
    return itertools.chain.from_iterable(read_batches(fh))


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
    """Every record of the runs at ``paths``, in (key, tag) order, ties in the order of ``sorted(paths)``
    (as ``heapq.merge`` of the runs would give them)."""
    return itertools.chain.from_iterable(merged_blocks(paths, open_read, tmp_dir))


def merged_blocks(paths: Iterable[str], open_read: Callable, tmp_dir: str | None = None) -> Iterator[list]:
    """:func:`merged`'s records as lists of whole keys: all the records of a key are in one block."""
    paths = sorted(paths)
    if len(paths) <= MAX_OPEN_RUNS:
        yield from _merge_open(paths, open_read)
        return
    tmp = tempfile.mkdtemp(prefix="wikiedm-runs-", dir=tmp_dir)
    local: set[str] = set()

    def reader(path: str):
        return _open_local(path) if path in local else open_read(path)

    try:  # merge in rounds, each into one local run, until MAX_OPEN_RUNS are left
        round_paths = paths
        while len(round_paths) > MAX_OPEN_RUNS:
            start, end = _smallest_window(round_paths, min(MAX_OPEN_RUNS, len(round_paths) - MAX_OPEN_RUNS + 1))
            out = os.path.join(tmp, f"merge-{len(local):06d}.run")
            with open(out, "wb") as fh:
                for block in _merge_open(round_paths[start:end], reader):
                    write_run(block, fh)
            local.add(out)
            round_paths = round_paths[:start] + [out] + round_paths[end:]
        yield from _merge_open(round_paths, reader)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _smallest_window(paths: list[str], count: int) -> tuple[int, int]:
    """(start, end) of the ``count`` consecutive runs with the fewest bytes (local files; others count 0).

    A round merges only as many runs as are too many to open at once, not all of them: most records are read
    once. The runs merged are consecutive in ``paths``' order and their merge takes their place, so ties
    keep the order of ``sorted(paths)``."""
    sizes = [os.path.getsize(p) if os.path.isfile(p) else 0 for p in paths]
    window = sum(sizes[:count])
    best, best_start = window, 0
    for start in range(1, len(paths) - count + 1):
        window += sizes[start + count - 1] - sizes[start - 1]
        if window < best:
            best, best_start = window, start
    return best_start, best_start + count


def _open_local(path: str):
    return open(path, "rb", buffering=1 << 20)


def _merge_open(paths: list[str], open_read: Callable) -> Iterator[list]:
    handles = [open_read(p) for p in paths]
    try:
        yield from merge_batches([read_batches(h) for h in handles])
    finally:
        for h in handles:
            h.close()


def merge_batches(streams: list[Iterator[list]]) -> Iterator[list]:
    """Sorted runs, each as an iterator of its batches -> their records merged, as lists of whole keys.

    A merge by blocks, not by record: every round takes, from each run's batch in memory, the records whose
    key is below the smallest last key of the batches of the runs not yet read to the end (no later batch
    can hold such a key), sorts them once (:func:`sort_by_record_order`: stable, so a tie keeps its run's
    order, then its order in its run, as ``heapq.merge`` keeps it), and yields them; the runs whose batch is
    used up or ends at that key read their next batch. Sorting a few concatenated sorted slices is C work
    (timsort finds and merges them), where a heap merge costs several Python steps per record. Memory: a
    batch per run, and the records of the bounding key a run holds in more than one batch (a hub's)."""
    if len(streams) == 1:
        yield from streams[0]
        return
    held: list[list] = []  # per run: its records not yet yielded
    open_streams: list = []  # per run: its batch iterator, None once read to the end
    for stream in streams:
        batch = _next_batch(stream)
        held.append(batch or [])
        open_streams.append(stream if batch else None)
    while True:
        bound = min((held[i][-1][0] for i, s in enumerate(open_streams) if s is not None), default=None)
        if bound is None:  # every run read to the end: the rest, at once
            block = [record for records in held for record in records]
            if block:
                sort_by_record_order(block)
                yield block
            return
        block = []
        for i, records in enumerate(held):
            if not records or records[0][0] >= bound:
                continue
            if records[-1][0] < bound:
                block += records
                held[i] = []
            else:
                cut = bisect.bisect_left(records, bound, key=_KEY)
                block += records[:cut]
                held[i] = records[cut:]
        for i, stream in enumerate(open_streams):
            if stream is not None and (not held[i] or held[i][-1][0] == bound):
                batch = _next_batch(stream)
                if batch is None:
                    open_streams[i] = None
                else:
                    held[i] = held[i] + batch if held[i] else batch
        if block:
            sort_by_record_order(block)
            yield block


def _next_batch(stream: Iterator[list]) -> list | None:
    """The next non-empty batch, or None at the end."""
    for batch in stream:
        if batch:
            return batch
    return None


def grouped(paths: Iterable[str], open_read: Callable, tmp_dir: str | None = None) -> Iterator[tuple[str, Iterator]]:
    """(key, its records in tag order) for every key of the runs, in key order. Read each key's records
    before asking for the next key (they are streamed, not held)."""
    return itertools.groupby(merged(paths, open_read, tmp_dir), key=_KEY)
