"""Read-only columns on disk that many worker processes share through memory maps.

The linker's tables (entity titles and descriptions, the alias candidate
index) are written once, on the machine that launches a job, and opened by
every worker with ``np.load(mmap_mode="r")``: a worker's memory holds only the
pages it touches, and processes on one machine share them through the page
cache. Nothing here loads a whole column into Python objects.

* :class:`StringColumn`: UTF-8 strings as one byte blob plus int64 offsets
  (``NAME.bin``, ``NAME.offsets.npy``).
* :class:`JsonlField`: one field of each line of a JSONL file, read on demand
  through the lines' byte offsets (BLINK's 6M-line ``entity.jsonl`` is not
  copied).
* :class:`StringHash`: an open-addressing hash table (CRC-32, linear probing)
  from a string to its position in a StringColumn: O(1) lookups, one probe
  array of int32 (``NAME.hash.npy``).
"""
from __future__ import annotations

import json
import mmap
import os
import zlib
from typing import Iterable

import numpy as np


def write_json(path: str, values: dict) -> None:
    """A JSON file under a temporary name, then an atomic rename (the completion marker of a build)."""
    with open(path + ".tmp", "w", encoding="utf-8") as fh:
        json.dump(values, fh, indent=2, sort_keys=True)
    os.replace(path + ".tmp", path)


def read_versioned_json(path: str, version: int) -> dict | None:
    """The JSON file at ``path`` when it exists and has ``"version": version``; else None."""
    if not os.path.isfile(path):
        return None
    with open(path, encoding="utf-8") as fh:
        values = json.load(fh)
    return values if values.get("version") == version else None


def save_npy(path: str, array: np.ndarray) -> None:
    """``np.save`` under a temporary name, then an atomic rename."""
    tmp = path + ".tmp.npy"
    np.save(tmp, array)
    os.replace(tmp, path)


def _random_access(memmap: np.ndarray) -> np.ndarray:
    """Tell the kernel the pages are read at random (no read-ahead: a lookup maps the pages it reads,
    not 128 KB around each), and drop the np.memmap wrapper (its per-item overhead)."""
    handle = getattr(memmap, "_mmap", None)
    if handle is not None and hasattr(handle, "madvise") and hasattr(mmap, "MADV_RANDOM"):
        handle.madvise(mmap.MADV_RANDOM)
    return np.asarray(memmap)


def load_npy(path: str) -> np.ndarray:
    """A read-only memory map of a ``.npy`` for random access."""
    return _random_access(np.load(path, mmap_mode="r"))


class StringWriter:
    """Appends strings to ``NAME.bin`` and records their offsets; ``close`` writes ``NAME.offsets.npy``."""

    def __init__(self, folder: str, name: str) -> None:
        self.blob_path = os.path.join(folder, f"{name}.bin")
        self.offsets_path = os.path.join(folder, f"{name}.offsets.npy")
        self._fh = open(self.blob_path + ".tmp", "wb")
        self._offsets = [0]
        self._at = 0

    def add(self, text: str) -> None:
        data = text.encode("utf-8", "surrogatepass")
        self._fh.write(data)
        self._at += len(data)
        self._offsets.append(self._at)

    def extend(self, texts: Iterable[str]) -> None:
        for text in texts:
            self.add(text)

    def close(self) -> int:
        self._fh.close()
        os.replace(self.blob_path + ".tmp", self.blob_path)
        save_npy(self.offsets_path, np.asarray(self._offsets, dtype=np.int64))
        return len(self._offsets) - 1


def write_strings(folder: str, name: str, texts: Iterable[str]) -> int:
    writer = StringWriter(folder, name)
    writer.extend(texts)
    return writer.close()


def write_arrow_strings(folder: str, name: str, strings) -> int:
    """A pyarrow string array written as a StringColumn straight from its buffers (no Python strings)."""
    import pyarrow as pa

    array = strings.cast(pa.large_string()) if strings.type != pa.large_string() else strings
    if isinstance(array, pa.ChunkedArray):
        array = array.combine_chunks()
    if array.null_count:
        raise ValueError(f"{name}: null strings")
    n = len(array)
    _, offsets_buf, data_buf = array.buffers()
    offsets = np.frombuffer(offsets_buf, dtype=np.int64, count=n + 1, offset=array.offset * 8) if n else np.zeros(1, np.int64)
    start, end = int(offsets[0]), int(offsets[-1])
    blob_path = os.path.join(folder, f"{name}.bin")
    with open(blob_path + ".tmp", "wb") as fh:
        if end > start:
            fh.write(memoryview(data_buf)[start:end])
    os.replace(blob_path + ".tmp", blob_path)
    save_npy(os.path.join(folder, f"{name}.offsets.npy"), (offsets - start).astype(np.int64))
    return n


def _map_bytes(path: str) -> np.ndarray:
    if os.path.getsize(path) == 0:
        return np.zeros(0, dtype=np.uint8)
    return _random_access(np.memmap(path, dtype=np.uint8, mode="r"))


class StringColumn:
    """The strings of a :class:`StringWriter`, memory-mapped."""

    def __init__(self, folder: str, name: str) -> None:
        self.offsets = load_npy(os.path.join(folder, f"{name}.offsets.npy"))
        self.blob = _map_bytes(os.path.join(folder, f"{name}.bin"))
        self.view = memoryview(self.blob)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def raw(self, i: int) -> bytes:
        return bytes(self.view[self.offsets[i]: self.offsets[i + 1]])

    def __getitem__(self, i: int) -> str:
        return self.raw(i).decode("utf-8", "surrogatepass")

    def slice(self, lo: int, hi: int) -> list[str]:
        return [self[i] for i in range(lo, min(hi, len(self)))]


class JsonlField:
    """Field ``field`` of line ``i`` of a JSONL file, through saved line offsets (``NAME.offsets.npy``)."""

    def __init__(self, jsonl_path: str, offsets_path: str, field: str) -> None:
        self.path = jsonl_path
        self.field = field
        self.offsets = load_npy(offsets_path)
        self._fh = open(jsonl_path, "rb")
        self._map = mmap.mmap(self._fh.fileno(), 0, access=mmap.ACCESS_READ) if os.path.getsize(jsonl_path) else b""
        if hasattr(self._map, "madvise") and hasattr(mmap, "MADV_RANDOM"):
            self._map.madvise(mmap.MADV_RANDOM)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> str:
        line = self._map[int(self.offsets[i]): int(self.offsets[i + 1])]
        value = json.loads(line).get(self.field, "")
        return value if isinstance(value, str) else ""

    def slice(self, lo: int, hi: int) -> list[str]:
        return [self[i] for i in range(lo, min(hi, len(self)))]

    def __getstate__(self):  # pickled into Beam DoFns: reopen on the worker
        return {"path": self.path, "field": self.field, "offsets": np.asarray(self.offsets)}

    def __setstate__(self, state):
        self.path, self.field, self.offsets = state["path"], state["field"], state["offsets"]
        self._fh = open(self.path, "rb")
        self._map = mmap.mmap(self._fh.fileno(), 0, access=mmap.ACCESS_READ)


def string_hash(data: bytes) -> int:
    return zlib.crc32(data)


def _table_size(n: int) -> int:
    size = 8
    while size < 2 * n:  # load factor <= 0.5: short probe runs
        size *= 2
    return size


def string_hashes(column: StringColumn, chunk: int = 1 << 20) -> np.ndarray:
    """CRC-32 of every string of a column, uint32 [n]."""
    n = len(column)
    out = np.empty(n, dtype=np.uint32)
    view = column.view
    for lo in range(0, n, chunk):
        bounds = np.asarray(column.offsets[lo: min(n, lo + chunk) + 1]).tolist()
        out[lo: lo + len(bounds) - 1] = [zlib.crc32(view[a:b]) for a, b in zip(bounds, bounds[1:])]
    return out


def build_string_hash(column: StringColumn, path: str) -> int:
    """Write the probe table of ``column`` (int32 positions, -1 empty); returns how many strings
    were duplicates of an earlier one (the earlier one is the one found)."""
    n = len(column)
    if n >= 2**31 - 1:
        raise ValueError("more than 2^31 strings")
    size = _table_size(n)
    mask = size - 1
    table = np.full(size, -1, dtype=np.int32)
    hashes = string_hashes(column)
    lengths = np.diff(np.asarray(column.offsets))
    pending = np.arange(n, dtype=np.int64)
    slot = (hashes.astype(np.int64) & mask)
    duplicates = 0
    while pending.size:  # one probe step for every pending string per round; lowest position wins a slot
        free = table[slot] < 0
        slots_won, first = np.unique(slot[free], return_index=True)
        winners = pending[free][first]
        table[slots_won] = winners
        won = np.zeros(pending.size, dtype=bool)
        won[np.flatnonzero(free)[first]] = True
        pending, slot = pending[~won], slot[~won]
        occupant = table[slot].astype(np.int64)
        maybe_same = (hashes[occupant] == hashes[pending]) & (lengths[occupant] == lengths[pending])
        same = np.zeros(pending.size, dtype=bool)
        for k in np.flatnonzero(maybe_same):
            same[k] = column.raw(int(occupant[k])) == column.raw(int(pending[k]))
        duplicates += int(same.sum())
        pending, slot = pending[~same], (slot[~same] + 1) & mask
    save_npy(path, table)
    return duplicates


class StringHash:
    """Position of a string in a StringColumn, or -1."""

    def __init__(self, column: StringColumn, path: str) -> None:
        self.column = column
        self.table = load_npy(path)
        self.mask = len(self.table) - 1

    def find(self, text: str) -> int:
        data = text.encode("utf-8", "surrogatepass")
        slot = string_hash(data) & self.mask
        offsets, view, table = self.column.offsets, self.column.view, self.table
        while True:
            j = table[slot]
            if j < 0:
                return -1
            lo, hi = offsets[j], offsets[j + 1]
            if hi - lo == len(data) and view[lo:hi] == data:
                return int(j)
            slot = (slot + 1) & self.mask
