"""Pass 1's cache of extracted articles, which pass 2 reads instead of extracting them again (pure; no Beam).

Measured (benchmarks/bench_pass2_source.py, results/pass2_source.json): writing and reading the cache costs
about a tenth of the CPU of reading the dump and extracting its articles again. Pass 1's reader of a range
writes its articles, in dump order, to zstd-compressed files of pickled plain tuples (:func:`_as_tuple`),
cutting a new chunk after
``chunk_articles`` articles (never between two copies of one page id). Each chunk is one unit of pass 2's
work, so even a dump that is one compressed stream (a plain .bz2, an .xz) is labelled and written by many
workers, without shuffling its text: a chunk travels as a file path.

A chunk's name is its range's and its own index, ``range-{r:05d}-chunk-{c:05d}.pkl.zst``: the same input
and config give the same chunks on any runner.
"""
from __future__ import annotations

import io
import pickle
from dataclasses import dataclass
from itertools import starmap
from typing import BinaryIO, Callable, Iterator

import zstandard

from pipelines.records import Article, LinkMention

# Level 2 and plain tuples: writing + reading cost ~0.76 of the CPU of level 3 and pickled records, for ~5%
# more bytes (benchmarks/bench_pass2_source.py, results/pass2_source.json: cache_over_records_l3).
ZSTD_LEVEL = 2
_LINK_FIELDS = LinkMention._field_values  # attrgetter: a link's (start, end, surface, target), in C


def _as_tuple(article: Article) -> tuple:
    """What the cache holds for an article: plain values, so pickling calls no ``__reduce__`` per link."""
    return (article.page_id, article.title, article.text, list(map(_LINK_FIELDS, article.links)),
            article.revision_id)


def _from_tuple(values: tuple) -> Article:
    page_id, title, text, links, revision_id = values
    return Article(page_id, title, text, list(starmap(LinkMention, links)), revision_id)


@dataclass(frozen=True, slots=True)
class CacheChunk:
    """One unit of pass 2: a cache file (or, with no cache, a whole read range: ``path`` "")."""

    range_index: int
    chunk_index: int
    path: str
    articles: int
    dump_bytes: int  # compressed dump bytes this chunk's pages came from (for progress lines)
    range_start: int  # the read range's first byte (names its progress records)

    @property
    def key(self) -> tuple[int, int]:
        return self.range_index, self.chunk_index

    def as_tuple(self) -> tuple:  # what crosses Beam: plain values
        return (self.range_index, self.chunk_index, self.path, self.articles, self.dump_bytes, self.range_start)


def chunk_name(range_index: int, chunk_index: int) -> str:
    return f"range-{range_index:05d}-chunk-{chunk_index:05d}.pkl.zst"


class ChunkedCacheWriter:
    """Articles of one read range -> cache chunks of about ``chunk_articles`` articles each.

    ``create(path)`` opens a binary file for writing (any filesystem); ``add`` returns the chunk it
    closed, if adding this article started a new one; ``finish`` closes the last (always at least one
    chunk per range, empty or not, so that every range is a unit of pass 2)."""

    def __init__(self, folder: str, join: Callable[[str, str], str], create: Callable[[str], BinaryIO],
                 range_index: int, range_start: int, chunk_articles: int) -> None:
        self.folder = folder
        self.join = join
        self.create = create
        self.range_index = range_index
        self.range_start = range_start
        self.chunk_articles = max(1, chunk_articles)
        self.chunk_index = -1
        self._file = None
        self._writer = None
        self._articles = 0
        self._last_page_id = None
        self._chunk_bytes_start = 0
        self._open(0)

    def _open(self, dump_bytes: int) -> None:
        self.chunk_index += 1
        self.path = self.join(self.folder, chunk_name(self.range_index, self.chunk_index))
        self._file = self.create(self.path)
        self._writer = zstandard.ZstdCompressor(level=ZSTD_LEVEL).stream_writer(self._file, closefd=False)
        self._articles = 0
        self._chunk_bytes_start = dump_bytes

    def _close(self, dump_bytes: int) -> CacheChunk:
        self._writer.close()
        self._file.close()
        return CacheChunk(self.range_index, self.chunk_index, self.path, self._articles,
                          max(0, dump_bytes - self._chunk_bytes_start), self.range_start)

    def add(self, article: Article, dump_bytes: int) -> CacheChunk | None:
        """Add ``article``; ``dump_bytes``: compressed bytes of the range read so far."""
        closed = None
        if self._articles >= self.chunk_articles and article.page_id != self._last_page_id:
            closed = self._close(dump_bytes)
            self._open(dump_bytes)
        self._writer.write(pickle.dumps(_as_tuple(article), protocol=pickle.HIGHEST_PROTOCOL))
        self._articles += 1
        self._last_page_id = article.page_id
        return closed

    def finish(self, dump_bytes: int) -> CacheChunk:
        return self._close(dump_bytes)


def read_chunk(stream: BinaryIO) -> Iterator[Article]:
    """The articles of one cache chunk, in the order they were written."""
    with zstandard.ZstdDecompressor().stream_reader(stream, closefd=False) as reader:
        buffered = io.BufferedReader(reader, 1 << 20)
        while True:
            try:
                values = pickle.load(buffered)
            except EOFError:
                return
            yield _from_tuple(values)
