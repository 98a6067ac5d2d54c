"""The lookup store: pass 1's global tables as files that pass 2 reads by key (pure; no Beam).

Pass 2 labels each page with table lookups instead of joins: for every title (a page title or a link
target) what it resolves to, for every entity its ranked aliases (what the labeller may use, capped per
entity), its vocabulary id, and the smallest page id of the articles with that title (the article
that describes the entity). All four are keyed by a title: one row per title holds them, and points to
its head aliases in the shard's heads file.

An entity's aliases are split (``head_aliases``, the labeller's ``top_aliases_per_page``): the first ones,
which every page that refers to the entity receives, are its head row; the others, which a page receives
only when it uses them itself as anchor texts of the entity, are rows of ``extra_aliases`` keyed by (entity,
alias). So a page reads the head and its own anchors, not a hub's thousands of aliases. The head is stored
as each alias's :mod:`marshal` data beside an index from its gate keys (:func:`~pipelines.corpus.labels.alias_gate`) to
its positions, flat (:func:`encode_head`): a page decodes only the aliases whose keys it holds (an entity's
aliases mostly share the page's first word, rarely its word pairs), and reading or caching a row costs little.
An alias is a tuple of strings, numbers and tuples: marshal decodes it ~2.4x faster than pickle, and the store,
like pass 1's run files (:mod:`pipelines.corpus.sorted_runs`), is written and read by the job's own steps on
one Python.

The store is ``shards`` pairs of files: a SQLite file (stdlib, maintained) of the title rows and the extra
aliases, and beside it (:func:`heads_path`) the head blobs, concatenated in title order, which a title row
locates by offset and size; both are read through the OS page cache (every process on a machine shares one
copy). A title's shard is ``stable_shard(title, shards)``. A shard is built by :func:`write_shard` from its
records in any order: they are sorted on local disk (:class:`~pipelines.external_sort.ExternalSorter`),
merged per title, and written in key order, so the files are the same bytes for the same records, and no
shard is ever held in memory whole.
"""
from __future__ import annotations

import itertools
import marshal
import os
import sqlite3
import struct
import sys
import tempfile
import threading
from array import array
from bisect import bisect_left
from collections import OrderedDict
from operator import itemgetter
from typing import Iterable, Iterator

from pipelines.corpus.candidates import RankedAliases
from pipelines.corpus.labels import PreparedPage, alias_gate
from pipelines.corpus.sorted_runs import stable_shard
from pipelines.external_sort import ExternalSorter

# The record kinds a shard is built from: (kind, title, value).
RESOLUTION = 0  # value: (status, entity); a title with several (duplicate titles): the smallest
ALIASES = 1  # value: the entity's ranked usable aliases, [(rank, packed alias as marshal data), ...] (any order)
VOCAB_ID = 2  # value: the entity's vocabulary id
FIRST_ARTICLE = 3  # value: the page id of an article with this title; the smallest is kept

# An entity's head aliases are not in SQLite but in the heads file, which its title's row locates (head_at,
# head_size): the titles B-tree stays small (all of it in SQLite's page cache), and a head (~7 KB on the x64
# scale input, most of the store's bytes) is one pread, not a walk of 2-3 overflow pages, each a read and a
# copy (measured on that store's reads for 382 pages: 0.87 ms per page against 1.46 in a table of heads).
_SCHEMA = ("CREATE TABLE titles (title TEXT PRIMARY KEY, status TEXT, entity TEXT, head_at INTEGER, "
           "head_size INTEGER, vocab_id INTEGER, first_article INTEGER, more_aliases INTEGER) WITHOUT ROWID",
           "CREATE TABLE extra_aliases (entity TEXT, alias TEXT, position INTEGER, packed BLOB, "
           "PRIMARY KEY (entity, alias)) WITHOUT ROWID")
_TITLE_QUERY = ("SELECT title, status, entity, head_at, head_size, vocab_id, first_article, more_aliases "
                "FROM titles WHERE title IN ({})")
_BATCH = 500  # titles per SELECT ... IN (...) (SQLite's default limit of host parameters is 32766)


def shard_name(index: int, count: int) -> str:
    return f"lookup-{index:05d}-of-{count:05d}.sqlite"


def heads_path(path: str) -> str:
    """The heads file of the shard whose SQLite file is ``path`` (beside it; a local path or a URL)."""
    return f"{path}.heads"


def _record_order(record):
    kind, title, value = record
    return title, kind, value if kind != ALIASES else ()


def merged_rows(records: Iterable[tuple], head_aliases: int | None = None) -> Iterator[tuple]:
    """Sorted (kind, title, value) records -> (title row, extra alias rows) per title, in title order."""
    row = None
    for kind, title, value in records:
        if row is None or row[0] != title:
            if row is not None:
                yield _finish(row, head_aliases)
            row = [title, None, None, None, None, None, 0]
        if kind == RESOLUTION:
            if row[1] is None:  # sorted: the smallest (status, entity) first
                row[1], row[2] = value
        elif kind == ALIASES:
            row[3] = value
        elif kind == VOCAB_ID:
            row[4] = value
        elif kind == FIRST_ARTICLE:
            if row[5] is None or value < row[5]:
                row[5] = value
        else:
            raise ValueError(f"unknown lookup record kind {kind!r}")
    if row is not None:
        yield _finish(row, head_aliases)


def _finish(row: list, head_aliases: int | None) -> tuple[tuple, list]:
    extra = []
    if row[3] is not None:  # best first, as the labeller reads them (RankedAliases)
        ranked = [data for _rank, data in sorted(row[3], key=ALIAS_RANK)]
        head = ranked if head_aliases is None else ranked[:head_aliases]
        extra = [(row[0], marshal.loads(data)[0], len(head) + i, data) for i, data in enumerate(ranked[len(head):])]
        row[3] = encode_head(head)
        row[6] = len(extra)
    return tuple(row), extra


_HEAD_HEADER = struct.Struct("<III")  # gate keys, aliases, bytes of the gate keys
_POSITION = struct.Struct("<I")  # a gate key's alias
_OFFSET_PAIR = struct.Struct("<II")  # where an alias's data starts and ends
_KEY_SEPARATOR = "\n"  # never in a gate key: tokens are words or single signs, pairs joined by a space


def encode_head(head: list[bytes]) -> bytes:
    """An entity's head aliases (each as marshal data, as the ALIASES records hold them) as stored, one blob:
    the counts of gate keys and aliases and the gate keys' bytes (uint32 each); the gate keys
    (:func:`~pipelines.corpus.labels.alias_gate`), sorted, UTF-8, one a line (a key of several aliases
    repeated); the alias position of each key (uint32); the aliases' offsets in the data (uint32, one more than
    the aliases); the aliases' marshal data, concatenated. Numbers little-endian.

    Flat, so that reading a row makes one object, not a few per alias or key: a page splits the keys (one string
    each, no alias decoded) and decodes only the aliases it may admit. Most rows a page reads on a large
    wiki are not in the cache."""
    loads = marshal.loads
    index = sorted((key, position) for position, data in enumerate(head) for key in alias_gate(loads(data)))
    if any(_KEY_SEPARATOR in key for key, _position in index):
        raise ValueError(f"a gate key with a line break among {[key for key, _p in index]!r}")
    keys = _KEY_SEPARATOR.join(key for key, _position in index).encode("utf-8", "surrogatepass")
    offsets = array("I", [0, *itertools.accumulate(map(len, head))])
    positions = array("I", [position for _key, position in index])
    if not _LITTLE_ENDIAN:
        positions.byteswap()
        offsets.byteswap()
    return b"".join((_HEAD_HEADER.pack(len(index), len(head), len(keys)), keys, positions.tobytes(),
                     offsets.tobytes(), *head))


_LITTLE_ENDIAN = sys.byteorder == "little"
# The rank of an ALIASES value's (rank, alias data) pair: an entity's aliases have distinct ranks (the alias is
# the rank's last part), so ordering by it never compares the data.
ALIAS_RANK = itemgetter(0)


def write_shard(records: Iterable[tuple], path: str, sort_buffer: int = 200_000, head_aliases: int | None = None) -> int:
    """Build one shard file at the local ``path`` from its (kind, title, value) records; returns its rows.
    ``head_aliases``: aliases of an entity kept in its title row (None: all of them)."""
    with ExternalSorter(_record_order, sort_buffer) as sorter:
        for record in records:
            sorter.add(record)
        return write_sorted_shard(sorter.sorted(), path, head_aliases)


def write_sorted_shard(records: Iterable[tuple], path: str, head_aliases: int | None = None) -> int:
    """:func:`write_shard` of records already in (title, kind) order, with at most one RESOLUTION and
    FIRST_ARTICLE per title (or the smallest first); returns the shard's rows. Writes ``path`` and
    :func:`heads_path` of it."""
    for stale in (path, heads_path(path)):
        if os.path.exists(stale):
            os.remove(stale)
    rows = 0
    db = sqlite3.connect(path)
    try:
        db.execute("PRAGMA journal_mode=OFF")
        db.execute("PRAGMA synchronous=OFF")
        for statement in _SCHEMA:
            db.execute(statement)
        batch, extras = [], []
        head_at = 0
        with open(heads_path(path), "wb") as heads:
            for row, extra in merged_rows(records, head_aliases):
                title, status, entity, head, vocab_id, first_article, more = row
                if head is None:
                    batch.append((title, status, entity, None, None, vocab_id, first_article, more))
                else:
                    heads.write(head)
                    batch.append((title, status, entity, head_at, len(head), vocab_id, first_article, more))
                    head_at += len(head)
                extras.extend(extra)
                if len(batch) >= 10_000 or len(extras) >= 10_000:
                    rows += _insert(db, batch, extras)
                    batch, extras = [], []
        rows += _insert(db, batch, extras)
        db.commit()
    finally:
        db.close()
    return rows


def _insert(db, rows: list, extras: list) -> int:
    db.executemany("INSERT INTO titles VALUES (?, ?, ?, ?, ?, ?, ?, ?)", rows)
    db.executemany("INSERT INTO extra_aliases VALUES (?, ?, ?, ?)", extras)
    return len(rows)


class StoredAliases:
    """An entity's ranked aliases as the store holds them: the head in memory (undecoded, with its gate index:
    :func:`encode_head`), the others looked up by alias when a page uses them as anchor texts. :meth:`for_page`
    is :meth:`RankedAliases.for_page`."""

    __slots__ = ("blob", "key_count", "size", "key_bytes", "more", "entity", "_db")

    def __init__(self, blob: bytes, more: int, entity: str, db) -> None:
        self.blob = blob
        self.key_count, self.size, self.key_bytes = _HEAD_HEADER.unpack_from(blob)
        self.more = more
        self.entity = entity
        self._db = db

    def _aliases(self, chosen: Iterable[int]) -> list:
        """The head aliases at these positions, decoded."""
        blob = self.blob
        offsets = _HEAD_HEADER.size + self.key_bytes + 4 * self.key_count
        data = offsets + 4 * (self.size + 1)
        unpack = _OFFSET_PAIR.unpack_from
        aliases = []
        for i in chosen:
            start, end = unpack(blob, offsets + 4 * i)
            aliases.append(marshal.loads(blob[data + start:data + end]))
        return aliases

    @property
    def head(self) -> list:
        """The head aliases, decoded (for tests and tools, not per page)."""
        return self._aliases(range(self.size))

    @property
    def ranked(self) -> list:
        """Every alias, best first (reads the extra ones: for tests and tools, not per page)."""
        rows = self._db.execute("SELECT packed FROM extra_aliases WHERE entity = ? ORDER BY position",
                                (self.entity,)).fetchall() if self.more else []
        return self.head + [marshal.loads(packed) for (packed,) in rows]

    def for_page(self, top: int, page_anchors, page: PreparedPage | None = None) -> tuple:
        size = self.size
        if size < top and self.more:  # stored with a smaller head than asked for
            return RankedAliases(self.ranked).for_page(top, page_anchors, page)
        if page is None:
            chosen = self._aliases(range(min(top, size)))
        else:  # only the aliases the page may admit, decoded in rank order
            n = self.key_count
            blob = self.blob
            end = _HEAD_HEADER.size + self.key_bytes
            keys = blob[_HEAD_HEADER.size:end].decode("utf-8", "surrogatepass").split(_KEY_SEPARATOR) if n else ()
            found = page.keys_in(keys)
            chosen = []
            if found:
                wanted: set[int] = set()
                unpack = _POSITION.unpack_from
                for key in found:  # the keys are sorted: each found key's run of positions
                    i = bisect_left(keys, key)
                    while i < n and keys[i] == key:
                        wanted.add(unpack(blob, end + 4 * i)[0])
                        i += 1
                chosen = self._aliases(sorted(i for i in wanted if i < top))
        if (size <= top and not self.more) or not page_anchors:
            return tuple(chosen)
        anchors = {a for a in page_anchors if a is not None}
        later = [alias for alias in self._aliases(range(top, size)) if alias[0] in anchors]
        # An anchor that names a head alias is not among the extra ones (an entity's aliases are distinct): most
        # pages link a hub with its head names only, and then need no query (~40% of them on the x64 scale input).
        anchors.difference_update([alias[0] for alias in chosen], [alias[0] for alias in later])
        if self.more and anchors:
            wanted_aliases = sorted(anchors)
            found_rows = []
            for i in range(0, len(wanted_aliases), _BATCH):
                part = wanted_aliases[i:i + _BATCH]
                query = (f"SELECT position, packed FROM extra_aliases WHERE entity = ? AND alias IN "
                         f"({','.join('?' * len(part))})")
                found_rows += self._db.execute(query, [self.entity, *part]).fetchall()
            later += [marshal.loads(packed) for _position, packed in sorted(found_rows)]
        if page is not None:
            later = [alias for alias in later if page.may_admit(alias_gate(alias))]
        return tuple(chosen) + tuple(later)


class LookupStore:
    """Read-only lookups in the store's shard files (local paths), with a small per-process cache.

    ``get(titles)`` -> {title: (status, entity, RankedAliases, vocab_id, first_article)} for the titles
    that have a row (any field may be None: a red-link target has no row at all).
    """

    def __init__(self, paths: list[str], cache_titles: int = 50_000, cache_aliases: int = 320_000) -> None:
        self.paths = list(paths)
        self._dbs = [sqlite3.connect(f"file:{p}?mode=ro&immutable=1", uri=True, check_same_thread=False)
                     for p in self.paths]
        # No memory map: the files are read through the OS page cache (one copy per machine, shared by the
        # processes, given back under pressure), and each process holds only SQLite's own small page cache
        # (its default, ~2 MB per shard; the titles, not the heads). Mapped, every page a process had touched
        # counted in its RSS: ~0.35 bytes per byte of XML at the margin on the x64 scale input, for a memcpy
        # saved per page read.
        for db in self._dbs:
            db.execute("PRAGMA mmap_size=0")
        self._heads = [os.open(heads_path(p), os.O_RDONLY) for p in self.paths]
        self._cache: OrderedDict = OrderedDict()
        self._cache_titles = cache_titles
        # A hub entity holds thousands of aliases: the cache is bounded by the aliases it holds too, so its
        # memory does not grow with the corpus (aliases per entity do). ~130 bytes per cached alias (the head
        # blob; measured on the x64 scale input's store): ~42 MB when full.
        self._cache_aliases = cache_aliases
        self._cached_aliases = 0
        # Admission (TinyLFU): a row enters a full cache only if its title was asked for more often, lately,
        # than the row it would push out (counts in a small sketch, halved every _SKETCH_AGE lookups). Plain
        # LRU keeps nothing when the pages cycle over more rows than it holds (a row is pushed out before it is
        # asked again: ~6% hits on the x64 scale input); this keeps a fixed part of them, and on a skewed
        # stream (a real wiki) the often-asked rows.
        self._sketch = bytearray(_SKETCH_SIZE)
        self._sketch_lookups = 0
        self.lookups = 0
        self.cache_hits = 0

    def get(self, titles: Iterable[str]) -> dict[str, tuple]:
        found: dict[str, tuple] = {}
        missing_by_shard: dict[int, list[str]] = {}
        cache = self._cache
        n = len(self._dbs)
        sketch = self._sketch
        for title in set(titles):
            self.lookups += 1
            key = hash(title)
            for index in (key & _SKETCH_MASK, (key >> 24) & _SKETCH_MASK):
                if sketch[index] < 255:
                    sketch[index] += 1
            hit = cache.get(title)
            if hit is not None:
                self.cache_hits += 1
                cache.move_to_end(title)
                if hit is not _ABSENT:
                    found[title] = hit
                continue
            missing_by_shard.setdefault(stable_shard(title, n), []).append(title)
        pread = os.pread
        for shard, wanted in missing_by_shard.items():
            db = self._dbs[shard]
            heads = self._heads[shard]
            got = {}
            for i in range(0, len(wanted), _BATCH):
                part = wanted[i:i + _BATCH]
                query = _TITLE_QUERY.format(",".join("?" * len(part)))
                for title, status, entity, head_at, head_size, vocab_id, first, more in db.execute(query, part):
                    stored = None
                    if head_at is not None:
                        blob = pread(heads, head_size, head_at)
                        if len(blob) != head_size:
                            raise ValueError(f"lookup store heads file {heads_path(self.paths[shard])} is "
                                             f"truncated: {len(blob)} of {head_size} bytes at {head_at}")
                        stored = StoredAliases(blob, more, title, db)
                    got[title] = (status, entity, stored, vocab_id, first)
            for title in wanted:
                value = got.get(title)
                if value is not None:
                    found[title] = value
                self._remember(title, value if value is not None else _ABSENT)
        return found

    def _asked(self, title: str) -> int:
        """How often the title was asked for lately (at least: a count-min sketch)."""
        key = hash(title)
        return min(self._sketch[key & _SKETCH_MASK], self._sketch[(key >> 24) & _SKETCH_MASK])

    def _remember(self, title: str, value) -> None:
        cache = self._cache
        self._sketch_lookups += 1
        if self._sketch_lookups >= _SKETCH_AGE:
            self._sketch = bytearray(self._sketch.translate(_HALVED))
            self._sketch_lookups = 0
        full = len(cache) >= self._cache_titles or self._cached_aliases + _weight(value) > self._cache_aliases
        if full and cache and self._asked(title) <= self._asked(next(iter(cache))):
            return  # not asked for more than the row it would push out first
        cache[title] = value
        self._cached_aliases += _weight(value)
        while cache and (len(cache) > self._cache_titles or self._cached_aliases > self._cache_aliases):
            _title, dropped = cache.popitem(last=False)
            self._cached_aliases -= _weight(dropped)

    def close(self) -> None:
        for db in self._dbs:
            db.close()
        for heads in self._heads:
            os.close(heads)
        self._dbs, self._heads = [], []


_ABSENT = object()
_SKETCH_SIZE = 1 << 18  # counters of the cache's admission sketch (bytes): ~5x the titles it holds
_SKETCH_MASK = _SKETCH_SIZE - 1
_SKETCH_AGE = 500_000  # rows read from the files between two halvings of the counts
_HALVED = bytes(count >> 1 for count in range(256))


def _weight(value) -> int:
    """A cached row's aliases (a row without aliases, or an absent title: 0)."""
    if value is _ABSENT or value[2] is None:
        return 0
    return value[2].size


_OPEN: dict[tuple, LookupStore] = {}
_OPEN_LOCK = threading.Lock()


def open_store(paths: list[str], copy_remote) -> LookupStore:
    """The process's one LookupStore for these shard files, opened on first use.

    ``copy_remote(path, local_path)`` copies a shard's files (:func:`heads_path` too) that are not on local
    disk (gs://...) once per process, to a temporary folder (Dataflow workers: the tables reach them as files)."""
    # A local file is known by its inode and time too: a later run in this process (tests, notebooks) that
    # rewrote the store at the same paths must not read the earlier run's files through old connections.
    key = tuple((p, os.stat(p).st_ino, os.stat(p).st_mtime_ns) if os.path.exists(p) else (p,) for p in paths)
    with _OPEN_LOCK:
        store = _OPEN.get(key)
        if store is None:
            local = []
            tmp = None
            for path in paths:
                if os.path.exists(path):
                    local.append(path)
                    continue
                if tmp is None:
                    tmp = tempfile.mkdtemp(prefix="wikiedm-lookup-")
                target = os.path.join(tmp, os.path.basename(path))
                copy_remote(path, target)
                copy_remote(heads_path(path), heads_path(target))
                local.append(target)
            store = _OPEN[key] = LookupStore(local)
        return store
