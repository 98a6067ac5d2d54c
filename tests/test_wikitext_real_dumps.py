"""extract_article over every article of the shared real dump excerpts.

Pages are read with a few lines of xml.etree (not the project's dump reader),
so this tests the wikitext code alone. The dumps are used by path (env var
WIKIDUMPS_DIR overrides); tests skip with a reason when they are absent.
"""
from __future__ import annotations

import bz2
import lzma
import os
import re
import xml.etree.ElementTree as ET
from collections import Counter
from functools import lru_cache
from pathlib import Path

import pytest

from pipelines.records import Namespace, SiteInfo
from pipelines.wikitext import (
    ExtractionError,
    extract_article,
    is_disambiguation,
    normalize_title,
    redirect_target,
)

pytestmark = pytest.mark.needs_shared

DUMPS_DIR = Path(os.environ.get("WIKIDUMPS_DIR")
                 or Path(__file__).resolve().parents[1] / ".." / "shared" / "wikidumps").resolve()
ARTICLE_DUMPS = [
    "enwiki-2016-206pages-articles1.xml.bz2",
    "enwiki-pear-1page-schema0.10.xml",
    "simplewiki-2019-7pages.xml.bz2",
    "ukwiki-2023-first100k-lines-truncated.xml.xz",
    # Beyond the brief's four: more layouts of the same code paths.
    "enwiki-2019-196pages-namespaces.xml.bz2",
    "enwiki-2019-11pages-partial.xml",
    "enwiki-2020-tiny-7pages.xml.bz2",
    "enwiki-5pages-tables-no-siteinfo.xml.bz2",
]
KNOWN_ERROR_REASONS = {"input_too_large", "nesting_too_deep", "parser_error",
                       "recursion_error", "render_error"}
LEFTOVER_MARKUP = ("[[", "]]", "{{", "}}", "<ref", "</ref", "|}", "{|", "<!--")
# Every "[[" of the wikitext ends up in exactly one of these counts (nested
# links inside kept labels count once more, as nested_link).
LINK_FATES = ("links_kept", "links_in_template", "links_in_ref", "links_in_table",
              "links_in_file", "links_in_tag", "links_in_comment", "interlanguage",
              "interwiki", "other_namespace", "section_link", "invalid_target",
              "empty_surface", "nested_link", "files", "categories", "stray_markup",
              "links_in_broken_link")


# -- a tiny independent dump reader (test helper) ---------------------------------------
def _open(path: Path):
    if path.suffix == ".bz2":
        return bz2.open(path, "rb")
    if path.suffix == ".xz":
        return lzma.open(path, "rb")
    return open(path, "rb")


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


@lru_cache(maxsize=None)
def read_dump(name: str) -> tuple[SiteInfo, tuple[tuple[str, int, str, bool], ...]]:
    """(site, pages as (title, ns, text, is_redirect)); a truncated file yields what parsed."""
    path = DUMPS_DIR / name
    if not path.exists():
        pytest.skip(f"shared dump {path} is absent (set WIKIDUMPS_DIR)")
    site = SiteInfo(from_dump=False)
    pages = []
    try:
        with _open(path) as handle:
            for _event, element in ET.iterparse(handle):
                tag = _local(element.tag)
                if tag == "siteinfo":
                    site = _site_from(element)
                elif tag == "page":
                    fields = {_local(child.tag): child for child in element}
                    text = next((node.text or "" for node in element.iter()
                                 if _local(node.tag) == "text"), "")
                    pages.append((fields["title"].text, int(fields["ns"].text), text,
                                  "redirect" in fields))
                    element.clear()
    except (ET.ParseError, EOFError, lzma.LZMAError):
        pass  # the ukwiki file is cut mid-page: keep the complete pages before the cut
    return site, tuple(pages)


def _site_from(element: ET.Element) -> SiteInfo:
    values = {_local(child.tag): child for child in element}
    namespaces = tuple(
        Namespace(int(ns.get("key")), ns.text or "", ns.get("case", "first-letter"))
        for ns in values["namespaces"])
    return SiteInfo(dbname=values["dbname"].text, case=values["case"].text,
                    namespaces=namespaces)


def articles(name: str):
    site, pages = read_dump(name)
    return site, [(title, text) for title, ns, text, redirect in pages if ns == 0 and not redirect]


@lru_cache(maxsize=None)
def extracted(name: str):
    """(site, [(title, wikitext, Extraction | ExtractionError)]) for the dump's articles, once."""
    site, pages = articles(name)
    results = []
    for title, wikitext in pages:
        try:
            results.append((title, wikitext, extract_article(wikitext, site, title=title)))
        except ExtractionError as err:
            results.append((title, wikitext, err))
    return site, results


def successes(name: str):
    return [(title, wikitext, result) for title, wikitext, result in extracted(name)[1]
            if not isinstance(result, ExtractionError)]


# -- an independent estimate of the article links a page shows --------------------------------
_COMMENT = re.compile(r"<!--.*?(?:-->|\Z)", re.S)
_REF = re.compile(r"<ref[^>/]*/>|<ref(?:\s[^>]*)?>.*?</ref\s*>", re.S | re.I)
_GALLERY = re.compile(r"<(gallery|imagemap|math|timeline)\b.*?</\1\s*>", re.S | re.I)
_INNER_TEMPLATE = re.compile(r"\{\{[^{}]*\}\}")
# Templates the registry renders with their text (and its links): unwrapped, not removed.
_TEXT_TEMPLATE = re.compile(r"\{\{\s*(?:quote|cquote|blockquote|quotation|lang|langx|lang-[\w-]+|"
                            r"nowrap|nobr|small|smaller|big|em|transl|nihongo\d?)\s*\|([^{}]*)\}\}",
                            re.IGNORECASE)
_LINK_TEMPLATE = re.compile(r"\{\{\s*(?:iw|нп|не перекладено|ill|interlanguage link)\s*\|([^|{}]*)[^{}]*\}\}",
                            re.IGNORECASE)
_TABLE = re.compile(r"^[ \t:]*\{\|.*?^[ \t]*\|\}", re.S | re.M)
_FILE_LINK = re.compile(r"\[\[\s*(?:file|image|файл|зображення)\s*:[^\[\]]*"
                        r"(?:\[\[[^\[\]]*\]\][^\[\]]*)*\]\]", re.I)
_LINK_TARGET = re.compile(r"\[\[\s*([^\]|\[]*)")
_NOT_ARTICLE = re.compile(r"^:?\s*(file|image|category|media|wikipedia|wp|help|portal|template|"
                          r"файл|категорія|зображення|шаблон|[a-z]{2,3}(-[a-z]+)?|wikt|"
                          r"wiktionary|commons|s|q|b|n|v)\s*:|^#", re.I)


def independent_link_estimate(wikitext: str) -> int:
    text = _COMMENT.sub("", wikitext)
    text = _REF.sub("", text)
    text = _GALLERY.sub("", text)
    for _ in range(20):
        text = _TEXT_TEMPLATE.sub(r"\1", text)
        text = _LINK_TEMPLATE.sub(r"[[\1]]", text)
        text, replaced = _INNER_TEMPLATE.subn("", text)
        if not replaced:
            break
    text = _TABLE.sub("", text)
    text = _FILE_LINK.sub("", text)  # with the links in their captions
    return sum(1 for target in _LINK_TARGET.findall(text) if not _NOT_ARTICLE.match(target))


# -- the tests -----------------------------------------------------------------------------------
@pytest.mark.parametrize("dump", ARTICLE_DUMPS)
def test_every_article_extracts_with_exact_offsets_and_no_markup(dump):
    _site, results = extracted(dump)
    assert results, f"no articles read from {dump}"
    errors = Counter()
    kept = 0
    for title, _wikitext, result in results:
        if isinstance(result, ExtractionError):  # must be a clean, explained error
            assert result.reason in KNOWN_ERROR_REASONS and title in str(result)
            errors[result.reason] += 1
            continue
        text = result.text
        for link in result.links:
            assert text[link.start:link.end] == link.surface, (title, link)
            assert link.surface == link.surface.strip() and link.surface
            assert link.target and "#" not in link.target and "_" not in link.target
        for markup in LEFTOVER_MARKUP:
            assert markup not in text, (title, markup, text[max(text.find(markup) - 60, 0):][:120])
        assert "\n\n" not in text and text == text.strip()
        assert result.counts.get("dropped_in_tidy", 0) == 0
        kept += len(result.links)
    assert sum(errors.values()) <= len(results) // 100, errors
    assert kept > len(results)  # articles have links


@pytest.mark.parametrize("dump", ARTICLE_DUMPS)
def test_links_kept_match_an_independent_count(dump):
    ours = theirs = 0
    for title, wikitext, result in successes(dump):
        estimate = independent_link_estimate(wikitext)
        kept = result.counts.get("links_kept", 0)
        if estimate >= 30:  # per page: close to the estimate
            assert 0.85 * estimate <= kept <= 1.1 * estimate, (title, kept, estimate)
        ours += kept
        theirs += estimate
    assert abs(ours - theirs) <= 0.05 * theirs, (ours, theirs)


@pytest.mark.parametrize("dump", ARTICLE_DUMPS)
def test_every_link_is_accounted_for(dump):
    """No silent loss: each "[[" of the page is kept or counted under a reason."""
    brackets = accounted = 0
    for _title, wikitext, result in successes(dump):
        brackets += wikitext.count("[[")
        accounted += sum(result.counts.get(key, 0) for key in LINK_FATES)
    assert abs(brackets - accounted) <= 0.01 * brackets, (brackets, accounted)


def test_pear_page_known_numbers():
    site, pages = articles("enwiki-pear-1page-schema0.10.xml")
    [(title, wikitext)] = pages
    result = extract_article(wikitext, site, title=title)
    assert title == "Pear"
    assert result.text.startswith("The pear is any of several tree and shrub species of genus Pyrus")
    counts = result.counts
    assert counts["links_kept"] == 104
    assert counts["categories"] == 4 and counts["files"] == 7
    # The README's 174 links, all accounted for.
    assert sum(counts.get(key, 0) for key in LINK_FATES) == 174
    first = result.links[0]
    assert (first.surface, first.target) == ("species", "Species")


def test_ukwiki_titles_links_and_redirects():
    site, pages = read_dump("ukwiki-2023-first100k-lines-truncated.xml.xz")
    assert site.dbname == "ukwiki"
    redirects = [(title, text) for title, ns, text, redirect in pages if redirect]
    assert redirects and all(redirect_target(text, site) for _, text in redirects)
    assert redirect_target(redirects[0][1], site) == "Есперанто"
    targets = Counter()
    for _title, _wikitext, result in successes("ukwiki-2023-first100k-lines-truncated.xml.xz"):
        targets.update(link.target for link in result.links)
    assert sum(targets.values()) > 10000
    assert all(not target.startswith(("Файл:", "Категорія:")) for target in targets)


@pytest.mark.parametrize("dump", ["enwiki-2019-196pages-namespaces.xml.bz2",
                                  "enwiki-2016-206pages-articles1.xml.bz2",
                                  "ukwiki-2023-first100k-lines-truncated.xml.xz"])
def test_redirect_pages_resolve_like_the_dump_says(dump):
    site, pages = read_dump(dump)
    redirects = [(title, text) for title, ns, text, redirect in pages if redirect]
    assert redirects
    for title, text in redirects:
        assert redirect_target(text, site), (title, text[:80])
    for title, ns, text, redirect in pages:
        if not redirect:
            assert redirect_target(text, site) is None, title


def test_disambiguation_pages_in_the_namespaces_dump():
    site, pages = read_dump("enwiki-2019-196pages-namespaces.xml.bz2")
    found = [normalize_title(title, site) for title, ns, text, redirect in pages
             if ns == 0 and not redirect and is_disambiguation(text, site)]
    assert len(found) == 4, found  # the README: 4 disambiguation pages
