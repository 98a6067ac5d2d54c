"""A training run killed for real (SIGKILL mid-run) resumes from its last checkpoint
and repeats the uninterrupted loss sequence; the same seed gives the same losses."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainer.metrics import read_metrics

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[2]
STEPS, SAVE_EVERY = 10, 4


def _cmd(corpus: Path, run_dir: Path) -> list[str]:
    return [sys.executable, "-m", "trainer.pretrain", "--config", "configs/pretrain/tiny.yaml", "--data", str(corpus),
            "--output_dir", str(run_dir), "--max_steps", str(STEPS), "--train.save_every", str(SAVE_EVERY),
            "--train.eval_every", "1000", "--train.plot", "false"]


def _env() -> dict:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1", "MASTER_PORT": "29731"}


def _losses(run_dir: Path) -> dict[int, float]:
    rows = [r for r in read_metrics(run_dir / "metrics.jsonl") if r["split"] == "train"]
    return {r["step"]: r["loss"] for r in rows}


def test_sigkill_then_rerun_repeats_the_uninterrupted_losses(corpus_dir: Path, tmp_path: Path):
    reference = tmp_path / "reference"
    subprocess.run(_cmd(corpus_dir, reference), cwd=REPO, env=_env(), check=True, capture_output=True, timeout=600)

    killed = tmp_path / "killed"
    proc = subprocess.Popen(_cmd(corpus_dir, killed), cwd=REPO, env=_env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + 600
    # Kill it after the step-4 checkpoint and a few steps more: steps 7.. are lost work.
    while time.monotonic() < deadline:
        done = _losses(killed) if (killed / "metrics.jsonl").exists() else {}
        if max(done, default=0) >= SAVE_EVERY + 2:
            break
        if proc.poll() is not None:
            pytest.fail("the run ended before it could be killed")
        time.sleep(0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    before = _losses(killed)
    assert max(before) < STEPS, "the run must be killed before it finishes"
    assert (killed / "checkpoints" / "latest").read_text().strip() == f"step_{SAVE_EVERY:08d}"

    subprocess.run(_cmd(corpus_dir, killed), cwd=REPO, env=_env(), check=True, capture_output=True, timeout=600)
    expected, got = _losses(reference), _losses(killed)
    steps = [r["step"] for r in read_metrics(killed / "metrics.jsonl") if r["split"] == "train"]
    assert steps == list(range(1, STEPS + 1)), "the lost steps are forgotten, then redone once"
    for step in range(1, STEPS + 1):
        assert got[step] == pytest.approx(expected[step], abs=1e-6, rel=0), step
