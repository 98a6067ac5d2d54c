"""The corpus job: a Wikipedia XML dump -> entity-annotated 128-token passages.

    wikiedm corpus --input DUMP --output OUT [--config FILE.yaml] [--runner Direct] [Beam options]
    python -m pipelines.wiki_mentions ... / beam run pipelines/wiki_mentions.py ...   (the same command line)

Two passes over the dump in one Beam pipeline (pipelines/twopass_job.py has the steps): pass 1 builds
the global tables (redirects, link resolution, alias table, vocabulary) from small records and writes
them, with a lookup store; pass 2 reads each range again and labels, tokenises and writes its passages
by lookups, so no article text crosses a shuffle.

OUT/ holds passages/, entity_descriptions/, alias_table/, entity_vocab/, dead_letters/, tokenizer/,
stats.json and manifest.json; a folder without manifest.json is an incomplete run.
"""
from __future__ import annotations

import json
import logging
import sys
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import StandardOptions, TestOptions

from pipelines.config import WikiMentionsConfig
from pipelines.dump import DumpError, default_index_path, plan_read_ranges, read_siteinfo
from pipelines.job_common import (  # noqa: F401 - labels_for_site, site_summary: part of this module's API
    PROGRESS_FOLDER,
    SPLITS,
    labels_for_site,
    site_summary,
)
from pipelines.launch import beam_options, configure_logging
from pipelines.progress import ProgressPrinter, range_bytes
from pipelines.records import SiteInfo
from pipelines.twopass_job import build_twopass_pipeline
from wikiedm import storage

log = logging.getLogger("wiki_mentions")


def build_pipeline(p: beam.Pipeline, cfg: WikiMentionsConfig, site: SiteInfo, ranges: list, job: dict) -> None:
    """Add the whole job to ``p`` (the two-pass job: pipelines/twopass_job.py)."""
    build_twopass_pipeline(p, cfg, site, ranges, {**job, "job": "twopass"})


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
    lines.append(f"  shards written    {len(shards):>10,}   ({sum(f['rows'] for f in shards):,} passages)")
    print("\n".join(lines), flush=True)


def run(argv: list[str] | None = None) -> int:
    from pipelines.config import corpus_parser
    from pipelines.output_guard import guard_output, guard_output_for_dry_run

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        cfg, flags, beam_args = corpus_parser().check(argv)
        options = beam_options(beam_args)
        site, ranges = plan_input(cfg)
        dry_run = bool(options.view_as(TestOptions).dry_run)  # Dataflow: build and validate the job only
        if dry_run:
            found = guard_output_for_dry_run(cfg.output, cfg.to_dict(), flags.overwrite)
        else:
            found = guard_output(cfg.output, cfg.to_dict(), flags.overwrite)
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
    printer = None
    if not dry_run and is_local_runner(runner):
        # Stale records of a killed run would count twice: the folder is this run's alone.
        storage.delete_files(storage.list_files(storage.join(cfg.output, PROGRESS_FOLDER)))
        total = sum(range_bytes(r.path, r.start, r.end) for r in ranges)
        printer = ProgressPrinter(storage.join(cfg.output, PROGRESS_FOLDER), total, cfg.progress_every_s,
                                  lambda line: print(line, flush=True)).start()
    if dry_run and not honours_dry_run(runner):
        # Only Dataflow's runner builds a job without running it; any other runner would run it whole and write
        # the corpus. The graph is built (above) and turned into the portable form a runner receives: checked.
        pipeline.to_runner_api()
        print(f"wiki_mentions: dry run with {runner}: the job graph was built; nothing was run or written")
        return 0
    try:
        result = pipeline.run()
        if dry_run:
            print(f"wiki_mentions: dry run with {runner}: the job graph was built and not submitted")
            return 0
        result.wait_until_finish()
    finally:
        if printer is not None:
            printer.stop()
    if storage.exists(manifest_path):
        print_summary(cfg.output, time.monotonic() - started)
        return 0
    print(f"wiki_mentions: error: the job finished without writing {manifest_path}", file=sys.stderr)
    return 1


def _runner_name(runner) -> str:
    """--runner as given (a name), or the class name of a runner object (or of None, when none was given)."""
    return runner if isinstance(runner, str) else type(runner).__name__


def honours_dry_run(runner) -> bool:
    """Does the runner build the job without running it under ``--dry_run true`` (Dataflow's does; the others run)?"""
    name = _runner_name(runner)
    return bool(name) and "Dataflow" in name


def is_local_runner(runner) -> bool:
    """Does the job run in this process's machine (so that a thread here can watch its progress)?"""
    name = _runner_name(runner)
    return name is None or "Direct" in name or name in ("", "PrismRunner", "FnApiRunner")


def main() -> None:
    configure_logging()
    sys.exit(run())


if __name__ == "__main__":
    main()
