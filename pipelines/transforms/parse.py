"""ParseWikiDump: dump file -> articles, redirects, page kinds, dead letters.

Thin DoFns around ``pipelines.dump`` (reading) and ``pipelines.wikitext``
(extraction). Reading is split into byte ranges of whole bz2 streams when a
multistream index is available, so many workers decompress in parallel;
otherwise one worker reads the file (its pages are extracted where they are read: no shuffle of pages).
"""
from __future__ import annotations

import logging
import time
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from operator import attrgetter

import apache_beam as beam
from apache_beam.transforms.window import GlobalWindows

from pipelines.corpus.article_cache import CacheChunk, ChunkedCacheWriter
from pipelines.corpus.page_kinds import BAD_PAGE, NOT_IN_MAIN_NAMESPACE, classify_page
from pipelines.corpus.resolution import ARTICLE, DISAMBIGUATION, OTHER_NAMESPACE_REDIRECT, REDIRECT
from pipelines.corpus.sorted_runs import RunWriter
from pipelines.dump import ReadRange, ReadStats, iter_pages
from pipelines.progress import RangeProgress, range_bytes
from pipelines.records import Article, DeadLetter, RawPage, SiteInfo
from pipelines.transforms.stats import STATS, CountingDoFn
from pipelines.wikitext import (
    DisambiguationConfig,
    ExtractionError,
    extract_article,
)
from wikiedm import storage

log = logging.getLogger(__name__)

# Tagged outputs of ClassifyPages.
ARTICLES = "articles"
REDIRECTS = "redirects"
PAGE_KINDS = "page_kinds"
DEAD = "dead"

# Extraction count keys (see pipelines.wikitext.extract) that are links not kept as mentions.
LINK_DROP_KEYS = frozenset({
    "interlanguage", "interwiki", "other_namespace", "section_link", "invalid_target",
    "empty_surface", "nested_link", "dropped_in_tidy",
})


@lru_cache(maxsize=1024)  # a few dozen keys, asked ~20 times per article
def extraction_counter(key: str) -> str:
    """Extraction count key -> counter name: links/*, links_dropped/*, templates/* or removed/*."""
    if key == "links_kept":
        return "links/kept"
    if key == "self_links":
        return "links/self_links"
    if key.startswith("links_in_") or key in LINK_DROP_KEYS:
        return f"links_dropped/{key}"
    if key.startswith("templates_"):  # templates_rendered -> templates/rendered
        return f"templates/{key[len('templates_'):]}"
    return f"removed/{key}"


# Template calls by name. Rendered and omitted names are the registry's (a few
# hundred at most): Beam metrics and stats, like any counter. Dropped names are
# whatever the wiki uses (~100k distinct on enwiki): too many for metrics
# (Dataflow caps a job's counters), so they are data only, summed across the
# job, and stats.json keeps the TOP_DROPPED_TEMPLATES most frequent plus
# "templates_dropped/(other)" for the rest.
TEMPLATE_NAMES = "template_names"  # tagged output of ClassifyPages: (dropped name, calls)
TOP_DROPPED_TEMPLATES = 200
OTHER_DROPPED_TEMPLATES = "templates_dropped/(other)"
MAX_NAMES_PER_BUNDLE = 20_000  # beyond this, a bundle's extra names go to "(other)" at once


MAX_LOGGED_DEAD_LETTERS = 50  # per worker; the rest are counted and written, not logged


@dataclass(frozen=True, slots=True)
class ParseOptions:
    max_page_bytes: int
    max_wikitext_chars: int
    progress_every_s: float
    disambiguation: DisambiguationConfig
    progress_folder: str = ""  # where readers write their progress records (pipelines.progress); "" = none


class _DeadLetterLogging:
    """Log the first few dead letters of a worker with their page ids."""

    _logged = 0

    def log_dead(self, dl: DeadLetter) -> None:
        if _DeadLetterLogging._logged < MAX_LOGGED_DEAD_LETTERS:
            _DeadLetterLogging._logged += 1
            log.warning(
                "dead letter: stage=%s reason=%s page_id=%s title=%r source=%s: %s",
                dl.stage, dl.reason, dl.page_id, dl.title, dl.source, dl.detail[:200],
            )


class ReadPagesFn(CountingDoFn, _DeadLetterLogging):
    """ReadRange -> RawPage (main output) and DeadLetter (``dead``)."""

    def __init__(self, options: ParseOptions) -> None:
        super().__init__()
        self.options = options

    def process(self, read_range: ReadRange):
        yield from self.read(read_range, ReadStats())

    def read(self, read_range: ReadRange, stats: ReadStats):
        """The pages and dead letters of ``read_range`` (``stats`` fills as they are read), counted and logged."""
        started = last = time.monotonic()
        pages = 0
        chars = 0
        progress = range_progress(read_range, self.options, 1)
        for item in iter_pages(read_range.path, read_range.start, read_range.end,
                               max_page_bytes=self.options.max_page_bytes, stats=stats):
            if isinstance(item, DeadLetter):
                self.count(f"dead_letters/{item.stage}/{item.reason}")
                self.log_dead(item)
                yield beam.pvalue.TaggedOutput(DEAD, item)
                continue
            pages += 1
            chars += len(item.text)
            self.count("pages_read")
            self.count(f"pages_by_namespace/{item.ns}")
            yield item
            now = time.monotonic()
            if now - last >= self.options.progress_every_s:
                last = now
                rate = pages / max(now - started, 1e-9)
                log.info("read %d pages from %s [%s:%s] (%.0f pages/s, %.1f M wikitext chars)",
                         pages, read_range.path, read_range.start, read_range.end, rate, chars / 1e6)
                progress.pages, progress.bytes_read = pages, stats.raw_bytes
                progress.write()
        progress.pages, progress.bytes_read, progress.done = pages, progress.range_bytes, True
        progress.write()
        log.info("finished %s [%s:%s]: %d pages in %.1fs", read_range.path, read_range.start,
                 read_range.end, pages, time.monotonic() - started)


def range_progress(read_range: ReadRange, options: ParseOptions, pass_number: int) -> RangeProgress:
    """The progress record of a reader of ``read_range`` (writes nothing without a progress folder)."""
    size = range_bytes(read_range.path, read_range.start, read_range.end) if options.progress_folder else 0
    return RangeProgress(options.progress_folder, pass_number, read_range.start, size)


class ClassifyPagesFn(CountingDoFn, _DeadLetterLogging):
    """RawPage -> Article | redirect (source, target) | page kind (title, kind) | DeadLetter.

    Only the main namespace is kept; other namespaces are counted by
    ``ReadPagesFn`` and dropped here.
    """

    def __init__(self, site: SiteInfo, options: ParseOptions) -> None:
        super().__init__()
        self.site = site
        self.options = options
        self._dropped_templates: Counter = Counter()

    def start_bundle(self) -> None:
        super().start_bundle()
        self._dropped_templates = Counter()

    def finish_bundle(self):
        yield from super().finish_bundle()
        dropped, self._dropped_templates = self._dropped_templates, Counter()
        for name in sorted(dropped):
            yield beam.pvalue.TaggedOutput(
                TEMPLATE_NAMES, GlobalWindows.windowed_value((name, dropped[name])))

    def _count_templates(self, names: dict[str, int]) -> None:
        dropped = self._dropped_templates
        for key, n in names.items():
            outcome, name = key.split("/", 1)
            if outcome != "dropped":
                self.count(f"templates_{outcome}/{name}", n)
            elif name in dropped or len(dropped) < MAX_NAMES_PER_BUNDLE:
                dropped[name] += n
            else:
                self.count(OTHER_DROPPED_TEMPLATES, n)

    def _dead(self, page: RawPage, reason: str, detail: str = ""):
        dl = DeadLetter(stage="extract", reason=reason, page_id=page.page_id, title=page.title, detail=detail[:2000])
        self.count(f"dead_letters/extract/{reason}")
        self.log_dead(dl)
        return beam.pvalue.TaggedOutput(DEAD, dl)

    def process(self, page: RawPage):
        self.count("volume/ParseWikiDump/in")
        kind, title, target, reason, detail = classify_page(
            page, self.site, self.options.disambiguation, self.options.max_wikitext_chars)
        if kind == NOT_IN_MAIN_NAMESPACE:
            self.count("pages_not_in_main_namespace")
            return
        if kind == BAD_PAGE:
            yield self._dead(page, reason, detail)
            return
        if kind == OTHER_NAMESPACE_REDIRECT:
            # The page exists, so links to it are not red links; it is never an entity.
            self.count("redirects")
            self.count("redirects_out_of_main_namespace")
            self.count("volume/ParseWikiDump/out")
            yield beam.pvalue.TaggedOutput(PAGE_KINDS, (title, OTHER_NAMESPACE_REDIRECT))
            return
        if kind == REDIRECT:
            self.count("redirects")
            self.count("volume/ParseWikiDump/out", 2)
            yield beam.pvalue.TaggedOutput(REDIRECTS, (title, target))
            yield beam.pvalue.TaggedOutput(PAGE_KINDS, (title, REDIRECT))
            return
        if kind == DISAMBIGUATION:
            self.count("disambiguation_pages")
            self.count("volume/ParseWikiDump/out")
            yield beam.pvalue.TaggedOutput(PAGE_KINDS, (title, DISAMBIGUATION))
            return
        try:
            extraction = extract_article(page.text, self.site, title=title)
        except ExtractionError as exc:
            yield self._dead(page, getattr(exc, "reason", "parser_error") or "parser_error", str(exc))
            return
        except RecursionError as exc:  # a deeply nested page must never sink the job
            yield self._dead(page, "parser_error", f"recursion: {exc}")
            return
        self.count("articles")
        for key, n in extraction.counts.items():
            self.count(extraction_counter(key), n)
        self._count_templates(extraction.template_names)
        if extraction.parser != "fast":  # pages the fast path handed to mwparserfromhell
            self.count("extraction/parser_fallback")
        if not extraction.text.strip():
            self.count("articles_without_text")
        self.count("volume/ParseWikiDump/out", 2)
        yield beam.pvalue.TaggedOutput(PAGE_KINDS, (title, ARTICLE))
        yield Article(page_id=page.page_id, title=title, text=extraction.text, links=extraction.links,
                      revision_id=page.revision_id)


CHUNKS = "chunks"  # tagged output of ExtractRangeFn: the range's units of pass 2 (CacheChunk tuples)


class ExtractRangeFn(ClassifyPagesFn):
    """(range index, ReadRange) -> what ReadPagesFn + ClassifyPagesFn make of it, read and classified in one
    step (the two-pass job: no shuffle of pages), and on ``chunks`` the range's units of pass 2: the
    chunks of its articles cached under ``cache_folder`` (pipelines.corpus.article_cache), or with no
    cache folder one unit, the range itself (pass 2 then reads and extracts it again)."""

    def __init__(self, site: SiteInfo, options: ParseOptions, cache_folder: str = "",
                 chunk_articles: int = 10_000) -> None:
        super().__init__(site, options)
        self.cache_folder = cache_folder
        self.chunk_articles = chunk_articles

    def process(self, element):
        index, read_range = element
        stats = ReadStats()
        writer = None
        if self.cache_folder:
            writer = ChunkedCacheWriter(self.cache_folder, storage.join, storage.create, index, read_range.start,
                                        self.chunk_articles)
        articles = 0
        for page in ReadPagesFn.read(self, read_range, stats):
            if isinstance(page, beam.pvalue.TaggedOutput):
                yield page
                continue
            for out in ClassifyPagesFn.process(self, page):
                if isinstance(out, Article):
                    articles += 1
                    if writer is not None:
                        closed = writer.add(out, stats.raw_bytes)
                        if closed is not None:
                            yield beam.pvalue.TaggedOutput(CHUNKS, closed.as_tuple())
                yield out
        size = range_bytes(read_range.path, read_range.start, read_range.end)
        if writer is not None:
            yield beam.pvalue.TaggedOutput(CHUNKS, writer.finish(size).as_tuple())
        else:
            yield beam.pvalue.TaggedOutput(CHUNKS, CacheChunk(index, 0, "", articles, size, read_range.start).as_tuple())


# Pass 1's run files (pipelines.corpus.sorted_runs) that each range writes, and their record tags. A title's
# kinds, redirect target and article page id come before the requests that reach it (chases, links).
TITLE_RUNS, CHASE_RUNS, LINK_RUNS = "titles", "chase-0", "links"
KIND, REDIRECT_TARGET, FIRST_PAGE, CHASE, RESOLVED, LINK = range(6)
RUNS = "runs"  # tagged output of ExtractRangeToRunsFn: (run set, shard, path)


class ExtractRangeToRunsFn(ExtractRangeFn):
    """ExtractRangeFn whose small records go to sorted run files under ``runs_folder`` instead of out as
    elements (the two-pass job's pass 1: only run paths cross a shuffle). Per page:
      titles   (title, KIND, kind); a redirect's (title, REDIRECT_TARGET, target); an article's
               (title, FIRST_PAGE, page id)
      chase-0  (target, CHASE, (source, (source,))): the first hop of every redirect
      links    (target, LINK, (anchor text, links)): counted per range, flushed when the count is large
    ``runs`` -> (run set, shard, path) per run written; dead letters, stats, template names and
    pass 2's units leave as before."""

    def __init__(self, site: SiteInfo, options: ParseOptions, cache_folder: str, chunk_articles: int,
                 runs_folder: str, shards: int, buffer_records: int) -> None:
        super().__init__(site, options, cache_folder, chunk_articles)
        self.runs_folder = runs_folder
        self.shards = shards
        self.buffer_records = buffer_records

    def _writer(self, name: str, index: int) -> RunWriter:
        return RunWriter(storage.join(self.runs_folder, name), self.shards, f"range-{index:06d}", storage.create,
                         storage.join, self.buffer_records)

    def process(self, element):
        index, _read_range = element
        titles, chases, links = (self._writer(n, index) for n in (TITLE_RUNS, CHASE_RUNS, LINK_RUNS))
        link_counts: Counter = Counter()
        for out in super().process(element):
            if isinstance(out, Article):
                titles.add(out.title, FIRST_PAGE, out.page_id)
                link_counts.update(map(_TARGET_AND_SURFACE, out.links))  # counted in C, in the same order
                if len(link_counts) >= self.buffer_records:
                    _flush_links(link_counts, links)
                continue
            tag = getattr(out, "tag", None)
            if tag == REDIRECTS:
                source, target = out.value
                titles.add(source, REDIRECT_TARGET, target)
                chases.add(target, CHASE, (source, (source,)))
            elif tag == PAGE_KINDS:
                title, kind = out.value
                titles.add(title, KIND, kind)
            else:
                yield out
        _flush_links(link_counts, links)
        for name, writer in ((TITLE_RUNS, titles), (CHASE_RUNS, chases), (LINK_RUNS, links)):
            runs = writer.close()
            count_runs(self.count, name, writer, runs)
            for shard, path in runs:
                yield beam.pvalue.TaggedOutput(RUNS, (name, shard, path))


def count_runs(count, name: str, writer: RunWriter, runs: list) -> None:
    """``volume/tables/<run set>/...``: the records and bytes a step handed on through run files, and the
    run paths that crossed Beam's shuffle to the next step (and their bytes below the run set's folder)."""
    count(f"volume/tables/{name}/records", writer.records)
    count(f"volume/tables/{name}/bytes", writer.bytes)
    count(f"volume/tables/{name}/runs", len(runs))
    # below the run set's folder: the same on any output path (the counters of two runs must be equal)
    prefix = len(writer.folder.encode("utf-8"))
    count(f"volume/tables/{name}/run_path_bytes", sum(len(path.encode("utf-8")) - prefix for _shard, path in runs))


_TARGET_AND_SURFACE = attrgetter("target", "surface")


def _flush_links(link_counts: Counter, links: RunWriter) -> None:
    add = links.add
    for (target, surface), n in link_counts.items():
        add(target, LINK, (surface, n))
    link_counts.clear()


class NoteSiteInfoFn(CountingDoFn):
    """Count (and dead-letter) a dump without ``<siteinfo>``; defaults are used then."""

    def __init__(self, source: str) -> None:
        super().__init__()
        self.source = source

    def process(self, from_dump: bool):
        if not from_dump:
            self.count("siteinfo_missing")
            log.warning("%s has no <siteinfo>: using MediaWiki's canonical namespaces and first-letter case", self.source)
            yield beam.pvalue.TaggedOutput(DEAD, DeadLetter(
                stage="read", reason="missing_siteinfo", detail="no <siteinfo> header; defaults used", source=self.source))


class ParseWikiDump(beam.PTransform):
    """Read ranges of a dump and classify its pages.

    Returns a dict of PCollections: ``articles`` (Article), ``redirects``
    ((source title, target title)), ``page_kinds`` ((title, kind), kinds in
    :mod:`pipelines.corpus.resolution`), ``dead`` (DeadLetter) and ``stats``.
    """

    def __init__(self, ranges: list[ReadRange], site: SiteInfo, options: ParseOptions,
                 cache_folder: str = "", chunk_articles: int = 10_000,
                 runs_folder: str = "", run_shards: int = 1, run_buffer: int = 200_000) -> None:
        super().__init__()
        self.ranges = ranges
        self.site = site
        self.options = options
        # Each range's pages are classified where they are read (the job's consumers keep only small records,
        # and the ranges give parallel reads): no shuffle of pages. With cache_folder the articles are cached
        # there; "chunks" lists pass 2's units.
        self.cache_folder = cache_folder
        self.chunk_articles = chunk_articles
        # With runs_folder (the job's pass 1): titles, redirects and links go to sorted run files there
        # (ExtractRangeToRunsFn), and "runs" lists them; no articles, redirects or page kinds as elements.
        self.runs_folder = runs_folder
        self.run_shards = run_shards
        self.run_buffer = run_buffer

    def expand(self, pbegin):
        source = self.ranges[0].path if self.ranges else ""
        note = (
            pbegin
            | "SiteInfoPresent" >> beam.Create([self.site.from_dump])
            | "NoteSiteInfo" >> beam.ParDo(NoteSiteInfoFn(source)).with_outputs(DEAD, STATS)
        )
        if self.runs_folder:
            range_fn = ExtractRangeToRunsFn(self.site, self.options, self.cache_folder, self.chunk_articles,
                                            self.runs_folder, self.run_shards, self.run_buffer)
        else:
            range_fn = ExtractRangeFn(self.site, self.options, self.cache_folder, self.chunk_articles)
        classified = (
            pbegin
            | "ReadRanges" >> beam.Create(list(enumerate(self.ranges)), reshuffle=False)
            | "SpreadRanges" >> beam.Reshuffle()
            | "ReadAndClassify" >> beam.ParDo(range_fn).with_outputs(
                REDIRECTS, PAGE_KINDS, DEAD, STATS, TEMPLATE_NAMES, CHUNKS, RUNS, main=ARTICLES)
        )
        dead_parts, stats = (note[DEAD], classified[DEAD]), [note[STATS], classified[STATS]]
        dead = dead_parts | "FlattenParseDead" >> beam.Flatten()
        dropped_templates = classified[TEMPLATE_NAMES] | "TopDroppedTemplates" >> TopDroppedTemplates()
        out = {
            "articles": classified[ARTICLES],
            "redirects": classified[REDIRECTS],
            "page_kinds": classified[PAGE_KINDS],
            "dead": dead,
            "stats": stats + [dropped_templates],
            "chunks": classified[CHUNKS],  # pass 2's units (CacheChunk tuples)
            "runs": classified[RUNS],  # with runs_folder: (run set, shard, path) of each run file written
        }
        return out


class TopDroppedTemplates(beam.PTransform):
    """(dropped template name, calls) -> stats entries for the most frequent names.

    Yields ``("templates_dropped/NAME", calls)`` for the ``top`` most called
    names (ties broken by name, so reruns agree) and
    ``("templates_dropped/(other)", calls)`` for the rest. Memory is bounded:
    a per-name sum (a shuffle), a top-N combiner and a global sum.
    """

    def __init__(self, top: int = TOP_DROPPED_TEMPLATES) -> None:
        super().__init__()
        self.top = top

    def expand(self, names):
        summed = names | "SumPerName" >> beam.CombinePerKey(sum)
        total = summed | "Calls" >> beam.Values() | "SumCalls" >> beam.CombineGlobally(sum)
        return (
            summed
            | "MostCalled" >> beam.combiners.Top.Of(self.top, key=lambda item: (item[1], item[0]))
            | "AsStats" >> beam.FlatMap(_dropped_template_stats, total=beam.pvalue.AsSingleton(total))
        )


def _dropped_template_stats(top: list[tuple[str, int]], total: int):
    for name, calls in top:
        yield f"templates_dropped/{name}", calls
    other = total - sum(calls for _name, calls in top)
    if other:
        yield OTHER_DROPPED_TEMPLATES, other
