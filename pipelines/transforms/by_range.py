"""WritePassagesByRange: pass 2 of the two-pass job, one read range at a time, no shuffle of text.

Each read range of the dump is read again and its articles extracted again (the same deterministic
steps as pass 1), then, page by page: links resolved and label candidates picked by lookups in pass 1's
store (:func:`pipelines.corpus.candidates.page_candidates`), EDMem's labels (:func:`label_page`),
optional BLINK labels, tokenised windows (:meth:`ChunkWindowsFn.windows`), and the page's description
when it is the article of a vocabulary entity. Each range writes its own files, named by the range's
index: ``passages/{split}-{i:05d}-of-{n:05d}.parquet`` for both splits and
``entity_descriptions/entity_descriptions-{i:05d}-of-{n:05d}.parquet``, rows sorted by (page_id,
window_index) and entity_id through an external sort (a range's pages are bounded; dumps are in page-id
order, so the sort rarely spills). Every file is written, empty or not.

A page id that a broken dump repeats inside one range keeps its latest revision (``latest_article``,
as the shuffle job); the counters of the copies not kept are not counted. A repeat in another range
(never seen in a real dump: each page is in one bz2 stream) is not seen here, and both copies are kept.
"""
from __future__ import annotations

import logging
import time
from collections import Counter

import apache_beam as beam
from apache_beam.utils.shared import Shared

from pipelines.corpus.candidates import page_candidates
from pipelines.corpus.descriptions import first_paragraph
from pipelines.corpus.labels import LabelConfig, label_page
from pipelines.corpus.lookup_store import open_store
from pipelines.corpus.page_kinds import classify_page
from pipelines.corpus.resolution import ARTICLE, RED_LINK
from pipelines.corpus.split import TRAIN, VALIDATION
from pipelines.dump import ReadRange, ReadStats, iter_pages
from pipelines.external_sort import ExternalSorter
from pipelines.records import Article, DeadLetter, LabeledArticle, SiteInfo
from pipelines.transforms.parse import ParseOptions, range_progress
from pipelines.transforms.passages import ChunkWindowsFn, PassageOptions, latest_article
from pipelines.transforms.stats import STATS
from pipelines.transforms.write import _packed_row_groups, pack_batch, packed_order, shard_name
from pipelines.wikitext import ExtractionError, extract_article
from schemas import SCHEMAS, passage_schema
from schemas.corpus import MentionSource
from wikiedm import storage

log = logging.getLogger(__name__)

SPLITS = (TRAIN, VALIDATION)
HYPERLINK = MentionSource.HYPERLINK
DESCRIPTIONS = "entity_descriptions"


def _copy_to_local(path: str, local: str) -> None:
    with storage.open_read(path) as src, open(local, "wb") as dst:
        while chunk := src.read(8 << 20):
            dst.write(chunk)


def _description_order(row: dict):
    return row["entity_id"]


class WritePassagesByRangeFn(ChunkWindowsFn):
    """(range index, ReadRange) + the store's shard paths (side input) -> the range's file records.

    A ChunkWindowsFn: its ``windows()`` makes each page's Arrow batch, and its counters are this
    step's. Adjacent copies of a page id are reduced to one before any of them is labelled, so the
    counters count the kept copy only, as the shuffle job's do.
    """

    def __init__(self, output: str, ranges: int, site: SiteInfo, parse: ParseOptions, labels: LabelConfig,
                 passages: PassageOptions, keep_red_links: bool, description_max_chars: int,
                 row_group_rows: int, sort_buffer_rows: int, linker_config=None) -> None:
        super().__init__(passages, packed=True)
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

    def _articles(self, read_range: ReadRange, progress):
        """The range's articles, as pass 1 extracted them (dead letters and other pages: pass 1's)."""
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

    def _unique_pages(self, articles):
        """Adjacent copies of one page id (a broken dump) -> the latest (the shuffle job's rule)."""
        group: list[Article] = []
        for article in articles:
            if group and group[0].page_id != article.page_id:
                yield self._kept(group)
                group = []
            group.append(article)
        if group:
            yield self._kept(group)

    def _kept(self, group: list[Article]) -> Article:
        if len(group) > 1:
            self.count("duplicate_page_ids", len(group) - 1)
        return latest_article(group) if len(group) > 1 else group[0]

    # -- one page ----------------------------------------------------------------------------------

    def _page(self, article: Article, sorters: dict, descriptions: ExternalSorter, seen: set) -> None:
        if article.page_id in seen:  # a copy out of order in the range: kept once (the first read)
            self.count("duplicate_page_ids")
            self.count("duplicate_page_ids/not_adjacent")
            return
        seen.add(article.page_id)
        store = self.store
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
            row = rows.get(entity)
            return row[2] if row is not None else None

        hyperlinks, candidates = page_candidates(article.title, article.links, resolution.__getitem__, aliases_of,
                                                 self.keep_red_links, self.labels.top_aliases_per_page)
        labels = label_page(article.text, hyperlinks, candidates, self.labels)
        self.count("volume/WritePassagesByRange/pages")
        self.count(f"mentions/{HYPERLINK}", len(hyperlinks))
        for source, n in Counter(label.source for label in labels).items():
            self.count(f"mentions/{source}", n)
        labeled = LabeledArticle(page_id=article.page_id, title=article.title, text=article.text,
                                 mentions=sorted(hyperlinks + labels, key=lambda m: (m.start, m.end)))
        if self.linker is not None:
            from pipelines.transforms.blink import blink_label

            labeled = blink_label(self.linker, labeled, self.count)
        mentioned = {m.entity for m in labeled.mentions}
        missing = mentioned - rows.keys()
        if missing:
            rows.update(store.get(missing))
        vocab = {e: rows[e][3] for e in mentioned if e in rows and rows[e][3] is not None}
        page = self.windows(labeled, vocab)
        if page is not None:
            split, _key, batch = page
            packed = pack_batch(article.page_id, batch)
            sorters[split].add(packed, packed[1])
        own = rows.get(article.title)
        if own is not None and own[3] is not None and own[4] == article.page_id:
            descriptions.add({"entity_id": own[3], "entity": article.title,
                              "description": first_paragraph(article.text, self.description_max_chars)})

    # -- the range -----------------------------------------------------------------------------------

    def process(self, element, store_shards):
        index, read_range = element
        self.store = open_store([path for _i, path in sorted(store_shards)], _copy_to_local)
        progress = range_progress(read_range, self.parse, 2)
        started = time.monotonic()
        schema = passage_schema(self.options.passage_text)
        sorters = {split: ExternalSorter(packed_order, self.sort_buffer_rows) for split in SPLITS}
        descriptions = ExternalSorter(_description_order, self.sort_buffer_rows)
        try:
            seen: set[int] = set()
            for article in self._unique_pages(self._articles(read_range, progress)):
                self._page(article, sorters, descriptions, seen)
            for split in SPLITS:
                relative = f"passages/{shard_name(split, index, self.ranges)}"
                yield self._write(relative, "passages", schema,
                                  _packed_row_groups(sorters[split].sorted(), schema, self.row_group_rows))
            yield self._write(f"{DESCRIPTIONS}/{shard_name(DESCRIPTIONS, index, self.ranges)}", DESCRIPTIONS,
                              SCHEMAS[DESCRIPTIONS], _row_groups(descriptions.sorted(), self.row_group_rows))
        finally:
            for sorter in (*sorters.values(), descriptions):
                sorter.close()
        progress.bytes_read, progress.done = progress.range_bytes, True
        progress.write()
        self.count("volume/WritePassagesByRange/ranges")
        log.info("pass 2: %s [%s:%s]: %d pages in %.1fs", read_range.path, read_range.start, read_range.end,
                 progress.pages, time.monotonic() - started)

    def _write(self, relative: str, kind: str, schema, tables) -> dict:
        path = storage.join(self.output, relative)
        writer = storage.ParquetFileWriter(path, schema)
        for table in tables:
            writer.write_table(table)
        sha256, size = writer.close()
        return {"path": relative, "bytes": size, "sha256": sha256, "rows": writer.rows, "kind": kind}


def _row_groups(rows, row_group_rows: int):
    import pyarrow as pa

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
    """Read ranges (with their index) + the lookup store's shards -> {"files", "stats"}."""

    def __init__(self, fn: WritePassagesByRangeFn) -> None:
        super().__init__()
        self.fn = fn

    def expand(self, inputs):
        out = inputs["ranges"] | "LabelTokenizeWrite" >> beam.ParDo(
            self.fn, store_shards=beam.pvalue.AsList(inputs["store_shards"])).with_outputs(STATS, main="files")
        return {"files": out.files, "stats": [out[STATS]]}
