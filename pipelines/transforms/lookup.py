"""BuildLookupStore: pass 1's tables -> the lookup store's shard files (pipelines.corpus.lookup_store).

Its inputs are small records keyed by a title: title resolutions, each entity's capped list of usable
aliases, vocabulary ids and the page ids of articles. They are keyed by their shard (a stable hash of
the title), grouped by shard, and each shard's builder sorts them on local disk and writes one SQLite
file under OUT/lookup/ (removed with the other files of no finished corpus when the manifest is
written). The output, one (shard index, path) per shard, is what pass 2 takes as its side input: a
handful of paths, so pass 2 starts when every shard is written, and reaches workers of any runner.
"""
from __future__ import annotations

import os
import shutil
import tempfile

import apache_beam as beam

from pipelines.corpus.lookup_store import (
    ALIASES,
    FIRST_ARTICLE,
    RESOLUTION,
    VOCAB_ID,
    shard_name,
    stable_shard,
    write_shard,
)
from pipelines.transforms.joins import BYTES_SAMPLE, encoded_size, in_bytes_sample
from pipelines.transforms.passages import UsableAliasesFn
from pipelines.transforms.stats import STATS, CountingDoFn
from wikiedm import storage

LOOKUP_FOLDER = "lookup"


class _WriteShardFn(CountingDoFn):
    """(shard index, [record | None, ...]) -> (shard index, path of its SQLite file)."""

    def __init__(self, output: str, shards: int, sort_buffer: int) -> None:
        super().__init__()
        self.output = output
        self.shards = shards
        self.sort_buffer = sort_buffer

    def process(self, element):
        index, records = element
        path = storage.join(self.output, LOOKUP_FOLDER, shard_name(index, self.shards))
        tmp = tempfile.mkdtemp(prefix="wikiedm-lookup-build-")
        try:
            local = os.path.join(tmp, shard_name(index, self.shards))
            rows = write_shard((r for r in records if r is not None), local, self.sort_buffer)
            self.count("lookup/titles", rows)
            self.count("lookup/shard_bytes", os.path.getsize(local))
            with open(local, "rb") as src, storage.create(f"{path}.tmp") as dst:
                shutil.copyfileobj(src, dst, 8 << 20)
            storage.rename(f"{path}.tmp", path)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        yield index, path


def _keyed(record, shards: int):
    return stable_shard(record[1], shards), record


class _CountShuffledFn(CountingDoFn):
    """Counts the store's records as they enter its shuffle (``volume/BuildLookupStore/...``)."""

    def process(self, element):
        self.count("volume/BuildLookupStore/records")
        _shard, record = element
        if in_bytes_sample(record[1]):
            self.count("volume/BuildLookupStore/record_bytes", encoded_size(element) * BYTES_SAMPLE)
        yield element


class BuildLookupStore(beam.PTransform):
    """{"resolutions": (title, (status, entity)), "top_aliases": (entity, [(rank, packed alias), ...]),
    "vocab_rows": one list of vocabulary rows, "first_articles": (title, smallest page id)}
    -> {"shards": (index, path) per shard, "stats"}."""

    def __init__(self, output: str, shards: int, sort_buffer: int) -> None:
        super().__init__()
        self.output = output
        self.shards = shards
        self.sort_buffer = sort_buffer

    def expand(self, inputs):
        shards = self.shards
        records = (
            inputs["resolutions"] | "ResolutionRecords" >> beam.Map(lambda kv: (RESOLUTION, kv[0], tuple(kv[1]))),
            inputs["top_aliases"] | "AliasRecords" >> beam.Map(lambda kv: (ALIASES, kv[0], list(kv[1]))),
            inputs["vocab_rows"] | "VocabRecords" >> beam.FlatMap(
                lambda rows: [(VOCAB_ID, r["entity"], r["entity_id"]) for r in rows]),
            inputs["first_articles"] | "FirstArticleRecords" >> beam.Map(lambda kv: (FIRST_ARTICLE, kv[0], kv[1])),
        ) | "FlattenRecords" >> beam.Flatten()
        keyed = (
            records
            | "KeyByShard" >> beam.Map(_keyed, shards)
            | "CountRecords" >> beam.ParDo(_CountShuffledFn()).with_outputs(STATS, main="keyed")
        )
        every_shard = (  # every shard is written, empty or not: pass 2 opens all of them
            records.pipeline | "ShardIndexes" >> beam.Create([(i, None) for i in range(shards)]))
        written = (
            (keyed.keyed, every_shard)
            | "FlattenWithEveryShard" >> beam.Flatten()
            | "GroupByShard" >> beam.GroupByKey()
            | "WriteShardFiles" >> beam.ParDo(_WriteShardFn(self.output, shards, self.sort_buffer)).with_outputs(
                STATS, main="shards")
        )
        return {"shards": written.shards, "stats": [keyed[STATS], written[STATS]]}


class UsableTopAliases(beam.PTransform):
    """Alias rows -> (entity, [(rank, packed alias), ...]): the labeller's filters, then the
    ``max_aliases_per_entity`` best of each entity (a Top-per-key combiner, lifted before its shuffle).
    The shuffle job's LabelMissingMentions does the same before its entity join."""

    def __init__(self, config) -> None:
        super().__init__()
        self.config = config

    def expand(self, alias_rows):
        usable = alias_rows | "UsableAliases" >> beam.ParDo(UsableAliasesFn(self.config)).with_outputs(
            STATS, main="aliases")
        top = usable.aliases | "TopAliasesPerEntity" >> beam.combiners.Top.PerKey(
            self.config.max_aliases_per_entity, key=lambda ranked: ranked[0], reverse=True)
        return {"top_aliases": top, "stats": [usable[STATS]]}
