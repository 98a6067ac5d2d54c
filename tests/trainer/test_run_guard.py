"""trainer/run_guard.py: `wikiedm pretrain --output RUN` resumes its own run and refuses another run's checkpoints
(`--overwrite true` replaces them); `wikiedm export --output FILE` replaces a file of the same run and refuses one of
another run. Real runs (1 rank, the tiny config) on a synthetic corpus (benchmarks/synth_corpus.py: seconds, no Beam),
real exports; the refusals come from the command's light check, in seconds, before torch is imported."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from trainer.run_guard import (
    RUN_RECORD,
    OutputInUseError,
    check_export_output,
    check_run_folder,
    guard_run_folder,
    run_identity,
    safetensors_metadata,
)

REPO = Path(__file__).resolve().parents[2]
WIKIEDM = Path(sys.executable).parent / "wikiedm"
FAST_S = 15  # a refusal is the light check's: no torch import


def write_corpus(out: Path, seed: int = 0) -> Path:
    sys.path.insert(0, str(REPO / "benchmarks"))
    try:
        import synth_corpus
    finally:
        sys.path.remove(str(REPO / "benchmarks"))
    return synth_corpus.write_corpus(out, n_entities=50, n_passages=40, vocab=300, tokens=40, mentions=2, seed=seed)


def pretrain_args(corpus: Path, run: Path, *extra: str) -> list[str]:
    return ["--config", "configs/pretrain/tiny.yaml", "--corpus", str(corpus), "--output", str(run),
            "--max_steps", "2", "--train.global_batch_size", "4", "--train.micro_batch_size", "4",
            "--data.max_seq_len", "64", "--model.max_positions", "64", "--train.save_every", "1",
            "--train.eval_every", "0", "--data.num_workers", "0", "--train.plot", "false", "--train.report_to", "none",
            "--train.log_every", "1", *extra]


def wikiedm(*argv: str) -> tuple[subprocess.CompletedProcess, float]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    started = time.monotonic()
    proc = subprocess.run([str(WIKIEDM), *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    return proc, time.monotonic() - started


def pretrain(corpus: Path, run: Path, *extra: str) -> subprocess.CompletedProcess:
    proc, _ = wikiedm("pretrain", *pretrain_args(corpus, run, *extra))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc


def snapshot(folder: Path) -> dict:
    return {str(p.relative_to(folder)): p.stat().st_mtime_ns for p in folder.rglob("*") if p.is_file()}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    return write_corpus(tmp_path_factory.mktemp("guard_corpus") / "corpus")


@pytest.fixture(scope="module")
def runs(corpus, tmp_path_factory) -> dict[str, Path]:
    """Two runs of one step (killed after it, as far as they know: train.stop_after_steps), seeds 1 and 2."""
    root = tmp_path_factory.mktemp("guard_runs")
    out = {}
    for name, seed in (("a", "1"), ("b", "2")):
        out[name] = root / name
        pretrain(corpus, out[name], "--train.seed", seed, "--train.stop_after_steps", "1")
    return out


def test_a_run_resumes_in_its_folder_and_another_run_is_refused_unless_overwrite(corpus, runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(runs["a"], run)
    # the same config (stop_after_steps is how it runs, not what it trains): a resume, to the end
    proc = pretrain(corpus, run, "--train.seed", "1")
    assert f"resumed from {run / 'checkpoints' / 'step_00000001'}: step 1" in proc.stdout
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]

    before = snapshot(run)
    proc, seconds = wikiedm("pretrain", *pretrain_args(corpus, run, "--train.seed", "2"))
    assert proc.returncode == 2 and seconds < FAST_S, proc.stderr
    assert proc.stderr == (f"wikiedm pretrain: error: --output {run} holds another run's checkpoints or metrics "
                           "(train.seed 1 -> 2); pass --overwrite true to replace that run, or choose another "
                           f"--output (--train.resume {run / 'checkpoints'}/step_N there starts from one of its "
                           "checkpoints)\n")
    assert snapshot(run) == before  # nothing written

    (run / "train.log").write_text("a log of mine")
    proc = pretrain(corpus, run, "--train.seed", "2", "--overwrite", "true")
    assert "removed another run's checkpoints and metrics" in proc.stdout and "resumed" not in proc.stdout
    assert (run / "train.log").read_text() == "a log of mine"  # not the run's: kept
    assert [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()] == [1, 2]
    assert json.loads((run / RUN_RECORD).read_text())["config"]["train.seed"] == 2


def test_another_corpus_or_an_older_folder(corpus, tmp_path):
    from trainer.config import config_parser

    own = write_corpus(tmp_path / "corpus")
    cfg, _, _ = config_parser().check(pretrain_args(own, tmp_path / "run"))
    run = tmp_path / "run"
    assert guard_run_folder(run, run_identity(cfg), overwrite=False) == "new"
    assert check_run_folder(run, run_identity(cfg), overwrite=False) == "resume"
    # a record but nothing trained yet (a start that failed): another config goes ahead
    other, _, _ = config_parser().check(pretrain_args(own, run, "--optim.lr", "1e-3"))
    assert check_run_folder(run, run_identity(other), overwrite=False) == "new"
    (run / "checkpoints" / "step_00000001").mkdir(parents=True)
    with pytest.raises(OutputInUseError, match=r"optim.lr 0.003 -> 0.001\); pass --overwrite true"):
        check_run_folder(run, run_identity(other), overwrite=False)
    assert check_run_folder(run, run_identity(other), overwrite=True) == "overwrite"
    write_corpus(own, seed=1)  # the corpus rebuilt in place: other passages
    with pytest.raises(OutputInUseError, match=r"checkpoints or metrics \(corpus files '[0-9a-f]{64}' -> '[0-9a-f]{64}'\)"):
        check_run_folder(run, run_identity(cfg), overwrite=False)
    # a folder from before the record: its config.yaml stands for it (keys a later version added are no change)
    (run / RUN_RECORD).unlink()
    tree = cfg.to_dict()
    del tree["train"]["log_loss_grad_norms"], tree["optim"]["el_weight"]
    import yaml

    (run / "config.yaml").write_text(yaml.safe_dump({**tree, "data": {**tree["data"], "verify_sha256": False}}))
    assert check_run_folder(run, run_identity(cfg), overwrite=False) == "resume"
    with pytest.raises(OutputInUseError, match=r"optim.lr 0.003 -> 0.001"):
        check_run_folder(run, run_identity(other), overwrite=False)
    (run / "config.yaml").unlink()
    assert check_run_folder(run, run_identity(other), overwrite=False) == "new"  # checkpoints alone: nothing to compare


def test_export_replaces_its_own_runs_file_and_refuses_another_runs(runs, tmp_path):
    out = tmp_path / "edmem.safetensors"
    for _ in range(2):  # the same run again: replaced
        proc, _ = wikiedm("export", "--checkpoint", str(runs["a"]), "--output", str(out))
        assert proc.returncode == 0, proc.stderr
    assert safetensors_metadata(out)["checkpoint"] == str((runs["a"] / "checkpoints" / "step_00000001").resolve())
    assert [p.name for p in tmp_path.iterdir()] == ["edmem.safetensors"]  # no partial file left beside
    before = out.read_bytes()
    proc, seconds = wikiedm("export", "--checkpoint", str(runs["b"]), "--output", str(out))
    assert proc.returncode == 2 and seconds < FAST_S
    assert proc.stderr == (f"wikiedm export: error: --output {out} holds weights exported from another run "
                           f"({(runs['a'] / 'checkpoints' / 'step_00000001').resolve()}); pass --overwrite true to "
                           "replace it, or choose another file\n")
    assert out.read_bytes() == before
    proc, _ = wikiedm("export", "--checkpoint", str(runs["b"]), "--output", str(out), "--overwrite", "true")
    assert proc.returncode == 0 and "exported from another run" in proc.stderr
    assert safetensors_metadata(out)["checkpoint"] == str((runs["b"] / "checkpoints" / "step_00000001").resolve())
    mine = tmp_path / "mine.safetensors"
    mine.write_text("not an export")
    for overwrite in ("false", "true"):  # not a wikiedm export: never replaced
        with pytest.raises(OutputInUseError, match="is not a wikiedm export; choose another file"):
            check_export_output(str(runs["a"]), str(mine), overwrite == "true")
    assert mine.read_text() == "not an export"
