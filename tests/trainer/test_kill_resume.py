"""A training run killed for real (SIGKILL of the launcher and both ranks, mid-run, KILL_AT - CHECKPOINT_AT steps
after its checkpoint) resumes from the checkpoint on 2 ranks, the table's rows restored, and redoes the lost
steps with exactly the losses and samples they had (tests/trainer/runs.py, rows2: the same run the other
2-rank tests read)."""
from __future__ import annotations

import pytest

from tests.trainer.runs import CHECKPOINT_AT, KILL_AT, STEPS, sample_ids, train_rows
from trainer.metrics import read_metrics

pytestmark = pytest.mark.slow


def test_sigkill_then_rerun_repeats_the_lost_steps_exactly(trainer_runs):
    d = trainer_runs.get("rows2")
    before, after = train_rows(d, "metrics_before_kill.jsonl"), train_rows(d)
    assert KILL_AT <= max(before) < STEPS, "the run must be killed before it finishes"
    lost = [s for s in before if s > CHECKPOINT_AT]
    assert lost and min(lost) == CHECKPOINT_AT + 1, "steps after the checkpoint were logged, then lost"
    steps = [r["step"] for r in read_metrics(d / "metrics.jsonl") if r["split"] == "train"]
    assert steps == list(range(1, STEPS + 1)), "the lost steps are forgotten, then redone once"
    log = (d / "stdout.log").read_text()
    assert f"resumed from {d / 'checkpoints' / f'step_{CHECKPOINT_AT:08d}'}: step {CHECKPOINT_AT}" in log
    assert "RNG restored" in log
    assert "entity rows restored (2 ranks then, 2 now)" in log
    keys = ("loss", "lm_loss", "el_loss", "el_acc", "lr", "grad_norm", "memory_grad_norm")
    for step in before:  # before the checkpoint: kept as logged; after it: redone, the same to the last digit
        for key in keys:
            assert key in before[step] and key in after[step], (step, key)
            assert after[step][key] == pytest.approx(before[step][key], abs=1e-6, rel=0), (step, key)
    # The same passages in the same global batches, before the kill and after the resume.
    samples_before, samples_after = sample_ids(d, "samples_before_kill.jsonl"), sample_ids(d)
    assert sorted(samples_after) == list(range(1, STEPS + 1))
    assert all(samples_after[s] == samples_before[s] for s in before)
    assert after[STEPS]["loss"] < after[1]["loss"] - 5.0
