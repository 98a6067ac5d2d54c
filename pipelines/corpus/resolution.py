"""What a title or a link target resolves to: the statuses and their rules (pure).

Page kinds (from ParseWikiDump), one per main-namespace page:
  article                     an article: an entity
  disambiguation              a disambiguation page: never an entity
  redirect                    a redirect to another main-namespace title
  other_namespace_redirect    a redirect to a page outside the main namespace
                              (``[[Kategorie-typo:X]]`` -> ``Category:X``): it exists, so a
                              link to it is not a red link, and it is never an entity

Statuses of a resolved title or link target (pass 1: transforms/tables.py):
  article, disambiguation, other_namespace_redirect   the page's kind, directly or at the
                                                      end of a redirect chain
  missing     a redirect chain that ends at a title with no page
  loop        a redirect chain that comes back on itself
  too_long    a chain longer than ``max_redirect_hops``
  red_link    a link target with no page at all

Only ``article`` is an entity, and ``red_link`` too when ``--keep_red_links``
(a partial dump); every other status drops the link, counted as
``links_dropped/<status>``.
"""
from __future__ import annotations

from typing import Iterable

ARTICLE = "article"
DISAMBIGUATION = "disambiguation"
REDIRECT = "redirect"
OTHER_NAMESPACE_REDIRECT = "other_namespace_redirect"
MISSING = "missing"
LOOP = "loop"
TOO_LONG = "too_long"
RED_LINK = "red_link"

PAGE_KINDS = (ARTICLE, DISAMBIGUATION, REDIRECT, OTHER_NAMESPACE_REDIRECT)
STATUSES = (ARTICLE, DISAMBIGUATION, OTHER_NAMESPACE_REDIRECT, MISSING, LOOP, TOO_LONG, RED_LINK)


def usable_link(status: str, keep_red_links: bool) -> bool:
    """Is a link with this status a mention of an entity?"""
    return status == ARTICLE or (status == RED_LINK and keep_red_links)


def chain_end_status(kinds: Iterable[str]) -> str:
    """Status of a redirect chain from the kinds of the pages titled like its last hop.

    A title can carry several pages in a broken dump; an article wins over a
    disambiguation page, which wins over a redirect out of the namespace.
    """
    present = set(kinds)
    for status in (ARTICLE, DISAMBIGUATION, OTHER_NAMESPACE_REDIRECT):
        if status in present:
            return status
    return MISSING


def next_redirect_hop(title: str, path: tuple[str, ...], redirect_targets: list[str]) -> tuple[str, str | None]:
    """Where a chase that reached ``title`` (after visiting ``path``) goes next.

    ``("end", None)`` when ``title`` is not a redirect (the chain ends there),
    ``("loop", None)`` when the next hop was already visited, else
    ``("hop", next title)``. Duplicate redirect pages of one title (a broken
    dump) follow the smallest target, so the result is deterministic.
    """
    if not redirect_targets:
        return "end", None
    nxt = min(redirect_targets)
    if nxt == title or nxt in path:
        return LOOP, None
    return "hop", nxt


def resolve_link_target(target: str, resolutions: list[tuple[str, str]]) -> tuple[str, str]:
    """(status, entity) of a link target from its title resolutions (sorted).

    No resolution: a red link, whose entity is the target itself. Several
    (duplicate titles in a broken dump): the smallest, deterministically.
    """
    if not resolutions:
        return RED_LINK, target
    return resolutions[0]
