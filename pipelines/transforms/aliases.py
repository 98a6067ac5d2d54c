"""BuildAliasTable and SelectEntityVocab.

The alias table is built by combiners keyed on (alias, entity) and then on
alias; no worker ever holds it whole. The vocabulary (at most N rows) is the
only thing collected in one place, as the guide allows.
"""
from __future__ import annotations

import apache_beam as beam

from pipelines.corpus.alias_table import (
    SOURCE_ANCHOR,
    SOURCE_REDIRECT,
    SOURCE_TITLE,
    alias_rows,
    clean_alias,
    merge_alias_evidence,
    vocab_order_key,
    vocab_rows,
)
from pipelines.transforms.stats import STATS, CountingDoFn


class AnchorEvidenceFn(CountingDoFn):
    """((surface, entity), n) -> ((alias, entity), (n, {"anchor"}))."""

    def process(self, element):
        (surface, entity), n = element
        alias = clean_alias(surface)
        if alias is None:
            self.count("aliases_dropped/unusable_anchor_text", n)
            return
        yield (alias, entity), (n, frozenset((SOURCE_ANCHOR,)))


def title_evidence(element):
    """(title, (status, entity)) of an article -> its own title as an alias."""
    title, (status, entity) = element
    if status != "article":
        return
    alias = clean_alias(title)
    if alias is None:
        return
    source = SOURCE_TITLE if title == entity else SOURCE_REDIRECT
    yield (alias, entity), (0, frozenset((source,)))


class BuildAliasTable(beam.PTransform):
    """Anchor counts and title resolutions -> alias rows (dicts of ALIAS_SCHEMA)."""

    def expand(self, inputs):
        anchors, resolutions = inputs["anchors"], inputs["resolutions"]
        anchor_ev = anchors | "AnchorEvidence" >> beam.ParDo(AnchorEvidenceFn()).with_outputs(STATS, main="ev")
        title_ev = resolutions | "TitleEvidence" >> beam.FlatMap(title_evidence)
        rows = (
            (anchor_ev.ev, title_ev)
            | "FlattenAliasEvidence" >> beam.Flatten()
            | "MergeAliasEntity" >> beam.CombinePerKey(merge_alias_evidence)
            | "KeyByAlias" >> beam.Map(lambda kv: (kv[0][0], (kv[0][1], kv[1][0], kv[1][1])))
            | "GroupByAlias" >> beam.GroupByKey()
            | "AliasRows" >> beam.FlatMap(lambda kv: alias_rows(kv[0], kv[1]))
        )
        return {"rows": rows, "stats": [anchor_ev[STATS]]}


class SelectEntityVocab(beam.PTransform):
    """(entity, link count) -> one element: the vocabulary rows (ENTITY_VOCAB_SCHEMA dicts)."""

    def __init__(self, size: int) -> None:
        super().__init__()
        self.size = size

    def expand(self, entity_links):
        return (
            entity_links
            # reverse=True keeps the *smallest* keys: most links, then title order.
            | "TopEntities" >> beam.combiners.Top.Of(self.size, key=vocab_order_key, reverse=True)
            | "VocabRows" >> beam.Map(vocab_rows)
        )
