"""Which alias-table rows the missing-mention labeller may use, and in what order.

Before the label join, every alias row is checked once against the
labeller's filters that do not depend on the page (length, letters,
stopwords, rarity, prior; see ``rejection_reason``), and each entity keeps at
most ``LabelConfig.max_aliases_per_entity`` aliases, best first by
:func:`alias_rank`. A page that refers to the entity then receives the first
``top_aliases_per_page`` of them, plus those it uses itself as anchor texts
of that entity (:meth:`RankedAliases.for_page`): its volume is bounded by its own
size, so the join's volume is linear in the corpus even when a hub entity
has thousands of anchor texts, and no alias the page itself links with is lost.
"""
from __future__ import annotations

from typing import Iterable, Iterator

from pipelines.corpus.alias_table import SOURCE_REDIRECT, clean_alias
from pipelines.corpus.labels import (
    LINKED,
    TITLE,
    LabelConfig,
    PackedAlias,
    PreparedPage,
    alias_form,
    alias_gate,
    alias_rejection_reason,
    curated_by_sources,
    evidence_rejection_reason,
    is_own_title,
)
from pipelines.corpus.resolution import usable_link
from schemas.corpus import MentionSource
from wikiedm.records import Mention


def alias_rank(alias: str, entity: str, count: int, sources: tuple[str, ...]) -> tuple:
    """Sort key, best first: the entity's own title (with or without its qualifier),
    then the most-used anchor texts, redirects before other names at equal counts,
    then alphabetical (deterministic)."""
    return _rank_key(alias, is_own_title(alias, entity), count, sources)


def _rank_key(alias: str, own_title: bool, count: int, sources: tuple[str, ...]) -> tuple:
    return (not own_title, -count, SOURCE_REDIRECT not in sources, alias)


def ranked_alias_rows(alias: str, rows: Iterable[tuple[str, str, int, float, tuple[str, ...]]],
                      config: LabelConfig) -> Iterator[tuple[str, str | None, tuple | None]]:
    """The alias table's rows of ``alias``, as (alias, entity, count, prior, sources) tuples (its column
    order) -> (entity, rejection reason, None) for those the labeller may not use (:func:`rejection_reason`)
    and (entity, None, (:func:`alias_rank`, :func:`pack_alias`)) for the others. What depends on the alias
    alone (the first checks, its tokens and shape) is made once, not once per entity."""
    alias = alias.strip()
    reason = alias_rejection_reason(alias, config)
    if reason is not None:
        for _alias, entity, _count, _prior, _sources in rows:
            yield entity, reason, None
        return
    form = None
    for _alias, entity, count, prior, sources in rows:
        own_title = is_own_title(alias, entity)  # once for both curated_name's test and the rank
        curated = own_title or curated_by_sources(sources, config)
        reason = None if curated else evidence_rejection_reason(curated, count, prior, config)
        if reason is not None:
            yield entity, reason, None
            continue
        if form is None:
            form = alias_form(alias, config)
        # Only what the labeller reads per page: count and sources matter once, here (rank, curated).
        yield entity, None, (_rank_key(alias, own_title, count, sources), (alias, float(prior), curated, *form))


class RankedAliases:
    """The ranked aliases of one entity, and what each page that refers to it receives.

    Per page the cost is O(top + the page's anchors), not O(all aliases): a hub's
    list is built once per join group and served to thousands of pages.
    """

    __slots__ = ("ranked", "position")

    def __init__(self, ranked: list[PackedAlias]) -> None:
        self.ranked = ranked
        self.position = {alias[0]: i for i, alias in enumerate(ranked)}

    def for_page(self, top: int, page_anchors, page: PreparedPage | None = None) -> tuple[PackedAlias, ...]:
        """The first ``top`` aliases, then any later one that is among the page's own
        (cleaned) anchor texts for the entity, in rank order. With ``page``, only those the page may
        admit (:meth:`PreparedPage.may_admit`: the others could label nothing in it)."""
        head = self.ranked[:top]
        if len(self.ranked) > top and page_anchors:
            later = sorted(i for i in (self.position.get(a) for a in page_anchors) if i is not None and i >= top)
            head += [self.ranked[i] for i in later]
        if page is not None:
            return tuple(alias for alias in head if page.may_admit(alias_gate(alias)))
        return tuple(head)


def page_candidates(title: str, links, resolve, aliases_of, keep_red_links: bool, top_per_page: int,
                    page: PreparedPage | None = None):
    """One page's hyperlink mentions and label candidates, from table lookups (the two-pass job).

    ``links``: the article's LinkMentions; ``resolve(target)`` -> (status, entity) of a link target
    (``(RED_LINK, target)`` when the dump has no such page); ``aliases_of(entity)`` -> the entity's
    :class:`RankedAliases` (its usable aliases, at most ``max_aliases_per_entity``, best first), or None.

    Returns (hyperlinks, entities): a Mention for every link whose target resolves to an entity (in
    link order), and (entity, origins, aliases) for each entity the page links to or is titled by,
    with the aliases :meth:`RankedAliases.for_page` picks (the first ``top_per_page`` and the page's
    own anchor texts of the entity), for those with any; with ``page`` (:func:`prepare_page` of the article),
    only the aliases it may admit.
    """
    entity_of: dict[str, str] = {}
    anchors: dict[str, set] = {}
    unusable: set[str] = set()
    for link in links:
        target = link.target
        if target in unusable:
            continue
        entity = entity_of.get(target)
        if entity is None:
            status, entity = resolve(target)
            if not usable_link(status, keep_red_links):
                unusable.add(target)
                continue
            entity_of[target] = entity
        anchors.setdefault(entity, set()).add(clean_alias(link.surface))
    hyperlink = MentionSource.HYPERLINK
    hyperlinks = [Mention(link.start, link.end, link.surface, entity_of[link.target], hyperlink)
                  for link in links if link.target in entity_of]
    entities = []
    for entity in sorted(anchors.keys() | {title}):
        origins = tuple(o for o, present in ((LINKED, entity in anchors), (TITLE, entity == title)) if present)
        ranked = aliases_of(entity)
        if ranked is None:
            continue
        aliases = ranked.for_page(top_per_page, anchors.get(entity, ()), page)
        if aliases:
            entities.append((entity, origins, aliases))
    return hyperlinks, entities
