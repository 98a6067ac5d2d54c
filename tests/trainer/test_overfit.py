"""Entity linking visibly learns: on a fixed set of 16 passages, repeated, the encoder's read at [Es]
links >= 90% of the mentions within STEPS steps, on 1 rank (replicated table) and on 2 ranks with the
table split by rows. The runs are the real trainer's, shared with the other tests (tests/trainer/runs.py).

Before the fix of the memory's initial scales (docs/pretraining.md, "The memory's initial scales")
the same runs stayed near chance.
"""
from __future__ import annotations

import pytest

from tests.trainer.runs import PASSAGES, STEPS, el_accuracy, train_rows

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("run", ["replicated1", "rows2"])
def test_entity_linking_overfits_sixteen_passages(trainer_runs, run):
    d = trainer_runs.get(run)
    log = (d / "stdout.log").read_text()
    assert f"train: {PASSAGES} passages per epoch" in log
    rows = train_rows(d)
    first, last = range(1, 4), range(STEPS - 4, STEPS + 1)
    assert sum(rows[s]["mentions"] for s in last) >= 5 * 20  # enough mentions for the accuracy to mean something
    for read in ("enc", "dec", "head"):
        assert el_accuracy(rows, first, read) < 0.2, read  # it starts far from linking them...
        assert el_accuracy(rows, last, read) >= 0.9, read  # ...and links them, at [Es] of the encoder too
    el_first = sum(rows[s]["el_loss"] for s in first) / 3
    el_last = sum(rows[s]["el_loss"] for s in last) / 5
    assert el_last < 0.15 * el_first, (el_first, el_last)
