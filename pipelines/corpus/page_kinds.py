"""What a dump page is, decided before any extraction: the page-kind rule of the job.

:func:`classify_page` is pure (no Beam, no counters); ``ClassifyPagesFn`` in
``pipelines/transforms/parse.py`` turns its answer into outputs and counters.
"""
from __future__ import annotations

from typing import NamedTuple

from pipelines.corpus.resolution import ARTICLE, DISAMBIGUATION, OTHER_NAMESPACE_REDIRECT, REDIRECT
from pipelines.records import RawPage, SiteInfo
from pipelines.wikitext import (
    DisambiguationConfig,
    is_disambiguation,
    normalize_title,
    parse_link_target,
    redirect_target,
)

NOT_IN_MAIN_NAMESPACE = "not_in_main_namespace"  # dropped (counted by namespace when read)
BAD_PAGE = "bad_page"  # dead-lettered, with a reason

# Dead-letter reasons of BAD_PAGE.
INVALID_TITLE = "invalid_title"
EMPTY_PAGE = "empty_page"
WIKITEXT_TOO_LONG = "wikitext_too_long"


class PageClass(NamedTuple):
    """The rule's answer. ``kind``: ARTICLE (to extract), DISAMBIGUATION, REDIRECT (``target`` set),
    OTHER_NAMESPACE_REDIRECT, NOT_IN_MAIN_NAMESPACE, or BAD_PAGE (``reason``, ``detail``)."""

    kind: str
    title: str = ""
    target: str | None = None
    reason: str = ""
    detail: str = ""


def redirect_title(raw: str, site: SiteInfo) -> str | None:
    """The main-namespace title a ``<redirect title=..>`` names, or None when it names another namespace."""
    target = parse_link_target(raw, site)
    return target.title if target.kind == "article" else None


def classify_page(page: RawPage, site: SiteInfo, disambiguation: DisambiguationConfig,
                  max_wikitext_chars: int) -> PageClass:
    """Main namespace only; the ``<redirect title=..>`` element is authoritative (old exports
    only have ``#REDIRECT [[..]]`` in the text); a redirect out of the main namespace, by either,
    is a page that exists but is never an entity; empty and over-long pages are dead letters."""
    if page.ns != 0:
        return PageClass(NOT_IN_MAIN_NAMESPACE)
    title = normalize_title(page.title, site)
    if not title:
        return PageClass(BAD_PAGE, reason=INVALID_TITLE, detail=page.title)
    target = None
    is_redirect = page.redirect is not None
    if is_redirect:
        target = redirect_title(page.redirect, site)
    elif page.text:
        named = redirect_target(page.text, site)
        is_redirect = named is not None
        # The same namespace rule as the element's: '#REDIRECT [[Category:X]]' leaves the main namespace.
        target = redirect_title(named, site) if named else None
    if is_redirect:
        return PageClass(REDIRECT, title, target) if target else PageClass(OTHER_NAMESPACE_REDIRECT, title)
    if not page.text.strip():
        return PageClass(BAD_PAGE, title, reason=EMPTY_PAGE)
    if len(page.text) > max_wikitext_chars:
        return PageClass(BAD_PAGE, title, reason=WIKITEXT_TOO_LONG, detail=f"{len(page.text)} chars")
    if is_disambiguation(page.text, site, disambiguation):
        return PageClass(DISAMBIGUATION, title)
    return PageClass(ARTICLE, title)
