"""The corpus job's common parts: the site-dependent options, and the outputs that only small records reach
(vocabulary, dead letters, tokenizer, stats and manifest)."""
from __future__ import annotations

import dataclasses
from operator import itemgetter

import apache_beam as beam

from pipelines.config import WikiMentionsConfig
from pipelines.corpus.labels import LabelConfig
from pipelines.records import DeadLetter, SiteInfo
from pipelines.transforms.parse import ParseOptions
from pipelines.transforms.stats import SumStats
from pipelines.transforms.write import SaveTokenizerFn, ShardSpec, WriteManifestFn, WriteShards
from pipelines.wikitext import DisambiguationConfig
from schemas import passage_schema
from wikiedm import storage

SPLITS = ("train", "validation")
VOCAB_ORDER = itemgetter("entity_id")
PROGRESS_FOLDER = "progress"  # OUT/progress/: the readers' progress records (removed with the manifest)


def dead_letter_row(dl: DeadLetter) -> dict:
    return {"stage": dl.stage, "reason": dl.reason, "page_id": dl.page_id, "title": dl.title,
            "detail": dl.detail, "source": dl.source}


def dead_letter_order(row: dict):
    return (row["stage"], row["reason"], row["page_id"] if row["page_id"] is not None else -1,
            row["title"] or "", row["source"], row["detail"])


def site_summary(site: SiteInfo) -> dict:
    return {
        "dbname": site.dbname,
        "language": site.language,
        "sitename": site.sitename,
        "base": site.base,
        "generator": site.generator,
        "case": site.case,
        "schema_version": site.schema_version,
        "siteinfo_in_dump": site.from_dump,
        "namespaces": {str(ns.id): ns.name for ns in site.namespaces},
    }


def labels_for_site(labels: LabelConfig, site: SiteInfo) -> LabelConfig:
    """Adapt the language-dependent label defaults (stopwords, shortest alias, language, title case
    rule) to the dump's siteinfo; values the user set explicitly are kept."""
    defaults = LabelConfig()
    adapted = LabelConfig.for_language(site.language) if site.language not in ("", "en", "simple") else defaults
    adapted = dataclasses.replace(adapted, language=site.language, title_case=site.case)
    changes = {name: getattr(adapted, name) for name in ("stopwords", "min_alias_chars", "language", "title_case")
               if getattr(labels, name) == getattr(defaults, name)}
    return dataclasses.replace(labels, **changes)


def disambiguation_for_site(templates: list, site: SiteInfo) -> DisambiguationConfig:
    """The built-in per-language lists, or the user's list for this wiki when given."""
    if not templates:
        return DisambiguationConfig()
    return DisambiguationConfig(templates={site.dbname: tuple(templates)}, default_language=site.dbname)


def parse_options(cfg: WikiMentionsConfig, site: SiteInfo, progress: bool = False) -> ParseOptions:
    return ParseOptions(
        max_page_bytes=cfg.max_page_mb << 20,
        max_wikitext_chars=cfg.max_wikitext_chars,
        progress_every_s=cfg.progress_every_s,
        disambiguation=disambiguation_for_site(cfg.disambiguation_templates, site),
        progress_folder=storage.join(cfg.output, PROGRESS_FOLDER) if progress else "",
    )


def write_shards(rows, label: str, cfg: WikiMentionsConfig, schema_name: str, spec: ShardSpec, order,
                 row_group_rows: int | None = None):
    return rows | label >> WriteShards(cfg.output, schema_name, spec, order, row_group_rows or cfg.row_group_rows,
                                       cfg.sort_buffer_rows)


def write_small_outputs(p, cfg: WikiMentionsConfig, vocab_rows, dead_letters) -> list:
    """The vocabulary, the dead letters and the tokenizer -> their file records (BuildTables writes the alias
    table, pass 2 the passages and descriptions)."""
    vocab_files = write_shards(
        vocab_rows | "VocabRowsOut" >> beam.FlatMap(lambda rows: [("entity_vocab", "", r) for r in rows]),
        "WriteEntityVocab", cfg, "entity_vocab",
        ShardSpec("entity_vocab", ("entity_vocab",), single_file="entity_vocab.parquet"),
        VOCAB_ORDER, cfg.row_group_rows * 10)
    dead_files = write_shards(
        dead_letters | "DeadLetterRows" >> beam.Map(lambda dl: ("dead_letters", "", dead_letter_row(dl))),
        "WriteDeadLetters", cfg, "dead_letters",
        ShardSpec("dead_letters", ("dead_letters",), single_file="dead_letters.parquet"),
        dead_letter_order)
    tokenizer_files = (
        p
        | "TokenizerOnce" >> beam.Create([None])
        | "SaveTokenizer" >> beam.ParDo(SaveTokenizerFn(cfg.output, cfg.tokenizer))
    )
    return [vocab_files, dead_files, tokenizer_files]


def write_manifest(p, cfg: WikiMentionsConfig, site: SiteInfo, job: dict, files: list, stats: list) -> None:
    """Sum the stats, then (last) remove stale files and write stats.json and manifest.json."""
    all_files = tuple(files) | "FlattenFiles" >> beam.Flatten()
    summed = tuple(stats) | "SumStats" >> SumStats()
    (
        p
        | "ManifestOnce" >> beam.Create([None])
        | "WriteManifest" >> beam.ParDo(
            WriteManifestFn(cfg.output, cfg.to_dict(), site_summary(site), job,
                            schemas={"passages": passage_schema(cfg.passage_text)}),
            files=beam.pvalue.AsList(all_files),
            stats=beam.pvalue.AsList(summed),
        )
    )
