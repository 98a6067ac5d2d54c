"""BuildAliasTable and SelectEntityVocab.

The alias table is built by combiners keyed on (alias, entity) and on alias,
and one LookupJoin that hands each (alias, entity) row its alias's total
(bounded groups: an alias with many entities is split). No worker ever holds
the table whole.

The vocabulary is selected without a heap of N entries per bundle: a
histogram of link counts (one entry per distinct count) gives the cut-off
count first; entities above it are in, and only the ties at the cut-off are
ranked by title. The selected rows (at most N, the configured vocabulary
size) are the one thing collected in one place: the job writes them as one
file and hands them to the workers as the vocabulary side input.
"""
from __future__ import annotations

import heapq
from collections import Counter

import apache_beam as beam

from pipelines.corpus.alias_table import (
    SOURCE_ANCHOR,
    SOURCE_REDIRECT,
    SOURCE_TITLE,
    clean_alias,
    merge_alias_evidence,
    vocab_cutoff,
    vocab_rows,
)
from pipelines.corpus.resolution import ARTICLE
from pipelines.transforms.joins import GroupJoinFn, LookupJoin
from pipelines.transforms.stats import STATS, CountingDoFn


class AnchorEvidenceFn(CountingDoFn):
    """((surface, entity), n) -> ((alias, entity), (n, {"anchor"}))."""

    def process(self, element):
        (surface, entity), n = element
        self.count("volume/BuildAliasTable/in")
        alias = clean_alias(surface)
        if alias is None:
            self.count("aliases_dropped/unusable_anchor_text", n)
            return
        yield (alias, entity), (n, frozenset((SOURCE_ANCHOR,)))


def title_evidence(element):
    """(title, (status, entity)) of an article -> its own title as an alias."""
    title, (status, entity) = element
    if status != ARTICLE:
        return
    alias = clean_alias(title)
    if alias is None:
        return
    source = SOURCE_TITLE if title == entity else SOURCE_REDIRECT
    yield (alias, entity), (0, frozenset((source,)))


class AliasRowsFn(GroupJoinFn):
    """Key: an alias; table: its (total anchor count, entities); requests: (entity, count, sources)."""

    join_name = "AliasPriors"

    def join(self, alias, salt, totals, entries):
        total = totals[0][0] if totals else 0
        for entity, count, sources in entries:
            self.count("volume/BuildAliasTable/out")
            yield {
                "alias": alias,
                "entity": entity,
                "count": int(count),
                "prior": (count / total) if total else 0.0,
                "sources": sorted(sources),
            }


# Join values stay plain tuples, unpacked by name here: Beam's default coder writes a tuple of
# primitives natively, while a NamedTuple falls back to pickle (measured: x2.6 the encode+decode
# time and +53% bytes for a link-resolution request).
def anchor_total_of_alias(pair):
    """((alias, entity), (count, sources)) -> (alias, (count, 1 entity))."""
    (alias, _entity), (count, _sources) = pair
    return alias, (count, 1)


def alias_row_request(pair):
    """((alias, entity), (count, sources)) -> (alias, (entity, count, sources)): one request of the prior join."""
    (alias, entity), (count, sources) = pair
    return alias, (entity, count, sources)


def entities_per_alias(totals):
    """(alias, (anchor count, entities)) -> (alias, entities): the requests the prior join will see."""
    alias, (_count, entities) = totals
    return alias, entities


def _request_entity(request):
    entity, _count, _sources = request
    return entity


class BuildAliasTable(beam.PTransform):
    """Anchor counts and title resolutions -> alias rows (dicts of ALIAS_SCHEMA)."""

    def __init__(self, max_group: int) -> None:
        super().__init__()
        self.max_group = max_group

    def expand(self, inputs):
        anchors, resolutions = inputs["anchors"], inputs["resolutions"]
        anchor_ev = anchors | "AnchorEvidence" >> beam.ParDo(AnchorEvidenceFn()).with_outputs(STATS, main="ev")
        title_ev = resolutions | "TitleEvidence" >> beam.FlatMap(title_evidence)
        pairs = (
            (anchor_ev.ev, title_ev)
            | "FlattenAliasEvidence" >> beam.Flatten()
            | "MergeAliasEntity" >> beam.CombinePerKey(merge_alias_evidence)
        )
        per_alias = (
            pairs
            | "CountAndEntity" >> beam.Map(anchor_total_of_alias)
            | "SumPerAlias" >> beam.CombinePerKey(beam.combiners.TupleCombineFn(sum, sum))
        )
        rows = {
            "requests": pairs | "KeyByAlias" >> beam.Map(alias_row_request),
            "table": per_alias,
            "request_counts": per_alias | "EntitiesPerAlias" >> beam.Map(entities_per_alias),
        } | "AliasRows" >> LookupJoin(AliasRowsFn(), _request_entity, self.max_group, main="rows")
        return {"rows": rows.rows, "stats": [anchor_ev[STATS], rows[STATS]]}


class _CountHistogram(beam.CombineFn):
    """Link counts -> {count: number of entities with it} (one entry per distinct count)."""

    def create_accumulator(self):
        return Counter()

    def add_input(self, acc, count):
        acc[count] += 1
        return acc

    def merge_accumulators(self, accs):
        merged = Counter()
        for acc in accs:
            merged.update(acc)
        return merged

    def extract_output(self, acc):
        return dict(acc)


def _first_titles(kv, cutoff):
    _, titles = kv
    _count, ties = cutoff
    return [(title, _count) for title in heapq.nsmallest(ties, titles)]


class SelectEntityVocab(beam.PTransform):
    """(entity, link count) -> one element: the vocabulary rows (ENTITY_VOCAB_SCHEMA dicts).

    Ids follow (most links first, then title); see the module docstring for
    how the N most-linked entities are found without an N-entry heap per bundle.
    """

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def expand(self, entity_links):
        size = self.size
        cutoff = beam.pvalue.AsSingleton(
            entity_links
            | "LinkCounts" >> beam.Map(lambda kv: kv[1])
            | "CountHistogram" >> beam.CombineGlobally(_CountHistogram())
            | "CutOff" >> beam.Map(vocab_cutoff, size)
        )
        above = entity_links | "AboveCutOff" >> beam.Filter(
            lambda kv, c: kv[1] > c[0] or (kv[1] == c[0] and c[1] < 0), c=cutoff)
        ties = (
            entity_links
            | "TiesAtCutOff" >> beam.Filter(lambda kv, c: kv[1] == c[0] and c[1] >= 0, c=cutoff)
            | "TieTitles" >> beam.Map(lambda kv: (0, kv[0]))
            | "GroupTies" >> beam.GroupByKey()
            | "FirstTiesByTitle" >> beam.FlatMap(_first_titles, cutoff=cutoff)
        )
        return (
            (above, ties)
            | "FlattenSelected" >> beam.Flatten()
            | "CollectVocab" >> beam.combiners.ToList()
            | "VocabRows" >> beam.Map(vocab_rows)
        )
