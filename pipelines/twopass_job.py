"""The two-pass corpus job (the default): global tables from small records, then passages streamed.

Pass 1, tables (only small records cross a shuffle):
  ParseWikiDump         read the dump's ranges (in parallel by multistream byte ranges), classify and
                        extract each page where it is read; articles leave as small records only
  ResolveRedirects      follow redirect chains by iterated key joins (loops counted)
  ResolveLinks          every link target -> its entity; anchor and entity link counts
  BuildAliasTable       (alias, entity) rows with hyperlink counts, priors, sources
  SelectEntityVocab     the N most-linked entities, ids from 3
  UsableTopAliases      the labeller's alias filters, the best aliases of each entity (capped)
  BuildLookupStore      title -> resolution, ranked aliases, vocabulary id, first article: SQLite
                        shard files under OUT/lookup/, built from sorted runs
Pass 2, passages (starts when the store is written: it is pass 2's side input):
  WritePassagesByRange  each range read and extracted again; links resolved and label candidates
                        picked by lookups; labels (and --blink_model's), tokens, windows; Parquet
                        files per range and split, and the range's entity descriptions
Then WriteManifest, last (removes OUT/lookup/ and OUT/progress/).
"""
from __future__ import annotations

import dataclasses

import apache_beam as beam

from pipelines.config import WikiMentionsConfig
from pipelines.job_common import labels_for_site, parse_options, write_manifest, write_small_outputs
from pipelines.records import SiteInfo
from pipelines.transforms.aliases import BuildAliasTable, SelectEntityVocab
from pipelines.transforms.by_range import WritePassagesByRange, WritePassagesByRangeFn
from pipelines.transforms.lookup import BuildLookupStore, UsableTopAliases
from pipelines.transforms.parse import ParseWikiDump
from pipelines.transforms.passages import PassageOptions
from pipelines.transforms.resolve import ResolveLinks, ResolveRedirects


def build_twopass_pipeline(p: beam.Pipeline, cfg: WikiMentionsConfig, site: SiteInfo, ranges: list, job: dict) -> None:
    """Add the two-pass job to ``p``."""
    labels = labels_for_site(cfg.labels, site)
    job = {**job, "effective_labels": dataclasses.asdict(labels)}
    bound = cfg.max_join_group
    options = parse_options(cfg, site, progress=True)
    # -- pass 1
    parsed = p | "ParseWikiDump" >> ParseWikiDump(ranges, site, options, spread_pages=False)
    resolved = (
        {"redirects": parsed["redirects"], "page_kinds": parsed["page_kinds"]}
        | "ResolveRedirects" >> ResolveRedirects(cfg.max_redirect_hops, bound)
    )
    links = (
        {"articles": parsed["articles"], "resolutions": resolved["resolutions"]}
        | "ResolveLinks" >> ResolveLinks(cfg.keep_red_links, bound, emit_refs=False)
    )
    aliases = (
        {"anchors": links["anchors"], "resolutions": resolved["resolutions"]}
        | "BuildAliasTable" >> BuildAliasTable(bound)
    )
    vocab_rows = links["entity_links"] | "SelectEntityVocab" >> SelectEntityVocab(cfg.entity_vocab_size)
    top = aliases["rows"] | "UsableTopAliases" >> UsableTopAliases(labels)
    first_articles = (
        parsed["articles"]
        | "ArticleTitles" >> beam.Map(lambda a: (a.title, a.page_id))
        | "FirstPagePerTitle" >> beam.CombinePerKey(min)
    )
    store = {
        "resolutions": resolved["resolutions"], "top_aliases": top["top_aliases"], "vocab_rows": vocab_rows,
        "first_articles": first_articles,
    } | "BuildLookupStore" >> BuildLookupStore(cfg.output, cfg.lookup_shards, cfg.sort_buffer_rows)
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
        cfg.output, len(ranges), site, options, labels, passage_options, cfg.keep_red_links,
        cfg.description_max_chars, cfg.row_group_rows, cfg.sort_buffer_rows, linker_config)
    passages = {
        "ranges": (
            p
            | "IndexedRanges" >> beam.Create(list(enumerate(ranges)), reshuffle=False)
            | "SpreadIndexedRanges" >> beam.Reshuffle()
        ),
        "store_shards": store["shards"],
    } | "WritePassagesByRange" >> WritePassagesByRange(pass2)
    files = [passages["files"], *write_small_outputs(p, cfg, aliases["rows"], vocab_rows, parsed["dead"])]
    stats = (parsed["stats"] + resolved["stats"] + links["stats"] + aliases["stats"] + top["stats"] + store["stats"]
             + passages["stats"])
    write_manifest(p, cfg, site, job, files, stats)
