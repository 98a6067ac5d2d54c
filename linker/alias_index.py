"""The alias candidate index: surface form -> candidate entities with priors, memory-mapped.

Mention detection and the alias prior need, for a surface form, the
vocabulary entities it names and p(entity | alias). The corpus's alias table
has ~18M (alias, entity) rows on enwiki: as Python objects that is 4-5 GB in
every worker. This index is built once, on the machine that launches a job,
and limited to what linking can use:

* rows of entities outside the corpus vocabulary are dropped (they cannot be
  linked); so are anchors used fewer than ``min_count`` times that are not also
  a title or a redirect of their entity (noise);
* each entity keeps at most ``top_k`` aliases (``--alias_top_k``, recorded in
  ``aliases.json``): its titles and redirects first, then the most linked;
* each alias keeps its ``max_candidates`` most linked entities.

Aliases are looked up case- and space-insensitively (:func:`alias_key`): the
rows of an alias's case variants are merged, their hyperlink counts summed,
and the prior is recomputed from the sums over every vocabulary entity of
the key (before the caps, so a cap never inflates a prior).

Files (``aliases.json`` last)::

    keys.bin / keys.offsets.npy / keys.hash.npy   the alias keys (sorted) and key -> position
    starts.npy      int64 [keys + 1]: each key's candidates are rows starts[k]:starts[k+1]
    entity_ids.npy  int32   candidates, most linked first (then by entity id)
    counts.npy      int64   hyperlinks with this key to this entity (case variants summed)
    priors.npy      float64 count / all hyperlinks with this key
    names.npy       uint8   1 when the key is a title or redirect of the entity
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass

import numpy as np

from linker.catalogue import AliasCandidate, alias_key
from linker.mmap_store import (
    StringColumn,
    StringHash,
    build_string_hash,
    load_npy,
    read_versioned_json,
    save_npy,
    write_arrow_strings,
    write_json,
)

log = logging.getLogger(__name__)

ALIASES_FILE = "aliases.json"
ALIASES_VERSION = 1


@dataclass(frozen=True, slots=True)
class AliasIndexSettings:
    min_count: int = 0
    top_k: int = 64
    max_candidates: int = 64

    def to_dict(self) -> dict:
        return {"min_count": self.min_count, "top_k": self.top_k, "max_candidates": self.max_candidates}


def _source_flags(sources_column) -> tuple[np.ndarray, np.ndarray]:
    """(is a title or redirect, has no source but 'anchor') per alias-table row."""
    import pyarrow.compute as pc

    n = len(sources_column)
    flat = pc.list_flatten(sources_column)
    parents = pc.list_parent_indices(sources_column).to_numpy()
    is_name_item = pc.is_in(flat, value_set=_pa_strings(["title", "redirect"])).to_numpy(zero_copy_only=False)
    not_anchor_item = pc.not_equal(flat, "anchor").to_numpy(zero_copy_only=False)
    is_name = np.bincount(parents[is_name_item], minlength=n) > 0
    anchor_only = np.bincount(parents[not_anchor_item], minlength=n) == 0
    return is_name, anchor_only


def _pa_strings(values):
    import pyarrow as pa

    return pa.array(values, type=pa.string())


def _run_ranks(sorted_groups: np.ndarray) -> np.ndarray:
    """Position of each element within its run of equal values (input sorted by group)."""
    n = len(sorted_groups)
    if not n:
        return np.zeros(0, dtype=np.int64)
    starts = np.r_[0, np.flatnonzero(sorted_groups[1:] != sorted_groups[:-1]) + 1]
    run_start = np.repeat(starts, np.diff(np.r_[starts, n]))
    return np.arange(n) - run_start


def build_alias_index(corpus_dir: str, folder: str, settings: AliasIndexSettings, fingerprint: str = "") -> dict:
    """Build the index of a corpus's alias table into ``folder``; returns the build report."""
    import pyarrow as pa
    import pyarrow.compute as pc

    from linker.catalogue import FIRST_ENTITY_ID, _join, read_parquet_folder

    os.makedirs(folder, exist_ok=True)
    meta_path = os.path.join(folder, ALIASES_FILE)
    if os.path.exists(meta_path):
        os.remove(meta_path)
    vocab = read_parquet_folder(_join(corpus_dir, "entity_vocab"), ["entity_id", "entity"])
    vocab_ids = vocab.column("entity_id").to_numpy().astype(np.int64)
    table = read_parquet_folder(_join(corpus_dir, "alias_table"), ["alias", "entity", "count", "sources"])
    report = {"alias_rows": table.num_rows}

    position = pc.index_in(table.column("entity"), value_set=vocab.column("entity").combine_chunks())
    valid = position.is_valid().to_numpy(zero_copy_only=False)
    entity = np.where(valid, vocab_ids[position.fill_null(0).to_numpy(zero_copy_only=False)], -1)
    valid &= entity >= FIRST_ENTITY_ID
    report["rows_of_vocabulary_entities"] = int(valid.sum())
    is_name, anchor_only = _source_flags(table.column("sources"))
    count = table.column("count").to_numpy().astype(np.int64)
    keep = valid & ~((count < settings.min_count) & anchor_only)
    report["rows_after_min_count"] = int(keep.sum())
    rows = np.flatnonzero(keep)

    # One key per distinct alias (case-folded, spaces collapsed); key ids follow the sorted keys.
    # Kept as Arrow arrays, not Python objects: ~14M distinct aliases on enwiki.
    aliases = table.column("alias").take(pa.array(rows)).combine_chunks() if len(rows) else _pa_strings([])
    distinct = pc.unique(aliases)
    distinct_keys = pa.concat_arrays([_pa_strings([alias_key(a) for a in distinct.slice(lo, 1 << 18).to_pylist()])
                                      for lo in range(0, len(distinct), 1 << 18)] or [_pa_strings([])])
    keys_sorted = pc.unique(distinct_keys)
    keys_sorted = keys_sorted.take(pc.sort_indices(keys_sorted))  # byte order of the UTF-8 keys
    key_of_distinct = pc.index_in(distinct_keys, value_set=keys_sorted).to_numpy(zero_copy_only=False).astype(np.int64)
    row_key = (key_of_distinct[pc.index_in(aliases, value_set=distinct).to_numpy(zero_copy_only=False)]
               if len(rows) else np.zeros(0, np.int64))
    del distinct, distinct_keys, aliases
    row_entity, row_count, row_name = entity[rows], count[rows], is_name[rows]

    # (key, entity) groups: counts summed, name flags or-ed.
    width = int(entity.max()) + 1 if len(entity) else 1
    pair = row_key * width + row_entity
    pairs, inverse = np.unique(pair, return_inverse=True)
    g_key, g_entity = pairs // width, pairs % width
    g_count = np.bincount(inverse, weights=row_count, minlength=len(pairs)).astype(np.int64)
    g_name = np.bincount(inverse, weights=row_name, minlength=len(pairs)) > 0
    key_total = np.bincount(g_key, weights=g_count, minlength=len(keys_sorted))
    g_prior = np.where(key_total[g_key] > 0, g_count / np.maximum(key_total[g_key], 1), 0.0)
    report["alias_entity_pairs"] = int(len(pairs))

    # At most top_k aliases per entity: names first, then by count, then by key.
    order = np.lexsort((g_key, -g_count, ~g_name, g_entity))
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = _run_ranks(g_entity[order])
    kept = rank < settings.top_k
    report["pairs_dropped_by_top_k"] = int((~kept).sum())
    # At most max_candidates entities per key: most linked first, then by entity id.
    order = np.lexsort((g_entity, -g_count, g_key))
    order = order[kept[order]]
    cand_rank = _run_ranks(g_key[order])
    report["pairs_dropped_by_max_candidates"] = int((cand_rank >= settings.max_candidates).sum())
    order = order[cand_rank < settings.max_candidates]

    total_mass = int(g_count.sum())
    report["hyperlinks_covered"] = float(g_count[order].sum() / total_mass) if total_mass else 1.0
    used_keys, starts = np.unique(g_key[order], return_index=True)
    write_arrow_strings(folder, "keys", keys_sorted.take(pa.array(used_keys)))
    save_npy(os.path.join(folder, "starts.npy"), np.r_[starts, len(order)].astype(np.int64))
    save_npy(os.path.join(folder, "entity_ids.npy"), g_entity[order].astype(np.int32))
    save_npy(os.path.join(folder, "counts.npy"), g_count[order])
    save_npy(os.path.join(folder, "priors.npy"), g_prior[order].astype(np.float64))
    save_npy(os.path.join(folder, "names.npy"), g_name[order].astype(np.uint8))
    build_string_hash(StringColumn(folder, "keys"), os.path.join(folder, "keys.hash.npy"))
    report.update(keys=int(len(used_keys)), candidates=int(len(order)))
    meta = {"version": ALIASES_VERSION, "corpus_fingerprint": fingerprint, "settings": settings.to_dict(),
            "report": report}
    write_json(meta_path, meta)
    log.info("alias candidate index: %s", json.dumps(report))
    return report


def read_alias_meta(folder: str) -> dict | None:
    return read_versioned_json(os.path.join(folder, ALIASES_FILE), ALIASES_VERSION)


class MappedAliasIndex:
    """Lookups in a built index; the same interface as :class:`linker.catalogue.AliasIndex`."""

    def __init__(self, folder: str) -> None:
        self.meta = read_alias_meta(folder)
        if self.meta is None:
            raise FileNotFoundError(f"no complete alias candidate index in {folder}")
        self.keys = StringColumn(folder, "keys")
        self.hash = StringHash(self.keys, os.path.join(folder, "keys.hash.npy"))
        self.starts = load_npy(os.path.join(folder, "starts.npy"))
        self.entity_ids = load_npy(os.path.join(folder, "entity_ids.npy"))
        self.counts = load_npy(os.path.join(folder, "counts.npy"))
        self.priors = load_npy(os.path.join(folder, "priors.npy"))
        self.names = load_npy(os.path.join(folder, "names.npy"))

    def __len__(self) -> int:
        return len(self.keys)

    def has_key(self, key: str) -> bool:
        return self.hash.find(key) >= 0

    def __contains__(self, surface: str) -> bool:
        return self.has_key(alias_key(surface))

    def lookup_key(self, key: str) -> tuple[AliasCandidate, ...]:
        k = self.hash.find(key)
        if k < 0:
            return ()
        lo, hi = int(self.starts[k]), int(self.starts[k + 1])
        return tuple(AliasCandidate(int(e), float(p), int(c), bool(n)) for e, p, c, n in zip(
            self.entity_ids[lo:hi].tolist(), self.priors[lo:hi].tolist(), self.counts[lo:hi].tolist(),
            self.names[lo:hi].tolist()))

    def lookup(self, surface: str) -> tuple[AliasCandidate, ...]:
        return self.lookup_key(alias_key(surface))
