"""Wikitext -> plain text with exact hyperlink mentions.

``extract_article(wikitext, site)`` returns the article's readable text and one
:class:`LinkMention` per link to an article, with ``text[start:end] ==
surface`` guaranteed by construction (offsets are taken while the text is
built, and re-mapped through the final whitespace tidy).

How: :mod:`pipelines.wikitext.prepass` first cuts references, tables,
comments and other non-prose (most of the bytes) and renders or removes
templates (:mod:`pipelines.wikitext.templates`). What is left is rendered by
:mod:`pipelines.wikitext.fastrender` in one scan, or, where that fast path
cannot promise the same result, parsed by mwparserfromhell (the reference for
links, HTML tags, external links, headings, bold/italic and entities) and
rendered by a small tree walk; both share the link logic below. See
docs/extraction.md.

Rendering decisions
-------------------
* Kept: prose, section headings (own line, no ``=``), list items (markers
  removed), the inner text of formatting/HTML tags (``<b>``, ``<span>``,
  ``<sup>``, ``<poem>``...), labels of ``[http://x label]`` links, the visible
  text of links that are not mentions (``[[:Category:X|cats]]``, ``[[wikt:x]]``).
* Rendered: inline templates the registry knows (``{{convert|5|km}}`` ->
  "5 km", ``{{lang|fr|[[Paris]]}}`` -> "Paris" with its mention).
* Dropped: other templates, parser functions, refs, tables (wiki and HTML),
  comments, ``<math>``, ``<chem>``, ``<gallery>``, ``<timeline>``, ``<score>``,
  ``<syntaxhighlight>``/``<source>``/``<pre>`` (code or pictures, not prose),
  files/images with their captions, categories, interlanguage links, magic
  words, bare URLs and unlabelled ``[http://x]`` links.
* A link's surface is what the reader sees: the label, or else the target as
  written (leading colon removed, percent-escapes decoded; ``[[foo_bar]]``
  shows "foo_bar", as MediaWiki shows it), plus its link trail
  (``[[bus]]es`` -> "buses": following letters that are not upper-case, not in
  a script written without spaces (Han, Kana, Thai...)). ``[[A (b)|]]`` uses
  the pipe trick ("A"). Whitespace inside a surface is folded to one space.

Count keys (``Extraction.counts``), stable snake_case:
``links_kept`` (mentions), ``self_links`` (kept mentions of the page itself),
``links_in_template``, ``links_in_ref``, ``links_in_table``, ``links_in_file``
(captions of files and galleries), ``links_in_tag`` (inside other dropped
tags), ``interlanguage``, ``interwiki``, ``other_namespace`` (incl. ``[[:File:``
and ``[[:Category:`` links), ``section_link`` (``[[#Section]]``),
``invalid_target``, ``empty_surface`` (label renders to nothing),
``nested_link`` (a link inside another link's label, shown as text),
``files``, ``categories``, ``external_links``, ``stray_markup`` (an ``[[``
that formed no link, removed from the text), ``stray_brackets`` (all
unmatched ``[[``/``]]``/``{{``/``}}`` removed from the text), ``dropped_in_tidy`` (a mention
whose text vanished when whitespace was tidied; should stay 0), plus the
pre-pass's counts (see :mod:`pipelines.wikitext.prepass`).
"""
from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field
from itertools import accumulate, chain
from typing import Callable

import mwparserfromhell
from mwparserfromhell.nodes import (
    Argument,
    Comment,
    ExternalLink,
    Heading,
    HTMLEntity,
    Node,
    Tag,
    Template,
    Text,
    Wikilink,
)
from mwparserfromhell.wikicode import Wikicode

from pipelines.records import LinkMention, SiteInfo
from pipelines.wikitext.errors import ExtractionError
from pipelines.wikitext.fastrender import Decline, render_fast
from pipelines.wikitext.namespaces import NS_CATEGORY, NS_FILE, NamespaceTable, namespace_table
from pipelines.wikitext.prepass import (
    DEFAULT_MAX_DEPTH,
    DROPPED_TAG_REASONS,
    REMOVED_LABEL_MARK,
    prepass,
)
from pipelines.wikitext.templates import registry_for
from pipelines.wikitext.textparts import BLOCK_TAGS as _BLOCK_TAGS
from pipelines.wikitext.textparts import DROPPED_HTML_TAGS as _DROPPED_HTML_TAGS
from pipelines.wikitext.textparts import Builder as _Builder
from pipelines.wikitext.textparts import unicode_trail_length
from pipelines.wikitext.titles import (
    ARTICLE,
    INTERLANGUAGE,
    INTERWIKI,
    NAMESPACE,
    SECTION,
    LinkTarget,
    decode_title_escapes,
    link_target_cache,
    parse_link_target_with,
)

DEFAULT_MAX_INPUT_CHARS = 8_000_000  # the largest enwiki articles are ~1.5M

_APOSTROPHE_RUN = re.compile(r"''+")  # (one literal first: found quickly)
_STRAY_MARKUP = re.compile(r"\[\[|\]\]|\{\{|\}\}")
_PARENTHETICAL = re.compile(r"\s*[(\uff08][^()\uff08\uff09]*[)\uff09]\s*$")
# Tidy pass 1: empty parentheses left by removed templates, spaces before , . )
_TIDY_PUNCT = re.compile(r"[(\uff08][^\S\n]*[,;:]?[^\S\n]*[)\uff09]|(?<=\()[^\S\n]+|[^\S\n]+(?=[,.)])")
# Tidy pass 2: whitespace runs (2+ chars, or any whitespace that is not " ").
_TIDY_SPACE = re.compile(r"\s{2,}|[^\S ]")


@dataclass(frozen=True, slots=True)
class ExtractConfig:
    """Limits and switches of :func:`extract_article`."""

    max_input_chars: int = DEFAULT_MAX_INPUT_CHARS
    max_nesting_depth: int = DEFAULT_MAX_DEPTH
    # Regex matched at the start of the text after a link to take its trail
    # (e.g. "[a-z]+" for MediaWiki's English rule); None: the Unicode rule.
    link_trail: str | None = None
    keep_headings: bool = True
    # Render with pipelines.wikitext.fastrender where it is sure; mwparserfromhell otherwise.
    fast_path: bool = True


@dataclass(slots=True)
class Extraction:
    """Plain text of an article, its link mentions and what was skipped, by reason."""

    text: str
    links: list[LinkMention] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)
    # Template calls by outcome and name: "rendered/Convert", "dropped/Infobox" -> calls.
    template_names: dict[str, int] = field(default_factory=dict)
    # "fast"; "mwparserfromhell" where the fast path declined; "fast+mwparserfromhell"
    # where it declined after a clean line start and the parser rendered the rest.
    parser: str = "fast"


def extract_article(wikitext: str, site: SiteInfo, *, title: str = "",
                    config: ExtractConfig | None = None) -> Extraction:
    """Render ``wikitext`` to plain text and its article-link mentions.

    Raises :class:`ExtractionError` when the text is beyond the configured
    limits or the parser fails; the message names the page and the reason.
    """
    config = config or ExtractConfig()
    if len(wikitext) > config.max_input_chars:
        raise ExtractionError("input_too_large", f"{title!r}: {len(wikitext)} chars "
                              f"> limit {config.max_input_chars}")
    try:
        cleaned = prepass(wikitext, max_depth=config.max_nesting_depth,
                          registry=registry_for(site), title=title)
    except ExtractionError as err:
        raise ExtractionError(err.reason, f"{title!r}: {err.detail}") from err
    table = namespace_table(site)
    renderer = _Renderer(table, config, dict(cleaned.counts), title)
    out = _Builder()
    resume: int | None = 0  # where mwparserfromhell takes over (None: nowhere)
    if config.fast_path:
        try:
            resume = render_fast(cleaned.text, renderer, out)
        except Decline:
            renderer = _Renderer(table, config, cleaned.counts, title)
            out = _Builder()
        except RecursionError as err:
            raise ExtractionError("recursion_error", f"{title!r}: markup nested too deeply") from err
        except Exception as err:  # a shape the fast path does not expect: fail this page only
            raise ExtractionError("render_error", f"{title!r}: {type(err).__name__}: {err}") from err
    if resume is None:
        parser = "fast"
    else:  # the whole page, or the rest of it from a line start the fast path left clean
        parser = "fast+mwparserfromhell" if resume else "mwparserfromhell"
        try:
            code = mwparserfromhell.parse(cleaned.text[resume:] if resume else cleaned.text)
        except RecursionError as err:
            raise ExtractionError("recursion_error", f"{title!r}: markup nested too deeply") from err
        except Exception as err:  # e.g. "C tokenizer exited with non-empty token stack"
            raise ExtractionError("parser_error", f"{title!r}: {type(err).__name__}: {err}") from err
        _render_tree(renderer, code, out, title)
    text, links = _tidy("".join(out.parts), out.spans, renderer.counts)
    renderer.counts["links_kept"] = len(links)
    return Extraction(text, links, renderer.counts, cleaned.template_names, parser)


def _render_tree(renderer: "_Renderer", code: Wikicode, out: "_Builder", title: str) -> None:
    try:
        renderer.render(code, out)
    except RecursionError as err:
        raise ExtractionError("recursion_error", f"{title!r}: markup nested too deeply") from err
    except Exception as err:  # a tree shape the walker does not expect: fail this page only
        raise ExtractionError("render_error", f"{title!r}: {type(err).__name__}: {err}") from err


class _Renderer:
    """Walks mwparserfromhell's tree, writing text into a :class:`_Builder`."""

    __slots__ = ("table", "config", "counts", "title", "trail_length", "self_title", "targets")

    def __init__(self, table: NamespaceTable, config: ExtractConfig,
                 counts: dict[str, int], title: str) -> None:
        self.table = table
        self.config = config
        self.counts = counts
        self.title = title
        self.self_title = parse_link_target_with(title, table).title if title else ""
        self.trail_length = _trail_rule(config.link_trail)
        self.targets = link_target_cache(table)

    def bump(self, key: str, by: int = 1) -> None:
        if by:
            self.counts[key] = self.counts.get(key, 0) + by

    # -- tree walk ---------------------------------------------------------
    def render(self, code: Wikicode, out: _Builder, in_label: bool = False) -> None:
        nodes = code.nodes
        consumed = 0  # leading chars of the next Text already taken as a link trail
        for index, node in enumerate(nodes):
            kind = type(node)
            if kind is Text:
                value = node.value[consumed:] if consumed else node.value
                consumed = 0
                out.emit(self.clean_text(value))
            elif kind is Wikilink:
                following = nodes[index + 1] if index + 1 < len(nodes) else None
                trail_source = following.value if type(following) is Text else ""
                consumed = self.render_link(node, trail_source, out, in_label)
            elif kind is Tag:
                self.render_tag(node, out, in_label)
            elif kind is HTMLEntity:
                out.emit(node.normalize())
            elif kind is ExternalLink:
                self.bump("external_links")
                if node.brackets and node.title is not None:
                    self.render(node.title, out, in_label)
            elif kind is Heading:
                if self.config.keep_headings:
                    out.emit("\n")
                    self.render(node.title, out, in_label)
                    out.emit("\n")
            elif kind is Template or kind is Argument:
                # The pre-pass removes these; kept as a safety net.
                self.bump("links_in_template", _count_links(node))
            elif kind is Comment:
                continue

    def clean_text(self, value: str) -> str:
        if REMOVED_LABEL_MARK in value:
            value = value.replace(REMOVED_LABEL_MARK, "")
        # (One-character tests first: found with memchr, ~10x faster than a two-character search.)
        if "'" in value and "''" in value:
            value = _APOSTROPHE_RUN.sub(_unbalanced_quotes, value)
        if ("[" in value or "]" in value or "{" in value or "}" in value) \
                and ("[[" in value or "]]" in value or "{{" in value or "}}" in value):
            self.bump("stray_markup", value.count("[["))  # a link that never formed
            value, removed = _STRAY_MARKUP.subn("", value)
            self.bump("stray_brackets", removed)
        return value

    def render_tag(self, node: Tag, out: _Builder, in_label: bool) -> None:
        name = str(node.tag).strip().lower()
        markup = node.wiki_markup
        if markup:
            if name == "table":
                self.bump("links_in_table", _count_links(node))
                out.emit("\n")
            elif name in ("b", "i") and node.contents is not None:
                self.render(node.contents, out, in_label)
            elif name == "hr":
                out.emit("\n")
            return  # list markers: nothing
        reason = DROPPED_TAG_REASONS.get(name) or _DROPPED_HTML_TAGS.get(name)
        if reason:
            self.bump(reason, _count_links(node))
            if name == "table":
                out.emit("\n")
            return
        block = name in _BLOCK_TAGS
        if block:
            out.emit("\n")
        if not node.self_closing and node.contents is not None:
            self.render(node.contents, out, in_label)
        if block:
            out.emit("\n")

    # -- links -------------------------------------------------------------
    def render_link(self, node: Wikilink, trail_source: str, out: _Builder,
                    in_label: bool) -> int:
        """Render one wikilink; return how many chars of the next Text it consumed."""
        text = node.text

        def render_label() -> str:
            label_out = _Builder()
            self.render(text, label_out, in_label=True)
            return label_out.text()

        return self.link(str(node.title), None if text is None else str(text), render_label,
                         lambda: _count_links(text) if text else 0, trail_source, out, in_label)

    def link(self, raw_target: str, raw_label: str | None, render_label: Callable[[], str] | str,
             count_caption_links: Callable[[], int] | int, trail_source: str, out: _Builder,
             in_label: bool) -> int:
        """Render a link given its parts (shared by both parsers); return the trail length.

        ``render_label`` renders the label (counting what it holds) and is
        called only when the label is shown, or is the label's text when
        rendering it has no side effects; ``count_caption_links`` counts the
        links in a file's caption (or is that count).
        """
        target = self.targets.get(raw_target)  # parse_link_target_with's cache, read directly
        if target is None:
            target = parse_link_target_with(raw_target, self.table)
        kind = target.kind
        if kind != ARTICLE:
            if kind == NAMESPACE and not target.leading_colon and target.ns in (NS_FILE, NS_CATEGORY):
                if target.ns == NS_FILE:
                    self.bump("files")
                    self.bump("links_in_file", count_caption_links
                              if isinstance(count_caption_links, int) else count_caption_links())
                else:
                    self.bump("categories")
                return 0
            if kind == INTERLANGUAGE and not target.leading_colon:
                self.bump("interlanguage")  # sidebar link, not shown in the text
                return 0
        if raw_label is None:  # = label_of, inline (once per link)
            label = decode_title_escapes(raw_target).strip() \
                if "%" in raw_target or "&" in raw_target else raw_target.strip()
            if label.startswith(":"):
                label = label[1:]
        else:
            label = render_label if isinstance(render_label, str) else render_label()
            if not label.strip() and not raw_label.strip():
                label = _pipe_trick(target)  # [[Target|]]
        trail = self.trail_length(trail_source) if trail_source else 0
        if trail and label.strip() and not label[-1].isspace():
            label += trail_source[:trail]
        else:
            trail = 0
        surface = " ".join(label.split())
        if kind != ARTICLE:
            self.bump(_NOT_A_MENTION[kind])
            out.emit(surface)
            return trail
        if not surface:
            self.bump("empty_surface")
            return trail
        if in_label:
            self.bump("nested_link")
            out.emit(surface)
            return trail
        parts = out.parts  # out.emit, inline: surface is not empty
        start = out.size
        if label[0].isspace():
            parts.append(" ")
            start += 1
        parts.append(surface)
        size = start + len(surface)
        out.spans.append((start, size, target.title))
        if target.title == self.self_title:
            self.bump("self_links")
        if label[-1].isspace():
            parts.append(" ")
            size += 1
        out.size = size
        return trail

    @staticmethod
    def label_of(target: LinkTarget, raw_target: str, raw_label: str | None,
                 render_label: Callable[[], str] | str) -> str:
        """The visible text of a link, before its trail."""
        if raw_label is None:
            shown = decode_title_escapes(raw_target).strip()
            return shown[1:] if shown.startswith(":") else shown
        label = render_label if isinstance(render_label, str) else render_label()
        if not label.strip() and not raw_label.strip():
            return _pipe_trick(target)  # [[Target|]]
        return label


_NOT_A_MENTION = {
    NAMESPACE: "other_namespace", INTERWIKI: "interwiki", INTERLANGUAGE: "interlanguage",
    SECTION: "section_link", "invalid": "invalid_target",
}


def _count_links(code: Wikicode | Node | None) -> int:
    """Wikilinks anywhere inside ``code`` (a dropped node or a caption)."""
    if code is None:
        return 0
    if not isinstance(code, Wikicode):
        code = Wikicode([code])
    return len(code.filter_wikilinks())


def _unbalanced_quotes(match: re.Match[str]) -> str:
    """Apostrophe runs the parser left as text: '' ''' ''''' are markup, '''' is ' + bold."""
    run = len(match.group())
    if run == 4:
        return "'"
    return "'" * (run - 5) if run > 5 else ""


def _pipe_trick(target: LinkTarget) -> str:
    """``[[Pipe (computing)|]]`` -> "Pipe"; ``[[Yale, Connecticut|]]`` -> "Yale"."""
    name = target.title
    without_parens = _PARENTHETICAL.sub("", name)
    if without_parens != name:
        return without_parens
    return name.split(",", 1)[0].strip()


# -- link trails -------------------------------------------------------------
def _trail_rule(pattern: str | None) -> Callable[[str], int]:
    if pattern is None:
        return unicode_trail_length
    if pattern == "":
        return lambda _text: 0
    compiled = re.compile(pattern)

    def regex_trail_length(text: str) -> int:
        match = compiled.match(text)
        return match.end() if match else 0
    return regex_trail_length


# -- whitespace tidy with offset re-mapping --------------------------------------
# Where mentions begin and end: a character real text all but never holds (a text holding it
# takes the slow form). Printable (unlike a private-use one), so that str.isprintable() can
# vouch for a marked line (see _fold_lines).
_MARK = "\u2e3b"  # THREE-EM DASH
# _TIDY_PUNCT with its look-arounds seeing through the marks.
# (Group 1 keeps a "(" and its mark: replaced with r"\1".)
_TIDY_PUNCT_MARKED = re.compile(
    r"[(\uff08][^\S\n]*[,;:]?[^\S\n]*[)\uff09]"
    r"|(\(\u2e3b?)[^\S\n]+"
    r"|[^\S\n]+(?=\u2e3b*[,.)])")
# Mention edges that the empty-parentheses pattern could swallow: then the slow form.
_OPENING_EDGE = frozenset(",;:)\uff09")  # a start mark there could sit inside "( , )"
_CLOSING_EDGE = frozenset("(\uff08,;:")  # and an end mark there
# Where _edge_in_parentheses can say yes: a mention's first or last character is one of these.
_FIRST_EDGE = _OPENING_EDGE | frozenset("(\uff08")
_LAST_EDGE = _CLOSING_EDGE | frozenset(")\uff09")


def _tidy(raw: str, spans: list[tuple[int, int, str]],
          counts: dict[str, int]) -> tuple[str, list[LinkMention]]:
    """Fold whitespace and empty parentheses; carry mention offsets through.

    Fast form: mark each mention's ends in the text, run the substitutions in
    C, read the marks back. Mention surfaces never begin or end with
    whitespace, so no mark falls inside a folded run and the result equals
    :func:`_tidy_mapped`'s; where a surface begins or ends with punctuation
    the patterns look at (or the text holds the marks' characters) that is
    used instead (rare).
    """
    if _MARK in raw:
        return _tidy_mapped(raw, spans, counts)
    pieces: list[str] = []
    append = pieces.append
    last = 0
    for start, end, _target in spans:  # in text order, not overlapping, as the renderer makes them
        if start < last or end < start:
            return _tidy_mapped(raw, spans, counts)
        if start < end and (raw[start] in _FIRST_EDGE or raw[end - 1] in _LAST_EDGE) \
                and _edge_in_parentheses(raw, start, end):
            return _tidy_mapped(raw, spans, counts)
        append(raw[last:start])
        append(raw[start:end])
        last = end
    pieces.append(raw[last:])
    # One mark serves for both ends (the patterns treat both alike, and the raw text holds
    # neither): marks alternate start, end, start... so str.split finds them.
    marked = _tidy_punctuation(_MARK.join(pieces))
    marked = _fold_lines(marked)
    # Mark k (start, end, start, end...) sits after the first k + 1 pieces of the split.
    segments = marked.split(_MARK)
    positions = list(accumulate(map(len, segments)))
    text = "".join(segments)
    leading = len(text) - len(text.lstrip())
    text = text.strip()
    size = len(text)
    links: list[LinkMention] = []
    pairs = iter(positions)
    for (_start, _end, target), start, end in zip(spans, pairs, pairs):
        start -= leading
        end -= leading
        if start < 0:
            start = 0
        if end > size:
            end = size
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        if start >= end:
            counts["dropped_in_tidy"] = counts.get("dropped_in_tidy", 0) + 1
            continue
        links.append(LinkMention(start, end, text[start:end], target))
    return text, links


def _fold_lines(text: str) -> str:
    """``"\\n".join(filter(None, (" ".join(line.split()) for line in text.split("\\n"))))``, faster.

    = _TIDY_SPACE.sub(_space_replacement, text) up to leading/trailing space: a run with a
    newline becomes "\\n", any other run " ". A printable line holds no whitespace but " "
    (every other whitespace character is unprintable: tests check it), so there the same
    fold is: collapse "  ", strip " " (in C, no list of words); other lines are split.
    """
    if "\xa0" in text:  # a no-break space folds as a space does
        text = text.replace("\xa0", " ")
    lines: list[str] = []
    append = lines.append
    for line in text.split("\n"):
        if line.isprintable():
            while "  " in line:
                line = line.replace("  ", " ")
            if line[:1] == " " or line[-1:] == " ":
                line = line.strip(" ")
        else:
            line = " ".join(line.split())
        if line:
            append(line)
    return "\n".join(lines)


_EMPTY_PARENTHESES = re.compile(r"[(\uff08][^\S\n]*[,;:]?[^\S\n]*[)\uff09]")
# The first two branches of _TIDY_PUNCT_MARKED (both start at a parenthesis).
# (Written to begin with one character set, which the regex engine skips to quickly.)
_PARENTHESES = re.compile(r"[(\uff08](?:[^\S\n]*[,;:]?[^\S\n]*[)\uff09]|(?<=\()\u2e3b?([^\S\n]+))")
# The same for a text without "\uff08": one literal first, which the engine finds faster still.
_ASCII_PARENTHESES = re.compile(r"\((?:[^\S\n]*[,;:]?[^\S\n]*[)\uff09]|\u2e3b?([^\S\n]+))")
# Punctuation right after spaces (marks between): where the third branch matches. One
# pattern per punctuation character, each starting with that literal (three quick scans
# beat one through a set); the first look-behind rejects most places at once.
_SPACED_PUNCTUATION = tuple(re.compile(
    re.escape(char) + r"(?<=[\s\u2e3b].)"
    r"(?:(?<=[^\S\n].)|(?<=[^\S\n]\u2e3b.)|(?<=[^\S\n]\u2e3b{2}.))") for char in ",.)")


def _tidy_punctuation(text: str) -> str:
    """``_TIDY_PUNCT_MARKED.sub(r"\\1", text)``, found from the rare characters it needs.

    The regex tries its space branch at every space; this finds the same
    matches from "(" and from punctuation that follows spaces (both rare), and
    keeps the regex's leftmost-first rule: a space run inside a parenthesis
    match is not matched again.
    """
    cuts: list[tuple[int, int]] = []
    taken: list[tuple[int, int]] = []
    if "\uff08" in text:
        parentheses = _PARENTHESES
    elif "(" in text:
        parentheses = _ASCII_PARENTHESES
    else:
        parentheses = None
    if parentheses is not None:
        for match in parentheses.finditer(text):
            taken.append(match.span())
            cuts.append(match.span(1) if match.group(1) else match.span())
    for match in chain.from_iterable(pattern.finditer(text) for pattern in _SPACED_PUNCTUATION):
        end = match.start()
        while text[end - 1] == _MARK:
            end -= 1
        start = end
        while start > 0 and text[start - 1] != "\n" and text[start - 1].isspace():
            start -= 1
        index = bisect_right(taken, (start, len(text) + 1)) - 1
        if index >= 0 and taken[index][1] > start:
            continue  # inside a parenthesis match
        cuts.append((start, end))
    if not cuts:
        return text
    cuts.sort()
    pieces: list[str] = []
    last = 0
    for start, end in cuts:
        if start < last:
            continue
        pieces.append(text[last:start])
        last = end
    pieces.append(text[last:])
    return "".join(pieces)


def _edge_in_parentheses(raw: str, start: int, end: int) -> bool:
    """Whether a mention edge touches empty parentheses the tidy removes ("(, )", "( )").

    A mark there could end up inside the removed text or between two spaces
    that would otherwise fold into one: the offset-mapping tidy handles it.
    """
    first, last = raw[start], raw[end - 1]
    if first in _OPENING_EDGE or last in _CLOSING_EDGE:
        return True
    if first in "(\uff08" and _EMPTY_PARENTHESES.match(raw, start):
        return True
    if last in ")\uff09":
        opening = max(raw.rfind("(", 0, end), raw.rfind("\uff08", 0, end))
        return opening >= 0 and _EMPTY_PARENTHESES.fullmatch(raw, opening, end) is not None
    return False


def _tidy_mapped(raw: str, spans: list[tuple[int, int, str]],
                 counts: dict[str, int]) -> tuple[str, list[LinkMention]]:
    """Fold whitespace and empty parentheses; carry mention offsets through."""
    text, spans = _substitute(raw, _TIDY_PUNCT, lambda _m: "", spans)
    text, spans = _substitute(text, _TIDY_SPACE, _space_replacement, spans)
    leading = len(text) - len(text.lstrip())
    text = text.strip()
    links: list[LinkMention] = []
    for start, end, target in spans:
        start, end = max(start - leading, 0), min(end - leading, len(text))
        while start < end and text[start].isspace():
            start += 1
        while end > start and text[end - 1].isspace():
            end -= 1
        if start >= end:
            counts["dropped_in_tidy"] = counts.get("dropped_in_tidy", 0) + 1
            continue
        links.append(LinkMention(start, end, text[start:end], target))
    return text, links


def _space_replacement(match: re.Match[str]) -> str:
    return "\n" if "\n" in match.group() else " "


def _substitute(text: str, pattern: re.Pattern[str], replacement: Callable[[re.Match[str]], str],
                spans: list[tuple[int, int, str]]) -> tuple[str, list[tuple[int, int, str]]]:
    """``pattern.sub`` that also maps span offsets from the old text to the new one.

    A start inside a replaced region moves to the region's end, an end inside
    one moves to its start, so a span never grows to cover replaced text.
    """
    pieces: list[str] = []
    old_starts: list[int] = []  # per match: old start, old end, new start, new end
    old_ends: list[int] = []
    new_starts: list[int] = []
    new_ends: list[int] = []
    last = 0
    size = 0
    for match in pattern.finditer(text):
        begin, finish = match.span()
        pieces.append(text[last:begin])
        size += begin - last
        piece = replacement(match)
        pieces.append(piece)
        old_starts.append(begin)
        old_ends.append(finish)
        new_starts.append(size)
        size += len(piece)
        new_ends.append(size)
        last = finish
    if not old_starts:
        return text, spans
    pieces.append(text[last:])

    def mapped(position: int, is_start: bool) -> int:
        index = bisect_right(old_starts, position) - 1
        if index < 0:
            return position
        if position >= old_ends[index]:
            return new_ends[index] + (position - old_ends[index])
        return new_ends[index] if is_start else new_starts[index]

    return "".join(pieces), [(mapped(s, True), mapped(e, False), t) for s, e, t in spans]


# At the end: the fast path uses this module's builder and tag tables.
