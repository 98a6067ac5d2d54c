"""benchmarks/grid_runs.py: the progress log and free port that bench_ablation and bench_learning share."""
from __future__ import annotations

import re
import socket
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "benchmarks"))

import grid_runs  # noqa: E402


def test_log_prints_and_appends_a_time_stamped_line(tmp_path, capsys):
    out = tmp_path / "not" / "yet"
    grid_runs.log("first", out)
    grid_runs.log("second", out)
    lines = (out / "progress.log").read_text().splitlines()
    assert [line.split("] ", 1)[1] for line in lines] == ["first", "second"]
    assert all(re.fullmatch(r"\[\d\d:\d\d:\d\d\] \w+", line) for line in lines)
    assert capsys.readouterr().out.splitlines() == lines


def test_free_port_can_be_bound():
    port = grid_runs.free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_both_grid_benchmarks_log_to_their_own_folder(tmp_path, monkeypatch):
    import bench_ablation
    import bench_learning

    for name, module in (("ablation", bench_ablation), ("learning", bench_learning)):
        monkeypatch.setattr(module, "OUT", tmp_path / name)
        module.log("hello")
        assert (tmp_path / name / "progress.log").read_text().endswith("] hello\n")
        assert module.free_port is grid_runs.free_port
