"""A tokenizer of the corpus's own language against GPT-2's: tokens per character, and a tiny-config step.

    python benchmarks/bench_tokenizer.py                     # ukwiki excerpt, 8000 tokens -> results/tokenizer.json
    python benchmarks/bench_tokenizer.py --vocab_size 4000 --rounds 5 --steps 12

On the Ukrainian excerpt of ../shared/wikidumps: the corpus job with GPT-2's byte-level BPE (the
default), ``wikiedm train-tokenizer`` on that corpus's train passages, and the corpus job again with
the tokenizer it wrote (same pages, mentions and split). Then:

- tokens per character of held-out text (the validation passages' text, which the tokenizer did not
  learn from), with each tokenizer; and the passages (128-token windows) each corpus has;
- a tiny-config training step (configs/pretrain/tiny.yaml, one rank, CPU, OMP_NUM_THREADS=1) on each
  corpus: ``wikiedm pretrain`` runs of ``--steps`` steps, the two corpora alternating, ``--rounds``
  times; a run's step time is the median of its steps after the first two; the ratio is the median of
  the rounds' ratios (pairs run back to back, so a shared machine's load falls on both alike).
  A step holds the same number of windows of the same token length with either vocabulary, so it covers
  more text with the own one: characters of text per second = characters per window / step time.

Figures are wall-clock on whatever machine runs this: the JSON records its CPU count and load.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
WIKIDUMPS = (REPO / ".." / "shared" / "wikidumps").resolve()
DUMP = "ukwiki-2023-first100k-lines-truncated.xml.xz"
JOB_ARGS = ("--validation_fraction", "0.1")


def run(cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, **kwargs)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}):\n{(proc.stdout + proc.stderr)[-4000:]}")
    return proc


def corpus_job(dump: Path, out: Path, *args: str) -> None:
    run([sys.executable, "-m", "pipelines.wiki_mentions", "--input", str(dump), "--output", str(out), *JOB_ARGS, *args])


def passages(corpus: Path, split: str = "") -> list[dict]:
    import pyarrow.parquet as pq

    return [r for p in sorted((corpus / "passages").glob(f"{split}*.parquet"))
            for r in pq.read_table(p, columns=["text", "token_ids"]).to_pylist()]


def step_times(corpus: Path, run_dir: Path, steps: int) -> list[float]:
    """The wall time of each step of a tiny-config run after the first two."""
    run([sys.executable, "-m", "trainer.pretrain", "--config", "configs/pretrain/tiny.yaml", "--corpus", str(corpus),
         "--output", str(run_dir), "--max_steps", str(steps), "--train.save_every", "0", "--train.eval_every", "0"],
        timeout=1800)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r["step_time_s"] for r in rows if r.get("split") == "train" and r["step"] > 2]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vocab_size", type=int, default=8000, help="the own tokenizer's vocabulary (default: 8000)")
    ap.add_argument("--rounds", type=int, default=3, help="pairs of training runs (default: 3)")
    ap.add_argument("--steps", type=int, default=10, help="steps per training run (default: 10)")
    ap.add_argument("--output", default=str(REPO / "benchmarks" / "results" / "tokenizer.json"),
                    help="results JSON (default: benchmarks/results/tokenizer.json)")
    args = ap.parse_args()
    from trainer.data import load_tokenizer
    from wikiedm.tokenizer import load_encoder

    dump = WIKIDUMPS / DUMP
    load_at_start, started = os.getloadavg(), time.time()
    with tempfile.TemporaryDirectory(prefix="bench_tokenizer-") as tmp:
        work = Path(tmp)
        gpt2_corpus, tokenizer, own_corpus = work / "gpt2", work / "tokenizer", work / "own"
        corpus_job(dump, gpt2_corpus)
        run([sys.executable, "-m", "wikiedm.cli", "train-tokenizer", "--corpus", str(gpt2_corpus), "--output",
             str(tokenizer), "--vocab_size", str(args.vocab_size)])
        corpus_job(dump, own_corpus, "--tokenizer", str(tokenizer))

        held_out = "\n".join(r["text"] for r in passages(gpt2_corpus, "validation"))
        per_char = {name: len(load_encoder(enc).encode_with_offsets(held_out)[0]) / len(held_out)
                    for name, enc in (("gpt2", None), ("own", str(tokenizer)))}
        corpora = {"gpt2": gpt2_corpus, "own": own_corpus}
        model_vocab = {name: load_tokenizer(corpus / "tokenizer")[1].vocab_size for name, corpus in corpora.items()}
        windows = {}
        for name, corpus in corpora.items():
            rows = passages(corpus)
            windows[name] = {"passages": len(rows),
                             "characters_per_passage": statistics.mean(len(r["text"]) for r in rows),
                             "tokens_per_passage": statistics.mean(len(r["token_ids"]) for r in rows)}

        runs: dict[str, list[float]] = {"gpt2": [], "own": []}
        for i in range(args.rounds):
            order = ("gpt2", "own") if i % 2 == 0 else ("own", "gpt2")
            for name in order:
                runs[name].append(statistics.median(step_times(corpora[name], work / f"run-{name}-{i}", args.steps)))
    ratios = [g / o for g, o in zip(runs["gpt2"], runs["own"])]
    step = {name: statistics.median(times) for name, times in runs.items()}
    chars_per_s = {name: windows[name]["characters_per_passage"] * 16 / step[name] for name in runs}  # tiny: 16 per step
    result = {
        "what": "an own-language byte-level BPE (wikiedm train-tokenizer) vs GPT-2's on the ukwiki excerpt",
        "dump": DUMP,
        "model_vocab_size": model_vocab,  # the LM head's width, [Es]/[Ee] and the other specials included
        "tokens_per_character_held_out": {k: round(v, 4) for k, v in per_char.items()},
        "held_out_characters": len(held_out),
        "gpt2_tokens_over_own": round(per_char["gpt2"] / per_char["own"], 3),
        "corpus": {k: {kk: round(vv, 1) for kk, vv in v.items()} for k, v in windows.items()},
        "tiny_step": {
            "config": "configs/pretrain/tiny.yaml, 1 rank, CPU, OMP_NUM_THREADS=1, 16 windows of <= 160 tokens per step",
            "rounds": args.rounds, "steps_per_run": args.steps, "median_step_s_per_run": runs,
            "median_step_s": {k: round(v, 4) for k, v in step.items()},
            "gpt2_step_over_own_median_of_rounds": round(statistics.median(ratios), 3),
            "characters_per_s": {k: round(v, 1) for k, v in chars_per_s.items()},
            "own_characters_per_s_over_gpt2": round(chars_per_s["own"] / chars_per_s["gpt2"], 3),
        },
        "machine": {"cpus": os.cpu_count(), "load_average_at_start": round(load_at_start[0], 2),
                    "load_averages_1_5_15_min": {"start": load_at_start, "end": os.getloadavg()},
                    "wall_s": round(time.time() - started, 1),
                    "note": "a machine shared with other jobs: step times are wall-clock; compare the ratios"},
    }
    Path(args.output).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
