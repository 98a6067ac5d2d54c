"""Two versions of the corpus job, run at the same time on the replicated excerpt: CPU ratio and equal outputs.

    python benchmarks/bench_versions.py --base REF [--new .] [--sizes 8,64] [--pairs 3] [--pairs_large 2] \\
        --json benchmarks/results/versions.json [-- job flags]

A shared machine's speed changes for minutes at a time, and the corpus job, whose pass 2 reads a large working
set, slows more than a small workload does (``bench_scale.py`` and docs/scale.md): a before/after timing taken
minutes apart can move by x1.5 with no change of code. Here the two versions run concurrently, each pinned to
a core of its own (``taskset``), so that both see the same phase of the machine; the cores are swapped from one
pair to the next, so that neither version keeps the faster core. Each run is the job as ``bench_scale.py`` runs
it (DirectRunner, 1 worker) on the same replicated input (``bench_scale.replicated_input``), measured over its
whole process tree (``bench_scale.run_tree``).

Reported per size: each pair's CPU seconds and ratio (new / base), the median and range of the ratios, and
whether every Parquet file of the two outputs is byte-identical in every pair (a speed-up that changes the
corpus is a different job). The results file holds this invocation only.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))
from bench_scale import (  # noqa: E402
    DEFAULT_CACHE,
    DEFAULT_DUMP,
    JOB_FLAGS,
    code_checkout,
    machine,
    replicated_input,
    run_tree,
    shuffle_volume,
    split_job_flags,
)

VERSIONS = ("base", "new")


def cores_for_pair(index: int) -> dict[str, int]:
    """The core each version runs on in pair ``index``: swapped from one pair to the next."""
    return {"base": index % 2, "new": (index + 1) % 2}


def parquet_digests(out: Path) -> dict[str, str]:
    """Relative path -> sha256 of every Parquet file under ``out``."""
    return {str(p.relative_to(out)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(out.rglob("*.parquet"))}


def differing_files(a: dict[str, str], b: dict[str, str]) -> list[str]:
    """The Parquet files present in one output only, or in both with other bytes."""
    return sorted(name for name in a.keys() | b.keys() if a.get(name) != b.get(name))


def job_command(dump: dict, out: Path, core: int, extra: list[str]) -> list[str]:
    return ["taskset", "-c", str(core), sys.executable, "-m", "pipelines.wiki_mentions", "--input", dump["path"],
            "--output", str(out), *JOB_FLAGS, "--direct_num_workers", "1", *extra]


def run_pair(index: int, size: int, dump: dict, code: dict[str, Path], work: Path, extra: list[str]) -> dict:
    """Both versions at once, each on its own core; their rows and whether their outputs are equal."""
    cores = cores_for_pair(index)
    rows: dict[str, dict] = {}
    outs = {v: work / f"out-{v}-x{size}-{index}" for v in VERSIONS}

    def one(version: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(code[version])}
        began = time.time()
        row = run_tree(job_command(dump, outs[version], cores[version], extra), cwd=code[version], env=env,
                       log_path=work / f"{outs[version].name}.log")
        rows[version] = {"core": cores[version], "began": round(began, 2), "ended": round(time.time(), 2), **row}

    threads = [threading.Thread(target=one, args=(v,)) for v in VERSIONS]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    ok = all(rows[v]["rc"] == 0 for v in VERSIONS)
    for v in VERSIONS:  # what pass 1 handed between its steps through run files (volume/tables/* counters)
        stats = outs[v] / "stats.json"
        if rows[v]["rc"] == 0 and stats.exists():
            counters = json.loads(stats.read_text())["counters"]
            run_files = shuffle_volume(counters).get("run_files", {"records": {}, "bytes": {}})
            rows[v].update(pages_read=counters.get("pages_read"), run_file_bytes=sum(run_files["bytes"].values()),
                           run_file_records=sum(run_files["records"].values()))
    differ = differing_files(*(parquet_digests(outs[v]) for v in VERSIONS)) if ok else None
    for out in outs.values():
        subprocess.run(["rm", "-rf", str(out)], check=True)
    pair = {"size": size, "pair": index, **rows, "ratio": round(rows["new"]["cpu_s"] / rows["base"]["cpu_s"], 4)
            if ok else None, "parquet_identical": differ == [] if ok else None, "parquet_differing": differ}
    print(f"  x{size:<3} pair {index}: base {rows['base']['cpu_s']:7.1f} s (core {cores['base']})  new "
          f"{rows['new']['cpu_s']:7.1f} s (core {cores['new']})  new/base x{pair['ratio']}  "
          f"parquet {'identical' if pair['parquet_identical'] else 'DIFFERENT' if ok else '-'}", flush=True)
    return pair


def summarise(pairs: list[dict]) -> dict[str, dict]:
    """Per size: the pairs' ratios, their median and range, each version's median CPU, outputs equal in all."""
    out: dict[str, dict] = {}
    for size in sorted({p["size"] for p in pairs}):
        done = [p for p in pairs if p["size"] == size and p["ratio"] is not None]
        if not done:
            continue
        ratios = [p["ratio"] for p in done]
        out[str(size)] = {
            "pairs": len(done),
            "ratios": ratios,
            "ratio_median": round(statistics.median(ratios), 3),
            "ratio_range": [min(ratios), max(ratios)],
            "cpu_s_median": {v: round(statistics.median(p[v]["cpu_s"] for p in done), 2) for v in VERSIONS},
            "peak_rss_mib_median": {v: round(statistics.median(p[v]["peak_rss_mib"] for p in done), 1)
                                    for v in VERSIONS},
            "run_file_kib_per_page": {v: _per_page(done[0][v], "run_file_bytes", 1024) for v in VERSIONS},
            "parquet_identical_in_every_pair": all(p["parquet_identical"] for p in done),
        }
    return out


def _per_page(row: dict, key: str, unit: int = 1) -> float | None:
    pages = row.get("pages_read")
    return round(row[key] / unit / pages, 2) if pages and row.get(key) is not None else None


def main(argv: list[str] | None = None) -> int:
    argv, extra = split_job_flags(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", required=True, help="the version compared against: a git ref, or '.' (this checkout)")
    parser.add_argument("--new", default=".", help="the version measured: a git ref, or '.' (this checkout)")
    parser.add_argument("--dump", type=Path, default=DEFAULT_DUMP, help="the dump to replicate")
    parser.add_argument("--sizes", default="8,64", help="copies of --dump, comma-separated")
    parser.add_argument("--pairs", type=int, default=3, help="pairs at sizes <= --pairs_until")
    parser.add_argument("--pairs_until", type=int, default=8)
    parser.add_argument("--pairs_large", type=int, default=2, help="pairs at larger sizes")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                        help="replicated dumps, exported checkouts and outputs (outside the repository)")
    parser.add_argument("--json", type=Path, help="results file (this invocation only)")
    args = parser.parse_args(argv)
    if (os.cpu_count() or 1) < 2:
        parser.error("needs 2 cores: the two versions run at the same time, one per core")

    sizes = [int(s) for s in args.sizes.split(",")]
    checkouts = {v: code_checkout(getattr(args, v), args.cache) for v in VERSIONS}
    code = {v: folder for v, (folder, _commit) in checkouts.items()}
    for folder in set(code.values()):  # bytecode first: a fresh export would otherwise compile it in its first run
        subprocess.run([sys.executable, "-m", "compileall", "-q", "-x", r"/(\.venv|out|runs|data)/", str(folder)],
                       check=True, stdout=subprocess.DEVNULL)
    inputs = {str(s): replicated_input(args.dump, s, args.cache) for s in sizes}
    work = Path(tempfile.mkdtemp(prefix="versions-", dir=args.cache))
    started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    print(f"base {checkouts['base'][1][:12]} vs new {checkouts['new'][1][:12]} on sizes {sizes}; logs in {work}",
          flush=True)
    pairs = []
    for size in sizes:
        for i in range(args.pairs if size <= args.pairs_until else args.pairs_large):
            pairs.append(run_pair(i, size, inputs[str(size)], code, work, extra))
    result = {
        "what": "the corpus job (DirectRunner, 1 worker) of two code versions run at the same time, one per core, "
                "cores swapped between pairs: CPU seconds of each, new / base per pair, and whether every Parquet "
                "file of the two outputs is byte-identical",
        "dump": str(args.dump.name), "started": started, "machine": machine(), "job_flags": [*JOB_FLAGS, *extra],
        "versions": {v: {"ref": getattr(args, v), "commit": checkouts[v][1]} for v in VERSIONS},
        "inputs": inputs, "summary": summarise(pairs), "pairs": pairs,
    }
    for size, s in result["summary"].items():
        print(f"x{size}: new/base x{s['ratio_median']} (median of {s['pairs']}, range {s['ratio_range']}); "
              f"parquet identical in every pair: {s['parquet_identical_in_every_pair']}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1) + "\n")
    failed = any(p["ratio"] is None for p in pairs)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
