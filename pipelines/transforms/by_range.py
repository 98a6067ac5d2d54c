"""WritePassagesByRange: pass 2 of the two-pass job, one unit at a time, no shuffle of text.

A unit is a chunk of a read range's articles that pass 1 cached (pipelines.corpus.article_cache; the
default, about a tenth of the CPU of extracting them again), or with ``--article_cache false`` a whole
read range, read and extracted again (the same deterministic steps as pass 1). Then, page by page: links resolved and label candidates picked by lookups in pass 1's
store (:func:`pipelines.corpus.candidates.page_candidates`), EDMem's labels (:func:`label_page`),
optional BLINK labels, tokenised windows (:meth:`ChunkWindowsFn.windows`), and the page's description
when it is the article of a vocabulary entity. Each unit writes its own files, named by its place ``i`` among
all ``n`` units (sorted by range, then chunk): ``passages/{split}-{i:05d}-of-{n:05d}.parquet`` for both
splits and ``entity_descriptions/entity_descriptions-{i:05d}-of-{n:05d}.parquet``, rows sorted by
(page_id, window_index) and entity_id through an external sort (a unit's pages are bounded; dumps are in
page-id order, so the sort rarely spills). Every file is written, empty or not.

A page id that a broken dump repeats within a unit keeps its latest revision (then the smallest title and
text: applied by the sort, copies of a page id are sorted by it and the first kept);
each copy's counters wait beside it in the sort and only the kept copy's are counted. A repeat in another
unit (never seen in a real dump: a page is in one bz2 stream, and a chunk is never cut between adjacent
copies) is not seen, and both copies are kept.
"""
from __future__ import annotations

import logging
import operator
import time
from collections import Counter

import apache_beam as beam
import pyarrow as pa
from apache_beam.utils.shared import Shared

from pipelines.corpus.article_cache import CacheChunk, read_chunk
from pipelines.corpus.candidates import page_candidates
from pipelines.corpus.descriptions import first_paragraph
from pipelines.corpus.labels import LabelConfig, label_page, prepare_page
from pipelines.corpus.lookup_store import open_store
from pipelines.corpus.page_kinds import classify_page
from pipelines.corpus.resolution import ARTICLE, RED_LINK
from pipelines.corpus.split import TRAIN, VALIDATION
from pipelines.dump import ReadRange, ReadStats, iter_pages
from pipelines.external_sort import ExternalSorter
from pipelines.progress import RangeProgress
from pipelines.records import Article, DeadLetter, LabeledArticle, SiteInfo
from pipelines.transforms.parse import ParseOptions
from pipelines.transforms.passages import ChunkWindowsFn, PassageOptions
from pipelines.transforms.stats import STATS
from pipelines.transforms.write import shard_name
from pipelines.wikitext import ExtractionError, extract_article
from schemas import SCHEMAS, passage_schema
from schemas.corpus import MentionSource
from wikiedm import storage

log = logging.getLogger(__name__)

SPLITS = (TRAIN, VALIDATION)
HYPERLINK = MentionSource.HYPERLINK
_SOURCE, _ENTITY, _SPAN = operator.attrgetter("source"), operator.attrgetter("entity"), operator.attrgetter("start", "end")
DESCRIPTIONS = "entity_descriptions"


def _copy_to_local(path: str, local: str) -> None:
    with storage.open_read(path) as src, open(local, "wb") as dst:
        while chunk := src.read(8 << 20):
            dst.write(chunk)


def _description_order(row: dict):
    return row["entity_id"]


class WritePassagesByRangeFn(ChunkWindowsFn):
    """A unit (CacheChunk tuple) + the store's shard paths and every unit's key (side inputs) -> its file records.

    A ChunkWindowsFn: its ``windows()`` makes each page's Arrow batch, and its counters are this
    step's. Adjacent copies of a page id are reduced to one before any of them is labelled, so the
    counters count the kept copy only.
    """

    def __init__(self, output: str, ranges: list, site: SiteInfo, parse: ParseOptions, labels: LabelConfig,
                 passages: PassageOptions, keep_red_links: bool, description_max_chars: int,
                 row_group_rows: int, sort_buffer_rows: int, linker_config=None) -> None:
        super().__init__(passages)
        self.output = output
        self.ranges = ranges
        self.site = site
        self.parse = parse
        self.labels = labels
        self.keep_red_links = keep_red_links
        self.description_max_chars = description_max_chars
        self.row_group_rows = row_group_rows
        self.sort_buffer_rows = sort_buffer_rows
        self.linker_config = linker_config
        self._shared = Shared()
        self._linker_holder = None
        self.linker = None
        self.store = None

    def setup(self) -> None:
        super().setup()
        if self.linker_config is not None:
            from pipelines.transforms.blink import shared_linker

            self._linker_holder, self.linker = shared_linker(self._shared, self.linker_config)

    # -- reading -----------------------------------------------------------------------------------

    def _cached_articles(self, chunk: CacheChunk, progress):
        """A chunk's articles, as pass 1 cached them."""
        last = time.monotonic()
        with storage.open_read(chunk.path) as stream:
            for article in read_chunk(stream):
                progress.pages += 1
                now = time.monotonic()
                if now - last >= self.parse.progress_every_s:
                    last = now
                    progress.bytes_read = progress.range_bytes * progress.pages // max(1, chunk.articles)
                    progress.write()
                yield article

    def _articles(self, read_range: ReadRange, progress):
        """The range's articles, extracted again as pass 1 extracted them (dead letters and other pages: pass 1's)."""
        stats = ReadStats()
        opts = self.parse
        last = time.monotonic()
        for item in iter_pages(read_range.path, read_range.start, read_range.end,
                               max_page_bytes=opts.max_page_bytes, stats=stats):
            if isinstance(item, DeadLetter):  # written by pass 1
                continue
            progress.pages += 1
            now = time.monotonic()
            if now - last >= opts.progress_every_s:
                last = now
                progress.bytes_read = stats.raw_bytes
                progress.write()
            kind, title, _target, _reason, _detail = classify_page(item, self.site, opts.disambiguation,
                                                                   opts.max_wikitext_chars)
            if kind != ARTICLE:
                continue
            try:
                extraction = extract_article(item.text, self.site, title=title)
            except (ExtractionError, RecursionError):  # dead-lettered by pass 1
                continue
            yield Article(page_id=item.page_id, title=title, text=extraction.text, links=extraction.links,
                          revision_id=item.revision_id)

    # -- one page ----------------------------------------------------------------------------------

    def _page(self, article: Article) -> tuple:
        """An article -> its sort item: (page id, the latest-revision preference, split, its windows' Arrow
        batch or None, its description row or None, its counters). The counters are applied when the item is
        kept. A batch waits in memory as it is (pickled only if the sort spills)."""
        outer, self._tally = self._tally, Counter()
        try:
            split, batch, description = self._label_and_window(article)
            tally = self._tally
        finally:
            self._tally = outer
        preference = (-(article.revision_id if article.revision_id is not None else -1), article.title, article.text)
        return article.page_id, preference, split, batch, description, dict(tally)

    def _label_and_window(self, article: Article):
        store = self.store
        hyperlinks_only = self.labels.hyperlinks_only
        targets = {link.target for link in article.links}
        rows = store.get(targets | {article.title})
        resolution = {}
        for target in targets:
            row = rows.get(target)
            resolution[target] = (row[0], row[1]) if row is not None and row[0] is not None else (RED_LINK, target)
        entities = {entity for _status, entity in resolution.values()} - rows.keys()
        if entities:
            rows.update(store.get(entities))

        def aliases_of(entity):
            if hyperlinks_only:
                return None  # no labeller runs: no entity's aliases are read or decoded
            row = rows.get(entity)
            return row[2] if row is not None else None

        # The page's tokens first: the store decodes only the aliases the page may hold (most it cannot).
        page = prepare_page(article.text, self.labels)
        hyperlinks, candidates = page_candidates(article.title, article.links, resolution.__getitem__, aliases_of,
                                                 self.keep_red_links, self.labels.top_aliases_per_page, page)
        labels = label_page(article.text, hyperlinks, candidates, self.labels, page)
        self.count("volume/WritePassagesByRange/pages")
        self.count(f"mentions/{HYPERLINK}", len(hyperlinks))
        for source, n in Counter(map(_SOURCE, labels)).items():
            self.count(f"mentions/{source}", n)
        labeled = LabeledArticle(page_id=article.page_id, title=article.title, text=article.text,
                                 mentions=sorted(hyperlinks + labels, key=_SPAN))
        if self.linker is not None:
            from pipelines.transforms.blink import blink_label

            labeled = blink_label(self.linker, labeled, self.count)
        mentioned = set(map(_ENTITY, labeled.mentions))
        missing = mentioned - rows.keys()
        if missing:
            rows.update(store.get(missing))
        vocab = {e: rows[e][3] for e in mentioned if e in rows and rows[e][3] is not None}
        page = self.windows(labeled, vocab)
        split = batch = description = None
        if page is not None:
            split, _key, batch = page
        own = rows.get(article.title)
        if own is not None and own[3] is not None and own[4] == article.page_id:
            description = {"entity_id": own[3], "entity": article.title,
                           "description": first_paragraph(article.text, self.description_max_chars)}
        return split, batch, description

    def _kept_pages(self, items):
        """Sorted page items -> the kept one of each page id (the first: the latest revision), its counters
        applied; the copies of a page id that a broken dump repeats are counted (duplicate_page_ids)."""
        last = None
        for item in items:
            page_id = item[0]
            if page_id == last:
                self.count("duplicate_page_ids")
                continue
            last = page_id
            self._tally.update(item[5])  # stats only: Beam's metrics counted every copy as it was made
            yield item

    # -- the unit ------------------------------------------------------------------------------------

    def process(self, element, store_shards, units):
        chunk = CacheChunk(*element)
        keys = sorted(tuple(key) for key in units)
        index, count = keys.index(chunk.key), len(keys)
        self.store = open_store([path for _i, path in sorted(store_shards)], _copy_to_local)
        read_range = self.ranges[chunk.range_index]
        size = chunk.dump_bytes if self.parse.progress_folder else 0
        progress = RangeProgress(self.parse.progress_folder, 2, read_range.start, size, unit=chunk.chunk_index)
        started = time.monotonic()
        schema = passage_schema(self.options.passage_text)
        articles = self._cached_articles(chunk, progress) if chunk.path else self._articles(read_range, progress)
        with ExternalSorter(_page_order, self.sort_buffer_rows) as pages, \
                ExternalSorter(_description_order, self.sort_buffer_rows) as descriptions:
            for article in articles:
                item = self._page(article)
                pages.add(item, item[3].num_rows if item[3] is not None else 1)
            writers = {split: storage.ParquetFileWriter(
                storage.join(self.output, "passages", shard_name(split, index, count)), schema) for split in SPLITS}
            pending: dict = {split: [] for split in SPLITS}  # each split's batches, fewer than a row group's rows
            pending_rows = dict.fromkeys(SPLITS, 0)
            for _page_id, _pref, split, batch, description, _tally in self._kept_pages(pages.sorted()):
                if description is not None:
                    descriptions.add(description)
                if batch is not None:
                    pending[split].append(batch)
                    pending_rows[split] += batch.num_rows
                    if pending_rows[split] >= self.row_group_rows:
                        pending[split] = _write_full_row_groups(writers[split], pending[split], schema,
                                                                self.row_group_rows)
                        pending_rows[split] = sum(batch.num_rows for batch in pending[split])
            for split in SPLITS:
                if pending_rows[split]:
                    writers[split].write_table(pa.Table.from_batches(pending[split], schema).combine_chunks())
                yield _file_record(f"passages/{shard_name(split, index, count)}", "passages", writers[split])
            relative = f"{DESCRIPTIONS}/{shard_name(DESCRIPTIONS, index, count)}"
            writer = storage.ParquetFileWriter(storage.join(self.output, relative), SCHEMAS[DESCRIPTIONS])
            for table in _row_groups(descriptions.sorted(), self.row_group_rows):
                writer.write_table(table)
            yield _file_record(relative, DESCRIPTIONS, writer)
        progress.bytes_read, progress.done = progress.range_bytes, True
        progress.write()
        self.count("volume/WritePassagesByRange/units")
        log.info("pass 2: unit %d of %d (%s [%s:%s], chunk %d): %d pages in %.1fs", index + 1, count,
                 read_range.path, read_range.start, read_range.end, chunk.chunk_index, progress.pages,
                 time.monotonic() - started)


def _page_order(item):
    return item[0], item[1]


def _write_full_row_groups(writer, batches: list, schema, row_group_rows: int) -> list:
    """Write the full row groups the ``batches`` hold (contiguous, as ``pa.Table.from_pylist`` of their rows
    would give them: the same bytes); return the batches of what is left (fewer rows)."""
    table = pa.Table.from_batches(batches, schema)
    full = table.num_rows - table.num_rows % row_group_rows
    for start in range(0, full, row_group_rows):
        writer.write_table(table.slice(start, row_group_rows).combine_chunks())
    return table.slice(full).to_batches()


def _file_record(relative: str, kind: str, writer) -> dict:
    sha256, size = writer.close()
    return {"path": relative, "bytes": size, "sha256": sha256, "rows": writer.rows, "kind": kind}


def _row_groups(rows, row_group_rows: int):
    batch: list = []
    schema = SCHEMAS[DESCRIPTIONS]
    for row in rows:
        batch.append(row)
        if len(batch) == row_group_rows:
            yield pa.Table.from_pylist(batch, schema=schema)
            batch = []
    if batch:
        yield pa.Table.from_pylist(batch, schema=schema)


class WritePassagesByRange(beam.PTransform):
    """{"units": pass 2's units (CacheChunk tuples), "store_shards": the lookup store's (index, path)}
    -> {"files", "stats"}. Pass 2 starts when the store and the list of units are complete (side inputs)."""

    def __init__(self, fn: WritePassagesByRangeFn) -> None:
        super().__init__()
        self.fn = fn

    def expand(self, inputs):
        units = inputs["units"]
        keys = units | "UnitKeys" >> beam.Map(lambda unit: (unit[0], unit[1]))
        out = (
            units
            | "SpreadUnits" >> beam.Reshuffle()
            | "LabelTokenizeWrite" >> beam.ParDo(
                self.fn, store_shards=beam.pvalue.AsList(inputs["store_shards"]),
                units=beam.pvalue.AsList(keys)).with_outputs(STATS, main="files")
        )
        return {"files": out.files, "stats": [out[STATS]]}
