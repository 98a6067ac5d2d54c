"""Split a decompressed UTF-8 XML stream into ``<page>...</page>`` byte strings.

The split works on bytes with ``bytearray.find``: ``<`` is always escaped in
XML text, so the literal tags ``<page>`` and ``</page>`` only occur as markup.
Memory is bounded by the largest page kept (``max_page_bytes``) plus one
input chunk: a page that grows past the bound is reported and then skipped
without buffering it, by scanning for its ``</page>`` in a window of a few
bytes.

Damage is reported, never dropped silently: a ``<page>`` that is not closed
before the next ``<page>``, a ``</page>`` with no opening tag, a page cut by
the end of the stream.
"""
from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from typing import Iterator

OPEN_TAG = b"<page>"
CLOSE_TAG = b"</page>"
DOCUMENT_END_TAG = b"</mediawiki>"
FRAGMENT_HEAD_BYTES = 64 << 10  # bytes of a damaged page kept to recover its id and title
MAX_HEADER_BYTES = 4 << 20  # bytes before the first page kept for the siteinfo

# Bytes left unexamined at the end of the buffer so that a tag split across two
# chunks is still found whole.
_OVERLAP = max(len(OPEN_TAG), len(CLOSE_TAG), len(DOCUMENT_END_TAG)) - 1


class FragmentKind(Enum):
    PAGE = "page"  # a complete <page>...</page>
    UNCLOSED = "unclosed"  # <page> ... followed by another <page> before any </page>
    ORPHAN_CLOSE = "orphan_close"  # ... </page> with no <page> before it
    TOO_LARGE = "too_large"  # a page longer than max_page_bytes (data = its first bytes)
    CUT = "cut"  # a <page> still open when the stream ended (data = its first bytes)


@dataclass(slots=True)
class Fragment:
    """A piece of the stream: a whole page, or the head of a damaged one."""

    kind: FragmentKind
    offset: int  # decompressed byte offset of the fragment's start within this stream
    data: bytes


class _State(Enum):
    OUTSIDE = 0
    INSIDE = 1
    SKIPPING = 2


class PageSplitter:
    """Incremental splitter: ``feed`` chunks, then call ``finish`` once."""

    __slots__ = ("max_page_bytes", "_buffer", "_base", "_state", "_position", "_page_start",
                 "_search_from", "_outside_head", "_header", "_pages_seen", "saw_document_end")

    def __init__(self, max_page_bytes: int) -> None:
        if max_page_bytes <= len(OPEN_TAG) + len(CLOSE_TAG):
            raise ValueError(f"max_page_bytes too small: {max_page_bytes}")
        self.max_page_bytes = max_page_bytes
        self._buffer = bytearray()
        self._base = 0  # stream offset of _buffer[0]
        self._state = _State.OUTSIDE
        self._position = 0  # OUTSIDE/SKIPPING: first buffer index not yet examined
        self._page_start = 0  # INSIDE: buffer index of the open page's "<page>"
        self._search_from = 0  # INSIDE: where to resume looking for "</page>"
        self._outside_head = bytearray()  # start of the current between-pages region
        self._header = bytearray()  # everything before the first page (bounded)
        self._pages_seen = False
        self.saw_document_end = False

    @property
    def header(self) -> bytes:
        """The bytes before the first ``<page>`` (the root tag and ``<siteinfo>``), bounded."""
        return bytes(self._header)

    @property
    def buffered_bytes(self) -> int:
        """Bytes currently held (the open page, or a few bytes while skipping one)."""
        return len(self._buffer)

    def feed(self, chunk: bytes) -> Iterator[Fragment]:
        """Add decompressed bytes; yield every fragment they complete."""
        self._buffer += chunk
        yield from self._scan(final=False)
        self._compact()

    def finish(self) -> Iterator[Fragment]:
        """Signal end of stream; yield what is left (a cut page, an orphan ``</page>``)."""
        yield from self._scan(final=True)
        if self._state is _State.INSIDE:
            start = self._page_start
            yield Fragment(FragmentKind.CUT, self._base + start,
                           bytes(self._buffer[start:start + FRAGMENT_HEAD_BYTES]))
        elif self._state is _State.SKIPPING:
            yield Fragment(FragmentKind.CUT, self._base + self._position, b"")
        self._buffer = bytearray()

    def _scan(self, final: bool) -> Iterator[Fragment]:
        buffer = self._buffer
        while True:
            if self._state is _State.OUTSIDE:
                start = buffer.find(OPEN_TAG, self._position)
                if start < 0:
                    end = len(buffer) if final else max(self._position, len(buffer) - _OVERLAP)
                    yield from self._examine_outside(self._position, end)
                    self._position = end
                    return
                yield from self._examine_outside(self._position, start)
                self._outside_head.clear()
                self._pages_seen = True
                self._state = _State.INSIDE
                self._page_start = start
                self._search_from = start + len(OPEN_TAG)
            elif self._state is _State.INSIDE:
                end = buffer.find(CLOSE_TAG, self._search_from)
                if end < 0:
                    self._search_from = max(self._search_from, len(buffer) - _OVERLAP)
                    oversized = len(buffer) - self._page_start > self.max_page_bytes
                    if not (final or oversized):
                        return  # wait for more bytes (no rescan of the open page: linear time)
                    nested = buffer.find(OPEN_TAG, self._page_start + len(OPEN_TAG))
                    if nested >= 0:
                        yield self._unclosed(nested)
                        continue
                    if oversized:
                        yield self._start_skipping()
                        continue
                    return  # final: finish() reports the cut page
                nested = buffer.find(OPEN_TAG, self._page_start + len(OPEN_TAG), end)
                if nested >= 0:
                    yield self._unclosed(nested)
                    continue
                stop = end + len(CLOSE_TAG)
                if stop - self._page_start > self.max_page_bytes:
                    yield self._too_large_fragment()
                else:
                    yield Fragment(FragmentKind.PAGE, self._base + self._page_start,
                                   bytes(buffer[self._page_start:stop]))
                self._state = _State.OUTSIDE
                self._position = stop
            else:  # SKIPPING an oversized page: look for its end, keep nothing
                end = buffer.find(CLOSE_TAG, self._position)
                reopened = buffer.find(OPEN_TAG, self._position, end if end >= 0 else len(buffer))
                if reopened >= 0:  # the oversized page was never closed; a new one starts
                    self._state = _State.INSIDE
                    self._page_start = reopened
                    self._search_from = reopened + len(OPEN_TAG)
                elif end >= 0:
                    self._state = _State.OUTSIDE
                    self._position = end + len(CLOSE_TAG)
                else:
                    self._position = max(self._position, len(buffer) - _OVERLAP)
                    return

    def _examine_outside(self, start: int, end: int) -> Iterator[Fragment]:
        """Look at bytes between pages: the header, ``</mediawiki>``, stray ``</page>``."""
        if start >= end:
            return
        buffer = self._buffer
        if not self._pages_seen and len(self._header) < MAX_HEADER_BYTES:
            self._header += buffer[start:min(end, start + MAX_HEADER_BYTES - len(self._header))]
        if len(self._outside_head) < FRAGMENT_HEAD_BYTES:
            self._outside_head += buffer[start:min(end, start + FRAGMENT_HEAD_BYTES - len(self._outside_head))]
        # Tags that START in [start, end) are this call's; they may end a few bytes past `end`
        # (the unexamined overlap), and the next call starts at `end`, so none is seen twice.
        if buffer.find(DOCUMENT_END_TAG, start, min(len(buffer), end + len(DOCUMENT_END_TAG) - 1)) >= 0:
            self.saw_document_end = True
        close_limit = min(len(buffer), end + len(CLOSE_TAG) - 1)
        close = buffer.find(CLOSE_TAG, start, close_limit)
        while close >= 0:
            yield Fragment(FragmentKind.ORPHAN_CLOSE, self._base + start, bytes(self._outside_head))
            self._outside_head.clear()
            start = close + len(CLOSE_TAG)
            close = buffer.find(CLOSE_TAG, start, close_limit)

    def _unclosed(self, nested: int) -> Fragment:
        start = self._page_start
        fragment = Fragment(FragmentKind.UNCLOSED, self._base + start,
                            bytes(self._buffer[start:min(nested, start + FRAGMENT_HEAD_BYTES)]))
        self._page_start = nested
        self._search_from = nested + len(OPEN_TAG)
        return fragment

    def _too_large_fragment(self) -> Fragment:
        start = self._page_start
        return Fragment(FragmentKind.TOO_LARGE, self._base + start,
                        bytes(self._buffer[start:start + FRAGMENT_HEAD_BYTES]))

    def _start_skipping(self) -> Fragment:
        fragment = self._too_large_fragment()
        self._state = _State.SKIPPING
        self._position = max(self._search_from, self._page_start + len(OPEN_TAG))
        return fragment

    def _compact(self) -> None:
        """Drop bytes already handled so the buffer holds at most the open page."""
        keep_from = self._page_start if self._state is _State.INSIDE else self._position
        if keep_from <= 0:
            return
        del self._buffer[:keep_from]
        self._base += keep_from
        self._position -= keep_from
        self._page_start -= keep_from
        self._search_from -= keep_from
