"""benchmarks/bench_versions.py: two versions of the job at once, one per core, cores swapped, outputs compared."""
from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.conftest import WIKIDUMPS, needs_shared

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import bench_versions  # noqa: E402

TINY = WIKIDUMPS / "enwiki-2020-tiny-7pages.xml.bz2"


def test_the_versions_swap_cores_from_one_pair_to_the_next():
    assert [bench_versions.cores_for_pair(i) for i in range(3)] == [
        {"base": 0, "new": 1}, {"base": 1, "new": 0}, {"base": 0, "new": 1}]


def test_a_parquet_file_with_other_bytes_or_in_one_output_only_is_reported(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    for out in (a, b):
        (out / "passages").mkdir(parents=True)
        (out / "passages" / "train-0.parquet").write_bytes(b"same")
        (out / "stats.json").write_text("{}")  # not a Parquet file: not compared
    (a / "vocab.parquet").write_bytes(b"one")
    (b / "vocab.parquet").write_bytes(b"two")
    (b / "extra.parquet").write_bytes(b"x")
    digests = bench_versions.parquet_digests(a), bench_versions.parquet_digests(b)
    assert bench_versions.differing_files(*digests) == ["extra.parquet", "vocab.parquet"]
    assert bench_versions.differing_files(digests[0], digests[0]) == []


def _pair(size, index, base_cpu, new_cpu, identical=True):
    row = {"rc": 0, "peak_rss_mib": 100.0}
    return {"size": size, "pair": index, "base": {**row, "cpu_s": base_cpu}, "new": {**row, "cpu_s": new_cpu},
            "ratio": round(new_cpu / base_cpu, 4), "parquet_identical": identical}


def test_the_summary_takes_the_median_of_the_pairs_and_flags_a_pair_whose_outputs_differ():
    pairs = [_pair(8, 0, 20.0, 18.0), _pair(8, 1, 30.0, 28.5), _pair(8, 2, 22.0, 19.8),
             _pair(64, 0, 200.0, 190.0, identical=False)]
    summary = bench_versions.summarise(pairs)
    assert summary["8"]["ratio_median"] == 0.9 and summary["8"]["ratio_range"] == [0.9, 0.95]
    assert summary["8"]["cpu_s_median"] == {"base": 22.0, "new": 19.8}
    assert summary["8"]["parquet_identical_in_every_pair"] is True
    assert summary["64"]["parquet_identical_in_every_pair"] is False


@needs_shared
def test_one_invocation_runs_both_versions_at_once_and_finds_the_same_outputs(tmp_path):
    results = tmp_path / "versions.json"
    args = ["--base", "HEAD", "--new", ".", "--dump", str(TINY), "--sizes", "1", "--pairs", "2",
            "--cache", str(tmp_path), "--json", str(results)]
    assert bench_versions.main(args) == 0
    data = json.loads(results.read_text())
    assert [(p["base"]["core"], p["new"]["core"]) for p in data["pairs"]] == [(0, 1), (1, 0)]
    summary = data["summary"]["1"]
    assert summary["pairs"] == 2 and summary["parquet_identical_in_every_pair"] is True
    assert all(p["base"]["cpu_s"] > 0 and p["new"]["cpu_s"] > 0 for p in data["pairs"])
    assert summary["run_file_kib_per_page"]["base"] == summary["run_file_kib_per_page"]["new"] > 0
    for pair in data["pairs"]:  # the two ran at the same time: each began before the other ended
        assert pair["base"]["began"] < pair["new"]["ended"] and pair["new"]["began"] < pair["base"]["ended"]
