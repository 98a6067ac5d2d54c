"""Benchmark: the whole corpus job vs its extraction stage vs ``wikiextractor --links``, per page.

The input is a real enwiki excerpt (default: the shared 206-page one)
replicated at two sizes (x2 and x8 by default) with new page ids and titles
(``synth_dump.replicate_dump``). Each contender runs on both sizes,
interleaved and repeated (medians); the *marginal* CPU per page, (CPU(large) -
CPU(small)) / (pages(large) - pages(small)), cancels fixed start-up costs
(imports, tokenizer build, Beam graph), which is what a user pays per page on
a full dump. CPU = user + system of the process and its children, so a
contender that uses more cores is not flattered.

* ``job``: ``python -m pipelines.wiki_mentions --keep_red_links true``, DirectRunner, one worker;
* ``extraction``: reading the dump and ``extract_article`` on every article (no Beam);
* ``wikiextractor``: ``python -m wikiextractor.WikiExtractor --links --processes 1``.

``--profile`` adds a per-stage breakdown of the job on the larger size
(cProfile, in-process: cumulative time of each stage's functions, ``STAGES``;
the rest is Beam's per-element machinery, coders, shuffles and start-up). A
stage function the profile never saw is named in a warning and in the results
(``functions_not_profiled``): with ``--article_cache false`` (not run here)
pass 2 reads with ``_articles``.

Usage: ``python benchmarks/bench_pipeline.py [--dump PATH] [--sizes 2,8] [--repeat 3] [--profile] [--json OUT]``
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import pstats
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_extract  # noqa: E402  (the extraction-stage and wikiextractor timers)
from synth_dump import replicate_dump  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DUMP = bench_extract.DEFAULT_DUMP

# Runs a command and prints its CPU seconds and peak RSS (KiB) as JSON on the last line.
_MEASURE = (
    "import json, resource, subprocess, sys, time\n"
    "t = time.perf_counter(); rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode\n"
    "wall = time.perf_counter() - t; r = resource.getrusage(resource.RUSAGE_CHILDREN)\n"
    "print(json.dumps({'rc': rc, 'wall': wall, 'cpu': r.ru_utime + r.ru_stime, 'peak_kib': r.ru_maxrss}))\n"
)

# Stage -> the functions whose cumulative time is that stage's own work. The stages do not overlap: a name with a
# leading "-" is subtracted (a step's own work is its function's time less the stages it calls). The two-pass job
# (pipelines/twopass_job.py): pass 1 reads each range into the article cache and sorted run files, BuildTables
# steps over the runs and writes the lookup store; pass 2 labels, tokenises and writes each unit by lookups.
STAGES = {
    "read dump (decompress, split pages, XML)": ("ReadPagesFn.read",),
    "wikitext extraction": ("ClassifyPagesFn.process",),
    "pass 1: write the article cache (zstd chunks)": ("ChunkedCacheWriter.add", "ChunkedCacheWriter.finish"),
    "pass 1: titles, redirects and links to sorted run files": ("ExtractRangeToRunsFn.process",
                                                                "-ExtractRangeFn.process"),
    "pass 1: redirects and link resolution": ("ChaseHopFn.process", "ResolveTitlesFn.process"),
    "pass 1: alias table, ranked aliases and vocabulary": ("BuildAliasRowsFn.process", "CountEntityLinksFn.process",
                                                           "SelectVocabFn.process", "VocabStoreRunsFn.process"),
    "pass 1: write the lookup store (SQLite)": ("WriteStoreShardFn.process",),
    "pass 2: read the cached articles": ("WritePassagesByRangeFn._cached_articles", "WritePassagesByRangeFn._articles"),
    "pass 2: lookups in the store": ("open_store", "LookupStore.get"),
    "pass 2: label candidates": ("page_candidates",),
    "pass 2: missing-mention labels": ("label_page",),
    "pass 2: tokenise and cut windows": ("ChunkWindowsFn.windows",),
    "pass 2: entity descriptions": ("first_paragraph",),
    "pass 2: pack, sort and write Parquet (the rest of a unit)": (
        "WritePassagesByRangeFn.process", "-WritePassagesByRangeFn._cached_articles",
        "-WritePassagesByRangeFn._articles", "-open_store", "-LookupStore.get", "-page_candidates", "-label_page",
        "-ChunkWindowsFn.windows", "-first_paragraph"),
    "vocabulary, dead letters, tokenizer and manifest": ("_WriteSortedFileFn.process", "SaveTokenizerFn.process",
                                                         "WriteManifestFn.process"),
}


def measure(cmd: list[str], cwd: Path = REPO) -> dict:
    out = subprocess.run([sys.executable, "-c", _MEASURE, *cmd], capture_output=True, text=True, check=True, cwd=cwd)
    result = json.loads(out.stdout.strip().splitlines()[-1])
    if result["rc"] != 0:
        raise RuntimeError(f"{cmd[:4]}... exited {result['rc']}")
    return result


JOB_FLAGS = ("--keep_red_links", "true", "--direct_num_workers", "1", "--progress_every_s", "600")


def run_job(dump: Path, out_dir: str) -> dict:
    return measure([sys.executable, "-m", "pipelines.wiki_mentions", "--input", str(dump), "--output", out_dir,
                    *JOB_FLAGS])


def run_extraction(dump: Path) -> dict:
    code = (f"import sys; sys.path.insert(0, {str(REPO / 'benchmarks')!r}); import bench_extract, pathlib; "
            f"bench_extract.time_ours_with_reading(pathlib.Path({str(dump)!r}))")
    return measure([sys.executable, "-c", code])


def run_wikiextractor(dump: Path) -> dict:
    with tempfile.TemporaryDirectory() as out:
        return measure([sys.executable, "-m", "wikiextractor.WikiExtractor", "--links", "--processes", "1", "-q",
                        "-o", out, str(dump)])


def profile_stages(dump: Path, out_dir: str) -> dict:
    """CPU share of each stage in one profiled run of the job (one process: the DirectRunner in-process)."""
    prof = Path(out_dir) / "job.prof"
    subprocess.run([sys.executable, "-m", "cProfile", "-o", str(prof), "-m", "pipelines.wiki_mentions",
                    "--input", str(dump), "--output", str(Path(out_dir) / "out"), *JOB_FLAGS,
                    "--direct_running_mode", "in_memory"],
                   check=True, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    stats = pstats.Stats(str(prof))
    total = stats.total_tt
    cumulative: dict[str, float] = {}
    found: set[str] = set()
    for (filename, line, name), (_cc, _nc, _tt, ct, _callers) in stats.stats.items():
        if "/pipelines/" not in filename and "/benchmarks/" not in filename:
            continue
        qual = f"{_enclosing_class(filename, line)}.{name}".lstrip(".")
        for stage, functions in STAGES.items():
            for entry in functions:
                fn, sign = (entry[1:], -1.0) if entry.startswith("-") else (entry, 1.0)
                if fn == qual or ("." not in fn and fn == name):
                    cumulative[stage] = cumulative.get(stage, 0.0) + sign * ct
                    found.add(fn)
    missing = sorted({entry.lstrip("-") for functions in STAGES.values() for entry in functions} - found)
    if missing:  # a renamed function would silently drop its stage's time into "Beam machinery"
        print(f"warning: no profile entry for {', '.join(missing)} (renamed, or never called on this dump)",
              file=sys.stderr)
    shares = {stage: round(seconds / total, 4) for stage, seconds in cumulative.items()}
    shares["Beam machinery (coders, shuffles, per-element calls) and start-up"] = round(
        1 - sum(shares.values()), 4)
    return {"profiled_seconds": round(total, 1), "shares": shares, "functions_not_profiled": missing}


_CLASS_OF_LINE: dict[str, dict[int, str]] = {}


def _enclosing_class(filename: str, line: int) -> str:
    """The class whose method starts at ``line`` of ``filename`` ("" for a module-level function).

    Several DoFns of one file share the method name ``process``; the profile tells them apart by line.
    """
    if filename not in _CLASS_OF_LINE:
        import ast

        table: dict[int, str] = {}
        try:
            tree = ast.parse(Path(filename).read_text(encoding="utf-8"))
        except (OSError, SyntaxError):
            tree = None
        for node in ast.walk(tree) if tree else ():
            if isinstance(node, ast.ClassDef):
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        table[item.lineno] = node.name
                        for deco in item.decorator_list:  # cProfile reports the first decorator's line
                            table[deco.lineno] = node.name
        _CLASS_OF_LINE[filename] = table
    return _CLASS_OF_LINE[filename].get(line, "")


def median_of(runs: list[dict], key: str) -> float:
    return statistics.median(r[key] for r in runs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dump", type=Path, default=Path(os.environ.get("BENCH_DUMP", DEFAULT_DUMP)))
    parser.add_argument("--sizes", default="2,8", help="replication factors, small and large")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--profile", action="store_true", help="add a per-stage breakdown (cProfile) of the large size")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    if not args.dump.exists():
        print(f"no dump at {args.dump}", file=sys.stderr)
        return 2
    small, large = (int(s) for s in args.sizes.split(","))
    machine = {"platform": platform.platform(), "cpus": os.cpu_count(), "load_average_at_start": os.getloadavg()[0]}
    problem = bench_extract.wikiextractor_problem()
    contenders = {"job": run_job, "extraction": run_extraction}
    if problem is None:
        contenders["wikiextractor"] = run_wikiextractor
    else:
        print(f"wikiextractor does not run here: {problem}", file=sys.stderr)
    samples: dict[tuple[str, int], list[dict]] = {(c, s): [] for c in contenders for s in (small, large)}
    pages: dict[int, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        dumps = {}
        for size in (small, large):
            dumps[size] = Path(tmp) / f"x{size}.xml.bz2"
            pages[size] = replicate_dump(str(args.dump), str(dumps[size]), size)["pages"]
        for i in range(args.repeat):
            for size in (small, large):
                for name, run in contenders.items():
                    if name == "job":
                        samples[(name, size)].append(run(dumps[size], os.path.join(tmp, f"out-{size}-{i}")))
                    else:
                        samples[(name, size)].append(run(dumps[size]))
            print(f"round {i + 1}/{args.repeat} done", file=sys.stderr, flush=True)
        breakdown = profile_stages(dumps[large], tmp) if args.profile else None
        counters = json.loads(Path(tmp, f"out-{large}-0", "stats.json").read_text())["counters"]
    results: dict[str, dict] = {}
    for name in contenders:
        cpu_small, cpu_large = median_of(samples[(name, small)], "cpu"), median_of(samples[(name, large)], "cpu")
        results[name] = {
            f"cpu_s_x{small}": round(cpu_small, 2),
            f"cpu_s_x{large}": round(cpu_large, 2),
            "marginal_cpu_ms_per_page": round(1000 * (cpu_large - cpu_small) / (pages[large] - pages[small]), 3),
            f"peak_rss_mib_x{small}": round(median_of(samples[(name, small)], "peak_kib") / 1024, 1),
            f"peak_rss_mib_x{large}": round(median_of(samples[(name, large)], "peak_kib") / 1024, 1),
        }
    ratios = {}
    if "wikiextractor" in results:
        base = results["wikiextractor"]["marginal_cpu_ms_per_page"]
        for name in ("job", "extraction"):
            ratios[f"{name}_cpu_per_page_vs_wikiextractor"] = round(results[name]["marginal_cpu_ms_per_page"] / base, 3)
    ratios["job_cpu_per_page_vs_extraction"] = round(
        results["job"]["marginal_cpu_ms_per_page"] / results["extraction"]["marginal_cpu_ms_per_page"], 3)
    print(f"\n{args.dump.name} x{small} ({pages[small]} pages) and x{large} ({pages[large]} pages); "
          f"medians of {args.repeat}; marginal CPU per page = CPU difference / page difference")
    print(f"{'contender':<15}{'ms/page':>10}{'peak MiB x' + str(small):>17}{'peak MiB x' + str(large):>17}")
    for name, r in results.items():
        print(f"{name:<15}{r['marginal_cpu_ms_per_page']:>10.2f}{r[f'peak_rss_mib_x{small}']:>17.0f}"
              f"{r[f'peak_rss_mib_x{large}']:>17.0f}")
    for k, v in ratios.items():
        print(f"  {k:<45} x{v:.2f}")
    if breakdown:
        print(f"job stages on x{large} (cProfile, {breakdown['profiled_seconds']} s profiled):")
        for stage, share in sorted(breakdown["shares"].items(), key=lambda kv: -kv[1]):
            print(f"  {stage:<70} {share:>6.1%}")
    if args.json:
        args.json.write_text(json.dumps({
            "machine": machine, "dump": str(args.dump), "sizes": [small, large], "pages": pages,
            "repeat": args.repeat,
            "results": results, "ratios": ratios, "stage_breakdown": breakdown,
            "job_volume": {k: v for k, v in counters.items() if k.startswith("volume/")},
        }, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
