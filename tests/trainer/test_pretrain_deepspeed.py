"""End-to-end DeepSpeed runs on CPU: 2 ranks with the entity table split by rows beside ZeRO-1, 2 and 3,
the replicated table really partitioned by ZeRO-3, exact resume, resume on 1 rank (rows re-cut), export.

Each run is a subprocess (the deepspeed launcher, or `python -m trainer.pretrain` for one
rank) on the tiny config with 64-token sequences. Runs are made once per session and shared by the tests.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tests.trainer.conftest import REPO
from trainer.metrics import read_metrics

pytestmark = pytest.mark.slow

STEPS, CHECKPOINT_AT, SHORT = 24, 12, 6
PYTHON = Path(sys.executable)
SMALL = ("--data.max_seq_len", "64", "--model.max_positions", "64")
DEEPSPEED = PYTHON.parent / "deepspeed"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _run(corpus: Path, run_dir: Path, ranks: int, *overrides: str) -> None:
    args = ["trainer/pretrain.py", "--config", "configs/pretrain/tiny.yaml", "--data", str(corpus),
            "--output_dir", str(run_dir), "--max_steps", str(STEPS), "--train.save_every", str(CHECKPOINT_AT),
            "--train.eval_every", str(CHECKPOINT_AT), "--train.log_sample_ids", "true", *SMALL, *overrides]
    port = str(_free_port())
    if ranks == 1:
        cmd = [str(PYTHON), "-m", "trainer.pretrain", *args[1:]]
    else:
        cmd = [str(DEEPSPEED), "--num_gpus", str(ranks), "--master_port", port, *args]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "MASTER_PORT": port, "PYTHONUNBUFFERED": "1"}
    result = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
    (run_dir / "stdout.log").parent.mkdir(parents=True, exist_ok=True)
    (run_dir / "stdout.log").write_text(result.stdout + result.stderr)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed ({result.returncode}):\n{(result.stdout + result.stderr)[-6000:]}")


def _resume_copy(source: Path, target: Path) -> Path:
    """A run directory holding only source's checkpoint at CHECKPOINT_AT: what a run killed after it leaves."""
    tag = f"step_{CHECKPOINT_AT:08d}"
    (target / "checkpoints").mkdir(parents=True)
    shutil.copytree(source / "checkpoints" / tag, target / "checkpoints" / tag)
    (target / "checkpoints" / "latest").write_text(tag)
    return target


def _train(run_dir: Path) -> dict[int, dict]:
    return {r["step"]: r for r in read_metrics(run_dir / "metrics.jsonl") if r["split"] == "train"}


def _samples(run_dir: Path) -> dict[int, list]:
    return {r["step"]: r["passage_ids"] for r in read_metrics(run_dir / "samples.jsonl")}


class Runs:
    """Lazily made runs, shared by the tests of this module."""

    def __init__(self, corpus: Path, root: Path):
        self.corpus, self.root, self._done = corpus, root, {}

    def get(self, name: str) -> Path:
        if name not in self._done:
            d = self.root / name
            if name == "zero2":
                _run(self.corpus, d, 2)
            elif name == "zero3":
                _run(self.corpus, d, 2, "--deepspeed_config", "configs/deepspeed/zero3.json")
            elif name == "zero1":
                _run(self.corpus, d, 2, "--deepspeed_config", "configs/deepspeed/zero1.json", "--max_steps",
                     str(SHORT), "--train.save_every", str(SHORT), "--train.eval_every", "0")
            elif name == "zero3_replicated":
                # The replicated table under ZeRO-3, with the persistence threshold at 0 so that ZeRO-3
                # really splits it (at this size it would otherwise keep it whole on every rank).
                ds = json.loads((REPO / "configs/deepspeed/zero3.json").read_text())
                ds["zero_optimization"]["stage3_param_persistence_threshold"] = 0
                (self.root / "zero3_split.json").write_text(json.dumps(ds))
                _run(self.corpus, d, 2, "--deepspeed_config", str(self.root / "zero3_split.json"),
                     "--model.memory_partition", "replicated", "--max_steps", str(SHORT),
                     "--train.save_every", str(SHORT), "--train.eval_every", "0")
            elif name == "zero2_resumed":
                _run(self.corpus, _resume_copy(self.get("zero2"), d), 2)
            elif name == "zero2_resumed_on_1_rank":
                _run(self.corpus, _resume_copy(self.get("zero2"), d), 1)
            self._done[name] = d
        return self._done[name]


@pytest.fixture(scope="module")
def runs(corpus_dir, tmp_path_factory) -> Runs:
    return Runs(corpus_dir, tmp_path_factory.mktemp("runs"))


def _assert_loss_falls(run_dir: Path) -> None:
    m = _train(run_dir)
    assert sorted(m) == list(range(1, STEPS + 1))
    first = sum(m[s]["loss"] for s in (1, 2, 3)) / 3
    last = sum(m[s]["loss"] for s in (STEPS - 2, STEPS - 1, STEPS)) / 3
    assert last < first - 1.0, (first, last)
    assert m[STEPS]["lm_loss"] < m[1]["lm_loss"] and m[STEPS]["el_loss"] < m[1]["el_loss"]
    for r in m.values():
        assert {"step", "loss", "lm_loss", "el_loss", "el_acc", "tokens_per_s"} <= set(r)
        assert r["tokens_per_s"] > 0 and 0 <= r["el_acc"] <= 1
    val = [r for r in read_metrics(run_dir / "metrics.jsonl") if r["split"] == "validation"]
    assert [r["step"] for r in val] == [CHECKPOINT_AT, STEPS]
    assert (run_dir / "loss.png").stat().st_size > 0


def test_zero2_two_ranks_loss_falls(runs):
    d = runs.get("zero2")
    _assert_loss_falls(d)
    log = (d / "stdout.log").read_text()
    assert "split by rows over 2 ranks" in log  # the default above one rank
    layout = json.loads((d / "checkpoints" / f"step_{STEPS:08d}" / "memory.json").read_text())
    assert layout["partition"] == "rows" and layout["world_size"] == 2
    n = layout["n_entities"]
    assert [s["rows"] for s in layout["shards"]] == [[0, n // 2], [n // 2, n]]
    # The memory's own traffic is logged; it depends on the mentions, not on the table size.
    assert all(r["memory_comm_bytes"] > 0 for r in _train(d).values())


def test_rows_beside_zero1_2_3_compute_the_same_losses(runs):
    """ZeRO's stage changes where the rest of the model lives, not what it computes."""
    z2, z3, z1 = _train(runs.get("zero2")), _train(runs.get("zero3")), _train(runs.get("zero1"))
    _assert_loss_falls(runs.get("zero3"))
    assert "ZeRO stage 3" in (runs.get("zero3") / "stdout.log").read_text()
    for other, steps in ((z3, range(1, STEPS + 1)), (z1, range(1, SHORT + 1))):
        for step in steps:
            for key in ("loss", "lm_loss", "el_loss"):
                assert other[step][key] == pytest.approx(z2[step][key], abs=2e-3), (step, key)


def test_zero3_really_partitions_a_replicated_table(runs):
    d = runs.get("zero3_replicated")
    log = (d / "stdout.log").read_text()
    kept = [line for line in log.splitlines() if "ZeRO-3 keeps" in line]
    assert kept and "persistence_threshold" not in kept[0]
    local, total = (int(x) for x in kept[0].split("ZeRO-3 keeps ")[1].split(" elements")[0].split(" of the table's "))
    assert local * 2 >= total > local  # half (rounded up) of the table on each of the 2 ranks
    m, rows = _train(d), _train(runs.get("zero2"))
    # Same initial table in both layouts: the first forward is the same computation.
    assert m[1]["loss"] == pytest.approx(rows[1]["loss"], abs=1e-4)
    assert m[SHORT]["loss"] < m[1]["loss"]
    # Today's traffic for the table under ZeRO-3: one gather and one gradient reduce-scatter per micro-batch.
    from trainer.memory import zero_table_traffic_bytes
    assert m[1]["memory_comm_bytes"] == zero_table_traffic_bytes(3, total // 32, 32, 4, 4, 2, 2) == 2 * total * 8


def test_resume_continues_with_exactly_the_same_losses(runs):
    full, resumed = _train(runs.get("zero2")), _train(runs.get("zero2_resumed"))
    assert sorted(resumed) == list(range(CHECKPOINT_AT + 1, STEPS + 1))
    for step in resumed:
        for key in ("loss", "lm_loss", "el_loss", "el_acc", "lr"):
            assert resumed[step][key] == pytest.approx(full[step][key], abs=1e-6, rel=0), (step, key)
    assert _samples(runs.get("zero2_resumed")) == {s: p for s, p in _samples(runs.get("zero2")).items()
                                                   if s > CHECKPOINT_AT}


def test_resume_on_one_rank_continues_the_same_sample_sequence(runs):
    full = _samples(runs.get("zero2"))
    d = runs.get("zero2_resumed_on_1_rank")
    one_rank = _samples(d)
    assert sorted(one_rank) == list(range(CHECKPOINT_AT + 1, STEPS + 1))
    assert all(one_rank[s] == full[s] for s in one_rank)
    log = (d / "stdout.log").read_text()
    assert "universal checkpoint" in log and "1 ranks x 4 accumulation" in log
    # The table stays split by rows (the checkpoint's layout), now all rows on the one rank, re-cut from 2 shards.
    assert "split by rows over 1 ranks" in log and "re-cut from the saved shards (2 ranks then, 1 now)" in log
    # The optimizer state came along: the schedule continues and the loss keeps falling from where it was.
    m, f = _train(d), _train(runs.get("zero2"))
    assert m[CHECKPOINT_AT + 1]["lr"] == pytest.approx(f[CHECKPOINT_AT + 1]["lr"])
    assert m[STEPS]["loss"] < f[1]["loss"] - 1.0


@pytest.mark.parametrize("run", ["zero2", "zero3", "zero3_replicated"])
def test_export_stores_the_table_once_and_reloads(runs, run, tmp_path):
    from safetensors import safe_open

    from trainer.export import load_exported

    d = runs.get(run)
    out = tmp_path / f"{run}.safetensors"
    subprocess.run([str(PYTHON), "-m", "trainer.export", str(d), str(out)], cwd=REPO, check=True,
                   capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    with safe_open(str(out), framework="pt") as f:
        keys = list(f.keys())
        table = f.get_tensor("entity_memory.table")
    n_entities, dim = table.shape
    assert [k for k in keys if "table" in k] == ["entity_memory.table"]
    assert sum(1 for k in keys if k.endswith("shared.weight")) == 1
    model = load_exported(out)
    assert torch.equal(model.entity_memory.table.detach(), table)
    # The weights are the trained ones: the table moved away from its initialisation (the same in every layout).
    from trainer.model import EDMem
    fresh = EDMem(model.spec, init_seed=1234)
    assert fresh.entity_memory.table.shape == table.shape
    assert not torch.allclose(fresh.entity_memory.table, table)
    # Trained rows come from the ranks' shards, each exactly as the rank saved it.
    tag = d / "checkpoints" / (d / "checkpoints" / "latest").read_text().strip()
    if (tag / "entity_rows_00001.pt").exists():
        shard = torch.load(tag / "entity_rows_00001.pt", weights_only=False)
        assert torch.equal(table[shard["row_start"]:shard["row_end"]], shard["weight"])
