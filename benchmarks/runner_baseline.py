"""What the DirectRunner itself needs to hold a dump: the job's reader, one shuffle, a sum. Nothing else.

    python benchmarks/runner_baseline.py DUMP

Beam's local runner (the FnApiRunner behind ``DirectRunner`` for batch jobs) runs one fused stage at a
time and keeps every PCollection that crosses a shuffle in its own memory, whole, until the next stage
has read it. Its peak RSS therefore grows with the dump, whatever the job does. This pipeline reads the
dump with the corpus job's own reader, shuffles the pages once (as the job's ``SpreadPages`` does) and
sums their lengths: ``bench_scale.py --runner_baseline`` runs it beside the job on the same dumps, so
the growth of the job's peak RSS can be split into the runner's share and the job's own.
"""
from __future__ import annotations

import sys

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions

from pipelines.config import WikiMentionsConfig
from pipelines.transforms.parse import ParseOptions, ReadPagesFn
from pipelines.wiki_mentions import plan_input
from pipelines.wikitext.disambiguation import DisambiguationConfig


def main(dump: str) -> None:
    cfg = WikiMentionsConfig(input=dump, output="unused")  # the job's defaults
    _, ranges = plan_input(cfg)
    options = ParseOptions(max_page_bytes=cfg.max_page_mb << 20, max_wikitext_chars=cfg.max_wikitext_chars,
                           progress_every_s=cfg.progress_every_s, disambiguation=DisambiguationConfig())
    with beam.Pipeline(options=PipelineOptions(["--direct_num_workers", "1"])) as p:
        _ = (p
             | "ReadRanges" >> beam.Create(ranges, reshuffle=False)
             | "ReadPages" >> beam.ParDo(ReadPagesFn(options)).with_outputs("dead", "stats", main="pages")
             ).pages | "SpreadPages" >> beam.Reshuffle() | "Chars" >> beam.Map(lambda page: len(page.text)) \
            | "Sum" >> beam.CombineGlobally(sum) | "Print" >> beam.Map(lambda n: print("chars", n))


if __name__ == "__main__":
    main(sys.argv[1])
