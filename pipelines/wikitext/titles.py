"""Page titles and link targets, normalised the way MediaWiki resolves them.

``parse_link_target("[[...]]" inner text before the pipe, site)`` says what a
link points to: an article, a page in another namespace, another language's
Wikipedia, a sister project, a section of the current page, or nothing valid.
``normalize_title`` turns a page title from the dump into the same form, so
link targets and page titles can be joined.

Normalisation, in MediaWiki's order: percent-escapes decoded (only when the
bytes are valid UTF-8), HTML character references decoded, directional marks
removed, ``_`` and Unicode spaces folded into one space, trimmed; one leading
``:`` removed (``[[:Category:X]]`` links to the category page); ``#fragment``
split off; namespace / interwiki prefix recognised case-insensitively; first
letter upper-cased where the namespace's case is ``first-letter``.
"""
from __future__ import annotations

import html
import re
from dataclasses import dataclass
from urllib.parse import unquote_to_bytes

from pipelines.records import SiteInfo
from pipelines.wikitext.namespaces import (
    CASE_SENSITIVE,
    INTERWIKI_PREFIXES,
    NS_MAIN,
    WIKIPEDIA_LANGUAGE_CODES,
    NamespaceTable,
    namespace_table,
    prefix_key,
)

ARTICLE = "article"
NAMESPACE = "namespace"
INTERWIKI = "interwiki"
INTERLANGUAGE = "interlanguage"
SECTION = "section"
INVALID = "invalid"

MAX_TITLE_BYTES = 255

_PERCENT_RUN = re.compile(r"(?:%[0-9A-Fa-f]{2})+")
# MediaWiki decodes only well-formed references (with the semicolon).
_CHAR_REF = re.compile(r"&(?:#[0-9]{1,7}|#[xX][0-9A-Fa-f]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});")
_DIRECTION_MARKS = re.compile("[\u200e\u200f\u202a-\u202e]")
# Title whitespace per MediaWiki's MediaWikiTitleCodec.
_TITLE_SPACE = re.compile("[ _\t\n\r\u00a0\u1680\u180e\u2000-\u200a\u2028\u2029\u202f\u205f\u3000]+")
# As MediaWiki: also undecodable percent-escapes and leftover character references.
_ILLEGAL = re.compile(r"[<>\[\]{}|\x00-\x1f\x7f\ufffd]|~{3,}|%[0-9A-Fa-f]{2}|&[A-Za-z0-9#]+;")
_RELATIVE_PATH = re.compile(r"^\.\.?(?:/|$)|/\.\.?(?:/|$)")


@dataclass(frozen=True, slots=True)
class LinkTarget:
    """What a wikilink points to.

    ``title`` is the normalised page name without its namespace prefix (for
    interwiki/interlanguage: the remote page name, spaces normalised only).
    ``prefix`` is the namespace's display name, or the interwiki/language code.
    """

    kind: str  # article | namespace | interwiki | interlanguage | section | invalid
    ns: int | None
    title: str
    fragment: str = ""
    prefix: str = ""
    leading_colon: bool = False

    @property
    def full_title(self) -> str:
        """``Prefix:Title`` for namespaced pages, the title alone for articles."""
        if self.kind in (NAMESPACE, INTERWIKI, INTERLANGUAGE) and self.prefix:
            return f"{self.prefix}:{self.title}"
        return self.title


def decode_title_escapes(raw: str) -> str:
    """Decode percent-escapes (valid UTF-8 only) then HTML character references."""
    if "%" in raw:
        raw = _PERCENT_RUN.sub(_decode_percent_run, raw)
    if "&" in raw:
        raw = _CHAR_REF.sub(_decode_char_ref, raw)
    return raw


def _decode_percent_run(match: re.Match[str]) -> str:
    try:
        return unquote_to_bytes(match.group()).decode("utf-8")
    except UnicodeDecodeError:
        return match.group()  # not UTF-8: MediaWiki would reject it; keep it visible


def _decode_char_ref(match: re.Match[str]) -> str:
    decoded = html.unescape(match.group())
    return match.group() if decoded == match.group() else decoded


def clean_title_text(raw: str) -> str:
    """Escapes decoded, directional marks removed, whitespace and ``_`` folded, trimmed."""
    text = decode_title_escapes(raw)
    text = _DIRECTION_MARKS.sub("", text)
    return _TITLE_SPACE.sub(" ", text).strip()


def upper_first(text: str) -> str:
    """Upper-case the first character when that keeps it one character ("ß" stays)."""
    if not text:
        return text
    first = text[0].upper()
    return first + text[1:] if len(first) == 1 else text


def apply_case(text: str, case: str) -> str:
    return text if case == CASE_SENSITIVE else upper_first(text)


def _is_valid_page_name(name: str) -> bool:
    if not name or name.startswith(":") or _ILLEGAL.search(name):
        return False
    if "." in name and _RELATIVE_PATH.search(name):
        return False
    return len(name.encode("utf-8")) <= MAX_TITLE_BYTES


def parse_link_target(raw: str, site: SiteInfo) -> LinkTarget:
    """Classify and normalise the target part of ``[[raw|...]]``."""
    return parse_link_target_with(raw, namespace_table(site))


MAX_CACHED_TARGETS = 50_000  # per wiki; the same targets recur across pages
_target_cache: dict[int, tuple[NamespaceTable, dict[str, LinkTarget]]] = {}


def link_target_cache(table: NamespaceTable) -> dict[str, LinkTarget]:
    """The cache of :func:`parse_link_target_with` for ``table``: raw target -> target.

    Read it directly (``cache.get(raw) or parse_link_target_with(raw, table)``) in a loop
    over links; it stays the same object (it is cleared, never replaced, when full).
    """
    entry = _target_cache.get(id(table))
    if entry is None or entry[0] is not table:  # the entry holds the table: ids are not reused
        entry = _target_cache[id(table)] = (table, {})
    return entry[1]


def parse_link_target_with(raw: str, table: NamespaceTable) -> LinkTarget:
    """:func:`parse_link_target` with a prebuilt table (the per-link fast path), cached."""
    cache = link_target_cache(table)
    target = cache.get(raw)
    if target is None:
        if len(cache) >= MAX_CACHED_TARGETS:
            cache.clear()
        target = cache[raw] = _parse_link_target(raw, table)
    return target


def _parse_link_target(raw: str, table: NamespaceTable) -> LinkTarget:
    text = clean_title_text(raw)
    leading_colon = text.startswith(":")
    if leading_colon:
        text = text[1:].lstrip()
    text, _, fragment = text.partition("#")
    text = text.rstrip()
    fragment = fragment.strip()
    if not text:
        if fragment and not leading_colon:
            return LinkTarget(SECTION, NS_MAIN, "", fragment)
        return LinkTarget(INVALID, None, "", fragment, leading_colon=leading_colon)
    return _resolve_prefixes(text, fragment, leading_colon, table)


def _resolve_prefixes(text: str, fragment: str, leading_colon: bool,
                      table: NamespaceTable) -> LinkTarget:
    prefix, colon, rest = text.partition(":")
    if colon:
        key = prefix_key(prefix)
        ns = table.by_name.get(key)
        if ns is not None:
            name = rest.lstrip()
            if not _is_valid_page_name(name):
                return LinkTarget(INVALID, ns, name, fragment, table.display_name(ns), leading_colon)
            return LinkTarget(NAMESPACE, ns, apply_case(name, table.case_for(ns)), fragment,
                              table.display_name(ns), leading_colon)
        if key == table.language and key:
            # [[en:Foo]] on enwiki is a local link, as in MediaWiki.
            return _resolve_prefixes(rest.lstrip(), fragment, leading_colon, table)
        if key in WIKIPEDIA_LANGUAGE_CODES or key in INTERWIKI_PREFIXES:
            kind = INTERLANGUAGE if key in WIKIPEDIA_LANGUAGE_CODES else INTERWIKI
            name = rest.strip()
            if _ILLEGAL.search(name):
                return LinkTarget(INVALID, None, name, fragment, key, leading_colon)
            return LinkTarget(kind, None, name, fragment, key, leading_colon)
    if not _is_valid_page_name(text):
        return LinkTarget(INVALID, None, text, fragment, "", leading_colon)
    return LinkTarget(ARTICLE, NS_MAIN, apply_case(text, table.case_for(NS_MAIN)), fragment,
                      "", leading_colon)


def normalize_title(raw: str, site: SiteInfo) -> str:
    """Normalised full title of a page (``"Category:Foo"``, ``"Foo bar"``).

    Page titles in a dump are valid by construction; anything that does not
    parse as a page (interwiki-looking prefixes, odd characters) is returned
    cleaned but otherwise as written, never dropped.
    """
    table = namespace_table(site)
    text = clean_title_text(raw)
    prefix, colon, rest = text.partition(":")
    if colon:
        ns = table.by_name.get(prefix_key(prefix))
        if ns is not None and rest.strip():
            name = apply_case(rest.strip(), table.case_for(ns))
            return f"{table.display_name(ns)}:{name}" if ns != NS_MAIN else name
    return apply_case(text, table.case_for(NS_MAIN))
