"""Checkpoints: DeepSpeed's (sharded model + optimizer + scheduler) plus what makes a resume exact.

Layout of RUN/checkpoints/:

    latest                      tag of the newest complete checkpoint (written by DeepSpeed)
    step_00001000/              DeepSpeed files (mp_rank_*, zero_pp_rank_*), and ours:
        rng_rank{r}.pt          python/numpy/torch(/cuda) RNG states of rank r
        edmem_spec.json         how to rebuild the model (export reads it)
    step_00001000_universal/    made on demand when resuming on another number of ranks

The client state carries the data-loader position as a global sample count
(``samples_seen``), which is independent of the number of ranks (see trainer.data).
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


def save(engine, ckpt_dir: Path, step: int, client_state: dict, spec: dict, keep: int) -> str:
    tag = tag_for(step)
    rank = dist.get_rank() if dist.is_initialized() else 0
    # ds_to_universal needs this key in the client state to convert the checkpoint later.
    client_state = {**client_state, "universal_checkpoint_info": {}}
    engine.save_checkpoint(str(ckpt_dir), tag=tag, client_state=client_state)
    torch.save(rng_state(), ckpt_dir / tag / f"rng_rank{rank}.pt")
    if rank == 0:
        (ckpt_dir / tag / "edmem_spec.json").write_text(json.dumps(spec, indent=2))
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
    """Data-parallel size the checkpoint was written with (count of optimizer shards)."""
    return len(list((ckpt_dir / tag).glob("*zero_pp_rank_*_mp_rank_00_optim_states.pt"))) or 1


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
