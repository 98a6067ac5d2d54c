"""Progress of a long run: the readers write small per-range records, the driver prints a line from them.

Each pass's reader writes ``OUT/progress/pass<N>-<range start>-<unit>.json`` (pages and compressed bytes
read of its range, or of pass 2's chunk of it, and their size) every ``--progress_every_s`` seconds and when the range is done; the
records are files so they reach the driver from any runner's workers. While a local run goes on, a thread
of ``wikiedm corpus`` (:class:`ProgressPrinter`) reads them every ``--progress_every_s`` seconds and
prints the pages and bytes read of the dump's total, pages/s and an ETA. ``WriteManifest`` removes the
folder with the other files of no finished corpus.
"""
from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass

from pipelines.dump.compression import file_size
from wikiedm import storage

PASSES = {1: "tables", 2: "passages"}


def range_bytes(path: str, start: int, end: int | None) -> int:
    """Compressed bytes of a read range (to end of file when ``end`` is None)."""
    return (end if end is not None else file_size(path)) - start


def record_path(folder: str, pass_number: int, start: int, unit: int = 0) -> str:
    return storage.join(folder, f"pass{pass_number}-{start:015d}-{unit:05d}.json")


@dataclass
class RangeProgress:
    """What one reader has read of its range; ``write()`` saves it (cheaply: a small JSON file)."""

    folder: str
    pass_number: int
    start: int
    range_bytes: int
    pages: int = 0
    bytes_read: int = 0
    done: bool = False
    unit: int = 0  # a part of the range (pass 2: a chunk of its cached articles)

    def write(self) -> None:
        if not self.folder:
            return
        record = {"pass": self.pass_number, "start": self.start, "range_bytes": self.range_bytes,
                  "pages": self.pages, "bytes_read": min(self.bytes_read, self.range_bytes), "done": self.done}
        try:
            storage.write_json_atomic(record_path(self.folder, self.pass_number, self.start, self.unit), record)
        except OSError:  # progress is a convenience: never fail a read for it
            pass


def read_records(folder: str) -> list[dict]:
    return list(read_records_by_path(folder).values())


def read_records_by_path(folder: str) -> dict[str, dict]:
    records = {}
    for path in storage.list_files(folder):
        if not path.endswith(".json"):
            continue
        try:
            records[path] = json.loads(storage.read_bytes(path))
        except (OSError, ValueError):  # being replaced, or removed at the end
            continue
    return records


def _duration(seconds: float) -> str:
    seconds = int(seconds)
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


def progress_line(records: list[dict], total_bytes: int, elapsed: float) -> str:
    """One line: per pass, pages and bytes read of the dump's total; pages/s; ETA of the whole job
    (both passes read the dump once each; the rate is the compressed bytes read per second so far)."""
    parts = []
    done_bytes = pages_total = 0
    for number, name in PASSES.items():
        mine = [r for r in records if r.get("pass") == number]
        pages = sum(r["pages"] for r in mine)
        read = sum(r["bytes_read"] for r in mine)
        done_bytes += read
        pages_total += pages
        if mine:
            share = read / total_bytes if total_bytes else 1.0
            parts.append(f"pass {number} ({name}): {pages:,} pages, {read / 1e6:,.1f} of {total_bytes / 1e6:,.1f} MB "
                         f"({share:.0%})")
    if not parts:
        return f"progress: {_duration(elapsed)} elapsed, no page read yet"
    rate = pages_total / elapsed if elapsed > 0 else 0.0
    line = f"progress: {'; '.join(parts)}; {rate:,.0f} pages/s"
    remaining = 2 * total_bytes - done_bytes
    if done_bytes and remaining > 0:
        line += f"; ETA {_duration(remaining / (done_bytes / elapsed))}"
    return line


class ProgressPrinter:
    """A thread that prints :func:`progress_line` every ``every_s`` seconds until ``stop()``."""

    def __init__(self, folder: str, total_bytes: int, every_s: float, write=print) -> None:
        self.folder = folder
        self.total_bytes = total_bytes
        self.every_s = max(0.05, every_s)
        self.write = write
        self._stop = threading.Event()
        self._started = time.monotonic()
        self._seen: dict[str, dict] = {}
        self._thread = threading.Thread(target=self._run, name="wikiedm-progress", daemon=True)

    def start(self) -> "ProgressPrinter":
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self._print()

    def _print(self) -> None:
        # A record only grows, and the folder goes with the job's other working files at the end: keep the
        # last record seen of each reader, so a late tick (or a slow listing) never goes back to zero.
        self._seen.update(read_records_by_path(self.folder))
        self.write(progress_line(list(self._seen.values()), self.total_bytes, time.monotonic() - self._started))

    def stop(self) -> None:
        """Stop the thread and print a last line (what the readers had written when they ended)."""
        self._stop.set()
        self._thread.join(timeout=5)
        if not self._thread.is_alive():
            self._print()
