"""Benchmark: the corpus job on 2 DirectRunner worker processes vs 1, on the multistream excerpt.

The multistream dump is read by byte ranges of whole bz2 streams (``--read_range_mb 1`` gives
several ranges on the 1.7 MB excerpt), so with ``--direct_num_workers 2 --direct_running_mode
multi_processing`` two processes read and parse in parallel. Both settings run N times,
interleaved (background load hits both alike); medians of wall and CPU seconds are reported,
with the speed-up, and the outputs are checked to be byte-identical (same sha256 for every
file in manifest.json).

Usage: ``python benchmarks/bench_parallel.py [--dump PATH] [--repeat 3] [--json OUT]``
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pipeline import measure  # noqa: E402  (wall, CPU seconds and peak RSS of a subprocess)

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DUMP = (REPO / ".." / "shared" / "wikidumps" / "enwiki-2016-206pages-articles1-multistream.xml.bz2").resolve()
SETTINGS = {
    "1_worker": ["--direct_num_workers", "1"],
    "2_workers": ["--direct_num_workers", "2", "--direct_running_mode", "multi_processing"],
}


def run_job(dump: Path, out: str, extra: list[str]) -> dict:
    return measure([sys.executable, "-m", "pipelines.wiki_mentions", "--input", str(dump), "--output", out,
                    "--keep_red_links", "true", "--read_range_mb", "1", *extra])


def digests(out: str) -> dict[str, str]:
    manifest = json.loads(Path(out, "manifest.json").read_text())
    return {f["path"]: f["sha256"] for f in manifest["files"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump", type=Path, default=Path(os.environ.get("BENCH_PARALLEL_DUMP", DEFAULT_DUMP)))
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    if not args.dump.exists():
        print(f"no dump at {args.dump}", file=sys.stderr)
        return 2
    samples: dict[str, list[dict]] = {name: [] for name in SETTINGS}
    outputs: dict[str, list[dict]] = {name: [] for name in SETTINGS}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.repeat):
            for name, extra in SETTINGS.items():
                out = os.path.join(tmp, f"{name}-{i}")
                samples[name].append(run_job(args.dump, out, extra))
                outputs[name].append(digests(out))
            print(f"round {i + 1}/{args.repeat} done", file=sys.stderr, flush=True)
        manifest = json.loads(Path(tmp, "1_worker-0", "manifest.json").read_text())
    reference = outputs["1_worker"][0]
    identical = all(o == reference for runs in outputs.values() for o in runs)
    pages = manifest["counters"]["pages_read"]
    results = {}
    for name, runs in samples.items():
        wall, cpu = statistics.median(r["wall"] for r in runs), statistics.median(r["cpu"] for r in runs)
        results[name] = {"wall_s": wall, "cpu_s": cpu, "pages_per_wall_s": pages / wall, "pages_per_cpu_s": pages / cpu,
                         "peak_rss_mib": statistics.median(r["peak_kib"] for r in runs) / 1024,
                         "wall_s_runs": [r["wall"] for r in runs]}
    speedup = results["1_worker"]["wall_s"] / results["2_workers"]["wall_s"]
    report = {
        "dump": str(args.dump), "pages": pages, "read_ranges": manifest["job"]["read_ranges"], "repeat": args.repeat,
        "cpus": os.cpu_count(), "results": results, "speedup_wall_2_vs_1": speedup,
        "cpu_overhead_2_vs_1": results["2_workers"]["cpu_s"] / results["1_worker"]["cpu_s"],
        "outputs_identical": identical,
    }
    print(f"\n{args.dump.name}: {pages} pages in {report['read_ranges']} read ranges; medians of {args.repeat}, {os.cpu_count()} CPUs")
    print(f"{'setting':<12}{'wall s':>9}{'cpu s':>9}{'pages/wall s':>14}{'peak MiB':>10}")
    for name, r in results.items():
        print(f"{name:<12}{r['wall_s']:>9.2f}{r['cpu_s']:>9.2f}{r['pages_per_wall_s']:>14.1f}{r['peak_rss_mib']:>10.0f}")
    print(f"speed-up (wall, 2 workers vs 1): x{speedup:.2f}; CPU seconds x{report['cpu_overhead_2_vs_1']:.2f}; "
          f"outputs identical: {identical}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2) + "\n")
    return 0 if identical else 1


if __name__ == "__main__":
    sys.exit(main())
