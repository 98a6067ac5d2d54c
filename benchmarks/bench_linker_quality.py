"""Linking quality on every shared real dump: a small trained bi-encoder alone, the default linker
(model + alias prior, fitted), and the alias prior alone.

    python benchmarks/bench_linker_quality.py --json benchmarks/results/linker_quality.json
    python benchmarks/bench_linker_quality.py --dumps enwiki-2016-206pages-articles1.xml.bz2 --steps 400

For each dump in ../shared/wikidumps: the corpus job (``--keep_red_links true``, 30% of the
pages held out), a bi-encoder trained from scratch with configs/linker/train_tiny.yaml for
``--steps`` steps on the train split's hyperlinks, then ``linker.evaluate`` on the validation
hyperlinks (the train split's when the validation pages hold none): accuracy@1 and recall@10 of
each system. ``linker_cross_fitted`` is the combination fitted on one half of the mentions and
measured on the other (2 folds): the out-of-sample figure. Prints a Markdown table.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DUMPS_DIR = (REPO / ".." / "shared" / "wikidumps").resolve()


def run(cmd: list[str]) -> None:
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(cmd[:4])}... failed:\n{proc.stderr[-3000:]}")


def bench_dump(dump: Path, work: Path, steps: int, limit: int) -> dict:
    corpus, model, report = work / "corpus", work / "model", work / "eval.json"
    started = time.perf_counter()
    run([sys.executable, "-m", "pipelines.wiki_mentions", "--input", str(dump), "--output", str(corpus),
         "--keep_red_links", "true", "--validation_fraction", "0.3"])
    run([sys.executable, "-m", "linker.train", "--config", "configs/linker/train_tiny.yaml", "--corpus", str(corpus),
         "--output", str(model), "--max_steps", str(steps), "--eval_every", "0", "--eval_examples", "200"])
    run([sys.executable, "-m", "linker.evaluate", "--model", str(model), "--corpus", str(corpus), "--fast", "true",
         "--limit", str(limit), "--fit_mentions", str(limit), "--torch_threads", "1", "--json", str(report)])
    metrics = json.loads(report.read_text())
    row = {"dump": dump.name, "split": metrics["split"], "mentions": metrics["mentions"], "entities": metrics["entities"],
           "combiner": metrics["linker"]["combiner"], "seconds": time.perf_counter() - started}
    for system in ("biencoder", "linker", "alias_prior"):
        row[f"{system}_acc@1"] = metrics[system].get("accuracy@1", 0.0)
        row[f"{system}_recall@10"] = metrics[system].get("recall@10", 0.0)
    row["linker_cross_fitted_acc@1"] = metrics["combiner"].get("accuracy@1_cross_fitted", 0.0)
    return row


def table(rows: list[dict]) -> str:
    head = ("| dump | split | mentions | bi-encoder acc@1 | linker acc@1 (cross-fitted) | prior acc@1 | "
            "bi-encoder R@10 | linker R@10 | prior R@10 |")
    lines = [head, "|" + "---|" * 9]
    for r in rows:
        lines.append(f"| {r['dump']} | {r['split']} | {r['mentions']} | {r['biencoder_acc@1']:.3f} | "
                     f"{r['linker_acc@1']:.3f} ({r['linker_cross_fitted_acc@1']:.3f}) | {r['alias_prior_acc@1']:.3f} | "
                     f"{r['biencoder_recall@10']:.3f} | {r['linker_recall@10']:.3f} | {r['alias_prior_recall@10']:.3f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dumps", default="", help="comma-separated file names in ../shared/wikidumps (default: all)")
    parser.add_argument("--steps", type=int, default=200, help="training steps of the tiny bi-encoder")
    parser.add_argument("--limit", type=int, default=2000, help="mentions evaluated (and fitted on) per dump")
    parser.add_argument("--json", default="", help="write the results to this file")
    args = parser.parse_args(argv)
    names = [n for n in args.dumps.split(",") if n] or sorted(
        p.name for p in DUMPS_DIR.glob("*.xml*") if not p.name.endswith("-index.txt.bz2"))
    results = {"machine": {"platform": platform.platform(), "cpus": os.cpu_count(),
                           "load_average_at_start": os.getloadavg()[0]},
               "steps": args.steps, "limit": args.limit, "dumps": []}
    for name in names:
        with tempfile.TemporaryDirectory(prefix="bench_linker_quality-") as tmp:
            row = bench_dump(DUMPS_DIR / name, Path(tmp), args.steps, args.limit)
        results["dumps"].append(row)
        print(json.dumps(row), file=sys.stderr)
    results["linker_never_below_prior"] = all(r["linker_acc@1"] >= r["alias_prior_acc@1"] for r in results["dumps"])
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    print(table(results["dumps"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
