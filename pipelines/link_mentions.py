"""The linking job: JSONL records with text -> the same records with BLINK entity mentions.

    wikiedm link --input data.jsonl --output OUT_LINKED --model DIR --corpus OUT \
        [--text_field question] [--tokenizer gpt2-bpe] [--threshold 0.5] [--kb blink:DIR] [--fast true] [--runner Direct]
    python -m pipelines.link_mentions ... / beam run pipelines/link_mentions.py ...   (the same command line)

Each input line is a JSON object; its text (``--text_field``) gets mention
spans detected (spaCy tokenizer + the corpus's alias table, and NER when a
trained spaCy pipeline is installed) and linked by the BLINK model over the
corpus's entity vocabulary. The record is written back with a ``mentions``
list in the corpus's mention shape: ``char_start``, ``char_end``,
``entity_id`` (the corpus's id), ``entity``, ``source`` = "blink",
``surface``, ``score`` (the linker's final probability: model and alias prior
combined; mentions below ``--threshold`` are left out) and, with ``--tokenizer``
(e.g. the corpus's own ``OUT/tokenizer`` or ``gpt2-bpe``), ``token_start`` /
``token_end`` plus the record's ``token_ids``: ready for EDMem fine-tuning.

Outputs (``OUT_LINKED/``): ``linked-SSSSS-of-NNNNN.jsonl``, ``dead_letters-*.jsonl``
(lines that are not JSON objects with a text), ``stats.json`` (counters).
Everything the workers read (the knowledge base: the corpus's entities or
BLINK's ``--kb blink:DIR``; the entity encodings and index; the alias
candidate index; the fitted combination) is built (or reused) on the launching
machine before the job starts (``wikiedm index-linker`` does the same
ahead of time); workers memory-map it, so model, corpus, KB and encodings
folders must be readable by every worker (local runners, or a shared
filesystem).
"""
from __future__ import annotations

import dataclasses
import json
import logging
import sys
import time

import apache_beam as beam
from apache_beam.options.pipeline_options import StandardOptions

from pipelines.launch import beam_options, configure_logging
from pipelines.link_config import LinkMentionsConfig, link_parser
from pipelines.transforms.blink import LinkRecords, RecordOptions, prepare_linker
from pipelines.transforms.stats import SumStats
from wikiedm import storage
from wikiedm.config import command_error

log = logging.getLogger("link_mentions")


class WriteStatsFn(beam.DoFn):
    def __init__(self, path: str, config: dict) -> None:
        self.path = path
        self.config = config

    def process(self, _, stats: list):
        storage.write_json_atomic(self.path, {"counters": dict(sorted(stats)), "config": self.config})
        yield self.path


def build_pipeline(p: beam.Pipeline, cfg: LinkMentionsConfig) -> None:
    options = RecordOptions(text_field=cfg.text_field, mentions_field=cfg.mentions_field, tokenizer=cfg.tokenizer)
    linked = (
        p
        | "ReadJsonl" >> beam.io.ReadFromText(cfg.input)
        | "LinkRecords" >> LinkRecords(cfg.linker_config(), options, cfg.records_per_batch)
    )

    (
        linked["records"]
        | "RecordsToJson" >> beam.Map(lambda r: json.dumps(r, ensure_ascii=False, sort_keys=True))
        | "WriteLinked" >> beam.io.WriteToText(storage.join(cfg.output, "linked"), file_name_suffix=".jsonl",
                                               num_shards=cfg.num_shards, shard_name_template="-SSSSS-of-NNNNN")
    )
    (
        linked["dead"]
        | "DeadToJson" >> beam.Map(lambda r: json.dumps(r, ensure_ascii=False, sort_keys=True))
        | "WriteDeadLetters" >> beam.io.WriteToText(storage.join(cfg.output, "dead_letters"), file_name_suffix=".jsonl",
                                                    num_shards=1, shard_name_template="-SSSSS-of-NNNNN")
    )
    stats = tuple(linked["stats"]) | "SumStats" >> SumStats()
    (
        p
        | "StatsOnce" >> beam.Create([None])
        | "WriteStats" >> beam.ParDo(WriteStatsFn(storage.join(cfg.output, storage.STATS_FILE), dataclasses.asdict(cfg)),
                                     stats=beam.pvalue.AsList(stats))
    )


def run(argv: list[str] | None = None) -> int:

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        cfg, _, beam_args = link_parser().check(argv)
        cfg.validate()
        options = beam_options(beam_args)
        prepare_linker(cfg.linker_config())  # once, here: workers only memory-map it
    except (ValueError, FileNotFoundError, OSError) as exc:
        return command_error("wikiedm link", str(exc))
    started = time.monotonic()
    pipeline = beam.Pipeline(options=options)
    build_pipeline(pipeline, cfg)
    result = pipeline.run()
    result.wait_until_finish()
    stats_path = storage.join(cfg.output, storage.STATS_FILE)
    if not storage.exists(stats_path):
        print(f"link_mentions: error: the job finished without writing {stats_path}", file=sys.stderr)
        return 1

    counters = json.loads(storage.read_bytes(stats_path))["counters"]
    print(f"link_mentions: done in {time.monotonic() - started:.1f}s with {options.view_as(StandardOptions).runner} -> "
          f"{cfg.output}: {counters.get('records/linked', 0):,} records, {counters.get('mentions/blink', 0):,} mentions, "
          f"{sum(v for k, v in counters.items() if k.startswith('records_dropped/')):,} dead letters")
    return 0


def main() -> None:
    configure_logging()
    sys.exit(run())


if __name__ == "__main__":
    main()
