"""The benchmark suite: which script measures what, the results file it writes, and how `make bench` runs it.

    python benchmarks/suite.py                # run every benchmark `make bench` runs, in this order
    python benchmarks/suite.py pipeline labels   # only these (results-file stems)
    python benchmarks/suite.py --list         # the table: group, results file, script, command

One entry per results file ``benchmarks/results/NAME.json``. `benchmarks/make_docs.py` shows this table at the
top of docs/benchmarks.md, and tests/test_docs.py checks that every results file, and every script in
benchmarks/, has its entry. Entries that `make bench` does not run say why (``skip``).
"""
from __future__ import annotations

import argparse
import shlex
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ENWIKI206 = "../shared/wikidumps/enwiki-2016-206pages-articles1.xml.bz2"
# The corpus bench_data.py reads, built first by the same job a user runs.
DATA_CORPUS = "out/bench/enwiki206"


@dataclass(frozen=True)
class Benchmark:
    name: str  # the results file's stem: benchmarks/results/NAME.json
    group: str  # the part of the project it measures
    measures: str  # one line: what against what
    command: tuple[str, ...]  # run from the repository root; "python" is this interpreter
    prepare: tuple[str, ...] = ()  # run first when its output is missing (a corpus the benchmark reads)
    helpers: tuple[str, ...] = ()  # further scripts of benchmarks/ it uses
    skip: str = ""  # why `make bench` does not run it (empty: it does)

    @property
    def script(self) -> str:
        return next(arg for arg in self.command if arg.startswith("benchmarks/"))

    @property
    def results(self) -> str:
        return f"benchmarks/results/{self.name}.json"


def _py(script: str, *args: str) -> tuple[str, ...]:
    return ("python", f"benchmarks/{script}", *args)


def _json(name: str) -> tuple[str, str]:
    return "--json", f"benchmarks/results/{name}.json"


SUITE: list[Benchmark] = [
    # the corpus job
    Benchmark("pipeline", "corpus job", "the whole job and its extraction stage vs wikiextractor, CPU per page",
              _py("bench_pipeline.py", "--profile", *_json("pipeline")), helpers=("bench_extract.py",)),
    Benchmark("extract", "corpus job", "where the extraction stage's CPU goes (reading, pre-pass, parse)",
              _py("bench_extract.py", "--skip-wikiextractor", *_json("extract")),
              helpers=("bench_extract_replicate.py",)),
    Benchmark("parallel", "corpus job", "DirectRunner with 2 worker processes vs 1", _py("bench_parallel.py", *_json("parallel"))),
    Benchmark("graph_build", "corpus job", "the job's fixed cost: memoised vs Beam's own DoFn-spec lookups",
              _py("bench_graph_build.py", *_json("graph_build"))),
    Benchmark("pass2_source", "corpus job", "pass 2's articles: extract again vs read pass 1's compressed cache",
              _py("bench_pass2_source.py", *_json("pass2_source"))),
    Benchmark("tokenizer", "corpus job", "an own-language tokenizer (wikiedm train-tokenizer) vs GPT-2's: tokens per "
              "character, a tiny-config step", _py("bench_tokenizer.py", "--output", "benchmarks/results/tokenizer.json")),
    Benchmark("labels", "corpus job", "missing-mention labels: links hidden from the shared dumps, recovered",
              _py("bench_labels.py", *_json("labels"))),
    # scale
    Benchmark("scale", "scale", "the corpus job vs wikiextractor on the excerpt replicated (x2, x8, x64): RAM per byte of "
              "XML, CPU per page, 2 workers vs 1, the job without its labeller, shuffle volume per page, and the "
              "estimates drawn from them",
              _py("bench_scale.py", "--sizes", "2,8,64", "--repeat_large", "2", "--job", "new job=.:1,2",
                  "--job", "new job, no labeller=.:1:--labels.hyperlinks_only true", *_json("scale"),
                  "--plot", "benchmarks/results/scale.png", "--", "--read_range_mb", "1"),
              helpers=("synth_dump.py",), skip="x64 takes an hour or more and several GB: run by hand (docs/scale.md)"),
    Benchmark("versions", "scale", "the whole corpus job of two code versions run at the same time, one per core: "
              "CPU new / base per pair, and equal Parquet outputs",
              _py("bench_versions.py", "--base", "HEAD~1", "--sizes", "8,64", *_json("versions")),
              helpers=("bench_scale.py", "synth_dump.py"),
              skip="compares two commits: run by hand for a change that claims a speed-up (--base: the commit before)"),
    # the linker
    Benchmark("linker_quality", "linker", "accuracy@1 of the linker vs the alias prior on every shared dump",
              _py("bench_linker_quality.py", *_json("linker_quality"))),
    Benchmark("linker", "linker", "mentions linked per second, exact vs HNSW search",
              _py("bench_linker.py", "--sizes", "tiny,base", *_json("linker"))),
    Benchmark("linker_memory", "linker", "a linking worker's memory vs the alias table's size",
              _py("bench_linker_memory.py", *_json("linker_memory"))),
    # the trainer
    Benchmark("trainer", "trainer", "an EDMem step vs the same BART without memory; blocked EL and chunked LM losses",
              _py("bench_trainer.py", "--variants", "bart,edmem,edmem_rows", "--out", "benchmarks/results/trainer.json")),
    Benchmark("trainer_lm_loss_cpu", "trainer", "an EDMem step with the chunked vs the dense LM loss",
              _py("bench_trainer.py", "--variants", "bart,edmem,edmem_dense_lm", "--repeats", "7", "--skip", "el",
                  "--skip", "lm", "--out", "benchmarks/results/trainer_lm_loss_cpu.json")),
    Benchmark("memory", "trainer", "the entity table split by rows vs replicated, under ZeRO-2 and ZeRO-3",
              _py("bench_memory.py", *_json("memory"))),
    Benchmark("data", "trainer", "the trainer's data path: the vectorised reader vs the reference one",
              _py("bench_data.py", "--corpus", DATA_CORPUS, *_json("data")),
              prepare=("python", "-m", "wikiedm.cli", "corpus", "--input", ENWIKI206, "--output", DATA_CORPUS,
                       "--runner", "Direct")),
    Benchmark("entity_kernels_sm90", "trainer", "what the entity-softmax kernels compile to for sm_90 (no GPU needed)",
              _py("entity_kernels_sm90.py", *_json("entity_kernels_sm90"))),
    # the ablation
    Benchmark("learning", "ablation", "the positive control: EDMem and BART on the ukwiki excerpt with its own "
              "tokenizer, word metrics against the unigram floor and the EL baselines, and the 2x2 ablation at its budget",
              _py("bench_learning.py"), helpers=("grid_runs.py",)),
    Benchmark("learning_cpu-lr1e-3", "ablation", "the control's two arms again at lr 1e-3 with 10% warm-up: a follow-up "
              "defined after the first control run was seen (its EDMem runs were unstable at lr 3e-3)",
              _py("bench_learning.py", "--grid", "cpu-lr1e-3", "--arms", "control"), helpers=("grid_runs.py",)),
    Benchmark("ablation", "ablation", "BART vs EDMem, with and without the missing-mention labels, `small` config",
              _py("bench_ablation.py", "--config", "small"), helpers=("grid_runs.py",)),
    Benchmark("ablation_small-long", "ablation", "the same grid, `small-long` config (3x the steps)",
              _py("bench_ablation.py", "--config", "small-long"), helpers=("grid_runs.py",)),
    # GPU only
    Benchmark("gpu_check", "GPU", "MFU at 1M entities beside BART, the memory read (kernels vs FlexAttention vs "
              "blocked), the GPU tests and the data path on a GPU", ("bash", "benchmarks/gpu_check.sh"),
              helpers=("gpu_check_report.py", "bench_entity_softmax.py", "bench_memory_read.py", "step_timing.py",
                       "synth_corpus.py", "bench_trainer.py", "bench_data.py"), skip="needs a GPU"),
]

# Scripts of benchmarks/ that write no results file of the suite: what each is for.
TOOLS = {
    "make_docs.py": "writes docs/benchmarks.md from the results files",
    "suite.py": "this table, and the runner of the benchmarks (`make bench`)",
    "bench_passage_text.py": "what the passages' text column costs on disk, and one passage shown (docs/corpus.md)",
    "bench_extract_replay.py": "extract_article of two checkouts replayed on the same pages (docs/development.md)",
}


def by_name() -> dict[str, Benchmark]:
    return {b.name: b for b in SUITE}


def _argv(command: tuple[str, ...]) -> list[str]:
    return [sys.executable if arg == "python" else arg for arg in command]


def run(benchmarks: list[Benchmark]) -> int:
    failed = []
    for bench in benchmarks:
        if bench.prepare and not (REPO / bench.prepare[bench.prepare.index("--output") + 1]).exists():
            print(f"[suite] {bench.name}: preparing: {shlex.join(bench.prepare)}", flush=True)
            if subprocess.run(_argv(bench.prepare), cwd=REPO).returncode != 0:
                failed.append(bench.name)
                continue
        print(f"[suite] {bench.name}: {shlex.join(bench.command)}", flush=True)
        start = time.monotonic()
        if subprocess.run(_argv(bench.command), cwd=REPO).returncode != 0:
            failed.append(bench.name)
        print(f"[suite] {bench.name}: {time.monotonic() - start:.0f} s", flush=True)
    if failed:
        print(f"[suite] failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help="results-file stems to run (default: all but the skipped ones)")
    parser.add_argument("--list", action="store_true", help="print the table and run nothing")
    args = parser.parse_args(argv)
    if args.list:
        for b in SUITE:
            print(f"{b.group:<11} {b.name + '.json':<32} {shlex.join(b.command)}"
                  + (f"   [not in make bench: {b.skip}]" if b.skip else ""))
        return 0
    unknown = [name for name in args.names if name not in by_name()]
    if unknown:
        parser.error(f"no benchmark {', '.join(unknown)}; --list shows them")
    chosen = [by_name()[name] for name in args.names] if args.names else [b for b in SUITE if not b.skip]
    return run(chosen)


if __name__ == "__main__":
    sys.exit(main())
