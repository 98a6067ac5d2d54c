"""Positive control: does pre-training learn beyond token frequencies? EDMem and its BART twin on the ukwiki excerpt.

    python benchmarks/bench_learning.py                    # corpora, the control (+ the ablation arms), evaluation, report
    python benchmarks/bench_learning.py --arms control     # the control only: EDMem and BART on the labelled corpus
    python benchmarks/bench_learning.py --report           # learning.json -> learning.png and docs/ablation.md only
    python benchmarks/bench_learning.py --grid gpu         # the GPU grid (one H100, <= 10 minutes of training)
    python benchmarks/bench_learning.py --grid gpu --tiny  # its plumbing on CPU, with a tiny model and 2 steps

Protocol (fixed before the first control run; the figures it produced were not seen when it was written):

Data. The shared ukwiki excerpt (../shared/wikidumps/ukwiki-2023-first100k-lines-truncated.xml.xz, ~530 pages).
The corpus job with ``--keep_red_links true --num_shards 1 --validation_fraction 0.05`` makes a GPT-2-tokenized
hyperlinks-only corpus; ``wikiedm train-tokenizer --vocab_size 4096`` learns a byte-level BPE from its train
split's text; the corpus job runs again with that tokenizer, twice: ``hyperlinks`` (``--labels.hyperlinks_only
true``) and ``labels`` (hyperlinks + the EDMem 3.3.1 labels). Same pages, split and entity vocabulary.

Model and training (config ``cpu``): d_model 128, 4 heads, ffn 512, 1 layer below and 1 above the memory read
in each stack, entity_dim 64, dropout 0, max_seq_len 160; AdamW lr 3e-3, 5% warm-up then linear decay, weight
decay 0.01, global-norm clipping 1.0, lambda_EL 1 (the mean of the three reads); P_rtm 0.3, P_ssm 0.5; batch 16,
400 steps (6,400 sequences, ~half an epoch of the train split), seed 1; one rank on DeepSpeed (ZeRO-2, fp32,
CPU), OMP_NUM_THREADS=1 per run, the arms in parallel. A validation pass (4 micro-batches, the training
masking) every 50 steps and a checkpoint every 100 (all kept: held-out curves; the final one stays in the run
folder, out/learning/runs/GRID/ARM, not in git).

Arms. ``control`` = {EDMem, BART} on ``labels`` (BART = ``--model.memory none``, the same network without the
memory, LM loss only). ``ablation`` adds {EDMem, BART} on ``hyperlinks``: the 2 x 2 grid at the control's
budget, one seed (what this machine allows), reported whatever comes out.

Evaluation (``trainer.evaluate``): every validation passage of the ``hyperlinks`` corpus, gold = the editors'
hyperlinks, each salient-span masked, nothing else masked; word metrics (special ids out of the softmax and
the argmax); baselines from the training split (unigram floor, constant prediction, most-frequent entity, alias
prior); EL acc@1 by the target's training link count (0, 1-4, 5-19, >= 20); 95% bootstrap intervals (1000
resamples) over mentions (mention and EL metrics) or passages (other-token metrics), paired against the
baseline, and EDMem against BART on the same units.

Pass criteria (issue 30), for EDMem of the control: (1) its held-out other-token loss is >= 0.5 nats below the
unigram floor; (2) its EL acc@1 on frequent targets (>= 20 training links) is above the most-frequent-entity
baseline with the paired interval of the difference excluding 0. Minimum effects for the comparisons between
arms, declared here: 0.05 nats of loss, 0.02 of accuracy (trainer.eval_stats.MIN_EFFECT): a difference smaller
than that, or whose interval includes 0, is reported as not shown at this scale.

Outputs: benchmarks/results/learning.json (grid ``cpu``; ``--grid gpu``: learning_gpu.json), learning.png
(learning curves), the "Positive control" section of docs/ablation.md (bench_ablation.write_doc).
"""
from __future__ import annotations

import argparse
import concurrent.futures
import datetime as dt
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

WIKIDUMPS = Path(os.environ.get("WIKIDUMPS_DIR", REPO / ".." / "shared" / "wikidumps")).resolve()
DUMP = "ukwiki-2023-first100k-lines-truncated.xml.xz"
OUT = REPO / "out" / "learning"
RESULTS = REPO / "benchmarks" / "results"
VOCAB_SIZE = 4096
CORPUS_JOB_ARGS = ("--keep_red_links", "true", "--num_shards", "1", "--validation_fraction", "0.05")
CORPORA = {"hyperlinks": ("--labels.hyperlinks_only", "true"), "labels": ()}
MODELS = {"edmem": "entity", "bart": "none"}
ARMS = {"control": (("labels", "edmem"), ("labels", "bart")),
        "ablation": (("labels", "edmem"), ("labels", "bart"), ("hyperlinks", "edmem"), ("hyperlinks", "bart"))}
SEED = 1
GRIDS = {
    "cpu": {"steps": 400, "threads": 1, "eval_passages": 0, "curve_passages": 128, "save_every": 100,
            "overrides": ("--model.d_model", "128", "--model.attention_heads", "4", "--model.ffn_dim", "512",
                          "--model.lower_layers", "1", "--model.upper_layers", "1", "--model.entity_dim", "64",
                          "--model.max_positions", "160", "--model.dropout", "0", "--model.entity_block_size", "16384",
                          "--data.max_seq_len", "160", "--data.validation_batches", "4", "--data.num_workers", "0",
                          "--optim.lr", "3e-3", "--optim.warmup_fraction", "0.05", "--optim.grad_clip", "1.0",
                          "--optim.el_weight", "1.0", "--train.global_batch_size", "16",
                          "--train.micro_batch_size", "16", "--train.bf16", "false", "--train.log_every", "10",
                          "--train.eval_every", "50", "--train.keep_checkpoints", "0", "--train.report_to", "none")},
    # One H100, <= 10 minutes of training per arm (an estimate, not measured: no GPU in this session).
    "gpu": {"steps": 2000, "threads": 0, "eval_passages": 0, "curve_passages": 0, "save_every": 500,
            "overrides": ("--model.d_model", "512", "--model.attention_heads", "8", "--model.ffn_dim", "2048",
                          "--model.lower_layers", "2", "--model.upper_layers", "4", "--model.entity_dim", "128",
                          "--model.max_positions", "160", "--model.dropout", "0.1",
                          "--data.max_seq_len", "160", "--data.validation_batches", "4",
                          "--optim.lr", "1e-3", "--optim.warmup_fraction", "0.05", "--optim.grad_clip", "1.0",
                          "--optim.el_weight", "1.0", "--train.global_batch_size", "256",
                          "--train.micro_batch_size", "auto", "--train.log_every", "20",
                          "--train.eval_every", "250", "--train.keep_checkpoints", "0", "--train.report_to", "none")},
}
# --tiny: the GPU grid's plumbing on CPU (every stage runs; nothing is learnt)
TINY = ("--model.d_model", "32", "--model.attention_heads", "2", "--model.ffn_dim", "64", "--model.lower_layers", "1",
        "--model.upper_layers", "1", "--model.entity_dim", "16", "--train.global_batch_size", "4",
        "--train.micro_batch_size", "4", "--train.bf16", "false", "--train.eval_every", "1",
        "--data.validation_batches", "1", "--data.num_workers", "0")


def log(msg: str) -> None:
    line = f"[{dt.datetime.now(dt.timezone.utc):%H:%M:%S}] {msg}"
    print(line, flush=True)
    OUT.mkdir(parents=True, exist_ok=True)
    with open(OUT / "progress.log", "a") as f:
        f.write(line + "\n")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def train_args(grid: str, corpus_dir: Path, run_dir: Path, model: str, steps: int, tiny: bool = False) -> list[str]:
    """The `wikiedm pretrain` command line of one arm (trainer.pretrain, one rank)."""
    cfg = GRIDS[grid]
    return ["--config", "configs/pretrain/tiny.yaml", "--data.path", str(corpus_dir), "--train.output_dir",
            str(run_dir), "--train.max_steps", str(steps), "--train.seed", str(SEED), "--model.memory", MODELS[model],
            "--train.resume", "none", "--train.save_every", str(cfg["save_every"] if not tiny else 1),
            *cfg["overrides"], *(TINY if tiny else ())]
