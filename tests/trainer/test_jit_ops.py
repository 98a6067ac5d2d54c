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
    assert built.is_relative_to(Path(sys.prefix) / "torch_extensions"), built
    assert built.name == "deepspeed_shm_comm"


def test_torch_extensions_dir_still_wins(tmp_path):
    built = _build_dir({**os.environ, "TORCH_EXTENSIONS_DIR": str(tmp_path)})
    assert built == tmp_path / "deepspeed_shm_comm"
