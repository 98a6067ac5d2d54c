"""A fast path for rendering pre-passed wikitext, exact or declined.

After :mod:`pipelines.wikitext.prepass`, what is left of a page is prose with
links, bold/italic, headings, lists, entities, a few HTML tags and external
links. :func:`render_fast` renders that with one regex scan and the same
rendering decisions as :class:`pipelines.wikitext.extract._Renderer` (the link
logic is shared), at a fraction of mwparserfromhell's cost (its tokenizer and
tree builder are ~3/4 of the extraction time).

It is a fast path, not a second parser of record: where its result could
differ from ``mwparserfromhell.parse`` + ``_Renderer`` it raises
:class:`Decline`, and the caller renders the page with mwparserfromhell, or
only the rest of it from the last clean top-level line start (see
:func:`render_fast`). Top-level bold and italics are paired as the tokenizer
pairs them: in the one scan where they nest properly, else by
:class:`_StylePairing` (a port of the tokenizer's style routes run over the
top-level apostrophe runs, which the scan goes on collecting) and one more
scan.
It declines on: ``{{`` (the pre-pass leaves none) and tables; apostrophe
runs that do not pair up within a link label, tag body, heading or external
link's title, runs of 4 or more there; links whose target holds characters
mwparserfromhell rejects or looks like a URL; list or heading markup inside
labels; markup after a heading's closing ``=``; tags that are not simply
written or not properly nested; HTML tables holding links; deep nesting.
Small constructs whose parse depends on mwparserfromhell's details
(entities, tag attributes, external links) are checked against mwparserfromhell itself,
once per distinct string (cached). ``tests/test_wikitext_fastrender.py``
checks that the two paths agree on every article of the shared dumps and on
random markup; docs/extraction.md says more.
"""
from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING

import mwparserfromhell
from mwparserfromhell.definitions import is_scheme
from mwparserfromhell.nodes import ExternalLink, HTMLEntity, Tag

from pipelines.wikitext.prepass import DROPPED_TAG_REASONS
from pipelines.wikitext.textparts import BLOCK_TAGS as _BLOCK_TAGS
from pipelines.wikitext.textparts import DROPPED_HTML_TAGS as _DROPPED_HTML_TAGS
from pipelines.wikitext.textparts import Builder as _Builder
from pipelines.wikitext.textparts import contains, unicode_trail_length

if TYPE_CHECKING:  # pragma: no cover
    from typing import Any as _Renderer  # pipelines.wikitext.extract._Renderer (which imports this module)

TOP, TAG, LABEL, TITLE, HEADING = range(5)
ONE_PASS, COLLECT, PAIRED = range(3)  # _FastScan.mode
MAX_DEPTH = 24
CHECKPOINT_EVERY = 1000  # characters between resume points of a partial fallback
MAX_CACHE = 20_000

# A link with no label or a plain one, after its "[[": _TARGET, then "]]" or _SIMPLE_LABEL.
# The "[[" token takes it whole when it is there (target: group 1, label: group 2 or None).
_SIMPLE_LINK_REST = r"(?:([^\[\]{}<>\n|]*)(?:\|([^\[\]{<&'\n:]*))?\]\])"
# Each branch starts with one literal character (''+, not '{2,}): the regex engine then skips
# to the next of those characters in C, instead of trying every branch at every position.
_COMMON = (r"\[\[" + _SIMPLE_LINK_REST + r"?|\[|<|&|\{\{|''+"
           r"|\n(?=[#*;:=\-]|[ \t]*\{\|)"  # a line that starts with markup
           r"|:(?<=[A-Za-z0-9]:)")  # a possible free link ("http:")
_TOKENS = {
    TOP: re.compile(_COMMON), TAG: re.compile(_COMMON), HEADING: re.compile(_COMMON),
    LABEL: re.compile(r"\]\]|" + _COMMON), TITLE: re.compile(r"\]|" + _COMMON),
}
# While a ";" list item waits for its ":" (and until the line ends).
_DL_TOKENS = {ctx: re.compile(pattern.pattern + r"|:|\n") for ctx, pattern in _TOKENS.items()}
_TARGET = re.compile(r"[^\[\]{}<>\n|]*")
# A label with nothing to parse in it (no links, tags, entities, styles, URLs, lines).
_SIMPLE_LABEL = re.compile(r"\|[^\[\]{<&'\n:]*\]\]")
_URL_START = re.compile(r"//|([A-Za-z0-9+.\-]+):(//)?")
_LIST_MARKERS = re.compile(r"[#*;:]+")
_DASHES = re.compile(r"-{4,}")
_EQUALS = re.compile(r"=+")
_PLAIN_REST = re.compile(r"[^'\[\]<>{}&:]*")
_ENTITY = re.compile(r"&(?:#[xX][0-9a-fA-F]{1,8}|#[0-9]{1,8}|[A-Za-z][A-Za-z0-9]{0,31});")
_ATTRIBUTES = r"(?:\s+[^\s<>\"'=/\[\]{}]+(?:\s*=\s*(?:\"[^\"<>\[\]{}]*\"|'[^'<>\[\]{}]*'|[^\s<>\"'=`\[\]{}]+))?)*\s*"
_OPEN_TAG = re.compile(r"<([A-Za-z][A-Za-z0-9]*)(" + _ATTRIBUTES + r")(/?)>")
_CLOSE_TAG = re.compile(r"</([A-Za-z][A-Za-z0-9]*)\s*>")
_URL_END = re.compile(r"[\s\[\]<>\"]|''")
_ALNUM = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789")
_ALNUM_OR_COLON = _ALNUM | {":"}
_STRAY = frozenset("[]{}")
_VOID = frozenset(("br", "hr", "wbr"))

_entity_cache: dict[str, str | None] = {}
_tag_cache: dict[tuple[str, str], bool] = {}
_url_cache: dict[str, int] = {}
_ext_cache: dict[str, tuple[bool, str | None]] = {}


class Decline(Exception):
    """The fast path cannot promise mwparserfromhell's result here."""


class _StyleDecline(Decline):
    """Top-level bold/italics the one-pass tracking cannot pair (see _StylePairing)."""


def _cached(cache: dict, key, compute):
    value = cache.get(key, cache)
    if value is cache:
        if len(cache) >= MAX_CACHE:
            cache.clear()
        value = cache[key] = compute(key)
    return value


def _entity_char(entity: str) -> str | None:
    nodes = mwparserfromhell.parse(entity).nodes
    if len(nodes) == 1 and type(nodes[0]) is HTMLEntity:
        return nodes[0].normalize()
    return None


def _tag_ok(key: tuple[str, str]) -> bool:
    """Whether mwparserfromhell reads ``open + 'x' + close`` (or a void ``open``) as one tag."""
    open_tag, close_tag = key
    test = open_tag + ("x" + close_tag if close_tag else "")
    nodes = mwparserfromhell.parse(test).nodes
    return len(nodes) == 1 and type(nodes[0]) is Tag and str(nodes[0]) == test and not nodes[0].wiki_markup


def _free_url_length(candidate: str) -> int:
    """Length of the free external link at the start of ``candidate`` (0: none)."""
    nodes = mwparserfromhell.parse(candidate).nodes
    if nodes and type(nodes[0]) is ExternalLink and not nodes[0].brackets:
        return len(str(nodes[0]))
    return 0


def _bracket_link(candidate: str) -> tuple[bool, str | None]:
    """(is ``candidate`` exactly one bracketed external link, its raw title or None)."""
    nodes = mwparserfromhell.parse(candidate).nodes
    if len(nodes) == 1 and type(nodes[0]) is ExternalLink and nodes[0].brackets \
            and str(nodes[0]) == candidate:
        title = nodes[0].title
        return True, None if title is None else str(title)
    return False, None


def render_fast(text: str, renderer: "_Renderer", out: "_Builder") -> int | None:
    """Render ``text`` into ``out`` as ``renderer.render(mwparserfromhell.parse(text))`` would.

    Returns None when done, or a position ``p`` from which the caller must
    render ``text[p:]`` with mwparserfromhell (the fast path declined after
    ``p``, a line start where nothing was open: parsing from there gives
    what parsing the whole text gives there; ``out`` and ``renderer.counts``
    are as they must be at ``p``). Raises :class:`Decline` (with ``out`` and
    ``renderer.counts`` partly written: the caller starts again from copies)
    where it declined before any such point.
    """
    # The renderer drops the mark, joining quotes. (The mark first: "'" is common, the mark rare.)
    if "\ufdd0" in text and (contains(text, "\ufdd0'") or "'\ufdd0" in text):
        raise Decline("mark between apostrophes")
    initial_counts = dict(renderer.counts)
    scan = _FastScan(text, renderer)
    try:
        scan.scan(0, len(text), TOP, out, False)
    except _StyleDecline:
        # Bold/italics at the top level that the one-pass tracking cannot pair: pair them
        # as mwparserfromhell's tokenizer does (_StylePairing) and render again.
        counts = renderer.counts
        paired = _render_with_pairing(text, renderer, initial_counts)
        if paired is not None:
            out.parts[:] = paired.parts
            out.spans[:] = paired.spans
            out.size = paired.size
            return None
        renderer.counts = counts
        if scan.checkpoint is None:
            raise
        return _resume_point(scan, text, renderer, out)
    except Decline:
        if scan.checkpoint is None:
            raise
        return _resume_point(scan, text, renderer, out)
    if scan.mode == ONE_PASS:
        return None
    # The scan gave up pairing the top-level styles and collected them instead: render again.
    counts = renderer.counts
    paired = _render_with_pairing(text, renderer, initial_counts, scan.events)
    if paired is not None:
        out.parts[:] = paired.parts
        out.spans[:] = paired.spans
        out.size = paired.size
        return None
    renderer.counts = counts
    if scan.checkpoint is None:
        raise Decline("style pairing")
    return _resume_point(scan, text, renderer, out)


def _resume_point(scan: "_FastScan", text: str, renderer: "_Renderer", out: "_Builder") -> int:
    """Roll ``out`` and the counts back to the scan's last resume point; return its position."""
    position, text_from, parts, size, spans, counts = scan.checkpoint
    del out.parts[parts:]
    del out.spans[spans:]
    out.size = size
    renderer.counts.clear()
    renderer.counts.update(counts)
    if text_from < position:  # the pending text up to the line start
        out.emit(renderer.clean_text(text[text_from:position]))
    return position


def _render_with_pairing(text: str, renderer: "_Renderer", initial_counts: dict[str, int],
                         events: list[tuple[int, int, int]] | None = None) -> "_Builder | None":
    """Render ``text`` with its top-level bold/italics paired by :class:`_StylePairing`.

    Two scans: the first only collects the top-level apostrophe runs and the
    definition-list events that decide them (its output is thrown away; skipped
    where ``events`` are given: a scan that went on collecting), the second
    renders with the pairing. None (counts left for the caller to restore)
    where either scan declines.
    """
    try:
        if events is None:
            renderer.counts = {}
            collect = _FastScan(text, renderer)
            collect.mode = COLLECT
            collect.scan(0, len(text), TOP, _Builder(), False)
            events = collect.events
        pieces, markers = _StylePairing(events).pair()
        renderer.counts = dict(initial_counts)
        paired = _FastScan(text, renderer)
        paired.mode = PAIRED
        paired.pieces = pieces
        paired.markers = markers
        out = _Builder()
        paired.scan(0, len(text), TOP, out, False)
    except Decline:
        return None
    return out


class _FastScan:
    __slots__ = ("text", "r", "depth", "links_seen", "unicode_trails", "checkpoint", "mode",
                 "events", "pieces", "markers", "terms")

    def __init__(self, text: str, renderer: "_Renderer") -> None:
        self.text = text
        self.r = renderer
        self.depth = 0
        self.links_seen = 0
        # The last top-level line start with nothing open: (position, pending text start,
        # len(out.parts), out.size, len(out.spans), counts) for render_fast to resume from.
        self.checkpoint: tuple | None = None
        self.unicode_trails = renderer.trail_length is unicode_trail_length  # trails start with a letter
        # How top-level apostrophe runs are read: ONE_PASS (_Styles), COLLECT (record them and
        # the definition-list events in ``events``, output thrown away) or PAIRED (as
        # _StylePairing decided: ``pieces`` per run, ``markers``: the ":" that are list markers).
        self.mode = ONE_PASS
        self.events: list[tuple[int, int, int]] = []
        self.pieces: dict[int, list[tuple[bool, int]]] = {}
        self.markers: frozenset[int] | set[int] = frozenset()
        # ONE_PASS records the top-level runs too, so that where it cannot pair them it goes on
        # as COLLECT (see switch); not after a ";" term (its ":" and line ends are not recorded).
        self.terms = False

    def switch(self) -> bool:
        """Go on collecting, where the one-pass tracking gave up; whether it could."""
        if self.mode != ONE_PASS or self.terms:
            return False
        self.mode = COLLECT
        return True

    def scan(self, pos: int, end: int, ctx: int, out: "_Builder", in_label: bool,
             tag: str = "") -> int:
        try:
            return self._scan(pos, end, ctx, out, in_label, tag)
        except Decline as decline:
            if len(decline.args) == 1:  # where it happened: the innermost context's start
                decline.args = (*decline.args, pos)
            raise

    def _scan(self, pos: int, end: int, ctx: int, out: "_Builder", in_label: bool,
              tag: str) -> int:
        """Render ``text[pos:end]`` in context ``ctx``; return where the context ended.

        LABEL returns the position of its "]]", TITLE of its "]", TAG the end of
        its closing tag; TOP and HEADING run to ``end``.
        """
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise Decline("nesting")
        text = self.text
        r = self.r
        clean = r.clean_text
        top = ctx == TOP
        styles = _Styles(top)
        paired = top and self.mode  # top-level runs: collected or paired, not tracked here
        text_from = pos  # start of the pending text run
        node_end = pos  # end of the last parsed node (mwparserfromhell's text buffer starts there)
        dl_term = False
        if pos == 0 and ctx == TOP and end:
            text_from = node_end = pos = self.line_start(0, end, ctx, out, in_label, styles)
            if pos < 0:
                text_from = node_end = pos = -pos - 1
                dl_term = True
        next_checkpoint = CHECKPOINT_EVERY if top and not paired else end + 1
        search, dl_search = _TOKENS[ctx].search, _DL_TOKENS[ctx].search
        while True:
            match = (dl_search if dl_term else search)(text, pos, end)
            if match is None:
                break
            start, stop = match.span()
            first = text[start]
            if top and start >= next_checkpoint and styles.simple and not styles \
                    and not styles.loose and not dl_term:
                line = text.rfind("\n", node_end, start) + 1
                if line:  # a line start after the last node, with no style open
                    self.checkpoint = (line, text_from, len(out.parts), out.size, len(out.spans),
                                       dict(r.counts))
                    next_checkpoint = start + CHECKPOINT_EVERY
            if first == "[":
                if stop - start > 1:  # "[[", or a whole simple link
                    if text_from < start:
                        out.emit(clean(text[text_from:start]))
                    node_end, trail = self.wikilink(match, end, out, in_label)
                    pos = text_from = node_end + trail  # the trail is still the parser's text
                    continue
                if ctx == TITLE or not _looks_like_url(text, start + 1):
                    pos = start + 1  # "[" as text
                    continue
                close = text.find("]", start, end)
                line_end = text.find("\n", start, end)
                if close < 0 or (0 <= line_end < close):
                    raise Decline("bracket")
                is_link, title = _cached(_ext_cache, text[start:close + 1], _bracket_link)
                if not is_link:
                    raise Decline("external link")
                if text_from < start:
                    out.emit(clean(text[text_from:start]))
                r.bump("external_links")
                if title is not None:
                    self.scan(close - len(title), close + 1, TITLE, out, in_label)
                pos = text_from = node_end = close + 1
                continue
            if first == "'":
                run = stop - start
                if paired:
                    if self.mode == COLLECT:
                        self.events.append((_RUN, start, run))
                    else:  # each piece: apostrophes left as text, or markup (ends the text node)
                        cursor = start
                        for as_text, count in self.pieces[start]:
                            if not as_text:
                                if text_from < cursor:
                                    out.emit(clean(text[text_from:cursor]))
                                text_from = cursor + count
                            cursor += count
                    pos = node_end = stop
                    continue
                if top:
                    self.events.append((_RUN, start, run))
                if run > 3:
                    if not top:  # inside a label, tag, heading or title: too many ways to read it
                        raise Decline("apostrophes", start)
                    styles.simple = False  # and no resume point past it
                    if dl_term:  # nor a sure frame for the term's ":"
                        raise _StyleDecline("apostrophes in a definition term", start)
                # mwparserfromhell reads '''' as "'" + ''' and 6+ as the extra "'"s + '''''.
                extra = 1 if run == 4 else max(run - 5, 0)
                if run == 2 and start and text[start - 1] in _STRAY \
                        and text[start - 1] == text[start + 2:start + 3]:
                    styles.risky = True  # as text, the run would let "]" + "]" meet in one node
                if text_from < start + extra:
                    out.emit(clean(text[text_from:start + extra]))
                try:
                    styles.run(run - extra, start)
                except _StyleDecline:
                    if not (top and self.switch()):
                        raise
                    paired = True  # (the output from here on is thrown away)
                    next_checkpoint = end + 1
                pos = text_from = node_end = stop
                continue
            if first == "<":
                resume = self.tag(start, end, ctx, out, in_label, tag, text_from, styles)
                if resume is None:  # "<" as text
                    pos = start + 1
                elif resume < 0:  # this context's closing tag
                    return -resume - 1
                else:
                    pos = text_from = node_end = resume
                continue
            if first == "&":
                entity = _ENTITY.match(text, start)
                char = _cached(_entity_cache, entity.group(), _entity_char) if entity else None
                if char is None:
                    pos = start + 1
                    continue
                if text_from < start:
                    out.emit(clean(text[text_from:start]))
                out.emit(char)
                pos = text_from = node_end = entity.end()
                continue
            if first == ":":
                if ctx != TITLE and start > 0 and text[start - 1] in _ALNUM:
                    link = self.free_link(start, end, node_end)
                    if link:
                        link_start, link_end, url_end = link
                        if text_from < link_start:
                            out.emit(clean(text[text_from:link_start]))
                        r.bump("external_links")
                        text_from = node_end = link_end
                        pos = url_end  # trailing punctuation left out of the URL is plain text
                        continue
                if dl_term:  # the ":" of "; term : definition" is a list marker
                    if paired:  # unless a bold/italic context holds it
                        if self.mode == COLLECT:
                            self.events.append((_COLON, start, 0))
                        elif start in self.markers:
                            if text_from < start:
                                out.emit(clean(text[text_from:start]))
                            text_from = node_end = start + 1
                        pos = start + 1  # (still a term: an outer context may hold the next ":")
                        continue
                    if styles or styles.loose:
                        raise (_StyleDecline if top else Decline)("style in a definition term")
                    if text_from < start:
                        out.emit(clean(text[text_from:start]))
                    dl_term = False
                    pos = text_from = node_end = start + 1
                    continue
                pos = start + 1
                continue
            if first == "\n":
                if paired:
                    if dl_term and self.mode == COLLECT:
                        self.events.append((_NEWLINE, start, 0))
                elif dl_term:
                    if styles or styles.loose:
                        raise (_StyleDecline if top else Decline)("style in a definition term")
                    dl_term = False
                pos = start + 1
                if pos < end and _starts_line_markup(text, pos):
                    if text_from < pos:
                        out.emit(clean(text[text_from:pos]))
                    try:
                        new_pos = self.line_start(pos, end, ctx, out, in_label, styles)
                    except _StyleDecline:
                        if not (top and self.switch()):
                            raise
                        paired = True
                        next_checkpoint = end + 1
                        new_pos = self.line_start(pos, end, ctx, out, in_label, styles)
                    if new_pos < 0:
                        new_pos = -new_pos - 1
                        dl_term = True
                    pos = text_from = node_end = new_pos
                continue
            if first == "]":
                if text_from < start:
                    out.emit(clean(text[text_from:start]))
                if styles:
                    raise Decline("open style")
                self.depth -= 1
                return start
            raise Decline("template")  # "{{"
        if text_from < end:
            out.emit(clean(text[text_from:end]))
        if styles:
            if ctx != TOP:
                raise Decline("open style")
            try:
                styles.settle()
            except _StyleDecline:
                if not self.switch():
                    raise
        if ctx in (LABEL, TITLE, TAG):
            raise Decline("unclosed")
        self.depth -= 1
        return end

    # -- line starts: lists, headings, rules --------------------------------------------
    def line_start(self, pos: int, end: int, ctx: int, out: "_Builder", in_label: bool,
                   styles: "_Styles") -> int:
        """Handle markup at a line start; return the position after it.

        A negative result ``-p - 1`` means "p, and a ';' list item now waits for its ':'".
        """
        text = self.text
        char = text[pos]
        if char not in "#*;:=-{ \t":
            return pos
        if ctx not in (TOP, TAG):
            raise Decline("line markup inside a link, title or heading")
        if char in "#*;:":
            markers = _LIST_MARKERS.match(text, pos, end)
            after = markers.end()
            if ctx == TOP and self.mode:
                if ";" not in markers.group():
                    return after
                if self.mode == COLLECT:
                    self.events.append((_TERM, pos, 0))
                return -after - 1
            styles.crossing(ctx)
            if ";" not in markers.group():
                return after
            if styles.loose or not styles.simple:  # the term may be an open style's, not the top level's
                raise _StyleDecline("definition term in a style")
            if ctx == TOP:
                self.terms = True
            return -after - 1
        if char == "-":
            dashes = _DASHES.match(text, pos, end)
            if dashes is None:
                return pos
            out.emit("\n")
            return dashes.end()
        if char == "=":
            # As mwparserfromhell reads "== Title ==": the last run of "=" on the line
            # closes; level = the shorter run (at most 6); the longer run's extra "="
            # and any "=" inside are title text; what follows the last run is text.
            line_end = text.find("\n", pos, end)
            line_end = end if line_end < 0 else line_end
            opening = _EQUALS.match(text, pos, line_end).end()
            closing_end = text.rfind("=", opening, line_end) + 1
            if closing_end <= opening:
                raise Decline("heading")
            closing = closing_end
            while text[closing - 1] == "=":
                closing -= 1
            if closing <= opening or not text[opening:closing].strip(" \t") \
                    or not _PLAIN_REST.fullmatch(text, closing_end, line_end):
                # (markup after the closing run can carry the heading over to another line)
                raise Decline("heading")
            level = min(opening - pos, closing_end - closing, 6)
            if not (ctx == TOP and self.mode):
                styles.crossing(ctx)
            if self.r.config.keep_headings:
                out.emit("\n")
                out.emit("=" * (opening - pos - level))
                self.scan(opening, closing, HEADING, out, in_label)
                out.emit("=" * (closing_end - closing - level))
                out.emit("\n")
            return closing_end
        if text[pos:pos + 200].lstrip(" \t").startswith("{|"):
            raise Decline("table")
        return pos

    # -- links ------------------------------------------------------------------------
    def wikilink(self, token: re.Match[str], end: int, out: "_Builder",
                 in_label: bool) -> tuple[int, int]:
        """Render the link whose "[[" ``token`` found; return its end and its trail's length."""
        text = self.text
        r = self.r
        start = token.start()
        raw_target, raw_label = token.group(1, 2)
        if raw_target is not None:  # a simple link, whole: what the lines below find
            simple: re.Match[str] | None = token
            target_end = start + 2 + len(raw_target)
        else:
            simple = None
            target_end = _TARGET.match(text, start + 2, end).end()
            raw_target = text[start + 2:target_end]
        if (":" in raw_target or raw_target.startswith("//")) and _looks_like_url(text, start + 2):
            raise Decline("link that looks like a URL")
        if not raw_target.strip() or "''" in raw_target:
            raise Decline("link target")
        self.links_seen += 1
        if simple is not None:
            if raw_label is None:
                return self.finish_link(raw_target, None, "", simple.end(), end, out, in_label)
            # plain text: one Text node
            if "}" in raw_label or "\ufdd0" in raw_label:  # the renderer changes (and counts) those
                return self.finish_link(raw_target, raw_label, lambda: r.clean_text(raw_label),
                                        simple.end(), end, out, in_label)
            return self.finish_link(raw_target, raw_label, raw_label, simple.end(), end, out, in_label)
        if text.startswith("]]", target_end):
            return self.finish_link(raw_target, None, "", target_end + 2, end, out, in_label)
        if (simple := _SIMPLE_LABEL.match(text, target_end, end)) is not None:
            raw_label = text[target_end + 1:simple.end() - 2]  # plain text: one Text node
            if "}" in raw_label or "\ufdd0" in raw_label:  # the renderer changes (and counts) those
                return self.finish_link(raw_target, raw_label, lambda: r.clean_text(raw_label),
                                        simple.end(), end, out, in_label)
            return self.finish_link(raw_target, raw_label, raw_label, simple.end(), end, out, in_label)
        if text.startswith("|", target_end):
            label_out = _Builder()
            saved = r.counts
            r.counts = {}
            seen = self.links_seen
            try:
                label_end = self.scan(target_end + 1, end, LABEL, label_out, True)
            finally:
                label_counts, r.counts = r.counts, saved
            caption_links = self.links_seen - seen
            raw_label = text[target_end + 1:label_end]
            label_text = label_out.text()
            link_end = label_end + 2
        else:
            raise Decline("link target")

        def render_label() -> str:
            if label_counts:
                counts = r.counts
                for key, value in label_counts.items():
                    counts[key] = counts.get(key, 0) + value
            return label_text

        return self.finish_link(raw_target, raw_label, render_label, link_end, end, out, in_label,
                                caption_links)

    def finish_link(self, raw_target: str, raw_label: str | None, label, link_end: int,
                    end: int, out: "_Builder", in_label: bool,
                    caption_links: int = 0) -> tuple[int, int]:
        """Render a parsed link with the shared logic; return its end and trail length."""
        text = self.text
        if link_end < end and (text[link_end].isalpha() or not self.unicode_trails):
            following = text[link_end:min(end, link_end + 100)]
        else:
            following = ""  # no trail can start here
        trail = self.r.link(raw_target, raw_label, label, caption_links, following, out, in_label)
        if trail and following[trail:trail + 1] in _ALNUM_OR_COLON:
            # The letters after the link may begin a free link ("[[a]]http://..."):
            # mwparserfromhell would not take them as a trail.
            scheme = _scheme_run(text, link_end, end)
            if text.startswith(":", link_end + len(scheme)) and is_scheme(
                    scheme, text.startswith("//", link_end + len(scheme) + 1)):
                raise Decline("trail before a free link")
        return link_end, trail

    def free_link(self, colon: int, end: int, node_end: int) -> tuple[int, int, int] | None:
        """(start, end, end of URL characters) of the free link whose scheme ends at ``colon``."""
        text = self.text
        scheme = _scheme_before(text, colon, node_end)
        start = colon - len(scheme)
        if not scheme or (start > node_end and not _is_boundary(text[start - 1])):
            return None
        slashes = text.startswith("//", colon + 1)
        if not is_scheme(scheme, slashes):
            return None
        stop = _URL_END.search(text, colon + 1, end)
        if stop is None and end < len(text):  # runs to a heading's "=": ends there, not in a lone parse
            raise Decline("free link at the end of a heading")
        candidate = text[start:stop.end() if stop else end]  # with what ends the URL
        length = _cached(_url_cache, candidate, _free_url_length)
        if not length:
            return None
        return start, start + length, max(start + length, stop.start() if stop else end)

    # -- tags -------------------------------------------------------------------------
    def tag(self, start: int, end: int, ctx: int, out: "_Builder", in_label: bool, current: str,
            text_from: int, styles: "_Styles") -> int | None:
        """Render the tag at ``start``; return where text resumes.

        ``-p - 1`` when it is the closing tag of the context being scanned;
        None when the "<" is text.
        """
        text = self.text
        r = self.r
        if text.startswith("</", start):
            close = _CLOSE_TAG.match(text, start, end)
            if ctx == TAG and close is not None and close.group(1).lower() == current:
                if text_from < start:
                    out.emit(r.clean_text(text[text_from:start]))
                if styles:
                    raise Decline("open style")
                self.depth -= 1
                return -close.end() - 1
            if start + 2 < end and text[start + 2].isalpha():
                raise Decline("closing tag")
            return None
        opening = _OPEN_TAG.match(text, start, end)
        if opening is None:
            if start + 1 < end and text[start + 1].isalpha():
                raise Decline("tag")
            return None
        name = opening.group(1).lower()
        self_closing = bool(opening.group(3)) or name in _VOID
        if text_from < start:
            out.emit(r.clean_text(text[text_from:start]))
        reason = DROPPED_TAG_REASONS.get(name) or _DROPPED_HTML_TAGS.get(name)
        block = name in _BLOCK_TAGS
        if self_closing:
            if not _cached(_tag_cache, (opening.group(), ""), _tag_ok):
                raise Decline("tag")
            if reason:
                if name == "table":
                    out.emit("\n")
            elif block:
                out.emit("\n\n")
            return opening.end()
        close_at = _matching_close(text, name, opening.end(), end)
        if close_at is None:
            raise Decline("unclosed tag")
        close = _CLOSE_TAG.match(text, close_at, end)
        if not _cached(_tag_cache, (opening.group(), close.group()), _tag_ok):
            raise Decline("tag")
        if reason:
            if "[[" in text[opening.end():close_at]:
                raise Decline("links in a dropped tag")
            # Not shown, but parsed: what the body holds decides whether the tag is one.
            saved = r.counts
            r.counts = {}
            try:
                resume = self.scan(opening.end(), end, TAG, _Builder(), in_label, name)
            finally:
                r.counts = saved
            if resume != close.end():
                raise Decline("tag nesting")
            if name == "table":
                out.emit("\n")
            return resume
        if block:
            out.emit("\n")
        resume = self.scan(opening.end(), end, TAG, out, in_label, name)
        if resume != close.end():
            raise Decline("tag nesting")
        if block:
            out.emit("\n")
        return resume


class _Styles:
    """Apostrophe runs of one context, as mwparserfromhell pairs them.

    Runs of '' ''' ''''' that nest properly are bold/italic markup: all vanish.
    At the page's top level an italic left open is common (its other half was
    in a removed template or ref). mwparserfromhell then pairs the top-level
    '' differently or reads some as text, but every '' still vanishes (the
    renderer drops leftover runs) as long as each ''' pairs with the next
    ''' (with any '' between them paired too): that is the "loose" mode.
    Anything else is declined (at the top level: paired by _StylePairing instead).
    """

    __slots__ = ("stack", "loose", "last", "risky", "bold_open", "italic_in_bold", "simple", "top")

    def __init__(self, top: bool = False) -> None:
        self.top = top  # the page's top level: what cannot be paired here, _StylePairing pairs
        self.stack: list[str] = []
        # Only '' and ''' so far: each pairs with the next closer left to right, as in
        # mwparserfromhell, so a line start with nothing open is a safe resume point.
        self.simple = True
        self.loose = False
        self.risky = False  # a '' next to a bracket or brace: not safe to read loosely
        self.last = 0  # where the last run was (for Decline's position)
        self.bold_open = False  # loose mode: inside a ''' pair
        self.italic_in_bold = False  # loose mode: inside a '' pair inside a ''' pair

    def run(self, length: int, at: int) -> None:
        self.last = at
        if not self.loose:
            try:
                _style(self.stack, length, at)
            except Decline as decline:
                if self.top:
                    raise _StyleDecline(*decline.args) from None
                raise
        elif self.risky:  # a '' by a bracket, which may be left as text: let _StylePairing decide
            raise _StyleDecline("loose apostrophes by a bracket", at)
        elif length == 2:
            if self.bold_open:
                self.italic_in_bold = not self.italic_in_bold
        elif length == 3 and not self.italic_in_bold:
            self.bold_open = not self.bold_open
        else:
            raise _StyleDecline("bold after a loose italic", at)

    def crossing(self, ctx: int) -> None:
        """A heading or list item starts while styles are open."""
        if self.stack:
            if ctx != TOP:  # an italic left open in a tag's body can unmake the tag
                raise Decline("open style in a tag")
            self.settle()

    def settle(self) -> None:
        """The context ends (or a block starts) with styles still open."""
        if self.bold_open or self.italic_in_bold or self.risky \
                or any(style != "i" for style in self.stack):
            raise _StyleDecline("open style", self.last)  # (only ever at the top level)
        self.stack.clear()
        self.loose = True

    def __bool__(self) -> bool:
        return bool(self.stack) or self.bold_open or self.italic_in_bold


def _style(styles: list[str], run: int, at: int) -> None:
    """Track '' / ''' / ''''' as mwparserfromhell pairs them; decline on anything unusual."""
    top = styles[-1] if styles else ""
    if run == 2:
        if top == "i" or top == "i5":
            styles.pop()
        elif top == "5":
            styles[-1] = "b"
        elif "i" in styles or "i5" in styles or "5" in styles:
            raise Decline("style nesting", at)
        else:
            styles.append("i")
    elif run == 3:
        if top == "b":
            styles.pop()
        elif top == "5":
            styles[-1] = "i5"  # the italic half of a ''''' : never read loosely
        elif "b" in styles or "5" in styles:
            raise Decline("style nesting", at)
        else:
            styles.append("b")
    elif run == 5:
        if not styles:
            styles.append("5")
        elif top == "5":
            styles.pop()
        elif styles == ["b", "i"] or styles == ["i", "b"]:
            styles.clear()
        else:
            raise Decline("style nesting", at)
    else:
        raise Decline("apostrophes", at)


# -- top-level bold/italics, paired as mwparserfromhell's tokenizer pairs them ---------------
# Events of the top level, in text order: (kind, position, run length).
_RUN, _TERM, _COLON, _NEWLINE = range(4)  # an apostrophe run; a ";" list item; ":"; "\n"
# Tokenizer contexts (mwparserfromhell.parser.contexts: STYLE_*, DL_TERM), renumbered.
_ITALICS, _BOLD, _PASS_AGAIN, _SECOND_PASS, _DL_TERM = 1, 2, 4, 8, 16
_STYLE_CONTEXT = _ITALICS | _BOLD | _PASS_AGAIN | _SECOND_PASS  # fails at the end of the text
MAX_STYLE_DEPTH = 40  # nested style contexts (the tokenizer stops nesting anything at 100)
MAX_STYLE_STEPS = 200_000  # events visited, over all retries


class _BadRoute(Exception):
    def __init__(self, context: int) -> None:
        self.context = context


class _StylePairing:
    """Which top-level apostrophes mwparserfromhell reads as bold/italic markup.

    A port of the style part of its tokenizer (``_parse_style``,
    ``_parse_italics``, ``_parse_bold``, ``_parse_italics_and_bold``, the
    bad-route memo, a definition term's ``:``) run over the top-level events
    only: everything else at the top level (links, tags, headings, lists,
    entities) is parsed the same inside a style context as outside it (the
    fast path checks those on their own), and a style context only ends at
    its closing run or, failing, at the end of the text.

    :meth:`pair` returns, per run (by position), its pieces in order:
    ``(True, n)`` n apostrophes left as text (they join the text around
    them, where the renderer drops runs of two or more), ``(False, n)`` n
    apostrophes of markup (which end a text node); and the positions of the
    ":" that are definition-list markers rather than text.
    """

    __slots__ = ("events", "index", "offset", "bad", "depth", "steps")

    def __init__(self, events: list[tuple[int, int, int]]) -> None:
        self.events = events
        self.index = 0  # the head: an event, and how far into its run (a re-read run's rest)
        self.offset = 0
        self.bad: set[tuple[int, int, int]] = set()
        self.depth = 0
        self.steps = 0

    def pair(self) -> tuple[dict[int, list[tuple[bool, int]]], set[int]]:
        items, _ = self.parse(0)
        pieces: dict[int, list[tuple[bool, int]]] = {}
        markers: set[int] = set()
        for as_text, at, count in items:
            if count:
                pieces.setdefault(at, []).append((as_text, count))
            else:
                markers.add(at)
        for kind, at, length in self.events:
            if kind == _RUN and sum(count for _, count in pieces.get(at, ())) != length:
                raise Decline("style pairing", at)  # cannot happen; never render a guess
        return pieces, markers

    # Items, in token order: (as text, run position, apostrophes), or (False, ":" position, 0).
    def parse(self, context: int) -> tuple[list[tuple[bool, int, int]], tuple[bool, int, int] | None]:
        """A context from the head to its closing run (its markup returned) or the end."""
        ident = (self.index, self.offset, context)
        if ident in self.bad:
            raise _BadRoute(context)
        self.depth += 1
        if self.depth > MAX_STYLE_DEPTH:
            raise Decline("style depth")
        frame = [context]
        items: list[tuple[bool, int, int]] = []
        events = self.events
        while True:
            self.steps += 1
            if self.steps > MAX_STYLE_STEPS:
                raise Decline("style pairing steps")
            if self.index >= len(events):
                self.depth -= 1
                if frame[0] & _STYLE_CONTEXT:
                    self.bad.add(ident)
                    raise _BadRoute(frame[0])
                return items, None
            kind, at, _length = events[self.index]
            if kind == _RUN:
                closing = self.style(frame, items)
                if closing is not None:
                    self.depth -= 1
                    return items, closing
                continue
            if kind == _TERM:
                frame[0] |= _DL_TERM
            elif frame[0] & _DL_TERM:  # ":" or "\n" ends the term; a ":" is then a list marker
                frame[0] ^= _DL_TERM
                if kind == _COLON:
                    items.append((False, at, 0))
            self.index += 1

    def style(self, frame: list[int], items: list) -> tuple[bool, int, int] | None:
        """The run at the head (``_parse_style``); its closing markup if it closes this context."""
        _kind, at, length = self.events[self.index]
        ticks = length - self.offset
        self.index += 1
        self.offset = 0
        if ticks > 5:
            items.append((True, at, ticks - 5))
            ticks = 5
        elif ticks == 4:
            items.append((True, at, 1))
            ticks = 3
        context = frame[0]
        italics = context & _ITALICS
        if (italics and ticks in (2, 5)) or (context & _BOLD and ticks in (3, 5)):
            if ticks == 5:  # closes with '' (or '''); the rest is read again outside
                self.index -= 1
                self.offset = length - (3 if italics else 2)
                return (False, at, 2 if italics else 3)
            return (False, at, ticks)
        if ticks == 2:
            self.italics(items, at)
        elif ticks == 3:
            if self.bold(frame, items, at):
                return (False, at, 2)
        else:
            self.italics_and_bold(items, at)
        return None

    def _try(self, context: int):
        """``self.parse(context)``, or its :class:`_BadRoute` with the head put back where it was."""
        index, offset = self.index, self.offset
        try:
            return self.parse(context)
        except _BadRoute as route:
            self.index, self.offset = index, offset
            return route

    def italics(self, items: list, at: int) -> None:
        result = self._try(_ITALICS)
        if isinstance(result, _BadRoute):
            if not result.context & _PASS_AGAIN:
                items.append((True, at, 2))
                return
            result = self._try(_ITALICS | _SECOND_PASS)
            if isinstance(result, _BadRoute):
                items.append((True, at, 2))
                return
        _add_styled(items, at, 2, result)

    def bold(self, frame: list[int], items: list, at: int) -> bool:
        """``_parse_bold``: True when the run, failing as bold, closes the italics around it."""
        result = self._try(_BOLD)
        if isinstance(result, _BadRoute):
            if frame[0] & _SECOND_PASS:
                items.append((True, at, 1))
                return True
            if frame[0] & _ITALICS:
                frame[0] |= _PASS_AGAIN
                items.append((True, at, 3))
                return False
            items.append((True, at, 1))
            self.italics(items, at)
            return False
        _add_styled(items, at, 3, result)
        return False

    def italics_and_bold(self, items: list, at: int) -> None:
        result = self._try(_BOLD)
        if isinstance(result, _BadRoute):
            result = self._try(_ITALICS)
            if isinstance(result, _BadRoute):
                items.append((True, at, 5))
                return
            second = self._try(_BOLD)
            if isinstance(second, _BadRoute):
                items.append((True, at, 3))
                _add_styled(items, at, 2, result)
                return
            outer, inner = 3, 2  # <b><i>body</i>rest</b>
        else:
            second = self._try(_ITALICS)
            if isinstance(second, _BadRoute):
                items.append((True, at, 2))
                _add_styled(items, at, 3, result)
                return
            outer, inner = 2, 3  # <i><b>body</b>rest</i>
        items.append((False, at, outer))
        _add_styled(items, at, inner, result)
        rest, rest_closing = second
        items.extend(rest)
        items.append(rest_closing)


def _add_styled(items: list, at: int, ticks: int, parsed: tuple[list, tuple]) -> None:
    """A style opened by ``ticks`` apostrophes at ``at``, then its parsed (body, closing markup)."""
    body, closing = parsed
    items.append((False, at, ticks))
    items.extend(body)
    items.append(closing)


def _looks_like_url(text: str, pos: int) -> bool:
    """Whether mwparserfromhell would try an external link at ``pos`` ("//", "http://", "mailto:")."""
    match = _URL_START.match(text, pos)
    if match is None:
        return False
    return match.group(1) is None or is_scheme(match.group(1), bool(match.group(2)))


def _starts_line_markup(text: str, pos: int) -> bool:
    return text[pos] in "#*;:=-{ \t"


def _scheme_before(text: str, colon: int, limit: int) -> str:
    start = colon
    while start > limit and text[start - 1] in _ALNUM:
        start -= 1
    return text[start:colon]


def _scheme_run(text: str, pos: int, end: int) -> str:
    stop = pos
    while stop < end and text[stop] in _ALNUM:
        stop += 1
    return text[pos:stop]


def _is_boundary(char: str) -> bool:
    """A character that ends mwparserfromhell's backward scan for a URL scheme."""
    return not (char.isalnum() or char == "_")


@lru_cache(maxsize=256)
def _tag_pattern(name: str) -> re.Pattern[str]:
    return re.compile(rf"<(/?){name}(?=[\s/>])", re.IGNORECASE)


def _matching_close(text: str, name: str, pos: int, end: int) -> int | None:
    """Start of the ``</name>`` that closes a ``<name>`` opened before ``pos``."""
    depth = 1
    for match in _tag_pattern(name).finditer(text, pos, end):
        if match.group(1):
            depth -= 1
            if depth == 0:
                return match.start()
        elif not text.startswith("/>", text.find(">", match.end()) - 1):
            depth += 1
    return None


