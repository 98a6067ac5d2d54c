"""Fast pre-pass: cut the bulky non-prose parts of wikitext before parsing.

Templates, references and tables are most of an article's wikitext and most of
mwparserfromhell's work; none of them is prose. One left-to-right scan with a
single regex finds, like MediaWiki's preprocessor:

* comments ``<!-- -->`` (an unterminated one runs to the end, as in MediaWiki);
* opaque extension tags, whose body is removed (``<ref>``, ``<math>``, ...) or,
  for ``<nowiki>``, kept as literal text (markup characters entity-escaped so
  the parser shows them verbatim);
* templates, parser functions and parameters: balanced runs of ``{{``/``}}``,
  nesting tracked as a brace count (so ``{{{1}}}`` and ``{{a|{{b}}}}`` balance);
* tables ``{| ... |}`` opened/closed at the start of a line, nested;
* behaviour switches ``__TOC__`` etc.

Everything inside a template or table is opaque to the scan except comments
and extension tags (a ``}}`` inside ``<ref>`` or a comment does not close).
The ``[[`` in each removed region are counted by reason, so no link is lost
silently. Input that cannot be cut safely raises :class:`ExtractionError`
(nesting beyond ``max_depth``); unbalanced markup is repaired and counted.

Count keys (added to ``counts``): ``links_in_template``, ``links_in_ref``,
``links_in_table``, ``links_in_file`` (``<gallery>``, ``<imagemap>``),
``links_in_tag`` (other dropped tags), ``links_in_comment``, ``templates``,
``refs``, ``tables``, ``comments``, ``dropped_tags``, ``nowiki``, ``magic_words``,
``unbalanced_braces`` (a ``{{`` never closed, shown as nothing),
``unclosed_template`` (rest of the page dropped after too many of those),
``unclosed_table`` (closed at the end of the page), ``unclosed_tag`` (an
extension tag with no end tag: the opening tag is dropped),
``unbalanced_tags`` (HTML tags without a partner or nested deeper than
``MAX_TAG_DEPTH``, dropped), ``broken_tags`` (``<`` of an unfinished or
unknown tag, escaped so it shows as text), ``stray_markup`` (``[[`` never
closed, or links nested deeper than ``MAX_LINK_DEPTH``, dropped),
``links_in_broken_link`` (a ``[[`` pair spanning a blank line: see
:func:`balance_link_brackets`),
``unclosed_external_link`` (``[http://`` with no ``]`` on its line: the
``[`` is dropped). The last two keep the parser linear on damaged pages.
"""
from __future__ import annotations

import re
from bisect import bisect_left
from dataclasses import dataclass, field

from pipelines.wikitext.errors import ExtractionError

DEFAULT_MAX_DEPTH = 64
# Left where a removed template/ref/tag was a link's whole label ("[[A|{{x}}]]"),
# so the renderer sees a label that rendered to nothing, not a pipe trick
# ("[[A|]]"). A Unicode noncharacter: never in real text; the renderer drops it.
REMOVED_LABEL_MARK = "\ufdd0"
MAX_BRACE_RESCANS = 32  # unclosed "{{" repaired one at a time, this many times at most

# Extension tags whose content is not prose, with the reason code for the
# links they hide. <pre> and <source>/<syntaxhighlight> are code or ASCII art;
# <math>/<chem>/<score>/<timeline>/<graph> render as images.
DROPPED_TAG_REASONS: dict[str, str] = {
    "ref": "links_in_ref", "references": "links_in_ref",
    "gallery": "links_in_file", "imagemap": "links_in_file",
    **{name: "links_in_tag" for name in (
        "math", "chem", "ce", "timeline", "score", "syntaxhighlight", "source", "pre",
        "graph", "mapframe", "maplink", "templatedata", "hiero", "inputbox",
        "categorytree", "charinsert", "includeonly", "templatestyles", "section",
        "indicator", "poll", "dynamicpagelist", "rss", "phonos", "chart")},
}
_OPAQUE_TAGS = (*DROPPED_TAG_REASONS, "nowiki")

_TOKEN = re.compile(
    r"<!--"
    r"|<(?P<tag>" + "|".join(sorted(_OPAQUE_TAGS, key=len, reverse=True)) + r")(?=[\s/>])"
    r"|\{\{+|\}\}+"
    r"|^[ \t:]*\{\|"
    r"|^[ \t]*\|\}",
    re.IGNORECASE | re.MULTILINE,
)
_CLOSERS = {name: re.compile(rf"</{name}\s*>", re.IGNORECASE) for name in _OPAQUE_TAGS}
# HTML tags MediaWiki allows in wikitext (others show as text), and the void ones.
_HTML_TAG_NAMES = (
    "abbr b bdi bdo big blockquote caption center cite code data dd del dfn div dl dt em "
    "font h1 h2 h3 h4 h5 h6 i ins kbd li mark noinclude ol onlyinclude p poem q rb rp rt "
    "rtc ruby s samp small span strike strong sub sup table td th time tr tt u ul var"
).split()
_VOID_TAGS = frozenset(("br", "hr", "wbr"))
_HTML_TAG_NAMES_SET = frozenset((*_HTML_TAG_NAMES, *_VOID_TAGS))
_TAG_START = re.compile(r"<(/?)([A-Za-z][A-Za-z0-9]*)(?=[\s/>]|$)")
_TAG_REST = re.compile(r"[^<>]*?(/?)>")
_LINK_BRACKET = re.compile(r"\[\[|\]\]")
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
MAX_TAG_DEPTH = 40  # mwparserfromhell gives up at 100 nested constructs of any kind
MAX_LINK_DEPTH = 4
_EXTERNAL_OPEN = re.compile(
    r"\[(?=(?:https?|ftps?|irc|ircs|news|mailto|gopher|telnet|nntp|worldwind|svn|git|mms|"
    r"sftp|ssh|tel|urn|xmpp|geo|bitcoin|magnet|sips?|sms|matrix):|//)",
    re.IGNORECASE,
)
_MAGIC_WORD = re.compile(r"__(?:[^\W_]+_)*[^\W_]+__")
# Characters that would be markup if a <nowiki> body were parsed again.
_NOWIKI_ESCAPES = str.maketrans({
    "[": "&#91;", "]": "&#93;", "{": "&#123;", "}": "&#125;", "<": "&lt;", ">": "&gt;",
    "'": "&#39;", "|": "&#124;", "=": "&#61;", ":": "&#58;", "_": "&#95;", "*": "&#42;",
    "#": "&#35;", ";": "&#59;", "&": "&amp;", "~": "&#126;", "-": "&#45;",
})


@dataclass(slots=True)
class PrepassResult:
    """The wikitext with non-prose parts cut out, and what was cut."""

    text: str
    counts: dict[str, int] = field(default_factory=dict)


def _bump(counts: dict[str, int], key: str, by: int = 1) -> None:
    if by:
        counts[key] = counts.get(key, 0) + by


@dataclass(slots=True)
class _Region:
    """A template or table being skipped."""

    kind: str  # "template" | "table"
    start: int
    opener_end: int  # end of the opening token (for repairing an unclosed "{{")


def prepass(wikitext: str, *, max_depth: int = DEFAULT_MAX_DEPTH) -> PrepassResult:
    """Remove comments, opaque tags, templates, tables and magic words; count hidden links."""
    counts: dict[str, int] = {}
    text = wikitext
    pieces: list[str] = []
    keep_from = 0
    pos = 0
    rescans = 0
    region: _Region | None = None
    braces = 0  # open "{" of templates in the current region
    tables = 0  # open tables in the current region
    end_of_text = len(text)
    while True:
        match = _TOKEN.search(text, pos)
        if match is None:
            if region is None:
                break
            if region.kind == "table":
                _bump(counts, "unclosed_table")
                _close_region(text, region, end_of_text, counts)
                keep_from = pos = end_of_text
                region = None
                break
            # A "{{" never closed: MediaWiki shows it as text; we drop just the
            # braces and scan again from after them, a bounded number of times.
            if rescans >= MAX_BRACE_RESCANS:
                _bump(counts, "unclosed_template")
                _close_region(text, region, end_of_text, counts)
                keep_from = pos = end_of_text
                region = None
                break
            rescans += 1
            _bump(counts, "unbalanced_braces")
            keep_from = pos = region.opener_end
            region, braces, tables = None, 0, 0
            continue
        start, token = match.start(), match.group()
        if token == "<!--":
            close = text.find("-->", match.end())
            end = end_of_text if close < 0 else close + 3
            if region is None:
                pieces.append(text[keep_from:start])
                keep_from = end
                _bump(counts, "comments")
                _bump(counts, "links_in_comment", text.count("[[", start, end))
            pos = end
            continue
        tag = match.group("tag")
        if tag is not None:
            pos, keep_from = _skip_opaque_tag(text, match, tag.lower(), region is None,
                                              pieces, keep_from, counts)
            continue
        if token[0] == "{" and token[1] == "{":
            if region is None:
                pieces.append(text[keep_from:start])
                pieces.append(_label_mark(text, start))
                region = _Region("template", start, match.end())
            braces += len(token)
            if braces > 2 * max_depth:
                raise ExtractionError("nesting_too_deep",
                                      f"templates nested deeper than {max_depth} levels")
            pos = match.end()
            continue
        if token[0] == "}":
            if braces == 0:  # a stray "}}" is text
                pos = match.end()
                continue
            used = min(len(token), braces)
            braces -= used
            pos = start + used
            if braces == 0 and region is not None and region.kind == "template":
                _close_region(text, region, pos, counts)
                keep_from = pos
                region = None
            continue
        if token.endswith("{|"):
            if braces:  # table syntax inside a template belongs to the template
                pos = match.end()
                continue
            if region is None:
                pieces.append(text[keep_from:start])
                region = _Region("table", start, match.end())
            tables += 1
            if tables > max_depth:
                raise ExtractionError("nesting_too_deep",
                                      f"tables nested deeper than {max_depth} levels")
            pos = match.end()
            continue
        # "|}" at the start of a line; its "}" may begin a "}}", so rescan from it.
        pos = match.end() - 1
        if braces or not tables:
            continue
        tables -= 1
        pos = match.end()
        if tables == 0 and region is not None:
            _close_region(text, region, pos, counts)
            pieces.append("\n")  # a table is a block: keep paragraphs apart
            keep_from = pos
            region = None
    pieces.append(text[keep_from:])
    cleaned = "".join(pieces)
    if "__" in cleaned:
        cleaned, replaced = _MAGIC_WORD.subn("", cleaned)
        _bump(counts, "magic_words", replaced)
    if "<" in cleaned:
        cleaned = balance_tags(cleaned, counts)
    if "[" in cleaned:
        cleaned = drop_unclosed_external_brackets(cleaned, counts)
        cleaned = balance_link_brackets(cleaned, counts)
    return PrepassResult(cleaned, counts)


def balance_tags(text: str, counts: dict[str, int], max_depth: int = MAX_TAG_DEPTH) -> str:
    """Leave the parser only complete, balanced HTML tags of names MediaWiki knows.

    * ``<name`` with no ``>`` before the next ``<`` (``<b x="...``), and tags of
      unknown names (``<foo>``, which MediaWiki shows as text), get their
      ``<`` escaped to ``&lt;``: shown as text, as in MediaWiki.
    * known tags without a partner (``<b>`` never closed, stray ``</i>``) and
      tags nested deeper than ``max_depth`` are removed (they render nothing).

    Left in, each of these makes mwparserfromhell scan to the end and backtrack:
    quadratic time (3,000 ``<b x="`` took 10 s, 20,000 ``<b>`` minutes).
    Linear: one regex pass and a stack per tag name.
    """
    edits: list[tuple[int, int, str]] = []  # start, end, replacement
    stacks: dict[str, list[int]] = {}  # name -> indices into edits-candidates
    candidates: list[tuple[int, int]] = []
    dropped: set[int] = set()
    depth = 0
    for match in _TAG_START.finditer(text):
        start = match.start()
        rest = _TAG_REST.match(text, match.end())
        name = match.group(2).lower()
        if rest is None or name not in _HTML_TAG_NAMES_SET:
            if name not in _VOID_TAGS or rest is None:
                edits.append((start, start + 1, "&lt;"))
                _bump(counts, "broken_tags")
            continue
        if name in _VOID_TAGS or rest.group(1):
            continue
        index = len(candidates)
        candidates.append((start, rest.end()))
        stack = stacks.setdefault(name, [])
        if not match.group(1):
            stack.append(index)
            depth += 1
            if depth > max_depth:
                dropped.add(index)
        elif stack:
            opener = stack.pop()
            depth -= 1
            if opener in dropped:
                dropped.add(index)
        else:
            dropped.add(index)
    for stack in stacks.values():
        dropped.update(stack)
    if dropped:
        _bump(counts, "unbalanced_tags", len(dropped))
        edits.extend((*candidates[index], "") for index in dropped)
    return _apply_edits(text, edits)


def balance_link_brackets(text: str, counts: dict[str, int],
                          max_depth: int = MAX_LINK_DEPTH) -> str:
    """Repair ``[[`` ... ``]]`` pairing before parsing.

    * an ``[[`` that never closes is removed (MediaWiki shows it as text; the
      parser would retry each one to the end: 20,000 ``[[a|`` took 28 s);
    * a pair spanning a blank line is a broken link (typically a file whose
      caption lost its ``]]``, which would swallow the following paragraphs):
      the opener and the rest of its line are removed, their links counted as
      ``links_in_broken_link``, and the far ``]]`` dropped;
    * links nested deeper than ``max_depth`` lose their brackets.
    """
    blank_lines = [match.start() for match in _BLANK_LINE.finditer(text)]
    stack: list[int] = []
    edits: list[tuple[int, int, str]] = []
    for match in _LINK_BRACKET.finditer(text):
        if match.group() == "[[":
            stack.append(match.start())
            continue
        if not stack:
            continue  # a stray "]]" is removed (and counted) by the renderer
        opener, closer = stack.pop(), match.start()
        next_blank = bisect_left(blank_lines, opener)
        if next_blank < len(blank_lines) and blank_lines[next_blank] < closer:
            line_end = text.find("\n", opener)
            edits.append((opener, line_end, ""))
            edits.append((closer, closer + 2, ""))
            _bump(counts, "links_in_broken_link", text.count("[[", opener, line_end))
        elif len(stack) >= max_depth:
            edits.append((opener, opener + 2, ""))
            edits.append((closer, closer + 2, ""))
            _bump(counts, "stray_markup")
    edits.extend((start, start + 2, "") for start in stack)
    _bump(counts, "stray_markup", len(stack))
    return _apply_edits(text, edits)


def _apply_edits(text: str, edits: list[tuple[int, int, str]]) -> str:
    """Apply non-overlapping (start, end, replacement) edits."""
    if not edits:
        return text
    edits.sort()
    pieces: list[str] = []
    last = 0
    for start, end, replacement in edits:
        if start < last:  # inside a span already removed
            continue
        pieces.append(text[last:start])
        pieces.append(replacement)
        last = end
    pieces.append(text[last:])
    return "".join(pieces)


def drop_unclosed_external_brackets(text: str, counts: dict[str, int]) -> str:
    """Drop the ``[`` of ``[http://...`` links with no ``]`` on their line.

    MediaWiki shows those as "[" + bare URL; the parser would try each one to
    the end of the line (quadratic on long damaged lines).
    """
    drop: list[tuple[int, int, str]] = []
    next_close = next_newline = -1
    for match in _EXTERNAL_OPEN.finditer(text):
        start = match.start()
        if next_close < start:
            next_close = text.find("]", start)
            if next_close < 0:
                next_close = len(text) + 1
        if next_newline < start:
            next_newline = text.find("\n", start)
            if next_newline < 0:
                next_newline = len(text)
        if next_close > next_newline:
            drop.append((start, start + 1, ""))
    _bump(counts, "unclosed_external_link", len(drop))
    return _apply_edits(text, drop)


def _label_mark(text: str, start: int) -> str:
    """The mark when a removal starts right after a "|" (a link label, maybe)."""
    before = text[max(start - 8, 0):start].rstrip()
    return REMOVED_LABEL_MARK if before.endswith("|") else ""


def _close_region(text: str, region: _Region, end: int, counts: dict[str, int]) -> None:
    reason = "links_in_template" if region.kind == "template" else "links_in_table"
    _bump(counts, "templates" if region.kind == "template" else "tables")
    _bump(counts, reason, text.count("[[", region.start, end))


def _skip_opaque_tag(text: str, match: re.Match[str], name: str, at_top_level: bool,
                     pieces: list[str], keep_from: int,
                     counts: dict[str, int]) -> tuple[int, int]:
    """Skip one extension tag; return the new scan position and ``keep_from``."""
    start = match.start()
    tag_end = text.find(">", match.end())
    if tag_end < 0:  # "<ref" with no ">": not a tag
        return match.end(), keep_from
    if text[tag_end - 1] == "/":
        body_start = body_end = end = tag_end + 1
    else:
        close = _CLOSERS[name].search(text, tag_end + 1)
        if close is None:
            if at_top_level:
                pieces.append(text[keep_from:start])
                _bump(counts, "unclosed_tag")
                return tag_end + 1, tag_end + 1
            return tag_end + 1, keep_from
        body_start, body_end, end = tag_end + 1, close.start(), close.end()
    if not at_top_level:
        return end, keep_from
    pieces.append(text[keep_from:start])
    pieces.append(_label_mark(text, start))
    if name == "nowiki":
        _bump(counts, "nowiki")
        pieces.append(text[body_start:body_end].translate(_NOWIKI_ESCAPES))
    else:
        reason = DROPPED_TAG_REASONS[name]
        _bump(counts, "refs" if reason == "links_in_ref" else "dropped_tags")
        _bump(counts, reason, text.count("[[", body_start, body_end))
    return end, end
