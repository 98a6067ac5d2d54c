"""benchmarks/bench_scale.py on tiny inputs, so the scale benchmark cannot rot: its process-tree measurement,
its multistream replicas, and one whole session (the job and wikiextractor at x1 and x2 of a 7-page dump)."""
from __future__ import annotations

import bz2
import json
import sys
from pathlib import Path

import pytest

from tests.conftest import WIKIDUMPS, needs_shared

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import bench_scale  # noqa: E402
from synth_dump import replicate_multistream  # noqa: E402

from pipelines.dump import iter_pages, plan_read_ranges  # noqa: E402
from pipelines.records import RawPage  # noqa: E402

TINY = WIKIDUMPS / "enwiki-2020-tiny-7pages.xml.bz2"

# Two children that each hold ~200 MB and burn ~0.4 s of CPU, started by a parent that holds little.
_TWO_CHILDREN = (
    "import subprocess, sys\n"
    "child = 'import time\\nx = bytearray(200 << 20)\\nt = time.process_time()\\n"
    "while time.process_time() - t < 0.4: pass\\ntime.sleep(1.0)'\n"
    "procs = [subprocess.Popen([sys.executable, '-c', child]) for _ in range(2)]\n"
    "[p.wait() for p in procs]\n"
)


def test_run_tree_sums_the_memory_and_cpu_of_every_process_of_the_tree():
    row = bench_scale.run_tree([sys.executable, "-c", _TWO_CHILDREN], cwd=REPO, interval_s=0.05)
    assert row["rc"] == 0 and row["processes"] == 3
    assert row["max_process_rss_mib"] < 300  # one child: what ru_maxrss alone would report
    assert row["peak_rss_mib"] > 380  # both children at once
    assert row["cpu_s"] >= 0.8


def test_run_tree_kills_a_tree_past_the_rss_limit():
    row = bench_scale.run_tree([sys.executable, "-c", _TWO_CHILDREN], cwd=REPO, interval_s=0.05,
                               rss_limit_bytes=300 << 20)
    assert row["killed_at_rss_limit"] and row["rc"] != 0


@needs_shared
def test_multistream_replica_reads_like_a_real_multistream_dump(tmp_path):
    dst = tmp_path / "tiny-x3-multistream.xml.bz2"
    counts = replicate_multistream(str(TINY), str(dst), 3, new_anchor_texts=True, pages_per_stream=4)
    index = tmp_path / "tiny-x3-multistream-index.txt.bz2"
    lines = bz2.open(index, "rt").read().splitlines()
    assert counts["pages"] == len(lines) == 21
    offsets = sorted({int(line.split(":", 1)[0]) for line in lines})
    data = dst.read_bytes()
    assert all(data[o:o + 3] == b"BZh" for o in offsets) and len(offsets) == 6  # 21 pages, 4 per stream
    ranges = plan_read_ranges(str(dst), str(index), target_bytes=1)
    assert len(ranges) == len(offsets)
    by_range = [p for r in ranges for p in iter_pages(r.path, r.start, r.end) if isinstance(p, RawPage)]
    sequential = [p for p in iter_pages(str(dst)) if isinstance(p, RawPage)]
    assert [p.page_id for p in by_range] == [p.page_id for p in sequential]
    assert len({p.title for p in sequential}) == 21
    assert counts["xml_bytes"] == len(bz2.decompress(data))
    first, third = sequential[0], sequential[14]
    assert third.title == f"{first.title} 3"
    if "[[" in first.text:
        assert first.text != third.text  # new anchor texts per copy


@pytest.mark.slow
@needs_shared
def test_a_whole_session_writes_marginal_figures_and_the_shuffle_volume(tmp_path):
    results = tmp_path / "scale.json"
    args = ["--dump", str(TINY), "--sizes", "1,2", "--repeat", "1", "--job", "job=.:1", "--cache", str(tmp_path),
            "--json", str(results), "--plot", str(tmp_path / "scale.png")]
    plain = ["--job", "plain=.:1:--labels.hyperlinks_only true"]  # a contender with its own job flags
    assert bench_scale.main([*args, *plain]) == 0, _failed_runs(tmp_path)
    data = json.loads(results.read_text())
    assert {tuple(r["contender_flags"]) for r in data["runs"] if r["contender"] == "plain, 1 worker"} == {
        ("--labels.hyperlinks_only", "true")}
    assert "x1->x2" in data["summary"]["contenders"]["plain, 1 worker"]["marginal"]
    job = data["summary"]["contenders"]["job, 1 worker"]
    assert set(job["sizes"]) == {"1", "2"} and job["sizes"]["2"]["pages"] == 14
    marginal = job["marginal"]["x1->x2"]
    assert {"ram_bytes_per_xml_byte", "cpu_ms_per_page", "cpu_per_page_vs_wikiextractor"} <= set(marginal)
    assert job["sizes"]["2"]["shuffled_elements_per_page"] > 0 and job["sizes"]["2"]["shuffled_kib_per_page"] > 0
    assert data["summary"]["contenders"]["wikiextractor"]["sizes"]["2"]["cpu_s"] > 0
    assert job["sizes"]["2"]["cpu_vs_wikiextractor_same_round"]["rounds"] == 1
    assert (tmp_path / "scale.png").stat().st_size > 0
    # a second session (wikiextractor alone) adds its runs to the file
    assert bench_scale.main([*args[:6], *args[8:12]]) == 0, _failed_runs(tmp_path)
    again = json.loads(results.read_text())
    assert len(again["runs"]) == len(data["runs"]) + 2 and {r["session"] for r in again["runs"]} == {1, 2}


def test_a_contender_s_own_flags_follow_the_session_s():
    job = bench_scale.parse_jobs(["plain=.:1,2:--labels.hyperlinks_only true"], [], REPO)
    assert [c.label for c in job] == ["plain, 1 worker", "plain, 2 workers"]
    cmd = job[1].command({"path": "dump.xml.bz2"}, Path("out"), ["--read_range_mb", "1"])
    assert cmd[-4:] == ["--read_range_mb", "1", "--labels.hyperlinks_only", "true"]
    assert "--direct_running_mode" in cmd


def _run(contender, size, session, round_, cpu_s):
    return {"contender": contender, "size": size, "session": session, "round": round_, "cpu_s": cpu_s, "rc": 0,
            "wall_s": cpu_s, "peak_rss_mib": 100.0 * size, "peak_anon_rss_mib": 90.0 * size,
            "max_process_rss_mib": 100.0 * size, "load_before": [0.0, 0.0, 0.0]}


def test_same_round_ratios_cancel_a_change_of_machine_speed():
    """Rounds 1 and 2 run at half the speed of round 0: each round's ratio is the same, so their median is too."""
    inputs = {"8": {"pages": 100, "xml_bytes": 10**7}, "64": {"pages": 800, "xml_bytes": 8 * 10**7}}
    runs = []
    for round_, slow in ((0, 1), (1, 2), (2, 2)):
        runs += [_run("job, 1 worker", 8, 1, round_, 30 * slow), _run("wikiextractor", 8, 1, round_, 10 * slow),
                 _run("job, 1 worker", 64, 1, round_, 100 * slow), _run("wikiextractor", 64, 1, round_, 45 * slow)]
    job = bench_scale.summarise(runs, inputs)["contenders"]["job, 1 worker"]
    assert job["sizes"]["8"]["cpu_vs_wikiextractor_same_round"] == {"median": 3.0, "rounds": 3}
    same = job["marginal"]["x8->x64"]["cpu_per_page_vs_wikiextractor_same_round"]
    assert same == {"median": 2.0, "rounds": 3}  # (100 - 30) / (45 - 10) in every round: 2.0
    # runs recorded before rounds were (no "round") take no part in them
    for run in runs:
        run.pop("round")
    job = bench_scale.summarise(runs, inputs)["contenders"]["job, 1 worker"]
    assert "cpu_vs_wikiextractor_same_round" not in job["sizes"]["8"]


def test_steady_rounds_leave_out_a_round_whose_machine_speed_changed_within_it():
    """Round 1's x64 job run ran at half speed (its probes say so): the per-round median still counts it, the
    steady-round median does not; runs without probes (older sessions) give no steady figure."""
    inputs = {"8": {"pages": 100, "xml_bytes": 10**7}, "64": {"pages": 800, "xml_bytes": 8 * 10**7}}
    runs = []
    for round_ in range(3):
        slow = 2 if round_ == 1 else 1
        rows = [_run("job, 1 worker", 8, 1, round_, 30), _run("wikiextractor", 8, 1, round_, 10),
                _run("job, 1 worker", 64, 1, round_, 100 * slow), _run("wikiextractor", 64, 1, round_, 45)]
        for row in rows:
            row["speed_probe_s"] = [0.1, 0.1]
        if slow > 1:  # slow before and after the run: its probes say so (probes during a run are not used)
            rows[2]["speed_probe_s"] = [0.2, 0.2]
            rows[2]["speed_probe_during_s"] = [0.05]
        runs += rows
    summary = bench_scale.summarise(runs, inputs)
    marginal = summary["contenders"]["job, 1 worker"]["marginal"]["x8->x64"]
    assert marginal["cpu_per_page_vs_wikiextractor_same_round"]["rounds"] == 3
    steady = marginal["cpu_per_page_vs_wikiextractor_steady_rounds"]
    assert steady["median"] == 2.0 and steady["rounds"] == 2 and steady["unsteady_rounds"] == 1
    assert steady["probe_spreads"] == [1.0, 2.0, 1.0] and steady["ratios"][1] == 4.857  # (200 - 30) / (45 - 10)
    assert summary["steady_spread"] == bench_scale.STEADY_SPREAD
    # each run's CPU at one speed (its probes' median): the slow run's 200 s at half speed count as 100: every round gives 2.0
    assert marginal["cpu_per_page_vs_wikiextractor_speed_adjusted"] == {"median": 2.0, "rounds": 3,
                                                                         "ratios": [2.0, 2.0, 2.0]}
    for run in runs:
        run.pop("speed_probe_s")
        run.pop("speed_probe_during_s", None)
    marginal = bench_scale.summarise(runs, inputs)["contenders"]["job, 1 worker"]["marginal"]["x8->x64"]
    assert "cpu_per_page_vs_wikiextractor_steady_rounds" not in marginal
    assert "cpu_per_page_vs_wikiextractor_speed_adjusted" not in marginal


def test_the_speed_probe_measures_cpu_time_and_runs_during_a_run(tmp_path):
    assert 0 < bench_scale.speed_probe(repeat=1) < 5
    row = bench_scale.run_tree([sys.executable, "-c", "import time; time.sleep(1.2)"], cwd=tmp_path,
                               probe_every_s=0.3)
    assert row["rc"] == 0 and len(row["speed_probe_during_s"]) >= 2


def _failed_runs(folder: Path) -> str:
    """The end of each run's log, for the assertion message of a session that failed."""
    return "\n".join(f"{log.name}: {log.read_text(errors='replace')[-1500:]}" for log in folder.glob("runs-*/*.log"))
