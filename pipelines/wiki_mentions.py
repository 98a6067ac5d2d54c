"""The corpus job: a Wikipedia XML dump -> entity-annotated 128-token passages.

    wikiedm corpus --input DUMP --output OUT [--config FILE.yaml] [--runner Direct] [Beam options]
    python -m pipelines.wiki_mentions ... / beam run pipelines/wiki_mentions.py ...   (the same command line)

Steps (each a named PTransform):
  ParseWikiDump         read the dump (in parallel by multistream byte ranges), keep
                        main-namespace pages: articles, redirects, disambiguation pages
  ResolveRedirects      follow redirect chains by iterated key joins (loops counted)
  ResolveLinks          every link target -> its entity; anchor and entity counts
  BuildAliasTable       (alias, entity) rows with hyperlink counts, priors, sources
  SelectEntityVocab     the N most-linked entities, ids from 3
  LabelMissingMentions  EDMem's same-page and title-alias labels, joined per page
  AddBlinkLabels        (with --blink_model) BLINK bi-encoder labels for unlinked spans
  ChunkWindows          tokenise, cut windows of --window tokens sharing --overlap
  WriteShards           sorted, sharded Parquet (zstd); then WriteManifest, last

OUT/ holds passages/, alias_table/, entity_vocab/, dead_letters/, tokenizer/,
stats.json and manifest.json; a folder without manifest.json is an
incomplete run.
"""
from __future__ import annotations

import dataclasses
import json
import logging
import sys
import time
from operator import itemgetter

import apache_beam as beam
from apache_beam.options.pipeline_options import StandardOptions, TestOptions

from pipelines.config import WikiMentionsConfig
from pipelines.corpus.descriptions import first_paragraph
from pipelines.corpus.labels import LabelConfig
from pipelines.dump import DumpError, default_index_path, plan_read_ranges, read_siteinfo
from pipelines.launch import beam_options, configure_logging
from pipelines.records import DeadLetter, SiteInfo
from pipelines.transforms.aliases import BuildAliasTable, SelectEntityVocab
from pipelines.transforms.parse import ParseOptions, ParseWikiDump
from pipelines.transforms.passages import ChunkWindows, LabelMissingMentions, PassageOptions
from pipelines.transforms.resolve import ResolveLinks, ResolveRedirects
from pipelines.transforms.stats import SumStats
from pipelines.transforms.write import SaveTokenizerFn, ShardSpec, WriteManifestFn, WriteShards
from pipelines.wikitext import DisambiguationConfig
from schemas import passage_schema
from wikiedm import storage

log = logging.getLogger("wiki_mentions")

SPLITS = ("train", "validation")
PASSAGE_ORDER = itemgetter("page_id", "window_index")
ALIAS_ORDER = itemgetter("alias", "entity")
VOCAB_ORDER = itemgetter("entity_id")


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


def _dead_letter_row(dl: DeadLetter) -> dict:
    return {"stage": dl.stage, "reason": dl.reason, "page_id": dl.page_id, "title": dl.title,
            "detail": dl.detail, "source": dl.source}


def _dead_letter_order(row: dict):
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


def build_pipeline(p: beam.Pipeline, cfg: WikiMentionsConfig, site: SiteInfo, ranges: list, job: dict) -> None:
    """Add the whole job to ``p``."""
    out = cfg.output
    labels = labels_for_site(cfg.labels, site)
    job = {**job, "effective_labels": dataclasses.asdict(labels)}
    bound = cfg.max_join_group
    parse_options = ParseOptions(
        max_page_bytes=cfg.max_page_mb << 20,
        max_wikitext_chars=cfg.max_wikitext_chars,
        progress_every_s=cfg.progress_every_s,
        disambiguation=disambiguation_for_site(cfg.disambiguation_templates, site),
    )
    parsed = p | "ParseWikiDump" >> ParseWikiDump(ranges, site, parse_options)
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

    def write(rows, label, schema_name, spec, order, row_group_rows=cfg.row_group_rows, schema=None, packed=False):
        return rows | label >> WriteShards(out, schema_name, spec, order, row_group_rows, cfg.sort_buffer_rows, schema,
                                           packed)

    description_files = write(
        parsed["articles"]
        | "DescribeVocabEntities" >> beam.FlatMap(
            describe_entity, vocab=beam.pvalue.AsDict(vocab), max_chars=cfg.description_max_chars)
        | "OnePagePerEntity" >> beam.CombinePerKey(_first_page)
        | "DescriptionRows" >> beam.Map(_description_row),
        "WriteEntityDescriptions", "entity_descriptions",
        ShardSpec("entity_descriptions", ("entity_descriptions",), cfg.description_shards, cfg.descriptions_per_shard),
        VOCAB_ORDER)
    passage_files = write(
        chunks["rows"], "WriteShards", "passages",
        ShardSpec("passages", SPLITS, cfg.num_shards, cfg.passages_per_shard), PASSAGE_ORDER,
        schema=passage_schema(cfg.passage_text), packed=True)  # one element per page: its windows, in Arrow
    alias_files = write(
        aliases["rows"] | "AliasRowsOut" >> beam.Map(lambda r: ("alias_table", r["alias"], r)),
        "WriteAliasTable", "alias_table",
        ShardSpec("alias_table", ("alias_table",), cfg.alias_shards, cfg.alias_rows_per_shard),
        ALIAS_ORDER, cfg.row_group_rows * 10)
    vocab_files = write(
        vocab_rows | "VocabRowsOut" >> beam.FlatMap(lambda rows: [("entity_vocab", "", r) for r in rows]),
        "WriteEntityVocab", "entity_vocab",
        ShardSpec("entity_vocab", ("entity_vocab",), single_file="entity_vocab.parquet"),
        VOCAB_ORDER, cfg.row_group_rows * 10)
    dead = write(
        (parsed["dead"],)
        | "FlattenDeadLetters" >> beam.Flatten()
        | "DeadLetterRows" >> beam.Map(lambda dl: ("dead_letters", "", _dead_letter_row(dl))),
        "WriteDeadLetters", "dead_letters",
        ShardSpec("dead_letters", ("dead_letters",), single_file="dead_letters.parquet"),
        _dead_letter_order)
    tokenizer_files = (
        p
        | "TokenizerOnce" >> beam.Create([None])
        | "SaveTokenizer" >> beam.ParDo(SaveTokenizerFn(out, cfg.tokenizer))
    )
    files = (passage_files, alias_files, vocab_files, description_files, dead, tokenizer_files) | "FlattenFiles" >> beam.Flatten()
    stats = tuple(
        parsed["stats"] + resolved["stats"] + links["stats"] + aliases["stats"] + labeled["stats"] + extra_stats
        + chunks["stats"]
    ) | "SumStats" >> SumStats()
    (
        p
        | "ManifestOnce" >> beam.Create([None])
        | "WriteManifest" >> beam.ParDo(
            WriteManifestFn(out, cfg.to_dict(), site_summary(site), job,
                            schemas={"passages": passage_schema(cfg.passage_text)}),
            files=beam.pvalue.AsList(files),
            stats=beam.pvalue.AsList(stats),
        )
    )


def plan_input(cfg: WikiMentionsConfig) -> tuple[SiteInfo, list]:
    """Read the dump's header and plan the read ranges (raises DumpError)."""
    site = read_siteinfo(cfg.input)
    index = None
    if cfg.index.lower() != "none":
        index = cfg.index or default_index_path(cfg.input)
    ranges = plan_read_ranges(cfg.input, index, target_bytes=cfg.read_range_mb << 20)
    return site, ranges


def template_summary(counters: dict, top: int = 10) -> list[str]:
    """Summary lines on templates: calls by outcome, and the most frequent dropped names
    (what the corpus loses; add renderers for them in pipelines/wikitext/templates.py)."""
    outcomes = {k: counters.get(f"templates/{k}", 0) for k in ("rendered", "omitted", "dropped")}
    if not any(outcomes.values()):
        return []
    lines = ["  templates: " + ", ".join(f"{k} {v:,}" for k, v in outcomes.items())]
    dropped = sorted(((v, k.split("/", 1)[1]) for k, v in counters.items()
                      if k.startswith("templates_dropped/") and k != "templates_dropped/(other)"),
                     key=lambda item: (-item[0], item[1]))[:top]
    if dropped:
        lines.append("  top dropped templates: " + ", ".join(f"{name} {n:,}" for n, name in dropped))
    return lines


def print_summary(output: str, seconds: float) -> None:
    """The end-of-run summary of a local run, from the stats the job wrote."""
    stats = json.loads(storage.read_bytes(storage.join(output, storage.STATS_FILE)))
    manifest = json.loads(storage.read_bytes(storage.join(output, storage.MANIFEST)))
    s = stats["summary"]
    shards = [f for f in manifest["files"] if f["kind"] == "passages"]
    lines = [
        f"wiki_mentions: done in {seconds:.1f}s -> {output}",
        f"  pages read        {s['pages_read']:>10,}",
        f"  articles          {s['articles']:>10,}   redirects {s['redirects']:,}   disambiguation pages {s['disambiguation_pages']:,}",
    ]
    for split in SPLITS:
        lines.append(f"  passages/{split:<10}{s['passages'].get(split, 0):>9,}")
    for source, n in s["mentions"].items():
        lines.append(f"  mentions/{source:<17}{n:>10,}")
    if s["mention_ratio_to_hyperlinks"]:
        lines.append(f"  all mentions / hyperlinks: x{s['mention_ratio_to_hyperlinks']:.2f} (EDMem on full enwiki: x1.88)")
    dropped = {k: v for k, v in stats["counters"].items() if k.startswith("links_dropped/")}
    if dropped:
        lines.append("  links dropped: " + ", ".join(f"{k.split('/', 1)[1]} {v:,}" for k, v in sorted(dropped.items())))
    lines.extend(template_summary(stats["counters"]))
    red, kept = stats["counters"].get("links_dropped/red_link", 0), stats["counters"].get("links/kept", 0)
    if kept and red > kept / 2:
        lines.append(f"  note: {red / kept:.0%} of links point to pages absent from this dump; "
                     "for a partial dump, --keep_red_links true keeps them as entities")
    lines.append(f"  dead letters      {s['dead_letters']:>10,}   (dead_letters/dead_letters.parquet)")
    if s.get("largest_groups"):
        largest = max(s["largest_groups"].items(), key=lambda kv: kv[1])
        lines.append(f"  largest join group {largest[1]:>9,}   ({largest[0]}; bound --max_join_group; stats.json: volume)")
    lines.append(f"  shards written    {len(shards):>10,}   ({sum(f['rows'] for f in shards):,} passages)")
    print("\n".join(lines), flush=True)


def run(argv: list[str] | None = None) -> int:
    from pipelines.config import corpus_parser
    from pipelines.output_guard import guard_output

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        cfg, flags, beam_args = corpus_parser().check(argv)
        options = beam_options(beam_args)
        site, ranges = plan_input(cfg)
        dry_run = bool(options.view_as(TestOptions).dry_run)  # Dataflow: build and validate the job only
        found = guard_output(cfg.output, cfg.to_dict(), flags.overwrite, dry_run)
    except (ValueError, DumpError, OSError) as exc:
        print(f"wikiedm corpus: error: {exc}", file=sys.stderr)
        return 2
    if found == "overwritten":
        log.info("--overwrite true: removed the corpus of another dump or config from %s", cfg.output)
    manifest_path = storage.join(cfg.output, storage.MANIFEST)
    if not dry_run and storage.exists(manifest_path):
        # The manifest is the commit point: drop it first so that, until this
        # run completes, the folder reads as incomplete (never old + new).
        storage.delete_files([manifest_path])
    if cfg.blink_model:  # the linker's KB, encodings, alias candidate index and combination: built once, here
        from pipelines.transforms.blink import corpus_job_linker_config, prepare_linker

        prepare_linker(corpus_job_linker_config(cfg, site.language))
    runner = options.view_as(StandardOptions).runner
    job = {"runner": runner, "read_ranges": len(ranges), "input": cfg.input}
    log.info("reading %s (%s, %s) in %d range(s) with %s", cfg.input, site.dbname or "unknown wiki",
             f"schema {site.schema_version}" if site.schema_version else "no schema version", len(ranges), runner)
    started = time.monotonic()
    pipeline = beam.Pipeline(options=options)
    build_pipeline(pipeline, cfg, site, ranges, job)
    result = pipeline.run()
    if dry_run:
        print(f"wiki_mentions: dry run with {runner}: the job graph was built and not submitted")
        return 0
    result.wait_until_finish()
    if storage.exists(manifest_path):
        print_summary(cfg.output, time.monotonic() - started)
        return 0
    print(f"wiki_mentions: error: the job finished without writing {manifest_path}", file=sys.stderr)
    return 1


def main() -> None:
    configure_logging()
    sys.exit(run())


if __name__ == "__main__":
    main()
