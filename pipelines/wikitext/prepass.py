"""Fast pre-pass: cut the bulky non-prose parts of wikitext before parsing.

Templates, references and tables are most of an article's wikitext and most of
the parser's work; none of them is prose. One left-to-right scan with a
single regex finds, like MediaWiki's preprocessor:

* comments ``<!-- -->`` (an unterminated one runs to the end, as in MediaWiki);
* opaque extension tags, whose body is removed (``<ref>``, ``<math>``, ...) or,
  for ``<nowiki>``, kept as literal text (markup characters entity-escaped so
  the parser shows them verbatim). A tag with no end tag (``<ref>`` left open,
  ``<ref name=x`` with no ``>``) loses the rest of its line; entity-escaped
  refs (``&lt;ref&gt;...&lt;/ref&gt;``) are removed like real ones;
* templates, parser functions and parameters: balanced runs of ``{{``/``}}``,
  nesting tracked as a brace count (so ``{{{1}}}`` and ``{{a|{{b}}}}`` balance).
  Templates the registry knows (:mod:`pipelines.wikitext.templates`) are
  rendered to wikitext in place (``{{convert|5|km}}`` -> "5 km"); the rest
  are removed;
* tables ``{| ... |}``, nested, wherever MediaWiki starts one: "{|" after
  indentation (spaces, ``:``) once comments, templates and (leniently) HTML
  tags on the line are gone; also ``{{(!}}`` ... ``{{!)}}``. A "|}" with no
  table open is table debris and is removed;
* behaviour switches ``__TOC__`` etc.

Everything inside a template or table is opaque to the scan except comments
and extension tags (a ``}}`` inside ``<ref>`` or a comment does not close).
The ``[[`` in each removed region are counted by reason, so no link is lost
silently. Input that cannot be cut safely raises :class:`ExtractionError`
(nesting beyond ``max_depth``); unbalanced markup is repaired and counted.

Count keys (added to ``counts``): ``links_in_template`` (in removed templates
and in arguments a renderer did not use), ``links_in_ref``,
``links_in_table``, ``links_in_file`` (``<gallery>``, ``<imagemap>``),
``links_in_tag`` (other dropped tags), ``links_in_comment``,
``templates_rendered``, ``templates_omitted``, ``templates_dropped`` (every
template call, by outcome; per name in ``PrepassResult.template_names``),
``refs``, ``tables``, ``comments``, ``dropped_tags``, ``nowiki``, ``magic_words``,
``escaped_refs``, ``stray_table_close``,
``unbalanced_braces`` (a ``{{`` never closed, shown as nothing),
``unclosed_template`` (rest of the page dropped after too many of those),
``unclosed_table`` (closed at the end of the page), ``unclosed_tag`` (an
extension tag with no end tag: dropped to the end of its line; for
``<nowiki>`` only the tag is dropped),
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

import html
import re
from bisect import bisect_left
from dataclasses import dataclass, field

from pipelines.wikitext.errors import ExtractionError
from pipelines.wikitext.templates import (
    TABLE_CLOSE_NAMES,
    TABLE_OPEN_NAMES,
    TemplateCall,
    TemplateRegistry,
)
from pipelines.wikitext.textparts import contains

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

_OPAQUE_PATTERN = "|".join(sorted(_OPAQUE_TAGS, key=len, reverse=True))
_TOKEN = re.compile(
    r"<!--"
    r"|<(?P<tag>" + _OPAQUE_PATTERN + r")(?=[\s/>])"
    r"|\{\{+|\}\}+"
    r"|\{\||\|\}",
    re.IGNORECASE,
)
# Inside a template call: what nests ("{{", "[["), separates ("|", "="), or is opaque.
# A table inside an argument ("{|" starting a line) is kept whole: MediaWiki would
# split it at its "|" (hence {{!}}), but an argument holding a table is a table.
_ARGUMENT_TOKEN = re.compile(
    r"(?P<table>(?<=[\n|])[ \t:]*\{\||(?<=\n)[ \t]*\|\})"
    r"|\{\{|\}\}|\[\[|\]\]|\||=|<!--|<(?P<tag>" + _OPAQUE_PATTERN + r")(?=[\s/>])",
    re.IGNORECASE,
)
# What may precede "{|" / "|}" on its line in the wikitext: indentation, comments,
# tags and (simple) templates, which MediaWiki removes before it looks for tables.
_TABLE_LINE_PREFIX = re.compile(
    r"(?:[\s:]|<!--.*?-->|<[^<>\n]*>|\{\{(?:[^{}]|\{\{[^{}]*\}\})*\}\}|__[A-Z]+__)*")
# The same, in the pre-pass output (comments and templates already gone).
_OUTPUT_TABLE_PREFIX = re.compile(r"(?:[\s:\ufdd0]|<[^<>\n]*>|__[A-Z]+__)*")
_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.DOTALL)
# <ref> written with entities ("&lt;ref name=a&gt;"): shown as text by MediaWiki,
# but citation debris all the same; made real tags so they are removed.
_ESCAPED_REF = re.compile(r"&lt;(/?)(ref|references)((?:\s[^<>\n]*?)?/?)&gt;", re.IGNORECASE)
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
# "[[" and "]]"; the first branch takes a simple pair ("[[" + no bracket or line break + "]]")
# in one match: what scanning the two brackets one by one would pair up.
_LINK_BRACKET = re.compile(r"\[\[[^\[\]\n]*\]\]|\[\[|\]\]")
_BLANK_LINE = re.compile(r"\n[ \t]*\n")
MAX_TAG_DEPTH = 40  # mwparserfromhell gives up at 100 nested constructs of any kind
MAX_LINK_DEPTH = 4
_EXTERNAL_OPEN = re.compile(  # (the first lookahead: the schemes' first letters, a quick test)
    r"\[(?=[bfghimnstuwx/])(?=(?:https?|ftps?|irc|ircs|news|mailto|gopher|telnet|nntp|worldwind|svn|git|mms|"
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
    # "rendered/Convert", "omitted/Citation needed", "dropped/Infobox person" -> calls
    template_names: dict[str, int] = field(default_factory=dict)


def _bump(counts: dict[str, int], key: str, by: int = 1) -> None:
    if by:
        counts[key] = counts.get(key, 0) + by


@dataclass(slots=True)
class _Region:
    """A template, table or unclosed tag being skipped."""

    kind: str  # "template" | "table" | "line" (an unclosed extension tag: to its line's end)
    start: int
    opener_end: int  # end of the opening token (for repairing an unclosed "{{")
    mark: str = ""  # REMOVED_LABEL_MARK when the region is a link's whole label
    reason: str = ""  # for "line": the count key of the links it hides


@dataclass(slots=True)
class _Context:
    """What one page's scan (and its template arguments' scans) share."""

    counts: dict[str, int]
    names: dict[str, int]
    registry: TemplateRegistry
    title: str
    max_depth: int


def prepass(wikitext: str, *, max_depth: int = DEFAULT_MAX_DEPTH,
            registry: TemplateRegistry | None = None, title: str = "") -> PrepassResult:
    """Remove comments, opaque tags, tables and magic words; render or remove templates.

    ``registry`` decides which templates are rendered (default: the
    language-neutral registry); ``title`` is the page's, for ``{{PAGENAME}}``.
    """
    counts: dict[str, int] = {}
    names: dict[str, int] = {}
    text = wikitext
    if contains(text, "&#"):
        text = decode_surrogate_entities(text, counts)
    if contains(text, "&lt;"):
        text, escaped = _ESCAPED_REF.subn(_unescape_ref, text)
        _bump(counts, "escaped_refs", escaped)
    context = _Context(counts, names, registry or _default_registry(), title, max_depth)
    cleaned = _scan(text, context)
    if contains(cleaned, "__"):
        cleaned, replaced = _MAGIC_WORD.subn("", cleaned)
        _bump(counts, "magic_words", replaced)
    if "<" in cleaned:
        cleaned = balance_tags(cleaned, counts)
    if "[" in cleaned:
        cleaned = drop_unclosed_external_brackets(cleaned, counts)
        cleaned = balance_link_brackets(cleaned, counts)
    return PrepassResult(cleaned, counts, names)


_NUMERIC_ENTITY = re.compile(r"&#(?:[xX]([0-9a-fA-F]{1,6})|([0-9]{1,7}));")
# Every _NUMERIC_ENTITY in the surrogate range (D800-DFFF = 55296-57343) matches this (and a few others).
_SURROGATE_ENTITY = re.compile(r"&#(?:[xX]0*[dD][89a-fA-F][0-9a-fA-F]{2}|0*5[5-7][0-9]{3});")


def _surrogate_or_keep(match: re.Match[str]) -> str:
    value = int(match.group(1), 16) if match.group(1) else int(match.group(2))
    return chr(value) if 0xD800 <= value <= 0xDFFF else match.group(0)


def decode_surrogate_entities(text: str, counts: dict[str, int]) -> str:
    """``&#55357;&#56832;`` (UTF-16 halves written as entities) -> the character they encode.

    Decoded one by one, as the parser would, they leave lone surrogates that no UTF-8 writer accepts
    (one such page would fail its whole Parquet shard). A valid pair becomes its character; a lone
    half becomes U+FFFD, counted.
    """
    if _SURROGATE_ENTITY.search(text) is None:  # none in the range: nothing to decode
        return text
    decoded = _NUMERIC_ENTITY.sub(_surrogate_or_keep, text)
    if decoded == text:
        return text
    fixed = decoded.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")
    _bump(counts, "lone_surrogate_entities", fixed.count("\ufffd") - text.count("\ufffd"))
    return fixed


def _scan(text: str, context: _Context) -> str:
    """One left-to-right scan: what is left of ``text`` once regions are cut or rendered."""
    counts = context.counts
    max_depth = context.max_depth
    pieces: list[str] = []
    keep_from = 0
    pos = 0
    rescans = 0
    region: _Region | None = None
    braces = 0  # open "{" of templates in the current region
    tables = 0  # open tables in the current region
    inner_start = 0  # where the outermost template inside a table region began
    end_of_text = len(text)
    search = _TOKEN.search
    while True:
        match = search(text, pos)
        if region is not None and region.kind == "line" and braces == 0:
            line_end = text.find("\n", pos)
            if line_end < 0:
                line_end = end_of_text
            if match is None or match.start() >= line_end:
                _bump(counts, region.reason, text.count("[[", region.start, line_end))
                keep_from = pos = line_end
                region = None
                continue
        if match is None:
            if region is None:
                break
            if region.kind == "line":  # a "{{" left open inside an unclosed tag's line
                line_end = text.find("\n", pos)
                line_end = end_of_text if line_end < 0 else line_end
                _bump(counts, region.reason, text.count("[[", region.start, line_end))
                keep_from = pos = line_end
                region, braces = None, 0
                continue
            if region.kind == "table":
                _bump(counts, "unclosed_table")
                _close_table(text, region, end_of_text, counts)
                keep_from = pos = end_of_text
                region = None
                break
            # A "{{" never closed: MediaWiki shows it as text; we drop just the
            # braces and scan again from after them, a bounded number of times.
            if rescans >= MAX_BRACE_RESCANS:
                _bump(counts, "unclosed_template")
                _bump(counts, "templates_dropped")
                _bump(counts, "links_in_template", text.count("[[", region.start, end_of_text))
                keep_from = pos = end_of_text
                region = None
                break
            rescans += 1
            _bump(counts, "unbalanced_braces")
            keep_from = pos = region.opener_end
            region, braces, tables = None, 0, 0
            continue
        start, token = match.start(), match.group()
        first = token[0]
        if first == "<":
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
            name = match.group("tag").lower()
            tag_end = text.find(">", match.end())
            if tag_end < 0:  # "<ref" with no ">" after it
                if region is None and name != "nowiki":
                    pieces.append(text[keep_from:start])
                    region = _Region("line", start, match.end(), reason=DROPPED_TAG_REASONS[name])
                    _bump(counts, "unclosed_tag")
                pos = match.end()
                continue
            if text[tag_end - 1] == "/":
                body_start = body_end = end = tag_end + 1
            else:
                close = _CLOSERS[name].search(text, tag_end + 1)
                if close is None:
                    if region is None:
                        pieces.append(text[keep_from:start])
                        _bump(counts, "unclosed_tag")
                        if name == "nowiki":  # the tag alone is dropped; the rest is text
                            keep_from = tag_end + 1
                        else:  # a body with no end: dropped to the end of its line
                            region = _Region("line", start, tag_end + 1,
                                             reason=DROPPED_TAG_REASONS[name])
                    pos = tag_end + 1
                    continue
                body_start, body_end, end = tag_end + 1, close.start(), close.end()
            pos = end
            if region is not None:
                continue
            pieces.append(text[keep_from:start])
            pieces.append(_label_mark(text, start))
            keep_from = end
            if name == "nowiki":
                _bump(counts, "nowiki")
                pieces.append(text[body_start:body_end].translate(_NOWIKI_ESCAPES))
            else:
                reason = DROPPED_TAG_REASONS[name]
                _bump(counts, "refs" if reason == "links_in_ref" else "dropped_tags")
                _bump(counts, reason, text.count("[[", body_start, body_end))
            continue
        if first == "{" and token[1] == "{":
            if region is None:
                pieces.append(text[keep_from:start])
                region = _Region("template", start, match.end(), _label_mark(text, start))
            elif braces == 0 and region.kind == "table":
                inner_start = start
            braces += len(token)
            if braces > 2 * max_depth:
                raise ExtractionError("nesting_too_deep",
                                      f"templates nested deeper than {max_depth} levels")
            pos = match.end()
            continue
        if first == "}":
            if braces == 0:  # a stray "}}" is text
                pos = match.end()
                continue
            used = min(len(token), braces)
            braces -= used
            pos = start + used
            if braces or region is None:
                continue
            if region.kind == "template":
                name = _template_name(text, region.start, pos)
                if name in TABLE_OPEN_NAMES and _starts_table_line(pieces, text, keep_from, region.start):
                    region = _Region("table", region.start, pos)  # {{(!}} is "{|"
                    tables = 1
                    continue
                _finish_template(text, region, pos, context, pieces)
                keep_from = pos
                region = None
            elif region.kind == "table":
                name = _template_name(text, inner_start, pos)
                if name in TABLE_OPEN_NAMES:
                    tables += 1
                elif name in TABLE_CLOSE_NAMES:
                    tables -= 1
                    if tables == 0:
                        _close_table(text, region, pos, counts)
                        pieces.append("\n")
                        keep_from = pos
                        region = None
            continue
        if token == "{|":
            pos = match.end()
            if braces or (region is not None and region.kind == "line"):
                continue  # table syntax inside a template belongs to the template
            if region is None:
                if not _starts_table_line(pieces, text, keep_from, start):
                    continue  # "{|" inside a line of prose is text
                pieces.append(text[keep_from:start])
                region = _Region("table", start, match.end())
            elif not _TABLE_LINE_PREFIX.fullmatch(text, text.rfind("\n", 0, start) + 1, start):
                continue  # a nested table starts on its own line
            tables += 1
            if tables > max_depth:
                raise ExtractionError("nesting_too_deep",
                                      f"tables nested deeper than {max_depth} levels")
            continue
        # "|}"; its "}" may begin a "}}", so rescan from it unless it closes a table.
        pos = match.end() - 1
        if braces or (region is not None and region.kind != "table"):
            continue
        if not _TABLE_LINE_PREFIX.fullmatch(text, text.rfind("\n", 0, start) + 1, start):
            continue  # "|}" must start its line (after spaces, comments or tags)
        pos = match.end()
        if not tables:  # a "|}" with no table open: table debris, dropped
            pieces.append(text[keep_from:start])
            keep_from = pos
            _bump(counts, "stray_table_close")
            continue
        tables -= 1
        if tables == 0:
            _close_table(text, region, pos, counts)
            pieces.append("\n")  # a table is a block: keep paragraphs apart
            keep_from = pos
            region = None
    pieces.append(text[keep_from:])
    return "".join(pieces)


def _starts_table_line(pieces: list[str], text: str, keep_from: int, start: int) -> bool:
    """Whether what the output holds of this line before ``start`` lets a table start.

    MediaWiki starts a table at "{|" after indentation (spaces, ":") once
    comments and templates are gone; we also accept HTML tags there.
    """
    segment = text[keep_from:start]
    newline = segment.rfind("\n")
    if newline >= 0:
        return bool(_OUTPUT_TABLE_PREFIX.fullmatch(segment, newline + 1))
    parts = [segment]
    size = len(segment)
    for piece in reversed(pieces):
        newline = piece.rfind("\n")
        if newline >= 0:
            parts.append(piece[newline + 1:])
            break
        parts.append(piece)
        size += len(piece)
        if size > 1000:
            return False
    return bool(_OUTPUT_TABLE_PREFIX.fullmatch("".join(reversed(parts))))


def _template_name(text: str, start: int, end: int) -> str:
    """The raw name of the template ``text[start:end]`` (``{{name|...}}``), stripped."""
    bar = text.find("|", start + 2, end - 2)
    return text[start + 2:(bar if bar >= 0 else end - 2)].strip()


def _finish_template(text: str, region: _Region, end: int, context: _Context,
                     pieces: list[str]) -> None:
    """Render the template ``text[region.start:end]`` or remove it; count either way."""
    counts = context.counts
    opener = region.opener_end - region.start
    spec = None
    if opener == 2:
        body_start, body_end = region.start + 2, end - 2
        bar = text.find("|", body_start, body_end)
        raw_name = text[body_start:(bar if bar >= 0 else body_end)]
        if "<!--" in raw_name:
            raw_name = _COMMENT.sub("", raw_name)
        name, spec = context.registry.lookup(raw_name)
    else:
        name = "(parameter)" if opener == 3 else "(dynamic name)"
    if spec is None or spec.render is None:
        outcome = "templates_dropped" if spec is None else "templates_omitted"
        _bump(counts, "links_in_template", text.count("[[", region.start, end))
        pieces.append(region.mark)
    else:
        call = _template_call(text, body_start, body_end, name, spec.name.endswith(":"), context)
        rendered = spec.render(call)
        if rendered is None:  # the renderer cannot render this call
            outcome = "templates_dropped"
            _bump(counts, "links_in_template", text.count("[[", region.start, end))
            pieces.append(region.mark)
        else:
            outcome = "templates_rendered"
            hidden = sum(raw.count("[[") for raw in call.unused_raw())
            _bump(counts, "links_in_template", hidden)
            pieces.append(rendered or region.mark)
    _bump(counts, outcome)
    key = f"{outcome[10:]}/{name}"
    context.names[key] = context.names.get(key, 0) + 1


def _template_call(text: str, body_start: int, body_end: int, name: str, is_function: bool,
                   context: _Context) -> TemplateCall:
    """Split ``name|a|k=v`` into a :class:`TemplateCall` whose arguments clean lazily."""
    parts = _split_arguments(text, body_start, body_end)
    raw: dict[int | str, str] = {}
    position = 0
    head = parts[0][0]
    if is_function:  # {{formatnum:1234|R}}: the text after the colon is argument 1
        position = 1
        raw[1] = head[head.find(":") + 1:]
    for value, equals in parts[1:]:
        if equals >= 0:
            key = value[:equals].strip()
            raw[int(key) if key.isdigit() else key] = value[equals + 1:]
        else:
            position += 1
            raw[position] = value
    return TemplateCall(name, raw, position, lambda value: _scan(value, context), context.title)


def _split_arguments(text: str, start: int, end: int) -> list[tuple[str, int]]:
    """``text[start:end]`` split at its top-level "|": (part, index of its first top-level "=")."""
    parts: list[tuple[str, int]] = []
    braces = links = tables = 0
    last = pos = start
    equals = -1
    search = _ARGUMENT_TOKEN.search
    while True:
        match = search(text, pos, end)
        if match is None:
            break
        token = match.group()
        pos = match.end()
        if token == "|":
            if not braces and not links and not tables:
                parts.append((text[last:match.start()], equals))
                last, equals = pos, -1
        elif token == "=":
            if not braces and not links and not tables and equals < 0:
                equals = match.start() - last
        elif match.group("table"):
            if token.endswith("{|"):
                tables += 1
            elif tables:
                tables -= 1
        elif token == "{{":
            braces += 1
        elif token == "}}":
            braces = max(braces - 1, 0)
        elif token == "[[":
            links += 1
        elif token == "]]":
            links = max(links - 1, 0)
        elif token == "<!--":
            close = text.find("-->", pos, end)
            pos = end if close < 0 else close + 3
        else:  # an extension tag: its body is opaque
            tag_end = text.find(">", pos, end)
            if tag_end < 0:
                continue
            pos = tag_end + 1
            if text[tag_end - 1] != "/":
                close = _CLOSERS[match.group("tag").lower()].search(text, pos, end)
                if close is not None:
                    pos = close.end()
    parts.append((text[last:end], equals))
    return parts


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
    blank_lines: list[int] | None = None  # found when first needed
    stack: list[int] = []
    edits: list[tuple[int, int, str]] = []
    for match in _LINK_BRACKET.finditer(text):
        start, end = match.span()
        if end - start > 2:  # a whole "[[...]]": a pair with no line break inside
            if len(stack) >= max_depth:
                edits.append((start, start + 2, ""))
                edits.append((end - 2, end, ""))
                _bump(counts, "stray_markup")
            continue
        if text[start] == "[":
            stack.append(start)
            continue
        if not stack:
            continue  # a stray "]]" is removed (and counted) by the renderer
        opener, closer = stack.pop(), start
        if blank_lines is None:
            blank_lines = [blank.start() for blank in _BLANK_LINE.finditer(text)]
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
    if start and not text[start - 1].isspace():  # the common case, without slicing
        return REMOVED_LABEL_MARK if text[start - 1] == "|" else ""
    before = text[max(start - 8, 0):start].rstrip()
    return REMOVED_LABEL_MARK if before.endswith("|") else ""


def _close_table(text: str, region: _Region, end: int, counts: dict[str, int]) -> None:
    _bump(counts, "tables")
    _bump(counts, "links_in_table", text.count("[[", region.start, end))


def _unescape_ref(match: re.Match[str]) -> str:
    return f"<{match.group(1)}{match.group(2)}{html.unescape(match.group(3))}>"


_default_registry_instance: TemplateRegistry | None = None


def _default_registry() -> TemplateRegistry:
    global _default_registry_instance
    if _default_registry_instance is None:
        _default_registry_instance = TemplateRegistry()
    return _default_registry_instance
