"""Checkpoints: DeepSpeed's (sharded model + optimizer + scheduler) plus what makes a resume exact.

Layout of RUN/checkpoints/:

    latest                      tag of the newest complete checkpoint (written by DeepSpeed)
    step_00001000/              DeepSpeed files (mp_rank_*, zero_pp_rank_*), and ours:
        rng_rank{r}.pt          python/numpy/torch(/cuda) RNG states of rank r
        edmem_spec.json         how to rebuild the model (export reads it)
        memory.json             the entity table's layout: partition, world size, each rank's rows
        entity_rows_{r}.pt      (partition rows) rank r's rows, their AdamW moments and schedule
    step_00001000_universal/    made on demand when resuming on another number of ranks

Our files are written before DeepSpeed's, and DeepSpeed writes ``latest`` last: a
checkpoint that ``latest`` names is complete. The client state carries the data-loader
position as a global sample count (``samples_seen``), which is independent of the number
of ranks (see trainer.data). Row shards are re-cut on load when the number of ranks
changed (``load_rows``): each rank reads only the slices of the old shards it now owns.
"""
from __future__ import annotations

import json
import random
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import torch
import torch.distributed as dist

TAG_PREFIX = "step_"


def tag_for(step: int) -> str:
    return f"{TAG_PREFIX}{step:08d}"


def rng_state() -> dict:
    state = {"python": random.getstate(), "numpy": np.random.get_state(), "torch": torch.get_rng_state()}
    if torch.cuda.is_available():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def set_rng_state(state: dict) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


MEMORY_FILE = "memory.json"


def rows_file(rank: int) -> str:
    return f"entity_rows_{rank:05d}.pt"


def save(engine, ckpt_dir: Path, step: int, client_state: dict, spec: dict, keep: int, rows=None) -> str:
    """Our files first (RNG, spec, memory layout, row shards), then DeepSpeed's, which writes ``latest``."""
    tag = tag_for(step)
    rank = dist.get_rank() if dist.is_initialized() else 0
    world = dist.get_world_size() if dist.is_initialized() else 1
    (ckpt_dir / tag).mkdir(parents=True, exist_ok=True)
    torch.save(rng_state(), ckpt_dir / tag / f"rng_rank{rank}.pt")
    if rows is not None:
        save_rows(rows, ckpt_dir / tag)
    if rank == 0:
        (ckpt_dir / tag / "edmem_spec.json").write_text(json.dumps(spec, indent=2))
        write_memory_layout(ckpt_dir / tag, world, rows)
    if dist.is_initialized():
        dist.barrier()
    # ds_to_universal needs this key in the client state to convert the checkpoint later.
    client_state = {**client_state, "universal_checkpoint_info": {}}
    engine.save_checkpoint(str(ckpt_dir), tag=tag, client_state=client_state)
    if dist.is_initialized():
        dist.barrier()
    if rank == 0 and keep > 0:
        tags = sorted(p for p in ckpt_dir.glob(f"{TAG_PREFIX}*") if p.is_dir() and not p.name.endswith("_universal"))
        for old in tags[:-keep]:
            shutil.rmtree(old, ignore_errors=True)
            shutil.rmtree(old.with_name(old.name + "_universal"), ignore_errors=True)
    return tag


def find_resume(output_dir: Path, resume: str) -> tuple[Path, str] | None:
    """'auto': RUN/checkpoints/latest if present; 'none'; or a tag directory path / a tag name."""
    if resume == "none":
        return None
    ckpt_dir = output_dir / "checkpoints"
    if resume == "auto":
        latest = ckpt_dir / "latest"
        return (ckpt_dir, latest.read_text().strip()) if latest.exists() else None
    path = Path(resume)
    if path.is_dir() and (path.parent / path.name).exists() and any(path.glob("mp_rank_*")):
        return path.parent, path.name
    if (ckpt_dir / resume).is_dir():
        return ckpt_dir, resume
    raise SystemExit(f"train.resume={resume!r}: no such checkpoint (a tag in {ckpt_dir} or a tag directory)")


def saved_world_size(ckpt_dir: Path, tag: str) -> int:
    """Data-parallel size the checkpoint was written with."""
    layout = memory_layout(ckpt_dir / tag)
    if layout is not None:
        return layout["world_size"]
    return len(list((ckpt_dir / tag).glob("*zero_pp_rank_*_mp_rank_00_optim_states.pt"))) or 1


def memory_layout(tag_dir: Path) -> dict | None:
    """The table layout a checkpoint was written with (None for checkpoints older than memory.json)."""
    path = Path(tag_dir) / MEMORY_FILE
    return json.loads(path.read_text()) if path.exists() else None


def saved_partition(ckpt_dir: Path, tag: str) -> str:
    layout = memory_layout(ckpt_dir / tag)
    return layout["partition"] if layout else "replicated"


def write_memory_layout(tag_dir: Path, world_size: int, rows=None) -> None:
    """memory.json: the partition, the world size and, for rows, which file holds which rows."""
    layout = {"partition": "rows" if rows is not None else "replicated", "world_size": world_size}
    if rows is not None:
        from trainer.memory import row_range

        layout.update(n_entities=rows.n_entities, dim=rows.dim,
                      shards=[{"file": rows_file(r), "rows": list(row_range(rows.n_entities, r, world_size))}
                              for r in range(world_size)])
    (Path(tag_dir) / MEMORY_FILE).write_text(json.dumps(layout, indent=2))


def save_rows(rows, tag_dir: Path) -> None:
    """This rank's rows, their AdamW state and the schedule's position."""
    torch.save({"row_start": rows.row_start, "row_end": rows.row_end, "n_entities": rows.n_entities, "dim": rows.dim,
                "weight": rows.weight.detach().cpu(), "optimizer": rows.optimizer.state_dict(),
                "scheduler": rows.scheduler.state_dict()}, Path(tag_dir) / rows_file(rows.rank))


def read_rows(tag_dir: Path, start: int, end: int, keys=("weight", "exp_avg", "exp_avg_sq")) -> dict:
    """Rows [start, end) of the saved table and of its Adam moments, cut out of whichever shards hold them.

    Shards are memory-mapped: a rank reads only the slices it needs, never the whole table.
    """
    layout = memory_layout(tag_dir)
    if layout is None or layout["partition"] != "rows":
        raise ValueError(f"{tag_dir} holds no row-partitioned entity table")
    parts: dict[str, list[torch.Tensor]] = {k: [] for k in keys}
    for shard in layout["shards"]:
        lo, hi = shard["rows"]
        a, b = max(lo, start), min(hi, end)
        if a >= b:
            continue
        saved = torch.load(Path(tag_dir) / shard["file"], mmap=True, weights_only=False, map_location="cpu")
        state = saved["optimizer"]["state"].get(0, {})
        for k in keys:
            src = saved["weight"] if k == "weight" else state.get(k)
            if src is None:  # no optimizer step taken yet when it was saved
                src = torch.zeros_like(saved["weight"])
            parts[k].append(src[a - lo:b - lo].clone())
    return {k: torch.cat(v) if v else torch.zeros(0, layout["dim"]) for k, v in parts.items()}


def load_rows(rows, tag_dir: Path) -> bool:
    """Restore this rank's rows and their optimizer state; re-cut them when the rank layout changed.

    Returns True when this rank's own shard was loaded as saved (same layout), False when re-sharded.
    """
    layout = memory_layout(tag_dir)
    if layout is None or layout["partition"] != "rows":
        raise SystemExit(f"{tag_dir}: this checkpoint keeps the entity table replicated; resume with "
                         "--model.memory_partition replicated (or auto)")
    if (layout["n_entities"], layout["dim"]) != (rows.n_entities, rows.dim):
        raise SystemExit(f"{tag_dir}: entity table {layout['n_entities']} x {layout['dim']} in the checkpoint, "
                         f"{rows.n_entities} x {rows.dim} in this run (another corpus or model.entity_dim?)")
    own = rows_file(rows.rank)
    same = layout["world_size"] == rows.world_size
    first = torch.load(Path(tag_dir) / (own if same else layout["shards"][0]["file"]), mmap=True,
                       weights_only=False, map_location="cpu")
    cut = read_rows(tag_dir, rows.row_start, rows.row_end)
    with torch.no_grad():
        rows.weight.copy_(cut["weight"].to(rows.weight.dtype))
    opt_state = first["optimizer"]
    if 0 in opt_state["state"]:
        step = opt_state["state"][0]["step"]
        opt_state = {"state": {0: {"step": step.clone() if torch.is_tensor(step) else step,
                                   "exp_avg": cut["exp_avg"], "exp_avg_sq": cut["exp_avg_sq"]}},
                     "param_groups": opt_state["param_groups"]}
    rows.optimizer.load_state_dict(opt_state)
    rows.scheduler.load_state_dict(first["scheduler"])
    return same


def convert_to_universal(ckpt_dir: Path, tag: str) -> str:
    """Rank 0 converts a ZeRO checkpoint for loading on a different number of ranks; returns the new tag."""
    universal_tag = f"{tag}_universal"
    rank = dist.get_rank() if dist.is_initialized() else 0
    if rank == 0 and not (ckpt_dir / universal_tag / "zero").exists():
        cmd = [sys.executable, "-m", "deepspeed.checkpoint.ds_to_universal", "--input_folder", str(ckpt_dir / tag),
               "--output_folder", str(ckpt_dir / universal_tag), "--num_extract_workers", "1",
               "--num_merge_workers", "1"]
        result = subprocess.run(cmd, capture_output=True, text=True)
        if result.returncode != 0:
            raise RuntimeError(f"ds_to_universal failed:\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
        for f in (ckpt_dir / tag).glob("*.json"):
            shutil.copy(f, ckpt_dir / universal_tag / f.name)
    if dist.is_initialized():
        dist.barrier()
    return universal_tag


def load(engine, ckpt_dir: Path, tag: str, world_size: int) -> dict:
    """Load weights, optimizer, scheduler; restore this rank's RNG when the rank layout is unchanged."""
    rank = dist.get_rank() if dist.is_initialized() else 0
    load_path, client_state = engine.load_checkpoint(str(ckpt_dir), tag=tag, load_optimizer_states=True,
                                                     load_lr_scheduler_states=True)
    if load_path is None:
        raise RuntimeError(f"DeepSpeed could not load checkpoint {ckpt_dir / tag}")
    rng_file = ckpt_dir / tag / f"rng_rank{rank}.pt"
    if client_state.get("world_size") == world_size and rng_file.exists():
        set_rng_state(torch.load(rng_file, weights_only=False))
        client_state["rng_restored"] = True
    else:
        client_state["rng_restored"] = False
    return client_state
