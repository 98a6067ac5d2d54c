"""Stream the pages of a MediaWiki XML dump (or of a byte range of one).

``iter_pages`` is the reader the whole job is fed by: raw bytes are read in
1 MiB chunks, decompressed incrementally, transcoded to UTF-8 if needed, split
on ``<page>``/``</page>`` at the byte level and each page parsed on its own.
Memory is bounded by ``max_page_bytes`` plus a few chunks, whatever the size
of the dump.

Every problem inside the file becomes a ``DeadLetter(stage="read")`` and the
pages around it are still read:

==========================  ==========================================================
reason                      meaning
==========================  ==========================================================
``bad_xml``                 a page that is not well-formed XML, a ``<page>`` never
                            closed before the next one, or a ``</page>`` never opened
``bad_page_id``             ``<id>`` missing or not a non-negative integer
``bad_title``               ``<title>`` missing or empty
``page_too_large``          a page over ``max_page_bytes``, skipped without buffering
``truncated_xml``           the document ends inside a page, or without ``</mediawiki>``
``truncated_compressed``    the compressed stream ends before its end-of-stream mark
``corrupt_compressed``      the decompressor rejected the data; reading stops there
``bad_encoding``            invalid UTF-16/32 in a transcoded dump; reading stops there
==========================  ==========================================================
"""
from __future__ import annotations

from typing import Iterable, Iterator

from pipelines.dump.errors import BadEncodingError, CorruptCompressedError, DumpError, TruncatedCompressedError
from pipelines.dump.pages import DETAIL_LIMIT, dead_letter_for_fragment, namespace_prefixes, parse_page
from pipelines.dump.siteinfo import parse_siteinfo
from pipelines.dump.splitter import Fragment, FragmentKind, PageSplitter
from pipelines.dump.stats import ReadStats
from pipelines.dump.stream import XmlStream, open_xml_stream
from pipelines.records import DeadLetter, RawPage, SiteInfo

DEFAULT_MAX_PAGE_BYTES = 256 << 20

_STREAM_ERROR_REASONS: dict[type[DumpError], str] = {
    TruncatedCompressedError: "truncated_compressed",
    CorruptCompressedError: "corrupt_compressed",
    BadEncodingError: "bad_encoding",
}


def iter_pages(
    path: str,
    start: int | None = None,
    end: int | None = None,
    *,
    max_page_bytes: int = DEFAULT_MAX_PAGE_BYTES,
    siteinfo: SiteInfo | None = None,
    stats: ReadStats | None = None,
) -> Iterator[RawPage | DeadLetter]:
    """Yield every page of the dump at ``path`` as a ``RawPage``, damage as ``DeadLetter``.

    ``start``/``end`` restrict the read to raw bytes ``[start, end)`` (``end=None``:
    to end of file); a range must begin at a compressed stream boundary (see
    ``plan_read_ranges``). ``siteinfo`` resolves the namespace of pages without
    ``<ns>`` (old schemas) when the read does not include the header itself.
    ``stats``, if given, is filled with counters as the iterator is consumed.

    Raises at call time (not at first ``next``): ``DumpNotFoundError``,
    ``NotAMediaWikiDumpError``, or ``DumpError`` for a range that does not
    start a compressed stream. Pages are yielded in file order.
    """
    stream = open_xml_stream(path, start, end)
    return _read_pages(stream, max_page_bytes, siteinfo, stats if stats is not None else ReadStats())


def iter_pages_from_xml_chunks(
    chunks: Iterable[bytes],
    *,
    source: str = "",
    max_page_bytes: int = DEFAULT_MAX_PAGE_BYTES,
    siteinfo: SiteInfo | None = None,
    stats: ReadStats | None = None,
    expect_document_end: bool = True,
) -> Iterator[RawPage | DeadLetter]:
    """The page reader on already-decompressed UTF-8 chunks (benchmarks, tests, custom sources)."""
    reader = _PageReader(source, max_page_bytes, siteinfo, stats if stats is not None else ReadStats())
    stream_error: DumpError | None = None
    try:
        for chunk in chunks:
            reader.stats.xml_bytes += len(chunk)
            yield from reader.feed(chunk)
    except tuple(_STREAM_ERROR_REASONS) as error:
        stream_error = error
    yield from reader.finish(stream_error, expect_document_end)


def _read_pages(
    stream: XmlStream, max_page_bytes: int, siteinfo: SiteInfo | None, stats: ReadStats
) -> Iterator[RawPage | DeadLetter]:
    try:
        yield from iter_pages_from_xml_chunks(
            _count_raw(stream, stats),
            source=stream.source,
            max_page_bytes=max_page_bytes,
            siteinfo=siteinfo,
            stats=stats,
            expect_document_end=stream.end is None,
        )
    finally:
        stats.raw_bytes = stream.raw_bytes
        stream.close()


def _count_raw(stream: XmlStream, stats: ReadStats) -> Iterator[bytes]:
    for chunk in stream.chunks:
        stats.raw_bytes = stream.raw_bytes
        yield chunk


class _PageReader:
    """Splitter fragments -> records, with the bookkeeping for end-of-stream reports."""

    __slots__ = ("source", "stats", "splitter", "siteinfo", "prefixes", "last_page_id")

    def __init__(self, source: str, max_page_bytes: int, siteinfo: SiteInfo | None, stats: ReadStats) -> None:
        self.source = source
        self.stats = stats
        self.splitter = PageSplitter(max_page_bytes)
        self.siteinfo = siteinfo
        self.prefixes: dict[str, int] | None = None  # resolved at the first page
        self.last_page_id: int | None = None

    def feed(self, chunk: bytes) -> Iterator[RawPage | DeadLetter]:
        for fragment in self.splitter.feed(chunk):
            yield self._record(fragment)

    def finish(self, stream_error: DumpError | None, expect_document_end: bool) -> Iterator[RawPage | DeadLetter]:
        cut: Fragment | None = None
        for fragment in self.splitter.finish():
            if fragment.kind is FragmentKind.CUT:
                cut = fragment
            else:
                yield self._record(fragment)
        if stream_error is not None:
            # One record for one cause: the page the cut interrupted is named in it.
            reason = _STREAM_ERROR_REASONS[type(stream_error)]
            yield self._dead(reason, cut, f"{stream_error}; {self._lost_page_note(cut)}")
        elif cut is not None:
            yield self._dead("truncated_xml", cut, f"stream ends inside a <page>; {self._lost_page_note(cut)}")
        elif expect_document_end and not self.splitter.saw_document_end:
            yield self._dead("truncated_xml", None,
                             f"document ends without </mediawiki>; {self._lost_page_note(None)}")

    def _record(self, fragment: Fragment) -> RawPage | DeadLetter:
        if fragment.kind is FragmentKind.PAGE:
            if self.prefixes is None:
                self.prefixes = self._namespace_prefixes()
            record = parse_page(fragment.data, source=self.source, prefixes=self.prefixes, stats=self.stats)
            if isinstance(record, RawPage):
                self.stats.pages += 1
                self.stats.redirects += record.redirect is not None
                self.last_page_id = record.page_id
                return record
            record.detail = _at(record.detail, fragment.offset)
            self.stats.count_dead_letter(record.reason)
            return record
        if fragment.kind is FragmentKind.TOO_LARGE:
            limit = self.splitter.max_page_bytes
            return self._dead("page_too_large", fragment, f"page longer than max_page_bytes={limit}; skipped")
        if fragment.kind is FragmentKind.UNCLOSED:
            return self._dead("bad_xml", fragment, "<page> not closed before the next <page>")
        if fragment.kind is FragmentKind.ORPHAN_CLOSE:
            return self._dead("bad_xml", fragment, "</page> without a matching <page> (damaged page start)")
        raise AssertionError(f"unexpected fragment {fragment.kind}")

    def _dead(self, reason: str, fragment: Fragment | None, detail: str) -> DeadLetter:
        self.stats.count_dead_letter(reason)
        if fragment is None:
            return DeadLetter("read", reason, None, None, detail[:DETAIL_LIMIT], self.source)
        record = dead_letter_for_fragment(reason, fragment.data, detail, self.source)
        record.detail = _at(record.detail, fragment.offset)
        return record

    def _lost_page_note(self, cut: Fragment | None) -> str:
        last = f"last complete page id={self.last_page_id}" if self.last_page_id is not None else "no complete page"
        return f"{last}" if cut is None else f"{last}; the cut page is lost"

    def _namespace_prefixes(self) -> dict[str, int]:
        siteinfo = self.siteinfo
        if siteinfo is None:
            siteinfo = parse_siteinfo(self.splitter.header, name=self.source)
        return namespace_prefixes(siteinfo)


def _at(detail: str, offset: int) -> str:
    return f"{detail[:DETAIL_LIMIT - 40]} (decompressed byte {offset})"
