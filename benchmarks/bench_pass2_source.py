"""Benchmark: where pass 2 of the corpus job gets its articles: extract them again, or read a cache of pass 1's.

The two-pass job's pass 2 needs each article's text and links again. Two ways, measured side by side on one
dump, in one process, interleaved, CPU seconds (``time.process_time``), medians of ``--repeat`` rounds:

* ``re_extract``: read the dump (decompress, split pages), classify each page and extract its article, as
  pass 1 did: what the job does.
* ``cache_read``: read a chunk of pass 1's article cache (pipelines.corpus.article_cache, as the job writes
  it): decompress and unpickle. Its other cost, ``cache_write`` (pickle and compress, paid in pass 1), and the
  cache's size per compressed byte of dump are reported too.
* ``records_l3_write`` / ``records_l3_read``: the cache's former format as a baseline (each ``Article``
  pickled as a record, zstd level 3), side by side: ``cache_over_records_l3`` is the ratio of write + read.

The cheaper default is the one whose pass-2 cost plus pass-1 cost is lower: ``cache_read + cache_write``
against ``re_extract``. Results: ``benchmarks/results/pass2_source.json``.

Usage: ``python benchmarks/bench_pass2_source.py [--dump PATH] [--repeat 3] [--json OUT]``
"""
from __future__ import annotations

import argparse
import io
import json
import os
import pickle
import platform
import statistics
import sys
import time
from pathlib import Path

import zstandard

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from pipelines.corpus.article_cache import ChunkedCacheWriter, read_chunk  # noqa: E402
from pipelines.corpus.page_kinds import classify_page  # noqa: E402
from pipelines.corpus.resolution import ARTICLE  # noqa: E402
from pipelines.dump import iter_pages, read_siteinfo  # noqa: E402
from pipelines.records import Article, DeadLetter  # noqa: E402
from pipelines.wikitext import DisambiguationConfig, ExtractionError, extract_article  # noqa: E402
from pipelines.worker_gc import tune_gc  # noqa: E402

DEFAULT_DUMP = (REPO / ".." / "shared" / "wikidumps" / "enwiki-2016-206pages-articles1.xml.bz2").resolve()


def re_extract(dump: str, site) -> list[Article]:
    articles = []
    disambiguation = DisambiguationConfig()
    for page in iter_pages(dump):
        if isinstance(page, DeadLetter):
            continue
        kind, title, _t, _r, _d = classify_page(page, site, disambiguation, 4_000_000)
        if kind != ARTICLE:
            continue
        try:
            extraction = extract_article(page.text, site, title=title)
        except (ExtractionError, RecursionError):
            continue
        articles.append(Article(page.page_id, title, extraction.text, extraction.links, page.revision_id))
    return articles


class _KeptBytesIO(io.BytesIO):
    def close(self) -> None:  # the writer closes its file; keep the bytes
        pass


def cache_write(articles: list[Article]) -> bytes:
    out = _KeptBytesIO()
    writer = ChunkedCacheWriter("", lambda folder, name: name, lambda path: out, 0, 0, len(articles) + 1)
    for article in articles:
        writer.add(article, 0)
    writer.finish(0)
    return out.getvalue()


def cache_read(data: bytes) -> list[Article]:
    return list(read_chunk(io.BytesIO(data)))


def records_l3_write(articles: list[Article]) -> bytes:
    out = io.BytesIO()
    with zstandard.ZstdCompressor(level=3).stream_writer(out, closefd=False) as writer:
        for article in articles:
            pickle.dump(article, writer, protocol=pickle.HIGHEST_PROTOCOL)
    return out.getvalue()


def records_l3_read(data: bytes) -> list[Article]:
    articles = []
    with zstandard.ZstdDecompressor().stream_reader(io.BytesIO(data)) as reader:
        buffered = io.BufferedReader(reader, 1 << 20)
        while True:
            try:
                articles.append(pickle.load(buffered))
            except EOFError:
                return articles


def cpu(fn, *args):
    started = time.process_time()
    result = fn(*args)
    return time.process_time() - started, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump", default=str(DEFAULT_DUMP))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", default=str(REPO / "benchmarks" / "results" / "pass2_source.json"))
    args = parser.parse_args()
    load_at_start = os.getloadavg()[0]
    site = read_siteinfo(args.dump)
    tune_gc()  # as in the job's workers
    rounds = {"re_extract": [], "cache_write": [], "cache_read": [], "records_l3_write": [], "records_l3_read": []}
    pages = cache_bytes = records_bytes = 0
    for _ in range(args.repeat):
        seconds, articles = cpu(re_extract, args.dump, site)
        rounds["re_extract"].append(seconds)
        seconds, data = cpu(cache_write, articles)
        rounds["cache_write"].append(seconds)
        seconds, back = cpu(cache_read, data)
        rounds["cache_read"].append(seconds)
        assert back == articles, "the cache must give back the same articles"
        del back
        seconds, old = cpu(records_l3_write, articles)
        rounds["records_l3_write"].append(seconds)
        seconds, back = cpu(records_l3_read, old)
        rounds["records_l3_read"].append(seconds)
        assert back == articles
        pages, cache_bytes, records_bytes = len(articles), len(data), len(old)
    median = {name: statistics.median(values) for name, values in rounds.items()}
    per_page_ms = {name: round(1000 * s / pages, 3) for name, s in median.items()}
    cache_total = median["cache_write"] + median["cache_read"]
    result = {
        "dump": Path(args.dump).name,
        "dump_bytes": os.path.getsize(args.dump),
        "articles": pages,
        "repeat": args.repeat,
        "cpu_seconds_median": {k: round(v, 4) for k, v in median.items()},
        "cpu_ms_per_article": per_page_ms,
        "cache_bytes": cache_bytes,
        "cache_bytes_per_dump_byte": round(cache_bytes / os.path.getsize(args.dump), 3),
        "cache_write_plus_read_over_re_extract": round(cache_total / median["re_extract"], 4),
        "records_l3_bytes": records_bytes,
        "cache_over_records_l3": {
            "write": round(median["cache_write"] / median["records_l3_write"], 3),
            "read": round(median["cache_read"] / median["records_l3_read"], 3),
            "write_plus_read": round(cache_total / (median["records_l3_write"] + median["records_l3_read"]), 3),
            "bytes": round(cache_bytes / records_bytes, 3)},
        "cheaper": "cache" if cache_total < median["re_extract"] else "re_extract",
        "machine": {"platform": platform.platform(), "cpus": os.cpu_count(), "load_average_at_start": load_at_start,
                    "load_average_at_end": os.getloadavg()[0]},
    }
    Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
