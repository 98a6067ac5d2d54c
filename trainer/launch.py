"""``wikiedm pretrain --num_gpus N``: the ranks started through DeepSpeed's launcher, from the installed package.

    wikiedm pretrain --config configs/pretrain/tiny.yaml --corpus OUT --output RUN --num_gpus 2
    = python -m deepspeed.launcher.runner --num_gpus 2 <site-packages>/trainer/pretrain.py --config ... --corpus OUT ...

The trainer's file is found through the import system (``importlib.util.find_spec``), so no checkout path
is needed. ``--num_nodes``, ``--hostfile`` and ``--master_port`` go to the launcher as they are; on a
machine without a GPU, DeepSpeed's CPU accelerator starts N ranks over gloo. Without ``--num_gpus`` this
process is the one rank (or one of the ranks that a launcher such as ``deepspeed`` or ``torchrun`` started).
This module imports neither torch nor DeepSpeed.
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import signal
import subprocess
import sys

# Launcher flags. Each passes to `deepspeed.launcher.runner` under the same name.
LAUNCHER_FLAGS = {  # name: (type, metavar, help)
    "num_gpus": (int, "N", "start N ranks per node through DeepSpeed's launcher (on a machine without a GPU: N CPU ranks "
                      "over gloo); 0: this process is the only rank, or one that a launcher started"),
    "num_nodes": (int, "N", "with --num_gpus: the number of --hostfile nodes to use; 0: the launcher's choice (every node "
                       "of the hostfile, or this machine alone without one)"),
    "hostfile": (str, "FILE", "with --num_gpus: DeepSpeed's hostfile (one 'HOST slots=N' line per node); '': this machine"),
    "master_port": (int, "PORT", "with --num_gpus: the port of the ranks' rendezvous; 0: $MASTER_PORT when set, else "
                         "DeepSpeed's 29500"),
}


def add_launcher_flags(parser) -> None:
    """The launcher flags on the trainer's :class:`wikiedm.config.ConfigParser` (not config keys)."""
    for name, (type_, metavar, text) in LAUNCHER_FLAGS.items():
        parser.add_argument(f"--{name}", type=type_, default=type_(), dest=f"_{name}", metavar=metavar, help=text)


def split_launcher_flags(argv: list[str]) -> tuple[dict, list[str]]:
    """({flag: value} of the launcher flags given, the other arguments in their order)."""
    parser = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    for name, (type_, _, _) in LAUNCHER_FLAGS.items():
        parser.add_argument(f"--{name}", type=type_, default=None)
    known, rest = parser.parse_known_args(list(argv))
    return {k: v for k, v in vars(known).items() if v is not None}, rest


def launcher_command(argv: list[str], environ=os.environ) -> list[str] | None:
    """The DeepSpeed launcher's command for ``argv`` with ``--num_gpus N``; None: train in this process."""
    flags, rest = split_launcher_flags(argv)
    if not flags.get("num_gpus") or "LOCAL_RANK" in environ:  # no request, or already a rank a launcher started
        return None
    if flags.get("num_gpus", 0) < 0:
        raise SystemExit("--num_gpus must be >= 1 (0: one process, no launcher)")
    if not flags.get("master_port") and environ.get("MASTER_PORT"):
        flags["master_port"] = int(environ["MASTER_PORT"])
    script = importlib.util.find_spec("trainer.pretrain").origin
    passed = [f"--{name}={value}" for name, value in flags.items() if value]
    return [sys.executable, "-m", "deepspeed.launcher.runner", *passed, script, *rest]


def run_launcher(command: list[str]) -> int:
    """Run the launcher; a SIGTERM sent to this process (a scheduler stopping the task) is passed on to it."""
    proc = subprocess.Popen(command)
    previous = signal.signal(signal.SIGTERM, lambda signum, _frame: proc.send_signal(signum))
    try:
        return proc.wait()
    finally:
        signal.signal(signal.SIGTERM, previous)
