"""Counters that are both Beam Metrics and data.

Every DoFn that drops, skips or counts something calls ``self.count(name)``.
That increments a Beam Metrics counter (visible in the Dataflow UI and in
``PipelineResult.metrics()``) and also tallies the name per bundle; at the end
of the bundle the tallies go out on the ``stats`` output. The job sums them
(``SumStats``) and writes them to ``stats.json`` and ``manifest.json`` from
inside the pipeline, so the counters are part of the output on every runner,
including a non-blocking Dataflow launch.
"""
from __future__ import annotations

from collections import Counter

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows

METRICS_NAMESPACE = "wiki_mentions"
STATS = "stats"  # the tagged output every CountingDoFn has


class CountingDoFn(beam.DoFn):
    """A DoFn with ``count(name, n)``; its tallies leave on the ``stats`` output."""

    def __init__(self) -> None:
        super().__init__()
        self._metrics: dict[str, object] = {}
        self._tally: Counter = Counter()

    def count(self, name: str, n: int = 1) -> None:
        if not n:
            return
        counter = self._metrics.get(name)
        if counter is None:
            counter = self._metrics[name] = Metrics.counter(METRICS_NAMESPACE, name)
        counter.inc(n)
        self._tally[name] += n

    def start_bundle(self) -> None:
        self._tally = Counter()

    def finish_bundle(self):
        tally, self._tally = self._tally, Counter()
        for name in sorted(tally):
            yield beam.pvalue.TaggedOutput(STATS, GlobalWindows.windowed_value((name, tally[name])))


class SumStats(beam.PTransform):
    """Flatten the ``stats`` outputs of several steps and sum them per name.

    Apply it to a *tuple* of PCollections (a list would be taken as data).
    """

    def expand(self, pcolls):
        return (
            tuple(pcolls)
            | "FlattenStats" >> beam.Flatten()
            | "SumPerCounter" >> beam.CombinePerKey(sum)
        )
