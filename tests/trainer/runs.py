"""Real training runs shared by the trainer tests, made once per session (each only when a test asks).

Every run is a subprocess (`wikiedm pretrain --num_gpus 2` for 2 ranks: DeepSpeed's launcher; for one,
`python -m trainer.pretrain` with the old spellings --data and --output_dir, which stay accepted)
of the tiny config on 64-token sequences, on the same 16 passages repeated (``data.overfit_passages``),
at a learning rate of LR (the tiny config's 3e-3 needs 48 steps to link 90% at the encoder's read; 1e-2
needs 28, with the same margin): both losses fall far within STEPS steps, so one run shows that EL
learns, and the same run is
checkpointed, resumed, re-sharded and exported. Runs that only check a layout stop after a few steps
with the same schedule (``train.stop_after_steps``), so their losses compare step by step.

    rows2            2 ranks, ZeRO-2, the table split by rows (the default above one rank); SIGKILLed once step
                     KILL_AT (after its step-CHECKPOINT_AT checkpoint) is logged, then rerun: it resumes on 2 ranks
    rows2_on_1_rank  rows2's step-CHECKPOINT_AT checkpoint resumed on 1 rank (universal conversion, rows re-cut)
    replicated1      1 rank, the replicated table
    zero3            rows beside ZeRO-3, SHORT steps, the batches made by a worker process per rank (data.num_workers)
    zero1_bf16       rows beside ZeRO-1, in bf16 (the rows stay float32), SHORT steps
    zero3_replicated the replicated table really partitioned by ZeRO-3 (persistence threshold 0), SHORT steps
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from trainer.jit_ops import shm_buffer_paths
from trainer.metrics import read_metrics

REPO = Path(__file__).resolve().parents[2]
PYTHON = Path(sys.executable)
WIKIEDM = PYTHON.parent / "wikiedm"  # the console script `make venv` installs
STEPS, CHECKPOINT_AT, EVAL_EVERY, SHORT, PASSAGES, LR = 28, 20, 14, 3, 16, "1e-2"
KILL_AT = CHECKPOINT_AT + 5  # rows2 is killed once this step is logged: the steps after the checkpoint are lost
TIMEOUT_S = 600  # a 28-step run takes ~60 s alone; on a machine loaded 3x over, one took > 300 s


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _command(corpus: Path, run_dir: Path, ranks: int, overrides: tuple[str, ...]) -> tuple[list[str], dict]:
    args = ["--config", "configs/pretrain/tiny.yaml", "--max_steps", str(STEPS), "--data.overfit_passages", str(PASSAGES),
            "--train.global_batch_size", str(PASSAGES), "--train.micro_batch_size", str(PASSAGES // 2),
            "--data.max_seq_len", "64", "--model.max_positions", "64", "--train.save_every", str(CHECKPOINT_AT),
            "--train.eval_every", str(EVAL_EVERY), "--train.log_sample_ids", "true", "--optim.lr", LR, *overrides]
    port = str(_free_port())
    if ranks == 1:  # the module entry point, with the old spellings of --corpus and --output
        cmd = [str(PYTHON), "-m", "trainer.pretrain", "--data", str(corpus), "--output_dir", str(run_dir), *args]
    else:  # the documented way in
        cmd = [str(WIKIEDM), "pretrain", "--num_gpus", str(ranks), "--master_port", port, "--corpus", str(corpus),
               "--output", str(run_dir), *args]
    return cmd, {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_PORT": port, "PYTHONUNBUFFERED": "1"}


def run(corpus: Path, run_dir: Path, ranks: int, *overrides: str) -> Path:
    cmd, env = _command(corpus, run_dir, ranks, overrides)
    result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "stdout.log", "a") as f:
        f.write(result.stdout + result.stderr)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({result.returncode}):\n{(result.stdout + result.stderr)[-6000:]}")
    # DeepSpeed's CPU comm op gives each local rank a ~69 MB buffer in /dev/shm and never removes it; the trainer does.
    left = shm_buffer_paths(master_addr="127.0.0.1", master_port=env["MASTER_PORT"])  # the launcher's address
    assert not left, f"shared-memory buffers left behind: {left}"
    return run_dir


def run_killed_then_rerun(corpus: Path, run_dir: Path, ranks: int, *overrides: str) -> Path:
    """SIGKILL (the whole process group: launcher and ranks) once step KILL_AT is logged, then the same command
    again. What the run had logged before the kill is kept as *_before_kill.* beside the run's own files."""
    cmd, env = _command(corpus, run_dir, ranks, overrides)
    metrics = run_dir / "metrics.jsonl"
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "stdout_before_kill.log", "w") as out:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while True:
            done = [r["step"] for r in read_metrics(metrics) if r["split"] == "train"] if metrics.exists() else []
            if max(done, default=0) >= KILL_AT:
                break
            if proc.poll() is not None:
                raise AssertionError(f"the run ended ({proc.returncode}) before it could be killed")
            if time.monotonic() > deadline:
                raise AssertionError(f"step {KILL_AT} not reached in {TIMEOUT_S} s")
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    shutil.copy(metrics, run_dir / "metrics_before_kill.jsonl")
    shutil.copy(run_dir / "samples.jsonl", run_dir / "samples_before_kill.jsonl")
    return run(corpus, run_dir, ranks, *overrides)


def _resume_copy(source: Path, target: Path) -> Path:
    """A run directory holding only source's checkpoint at CHECKPOINT_AT: what a run killed after it leaves."""
    tag = f"step_{CHECKPOINT_AT:08d}"
    (target / "checkpoints").mkdir(parents=True)
    shutil.copytree(source / "checkpoints" / tag, target / "checkpoints" / tag)
    (target / "checkpoints" / "latest").write_text(tag)
    return target


class Runs:
    """Lazily made runs, shared by every trainer test of the session."""

    def __init__(self, corpus: Path, root: Path):
        self.corpus, self.root, self._done = corpus, root, {}

    def get(self, name: str) -> Path:
        if name not in self._done:
            d = self.root / name
            short = ("--train.stop_after_steps", str(SHORT), "--train.save_every", str(SHORT))
            if name == "rows2":
                run_killed_then_rerun(self.corpus, d, 2)
            elif name == "rows2_on_1_rank":
                run(self.corpus, _resume_copy(self.get("rows2"), d), 1)
            elif name == "replicated1":
                run(self.corpus, d, 1)
            elif name == "zero3":
                run(self.corpus, d, 2, "--deepspeed_config", "configs/deepspeed/zero3.json", "--data.num_workers", "1",
                    *short)
            elif name == "zero1_bf16":
                run(self.corpus, d, 2, "--deepspeed_config", "configs/deepspeed/zero1.json", "--train.bf16", "true",
                    *short)
            elif name == "zero3_replicated":
                # ZeRO-3 keeps parameters below stage3_param_persistence_threshold whole on every rank;
                # at 0 it really splits this small table, as it would a large one.
                ds = json.loads((REPO / "configs/deepspeed/zero3.json").read_text())
                ds["zero_optimization"]["stage3_param_persistence_threshold"] = 0
                self.root.mkdir(parents=True, exist_ok=True)
                (self.root / "zero3_split.json").write_text(json.dumps(ds))
                run(self.corpus, d, 2, "--deepspeed_config", str(self.root / "zero3_split.json"),
                    "--model.memory_partition", "replicated", *short)
            else:
                raise KeyError(name)
            self._done[name] = d
        return self._done[name]


def train_rows(run_dir: Path, file: str = "metrics.jsonl") -> dict[int, dict]:
    return {r["step"]: r for r in read_metrics(run_dir / file) if r["split"] == "train"}


def sample_ids(run_dir: Path, file: str = "samples.jsonl") -> dict[int, list]:
    return {r["step"]: r["passage_ids"] for r in read_metrics(run_dir / file)}


def el_accuracy(rows: dict[int, dict], steps, read: str) -> float:
    """Accuracy of one read over several logged steps, weighted by their mentions."""
    hits = sum(rows[s][f"el_acc_{read}"] * rows[s]["mentions"] for s in steps)
    return hits / max(1, sum(rows[s]["mentions"] for s in steps))
