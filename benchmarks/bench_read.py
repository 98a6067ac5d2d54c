"""Benchmark: reading + page splitting of dumps, the decompression layer before vs after.

``pipelines/dump/compression.py`` moved from hand-written decoder adapters to
the codecs' own readers (``bz2.BZ2File``, ``gzip.GzipFile``, ``lzma.LZMAFile``;
zstd frames on zstandard's ``decompressobj``). This times both on the same
inputs in one run:

* ``before``: the file as of ``--baseline_rev`` (``git show REV:pipelines/dump/compression.py``,
  loaded as a temporary module; it is importable nowhere else);
* ``after``: the working tree's ``pipelines.dump.compression``.

Each contender reads the raw file (every range of the plan for a multistream
dump read by ranges), decompresses it, normalises it to UTF-8 and splits and
parses it into pages with ``iter_pages_from_xml_chunks``, the job's page
reader: everything ``iter_pages`` does, with only the decompression layer
swapped. Both must give the same records (page id, title, text, dead-letter
reasons), checked on every input. Inputs: the shared dump excerpts, the
206-page enwiki excerpt recompressed as gzip (two members) and zstd (two
frames), and that excerpt replicated x8 (``bench_extract_replicate.py``) as
bz2, gzip and zstd. Rounds alternate before/after ``--repeat`` times; the
figure is the median CPU time (user + system of this process) per input, and
the ratio after / before (< 1: faster).

Usage: ``flock /work/bench.lock python benchmarks/bench_read.py [--repeat 5] [--json OUT]``
"""
from __future__ import annotations

import argparse
import bz2
import gzip
import hashlib
import importlib.util
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType
from typing import Callable, Iterator

import zstandard

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_extract_replicate import replicated_dump  # noqa: E402

from pipelines.dump import compression, iter_pages_from_xml_chunks, plan_read_ranges  # noqa: E402
from pipelines.dump.encoding import iter_utf8  # noqa: E402
from pipelines.records import DeadLetter, RawPage  # noqa: E402

# The last commit with the hand-written adapters.
DEFAULT_BASELINE_REV = "8816d9c3581a4c712de82c3c49952476e0400fb1"
SHARED = (REPO / ".." / "shared" / "wikidumps").resolve()
SHARED_DUMPS = [
    "enwiki-2016-206pages-articles1.xml.bz2",
    "enwiki-2016-206pages-articles1-multistream.xml.bz2",
    "enwiki-2019-196pages-namespaces.xml.bz2",
    "ukwiki-2023-first100k-lines-truncated.xml.xz",
    "enwiki-2019-11pages-partial.xml",
]
MULTISTREAM_INDEX = "enwiki-2016-206pages-articles1-multistream-index.txt.bz2"
RANGE_TARGET_BYTES = 256 << 10  # several ranges even in the 1.7 MB excerpt


def load_baseline(rev: str) -> ModuleType:
    """``pipelines/dump/compression.py`` as of ``rev``, as a module of its own."""
    source = subprocess.run(["git", "-C", str(REPO), "show", f"{rev}:pipelines/dump/compression.py"],
                            check=True, capture_output=True, text=True).stdout
    path = Path(tempfile.mkdtemp(prefix="bench-read-")) / "compression_before.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("compression_before", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def decoded_before(module: ModuleType) -> Callable[[str, int, int | None], Iterator[bytes]]:
    def decode(path: str, start: int, end: int | None) -> Iterator[bytes]:
        with open(path, "rb") as handle:
            raw = module.iter_raw_chunks(handle, start, end)
            first = next(raw, b"")
            codec = module.detect_codec(path, first)
            yield from module.iter_decompressed(_prepend(first, raw), codec, name=path)
    return decode


def decoded_after(path: str, start: int, end: int | None) -> Iterator[bytes]:
    with open(path, "rb") as handle:
        raw = compression.RawRange(handle, start, end)
        codec = compression.detect_codec(path, raw.peek(8))
        yield from compression.iter_decompressed(raw, codec, name=path)


def read_pages(decode, ranges: list[tuple[str, int, int | None]]) -> tuple[int, str]:
    """Pages read and a digest of every record (what both contenders must agree on)."""
    digest = hashlib.sha256()
    pages = 0
    for path, start, end in ranges:
        chunks = iter_utf8(decode(path, start, end), name=path)
        for record in iter_pages_from_xml_chunks(chunks, source=path, expect_document_end=end is None):
            if isinstance(record, RawPage):
                pages += 1
                digest.update(f"{record.page_id}\0{record.title}\0{record.text}\0".encode())
            elif isinstance(record, DeadLetter):
                digest.update(f"dead\0{record.reason}\0{record.page_id}\0".encode())
    return pages, digest.hexdigest()


def inputs(work: Path) -> dict[str, list[tuple[str, int, int | None]]]:
    """name -> the byte ranges read (one whole-file range, or a multistream plan)."""
    found: dict[str, list[tuple[str, int, int | None]]] = {}
    for name in SHARED_DUMPS:
        if (SHARED / name).exists():
            found[name] = [(str(SHARED / name), 0, None)]
    multistream = SHARED / "enwiki-2016-206pages-articles1-multistream.xml.bz2"
    if multistream.exists():
        plan = plan_read_ranges(str(multistream), str(SHARED / MULTISTREAM_INDEX), target_bytes=RANGE_TARGET_BYTES)
        # The header stream first, as the job reads siteinfo from it, then the planned ranges.
        found[f"{multistream.name} by {len(plan)} ranges"] = (
            [(str(multistream), 0, plan[0].start)] + [(r.path, r.start, r.end) for r in plan])
    source = SHARED / "enwiki-2016-206pages-articles1.xml.bz2"
    if source.exists():
        x8, _ = replicated_dump(source, 8)
        for label, path in (("x1", source), ("x8", x8)):
            xml = bz2.decompress(path.read_bytes())
            half = len(xml) // 2
            if label == "x8":
                found[f"enwiki-206pages x8 (bz2, {len(xml) >> 20} MiB XML)"] = [(str(path), 0, None)]
            recompressed = {
                "gz": gzip.compress(xml[:half], 6) + gzip.compress(xml[half:], 6),
                "zst": (zstandard.ZstdCompressor(level=3).compress(xml[:half])
                        + zstandard.ZstdCompressor(level=3).compress(xml[half:])),
            }
            for codec, blob in recompressed.items():
                target = work / f"enwiki-206pages-{label}.xml.{codec}"
                target.write_bytes(blob)
                found[f"enwiki-206pages {label} ({codec}, {len(xml) >> 20} MiB XML)"] = [(str(target), 0, None)]
    return found


def cpu_seconds(function) -> tuple[float, float, object]:
    cpu, wall = time.process_time(), time.perf_counter()
    result = function()
    return time.process_time() - cpu, time.perf_counter() - wall, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=5, help="rounds of before/after (medians)")
    parser.add_argument("--baseline_rev", default=DEFAULT_BASELINE_REV, help="git revision of the 'before' file")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)

    contenders = {"before": decoded_before(load_baseline(args.baseline_rev)), "after": decoded_after}
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="bench-read-") as work:
        for name, ranges in inputs(Path(work)).items():
            size = sum(Path(path).stat().st_size for path in {path for path, _, _ in ranges})
            cpu: dict[str, list[float]] = {label: [] for label in contenders}
            wall: dict[str, list[float]] = {label: [] for label in contenders}
            outcome = {}
            for round_ in range(args.repeat):
                order = list(contenders) if round_ % 2 == 0 else list(reversed(contenders))
                for label in order:
                    seconds, wall_seconds, outcome[label] = cpu_seconds(
                        lambda: read_pages(contenders[label], ranges))
                    cpu[label].append(seconds)
                    wall[label].append(wall_seconds)
            if outcome["before"] != outcome["after"]:
                raise SystemExit(f"{name}: before and after read different records: {outcome}")
            medians = {label: statistics.median(values) for label, values in cpu.items()}
            results[name] = {
                "raw_bytes": size,
                "pages": outcome["after"][0],
                "records_sha256": outcome["after"][1],
                "cpu_s": cpu,
                "wall_s": wall,
                "cpu_s_median": medians,
                "ratio_after_over_before": medians["after"] / medians["before"],
            }
            print(f"{name:60s} {outcome['after'][0]:6d} pages  before {medians['before']:7.3f} s  "
                  f"after {medians['after']:7.3f} s  x{medians['after'] / medians['before']:.2f}", flush=True)
    summary = {"repeat": args.repeat, "baseline_rev": args.baseline_rev, "python": sys.version.split()[0],
               "measure": "CPU seconds (user+system) of reading + page splitting, median of rounds",
               "results": results}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


def _prepend(first: bytes, rest: Iterator[bytes]) -> Iterator[bytes]:
    if first:
        yield first
    yield from rest


if __name__ == "__main__":
    raise SystemExit(main())
