"""The two-pass corpus job (the default): global tables from small records, then passages streamed.

Pass 1, tables (only the paths of sorted run files cross a shuffle):
  ParseWikiDump         read the dump's ranges (in parallel by multistream byte ranges), classify and
                        extract each page where it is read; the articles go to a compressed cache
                        (OUT/article_cache/, in chunks: pass 2's units); titles, redirects and link counts
                        go to sorted run files (OUT/tables/), partitioned by a hash of their key
  BuildTables           steps over the runs, one shard each (pipelines.transforms.tables): redirect
                        hops, title resolution and link counts, alias rows (the alias_table files), each
                        entity's best usable aliases, the N most-linked entities (the vocabulary), and the
                        lookup store: title -> resolution, ranked aliases, vocabulary id, first article,
                        as SQLite shard files under OUT/lookup/
Pass 2, passages (starts when the store is written: it is pass 2's side input):
  WritePassagesByRange  each chunk of cached articles (or, with --article_cache false, each range read
                        and extracted again): links resolved and label candidates picked by lookups;
                        labels (and --blink_model's), tokens, windows; Parquet files per unit and
                        split, and the unit's entity descriptions
Then WriteManifest, last (removes OUT/article_cache/, OUT/tables/, OUT/lookup/ and OUT/progress/).
"""
from __future__ import annotations

import dataclasses

import apache_beam as beam

from pipelines.config import WikiMentionsConfig
from pipelines.job_common import labels_for_site, parse_options, write_manifest, write_small_outputs
from pipelines.records import SiteInfo
from pipelines.transforms.by_range import WritePassagesByRange, WritePassagesByRangeFn
from pipelines.transforms.parse import ParseWikiDump
from pipelines.transforms.passages import PassageOptions
from pipelines.transforms.tables import TABLES_FOLDER, BuildTables
from wikiedm import storage

ARTICLE_CACHE_FOLDER = "article_cache"  # OUT/article_cache/: pass 1's extracted articles (removed at the end)


def build_twopass_pipeline(p: beam.Pipeline, cfg: WikiMentionsConfig, site: SiteInfo, ranges: list, job: dict) -> None:
    """Add the two-pass job to ``p``."""
    labels = labels_for_site(cfg.labels, site)
    job = {**job, "effective_labels": dataclasses.asdict(labels)}
    options = parse_options(cfg, site, progress=True)
    # -- pass 1
    cache = storage.join(cfg.output, ARTICLE_CACHE_FOLDER) if cfg.article_cache else ""
    shards = cfg.lookup_shards
    alias_shards = cfg.alias_shards or shards
    parsed = p | "ParseWikiDump" >> ParseWikiDump(
        ranges, site, options, cache_folder=cache, chunk_articles=cfg.cache_chunk_articles,
        runs_folder=storage.join(cfg.output, TABLES_FOLDER), run_shards=shards, run_buffer=cfg.sort_buffer_rows)
    tables = parsed["runs"] | "BuildTables" >> BuildTables(
        cfg.output, labels, cfg.keep_red_links, cfg.max_redirect_hops, cfg.entity_vocab_size, shards, alias_shards,
        cfg.row_group_rows, cfg.sort_buffer_rows)
    # -- pass 2
    linker_config = None
    if cfg.blink_model:
        from pipelines.transforms.blink import corpus_job_linker_config

        linker_config = corpus_job_linker_config(cfg, site.language)
    passage_options = PassageOptions(
        tokenizer=cfg.tokenizer, window=cfg.window, overlap=cfg.overlap,
        validation_fraction=cfg.validation_fraction, split_salt=cfg.split_salt, passage_text=cfg.passage_text,
    )
    pass2 = WritePassagesByRangeFn(
        cfg.output, ranges, site, options, labels, passage_options, cfg.keep_red_links,
        cfg.description_max_chars, cfg.row_group_rows, cfg.sort_buffer_rows, linker_config)
    passages = {"units": parsed["chunks"], "store_shards": tables["store_shards"]} | (
        "WritePassagesByRange" >> WritePassagesByRange(pass2))
    files = [passages["files"], tables["alias_files"],
             *write_small_outputs(p, cfg, tables["vocab_rows"], parsed["dead"])]
    stats = parsed["stats"] + tables["stats"] + passages["stats"]
    write_manifest(p, cfg, site, job, files, stats)
