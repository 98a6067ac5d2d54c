"""Benchmark: the corpus job's fixed cost, Beam's own DoFn-spec lookups vs pipelines.launch.memoize_dofn_specs.

Beam works out each DoFn's state and timer specs (inspect.signature of every method of the DoFn) about 7 times
per ParDo while it builds, checks and translates the graph; the job has ~400 ParDos. The memo keeps one answer
per DoFn instance. This runs, in this process, alternating ``--repeat`` times:

* ``graph``: ``build_pipeline`` on a fresh ``beam.Pipeline`` and its ``to_runner_api()`` (what every runner,
  Dataflow's included, does before anything runs): the fixed cost the memo targets;
* ``job``: the whole job on a small dump (``pipelines.wiki_mentions.run``, DirectRunner), as a user runs it.

``before`` uses Beam's own function, ``after`` the memo. Figures: median CPU seconds of this process (all its
threads; the DirectRunner runs in-process), the ratio after / before (< 1: faster), and how many times Beam asked
for specs and how many it computed. The outputs of both job runs are compared file by file (Parquet, stats.json).

Usage: ``flock /work/bench.lock python benchmarks/bench_graph_build.py [--repeat 5] [--json OUT]``
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import platform
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import apache_beam as beam  # noqa: E402
from apache_beam.transforms import userstate  # noqa: E402

from pipelines import launch  # noqa: E402
from pipelines import wiki_mentions as job  # noqa: E402
from pipelines.config import WikiMentionsConfig  # noqa: E402
from wikiedm.config import parse_config  # noqa: E402

SHARED_DUMP = (REPO / ".." / "shared" / "wikidumps" / "enwiki-2020-tiny-7pages.xml.bz2").resolve()
BEAMS_OWN = userstate.get_dofn_specs


class Counting:
    """``fn`` (a get_dofn_specs), counting its calls."""

    def __init__(self, fn) -> None:
        self.fn, self.calls = fn, 0

    def __call__(self, dofn):
        self.calls += 1
        return self.fn(dofn)


def use(side: str) -> tuple[Counting, Counting]:
    """Install ``side``'s get_dofn_specs; return the counters of (asked, computed)."""
    computed = Counting(BEAMS_OWN)
    asked = computed if side == "before" else Counting(launch.MemoizedDofnSpecs(computed))
    userstate.get_dofn_specs = asked
    launch.memoize_dofn_specs = lambda: None  # the job's beam_options must not install a memo of its own
    return asked, computed


def build_graph(dump: str, out: str) -> None:
    cfg, beam_args = parse_config(WikiMentionsConfig, ["--input", dump, "--output", out], prog="wiki_mentions")
    cfg.validate()
    site, ranges = job.plan_input(cfg)
    pipeline = beam.Pipeline(options=launch.beam_options(beam_args))
    job.build_pipeline(pipeline, cfg, site, ranges, {"runner": "DirectRunner", "read_ranges": len(ranges),
                                                      "input": cfg.input})
    pipeline.to_runner_api()


def run_job(dump: str, out: str) -> None:
    with contextlib.redirect_stdout(io.StringIO()):
        code = job.run(["--input", dump, "--output", out, "--progress_every_s", "600"])
    if code != 0:
        raise SystemExit(f"the job failed on {dump} ({code})")


def output_files(out: Path) -> dict[str, bytes]:
    return {str(p.relative_to(out)): p.read_bytes() for p in sorted(out.rglob("*"))
            if p.suffix == ".parquet" or p.name == "stats.json"}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dump", default=str(SHARED_DUMP) if SHARED_DUMP.exists() else "",
                    help="a small dump (default: the shared 7-page enwiki excerpt, else the project's sample)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench_graph_build-"))
    dump = args.dump
    if not dump:
        from pipelines.sample_dump import write_sample

        dump = write_sample(str(work / "samplewiki-pages-articles.xml.bz2"))
    run_job(dump, str(work / "warm"))  # imports, the tokenizer cache: not part of either side

    cpu = {(stage, side): [] for stage in ("graph", "job") for side in ("before", "after")}
    calls = {}
    outputs = {}
    for round_ in range(args.repeat):
        for side in ("before", "after") if round_ % 2 == 0 else ("after", "before"):
            for stage in ("graph", "job"):
                out = work / f"{stage}-{side}"
                shutil.rmtree(out, ignore_errors=True)
                asked, computed = use(side)
                started = time.process_time()
                (build_graph if stage == "graph" else run_job)(dump, str(out))
                cpu[stage, side].append(time.process_time() - started)
                calls[stage, side] = {"asked": asked.calls, "computed": computed.calls}
                if stage == "job":
                    outputs[side] = output_files(out)
        print(f"round {round_ + 1}/{args.repeat}: " + ", ".join(
            f"{stage} {side} {cpu[stage, side][-1]:.2f} s" for stage, side in cpu), flush=True)
    userstate.get_dofn_specs = BEAMS_OWN
    same = outputs["before"] == outputs["after"]
    results = {"what": __doc__.splitlines()[0], "dump": dump, "repeat": args.repeat, "python": platform.python_version(),
               "beam": beam.__version__, "same_outputs": same, "files_compared": len(outputs["after"]), "stages": {}}
    for stage in ("graph", "job"):
        before, after = (statistics.median(cpu[stage, side]) for side in ("before", "after"))
        results["stages"][stage] = {
            "cpu_s_median": {"before": round(before, 3), "after": round(after, 3)},
            "cpu_s_all": {side: [round(x, 3) for x in cpu[stage, side]] for side in ("before", "after")},
            "ratio_after_before": round(after / before, 3),
            "spec_lookups": {side: calls[stage, side] for side in ("before", "after")},
        }
        print(f"{stage:>5}: before {before:.2f} s, after {after:.2f} s CPU (median of {args.repeat}): "
              f"x{after / before:.2f}; specs asked {calls[stage, 'after']['asked']}, "
              f"computed {calls[stage, 'before']['computed']} -> {calls[stage, 'after']['computed']}")
    print(f"outputs identical: {same} ({len(outputs['after'])} files)")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1) + "\n")
    shutil.rmtree(work, ignore_errors=True)
    if not same:
        raise SystemExit("the job's outputs differ with the memo")


if __name__ == "__main__":
    main()
