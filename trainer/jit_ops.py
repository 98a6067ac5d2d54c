"""DeepSpeed's JIT-compiled CPU op, built once per machine without ever hanging on a dead build.

On CPU, ``deepspeed.init_distributed()`` builds (first time, about a minute) or loads its shared-memory
communication op through ``torch.utils.cpp_extension``, which guards the build directory with a plain
``lock`` file. A process killed while holding it (a test timeout, SIGKILL during the first build, a
preempted job) leaves that file behind, and every later run waits on it forever. So each rank first
takes a kernel lock (``fcntl.flock``: released by the kernel when its holder dies, however it dies),
removes a ``lock`` file left by a dead holder, and builds or loads the op. ``init_distributed`` then only
re-loads the built op, a window of milliseconds.

The build goes under the virtual environment (``<venv>/torch_extensions/<hash of its path>``) unless
TORCH_EXTENSIONS_DIR says otherwise. torch's default, ``~/.cache/torch_extensions``, is shared by every
environment of the user, and the build is keyed by the op's name alone while its command line names one
environment's include paths: two checkouts (a clone beside a working tree, CI beside a developer) then
rebuild the same ``.so`` in place, in turn, a minute each, under ranks that have it loaded.
"""
from __future__ import annotations

import fcntl
import logging
import os
import sys
import zlib
from pathlib import Path

log = logging.getLogger(__name__)


def _extensions_dir() -> Path:
    # Named by the environment's path as this process sees it (the build's include paths): a venv reached
    # through two paths (a symlinked .venv) gets two builds rather than one rebuilt in turns.
    seen_as = f"{zlib.crc32(sys.prefix.encode()):08x}"
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(Path(sys.prefix) / "torch_extensions" / seen_as))
    from torch.utils.cpp_extension import _get_build_directory

    return Path(_get_build_directory("deepspeed_shm_comm", verbose=False))


def prebuild_deepspeed_comm_op() -> None:
    """Build or load DeepSpeed's shared-memory comm op under a lock that cannot outlive its holder."""
    from deepspeed.comm.torch import build_shm_op

    build_dir = _extensions_dir()
    build_dir.mkdir(parents=True, exist_ok=True)
    with open(build_dir.parent / "deepspeed_shm_comm.wikiedm.flock", "a+") as guard:
        fcntl.flock(guard, fcntl.LOCK_EX)  # one process at a time, across ranks and runs
        try:
            stale = build_dir / "lock"
            if stale.exists():
                # Every project process builds under the flock we hold, so this file's creator is dead.
                log.warning("removing %s left by a killed build", stale)
                stale.unlink(missing_ok=True)
            build_shm_op()
        finally:
            fcntl.flock(guard, fcntl.LOCK_UN)


def main() -> None:  # `python -m trainer.jit_ops`: build ahead of time (make venv does)
    logging.basicConfig(level=logging.INFO)
    prebuild_deepspeed_comm_op()
    print(f"deepspeed_shm_comm ready under {_extensions_dir()} (pid {os.getpid()})")


if __name__ == "__main__":
    main()
