"""BuildTables: pass 1's global tables from the sorted runs the ranges wrote (the two-pass job).

Every step below is one Beam ParDo over shards: it merges the runs of its shard
(:mod:`pipelines.corpus.sorted_runs`: all records of a key together, table side first, requests
streamed), applies the pure rules of pipelines.corpus (resolution, alias_table, candidates), and writes its own runs for the steps
after it. Only (run set, shard, path) elements cross Beam's shuffles, so no step, on any runner, holds
more than one buffer of records and one key's table values: not the redirects, the links nor the alias
table, whatever the size of the dump.

  ChaseRedirectsHop<h>  titles + chase-<h>: one hop along every redirect chain; a chain that ends is
                        classified by the kinds of its last title (max_redirect_hops hops)
  ResolveTitles         titles + links + resolved: each title's resolution (its own kinds, or its
                        redirect chain's end); each link target's entity, anchor counts and link counts;
                        titles as aliases; the store's resolution and first article of each title
  BuildAliasRows        per alias: (alias, entity) counts, priors and sources -> alias_table Parquet
                        files, one per alias shard; the labeller's usable aliases, ranked, to the
                        store runs of their entities' shards
  CountEntityLinks      per entity: its link count -> a histogram of link counts (the vocabulary's cut-off)
  SelectEntityVocab     the N most-linked entities
  WriteLookupStore      per shard: one SQLite file (pipelines.corpus.lookup_store), pass 2's side input;
                        an entity's best usable aliases (capped) picked from its ranked aliases here
Statuses, rules and counters are those the earlier shuffle job had (its joins); the committed digests of
the corpus on every shared dump (tests/golden/corpus_rows.json) were made with both, and hold them.
"""
from __future__ import annotations

import contextlib
import gc
import heapq
import itertools
import marshal
import os
import shutil
import tempfile
from collections import Counter

import apache_beam as beam
import pyarrow as pa

from pipelines.corpus.alias_table import (
    SOURCE_ANCHOR,
    SOURCE_REDIRECT,
    SOURCE_TITLE,
    clean_alias,
    vocab_cutoff,
    vocab_rows,
)
from pipelines.corpus.candidates import ranked_alias_rows
from pipelines.corpus.lookup_store import (
    ALIAS_RANK,
    ALIASES,
    FIRST_ARTICLE,
    RESOLUTION,
    VOCAB_ID,
    heads_path,
    shard_name,
    write_sorted_shard,
)
from pipelines.corpus.resolution import (
    ARTICLE,
    LOOP,
    REDIRECT,
    TOO_LONG,
    chain_end_status,
    next_redirect_hop,
    resolve_link_target,
    usable_link,
)
from pipelines.corpus.sorted_runs import MARSHAL_VERSION, RunWriter, grouped, merged
from pipelines.transforms.parse import (
    CHASE,
    CHASE_RUNS,
    FIRST_PAGE,
    KIND,
    LINK,
    LINK_RUNS,
    REDIRECT_TARGET,
    RESOLVED,
    TITLE_RUNS,
    count_runs,
)
from pipelines.transforms.stats import STATS, CountingDoFn
from pipelines.transforms.write import shard_name as parquet_shard_name
from pipelines.worker_gc import froze_heap
from schemas import SCHEMAS
from wikiedm import storage

TABLES_FOLDER = "tables"  # OUT/tables/: pass 1's run files (removed with the manifest)
LOOKUP_FOLDER = "lookup"  # OUT/lookup/: the store's SQLite shards (removed with the manifest)
RUNS = "runs"  # tagged output of every step: (run set, shard, path)
RESOLVED_RUNS, ALIAS_RUNS, ENTITY_RUNS, STORE_RUNS = "resolved", "aliases", "entities", "store"
# Tags of the aliases and entities runs (the titles' are parse.py's; the store's are its record kinds).
EVIDENCE = 0
ENTITY_LINKS = 0
# The store runs' ALIASES records that BuildAliasRows writes: one per usable (alias, entity) row, keyed by the
# entity, valued (rank, the packed alias as marshal bytes). The packed alias is encoded once, where it is made,
# and stored as it is (the store writer decodes only what it indexes: lookup_store.encode_head).


def _open(path: str):
    return storage.open_read(path)


@contextlib.contextmanager
def _young_objects_only():
    """The garbage collector sees only the objects made inside the block (gc.freeze, then unfreeze): no
    garbage is kept, but its full passes skip the worker's heap. The alias steps keep hundreds of thousands
    of nested tuples (records, packed aliases) alive until a run spills; the collector untracks one nesting
    level per pass, so many of them reach the oldest generation and set off full passes, which were half
    of BuildAliasRows' CPU in the job. Left alone when something else froze objects (the job's workers:
    :func:`~pipelines.worker_gc.tune_gc`, asked first, as counting the frozen objects walks them)."""
    if froze_heap() or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


class _TableStepFn(CountingDoFn):
    """Base of a step: (shard, [(run set, path) | None, ...]) -> its outputs; writers of its runs."""

    step = "Step"

    def __init__(self, folder: str, shards: int, buffer_records: int) -> None:
        super().__init__()
        self.folder = folder
        self.shards = shards
        self.buffer_records = buffer_records

    def writer(self, name: str, shard: int, shards: int | None = None) -> RunWriter:
        return RunWriter(storage.join(self.folder, name), shards or self.shards, f"{self.step}-{shard:05d}",
                         storage.create, storage.join, self.buffer_records)

    def close(self, name: str, writer: RunWriter):
        """Close ``writer``; its runs as (name, shard, path) elements of the ``runs`` output."""
        runs = writer.close()
        count_runs(self.count, name, writer, runs)
        for shard, path in runs:
            yield beam.pvalue.TaggedOutput(RUNS, (name, shard, path))

    @staticmethod
    def paths(tagged, *names: str) -> list[str]:
        return [path for item in tagged if item is not None for name, path in (item,) if name in names]


class ChaseHopFn(_TableStepFn):
    """One hop along redirect chains, for the chases that reached this shard's titles.

    Keys: where each chase points; table: that title's kinds and redirect targets; requests: (source,
    path) of the chases. A chase at a title that is no redirect ends there ((source, RESOLVED, (status,
    title)) to the source's shard); a loop ends as (LOOP, source); the others hop on, or after the last
    hop end as (TOO_LONG, source)."""

    def __init__(self, hop: int, last: bool, folder: str, shards: int, buffer_records: int) -> None:
        super().__init__(folder, shards, buffer_records)
        self.hop = hop
        self.last = last
        self.step = f"hop{hop}"

    def process(self, element):
        shard, tagged = element
        chase_paths = self.paths(tagged, f"chase-{self.hop}")
        if not chase_paths:
            return
        resolved = self.writer(RESOLVED_RUNS, shard)
        pending = None if self.last else self.writer(f"chase-{self.hop + 1}", shard)
        for title, records in grouped(self.paths(tagged, TITLE_RUNS) + chase_paths, _open):
            kinds, targets = [], []
            for _key, tag, value in records:
                if tag == KIND:
                    kinds.append(value)
                elif tag == REDIRECT_TARGET:
                    targets.append(value)
                elif tag == CHASE:
                    self._chase(title, value, kinds, targets, resolved, pending)
        yield from self.close(RESOLVED_RUNS, resolved)
        if pending is not None:
            yield from self.close(f"chase-{self.hop + 1}", pending)

    def _chase(self, title, chase, kinds, targets, resolved: RunWriter, pending: RunWriter | None) -> None:
        source, path = chase
        step, nxt = next_redirect_hop(title, path, targets)
        if step == "end":
            status = chain_end_status(k for k in kinds if k != REDIRECT)
            self.count(f"redirects_resolved/{status}")
            if len(path) > 1:
                self.count("redirect_chains_multi_hop")
            resolved.add(source, RESOLVED, (status, title))
        elif step == LOOP:
            self.count("redirect_loops")
            resolved.add(source, RESOLVED, (LOOP, source))
        elif pending is None:
            self.count("redirect_chains_too_long")
            resolved.add(source, RESOLVED, (TOO_LONG, source))
        else:
            pending.add(nxt, CHASE, (source, path + (title,)))


class ResolveTitlesFn(_TableStepFn):
    """Per title: its resolutions (its own non-redirect kinds, its redirect chain's end), the store's
    RESOLUTION (the smallest) and FIRST_ARTICLE records; titles of articles as aliases; and for the links
    that target it: the entity, ``link_targets/``/``links_dropped/`` counts, anchor-text evidence per
    alias and the entity's link count."""

    step = "resolve"

    def __init__(self, keep_red_links: bool, alias_shards: int, folder: str, shards: int, buffer_records: int) -> None:
        super().__init__(folder, shards, buffer_records)
        self.keep_red_links = keep_red_links
        self.alias_shards = alias_shards

    def process(self, element):
        shard, tagged = element
        aliases = self.writer(ALIAS_RUNS, shard, self.alias_shards)
        entities = self.writer(ENTITY_RUNS, shard)
        store = self.writer(STORE_RUNS, shard)
        paths = self.paths(tagged, TITLE_RUNS, LINK_RUNS, RESOLVED_RUNS)
        for title, records in grouped(paths, _open):
            resolutions, first, anchors = [], None, None
            for _key, tag, value in records:
                if tag == KIND:
                    if value != REDIRECT:
                        resolutions.append((value, title))
                elif tag == FIRST_PAGE:
                    first = value if first is None or value < first else first
                elif tag == RESOLVED:
                    resolutions.append(value)
                elif tag == LINK:
                    if anchors is None:
                        anchors = Counter()
                    surface, n = value
                    anchors[surface] += n
            resolutions.sort()
            if resolutions:
                store.add(title, RESOLUTION, resolutions[0])
            if first is not None:
                store.add(title, FIRST_ARTICLE, first)
            for status, entity in resolutions:
                if status == ARTICLE:
                    alias = clean_alias(title)
                    if alias is not None:
                        aliases.add(alias, EVIDENCE, (entity, 0, SOURCE_TITLE if title == entity else SOURCE_REDIRECT))
            if anchors:
                self._links(title, resolutions, anchors, aliases, entities)
        yield from self.close(ALIAS_RUNS, aliases)
        yield from self.close(ENTITY_RUNS, entities)
        yield from self.close(STORE_RUNS, store)

    def _links(self, target, resolutions, anchors: Counter, aliases: RunWriter, entities: RunWriter) -> None:
        status, entity = resolve_link_target(target, resolutions)
        if len(resolutions) > 1:
            self.count("duplicate_titles")
        total = sum(anchors.values())
        self.count(f"link_targets/{status}", total)
        if not usable_link(status, self.keep_red_links):
            self.count(f"links_dropped/{status}", total)
            return
        for surface in sorted(anchors):
            n = anchors[surface]
            alias = clean_alias(surface)
            if alias is None:
                self.count("aliases_dropped/unusable_anchor_text", n)
                continue
            aliases.add(alias, EVIDENCE, (entity, n, SOURCE_ANCHOR))
        entities.add(entity, ENTITY_LINKS, total)


class BuildAliasRowsFn(_TableStepFn):
    """Per alias: its rows (count and sources summed per entity, prior = count / the alias's anchor
    links), written sorted to this alias shard's Parquet file; each row the labeller may use goes to its
    entity's store shard ranked (:func:`alias_rank`), the others are counted by reason."""

    step = "aliases"

    def __init__(self, output: str, labels, alias_shards: int, row_group_rows: int, folder: str, shards: int,
                 buffer_records: int) -> None:
        super().__init__(folder, shards, buffer_records)
        self.output = output
        self.labels = labels
        self.alias_shards = alias_shards
        self.row_group_rows = max(1, row_group_rows)

    def process(self, element):
        shard, tagged = element
        store = self.writer(STORE_RUNS, shard)
        relative = f"alias_table/{parquet_shard_name('alias_table', shard, self.alias_shards)}"
        parquet = storage.ParquetFileWriter(storage.join(self.output, relative), SCHEMAS["alias_table"])
        schema = SCHEMAS["alias_table"]
        batch: list = []  # rows as tuples in the table's column order: no dict per row
        dropped: Counter = Counter()
        usable = 0
        with _young_objects_only():
            add, dumps, labels = store.add, marshal.dumps, self.labels
            for alias, records in grouped(self.paths(tagged, ALIAS_RUNS), _open):
                rows = _alias_rows(alias, records)
                batch += rows
                for entity, reason, ranked in ranked_alias_rows(alias, rows, labels):
                    if reason is None:
                        usable += 1
                        rank, packed = ranked
                        add(entity, ALIASES, (rank, dumps(packed, MARSHAL_VERSION)))
                    else:
                        dropped[reason] += 1
                if len(batch) >= self.row_group_rows:
                    parquet.write_table(_table(batch[:self.row_group_rows], schema))
                    batch = batch[self.row_group_rows:]
        if batch:
            parquet.write_table(_table(batch, schema))
        sha256, size = parquet.close()
        self.count("volume/tables/alias_rows", parquet.rows)
        self.count("label_aliases/usable", usable)
        for reason in sorted(dropped):
            self.count(f"label_aliases_dropped/{reason}", dropped[reason])
        yield {"path": relative, "bytes": size, "sha256": sha256, "rows": parquet.rows, "kind": "alias_table"}
        yield from self.close(STORE_RUNS, store)


def _alias_rows(alias: str, records) -> list[tuple]:
    """An alias's evidence records (entity, links, source) -> its alias table rows, as tuples in the table's
    column order: count and sources summed per entity, prior = count / the alias's links, by entity."""
    _key, _tag, (entity, n, source) = next(records)
    second = next(records, None)
    if second is None:  # most aliases: one record (then prior = n / n, or 0.0 without links)
        return [(alias, entity, int(n), 1.0 if n else 0.0, (source,))]
    per_entity: dict[str, list] = {entity: [n, {source}]}
    for _key, _tag, (entity, n, source) in itertools.chain((second,), records):
        evidence = per_entity.get(entity)
        if evidence is None:
            per_entity[entity] = [n, {source}]
        else:
            evidence[0] += n
            evidence[1].add(source)
    total = sum(count for count, _sources in per_entity.values())
    rows = []
    for entity in sorted(per_entity):
        count, sources = per_entity[entity]
        rows.append((alias, entity, int(count), (count / total) if total else 0.0, tuple(sorted(sources))))
    return rows


def _table(rows: list[tuple], schema: pa.Schema) -> pa.Table:
    """Rows as tuples in ``schema``'s column order -> a table (the same as from_pylist of their dicts)."""
    return pa.Table.from_arrays([pa.array(column, field.type) for column, field in zip(zip(*rows), schema)],
                                schema=schema)


class CountEntityLinksFn(_TableStepFn):
    """Per entity: its link count; main output: the shard's histogram {link count: entities}."""

    step = "entities"

    def process(self, element):
        _shard, tagged = element
        histogram: Counter = Counter()
        for _entity, records in grouped(self.paths(tagged, ENTITY_RUNS), _open):
            histogram[sum(value for _key, _tag, value in records)] += 1
        yield dict(histogram)


class SelectVocabFn(_TableStepFn):
    """A shard's linked entities (the entities runs) + the global cut-off -> (entities above it, the first
    tied titles)."""

    step = "vocab"

    def process(self, element, cutoff):
        _shard, tagged = element
        count_at, ties = cutoff
        above, tied = [], []
        for entity, records in grouped(self.paths(tagged, ENTITY_RUNS), _open):
            links = sum(value for _key, _tag, value in records)
            if links > count_at or (links == count_at and ties < 0):
                above.append((entity, links))
            elif links == count_at:
                tied.append(entity)
                if len(tied) >= 4 * ties + 64:
                    tied = heapq.nsmallest(ties, tied)
        yield above, heapq.nsmallest(ties, tied) if ties >= 0 else []


def _vocab_of(selections: list, cutoff) -> list[dict]:
    count_at, ties = cutoff
    chosen = [pair for above, _tied in selections for pair in above]
    if ties >= 0:
        chosen += [(title, count_at) for title in heapq.nsmallest(ties, (t for _above, tied in selections for t in tied))]
    return vocab_rows(chosen)


class VocabStoreRunsFn(_TableStepFn):
    """The vocabulary rows (one element) -> the store's VOCAB_ID records, as runs."""

    step = "vocabids"

    def process(self, rows):
        store = self.writer(STORE_RUNS, 0)
        for row in rows:
            store.add(row["entity"], VOCAB_ID, row["entity_id"])
        yield from self.close(STORE_RUNS, store)


def _merge_histograms(histograms) -> dict:
    total: Counter = Counter()
    for h in histograms:
        total.update(h)
    return dict(total)


class WriteStoreShardFn(_TableStepFn):
    """A shard's store runs -> its SQLite and heads files under OUT/lookup/ -> (shard index, SQLite file's path).
    An entity keeps its ``max_aliases`` best ranked aliases."""

    step = "store"

    def __init__(self, output: str, head_aliases: int, max_aliases: int, folder: str, shards: int,
                 buffer_records: int) -> None:
        super().__init__(folder, shards, buffer_records)
        self.output = output
        self.head_aliases = head_aliases
        self.max_aliases = max_aliases

    def process(self, element):
        shard, tagged = element
        path = storage.join(self.output, LOOKUP_FOLDER, shard_name(shard, self.shards))
        tmp = tempfile.mkdtemp(prefix="wikiedm-lookup-build-")
        try:
            local = os.path.join(tmp, shard_name(shard, self.shards))
            records = _store_records(merged(self.paths(tagged, STORE_RUNS), _open), self.max_aliases)
            with _young_objects_only():
                rows = write_sorted_shard(records, local, self.head_aliases)
            self.count("lookup/titles", rows)
            self.count("lookup/shard_bytes", os.path.getsize(local) + os.path.getsize(heads_path(local)))
            # The heads file first: a shard's SQLite file in place means both are.
            for source, target in ((heads_path(local), heads_path(path)), (local, path)):
                with open(source, "rb") as src, storage.create(f"{target}.tmp") as dst:
                    shutil.copyfileobj(src, dst, 8 << 20)
                storage.rename(f"{target}.tmp", target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        yield shard, path


def _store_records(records, keep: int):
    """A store shard's merged run records -> write_sorted_shard's (kind, title, value) records: an entity's
    ranked aliases (one ALIASES record each, of every alias shard) as one ALIASES record of its ``keep``
    best (bounded while they arrive, for a hub with many aliases)."""
    ranked, entity = [], None
    for title, kind, value in records:
        if kind == ALIASES:
            if title != entity:
                if ranked:
                    yield _best_aliases(entity, ranked, keep)
                ranked, entity = [], title
            ranked.append(value)
            if len(ranked) >= 4 * keep + 64:
                ranked = heapq.nsmallest(keep, ranked, key=ALIAS_RANK)
            continue
        if ranked:  # a title's records come in kind order: its aliases before its vocabulary id
            yield _best_aliases(entity, ranked, keep)
            ranked, entity = [], None
        yield kind, title, value
    if ranked:
        yield _best_aliases(entity, ranked, keep)


def _best_aliases(entity: str, ranked: list, keep: int) -> tuple:
    """An entity's ALIASES record: its ``keep`` best (rank, packed alias as marshal data), in any order (the
    store writer sorts them)."""
    return ALIASES, entity, heapq.nsmallest(keep, ranked, key=ALIAS_RANK) if len(ranked) > keep else ranked


def _by_shard(run):
    name, shard, path = run
    return shard, (name, path)


class BuildTables(beam.PTransform):
    """Pass 1's runs ((run set, shard, path), from ParseWikiDump with a runs folder) -> {"store_shards":
    (index, path) per lookup shard, "alias_files": file records, "vocab_rows": one list of vocabulary
    rows, "stats"}."""

    def __init__(self, output: str, labels, keep_red_links: bool, max_hops: int, vocab_size: int,
                 shards: int, alias_shards: int, row_group_rows: int, buffer_records: int) -> None:
        super().__init__()
        if max_hops < 1:
            raise ValueError(f"max_hops must be >= 1, got {max_hops}")
        self.output = output
        self.labels = labels
        self.keep_red_links = keep_red_links
        self.max_hops = max_hops
        self.vocab_size = vocab_size
        self.shards = shards
        self.alias_shards = alias_shards
        self.row_group_rows = row_group_rows
        self.buffer_records = buffer_records

    def _step(self, label: str, runs: list, fn, every_shard: int = 0, outputs: tuple = (), main: str = "main"):
        """Group the runs by shard (every shard of ``every_shard`` gets an element, runs or none) and apply ``fn``."""
        parts = [r | f"{label}Runs{i}" >> beam.Map(_by_shard) for i, r in enumerate(runs)]
        if every_shard:
            parts.append(runs[0].pipeline | f"{label}EveryShard" >> beam.Create([(i, None) for i in range(every_shard)], reshuffle=False))
        return (
            tuple(parts)
            | f"{label}Flatten" >> beam.Flatten()
            | f"{label}GroupByShard" >> beam.GroupByKey()
            | label >> beam.ParDo(fn).with_outputs(STATS, RUNS, *outputs, main=main)
        )

    def expand(self, runs):
        folder = storage.join(self.output, TABLES_FOLDER)
        shards, buffer = self.shards, self.buffer_records
        stats = []

        titles = runs | "TitleRuns" >> beam.Filter(lambda r: r[0] == TITLE_RUNS)
        chases = runs | "ChaseRuns" >> beam.Filter(lambda r: r[0] == CHASE_RUNS)
        links = runs | "LinkRuns" >> beam.Filter(lambda r: r[0] == LINK_RUNS)
        resolved_parts = []
        for hop in range(self.max_hops):
            last = hop == self.max_hops - 1
            out = self._step(f"ChaseRedirectsHop{hop}", [titles, chases],
                             ChaseHopFn(hop, last, folder, shards, buffer))
            stats.append(out[STATS])
            resolved_parts.append(out[RUNS] | f"ResolvedRunsHop{hop}" >> beam.Filter(lambda r: r[0] == RESOLVED_RUNS))
            chases = out[RUNS] | f"ChaseRunsHop{hop + 1}" >> beam.Filter(lambda r, n=f"chase-{hop + 1}": r[0] == n)
        resolved = self._step("ResolveTitles", [titles, links, *resolved_parts], ResolveTitlesFn(
            self.keep_red_links, self.alias_shards, folder, shards, buffer))
        stats.append(resolved[STATS])
        alias_runs = resolved[RUNS] | "AliasRuns" >> beam.Filter(lambda r: r[0] == ALIAS_RUNS)
        alias_rows = self._step("BuildAliasRows", [alias_runs], BuildAliasRowsFn(
            self.output, self.labels, self.alias_shards, self.row_group_rows * 10, folder, shards, buffer),
            every_shard=self.alias_shards)
        stats.append(alias_rows[STATS])
        entity_runs = resolved[RUNS] | "EntityRuns" >> beam.Filter(lambda r: r[0] == ENTITY_RUNS)
        entities = self._step("CountEntityLinks", [entity_runs], CountEntityLinksFn(folder, shards, buffer))
        stats.append(entities[STATS])
        size = self.vocab_size
        cutoff = beam.pvalue.AsSingleton(
            entities.main
            | "CountHistogram" >> beam.CombineGlobally(_merge_histograms)
            | "CutOff" >> beam.Map(vocab_cutoff, size)
        )
        selected = (
            entity_runs
            | "LinkedByShard" >> beam.Map(_by_shard)
            | "GroupLinkedByShard" >> beam.GroupByKey()
            | "SelectEntityVocab" >> beam.ParDo(SelectVocabFn(folder, shards, buffer), cutoff=cutoff).with_outputs(
                STATS, main="main")
        ).main
        vocab = (
            selected
            | "CollectSelections" >> beam.combiners.ToList()
            | "VocabRows" >> beam.Map(_vocab_of, cutoff=cutoff)
        )
        vocab_ids = vocab | "VocabStoreRuns" >> beam.ParDo(VocabStoreRunsFn(folder, shards, buffer)).with_outputs(
            STATS, RUNS, main="main")
        store_runs = (
            (resolved[RUNS], alias_rows[RUNS], vocab_ids[RUNS])
            | "FlattenStoreSources" >> beam.Flatten()
            | "StoreRuns" >> beam.Filter(lambda r: r[0] == STORE_RUNS)
        )
        store = self._step("WriteLookupStore", [store_runs], WriteStoreShardFn(
            self.output, self.labels.top_aliases_per_page, self.labels.max_aliases_per_entity, folder, shards,
            buffer),
                           every_shard=shards)
        stats += [vocab_ids[STATS], store[STATS]]
        return {"store_shards": store.main, "alias_files": alias_rows.main, "vocab_rows": vocab, "stats": stats}
