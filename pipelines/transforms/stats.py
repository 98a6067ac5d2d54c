"""Counters that are both Beam Metrics and data.

Every DoFn that drops, skips or counts something calls ``self.count(name)``.
That increments a Beam Metrics counter (visible in the Dataflow UI and in
``PipelineResult.metrics()``) and also tallies the name per bundle; at the end
of the bundle the tallies go out on the ``stats`` output. The job sums them
(``SumStats``) and writes them to ``stats.json`` and ``manifest.json`` from
inside the pipeline, so the counters are part of the output on every runner,
including a non-blocking Dataflow launch.

Most counters are sums. A few are maxima (``self.observe_max(name, value)``,
names under ``largest_group/``): the size of the largest group a join saw,
so a user can check that no group grows with the corpus. They are Beam
distributions and are combined with ``max`` instead of ``sum``.
"""
from __future__ import annotations

from collections import Counter

import apache_beam as beam
from apache_beam.metrics import Metrics
from apache_beam.transforms.window import GlobalWindows

from pipelines.worker_gc import tune_gc

METRICS_NAMESPACE = "wiki_mentions"
STATS = "stats"  # the tagged output every CountingDoFn has
MAX_PREFIX = "largest_group/"  # counters under this prefix are maxima, not sums


def is_maximum(name: str) -> bool:
    return name.startswith(MAX_PREFIX)


class CountingDoFn(beam.DoFn):
    """A DoFn with ``count(name, n)``; its tallies leave on the ``stats`` output."""

    def __init__(self) -> None:
        super().__init__()
        self._metrics: dict[str, object] = {}
        self._tally: Counter = Counter()
        self._maxima: dict[str, int] = {}

    def count(self, name: str, n: int = 1) -> None:
        if not n:
            return
        counter = self._metrics.get(name)
        if counter is None:
            counter = self._metrics[name] = Metrics.counter(METRICS_NAMESPACE, name)
        counter.inc(n)
        self._tally[name] += n

    def observe_max(self, name: str, value: int) -> None:
        """Record ``value`` for a maximum counter (``name`` under ``largest_group/``)."""
        if not is_maximum(name):
            raise ValueError(f"maximum counters live under {MAX_PREFIX!r}: {name!r}")
        if value > self._maxima.get(name, -1):
            self._maxima[name] = value
        distribution = self._metrics.get(name)
        if distribution is None:
            distribution = self._metrics[name] = Metrics.distribution(METRICS_NAMESPACE, name)
        distribution.update(value)

    def start_bundle(self) -> None:
        tune_gc()  # once per worker process: every step of the job is a CountingDoFn
        self._tally = Counter()
        self._maxima = {}

    def finish_bundle(self):
        tally, self._tally = self._tally, Counter()
        maxima, self._maxima = self._maxima, {}
        for name in sorted(tally):
            yield beam.pvalue.TaggedOutput(STATS, GlobalWindows.windowed_value((name, tally[name])))
        for name in sorted(maxima):
            yield beam.pvalue.TaggedOutput(STATS, GlobalWindows.windowed_value((name, maxima[name])))


class SumStats(beam.PTransform):
    """Flatten the ``stats`` outputs of several steps and combine them per name
    (sums, and maxima for ``largest_group/`` counters).

    Apply it to a *tuple* of PCollections (a list would be taken as data).
    """

    def expand(self, pcolls):
        flat = tuple(pcolls) | "FlattenStats" >> beam.Flatten()
        sums = (
            flat
            | "SumCounters" >> beam.Filter(lambda kv: not is_maximum(kv[0]))
            | "SumPerCounter" >> beam.CombinePerKey(sum)
        )
        maxima = (
            flat
            | "MaxCounters" >> beam.Filter(lambda kv: is_maximum(kv[0]))
            | "MaxPerCounter" >> beam.CombinePerKey(max)
        )
        return (sums, maxima) | "FlattenCombinedStats" >> beam.Flatten()
