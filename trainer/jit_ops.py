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


def shm_buffer_paths(rank: int | None = None, master_addr: str | None = None,
                     master_port: str | None = None) -> list[Path]:
    """The files of DeepSpeed's shared-memory allreduce buffers (one per rank, ~69 MB each) of this user for a
    run's MASTER_ADDR and MASTER_PORT (this process's, unless given): one rank's, or all ranks'."""
    import glob

    addr = master_addr if master_addr is not None else os.environ.get("MASTER_ADDR", "")
    port = master_port if master_port is not None else os.environ.get("MASTER_PORT", "")
    prefix = os.path.join(_SHM_DIR, f"{_SHM_BUFFER}_{os.getuid()}_{addr}_{port}_")
    if rank is not None:
        return [Path(prefix + str(rank))] if os.path.exists(prefix + str(rank)) else []
    return [Path(p) for p in glob.glob(glob.escape(prefix) + "*") if p[len(prefix):].isdigit()]


def init_distributed() -> None:
    """``deepspeed.init_distributed()`` with its comm op built under a lock (:func:`prebuild_deepspeed_comm_op`) and
    its shared-memory buffers not left behind.

    When every rank runs on this machine (the launcher sets LOCAL_SIZE), DeepSpeed's CPU comm op creates one
    allreduce buffer per rank in /dev/shm (~69 MB of RAM each) and never unlinks it: every run would leave its
    buffers in memory until the machine restarts (a run of the test suite left ~2 GB). Once every rank has mapped
    every buffer (init_distributed returned on all: a barrier), each rank unlinks its own: the mappings stay valid
    until the ranks exit, and the memory is given back however they exit."""
    import deepspeed
    import torch.distributed as dist

    prebuild_deepspeed_comm_op()  # never waits on a build lock left by a killed process
    deepspeed.init_distributed()
    dist.barrier()
    for path in shm_buffer_paths(dist.get_rank()):
        path.unlink(missing_ok=True)


_SHM_DIR = "/dev/shm"  # where Linux keeps shm_open's names
_SHM_BUFFER = "deepspeed_allreduce_buffer"  # DeepSpeed's name: <this>_<uid>_<MASTER_ADDR>_<MASTER_PORT>_<rank>


def main() -> None:  # `python -m trainer.jit_ops`: build ahead of time (make venv does)
    logging.basicConfig(level=logging.INFO)
    prebuild_deepspeed_comm_op()
    print(f"deepspeed_shm_comm ready under {_extensions_dir()} (pid {os.getpid()})")


if __name__ == "__main__":
    main()
