"""ResolveRedirects and ResolveLinks: every title and link target to its entity.

Both are key joins (LookupJoin: bounded groups, hot keys split), never a
lookup table in one worker: full English Wikipedia has ~10M redirects and
~250M links, and a hub title has ~500k linking pages. The statuses and their
rules are in :mod:`pipelines.corpus.resolution`.
"""
from __future__ import annotations

from collections import Counter

import apache_beam as beam

from pipelines.corpus.labels import LINKED
from pipelines.corpus.resolution import (
    LOOP,
    REDIRECT,
    TOO_LONG,
    chain_end_status,
    next_redirect_hop,
    resolve_link_target,
    usable_link,
)
from pipelines.records import Article
from pipelines.transforms.joins import GroupJoinFn, LookupJoin
from pipelines.transforms.stats import STATS

RESOLVED = "resolved"
PENDING = "pending"
LOOPS = "loops"


def _chase_source(request) -> str:
    return request[0]


class ChaseOneHopFn(GroupJoinFn):
    """One hop along redirect chains.

    Key: where each chased redirect currently points; table: that title's
    own redirect targets (none when it is not a redirect); requests:
    (source, path) of the chases that reached it.
    """

    def __init__(self, hop: int) -> None:
        super().__init__()
        self.join_name = f"ChaseRedirectsHop{hop}"

    def join(self, title, salt, redirect_targets, chases):
        for source, path in chases:
            step, nxt = next_redirect_hop(title, path, redirect_targets)
            if step == "end":
                yield beam.pvalue.TaggedOutput(RESOLVED, (title, source))
                if len(path) > 1:
                    self.count("redirect_chains_multi_hop")
            elif step == LOOP:
                self.count("redirect_loops")
                yield beam.pvalue.TaggedOutput(LOOPS, (source, (LOOP, source)))
            else:
                yield nxt, (source, path + (title,))


class ClassifyRedirectEndFn(GroupJoinFn):
    """Key: the last title of redirect chains; table: the kinds of pages with that
    title; requests: the redirects whose chain ends there -> (source, (status, final))."""

    join_name = "ClassifyRedirectEnds"

    def join(self, final, salt, kinds, sources):
        status = chain_end_status(k for k in kinds if k != REDIRECT)
        for source in sources:
            self.count(f"redirects_resolved/{status}")
            yield source, (status, final)


def _own_kind(element):
    title, kind = element
    return title, (kind, title)


class ResolveRedirects(beam.PTransform):
    """Titles of every page -> (title, (status, entity title)).

    Inputs: ``redirects`` ((source, target)) and ``page_kinds`` ((title, kind)).
    Articles, disambiguation pages and redirects out of the main namespace
    resolve to themselves; redirects follow their chain for at most
    ``max_hops`` joins.
    """

    def __init__(self, max_hops: int, max_group: int) -> None:
        super().__init__()
        self.max_hops = max_hops
        self.max_group = max_group

    def expand(self, inputs):
        redirects, page_kinds = inputs["redirects"], inputs["page_kinds"]
        stats = []
        pending = redirects | "StartChase" >> beam.Map(lambda st: (st[1], (st[0], (st[0],))))
        resolved_parts, loop_parts = [], []
        for hop in range(self.max_hops):
            out = {"requests": pending, "table": redirects} | f"ChaseHop{hop}" >> LookupJoin(
                ChaseOneHopFn(hop), _chase_source, self.max_group, outputs=(RESOLVED, LOOPS), main=PENDING)
            pending = out[PENDING]
            resolved_parts.append(out[RESOLVED])
            loop_parts.append(out[LOOPS])
            stats.append(out[STATS])
        too_long = pending | "ChainTooLong" >> beam.Map(lambda e: (e[1][0], (TOO_LONG, e[1][0])))
        ends = tuple(resolved_parts) | "FlattenChainEnds" >> beam.Flatten()
        classified = {"requests": ends, "table": page_kinds} | "ClassifyChainEnds" >> LookupJoin(
            ClassifyRedirectEndFn(), lambda source: source, self.max_group, main="out")
        stats.append(classified[STATS])
        own = (
            page_kinds
            | "NonRedirectPages" >> beam.Filter(lambda tk: tk[1] != REDIRECT)
            | "ResolveToSelf" >> beam.Map(_own_kind)
        )
        loops = tuple(loop_parts) | "FlattenLoops" >> beam.Flatten()
        resolutions = (own, classified.out, loops, too_long) | "FlattenResolutions" >> beam.Flatten()
        too_long_count = (
            too_long
            | "CountTooLong" >> beam.combiners.Count.Globally().without_defaults()
            | "TooLongStat" >> beam.Map(lambda n: ("redirect_chains_too_long", n))
        )
        stats.append(too_long_count)
        return {"resolutions": resolutions, "stats": stats}


# ----------------------------------------------------------------- links


def link_targets_by_page(article: Article):
    """(target, (page_id, ((surface, n), ...))) once per distinct target of a page."""
    per_target: dict[str, Counter] = {}
    for link in article.links:
        per_target.setdefault(link.target, Counter())[link.surface] += 1
    for target, surfaces in per_target.items():
        yield target, (article.page_id, tuple(sorted(surfaces.items())))


ENTITY_REFS = "entity_refs"
ANCHORS = "anchors"
ENTITY_LINKS = "entity_links"


class ResolveTargetFn(GroupJoinFn):
    """Key: a link target; table: its title resolutions; requests: (page_id, surfaces)
    of the pages that link to it.

    Only usable links (an article, or a red link when kept) go on; the others
    are counted here as ``links_dropped/<status>``. Main output: one batch of
    refs per group, (entity, ((page_id, "linked", target, surfaces), ...)),
    for the label join (its ``request_batches``), which also hands each page its
    resolved targets; ``anchors``: ((surface, entity), n) for the alias table;
    ``entity_links``: (entity, n) for the vocabulary.
    """

    join_name = "ResolveLinkTargets"

    def __init__(self, keep_red_links: bool, emit_refs: bool = True) -> None:
        super().__init__()
        self.keep_red_links = keep_red_links
        self.emit_refs = emit_refs

    def join(self, target, salt, resolutions, linkers):
        status, entity = resolve_link_target(target, resolutions)
        if len(resolutions) > 1 and salt == 0:
            self.count("duplicate_titles")
        usable = usable_link(status, self.keep_red_links)
        total = pages = 0
        anchors: Counter = Counter()
        refs = []  # the group's pages all refer to one entity: one element for them (at most max_group)
        for page_id, surfaces in linkers:
            pages += 1
            if usable and self.emit_refs:
                refs.append((page_id, LINKED, target, tuple(s for s, _ in surfaces)))
            for surface, n in surfaces:
                total += n
                anchors[surface] += n
        if refs:
            yield entity, tuple(refs)
        self.count(f"link_targets/{status}", total)
        if not usable:
            self.count(f"links_dropped/{status}", total)
        self.count("volume/ResolveLinks/in", pages)
        self.count("volume/ResolveLinks/out", (len(refs) + len(anchors) + 1) if usable else 0)
        if usable:
            for surface, n in anchors.items():
                yield beam.pvalue.TaggedOutput(ANCHORS, ((surface, entity), n))
            yield beam.pvalue.TaggedOutput(ENTITY_LINKS, (entity, total))


class ResolveLinks(beam.PTransform):
    """Join every article's link targets with the title resolutions.

    ``emit_refs`` False (the two-pass job, whose pass 2 resolves links by lookup): no ``entity_refs``
    for the label join, only the anchor and link counts."""

    def __init__(self, keep_red_links: bool, max_group: int, emit_refs: bool = True) -> None:
        super().__init__()
        self.keep_red_links = keep_red_links
        self.max_group = max_group
        self.emit_refs = emit_refs

    def expand(self, inputs):
        articles, resolutions = inputs["articles"], inputs["resolutions"]
        targets = articles | "LinkTargetsByPage" >> beam.FlatMap(link_targets_by_page)
        out = {"requests": targets, "table": resolutions} | "JoinTargetResolutions" >> LookupJoin(
            ResolveTargetFn(self.keep_red_links, self.emit_refs), lambda request: request[0], self.max_group,
            outputs=(ANCHORS, ENTITY_LINKS), main=ENTITY_REFS)
        return {
            "entity_refs": out[ENTITY_REFS],
            "anchors": out[ANCHORS] | "SumAnchorCounts" >> beam.CombinePerKey(sum),
            "entity_links": out[ENTITY_LINKS] | "SumEntityLinks" >> beam.CombinePerKey(sum),
            "stats": [out[STATS]],
        }
