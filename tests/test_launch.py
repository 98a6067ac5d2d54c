"""What every Beam job does at launch (pipelines/launch.py): its options, and the memo of DoFn specs."""
from __future__ import annotations

import apache_beam as beam
import pytest
from apache_beam.coders import VarIntCoder
from apache_beam.testing.test_pipeline import TestPipeline as BeamTestPipeline
from apache_beam.testing.util import assert_that, equal_to
from apache_beam.transforms import userstate
from apache_beam.transforms.userstate import BagStateSpec

from pipelines.launch import MemoizedDofnSpecs, beam_options, memoize_dofn_specs


class CountPerKeyFn(beam.DoFn):
    """A stateful DoFn: its spec must survive the memo."""

    SEEN = BagStateSpec("seen", VarIntCoder())

    def process(self, kv, seen=beam.DoFn.StateParam(SEEN)):
        seen.add(kv[1])
        yield kv[0], sum(seen.read())


class PlainFn(beam.DoFn):
    def process(self, x):
        yield x


def test_beam_options_default_to_the_direct_runner_and_refuse_unknown_flags():
    assert beam_options([]).get_all_options()["runner"] == "DirectRunner"
    with pytest.raises(ValueError, match="--no_such_flag"):
        beam_options(["--no_such_flag", "1"])


def test_memoized_specs_are_beams_answer_asked_once_per_dofn(monkeypatch):
    memoize_dofn_specs()
    memoize_dofn_specs()  # idempotent: one memo, not a memo of a memo
    memo = userstate.get_dofn_specs
    assert isinstance(memo, MemoizedDofnSpecs) and not isinstance(memo.compute, MemoizedDofnSpecs)
    asked, compute = [], memo.compute
    monkeypatch.setattr(memo, "compute", lambda dofn: asked.append(dofn) or compute(dofn))
    stateful, plain = CountPerKeyFn(), PlainFn()
    for _ in range(3):
        states, timers = userstate.get_dofn_specs(stateful)
        assert {s.name for s in states} == {"seen"} and timers == set()
        assert userstate.get_dofn_specs(plain) == (set(), set())
    assert asked == [stateful, plain]  # each DoFn once
    states.clear()  # a caller changing its sets changes nothing for the next
    assert {s.name for s in userstate.get_dofn_specs(stateful)[0]} == {"seen"}
    assert userstate.is_stateful_dofn(stateful) and not userstate.is_stateful_dofn(plain)
    twin = PlainFn()  # a new DoFn is asked anew, and a dead one's entry goes with it
    userstate.get_dofn_specs(twin)
    assert asked[-1] is twin
    before = len(memo.known)
    asked.clear()
    del twin
    assert len(memo.known) == before - 1


def test_a_stateful_dofn_runs_as_before_with_the_memo():
    memoize_dofn_specs()
    with BeamTestPipeline() as p:
        out = (p | beam.Create([("a", 1), ("a", 2), ("b", 5)])
               | beam.ParDo(CountPerKeyFn())
               | beam.combiners.Top.PerKey(1))
        assert_that(out, equal_to([("a", [3]), ("b", [5])]))
