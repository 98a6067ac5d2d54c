"""Where DeepSpeed's CPU comm op is built: inside the environment that runs it, not in the user-wide cache
that other environments rebuild in place (trainer/jit_ops.py)."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO

_PRINT_DIR = "from trainer.jit_ops import _extensions_dir; print(_extensions_dir())"


def _build_dir(env: dict) -> Path:
    proc = subprocess.run([sys.executable, "-c", _PRINT_DIR], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return Path(proc.stdout.strip().splitlines()[-1])


def test_the_op_is_built_inside_the_running_environment():
    env = {k: v for k, v in os.environ.items() if k != "TORCH_EXTENSIONS_DIR"}
    built = _build_dir(env)
    assert built.is_relative_to(Path(os.path.realpath(sys.prefix)) / "torch_extensions"), built
    assert built.name == "deepspeed_shm_comm"


def test_torch_extensions_dir_still_wins(tmp_path):
    built = _build_dir({**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path)})
    assert built == tmp_path / "deepspeed_shm_comm"


def test_a_venv_reached_through_a_symlink_finds_the_built_op(tmp_path):
    """A git worktree's .venv is a symlink to the main checkout's: its processes load the op built there, and
    DeepSpeed's init_distributed takes it as loaded (no 80-second rebuild, the .so untouched)."""
    import pytest

    real = Path(os.path.realpath(sys.prefix))
    env = {k: v for k, v in os.environ.items() if k != "TORCH_EXTENSIONS_DIR"}
    library = _build_dir(env) / "deepspeed_shm_comm.so"
    if not library.exists():
        pytest.skip("the op is not built yet (make venv builds it: python -m trainer.jit_ops)")
    built_at = library.stat().st_mtime_ns
    link = tmp_path / "venv"
    link.symlink_to(real)
    python = link / "bin" / Path(sys.executable).name
    script = ("import os, time; from trainer.jit_ops import prebuild_deepspeed_comm_op, _extensions_dir; "
              "t = time.monotonic(); prebuild_deepspeed_comm_op(); import deepspeed; "
              "os.environ.update(RANK='0', LOCAL_RANK='0', WORLD_SIZE='1', MASTER_ADDR='127.0.0.1', MASTER_PORT='29537'); "
              "deepspeed.init_distributed(); print(_extensions_dir(), time.monotonic() - t)")
    proc = subprocess.run([str(python), "-c", script], cwd=REPO, env={**env, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    where, seconds = proc.stdout.strip().splitlines()[-1].rsplit(" ", 1)
    assert Path(where) == library.parent
    assert library.stat().st_mtime_ns == built_at, f"rebuilt in {seconds} s"  # loaded, not rebuilt
