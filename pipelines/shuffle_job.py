"""The shuffle job: the corpus job as it was before the two-pass job (``--job shuffle``).

Kept as the two-pass job's test oracle (tests/test_twopass_equality.py runs both on every shared
dump and compares their outputs row for row); not for production runs: article text crosses four
shuffles here (SpreadPages, JoinPageParts, DescribeVocabEntities' side-input wait, WriteShards), and
the DirectRunner holds each of them whole. Steps:

  ParseWikiDump         read the dump (in parallel by multistream byte ranges), spread the pages
  ResolveRedirects      follow redirect chains by iterated key joins (loops counted)
  ResolveLinks          every link target -> its entity; anchor and entity counts
  BuildAliasTable       (alias, entity) rows with hyperlink counts, priors, sources
  SelectEntityVocab     the N most-linked entities, ids from 3
  LabelMissingMentions  EDMem's same-page and title-alias labels, joined per page
  AddBlinkLabels        (with --blink_model) BLINK bi-encoder labels for unlinked spans
  ChunkWindows          tokenise, cut windows of --window tokens sharing --overlap
  WriteShards           sorted, sharded Parquet (zstd, --num_shards); then WriteManifest, last
"""
from __future__ import annotations

import dataclasses

import apache_beam as beam

from pipelines.config import WikiMentionsConfig
from pipelines.corpus.descriptions import first_paragraph
from pipelines.job_common import (
    PASSAGE_ORDER,
    SPLITS,
    VOCAB_ORDER,
    labels_for_site,
    parse_options,
    write_manifest,
    write_shards,
    write_small_outputs,
)
from pipelines.records import SiteInfo
from pipelines.transforms.aliases import BuildAliasTable, SelectEntityVocab
from pipelines.transforms.parse import ParseWikiDump
from pipelines.transforms.passages import ChunkWindows, LabelMissingMentions, PassageOptions
from pipelines.transforms.resolve import ResolveLinks, ResolveRedirects
from pipelines.transforms.write import ShardSpec
from schemas import passage_schema


def describe_entity(article, vocab: dict, max_chars: int):
    """An article of a vocabulary entity -> (entity, (page_id, description row)) (BLINK's candidate text)."""
    entity_id = vocab.get(article.title)
    if entity_id is not None:
        yield article.title, (article.page_id, {
            "entity_id": entity_id, "entity": article.title,
            "description": first_paragraph(article.text, max_chars)})


def _first_page(descriptions):
    """Of several articles with one title (a broken dump), the description of the smallest page id."""
    return min(descriptions, key=lambda item: item[0])


def _description_row(kept):
    """(entity, (page id, description row)) -> the row, for WriteShards."""
    entity, (_page_id, row) = kept
    return "entity_descriptions", entity, row


def build_shuffle_pipeline(p: beam.Pipeline, cfg: WikiMentionsConfig, site: SiteInfo, ranges: list, job: dict) -> None:
    """Add the shuffle job to ``p``."""
    labels = labels_for_site(cfg.labels, site)
    job = {**job, "effective_labels": dataclasses.asdict(labels)}
    bound = cfg.max_join_group
    parsed = p | "ParseWikiDump" >> ParseWikiDump(ranges, site, parse_options(cfg, site))
    resolved = (
        {"redirects": parsed["redirects"], "page_kinds": parsed["page_kinds"]}
        | "ResolveRedirects" >> ResolveRedirects(cfg.max_redirect_hops, bound)
    )
    links = (
        {"articles": parsed["articles"], "resolutions": resolved["resolutions"]}
        | "ResolveLinks" >> ResolveLinks(cfg.keep_red_links, bound)
    )
    aliases = (
        {"anchors": links["anchors"], "resolutions": resolved["resolutions"]}
        | "BuildAliasTable" >> BuildAliasTable(bound)
    )
    vocab_rows = links["entity_links"] | "SelectEntityVocab" >> SelectEntityVocab(cfg.entity_vocab_size)
    labeled = (
        {"articles": parsed["articles"], "entity_refs": links["entity_refs"],
         "entity_links": links["entity_links"], "alias_rows": aliases["rows"]}
        | "LabelMissingMentions" >> LabelMissingMentions(labels, bound)
    )
    passage_options = PassageOptions(
        tokenizer=cfg.tokenizer, window=cfg.window, overlap=cfg.overlap,
        validation_fraction=cfg.validation_fraction, split_salt=cfg.split_salt, passage_text=cfg.passage_text,
    )
    articles_to_chunk = labeled["articles"]
    extra_stats: list = []
    if cfg.blink_model:
        from pipelines.transforms.blink import AddBlinkLabels, corpus_job_linker_config

        blink = articles_to_chunk | "AddBlinkLabels" >> AddBlinkLabels(corpus_job_linker_config(cfg, site.language))
        articles_to_chunk, extra_stats = blink["articles"], list(blink["stats"])
    vocab = vocab_rows | "VocabPairs" >> beam.FlatMap(lambda rows: [(r["entity"], r["entity_id"]) for r in rows])
    chunks = {"articles": articles_to_chunk, "vocab": vocab} | "ChunkWindows" >> ChunkWindows(passage_options, packed=True)

    description_files = write_shards(
        parsed["articles"]
        | "DescribeVocabEntities" >> beam.FlatMap(
            describe_entity, vocab=beam.pvalue.AsDict(vocab), max_chars=cfg.description_max_chars)
        | "OnePagePerEntity" >> beam.CombinePerKey(_first_page)
        | "DescriptionRows" >> beam.Map(_description_row),
        "WriteEntityDescriptions", cfg, "entity_descriptions",
        ShardSpec("entity_descriptions", ("entity_descriptions",), cfg.description_shards, cfg.descriptions_per_shard),
        VOCAB_ORDER)
    passage_files = write_shards(
        chunks["rows"], "WriteShards", cfg, "passages",
        ShardSpec("passages", SPLITS, cfg.num_shards, cfg.passages_per_shard), PASSAGE_ORDER,
        schema=passage_schema(cfg.passage_text), packed=True)  # one element per page: its windows, in Arrow
    files = [passage_files, description_files,
             *write_small_outputs(p, cfg, aliases["rows"], vocab_rows, parsed["dead"])]
    stats = (parsed["stats"] + resolved["stats"] + links["stats"] + aliases["stats"] + labeled["stats"] + extra_stats
             + chunks["stats"])
    write_manifest(p, cfg, site, job, files, stats)
