"""End-to-end DeepSpeed runs on CPU (tests/trainer/runs.py, shared by the session): 2 ranks with the entity
table split by rows beside ZeRO-1, 2 and 3, bf16, the replicated table really partitioned by ZeRO-3,
resume on 1 rank (rows re-cut), export to one safetensors file. Exact resume on 2 ranks after a SIGKILL of the
same 2-rank run: tests/trainer/test_kill_resume.py."""
from __future__ import annotations

import json
import os
import subprocess

import pytest
import torch

from tests.trainer.runs import CHECKPOINT_AT, EVAL_EVERY, PYTHON, REPO, SHORT, STEPS, sample_ids, train_rows
from trainer.metrics import read_metrics

pytestmark = pytest.mark.slow


def test_two_ranks_with_rows_learn_both_losses(trainer_runs):
    d = trainer_runs.get("rows2")
    m = train_rows(d)
    assert sorted(m) == list(range(1, STEPS + 1))
    first = {k: sum(m[s][k] for s in (1, 2, 3)) / 3 for k in ("lm_loss", "el_loss")}
    last = {k: sum(m[s][k] for s in (STEPS - 2, STEPS - 1, STEPS)) / 3 for k in ("lm_loss", "el_loss")}
    assert last["lm_loss"] < first["lm_loss"] - 2.0 and last["el_loss"] < 0.25 * first["el_loss"], (first, last)
    for r in m.values():
        assert {"step", "loss", "lm_loss", "el_loss", "el_acc", "tokens_per_s", "memory_grad_norm"} <= set(r)
        assert r["tokens_per_s"] > 0 and 0 <= r["el_acc"] <= 1 and r["mentions"] > 0
        # How long the loop waited for its batches (the prefetcher's first ones included): a part of the step.
        assert 0 <= r["data_wait_s"] <= r["step_time_s"] and r["data_wait_frac"] == pytest.approx(
            r["data_wait_s"] / r["step_time_s"])
        # The memory's own traffic is logged; it depends on the mentions, not on the table size.
        assert r["memory_comm_bytes"] > 0
    val = [r for r in read_metrics(d / "metrics.jsonl") if r["split"] == "validation"]
    assert [r["step"] for r in val] == list(range(EVAL_EVERY, STEPS + 1, EVAL_EVERY))
    assert (d / "loss.png").stat().st_size > 0
    log = (d / "stdout.log").read_text()
    assert "split by rows over 2 ranks" in log  # the default above one rank
    assert "data_wait_frac" in log
    layout = json.loads((d / "checkpoints" / f"step_{STEPS:08d}" / "memory.json").read_text())
    assert layout["partition"] == "rows" and layout["world_size"] == 2
    n = layout["n_entities"]
    assert [s["rows"] for s in layout["shards"]] == [[0, n // 2], [n // 2, n]]


def test_tensorboard_events_hold_every_metric_of_the_run(trainer_runs):
    """rows2 (started by `wikiedm pretrain --num_gpus 2`, killed after its step-20 checkpoint, resumed) wrote
    TensorBoard event files by default: each numeric field of each metrics.jsonl row is the scalar SPLIT/FIELD at
    the row's step, once; the steps the kill lost and the rerun redid read as the rerun wrote them."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    d = trainer_runs.get("rows2")
    events = EventAccumulator(str(d / "tensorboard"), size_guidance={"scalars": 0})
    events.Reload()
    rows = read_metrics(d / "metrics.jsonl")
    expected = {(f"{r['split']}/{k}", r["step"]): v for r in rows for k, v in r.items()
                if k not in ("step", "split") and isinstance(v, (int, float)) and not isinstance(v, bool)}
    scalars = [((tag, e.step), e.value) for tag in events.Tags()["scalars"] for e in events.Scalars(tag)]
    got = dict(scalars)
    assert len(got) == len(scalars), "each step once: for the steps the kill lost, what the rerun wrote"
    assert set(got) == set(expected)
    assert {"train/loss", "train/el_acc", "train/memory_comm_bytes", "validation/el_loss"} <= {t for t, _ in got}
    for key, value in expected.items():  # event files keep float32
        assert got[key] == pytest.approx(value, rel=1e-6, abs=1e-30), key
    assert max(train_rows(d, "metrics_before_kill.jsonl")) > CHECKPOINT_AT  # there were lost steps to purge


@pytest.mark.parametrize("other, stage, tolerance", [("zero3", 3, 2e-3), ("zero1_bf16", 1, 0.05)])
def test_rows_beside_zero1_2_3_compute_the_same_losses(trainer_runs, other, stage, tolerance):
    """ZeRO's stage changes where the rest of the model lives, not what it computes (bf16: to its rounding)."""
    z2, o = train_rows(trainer_runs.get("rows2")), train_rows(trainer_runs.get(other))
    assert sorted(o) == list(range(1, SHORT + 1))
    log = (trainer_runs.get(other) / "stdout.log").read_text()
    assert "split by rows over 2 ranks" in log
    assert f"ZeRO stage {stage}, bf16 {stage == 1}" in log
    for step in o:
        for key in ("loss", "lm_loss", "el_loss"):
            assert o[step][key] == pytest.approx(z2[step][key], abs=tolerance), (step, key)
    # The same passages in every step (zero3's batches are made by a worker process per rank).
    samples = sample_ids(trainer_runs.get(other))
    assert sorted(samples) == sorted(o) and all(samples[s] == sample_ids(trainer_runs.get("rows2"))[s] for s in o)
    if stage == 1:  # under bf16 the rows stay float32 (the reads compute in float32)
        shard = torch.load(trainer_runs.get(other) / "checkpoints" / f"step_{SHORT:08d}" / "entity_rows_00000.pt",
                           weights_only=False)
        assert shard["weight"].dtype == torch.float32


def test_zero3_really_partitions_a_replicated_table(trainer_runs):
    d = trainer_runs.get("zero3_replicated")
    log = (d / "stdout.log").read_text()
    kept = [line for line in log.splitlines() if "ZeRO-3 keeps" in line]
    assert kept and "persistence_threshold" not in kept[0]
    local, total = (int(x) for x in kept[0].split("ZeRO-3 keeps ")[1].split(" elements")[0].split(" of the table's "))
    assert local * 2 >= total > local  # half (rounded up) of the table on each of the 2 ranks
    m, rows = train_rows(d), train_rows(trainer_runs.get("rows2"))
    # Same initial table in both layouts: the first forward is the same computation.
    assert m[1]["loss"] == pytest.approx(rows[1]["loss"], abs=1e-4)
    assert m[SHORT]["loss"] < m[1]["loss"]
    # Today's traffic for the table under ZeRO-3: one gather and one gradient reduce-scatter per micro-batch.
    from trainer.memory import zero_table_traffic_bytes
    assert m[1]["memory_comm_bytes"] == zero_table_traffic_bytes(3, total // 32, 32, 4, 4, 1, 2) == total * 8


def test_resume_on_one_rank_recuts_the_rows_and_continues_the_same_samples(trainer_runs):
    full = sample_ids(trainer_runs.get("rows2"))
    d = trainer_runs.get("rows2_on_1_rank")
    one_rank = sample_ids(d)
    assert sorted(one_rank) == list(range(CHECKPOINT_AT + 1, STEPS + 1))
    assert all(one_rank[s] == full[s] for s in one_rank)
    log = (d / "stdout.log").read_text()
    assert "universal checkpoint" in log and "1 ranks x 2 accumulation" in log
    # The table stays split by rows (the checkpoint's layout), now all rows on the one rank, re-cut from 2 shards.
    assert "split by rows over 1 ranks" in log and "re-cut from the saved shards (2 ranks then, 1 now)" in log
    # The optimizer state came along: the schedule continues and the losses stay where the 2-rank run had them.
    m, f = train_rows(d), train_rows(trainer_runs.get("rows2"))
    assert m[CHECKPOINT_AT + 1]["lr"] == pytest.approx(f[CHECKPOINT_AT + 1]["lr"])
    for step in m:  # dropout's random stream differs (reseeded for the new layout), the model does not
        assert m[step]["el_loss"] < 0.5 * f[1]["el_loss"] and m[step]["lm_loss"] < f[1]["lm_loss"] - 2.0


@pytest.mark.parametrize("run", ["rows2", "zero3", "zero3_replicated"])
def test_export_stores_the_table_once_and_reloads(trainer_runs, run, tmp_path):
    from safetensors import safe_open

    from trainer.export import load_exported
    from trainer.model import EDMem

    d = trainer_runs.get(run)
    out = tmp_path / f"{run}.safetensors"
    subprocess.run([str(PYTHON), "-m", "trainer.export", str(d), str(out)], cwd=REPO, check=True,
                   capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    with safe_open(str(out), framework="pt") as f:
        keys = list(f.keys())
        table = f.get_tensor("entity_memory.table")
    assert [k for k in keys if "table" in k] == ["entity_memory.table"]
    assert sum(1 for k in keys if k.endswith("shared.weight")) == 1
    model = load_exported(out)
    assert torch.equal(model.entity_memory.table.detach(), table)
    # The weights are the trained ones: the table moved away from its initialisation (the same in every layout).
    fresh = EDMem(model.spec, init_seed=1234)
    assert fresh.entity_memory.table.shape == table.shape
    assert not torch.allclose(fresh.entity_memory.table, table)
    # Trained rows come from the ranks' shards, each exactly as the rank saved it.
    tag = d / "checkpoints" / (d / "checkpoints" / "latest").read_text().strip()
    if (tag / "entity_rows_00001.pt").exists():
        shard = torch.load(tag / "entity_rows_00001.pt", weights_only=False)
        assert shard["row_end"] == table.shape[0] > shard["row_start"] > 0
        assert torch.equal(table[shard["row_start"]:shard["row_end"]], shard["weight"])
