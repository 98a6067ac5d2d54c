"""Scaling benchmark: the corpus job on synthetic enwiki-shaped dumps of growing size.

    python benchmarks/bench_scale.py [--sizes 1000,4000,16000] [--json OUT] [--plot PNG]
                                     [--code OTHER_CHECKOUT] [-- extra job flags]

For each size (articles; ~2 pages per article with redirects), a dump from
``synth_dump.py`` (Zipf link targets, hub entities whose anchor texts grow
with the corpus, redirect chains, 10k-link list pages, a 1k-entry
disambiguation page, very large articles) goes through the job as a user runs
it (``python -m pipelines.wiki_mentions``, DirectRunner, one worker). Reported
per size: CPU seconds per page, marginal CPU per page between sizes (fixed
start-up cost cancels), elements shuffled per page (join requests and table
values, the page join, rows written) and the joins' shuffled bytes per page (the
job's ``volume/*/request_bytes`` and ``table_bytes`` counters; the Parquet bytes
written are reported beside them), the largest group of the key joins
(bounded by ``--max_join_group``; run with a small bound, e.g. ``--
--max_join_group 2000``, to see it hold) and of the page join (bounded by the
largest page), and peak RSS.
A job whose cost is linear in its input keeps per-page CPU and shuffled
elements per page flat and the largest group bounded.

``--code DIR`` runs the job from another checkout (e.g. the commit before a
change) with this checkout's dumps and measurements, for a before/after table.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_pipeline import REPO, measure  # noqa: E402
from synth_dump import replicate_dump, write_synth_dump  # noqa: E402


def shuffled_elements(counters: dict) -> int | None:
    """Elements that cross a shuffle, from the job's volume counters (None for jobs without them)."""
    joins = sum(v for k, v in counters.items()
                if k.startswith("volume/") and k.rsplit("/", 1)[1] in ("requests", "table"))
    if not joins:
        return None
    written = counters.get("passages/train", 0) + counters.get("passages/validation", 0)
    written += counters.get("volume/BuildAliasTable/out", 0)
    return joins + written


def shuffled_bytes(counters: dict) -> int | None:
    """Bytes the joins shuffle (requests, estimated from the job's 1-in-16 sample, and table
    values, exact), as Beam's default coder encodes them; None for jobs without the counters."""
    total = sum(v for k, v in counters.items()
                if k.startswith("volume/") and k.rsplit("/", 1)[1] in ("request_bytes", "table_bytes"))
    return total or None


def bytes_by_join(counters: dict, pages: int) -> dict[str, float]:
    """KiB per page each join shuffles (requests + table values): where the bytes go."""
    joins: dict[str, int] = {}
    for key, value in counters.items():
        parts = key.split("/")
        if len(parts) == 3 and parts[0] == "volume" and parts[2] in ("request_bytes", "table_bytes"):
            joins[parts[1]] = joins.get(parts[1], 0) + value
    return {join: round(b / 1024 / pages, 2) for join, b in sorted(joins.items())}


def output_bytes(out: Path) -> int:
    """Parquet bytes written: what the shard writers' shuffle carries, compressed."""
    manifest = json.loads((out / "manifest.json").read_text())
    return sum(f.get("bytes", 0) for f in manifest["files"])


def run_size(code: Path, dump: Path, out: Path, extra: list[str]) -> dict:
    started = time.perf_counter()
    result = measure([sys.executable, "-m", "pipelines.wiki_mentions", "--input", str(dump), "--output", str(out),
                      "--direct_num_workers", "1", *extra], cwd=code)
    stats = json.loads((out / "stats.json").read_text())
    counters = stats["counters"]
    pages = counters["pages_read"]
    largest = {k.split("/", 1)[1]: v for k, v in counters.items() if k.startswith("largest_group/")}
    page_group = largest.pop("JoinPageParts", None)  # keyed by page: bounded by the page's size
    shuffled = shuffled_elements(counters)
    join_bytes = shuffled_bytes(counters)
    row = {
        "pages": pages,
        "articles": counters["articles"],
        "hyperlinks": counters.get("mentions/hyperlink", 0),
        "labels": counters.get("mentions/same_page_alias", 0) + counters.get("mentions/title_alias", 0),
        "cpu_s": round(result["cpu"], 2),
        "wall_s": round(time.perf_counter() - started, 1),
        "cpu_ms_per_page": round(1000 * result["cpu"] / pages, 3),
        "peak_rss_mib": round(result["peak_kib"] / 1024, 1),
        "shuffled_elements": shuffled,
        "shuffled_per_page": round(shuffled / pages, 2) if shuffled else None,
        "shuffled_bytes": join_bytes,
        "shuffled_kib_per_page": round(join_bytes / 1024 / pages, 2) if join_bytes else None,
        "join_kib_per_page": bytes_by_join(counters, pages),
        "output_kib_per_page": round(output_bytes(out) / 1024 / pages, 2),
        "largest_group": max(largest.values()) if largest else None,
        "largest_group_join": max(largest, key=largest.get) if largest else None,
        "largest_groups": largest,
        "largest_page_group": page_group,
    }
    print(f"  {pages:>7} pages  {row['cpu_s']:>8.1f} cpu-s  {row['cpu_ms_per_page']:>7.2f} ms/page  "
          f"shuffled/page {row['shuffled_per_page']} ({row['shuffled_kib_per_page']} KiB)  largest group {row['largest_group']} ({row['largest_group_join']}; "
          f"page join {page_group})  "
          f"peak {row['peak_rss_mib']:.0f} MiB", flush=True)
    return row


def ratios(rows: list[dict]) -> dict:
    first, last = rows[0], rows[-1]
    out = {
        "size_ratio": round(last["pages"] / first["pages"], 2),
        "cpu_per_page_ratio": round(last["cpu_ms_per_page"] / first["cpu_ms_per_page"], 3),
        "peak_rss_ratio": round(last["peak_rss_mib"] / first["peak_rss_mib"], 3),
        "marginal_cpu_ms_per_page": [
            round(1000 * (b["cpu_s"] - a["cpu_s"]) / (b["pages"] - a["pages"]), 3) for a, b in zip(rows, rows[1:])],
    }
    if "peak_rss_over_runner_mib" in first:
        out["peak_rss_over_runner_mib"] = [r["peak_rss_over_runner_mib"] for r in rows]
    if first["shuffled_per_page"] and last["shuffled_per_page"]:
        out["shuffled_per_page_ratio"] = round(last["shuffled_per_page"] / first["shuffled_per_page"], 3)
    if first.get("shuffled_kib_per_page") and last.get("shuffled_kib_per_page"):
        out["shuffled_bytes_per_page_ratio"] = round(last["shuffled_kib_per_page"] / first["shuffled_kib_per_page"], 3)
    if first["largest_group"] and last["largest_group"]:
        out["largest_group_ratio"] = round(last["largest_group"] / first["largest_group"], 3)
    m = out["marginal_cpu_ms_per_page"]
    if len(m) > 1:
        out["marginal_growth_per_step"] = [round(b / a, 3) for a, b in zip(m, m[1:])]
    return out


def plot(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 4, figsize=(17, 3.8))
    for label, rows in results.items():
        pages = [r["pages"] for r in rows]
        axes[0].plot(pages, [r["cpu_ms_per_page"] for r in rows], "o-", label=label)
        axes[1].plot(pages, [r["peak_rss_mib"] for r in rows], "o-", label=label)
        if "runner_baseline_peak_rss_mib" in rows[0]:
            axes[1].plot(pages, [r["runner_baseline_peak_rss_mib"] for r in rows], "x--",
                         label=f"{label}: DirectRunner baseline")
        if rows[0]["largest_group"]:
            axes[2].plot(pages, [r["largest_group"] for r in rows], "o-", label=label)
        if rows[0].get("shuffled_kib_per_page"):
            axes[3].plot(pages, [r["shuffled_kib_per_page"] for r in rows], "o-", label=label)
    for ax, title in zip(axes, ("CPU ms per page", "peak RSS (MiB)", "largest join group", "join KiB shuffled per page")):
        ax.set_xscale("log")
        ax.set_xlabel("pages in the dump")
        ax.set_title(title)
        ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    extra: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, extra = argv[:cut], argv[cut + 1:]
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="1000,4000,16000",
                        help="articles per synthetic dump, or copies of --replicate, comma-separated")
    parser.add_argument("--replicate", type=Path,
                        help="instead of synthetic dumps: this real dump repeated SIZE times, each copy with new "
                             "page ids, titles and anchor texts (aliases per entity grow with the corpus)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--code", type=Path, action="append", default=[],
                        help="checkout(s) to run the job from (default: this one); repeat to compare")
    parser.add_argument("--workdir", type=Path, help="keep dumps and outputs here (default: a temporary folder)")
    parser.add_argument("--runner_baseline", action="store_true",
                        help="also measure runner_baseline.py (the job's reader, one shuffle, a sum) on each dump: "
                             "the peak RSS the DirectRunner itself needs for that input")
    parser.add_argument("--exact_bytes", action="store_true",
                        help="encode every join request to count shuffled bytes (WIKIEDM_JOIN_BYTES_SAMPLE=1), not "
                             "a 1-in-16 sample: a small dump's few large pages make the sample noisy; costs some CPU")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--plot", type=Path)
    args = parser.parse_args(argv)
    if args.exact_bytes:
        os.environ["WIKIEDM_JOIN_BYTES_SAMPLE"] = "1"  # the job's subprocesses inherit it
    sizes = [int(s) for s in args.sizes.split(",")]
    codes = args.code or [REPO]
    with tempfile.TemporaryDirectory() as tmp:
        work = args.workdir or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        results: dict[str, list[dict]] = {}
        for code in codes:
            label = "this checkout" if code.resolve() == REPO else str(code)
            print(f"{label}:", flush=True)
            rows = []
            for size in sizes:
                if args.replicate:
                    dump = work / f"{args.replicate.name.split('.')[0]}-x{size}.xml.bz2"
                    if not dump.exists():
                        replicate_dump(str(args.replicate), str(dump), size, new_anchor_texts=True)
                else:
                    dump = work / f"synth-{size}-seed{args.seed}.xml.bz2"
                    if not dump.exists():
                        write_synth_dump(str(dump), size, args.seed)
                row = {"size": size, **run_size(code, dump, work / f"out-{dump.name}-{len(results)}", extra)}
                if args.runner_baseline:
                    baseline = measure([sys.executable, str(REPO / "benchmarks" / "runner_baseline.py"), str(dump)])
                    row["runner_baseline_peak_rss_mib"] = round(baseline["peak_kib"] / 1024, 1)
                    row["peak_rss_over_runner_mib"] = round(row["peak_rss_mib"] - row["runner_baseline_peak_rss_mib"], 1)
                    print(f"  {'':>7}        runner baseline peak {row['runner_baseline_peak_rss_mib']:.0f} MiB: "
                          f"the job holds {row['peak_rss_over_runner_mib']:.0f} MiB above it", flush=True)
                rows.append(row)
            results[label] = rows
    summary = {label: ratios(rows) for label, rows in results.items() if len(rows) > 1}
    for label, r in summary.items():
        print(f"{label}: {r}")
    if args.json:
        args.json.write_text(json.dumps({"sizes": sizes, "job_flags": extra, "exact_bytes": args.exact_bytes, "results": results, "ratios": summary},
                                        indent=2) + "\n")
    if args.plot:
        plot(results, args.plot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
