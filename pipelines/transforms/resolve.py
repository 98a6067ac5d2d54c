"""ResolveRedirects and ResolveLinks: every title and link target to its entity.

Both work by key joins (CoGroupByKey), never by loading the redirects into
one worker: full English Wikipedia has ~10M redirects and ~250M links.

A title resolves to one of these statuses:
  article         an article page (the entity is its title, or the end of a redirect chain)
  disambiguation  a disambiguation page, directly or through redirects (never an entity)
  missing         a redirect whose chain ends at a page absent from the dump
  loop            a redirect chain that comes back on itself
  too_long        a chain longer than ``max_hops``
A link target with no page at all is a ``red_link``.
"""
from __future__ import annotations

from collections import Counter

import apache_beam as beam

from pipelines.records import Article
from pipelines.transforms.stats import STATS, CountingDoFn

RESOLVED = "resolved"
PENDING = "pending"
LOOPS = "loops"


def _first_sorted(values) -> str | None:
    """The smallest of several values (duplicate titles in a broken dump): deterministic."""
    values = list(values)
    return min(values) if values else None


class ChaseOneHopFn(CountingDoFn):
    """One hop along redirect chains.

    Input: (title, {"chase": [(source, path)], "redirect": [target]}); ``title``
    is where each chased redirect currently points. If ``title`` is not
    itself a redirect, the chase ends there.
    """

    def __init__(self, hop: int) -> None:
        super().__init__()
        self.hop = hop

    def process(self, element):
        title, grouped = element
        chasers = grouped["chase"]
        if not chasers:
            return
        next_title = _first_sorted(grouped["redirect"])
        for source, path in chasers:
            if next_title is None:
                yield beam.pvalue.TaggedOutput(RESOLVED, (title, source))  # ends at ``title``
                if len(path) > 1:
                    self.count("redirect_chains_multi_hop")
            elif next_title in path or next_title == title:
                self.count("redirect_loops")
                yield beam.pvalue.TaggedOutput(LOOPS, (source, ("loop", source)))
            else:
                yield (next_title, (source, path + (title,)))


class ClassifyRedirectEndFn(CountingDoFn):
    """(final title, {"source": [redirect titles], "kind": [page kinds]}) -> (source, (status, final))."""

    def process(self, element):
        final, grouped = element
        sources = grouped["source"]
        if not sources:
            return
        kinds = set(grouped["kind"]) - {"redirect"}
        if "article" in kinds:
            status = "article"
        elif "disambiguation" in kinds:
            status = "disambiguation"
        else:
            status = "missing"
        for source in sources:
            self.count(f"redirects_resolved/{status}")
            yield source, (status, final)


def _own_kind(element):
    title, kind = element
    return title, (kind, title)


class ResolveRedirects(beam.PTransform):
    """Titles of every page -> (title, (status, entity title)).

    Inputs: ``redirects`` ((source, target)) and ``page_kinds`` ((title, kind)).
    Articles and disambiguation pages resolve to themselves; redirects follow
    their chain for at most ``max_hops`` joins.
    """

    def __init__(self, max_hops: int) -> None:
        super().__init__()
        self.max_hops = max_hops

    def expand(self, inputs):
        redirects, page_kinds = inputs["redirects"], inputs["page_kinds"]
        stats = []
        pending = redirects | "StartChase" >> beam.Map(lambda st: (st[1], (st[0], (st[0],))))
        resolved_parts, loop_parts = [], []
        for hop in range(self.max_hops):
            out = (
                {"chase": pending, "redirect": redirects}
                | f"JoinHop{hop}" >> beam.CoGroupByKey()
                | f"ChaseHop{hop}" >> beam.ParDo(ChaseOneHopFn(hop)).with_outputs(RESOLVED, LOOPS, STATS, main=PENDING)
            )
            pending = out[PENDING]
            resolved_parts.append(out[RESOLVED])
            loop_parts.append(out[LOOPS])
            stats.append(out[STATS])
        too_long = pending | "ChainTooLong" >> beam.Map(lambda e: (e[1][0], ("too_long", e[1][0])))
        ends = tuple(resolved_parts) | "FlattenChainEnds" >> beam.Flatten()
        classified = (
            {"source": ends, "kind": page_kinds}
            | "JoinChainEndKinds" >> beam.CoGroupByKey()
            | "ClassifyChainEnds" >> beam.ParDo(ClassifyRedirectEndFn()).with_outputs(STATS, main="out")
        )
        stats.append(classified[STATS])
        own = (
            page_kinds
            | "NonRedirectPages" >> beam.Filter(lambda tk: tk[1] != "redirect")
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
    """(target, (page_id, {surface: n})) once per distinct target of a page."""
    per_target: dict[str, Counter] = {}
    for link in article.links:
        per_target.setdefault(link.target, Counter())[link.surface] += 1
    for target, surfaces in per_target.items():
        yield target, (article.page_id, dict(surfaces))


class ResolveTargetFn(CountingDoFn):
    """(target, {"links": [(page_id, surfaces)], "resolution": [(status, entity)]}).

    Main output: (page_id, (target, status, entity)) for the page-level join.
    ``anchors``: ((surface, entity), n) for the alias table; ``entity_links``:
    (entity, n) for the vocabulary. Only links that resolve to an article (or
    red links when kept) feed those two.
    """

    def __init__(self, keep_red_links: bool) -> None:
        super().__init__()
        self.keep_red_links = keep_red_links

    def process(self, element):
        target, grouped = element
        linkers = grouped["links"]
        if not linkers:
            return
        resolutions = sorted(grouped["resolution"])
        if resolutions:
            status, entity = resolutions[0]
            if len(resolutions) > 1:
                self.count("duplicate_titles")
        else:
            status, entity = "red_link", target
        usable = status == "article" or (status == "red_link" and self.keep_red_links)
        total = 0
        anchors: Counter = Counter()
        for page_id, surfaces in linkers:
            yield page_id, (target, status, entity)
            for surface, n in surfaces.items():
                total += n
                if usable:
                    anchors[surface] += n
        self.count(f"link_targets/{status}", total)
        if usable:
            for surface, n in anchors.items():
                yield beam.pvalue.TaggedOutput("anchors", ((surface, entity), n))
            yield beam.pvalue.TaggedOutput("entity_links", (entity, total))


class ResolveLinks(beam.PTransform):
    """Join every article's link targets with the title resolutions."""

    def __init__(self, keep_red_links: bool) -> None:
        super().__init__()
        self.keep_red_links = keep_red_links

    def expand(self, inputs):
        articles, resolutions = inputs["articles"], inputs["resolutions"]
        targets = articles | "LinkTargetsByPage" >> beam.FlatMap(link_targets_by_page)
        out = (
            {"links": targets, "resolution": resolutions}
            | "JoinTargetResolutions" >> beam.CoGroupByKey()
            | "ResolveTargets" >> beam.ParDo(ResolveTargetFn(self.keep_red_links)).with_outputs(
                "anchors", "entity_links", STATS, main="page_targets")
        )
        return {
            "page_targets": out.page_targets,
            "anchors": out.anchors | "SumAnchorCounts" >> beam.CombinePerKey(sum),
            "entity_links": out.entity_links | "SumEntityLinks" >> beam.CombinePerKey(sum),
            "stats": [out[STATS]],
        }
