"""DeepSpeed's JIT-compiled CPU op, built once per machine without ever hanging on a dead build.

On CPU, ``deepspeed.init_distributed()`` builds (first time, about a minute) or loads its shared-memory
communication op through ``torch.utils.cpp_extension``, which guards the build directory with a plain
``lock`` file. A process killed while holding it (a test timeout, SIGKILL during the first build, a
preempted job) leaves that file behind, and every later run waits on it forever. So each rank first
takes a kernel lock (``fcntl.flock``: released by the kernel when its holder dies, however it dies),
removes a ``lock`` file left by a dead holder, and builds or loads the op. ``init_distributed`` then only
re-loads the built op, a window of milliseconds.

The build goes under the virtual environment (``<venv>/torch_extensions/<hash of its real path>``) unless
TORCH_EXTENSIONS_DIR says otherwise. torch's default, ``~/.cache/torch_extensions``, is shared by every
environment of the user, and the build is keyed by the op's name alone while its command line names one
environment's include paths: two checkouts (a clone beside a working tree, CI beside a developer) then
rebuild the same ``.so`` in place, in turn, a minute each, under ranks that have it loaded. A venv reached
through a symlink (a git worktree whose ``.venv`` links to the main checkout's) would write another command
line for the same files, and torch would rebuild: such a process loads the op its real path built (building
it first with the real path's interpreter, if needed) and hands it to DeepSpeed as loaded.
"""
from __future__ import annotations

import fcntl
import logging
import os
import sys
import zlib
from pathlib import Path

log = logging.getLogger(__name__)


def _real_prefix() -> Path:
    return Path(os.path.realpath(sys.prefix))


def _extensions_dir() -> Path:
    # Named by the environment's real path: a venv reached through a symlink (a worktree's .venv -> the main
    # checkout's) finds the op its other path built.
    real = _real_prefix()
    os.environ.setdefault("TORCH_EXTENSIONS_DIR", str(real / "torch_extensions" / f"{zlib.crc32(str(real).encode()):08x}"))
    from torch.utils.cpp_extension import _get_build_directory

    return Path(_get_build_directory("deepspeed_shm_comm", verbose=False))


def _through_a_link(chosen_by_user: bool) -> bool:
    """This process sees the venv through a symlink, so the build's command line (torch's and DeepSpeed's include
    paths under sys.prefix) differs from the one the op was built with, and torch's loader would rebuild it."""
    return not chosen_by_user and str(_real_prefix()) != os.path.abspath(sys.prefix)


def _load_built_op(build_dir: Path) -> None:
    """The op of ``build_dir``, built by the venv's real interpreter if it is not there yet, loaded into this process
    and registered with DeepSpeed as loaded: ``init_distributed`` then takes it as it is, without a build."""
    import importlib.util
    import subprocess

    import deepspeed
    from deepspeed.accelerator import get_accelerator
    from deepspeed.ops.op_builder.builder import OpBuilder

    builder = get_accelerator().create_op_builder("ShareMemCommBuilder")
    if builder is None or not deepspeed.ops.__compatible_ops__.get(builder.NAME, False):
        return
    library = build_dir / f"{builder.name}.so"
    if not library.exists():
        subprocess.run([str(_real_prefix() / "bin" / "python"), "-c",
                        "from deepspeed.comm.torch import build_shm_op; build_shm_op()"], check=True)
    spec = importlib.util.spec_from_file_location(builder.name, library)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    OpBuilder._loaded_ops[builder.name] = module


def prebuild_deepspeed_comm_op() -> None:
    """Build or load DeepSpeed's shared-memory comm op under a lock that cannot outlive its holder."""
    from deepspeed.comm.torch import build_shm_op

    chosen_by_user = "TORCH_EXTENSIONS_DIR" in os.environ
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
            if _through_a_link(chosen_by_user):
                _load_built_op(build_dir)
            else:
                build_shm_op()
        finally:
            fcntl.flock(guard, fcntl.LOCK_UN)


def main() -> None:  # `python -m trainer.jit_ops`: build ahead of time (make venv does)
    logging.basicConfig(level=logging.INFO)
    prebuild_deepspeed_comm_op()
    print(f"deepspeed_shm_comm ready under {_extensions_dir()} (pid {os.getpid()})")


if __name__ == "__main__":
    main()
