"""Benchmark: the whole corpus job vs its extraction stage alone vs ``wikiextractor --links``.

All three on the same dump, in one run, interleaved N times (so background
load hits all alike); medians reported. The job runs as a user runs it
(``python -m pipelines.wiki_mentions``, DirectRunner, one worker), in a
subprocess whose CPU time and peak resident memory are measured. "Per core"
rates divide by CPU seconds (user + system), so they do not flatter a
contender that happens to use more cores.

Usage: ``python benchmarks/bench_pipeline.py [--dump PATH] [--repeat 3] [--json OUT]``
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_extract  # noqa: E402  (the extraction-stage and wikiextractor timers)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DUMP = bench_extract.DEFAULT_DUMP

# Runs a command and prints its CPU seconds and peak RSS (KiB) as JSON on the last line.
_MEASURE = (
    "import json, resource, subprocess, sys, time\n"
    "t = time.perf_counter(); rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode\n"
    "wall = time.perf_counter() - t; r = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(json.dumps({'rc': rc, 'wall': wall, 'cpu': r.ru_utime + r.ru_stime, 'peak_kib': r.ru_maxrss}))\n"
)


def measure(cmd: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-c", _MEASURE, *cmd], capture_output=True, text=True, check=True, cwd=REPO)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if result["rc"] != 0:
        raise RuntimeError(f"{cmd[:4]}... exited {result['rc']}")
    return result


def run_job(dump: Path, out_dir: str) -> dict:
    return measure([sys.executable, "-m", "pipelines.wiki_mentions", "--input", str(dump), "--output", out_dir,
                    "--num_shards", "2", "--keep_red_links", "true", "--direct_num_workers", "1"])


def run_extraction(dump: Path) -> dict:
    code = f"import sys; sys.path.insert(0, {str(REPO / 'benchmarks')!r}); import bench_extract, pathlib; bench_extract.time_ours_with_reading(pathlib.Path({str(dump)!r}))"
    return measure([sys.executable, "-c", code])


def run_wikiextractor(dump: Path) -> dict:
    with tempfile.TemporaryDirectory() as out:
        return measure([sys.executable, "-m", "wikiextractor.WikiExtractor", "--links", "--processes", "1", "-q",
                        "-o", out, str(dump)])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump", type=Path, default=Path(os.environ.get("BENCH_DUMP", DEFAULT_DUMP)))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    if not args.dump.exists():
        print(f"no dump at {args.dump}", file=sys.stderr)
        return 2
    site, articles = bench_extract.read_articles(args.dump)
    n_articles = len(articles)
    samples: dict[str, list[dict]] = {"job": [], "extraction": [], "wikiextractor": []}
    problem = bench_extract.wikiextractor_problem()
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            samples["job"].append(run_job(args.dump, os.path.join(tmp, f"out{i}")))
            samples["extraction"].append(run_extraction(args.dump))
            if problem is None:
                samples["wikiextractor"].append(run_wikiextractor(args.dump))
            print(f"round {i + 1}/{args.repeat} done", file=sys.stderr, flush=True)
        stats = json.loads(Path(tmp, "out0", "stats.json").read_text())["counters"]
    pages = stats["pages_read"]
    results = {}
    for name, runs in samples.items():
        if not runs:
            continue
        cpu = statistics.median(r["cpu"] for r in runs)
        results[name] = {
            "wall_s": statistics.median(r["wall"] for r in runs),
            "cpu_s": cpu,
            "pages_per_cpu_s": pages / cpu,
            "articles_per_cpu_s": n_articles / cpu,
            "peak_rss_mib": statistics.median(r["peak_kib"] for r in runs) / 1024,
        }
    print(f"\n{args.dump.name}: {pages} pages, {n_articles} articles; medians of {args.repeat} (per core = per CPU second)")
    print(f"{'contender':<15}{'wall s':>9}{'cpu s':>9}{'pages/s/core':>14}{'articles/s/core':>17}{'peak MiB':>10}")
    for name, r in results.items():
        print(f"{name:<15}{r['wall_s']:>9.2f}{r['cpu_s']:>9.2f}{r['pages_per_cpu_s']:>14.1f}{r['articles_per_cpu_s']:>17.1f}{r['peak_rss_mib']:>10.0f}")
    ratios = {}
    if "wikiextractor" in results:
        for name in ("job", "extraction"):
            ratios[f"{name}_vs_wikiextractor_speed"] = results[name]["articles_per_cpu_s"] / results["wikiextractor"]["articles_per_cpu_s"]
    else:
        print(f"wikiextractor did not run: {problem}")
    ratios["job_vs_extraction_speed"] = results["job"]["articles_per_cpu_s"] / results["extraction"]["articles_per_cpu_s"]
    ratios["job_vs_extraction_peak_memory"] = results["job"]["peak_rss_mib"] / results["extraction"]["peak_rss_mib"]
    for k, v in ratios.items():
        print(f"  {k:<36} x{v:.2f}")
    if args.json:
        args.json.write_text(json.dumps({"dump": str(args.dump), "pages": pages, "articles": n_articles,
                                         "results": results, "ratios": ratios}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
