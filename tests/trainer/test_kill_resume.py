"""A training run killed for real (SIGKILL mid-run, two steps after its checkpoint) resumes from the
checkpoint and redoes the lost steps with exactly the losses they had (tests/trainer/runs.py, replicated1)."""
from __future__ import annotations

import pytest

from tests.trainer.runs import CHECKPOINT_AT, KILL_AT, STEPS, train_rows
from trainer.metrics import read_metrics

pytestmark = pytest.mark.slow


def test_sigkill_then_rerun_repeats_the_lost_steps_exactly(trainer_runs):
    d = trainer_runs.get("replicated1")
    before, after = train_rows(d, "metrics_before_kill.jsonl"), train_rows(d)
    assert KILL_AT <= max(before) < STEPS, "the run must be killed before it finishes"
    steps = [r["step"] for r in read_metrics(d / "metrics.jsonl") if r["split"] == "train"]
    assert steps == list(range(1, STEPS + 1)), "the lost steps are forgotten, then redone once"
    log = (d / "stdout.log").read_text()
    assert f"resumed from {d / 'checkpoints' / f'step_{CHECKPOINT_AT:08d}'}: step {CHECKPOINT_AT}" in log
    assert "RNG restored" in log
    for step in before:  # before the checkpoint: kept as logged; after it: redone, the same to the last digit
        for key in ("loss", "lm_loss", "el_loss", "lr", "grad_norm"):
            assert after[step][key] == pytest.approx(before[step][key], abs=1e-6, rel=0), (step, key)
    assert after[STEPS]["loss"] < after[1]["loss"] - 5.0
