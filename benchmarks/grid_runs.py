"""Helpers shared by the training-grid benchmarks (bench_ablation.py, bench_learning.py).

Light on purpose (standard library only): importing it costs no torch start-up.
"""
from __future__ import annotations

import datetime as dt
import socket
from pathlib import Path

PROGRESS_LOG = "progress.log"


def log(msg: str, out_dir: Path) -> None:
    """Print ``msg`` with a UTC time stamp and append the same line to OUT_DIR/progress.log (made if missing)."""
    line = f"[{dt.datetime.now(dt.timezone.utc):%H:%M:%S}] {msg}"
    print(line, flush=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / PROGRESS_LOG, "a") as f:
        f.write(line + "\n")


def free_port() -> int:
    """A TCP port on 127.0.0.1 free right now (a rank's MASTER_PORT, so that two grid points never share one)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
